//! Narrowband digital down-conversion (dsp.md §8): mix by e^{2πj·f·t} with
//! f = −centre_frequency/adc_rate, low-pass FIR, keep every S-th output:
//!
//!   y[j] = e^{2πj·f·(t0 + S·j)} · Σ_k x[S·j + k]·z_k,   z_k = h_k·e^{2πj·f·k},
//!
//! where t0 is the ADC timestamp of x[0]. The mixer phase is kept in 64-bit fixed point
//! (cycles × 2^64; wrapping drops whole cycles), so it is exact for any timestamp up to the
//! rounding of f itself, which is exact for integral frequencies and rates.

use crate::compute::fengine::design::remez::{remez, Band};
use crate::compute::fengine::{FError, Narrowband, NarrowbandMode};
use num_complex::Complex32;
use rayon::prelude::*;
use std::f64::consts::PI;

/// Mixer frequency in cycles per ADC sample, as a 64-bit fixed-point fraction of a cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MixerFrequency(pub u64);

impl MixerFrequency {
    /// f = −centre/adc_rate. Exact (round(f·2^64) mod 2^64) when both are whole numbers of
    /// Hz below 2^63; otherwise via f64 (53-bit precision).
    pub fn from_hz(centre: f64, adc_rate: f64) -> Result<Self, FError> {
        if !centre.is_finite() || !adc_rate.is_finite() || adc_rate <= 0.0 {
            return Err(FError::BadParameter {
                what: "mixer frequency",
                why: format!("centre {centre} Hz, adc_rate {adc_rate} Hz"),
            });
        }
        let integral = |v: f64| v.fract() == 0.0 && v.abs() < 9.2e18;
        if integral(centre) && integral(adc_rate) {
            let den = adc_rate as u64 as u128;
            let num = (centre as i64).rem_euclid(adc_rate as i64) as u128;
            // round(num·2^64/den), then negate (f = −centre/adc).
            let pos = ((num << 64) + den / 2) / den;
            return Ok(MixerFrequency((pos as u64).wrapping_neg()));
        }
        let f = -centre / adc_rate;
        let frac = f - f.floor();
        Ok(MixerFrequency((frac * 2f64.powi(64)).round() as u128 as u64))
    }

    /// Phase (fixed-point cycles) of ADC timestamp `t`.
    #[inline]
    pub fn phase(&self, t: u64) -> u64 {
        t.wrapping_mul(self.0)
    }

    /// e^{2πj·phase}, with the fixed-point phase mapped to [−π, π).
    #[inline]
    pub fn phasor(phase: u64) -> (f64, f64) {
        let a = (phase as i64) as f64 * (2.0 * PI / 2f64.powi(64));
        let (s, c) = a.sin_cos();
        (c, s)
    }
}

fn scale(h: Vec<f64>, s: usize) -> Vec<f32> {
    let g = (s as f64).sqrt();
    h.into_iter().map(|v| (v * g) as f32).collect()
}

/// Discard-mode DDC filter: remez with fs = S, pass band [0, 0.25] (weight `weight_pass`),
/// stop bands [x, min(x + 0.5, S/2)] for x = 0.75, 1.75, … < S/2; scaled by √S.
pub fn ddc_weights_discard(s: usize, taps: usize, weight_pass: f64) -> Result<Vec<f32>, FError> {
    if s < 2 {
        return Err(FError::BadParameter {
            what: "subsampling",
            why: format!("{s} < 2"),
        });
    }
    let half = s as f64 / 2.0;
    let mut bands = vec![Band {
        lo: 0.0,
        hi: 0.25,
        desired: 1.0,
        weight: weight_pass,
    }];
    let mut x = 0.75;
    while x < half {
        bands.push(Band {
            lo: x,
            hi: (x + 0.5).min(half),
            desired: 0.0,
            weight: 1.0,
        });
        x += 1.0;
    }
    Ok(scale(remez(taps, &bands, s as f64, 1000)?, s))
}

/// No-discard (VLBI) DDC filter: bands [0, p/2] (1, `weight_pass`) and [1 − p/2, S/2]
/// (0, 1) with p = pass_bandwidth / (0.5·adc_rate/D); scaled by √S.
pub fn ddc_weights_no_discard(
    s: usize,
    taps: usize,
    weight_pass: f64,
    p: f64,
) -> Result<Vec<f32>, FError> {
    if !(p > 0.0 && p < 1.0) {
        return Err(FError::BadParameter {
            what: "pass_bandwidth",
            why: format!("fraction {p} of the output bandwidth must be in (0, 1)"),
        });
    }
    let bands = [
        Band {
            lo: 0.0,
            hi: p / 2.0,
            desired: 1.0,
            weight: weight_pass,
        },
        Band {
            lo: 1.0 - p / 2.0,
            hi: s as f64 / 2.0,
            desired: 0.0,
            weight: 1.0,
        },
    ];
    Ok(scale(remez(taps, &bands, s as f64, 1000)?, s))
}

/// The DDC filter for a narrowband configuration (subsampling `s`, `taps` taps).
pub fn ddc_weights(nb: &Narrowband, s: usize, taps: usize) -> Result<Vec<f32>, FError> {
    match nb.mode {
        NarrowbandMode::Discard => ddc_weights_discard(s, taps, nb.weight_pass),
        NarrowbandMode::NoDiscard { pass_bandwidth } => {
            let p = pass_bandwidth / (0.5 * nb.adc_rate / nb.decimation as f64);
            ddc_weights_no_discard(s, taps, nb.weight_pass, p)
        }
    }
}

/// Prepared DDC: premixed weights (split re/im) and the mixer.
#[derive(Debug, Clone)]
pub(crate) struct Ddc {
    pub subsampling: usize,
    zr: Vec<f32>,
    zi: Vec<f32>,
    pub mixer: MixerFrequency,
}

const LANES: usize = 16;

impl Ddc {
    pub(crate) fn new(h: &[f32], subsampling: usize, mixer: MixerFrequency) -> Self {
        let (zr, zi) = h
            .iter()
            .enumerate()
            .map(|(k, &hk)| {
                let (c, s) = MixerFrequency::phasor(mixer.phase(k as u64));
                ((hk as f64 * c) as f32, (hk as f64 * s) as f32)
            })
            .unzip();
        Ddc {
            subsampling,
            zr,
            zi,
            mixer,
        }
    }

    pub(crate) fn taps(&self) -> usize {
        self.zr.len()
    }

    /// The premixed weights z_k = h_k·e^{2πj·f·k} as (re, im) (for the GPU DDC kernel).
    pub(crate) fn premixed(&self) -> (&[f32], &[f32]) {
        (&self.zr, &self.zi)
    }

    /// Computes `out.len()` outputs from `x` whose first sample has timestamp `t0`.
    /// `x` must hold (out.len() − 1)·S + taps samples.
    pub(crate) fn run(&self, x: &[f32], t0: u64, out: &mut [Complex32]) {
        out.par_chunks_mut(1024).enumerate().for_each(|(ci, o)| {
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                // SAFETY: the CPU supports AVX2 and FMA (just checked).
                return unsafe { self.run_chunk_avx2(x, t0, ci * 1024, o) };
            }
            self.run_chunk::<false>(x, t0, ci * 1024, o)
        });
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_chunk_avx2(&self, x: &[f32], t0: u64, first: usize, o: &mut [Complex32]) {
        self.run_chunk::<true>(x, t0, first, o)
    }

    #[inline(always)]
    fn run_chunk<const FMA: bool>(&self, x: &[f32], t0: u64, first: usize, o: &mut [Complex32]) {
        let s = self.subsampling;
        let taps = self.taps();
        for (k, y) in o.iter_mut().enumerate() {
            let j = first + k;
            let win = &x[j * s..j * s + taps];
            let (ar, ai) = dot2::<FMA>(win, &self.zr, &self.zi);
            let (c, sn) = MixerFrequency::phasor(self.mixer.phase(t0 + (j * s) as u64));
            let (c, sn) = (c as f32, sn as f32);
            *y = Complex32::new(ar * c - ai * sn, ar * sn + ai * c);
        }
    }
}

/// (Σ x·a, Σ x·b) with LANES independent accumulators so that it vectorises; `FMA`
/// uses fused multiply-adds (only where the CPU has them).
#[inline(always)]
fn dot2<const FMA: bool>(x: &[f32], a: &[f32], b: &[f32]) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    if FMA {
        // SAFETY: FMA = true is only instantiated from `run_chunk_avx2`, which runs only
        // after AVX2 and FMA were detected.
        return unsafe { dot2_fma(x, a, b) };
    }
    let mut sa = [0f32; LANES];
    let mut sb = [0f32; LANES];
    let xc = x.chunks_exact(LANES);
    let (xr, ar, br) = (xc.remainder(), a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (a_rem, b_rem) = (ar.remainder(), br.remainder());
    for ((xv, av), bv) in xc.zip(ar).zip(br) {
        for l in 0..LANES {
            if FMA {
                sa[l] = xv[l].mul_add(av[l], sa[l]);
                sb[l] = xv[l].mul_add(bv[l], sb[l]);
            } else {
                sa[l] += xv[l] * av[l];
                sb[l] += xv[l] * bv[l];
            }
        }
    }
    let mut ra: f32 = sa.iter().sum();
    let mut rb: f32 = sb.iter().sum();
    for ((&xv, &av), &bv) in xr.iter().zip(a_rem).zip(b_rem) {
        ra += xv * av;
        rb += xv * bv;
    }
    (ra, rb)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot2_fma(x: &[f32], a: &[f32], b: &[f32]) -> (f32, f32) {
    use std::arch::x86_64::*;
    let n = x.len().min(a.len()).min(b.len());
    let (mut a0, mut a1, mut b0, mut b1) = (
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
    );
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 ≤ n ≤ each slice's length.
        unsafe {
            let x0 = _mm256_loadu_ps(x.as_ptr().add(i));
            let x1 = _mm256_loadu_ps(x.as_ptr().add(i + 8));
            a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(a.as_ptr().add(i)), a0);
            a1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(a.as_ptr().add(i + 8)), a1);
            b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(b.as_ptr().add(i)), b0);
            b1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(b.as_ptr().add(i + 8)), b1);
        }
        i += 16;
    }
    let mut la = [0f32; 8];
    let mut lb = [0f32; 8];
    // SAFETY: each array holds 8 floats.
    unsafe {
        _mm256_storeu_ps(la.as_mut_ptr(), _mm256_add_ps(a0, a1));
        _mm256_storeu_ps(lb.as_mut_ptr(), _mm256_add_ps(b0, b1));
    }
    let (mut ra, mut rb): (f32, f32) = (la.iter().sum(), lb.iter().sum());
    for k in i..n {
        ra = x[k].mul_add(a[k], ra);
        rb = x[k].mul_add(b[k], rb);
    }
    (ra, rb)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::fengine::design::remez::amplitude;

    #[test]
    fn mixer_fixed_point_is_exact() {
        // f = −21/100: after 100 samples exactly −21 cycles ⇒ phase 0 (up to rounding of f).
        let m = MixerFrequency::from_hz(21.0, 100.0).unwrap();
        let p = m.phase(100) as i64;
        assert!(p.unsigned_abs() < 128, "{p}");
        // Large timestamps: the only error is t × the rounding of f (≤ 2^-65 cycles).
        let t: u64 = (1 << 40) + 3;
        let exact = ((-(21i128) * t as i128).rem_euclid(100) as f64) / 100.0;
        let got = m.phase(t) as f64 / 2f64.powi(64);
        let bound = t as f64 * 2f64.powi(-65) + 1e-15;
        assert!((got - exact).abs() <= bound, "{got} vs {exact}");
        // Non-integral inputs go through f64.
        let g = MixerFrequency::from_hz(0.5, 4.0).unwrap();
        assert_eq!(g.0, 7 << 61);
        assert!(MixerFrequency::from_hz(f64::NAN, 1.0).is_err());
        assert!(MixerFrequency::from_hz(1.0, 0.0).is_err());
    }

    #[test]
    fn discard_filter_response() {
        for s in [4usize, 8] {
            let h = ddc_weights_discard(s, 16 * s, 0.005).unwrap();
            let h: Vec<f64> = h.iter().map(|&v| v as f64 / (s as f64).sqrt()).collect();
            let fs = s as f64;
            // Pass band [0, 0.25] of the output rate: close to 1 (loosely weighted).
            for i in 0..=50 {
                let a = amplitude(&h, 0.25 * i as f64 / 50.0 / fs);
                assert!((a - 1.0).abs() < 0.05, "S {s} pass {a}");
            }
            // Aliasing stop bands well suppressed.
            let mut x = 0.75;
            while x < fs / 2.0 {
                for i in 0..=50 {
                    let f = x + ((x + 0.5).min(fs / 2.0) - x) * i as f64 / 50.0;
                    let a = amplitude(&h, f / fs).abs();
                    assert!(a < 1e-3, "S {s} stop at {f}: {a}");
                }
                x += 1.0;
            }
        }
    }

    #[test]
    fn no_discard_filter_response() {
        let s = 8;
        let h = ddc_weights_no_discard(s, 32 * 4, 0.005, 0.8).unwrap();
        let h: Vec<f64> = h.iter().map(|&v| v as f64 / (s as f64).sqrt()).collect();
        assert!((amplitude(&h, 0.1 / 8.0) - 1.0).abs() < 0.05);
        assert!(amplitude(&h, 0.7 / 8.0).abs() < 1e-3);
        assert!(ddc_weights_no_discard(8, 64, 0.005, 1.5).is_err());
    }

    #[test]
    fn simd_dot_matches_portable() {
        for n in [5usize, 16, 55, 128] {
            let x: Vec<f32> = (0..n).map(|i| (i * 13 % 29) as f32 - 14.0).collect();
            let a: Vec<f32> = (0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) / 7.0).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 5 % 13) as f32 - 6.0) / 3.0).collect();
            let p = dot2::<false>(&x, &a, &b);
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                let f = dot2::<true>(&x, &a, &b);
                assert!((p.0 - f.0).abs() < 1e-3 && (p.1 - f.1).abs() < 1e-3);
            }
            let ea: f64 = (0..n).map(|i| x[i] as f64 * a[i] as f64).sum();
            let eb: f64 = (0..n).map(|i| x[i] as f64 * b[i] as f64).sum();
            assert!((p.0 as f64 - ea).abs() < 1e-3 && (p.1 as f64 - eb).abs() < 1e-3);
        }
    }

    #[test]
    fn ddc_matches_direct_f64() {
        // Odd case like katgpucbf's test: 55 taps, S = 5, exact mixer f = −0.21.
        let (s, taps, n_out) = (5usize, 55usize, 300usize);
        let h: Vec<f32> = (0..taps)
            .map(|k| ((k * 37 % 11) as f32 - 5.0) / 40.0)
            .collect();
        let mixer = MixerFrequency::from_hz(21.0, 100.0).unwrap();
        let ddc = Ddc::new(&h, s, mixer);
        let n_in = (n_out - 1) * s + taps;
        let x: Vec<f32> = (0..n_in)
            .map(|i| ((i * 7919 % 8191) as f32 - 4095.0).round())
            .collect();
        let t0 = 123_456_789_012u64;
        let mut y = vec![Complex32::new(0.0, 0.0); n_out];
        ddc.run(&x, t0, &mut y);
        let mut err2 = 0.0;
        for (j, yj) in y.iter().enumerate() {
            let (mut re, mut im) = (0f64, 0f64);
            for k in 0..taps {
                let t = t0 as i128 + (s * j + k) as i128;
                let cyc = (-21 * t).rem_euclid(100) as f64 / 100.0;
                let v = x[s * j + k] as f64 * h[k] as f64;
                re += v * (2.0 * PI * cyc).cos();
                im += v * (2.0 * PI * cyc).sin();
            }
            let e = ((yj.re as f64 - re).powi(2) + (yj.im as f64 - im).powi(2)).sqrt();
            assert!(e < 2e-5 * 8192.0, "j {j}: {e}");
            err2 += e * e;
        }
        assert!((err2 / n_out as f64).sqrt() < 2e-6 * 8192.0);
    }
}
