//! Wideband end-to-end tests of the CPU backend against analytic expectations and the
//! independent float64 reference in `test_util`.

use crate::compute::fengine::reference::*;
use crate::compute::fengine::*;
use num_complex::{Complex32, Complex64};
use rand::RngExt;
use std::f64::consts::PI;

const BITS: u32 = 10;

fn cfg(channels: usize, sph: usize) -> FConfig {
    FConfig {
        dither: Dither::None,
        ..FConfig::wideband(channels, sph)
    }
}

fn phase_err(a: f64, b: f64) -> f64 {
    crate::compute::fengine::design::delay::wrap_angle(a - b).abs()
}

/// Tone at the centre of channel k: |X| = A·Σw/2·|g|, phase = θ + arg g (window starts on
/// a multiple of 2C so the tone's phase at the window start is θ). Every other channel
/// stays within ±1.5 (katgpucbf's leakage bound).
fn tone_case(out_bits: u32, target: f64) {
    let channels = 256;
    let mut cfg = cfg(channels, 8);
    cfg.out_bits = out_bits;
    let spectra = 8;
    let k = 77;
    let (amp, theta) = (300.0, 0.7);
    let mut be = CpuBackend::new(cfg.clone()).unwrap();
    let sum_w: f64 = be.weights().iter().map(|&w| w as f64).sum();
    let n = cfg.input_samples_needed(spectra);
    let x = tone(n, 0, k as f64 / (2 * channels) as f64, amp, theta);
    let buf = pack(&x, BITS);
    let (fine, phase) = (vec![0.0; spectra], vec![0.0; spectra]);
    let g0 = target / (amp * sum_w / 2.0);
    let gains = [
        vec![Complex32::new(g0 as f32, 0.0); channels],
        vec![Complex32::from_polar(g0 as f32, 1.1); channels],
    ];
    let s = packed(&buf, BITS, n);
    let block = Block {
        spectra,
        first_spectrum: 0,
        out_first: 0,
        pols: [
            pol(s, 0, &fine, &phase, &gains[0]),
            pol(s, 0, &fine, &phase, &gains[1]),
        ],
    };
    let mut out = vec![0u8; cfg.output_len(spectra)];
    let st = be.process(&block, &mut out).unwrap();
    assert_eq!(st.saturated, [0, 0]);
    let value = if out_bits == 4 { value4 } else { value8 };
    for sp in 0..spectra {
        for (p, extra) in [(0, 0.0), (1, 1.1)] {
            for c in 0..channels {
                let (re, im) = value(&out, &cfg, c, sp, p);
                let v = Complex64::new(re as f64, im as f64);
                if c == k {
                    assert!(
                        (v.norm() - target).abs() <= 1.0,
                        "|X| {} vs {target}",
                        v.norm()
                    );
                    let tol = 0.02_f64.max(1.0 / target);
                    assert!(phase_err(v.arg(), theta + extra) < tol, "phase {}", v.arg());
                } else {
                    assert!(re.abs() <= 1 && im.abs() <= 1, "leak {c}: {re} {im}");
                }
            }
        }
    }
}

#[test]
fn tone_at_channel_centre_8bit() {
    tone_case(8, 100.0);
}

#[test]
fn tone_at_channel_centre_4bit() {
    tone_case(4, 6.0);
}

/// Noise with random gains, fine delays and phases, a coarse-delay offset per pol and two
/// heaps: ≥ 99 % of re/im values within 1 LSB of the float64 reference, none beyond 2.
#[test]
fn noise_matches_f64_reference() {
    let channels = 128;
    let spectra = 8;
    let cfg = cfg(channels, 4);
    let mut be = CpuBackend::new(cfg.clone()).unwrap();
    let n = cfg.input_samples_needed(spectra) + 100;
    let mut r = rng(5);
    let xs = [noise(n, 200.0, BITS, 1), noise(n, 25.0, BITS, 2)];
    let bufs = [pack(&xs[0], BITS), pack(&xs[1], BITS)];
    let offsets = [37usize, 100];
    let fine: Vec<Vec<f64>> = (0..2)
        .map(|_| (0..spectra).map(|_| r.random::<f64>() - 0.5).collect())
        .collect();
    let phase: Vec<Vec<f64>> = (0..2)
        .map(|_| {
            (0..spectra)
                .map(|_| (r.random::<f64>() - 0.5) * 2.0 * PI)
                .collect()
        })
        .collect();
    let gains: Vec<Vec<Complex32>> = (0..2)
        .map(|p| {
            (0..channels)
                .map(|_| Complex32::from_polar(0.5 + 0.4 * p as f32, r.random::<f32>() * 6.0))
                .collect()
        })
        .collect();
    let pols: Vec<PolBlock> = (0..2)
        .map(|p| {
            let s = packed(&bufs[p], BITS, n);
            pol(s, offsets[p], &fine[p], &phase[p], &gains[p])
        })
        .collect();
    let block = Block {
        spectra,
        first_spectrum: 0,
        out_first: 0,
        pols: [pols[0], pols[1]],
    };
    let mut out = vec![0u8; cfg.output_len(spectra)];
    let st = be.process(&block, &mut out).unwrap();
    let (mut total, mut close, mut worst) = (0usize, 0usize, 0i32);
    let (mut sat_lo, mut sat_hi) = ([0u64; 2], [0u64; 2]);
    for p in 0..2 {
        let x: Vec<f64> = xs[p][offsets[p]..].iter().map(|&v| v as f64).collect();
        for sp in 0..spectra {
            let spec = ref_wideband(&x, be.weights(), channels, sp);
            for c in 0..channels {
                let v = ref_post(
                    spec[c],
                    c,
                    channels,
                    channels,
                    fine[p][sp],
                    1.0,
                    phase[p][sp],
                    gains[p][c],
                );
                let (re, im) = value8(&out, &cfg, c, sp, p);
                for (got, want) in [(re, v.re), (im, v.im)] {
                    let d = (got as i32 - ref_quant(want, 127.0)).abs();
                    total += 1;
                    close += (d <= 1) as usize;
                    worst = worst.max(d);
                }
                sat_lo[p] += (v.re.abs() > 127.5 || v.im.abs() > 127.5) as u64;
                sat_hi[p] += (v.re.abs() > 126.5 || v.im.abs() > 126.5) as u64;
            }
        }
    }
    assert!(close as f64 >= 0.99 * total as f64, "{close}/{total}");
    assert!(worst <= 2, "worst {worst}");
    for p in 0..2 {
        assert!(sat_lo[p] <= st.saturated[p] && st.saturated[p] <= sat_hi[p]);
    }
    // σ = 200 with |g| = 0.5 saturates some values.
    assert!(st.saturated[0] > 0);
}

/// The predicted phase of a tone at channel k delayed by d with phase φ:
/// θ + π·k·T/C − π·(k − C/2)·d/C + φ (phase referenced to the centre frequency).
#[test]
fn delay_and_phase_rate_move_tone_phase_as_predicted() {
    let channels = 256;
    let step = 2 * channels as u64;
    let spectra = 16;
    let cfg = cfg(channels, 16);
    let mut be = CpuBackend::new(cfg.clone()).unwrap();
    let sum_w: f64 = be.weights().iter().map(|&w| w as f64).sum();
    let (amp, theta) = (300.0, -0.4);
    let buf_ts = 1_000_000u64;
    let first_out = buf_ts + 64 * step;
    let n = cfg.input_samples_needed(spectra) + 200 * step as usize;
    for (k, delay, rate, phase0, phase_rate) in [
        (40usize, 5.3, 0.0, 0.0, 0.0),
        (40, -2.7, 0.0, 1.0, 0.0),
        (200, 13.49, 2e-4, 0.3, 1e-5),
        (100, 1234.6, -3e-4, -2.0, -2e-5),
    ] {
        let f = k as f64 / step as f64;
        let x = tone(n, buf_ts, f, amp, theta);
        let buf = pack(&x, BITS);
        let model = LinearDelayModel {
            start: first_out - 3000,
            delay,
            delay_rate: rate,
            phase: phase0,
            phase_rate,
        };
        let segs = model.segments(first_out, spectra, step, 1, true).unwrap();
        let g = (100.0 / (amp * sum_w / 2.0)) as f32;
        let gains = vec![Complex32::new(g, 0.0); channels];
        let mut out = vec![0u8; cfg.output_len(spectra)];
        for seg in &segs {
            let off = seg.input_offset(buf_ts).unwrap();
            let s = packed(&buf, BITS, n);
            let pb = pol(s, off, &seg.fine_delay, &seg.phase, &gains);
            let block = Block {
                spectra: seg.len(),
                first_spectrum: 0,
                out_first: seg.first,
                pols: [pb, pb],
            };
            be.process(&block, &mut out).unwrap();
        }
        if rate != 0.0 {
            assert!(segs.len() > 1, "test should cross a coarse-delay step");
        }
        for sp in 0..spectra {
            let t = first_out + sp as u64 * step;
            let r = (t - model.start) as f64;
            let d = delay + rate * r;
            let want = theta + 2.0 * PI * (f * t as f64).fract()
                - PI * (k as f64 - channels as f64 / 2.0) * d / channels as f64
                + phase0
                + phase_rate * r;
            for p in 0..2 {
                let (re, im) = value8(&out, &cfg, k, sp, p);
                let v = Complex64::new(re as f64, im as f64);
                assert!((v.norm() - 100.0).abs() <= 1.5, "norm {}", v.norm());
                let e = phase_err(v.arg(), want);
                assert!(e < 0.02, "k {k} d {d} spectrum {sp}: error {e}");
            }
        }
    }
}

/// An impulse at the start of each window gives X_k = w[j0-tap]·a for every channel, so
/// per-channel gains set exact output values; saturation counts must match exactly, with
/// and without dither (values kept ≥ 0.6 away from ±127).
#[test]
fn saturation_counts_are_exact() {
    let channels = 64;
    let spectra = 4;
    for dither in [Dither::None, Dither::Uniform] {
        let cfg = FConfig {
            taps: 1,
            w_cutoff: 0.0,
            window: Window::Rect,
            dither,
            ..FConfig::wideband(channels, spectra)
        };
        let mut be = CpuBackend::new(cfg.clone()).unwrap();
        let step = 2 * channels;
        let mut x = vec![0i16; spectra * step];
        for s in 0..spectra {
            x[s * step] = 100;
        }
        let w0 = be.weights()[0] as f64;
        let targets: [(f64, f64); 6] = [
            (126.3, 0.0),
            (127.7, 3.0),
            (-130.0, -5.0),
            (10.0, -128.0),
            (-200.0, 200.0),
            (-126.4, 126.4),
        ];
        let gains: Vec<Vec<Complex32>> = (0..2)
            .map(|p| {
                (0..channels)
                    .map(|c| {
                        let (re, im) = targets[(c + p) % targets.len()];
                        Complex32::new((re / (100.0 * w0)) as f32, (im / (100.0 * w0)) as f32)
                    })
                    .collect()
            })
            .collect();
        let want: Vec<u64> = (0..2)
            .map(|p| {
                (0..channels)
                    .filter(|c| {
                        let (re, im) = targets[(c + p) % targets.len()];
                        re.abs() > 127.0 || im.abs() > 127.0
                    })
                    .count() as u64
                    * spectra as u64
            })
            .collect();
        let zero = vec![0.0; spectra];
        let d = Samples::Decoded { data: &x, bits: 10 };
        let block = Block {
            spectra,
            first_spectrum: 17,
            out_first: 0,
            pols: [
                pol(d, 0, &zero, &zero, &gains[0]),
                pol(d, 0, &zero, &zero, &gains[1]),
            ],
        };
        let mut out = vec![0u8; cfg.output_len(spectra)];
        let st = be.process(&block, &mut out).unwrap();
        assert_eq!(st.saturated.to_vec(), want, "{dither:?}");
        let (re, im) = value8(&out, &cfg, 4, 1, 0); // targets[4]
        assert_eq!((re, im), (-127, 127));
        // -128 never appears.
        assert!(out.iter().all(|&b| b != 0x80));
    }
}

/// Input power and clip counts: each spectrum counts the last 2C samples of its window.
#[test]
fn input_stats_are_exact() {
    let channels = 32;
    let spectra = 5;
    let cfg = cfg(channels, spectra);
    let mut be = CpuBackend::new(cfg.clone()).unwrap();
    let n = cfg.input_samples_needed(spectra) + 11;
    let mut x = noise(n, 100.0, 8, 9);
    for i in (0..n).step_by(97) {
        x[i] = if i % 2 == 0 { 127 } else { -128 };
    }
    let off = 11;
    let step = 2 * channels;
    let counted = &x[off + (cfg.taps - 1) * step..off + (cfg.taps - 1 + spectra) * step];
    let sum_sq: u64 = counted.iter().map(|&v| (v as i64 * v as i64) as u64).sum();
    let clipped = counted.iter().filter(|&&v| v == 127 || v == -128).count() as u64;
    assert!(clipped > 2);
    let buf = pack(&x, 8);
    let zero = vec![0.0; spectra];
    let gains = vec![Complex32::new(1.0, 0.0); channels];
    let pk = pol(packed(&buf, 8, n), off, &zero, &zero, &gains);
    let dec = pol(
        Samples::Decoded { data: &x, bits: 8 },
        off,
        &zero,
        &zero,
        &gains,
    );
    let block = Block {
        spectra,
        first_spectrum: 0,
        out_first: 0,
        pols: [pk, dec],
    };
    let mut out = vec![0u8; cfg.output_len(spectra)];
    let st = be.process(&block, &mut out).unwrap().input.unwrap();
    for s in st {
        assert_eq!(s.sum_sq, sum_sq);
        assert_eq!(s.clipped, clipped);
        assert_eq!(s.samples, (spectra * step) as u64);
        let want = 10.0 * (sum_sq as f64 / s.samples as f64 / (127.0 * 127.0 / 2.0)).log10();
        assert!((s.rms_dbfs() - want).abs() < 1e-12);
    }
}

/// Splitting a block (with dither on) gives identical output to one block: dither is keyed
/// by absolute spectrum and tiles respect heap boundaries.
#[test]
fn block_split_and_dither_are_consistent() {
    let channels = 64;
    let spectra = 12;
    let cfg = FConfig {
        dither_seed: 99,
        feng_id: 3,
        n_ants: 4,
        ..FConfig::wideband(channels, 4)
    };
    let mut be = CpuBackend::new(cfg.clone()).unwrap();
    let n = cfg.input_samples_needed(spectra);
    let x = noise(n, 40.0, BITS, 3);
    let zero = vec![0.0; spectra];
    let gains = vec![Complex32::new(0.3, 0.1); channels];
    let d = Samples::Decoded {
        data: &x,
        bits: BITS,
    };
    let mk = |first: usize, len: usize| Block {
        spectra: len,
        first_spectrum: 1000 + first as u64,
        out_first: first,
        pols: [0, 1].map(|_| pol(d, first * 2 * channels, &zero[..len], &zero[..len], &gains)),
    };
    let mut whole = vec![0u8; cfg.output_len(spectra)];
    be.process(&mk(0, spectra), &mut whole).unwrap();
    let mut parts = vec![0u8; cfg.output_len(spectra)];
    for (f, l) in [(0, 5), (5, 2), (7, 5)] {
        be.process(&mk(f, l), &mut parts).unwrap();
    }
    assert_eq!(whole, parts);
    // Dither changes some values by one LSB relative to no dither, never more.
    let mut nd = CpuBackend::new(FConfig {
        dither: Dither::None,
        ..cfg.clone()
    })
    .unwrap();
    let mut plain = vec![0u8; cfg.output_len(spectra)];
    nd.process(&mk(0, spectra), &mut plain).unwrap();
    let diffs: Vec<i32> = whole
        .iter()
        .zip(&plain)
        .map(|(&a, &b)| a as i8 as i32 - b as i8 as i32)
        .collect();
    assert!(diffs.iter().all(|d| d.abs() <= 1));
    assert!(diffs.iter().filter(|d| **d != 0).count() > diffs.len() / 10);
}

/// Packed input of every supported width (2–16 bits) gives the same output as the same
/// samples supplied decoded, at an odd input offset.
#[test]
fn packed_input_all_widths_matches_decoded() {
    let channels = 32;
    let spectra = 4;
    let cfg = FConfig {
        taps: 4,
        ..cfg(channels, spectra)
    };
    let mut be = CpuBackend::new(cfg.clone()).unwrap();
    let n = cfg.input_samples_needed(spectra) + 13;
    let zero = vec![0.0; spectra];
    let gains = vec![Complex32::new(0.7, -0.2); channels];
    for bits in 2..=16u32 {
        let sigma = (1u32 << (bits - 1)) as f64 / 3.0;
        let x = noise(n, sigma, bits, bits as u64);
        let buf = pack(&x, bits);
        let mut outs = vec![];
        for s in [packed(&buf, bits, n), Samples::Decoded { data: &x, bits }] {
            let p = pol(s, 13, &zero, &zero, &gains);
            let block = Block {
                spectra,
                first_spectrum: 0,
                out_first: 0,
                pols: [p, p],
            };
            let mut out = vec![0u8; cfg.output_len(spectra)];
            be.process(&block, &mut out).unwrap();
            outs.push(out);
        }
        assert_eq!(outs[0], outs[1], "bits {bits}");
        assert!(outs[0].iter().any(|&b| b != 0));
    }
}
