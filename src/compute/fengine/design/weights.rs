//! PFB FIR weights (dsp.md §3.1, katgpucbf `generate_pfb_weights`).

use crate::compute::fengine::FError;

/// Window applied to the sinc prototype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// sin²(π·i/(L−1)).
    Hann,
    /// All ones.
    Rect,
}

/// `w[i] = A · W[i] · sinc(w_cutoff · ((i + ½)/step − taps/2))`, i = 0..step·taps,
/// with A such that Σw² = 1. Computed in f64, returned as f32. Not reversed.
pub fn pfb_weights(
    step: usize,
    taps: usize,
    w_cutoff: f64,
    window: Window,
) -> Result<Vec<f32>, FError> {
    if step == 0 {
        return Err(FError::BadParameter {
            what: "step",
            why: "must be positive".into(),
        });
    }
    if taps == 0 {
        return Err(FError::BadTaps(taps));
    }
    if !w_cutoff.is_finite() {
        return Err(FError::NotFinite {
            what: "w_cutoff",
            value: w_cutoff,
        });
    }
    let l = step * taps;
    let w: Vec<f64> = (0..l)
        .map(|i| {
            let win = match window {
                Window::Rect => 1.0,
                Window::Hann if l == 1 => 1.0,
                Window::Hann => {
                    let s = (std::f64::consts::PI * i as f64 / (l - 1) as f64).sin();
                    s * s
                }
            };
            let x = w_cutoff * ((i as f64 + 0.5) / step as f64 - taps as f64 / 2.0);
            win * sinc(x)
        })
        .collect();
    let norm: f64 = w.iter().map(|v| v * v).sum::<f64>().sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return Err(FError::BadParameter {
            what: "pfb weights",
            why: "all weights are zero".into(),
        });
    }
    Ok(w.iter().map(|v| (v / norm) as f32).collect())
}

/// numpy's normalised sinc: sin(πx)/(πx), 1 at 0.
pub(crate) fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let px = std::f64::consts::PI * x;
        px.sin() / px
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_energy_and_symmetric() {
        let w = pfb_weights(64, 16, 1.0, Window::Hann).unwrap();
        assert_eq!(w.len(), 1024);
        let e: f64 = w.iter().map(|&v| (v as f64).powi(2)).sum();
        assert!((e - 1.0).abs() < 1e-6, "energy {e}");
        // The prototype is symmetric about the centre: w[i] = w[L-1-i].
        for i in 0..w.len() {
            assert!((w[i] - w[w.len() - 1 - i]).abs() < 1e-7);
        }
        // Peak in the middle, Hann tapers to zero at the ends.
        assert!(w[511] > 0.9 * w.iter().cloned().fold(0.0, f32::max));
        assert!(w[0].abs() < 1e-6);
    }

    #[test]
    fn matches_formula_at_a_point() {
        let (step, taps) = (8, 4);
        let w = pfb_weights(step, taps, 0.9, Window::Hann).unwrap();
        let l = step * taps;
        let raw = |i: usize| {
            let s = (std::f64::consts::PI * i as f64 / (l - 1) as f64).sin();
            let x = 0.9 * ((i as f64 + 0.5) / step as f64 - taps as f64 / 2.0);
            s * s * (std::f64::consts::PI * x).sin() / (std::f64::consts::PI * x)
        };
        let norm: f64 = (0..l).map(|i| raw(i).powi(2)).sum::<f64>().sqrt();
        for i in [1, 7, 13, 20] {
            assert!(((raw(i) / norm) as f32 - w[i]).abs() < 1e-7);
        }
    }

    #[test]
    fn rect_one_tap_zero_cutoff_is_plain_dft() {
        let w = pfb_weights(16, 1, 0.0, Window::Rect).unwrap();
        for &v in &w {
            assert!((v - 0.25).abs() < 1e-7);
        }
    }

    #[test]
    fn bad_parameters() {
        assert!(pfb_weights(0, 16, 1.0, Window::Hann).is_err());
        assert_eq!(
            pfb_weights(8, 0, 1.0, Window::Hann),
            Err(FError::BadTaps(0))
        );
        assert!(pfb_weights(8, 4, f64::NAN, Window::Hann).is_err());
    }
}
