//! PFB FIR (dsp.md §3.2) and the FFT that follows it (§4).
//!
//! Real (wideband): y_s[j] = Σ_t w[t·step + j]·x[s·step + t·step + j], step = 2N, then a real
//! FFT of length 2N keeping bins 0..N (the Nyquist bin is dropped). Complex (narrowband):
//! the same FIR on complex samples with step = N, then a complex FFT of length N.

use crate::compute::fengine::FError;
use num_complex::Complex32;
use realfft::{RealFftPlanner, RealToComplex};
use rustfft::{Fft, FftPlanner};
use std::sync::Arc;

/// y += w ⊙ x, written so that it vectorises (fused multiply-add with `FMA`).
#[inline(always)]
fn mac<const FMA: bool>(y: &mut [f32], w: &[f32], x: &[f32]) {
    for ((y, &w), &x) in y.iter_mut().zip(w).zip(x) {
        *y = if FMA { w.mul_add(x, *y) } else { *y + w * x };
    }
}

/// Real PFB FIR for spectrum `s` of `x` (first window sample at s·step) into `out` (step).
pub(crate) fn fir_real(x: &[f32], w: &[f32], step: usize, s: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (just checked).
        return unsafe { fir_real_avx2(x, w, step, s, out) };
    }
    fir_real_generic::<false>(x, w, step, s, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fir_real_avx2(x: &[f32], w: &[f32], step: usize, s: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let taps = w.len() / step;
    let base = s * step;
    if out.len() != step || x.len() < base + taps * step {
        // Not reachable from the backend (lengths are validated); keep the checked path.
        return fir_real_generic::<true>(x, w, step, s, out);
    }
    // 16 columns at a time, all taps accumulated in registers, one store.
    let mut j = 0;
    while j + 16 <= step {
        let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for t in 0..taps {
            // SAFETY: t·step + j + 16 ≤ taps·step = w.len() and
            // base + t·step + j + 16 ≤ base + taps·step ≤ x.len() (checked above).
            unsafe {
                let wp = w.as_ptr().add(t * step + j);
                let xp = x.as_ptr().add(base + t * step + j);
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wp), _mm256_loadu_ps(xp), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wp.add(8)), _mm256_loadu_ps(xp.add(8)), a1);
            }
        }
        // SAFETY: j + 16 ≤ step = out.len().
        unsafe {
            _mm256_storeu_ps(out.as_mut_ptr().add(j), a0);
            _mm256_storeu_ps(out.as_mut_ptr().add(j + 8), a1);
        }
        j += 16;
    }
    for (jj, o) in out.iter_mut().enumerate().skip(j) {
        *o = (0..taps).fold(0.0, |acc: f32, t| {
            w[t * step + jj].mul_add(x[base + t * step + jj], acc)
        });
    }
}

#[inline(always)]
fn fir_real_generic<const FMA: bool>(x: &[f32], w: &[f32], step: usize, s: usize, out: &mut [f32]) {
    let taps = w.len() / step;
    let base = s * step;
    out.fill(0.0);
    // Column blocks keep the accumulators in L1 while the taps stream past.
    for j0 in (0..step).step_by(COLS) {
        let j1 = (j0 + COLS).min(step);
        for t in 0..taps {
            let o = base + t * step;
            mac::<FMA>(
                &mut out[j0..j1],
                &w[t * step + j0..t * step + j1],
                &x[o + j0..o + j1],
            );
        }
    }
}

/// Columns per FIR block.
const COLS: usize = 2048;

/// Complex PFB FIR for spectrum `s` (step = N complex samples); real and imaginary parts
/// are filtered with the same weight. `w_dup` holds each weight twice (see
/// [`duplicate_weights`]), so the interleaved (re, im) floats run through the real FIR with
/// step 2N — katgpucbf's "index adjustment for the weights".
pub(crate) fn fir_complex(
    u: &[Complex32],
    w_dup: &[f32],
    step: usize,
    s: usize,
    out: &mut [Complex32],
) {
    fir_real(as_f32(u), w_dup, 2 * step, s, as_f32_mut(out));
}

/// [w0, w0, w1, w1, …] for the complex FIR.
pub(crate) fn duplicate_weights(w: &[f32]) -> Vec<f32> {
    w.iter().flat_map(|&v| [v, v]).collect()
}

fn as_f32(c: &[Complex32]) -> &[f32] {
    // SAFETY: Complex<f32> is #[repr(C)] { re: f32, im: f32 }: 2·len f32s, same alignment.
    unsafe { std::slice::from_raw_parts(c.as_ptr().cast::<f32>(), 2 * c.len()) }
}

fn as_f32_mut(c: &mut [Complex32]) -> &mut [f32] {
    // SAFETY: as for `as_f32`; the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(c.as_mut_ptr().cast::<f32>(), 2 * c.len()) }
}

/// Portable complex FIR (reference for tests).
#[cfg(test)]
#[inline(always)]
fn fir_complex_generic(u: &[Complex32], w: &[f32], step: usize, s: usize, out: &mut [Complex32]) {
    let taps = w.len() / step;
    let base = s * step;
    out.fill(Complex32::new(0.0, 0.0));
    for j0 in (0..step).step_by(COLS / 2) {
        let j1 = (j0 + COLS / 2).min(step);
        for t in 0..taps {
            let o = base + t * step;
            for ((y, &w), x) in out[j0..j1]
                .iter_mut()
                .zip(&w[t * step + j0..t * step + j1])
                .zip(&u[o + j0..o + j1])
            {
                y.re += w * x.re;
                y.im += w * x.im;
            }
        }
    }
}

/// FFT plans for one channeliser (shareable between threads).
#[derive(Clone)]
pub(crate) enum Transform {
    Real(Arc<dyn RealToComplex<f32>>),
    Complex(Arc<dyn Fft<f32>>),
}

impl Transform {
    /// Real FFT of length 2N (wideband) or complex FFT of length N (narrowband).
    pub(crate) fn new(n_pfb: usize, complex: bool) -> Self {
        if complex {
            Transform::Complex(FftPlanner::new().plan_fft_forward(n_pfb))
        } else {
            Transform::Real(RealFftPlanner::new().plan_fft_forward(2 * n_pfb))
        }
    }

    pub(crate) fn scratch_len(&self) -> usize {
        match self {
            Transform::Real(p) => p.get_scratch_len(),
            Transform::Complex(p) => p.get_inplace_scratch_len(),
        }
    }
}

/// Per-thread working buffers for the FIR + FFT of one spectrum.
pub(crate) struct Work {
    pub real_in: Vec<f32>,
    /// FFT output: N + 1 bins (real) or N (complex, in place).
    pub spec: Vec<Complex32>,
    pub scratch: Vec<Complex32>,
}

impl Work {
    pub(crate) fn new(n_pfb: usize, t: &Transform) -> Self {
        let (real_len, spec_len) = match t {
            Transform::Real(_) => (2 * n_pfb, n_pfb + 1),
            Transform::Complex(_) => (0, n_pfb),
        };
        Work {
            real_in: vec![0.0; real_len],
            spec: vec![Complex32::new(0.0, 0.0); spec_len],
            scratch: vec![Complex32::new(0.0, 0.0); t.scratch_len()],
        }
    }
}

/// Channelises spectrum `s` into `work.spec` (FFT bin order, DC first).
pub(crate) fn channelise_real(
    x: &[f32],
    w: &[f32],
    s: usize,
    t: &Transform,
    work: &mut Work,
) -> Result<(), FError> {
    let Transform::Real(plan) = t else {
        return Err(internal("real channelisation with a complex plan"));
    };
    let step = work.real_in.len();
    fir_real(x, w, step, s, &mut work.real_in);
    plan.process_with_scratch(&mut work.real_in, &mut work.spec, &mut work.scratch)
        .map_err(|e| internal(&e.to_string()))
}

fn internal(why: &str) -> FError {
    FError::BadParameter {
        what: "fft",
        why: why.to_string(),
    }
}

/// Complex channelisation of spectrum `s` into `work.spec` (FFT bin order).
pub(crate) fn channelise_complex(
    u: &[Complex32],
    w: &[f32],
    s: usize,
    t: &Transform,
    work: &mut Work,
) -> Result<(), FError> {
    let Transform::Complex(plan) = t else {
        return Err(internal("complex channelisation with a real plan"));
    };
    let n = work.spec.len();
    fir_complex(u, w, n, s, &mut work.spec);
    plan.process_with_scratch(&mut work.spec, &mut work.scratch);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dispatched (SIMD where available) FIR agrees with the portable one, including
    /// steps that are not a multiple of the vector width.
    #[test]
    fn simd_fir_matches_portable() {
        for (step, taps) in [(4usize, 3usize), (40, 4), (2048, 16)] {
            let w: Vec<f32> = (0..step * taps)
                .map(|i| ((i * 31 % 17) as f32 - 8.0) / 9.0)
                .collect();
            let x: Vec<f32> = (0..step * (taps + 2))
                .map(|i| ((i * 7 % 23) as f32) - 11.0)
                .collect();
            let (mut a, mut b) = (vec![0f32; step], vec![0f32; step]);
            fir_real(&x, &w, step, 2, &mut a);
            fir_real_generic::<false>(&x, &w, step, 2, &mut b);
            for j in 0..step {
                assert!(
                    (a[j] - b[j]).abs() <= 1e-4 * (1.0 + b[j].abs()),
                    "{step} {j}"
                );
            }
            let u: Vec<Complex32> = x.iter().map(|&v| Complex32::new(v, -v / 2.0)).collect();
            let (mut c, mut d) = (
                vec![Complex32::default(); step],
                vec![Complex32::default(); step],
            );
            fir_complex(&u, &duplicate_weights(&w), step, 1, &mut c);
            fir_complex_generic(&u, &w, step, 1, &mut d);
            for j in 0..step {
                assert!(
                    (c[j] - d[j]).norm() <= 1e-4 * (1.0 + d[j].norm()),
                    "{step} {j}"
                );
            }
        }
    }
}
