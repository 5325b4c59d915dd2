//! Narrowband GPU backend tests: kernels compile with NVRTC (CPU-side), construction errors
//! (CPU-side), and GPU results against the CPU backend on the same input — DDC output within
//! 2e-5·2^bits for every input width, final int8/int4 within 1 LSB on ≥ 99.9 % of values for
//! decimation 8 and 16, discard and no-discard — plus the DDC autotuner's cache (skipped
//! without a GPU, required with GPUCBF_REQUIRE_GPU=1).

use crate::compute::fengine::cpu::ddc::{ddc_weights, Ddc, MixerFrequency};
use crate::compute::fengine::gpu::ddc_tune::{
    self, cache_key, cache_lookup, cache_store, DdcTuning, DDC_SRC,
};
use crate::compute::fengine::gpu::narrowband::{
    ddc_taps_per_phase, fir_complex_defines, postproc_nb_defines, DdcTuningChoice, GpuNarrowband,
    PFB_FIR_COMPLEX_SRC, POSTPROC_NB_SRC,
};
use crate::compute::fengine::reference::*;
use crate::compute::fengine::*;
use crate::gpu;
use num_complex::Complex32;
use std::f64::consts::PI;

/// Integral rates: the mixer frequency is exact.
const ADC: f64 = 1_712_000_000.0;
const TUNING: DdcTuning = DdcTuning { wgs: 64, unroll: 8 };

fn nb_cfg(channels: usize, decimation: usize, no_discard: bool, sph: usize) -> FConfig {
    FConfig {
        dither_seed: 42,
        feng_id: 3,
        n_ants: 4,
        narrowband: Some(Narrowband {
            decimation,
            centre_frequency: 321_000_000.0,
            adc_rate: ADC,
            ddc_taps: None,
            weight_pass: 0.005,
            mode: if no_discard {
                NarrowbandMode::NoDiscard {
                    pass_bandwidth: 0.8 * 0.5 * ADC / decimation as f64,
                }
            } else {
                NarrowbandMode::Discard
            },
        }),
        ..FConfig::wideband(channels, sph)
    }
}

/// A backend with a fixed DDC tuning (TUNING where it fits, else the first candidate), so
/// that the tests do not autotune.
fn fixed(cfg: &FConfig) -> GpuNarrowband {
    let (s, w) = (cfg.subsampling(), ddc_taps_per_phase(cfg));
    let t = if ddc_tune::valid_tuning(s, w, TUNING) {
        TUNING
    } else {
        ddc_tune::candidates(s, w)[0]
    };
    GpuNarrowband::with_tuning(cfg.clone(), DdcTuningChoice::Fixed(t)).unwrap()
}

#[test]
fn narrowband_kernels_compile_with_nvrtc() {
    if !gpu::nvrtc_test_guard("narrowband_kernels_compile_with_nvrtc") {
        return;
    }
    for arch in ["compute_80", "compute_90"] {
        let bits: Vec<u32> = if arch == "compute_90" {
            std::iter::once(0).chain(2..=16).collect()
        } else {
            vec![0, 10, 13]
        };
        for b in bits {
            let d = ddc_tune::ddc_defines(8, 16, b, TUNING);
            gpu::compile_ptx("ddc.cu", DDC_SRC, &d, arch).unwrap();
        }
        // Odd taps per phase, odd and large unroll, the largest subsampling of the tests.
        for (s, w, t) in [
            (8usize, 7usize, DdcTuning { wgs: 32, unroll: 1 }),
            (
                16,
                16,
                DdcTuning {
                    wgs: 128,
                    unroll: 4,
                },
            ),
            (32, 16, DdcTuning { wgs: 32, unroll: 8 }),
            (128, 16, ddc_tune::candidates(128, 16)[0]),
        ] {
            assert!(ddc_tune::valid_tuning(s, w, t), "{s} {w} {t:?}");
            let d = ddc_tune::ddc_defines(s, w, 10, t);
            gpu::compile_ptx("ddc.cu", DDC_SRC, &d, arch).unwrap();
        }
        for (c, d, nd, ob) in [(1024, 8, false, 8), (32768, 16, true, 4), (64, 8, false, 4)] {
            let mut cfg = nb_cfg(c, d, nd, 256);
            cfg.out_bits = ob;
            gpu::compile_ptx(
                "pfb_fir_complex.cu",
                PFB_FIR_COMPLEX_SRC,
                &fir_complex_defines(&cfg),
                arch,
            )
            .unwrap();
            gpu::compile_ptx(
                "postproc_nb.cu",
                POSTPROC_NB_SRC,
                &postproc_nb_defines(&cfg),
                arch,
            )
            .unwrap();
        }
    }
}

#[test]
fn narrowband_gpu_refuses_bad_configs_cleanly() {
    let wb = FConfig::wideband(1024, 256);
    assert!(matches!(
        GpuNarrowband::new(wb),
        Err(FError::BadParameter {
            what: "narrowband",
            ..
        })
    ));
    let mut long = nb_cfg(1024, 8, false, 256);
    if let Some(nb) = long.narrowband.as_mut() {
        nb.ddc_taps = Some(8 * 200);
    }
    assert!(matches!(
        GpuNarrowband::new(long),
        Err(FError::BadParameter {
            what: "ddc_taps",
            ..
        })
    ));
    let bad = DdcTuning { wgs: 48, unroll: 8 };
    assert!(matches!(
        GpuNarrowband::with_tuning(nb_cfg(1024, 8, false, 256), DdcTuningChoice::Fixed(bad)),
        Err(FError::BadParameter {
            what: "ddc tuning",
            ..
        })
    ));
    let huge = DdcTuning {
        wgs: 1024,
        unroll: 16,
    };
    assert!(!ddc_tune::valid_tuning(8, 16, huge));
}

/// Inputs of one comparison case.
struct Case {
    cfg: FConfig,
    spectra: usize,
    bits: u32,
    xs: [Vec<i16>; 2],
    bufs: [Vec<u8>; 2],
    offsets: [usize; 2],
    timestamp: u64,
    fine: [Vec<f64>; 2],
    phase: [Vec<f64>; 2],
    gains: [Vec<Complex32>; 2],
}

impl Case {
    fn new(cfg: FConfig, spectra: usize, bits: u32, gain: f32, seed: u64) -> Case {
        let s = cfg.subsampling();
        let offsets = [3 * s, 7 * s];
        let n = cfg.input_samples_needed(spectra) + 8 * s + 64;
        let mut r = rng(seed);
        let sigma = ((1u32 << (bits - 1)) as f64 / 3.0).max(0.7);
        let xs = [noise(n, sigma, bits, seed), noise(n, sigma, bits, seed + 1)];
        let bufs = [pack(&xs[0], bits), pack(&xs[1], bits)];
        let fine = [0, 1].map(|_| uniform_values(&mut r, spectra, s as f64));
        let phase = [0, 1].map(|_| uniform_values(&mut r, spectra, 4.0 * PI));
        let gains = random_gains(&mut r, cfg.channels, gain);
        Case {
            cfg,
            spectra,
            bits,
            xs,
            bufs,
            offsets,
            timestamp: (1u64 << 41) + 12_345,
            fine,
            phase,
            gains,
        }
    }

    /// Block of spectra [first, first + len): pol 0 packed, pol 1 decoded (`decoded` = both
    /// decoded).
    fn block(&self, first: usize, len: usize, decoded: bool) -> Block<'_> {
        let pol = |p: usize| {
            let samples = if p == 1 || decoded {
                Samples::Decoded {
                    data: &self.xs[p],
                    bits: self.bits,
                }
            } else {
                packed(&self.bufs[p], self.bits, self.xs[p].len())
            };
            let r = first..first + len;
            let mut pb = pol(
                samples,
                self.offsets[p] + first * self.cfg.samples_between_spectra(),
                &self.fine[p][r.clone()],
                &self.phase[p][r],
                &self.gains[p],
            );
            pb.timestamp = self.timestamp;
            pb
        };
        Block {
            spectra: len,
            first_spectrum: 1000 + first as u64,
            out_first: first,
            pols: [pol(0), pol(1)],
        }
    }
}

/// The GPU DDC output of the last block against the CPU DDC on the same samples: every value
/// within 2e-5·2^bits, RMS error below 2e-6·2^bits.
fn check_ddc(case: &Case, gpu: &GpuNarrowband) {
    let cfg = &case.cfg;
    let nb = cfg.narrowband.unwrap();
    let s = cfg.subsampling();
    let h = ddc_weights(&nb, s, cfg.ddc_taps()).unwrap();
    let ddc = Ddc::new(
        &h,
        s,
        MixerFrequency::from_hz(nb.centre_frequency, ADC).unwrap(),
    );
    let got = gpu.ddc_output(case.spectra).unwrap();
    let n_out = got[0].len();
    let scale = (1u64 << case.bits) as f64;
    for (p, got_p) in got.iter().enumerate() {
        let off = case.offsets[p];
        let x: Vec<f32> = case.xs[p][off..off + (n_out - 1) * s + cfg.ddc_taps()]
            .iter()
            .map(|&v| v as f32)
            .collect();
        let mut want = vec![Complex32::new(0.0, 0.0); n_out];
        ddc.run(&x, case.timestamp + off as u64, &mut want);
        let (mut worst, mut sum2) = (0f64, 0f64);
        for (g, w) in got_p.iter().zip(&want) {
            let e = (g - w).norm() as f64;
            worst = worst.max(e);
            sum2 += e * e;
        }
        let rms = (sum2 / n_out as f64).sqrt();
        let what = format!(
            "DDC bits {} S {s} taps {} pol {p}",
            case.bits,
            cfg.ddc_taps()
        );
        assert!(worst <= 2e-5 * scale, "{what}: worst error {worst}");
        assert!(rms <= 2e-6 * scale, "{what}: RMS error {rms}");
        let power: f64 = want.iter().map(|v| v.norm_sqr() as f64).sum::<f64>() / n_out as f64;
        assert!(power > 0.0, "{what}: the CPU DDC output is all zero");
    }
}

/// Compares GPU and CPU outputs: ≥ 99.9 % of re/im values within 1 LSB, none beyond 2,
/// saturation counts within 0.1 % (+2), and the case saturates some values.
fn compare(case: &Case, gpu_out: &[u8], cpu_out: &[u8], g: &BlockStats, c: &BlockStats) {
    let cfg = &case.cfg;
    let (mut total, mut close, mut worst) = (0usize, 0usize, 0i32);
    for s in 0..case.spectra {
        for ch in 0..cfg.channels {
            for p in 0..2 {
                let (a, b) = if cfg.out_bits == 8 {
                    (
                        value8(gpu_out, cfg, ch, s, p),
                        value8(cpu_out, cfg, ch, s, p),
                    )
                } else {
                    (
                        value4(gpu_out, cfg, ch, s, p),
                        value4(cpu_out, cfg, ch, s, p),
                    )
                };
                for (x, y) in [(a.0, b.0), (a.1, b.1)] {
                    let d = (x as i32 - y as i32).abs();
                    total += 1;
                    close += (d <= 1) as usize;
                    worst = worst.max(d);
                }
            }
        }
    }
    let nb = cfg.narrowband.unwrap();
    let what = format!(
        "C={} D={} {:?} out_bits={}",
        cfg.channels, nb.decimation, nb.mode, cfg.out_bits
    );
    assert!(
        close as f64 >= 0.999 * total as f64,
        "{what}: {close}/{total} within 1 LSB"
    );
    assert!(worst <= 2, "{what}: worst difference {worst}");
    let values = (case.spectra * cfg.channels) as f64;
    for p in 0..2 {
        let (a, b) = (g.saturated[p] as f64, c.saturated[p] as f64);
        assert!(
            (a - b).abs() <= 2.0 + 1e-3 * values,
            "{what}: saturated {a} vs {b}"
        );
    }
    assert!(
        c.saturated[0] > 0 && (c.saturated[0] as f64) < 0.2 * values,
        "{what}: the case should saturate a few values, got {}",
        c.saturated[0]
    );
    assert_eq!(g.input, None, "{what}: narrowband has no input statistics");
}

/// Gain that puts the output σ (per component, ≈ 120 before the gain for 10-bit input
/// with σ = 170) at about half of qmax, so that a few per cent of the values saturate.
fn case_gain(out_bits: u32) -> f32 {
    if out_bits == 8 {
        0.5
    } else {
        0.03
    }
}

/// The CPU side of one pipeline comparison case.
fn cpu_case(
    decimation: usize,
    no_discard: bool,
    out_bits: u32,
    seed: u64,
) -> (Case, Vec<u8>, BlockStats) {
    let mut cfg = nb_cfg(256, decimation, no_discard, 8);
    cfg.out_bits = out_bits;
    let spectra = 24;
    let case = Case::new(cfg, spectra, 10, case_gain(out_bits), seed);
    let mut cpu = CpuBackend::new(case.cfg.clone()).unwrap();
    let mut cpu_out = vec![0u8; case.cfg.output_len(spectra)];
    let cs = cpu
        .process(&case.block(0, spectra, false), &mut cpu_out)
        .unwrap();
    (case, cpu_out, cs)
}

/// The comparison cases exercise saturation without being dominated by it (no GPU needed).
#[test]
fn narrowband_comparison_cases_saturate_a_few_percent() {
    for (d, nd) in [(8, false), (16, false), (8, true), (16, true)] {
        for out_bits in [8u32, 4] {
            let (case, _, cs) = cpu_case(d, nd, out_bits, 40 + d as u64);
            let values = (case.spectra * case.cfg.channels) as f64;
            for p in 0..2 {
                let f = cs.saturated[p] as f64 / values;
                assert!(
                    f > 0.002 && f < 0.2,
                    "D {d} {nd} {out_bits}-bit pol {p}: {f}"
                );
            }
        }
    }
}

fn run_pipeline_case(decimation: usize, no_discard: bool, seed: u64) {
    for out_bits in [8u32, 4] {
        let (case, cpu_out, cs) = cpu_case(decimation, no_discard, out_bits, seed);
        let b = case.block(0, case.spectra, false);
        let mut gpu = fixed(&case.cfg);
        let mut gpu_out = vec![0xa5u8; cpu_out.len()];
        let gs = gpu.process(&b, &mut gpu_out).unwrap();
        check_ddc(&case, &gpu);
        compare(&case, &gpu_out, &cpu_out, &gs, &cs);
    }
}

#[test]
fn gpu_narrowband_d8_discard_matches_cpu() {
    if gpu::gpu_test_guard("gpu_narrowband_d8_discard_matches_cpu") {
        run_pipeline_case(8, false, 31);
    }
}

#[test]
fn gpu_narrowband_d16_discard_matches_cpu() {
    if gpu::gpu_test_guard("gpu_narrowband_d16_discard_matches_cpu") {
        run_pipeline_case(16, false, 32);
    }
}

#[test]
fn gpu_narrowband_d8_no_discard_matches_cpu() {
    if gpu::gpu_test_guard("gpu_narrowband_d8_no_discard_matches_cpu") {
        run_pipeline_case(8, true, 33);
    }
}

#[test]
fn gpu_narrowband_d16_no_discard_matches_cpu() {
    if gpu::gpu_test_guard("gpu_narrowband_d16_no_discard_matches_cpu") {
        run_pipeline_case(16, true, 34);
    }
}

/// Every packed input width 2..=16 (pol 0) next to int16 input (pol 1), plus a filter whose
/// length is not a multiple of S (zero-padded phases), on both decimations and modes.
#[test]
fn gpu_ddc_matches_cpu_all_bit_widths() {
    if !gpu::gpu_test_guard("gpu_ddc_matches_cpu_all_bit_widths") {
        return;
    }
    let spectra = 4;
    let mut shapes = vec![(8usize, false, None)];
    shapes.extend([(16, false, None), (8, true, None), (16, true, None)]);
    shapes.push((8, false, Some(8 * 7 + 3)));
    for (i, &(d, nd, taps)) in shapes.iter().enumerate() {
        let mut cfg = nb_cfg(64, d, nd, 4);
        if let Some(nb) = cfg.narrowband.as_mut() {
            nb.ddc_taps = taps;
        }
        let widths: Vec<u32> = if i == 0 {
            (2..=16).collect()
        } else {
            vec![3, 10]
        };
        let mut gpu = fixed(&cfg);
        for bits in widths {
            let case = Case::new(cfg.clone(), spectra, bits, 0.5, 100 + bits as u64);
            let mut out = vec![0u8; case.cfg.output_len(spectra)];
            gpu.process(&case.block(0, spectra, false), &mut out)
                .unwrap();
            check_ddc(&case, &gpu);
        }
        assert_eq!(
            ddc_taps_per_phase(&cfg),
            cfg.ddc_taps().div_ceil(d * (1 + nd as usize))
        );
    }
}

/// Other DDC kernel shapes (odd unroll, one output per thread, large groups) agree too.
#[test]
fn gpu_ddc_tunings_agree() {
    if !gpu::gpu_test_guard("gpu_ddc_tunings_agree") {
        return;
    }
    let cfg = nb_cfg(128, 8, false, 4);
    let spectra = 4;
    let case = Case::new(cfg.clone(), spectra, 10, 0.5, 7);
    for t in [
        DdcTuning { wgs: 32, unroll: 1 },
        DdcTuning { wgs: 96, unroll: 3 },
        DdcTuning {
            wgs: 256,
            unroll: 4,
        },
        DdcTuning {
            wgs: 32,
            unroll: 16,
        },
    ] {
        let mut gpu = GpuNarrowband::with_tuning(cfg.clone(), DdcTuningChoice::Fixed(t)).unwrap();
        let mut out = vec![0u8; cfg.output_len(spectra)];
        gpu.process(&case.block(0, spectra, false), &mut out)
            .unwrap();
        check_ddc(&case, &gpu);
    }
}

/// Blocks that start mid-heap (out_first ≠ 0) leave the rest of the output untouched and
/// give the same result as the CPU on the same split; int16 input on both pols; no dither.
#[test]
fn gpu_narrowband_split_blocks_match_cpu() {
    if !gpu::gpu_test_guard("gpu_narrowband_split_blocks_match_cpu") {
        return;
    }
    let mut cfg = nb_cfg(128, 8, false, 16);
    cfg.dither = Dither::None;
    let mut case = Case::new(cfg, 40, 10, case_gain(8), 21);
    case.spectra = 48;
    let mut cpu = CpuBackend::new(case.cfg.clone()).unwrap();
    let mut gpu = fixed(&case.cfg);
    let mut cpu_out = vec![0u8; case.cfg.output_len(48)];
    let mut gpu_out = cpu_out.clone();
    let (mut cs, mut gs) = (BlockStats::default(), BlockStats::default());
    for (first, len) in [(0usize, 13usize), (13, 20), (33, 7)] {
        let b = case.block(first, len, true);
        let c = cpu.process(&b, &mut cpu_out).unwrap();
        let g = gpu.process(&b, &mut gpu_out).unwrap();
        for p in 0..2 {
            cs.saturated[p] += c.saturated[p];
            gs.saturated[p] += g.saturated[p];
        }
    }
    compare(&case, &gpu_out, &cpu_out, &gs, &cs);
    for s in 40..48 {
        for ch in 0..case.cfg.channels {
            for p in 0..2 {
                assert_eq!(value8(&gpu_out, &case.cfg, ch, s, p), (0, 0));
            }
        }
    }
}

/// The autotuner stores its choice in the cache, reads it back (a planted entry wins over
/// tuning), and still works when the cache cannot be written.
#[test]
fn gpu_ddc_autotune_uses_cache() {
    if !gpu::gpu_test_guard("gpu_ddc_autotune_uses_cache") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("gpucbf-ddc-autotune-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("ddc-tuning.txt");
    let cfg = nb_cfg(64, 8, false, 4);
    let mut a =
        GpuNarrowband::with_tuning(cfg.clone(), DdcTuningChoice::Auto(Some(path.clone()))).unwrap();
    let t = a.ddc_tuning(10).unwrap();
    let key = a.tuning_key(10).unwrap();
    assert!(key.contains("S=8") && key.contains("W=16") && key.contains("bits=10"));
    assert_eq!(cache_lookup(&path, &key), Some(t));
    assert!(ddc_tune::candidates(8, 16).contains(&t));
    // A planted entry is used as is.
    let planted = DdcTuning { wgs: 32, unroll: 4 };
    cache_store(&path, &key, planted).unwrap();
    let mut b =
        GpuNarrowband::with_tuning(cfg.clone(), DdcTuningChoice::Auto(Some(path.clone()))).unwrap();
    assert_eq!(b.ddc_tuning(10).unwrap(), planted);
    // The backend works with the tuned kernel.
    let case = Case::new(cfg.clone(), 4, 10, 0.5, 5);
    let mut out = vec![0u8; cfg.output_len(4)];
    b.process(&case.block(0, 4, false), &mut out).unwrap();
    check_ddc(&case, &b);
    // Unwritable cache (below a regular file): tuning still succeeds.
    let bad = path.join("x").join("ddc-tuning.txt");
    let mut c = GpuNarrowband::with_tuning(cfg, DdcTuningChoice::Auto(Some(bad))).unwrap();
    assert!(c.ddc_tuning(0).is_ok());
    assert_ne!(cache_key("a", "b", 8, 16, 10), key);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bad input is an error, not a panic.
#[test]
fn gpu_narrowband_bad_input_is_an_error() {
    if !gpu::gpu_test_guard("gpu_narrowband_bad_input_is_an_error") {
        return;
    }
    let cfg = nb_cfg(64, 8, false, 4);
    let case = Case::new(cfg.clone(), 4, 10, 0.5, 3);
    let mut gpu = fixed(&cfg);
    let mut out = vec![0u8; cfg.output_len(4) - 1];
    assert!(matches!(
        gpu.process(&case.block(0, 4, false), &mut out),
        Err(FError::BadOutputLength { .. })
    ));
    let mut out = vec![0u8; cfg.output_len(4)];
    let mut b = case.block(0, 4, false);
    b.pols[0].offset = case.xs[0].len();
    assert!(matches!(
        gpu.process(&b, &mut out),
        Err(FError::InputTooShort { .. })
    ));
    let mut b = case.block(0, 4, false);
    b.pols[1].offset += 1;
    assert!(matches!(
        gpu.process(&b, &mut out),
        Err(FError::BadParameter { what: "offset", .. })
    ));
}
