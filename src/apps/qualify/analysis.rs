//! Checks upstream computes rather than measures: saturation margin of the correlator's
//! accumulators and the narrowband centre-frequency resolution, for this run's
//! configuration and MeerKAT's bands.

use serde_json::json;

use super::harness::Harness;
use super::launch::{NB_CENTRE_FRACTION, NB_DECIMATION};
use super::result::{Check, CheckResult, Plot};
use crate::compute::fengine::MixerFrequency;

/// Standard normal quantile of the upper tail probability 1e-4.
const Z_1E4: f64 = 3.719016485455709;

/// Upper 1e-4 quantile of χ²(ν) (Wilson–Hilferty; relative error far below 1e-3 for the
/// ν ≥ 1000 used here).
pub fn chi2_upper_1e4(nu: f64) -> f64 {
    let a = 2.0 / (9.0 * nu);
    nu * (1.0 - a + Z_1E4 * a.sqrt()).powi(3)
}

/// σ (per real component, F-engine output levels) at which an auto-correlation of `k`
/// spectra reaches 2^31 with probability 1e-4: auto/σ² ~ χ²(2k).
pub fn saturation_sigma(k: u64) -> f64 {
    (2f64.powi(31) / chi2_upper_1e4(2.0 * k as f64)).sqrt()
}

fn test_saturation(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[0];
    // This run's accumulation, and MeerKAT L-band 0.5 s dumps at 1k–32k channels.
    let mut cases = vec![("this run".to_string(), h.shape(0).acc_len())];
    for ch in [1024u64, 4096, 8192, 32768] {
        let k = (0.5 * 1712e6 / (2 * ch) as f64).round() as u64;
        cases.push((format!("L-band {ch} ch, 0.5 s"), k));
    }
    let mut worst = f64::INFINITY;
    let mut rows = Vec::new();
    let mut pts = Vec::new();
    for (name, k) in &cases {
        let s = saturation_sigma(*k);
        worst = worst.min(s);
        rows.push(json!({"case": name, "spectra": k, "sigma": s}));
        pts.push(((*k as f64).log10(), s));
    }
    let passed = worst > 3.0;
    let msg = if passed {
        String::new()
    } else {
        format!("σ {worst:.2} is not above 3")
    };
    Ok(CheckResult::new(c, worst, "σ (levels)", passed, msg)
        .details(json!({"cases": rows}))
        .plot(
            Plot::line(
                "σ reaching 2^31 with P = 1e-4",
                "log10(spectra per dump)",
                "σ (levels)",
                "σ",
                pts,
            )
            .hline(3.0, "3"),
        ))
}

/// |realised − requested| narrowband centre (Hz) for `centre` at `adc`: the mixer's
/// 64-bit phase step, plus the f64 spacing at adc/2.
pub fn centre_error(centre: f64, adc: f64) -> anyhow::Result<f64> {
    let m = MixerFrequency::from_hz(centre, adc)?;
    // The step is −centre/adc cycles per sample (mod 1).
    let cycles = (m.0.wrapping_neg() as f64) / 2f64.powi(64);
    let realised = cycles * adc;
    let half = adc / 2.0;
    let spacing = f64::from_bits(half.to_bits() + 1) - half;
    Ok((realised - centre.rem_euclid(adc)).abs() + spacing)
}

fn test_narrowband_centre_frequency(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[1];
    let mut cases = vec![("this run".to_string(), h.fs)];
    cases.push(("UHF".into(), 1088e6));
    cases.push(("L".into(), 1712e6));
    let mut worst: f64 = 0.0;
    let mut rows = Vec::new();
    for (name, adc) in &cases {
        // katgpucbf's centre, and one near adc/2 where f64 is coarsest.
        for centre in [
            adc * NB_CENTRE_FRACTION,
            adc / 2.0 - adc / (16 * NB_DECIMATION) as f64 - 0.3,
        ] {
            let e = centre_error(centre, *adc)?;
            worst = worst.max(e);
            rows.push(json!({"band": name, "adc_hz": adc, "centre_hz": centre, "error_hz": e}));
        }
    }
    let passed = worst < 100.0;
    let msg = if passed {
        String::new()
    } else {
        format!("centre frequency error {worst} Hz")
    };
    Ok(CheckResult::new(c, worst, "Hz", passed, msg).details(json!({"cases": rows})))
}

/// The analysis checks.
pub fn checks() -> Vec<Check> {
    vec![
        Check {
            name: "test_saturation",
            requirement: "CBF-REQ-0103",
            text: "Accumulators saturate rarely (≤ 0.01 %) for inputs up to 3σ.",
            method: "Analysis: σ for which P(auto ≥ 2^31) = 1e-4 with auto/σ² ~ χ²(2k), k spectra per dump (this run, and L-band 0.5 s dumps).",
            threshold: "σ > 3",
            quick: true,
            narrowband: false,
            run: test_saturation,
        },
        Check {
            name: "test_narrowband_centre_frequency",
            requirement: "CBF-REQ-0044",
            text: "The narrowband centre frequency is set to within 100 Hz.",
            method: "Analysis: realised mixer frequency (64-bit phase step) vs requested, plus f64 spacing at adc/2, for this run's rate, UHF and L.",
            threshold: "< 100 Hz",
            quick: true,
            narrowband: false,
            run: test_narrowband_centre_frequency,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The χ² quantile matches the normal limit; L-band 0.5 s dumps at 4096 channels
    /// give σ ≈ 100 (auto ≈ 2kσ²).
    #[test]
    fn saturation_sigma_is_about_the_mean_limit() {
        let nu = 1e6;
        let q = chi2_upper_1e4(nu);
        let normal = nu + Z_1E4 * (2.0 * nu).sqrt();
        assert!((q / normal - 1.0).abs() < 1e-4, "{q} {normal}");
        let s = saturation_sigma(104_492);
        assert!((s - (2f64.powi(31) / (2.0 * 104_492.0)).sqrt()).abs() / s < 0.01);
        assert!(centre_error(1712e6 * NB_CENTRE_FRACTION, 1712e6).unwrap() < 1.0);
    }
}
