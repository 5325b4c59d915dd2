//! Test helpers: deterministic signals, packing, and an independent float64 reference
//! F-engine written straight from the equations (direct DFTs, no FFT library).

use super::{FConfig, PolBlock, Samples};
use crate::spead::bitpack;
use num_complex::{Complex32, Complex64};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::f64::consts::PI;

pub(crate) fn rng(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed)
}

/// `n` values uniform in (−a/2, a/2) (per-spectrum fine delays and phases).
pub(crate) fn uniform_values(r: &mut Xoshiro256PlusPlus, n: usize, a: f64) -> Vec<f64> {
    (0..n).map(|_| (r.random::<f64>() - 0.5) * a).collect()
}

/// Per-channel gains for both pols: magnitude `gain`·(0.8..1.2) and a random phase.
pub(crate) fn random_gains(
    r: &mut Xoshiro256PlusPlus,
    channels: usize,
    gain: f32,
) -> [Vec<Complex32>; 2] {
    [0, 1].map(|_| {
        (0..channels)
            .map(|_| {
                Complex32::from_polar(
                    gain * (0.8 + 0.4 * r.random::<f32>()),
                    r.random::<f32>() * 6.3,
                )
            })
            .collect()
    })
}

/// Approximately Gaussian integer noise (sum of 12 uniforms), clipped to `bits`.
pub(crate) fn noise(n: usize, sigma: f64, bits: u32, seed: u64) -> Vec<i16> {
    let mut r = rng(seed);
    let lim = (1i32 << (bits - 1)) - 1;
    (0..n)
        .map(|_| {
            let g: f64 = (0..12).map(|_| r.random::<f64>()).sum::<f64>() - 6.0;
            ((g * sigma).round() as i32).clamp(-lim - 1, lim) as i16
        })
        .collect()
}

/// A·cos(2π·f·(t0 + i) + θ) rounded to integers, f in cycles per sample (f64 exact enough
/// for the test lengths).
pub(crate) fn tone(n: usize, t0: u64, f: f64, amp: f64, theta: f64) -> Vec<i16> {
    (0..n)
        .map(|i| {
            let cyc = (f * (t0 + i as u64) as f64).fract();
            (amp * (2.0 * PI * cyc + theta).cos()).round() as i16
        })
        .collect()
}

pub(crate) fn pack(s: &[i16], bits: u32) -> Vec<u8> {
    let mut b = vec![0u8; bitpack::packed_len(s.len(), bits)];
    bitpack::pack(s, bits, &mut b);
    b
}

pub(crate) fn packed<'a>(data: &'a [u8], bits: u32, len: usize) -> Samples<'a> {
    Samples::Packed { data, bits, len }
}

pub(crate) fn pol<'a>(
    samples: Samples<'a>,
    offset: usize,
    fine: &'a [f64],
    phase: &'a [f64],
    gains: &'a [Complex32],
) -> PolBlock<'a> {
    PolBlock {
        samples,
        timestamp: 0,
        offset,
        fine_delay: fine,
        phase,
        gains,
    }
}

/// Both pols of `bits`-bit noise (seeds `seed`, `seed + 1`), packed, run through `gpu` and the
/// CPU reference as one block of `spectra` starting `offsets` samples into each pol (no delay,
/// unit gains); asserts that the input statistics agree and returns the unpacked samples.
pub(crate) fn packed_noise_gpu_vs_cpu(
    gpu: &mut super::GpuBackend,
    cpu: &mut super::CpuBackend,
    cfg: &FConfig,
    spectra: usize,
    bits: u32,
    seed: u64,
    offsets: [usize; 2],
) -> [Vec<i16>; 2] {
    use super::FBackend;
    let n = cfg.input_samples_needed(spectra) + 40;
    let fine = vec![0.0; spectra];
    let phase = vec![0.0; spectra];
    let gains = vec![Complex32::new(1.0, 0.0); cfg.channels];
    let sigma = (1u32 << (bits - 1)) as f64 * 0.45;
    let xs = [0, 1].map(|p| noise(n, sigma, bits, seed + p));
    let bufs = [pack(&xs[0], bits), pack(&xs[1], bits)];
    let pols = [0, 1].map(|p| pol(packed(&bufs[p], bits, n), offsets[p], &fine, &phase, &gains));
    let block = super::Block {
        spectra,
        first_spectrum: 0,
        out_first: 0,
        pols,
    };
    let mut out = vec![0u8; cfg.output_len(spectra)];
    let mut cout = out.clone();
    let g = gpu.process(&block, &mut out).unwrap();
    let c = cpu.process(&block, &mut cout).unwrap();
    assert_eq!(
        g.input, c.input,
        "{bits} bits, seed {seed}: input statistics"
    );
    xs
}

/// Complex value (re, im) of channel `c`, spectrum `s`, pol `p` from 8-bit output laid out
/// as (heap, channel, spectrum, pol, re/im).
pub(crate) fn value8(out: &[u8], cfg: &FConfig, c: usize, s: usize, p: usize) -> (i8, i8) {
    let sph = cfg.spectra_per_heap;
    let (h, si) = (s / sph, s % sph);
    let i = (((h * cfg.channels + c) * sph + si) * 2 + p) * 2;
    (out[i] as i8, out[i + 1] as i8)
}

/// Same for 4-bit output (sign-extended nibbles).
pub(crate) fn value4(out: &[u8], cfg: &FConfig, c: usize, s: usize, p: usize) -> (i8, i8) {
    let sph = cfg.spectra_per_heap;
    let (h, si) = (s / sph, s % sph);
    let b = out[((h * cfg.channels + c) * sph + si) * 2 + p];
    ((b as i8) >> 4, ((b << 4) as i8) >> 4)
}

fn dft(y: &[Complex64], bins: impl Iterator<Item = usize>) -> Vec<Complex64> {
    let n = y.len();
    let tw: Vec<Complex64> = (0..n)
        .map(|m| Complex64::from_polar(1.0, -2.0 * PI * m as f64 / n as f64))
        .collect();
    bins.map(|k| y.iter().enumerate().map(|(j, v)| v * tw[(j * k) % n]).sum())
        .collect()
}

/// Float64 reference wideband channelisation of spectrum `s` of `x` (window at s·2C).
pub(crate) fn ref_wideband(x: &[f64], w: &[f32], channels: usize, s: usize) -> Vec<Complex64> {
    let step = 2 * channels;
    let taps = w.len() / step;
    let y: Vec<Complex64> = (0..step)
        .map(|j| {
            let v: f64 = (0..taps)
                .map(|t| w[t * step + j] as f64 * x[s * step + t * step + j])
                .sum();
            Complex64::new(v, 0.0)
        })
        .collect();
    dft(&y, 0..channels)
}

/// Float64 reference DDC: y[j] = Σ_k x[S·j + k]·h[k]·e^{2πj·f·(t0 + S·j + k)} with the
/// mixer f = −num/den cycles per sample evaluated in exact integer arithmetic.
pub(crate) fn ref_ddc(
    x: &[f64],
    h: &[f32],
    s: usize,
    t0: u64,
    (num, den): (i128, i128),
    n_out: usize,
) -> Vec<Complex64> {
    (0..n_out)
        .map(|j| {
            (0..h.len())
                .map(|k| {
                    let t = t0 as i128 + (s * j + k) as i128;
                    let cyc = (-num * t).rem_euclid(den) as f64 / den as f64;
                    Complex64::from_polar(x[s * j + k] * h[k] as f64, 2.0 * PI * cyc)
                })
                .sum()
        })
        .collect()
}

/// Float64 reference complex PFB + DFT of spectrum `s`, returned for output channels
/// 0..C (bin (c − C/2) mod N).
pub(crate) fn ref_narrowband(
    u: &[Complex64],
    w: &[f32],
    n_pfb: usize,
    channels: usize,
    s: usize,
) -> Vec<Complex64> {
    let taps = w.len() / n_pfb;
    let y: Vec<Complex64> = (0..n_pfb)
        .map(|i| {
            (0..taps)
                .map(|t| u[s * n_pfb + t * n_pfb + i] * w[t * n_pfb + i] as f64)
                .sum()
        })
        .collect();
    dft(
        &y,
        (0..channels).map(|c| (c + n_pfb - channels / 2) % n_pfb),
    )
}

/// Reference post-processing of one channel: X·e^{j·phase_c}·g with
/// phase_c = (fine/div)·(−π/N)·(c − C/2) + phase.
#[allow(clippy::too_many_arguments)]
pub(crate) fn ref_post(
    x: Complex64,
    c: usize,
    channels: usize,
    n_pfb: usize,
    fine: f64,
    div: f64,
    phase: f64,
    g: Complex32,
) -> Complex64 {
    let ph = (fine / div) * (-PI / n_pfb as f64) * (c as f64 - (channels / 2) as f64) + phase;
    x * Complex64::from_polar(1.0, ph) * Complex64::new(g.re as f64, g.im as f64)
}

/// Reference quantiser: clamp to ±q then round half to even, in f64.
pub(crate) fn ref_quant(v: f64, q: f64) -> i32 {
    v.clamp(-q, q).round_ties_even() as i32
}
