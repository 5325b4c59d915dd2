//! GPU backend tests: kernels compile with NVRTC (CPU-side), construction errors (CPU-side),
//! and GPU results against the CPU backend on the same input (skipped without a GPU,
//! required with GPUCBF_REQUIRE_GPU=1).

use crate::compute::fengine::cpu::pfb::fir_real;
use crate::compute::fengine::gpu::wideband::{
    fir_defines, postproc_defines, GpuBackend, Tuning, PFB_FIR_SRC, POSTPROC_SRC,
};
use crate::compute::fengine::reference::*;
use crate::compute::fengine::*;
use crate::gpu;
use num_complex::Complex32;
use std::f64::consts::PI;

const BITS: u32 = 10;

fn cfg(channels: usize, sph: usize, out_bits: u32) -> FConfig {
    let mut c = FConfig::wideband(channels, sph);
    c.out_bits = out_bits;
    c.dither_seed = 42;
    c.feng_id = 3;
    c.n_ants = 4;
    c
}

#[test]
fn gpu_kernels_compile_with_nvrtc() {
    if !gpu::nvrtc_test_guard("gpu_kernels_compile_with_nvrtc") {
        return;
    }
    for arch in ["compute_80", "compute_90"] {
        for (channels, unzip, out_bits) in [(1024, 1, 8), (4096, 2, 4), (32768, 4, 8)] {
            let c = cfg(channels, 256, out_bits);
            for in_bits in [0u32, 2, 3, 8, 10, 12, 16] {
                gpu::compile_ptx(
                    "pfb_fir.cu",
                    PFB_FIR_SRC,
                    &fir_defines(&c, unzip, in_bits),
                    arch,
                )
                .unwrap();
            }
            // The default kernels and the benchmark's reference variants.
            for fast in ["0", "1"] {
                let mut d = fir_defines(&c, unzip, 10);
                d.push(("FIR_FAST", fast.into()));
                gpu::compile_ptx("pfb_fir.cu", PFB_FIR_SRC, &d, arch).unwrap();
                let mut d = postproc_defines(&c, unzip);
                d.push(("POST_FAST_SINCOS", fast.into()));
                gpu::compile_ptx("postproc.cu", POSTPROC_SRC, &d, arch).unwrap();
            }
            let mut d = fir_defines(&c, unzip, 10);
            for (k, v) in [
                ("FIR_STCS", "1"),
                ("FIR_MAX_THREADS", "128"),
                ("FIR_MIN_BLOCKS", "5"),
            ] {
                d.push((k, v.into()));
            }
            gpu::compile_ptx("pfb_fir.cu", PFB_FIR_SRC, &d, arch).unwrap();
            let mut d = postproc_defines(&c, unzip);
            for (k, v) in [
                ("ROWS", "2"),
                ("POST_PREFETCH", "0"),
                ("POST_MIN_BLOCKS", "12"),
            ] {
                d.push((k, v.into()));
            }
            gpu::compile_ptx("postproc.cu", POSTPROC_SRC, &d, arch).unwrap();
        }
    }
}

#[test]
fn gpu_backend_refuses_bad_configs_cleanly() {
    let mut nb = FConfig::wideband(1024, 256);
    nb.narrowband = Some(Narrowband {
        decimation: 8,
        centre_frequency: 100e6,
        adc_rate: 1712e6,
        ddc_taps: None,
        weight_pass: 0.005,
        mode: NarrowbandMode::Discard,
    });
    match GpuBackend::new(nb) {
        Err(FError::Gpu(crate::gpu::GpuError::Unsupported(msg))) => {
            assert!(msg.contains("narrowband"), "{msg}")
        }
        other => panic!("expected a narrowband error, got {:?}", other.err()),
    }
    for unzip in [0usize, 3, 8] {
        assert!(matches!(
            GpuBackend::with_unzip(FConfig::wideband(1024, 256), unzip),
            Err(FError::BadParameter { what: "unzip", .. })
        ));
    }
    assert!(matches!(
        GpuBackend::with_unzip(FConfig::wideband(4, 2), 4),
        Err(FError::BadParameter { what: "unzip", .. })
    ));
    assert!(matches!(
        GpuBackend::new(FConfig::wideband(1000, 256)),
        Err(FError::BadChannels { .. })
    ));
}

/// Inputs of one comparison case.
struct Case {
    cfg: FConfig,
    spectra: usize,
    xs: [Vec<i16>; 2],
    bufs: [Vec<u8>; 2],
    offsets: [usize; 2],
    fine: [Vec<f64>; 2],
    phase: [Vec<f64>; 2],
    gains: [Vec<Complex32>; 2],
}

impl Case {
    fn new(channels: usize, spectra: usize, sph: usize, out_bits: u32, seed: u64) -> Case {
        let cfg = cfg(channels, sph, out_bits);
        let n = cfg.input_samples_needed(spectra) + 50;
        let mut r = rng(seed);
        // Output re/im σ ≈ input σ·|g|/√2: ≈ 64 of 127 (8-bit), ≈ 3.5 of 7 (4-bit), so a
        // few per cent saturate.
        let g = if out_bits == 8 { 0.9 } else { 0.05 };
        let xs = [noise(n, 100.0, BITS, seed), noise(n, 110.0, BITS, seed + 1)];
        let bufs = [pack(&xs[0], BITS), pack(&xs[1], BITS)];
        let fine = [0, 1].map(|_| uniform_values(&mut r, spectra, 1.0));
        let phase = [0, 1].map(|_| uniform_values(&mut r, spectra, 4.0 * PI));
        let gains = random_gains(&mut r, channels, g);
        Case {
            cfg,
            spectra,
            xs,
            bufs,
            offsets: [37, 8],
            fine,
            phase,
            gains,
        }
    }

    /// Block of spectra [first, first + len): packed input for pol 0, decoded for pol 1
    /// (`decoded` = both decoded).
    fn block(&self, first: usize, len: usize, decoded: bool) -> Block<'_> {
        let pol = |p: usize| {
            let samples = if p == 1 || decoded {
                Samples::Decoded {
                    data: &self.xs[p],
                    bits: BITS,
                }
            } else {
                packed(&self.bufs[p], BITS, self.xs[p].len())
            };
            let step = self.cfg.pfb_step();
            let r = first..first + len;
            pol(
                samples,
                self.offsets[p] + first * step,
                &self.fine[p][r.clone()],
                &self.phase[p][r],
                &self.gains[p],
            )
        };
        Block {
            spectra: len,
            first_spectrum: 1000 + first as u64,
            out_first: first,
            pols: [pol(0), pol(1)],
        }
    }
}

/// Compares GPU and CPU outputs: ≥ 99.9 % of re/im values equal within 1 LSB, none beyond
/// 2, saturation counts within 0.1 % (+2) and exact input statistics.
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
    let what = format!("C={} out_bits={}", cfg.channels, cfg.out_bits);
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
        c.saturated[0] > 0,
        "{what}: the case should saturate some values"
    );
    assert_eq!(g.input, c.input, "{what}: input statistics");
}

fn run_case(channels: usize, spectra: usize, sph: usize, seed: u64) {
    for out_bits in [8u32, 4] {
        let case = Case::new(channels, spectra, sph, out_bits, seed);
        let mut cpu = CpuBackend::new(case.cfg.clone()).unwrap();
        let mut cpu_out = vec![0u8; case.cfg.output_len(spectra)];
        let cs = cpu
            .process(&case.block(0, spectra, false), &mut cpu_out)
            .unwrap();
        for unzip in [1usize, 2, 4] {
            let mut gpu = GpuBackend::with_unzip(case.cfg.clone(), unzip).unwrap();
            let mut gpu_out = vec![0xa5u8; cpu_out.len()];
            let gs = gpu
                .process(&case.block(0, spectra, false), &mut gpu_out)
                .unwrap();
            compare(&case, &gpu_out, &cpu_out, &gs, &cs);
            if out_bits == 8 {
                check_fir(&case, &gpu, cpu.weights(), unzip);
            }
        }
    }
}

/// The GPU FIR output (un-unzipped) against the CPU FIR: relative tolerance 1e-5.
fn check_fir(case: &Case, gpu: &GpuBackend, w: &[f32], unzip: usize) {
    let what = format!("FIR C={} unzip={unzip}", case.cfg.channels);
    assert_fir_matches(
        gpu,
        unzip,
        case.spectra,
        [&case.xs[0], &case.xs[1]],
        case.offsets,
        w,
        &what,
    );
}

/// The GPU backend's FIR output of its last block (`spectra` spectra, unzip factor `unzip`)
/// against the CPU FIR of each pol's samples `xs[p]` from `offsets[p]` on: relative
/// tolerance 1e-5 (of the value plus the spectrum's RMS).
fn assert_fir_matches(
    gpu: &GpuBackend,
    unzip: usize,
    spectra: usize,
    xs: [&[i16]; 2],
    offsets: [usize; 2],
    w: &[f32],
    what: &str,
) {
    let n = gpu.config().pfb_channels();
    let step = 2 * n;
    let got = gpu.fir_output(spectra).unwrap();
    let l = n / unzip;
    let mut y = vec![0f32; step];
    for p in 0..2 {
        let x: Vec<f32> = xs[p][offsets[p]..].iter().map(|&v| v as f32).collect();
        for s in 0..spectra {
            fir_real(&x, w, step, s, &mut y);
            let scale = (y.iter().map(|v| v * v).sum::<f32>() / step as f32).sqrt();
            for m in 0..n {
                let g = got[(s * 2 + p) * n + (m % unzip) * l + m / unzip];
                for (a, b) in [(g.re, y[2 * m]), (g.im, y[2 * m + 1])] {
                    assert!(
                        (a - b).abs() <= 1e-5 * (b.abs() + scale),
                        "{what}: pol {p} spectrum {s} m {m}: {a} vs {b}"
                    );
                }
            }
        }
    }
}

#[test]
fn gpu_matches_cpu_1k_channels() {
    if gpu::gpu_test_guard("gpu_matches_cpu_1k_channels") {
        run_case(1024, 48, 16, 11);
    }
}

#[test]
fn gpu_matches_cpu_4k_channels() {
    if gpu::gpu_test_guard("gpu_matches_cpu_4k_channels") {
        run_case(4096, 24, 8, 12);
    }
}

#[test]
fn gpu_matches_cpu_32k_channels() {
    if gpu::gpu_test_guard("gpu_matches_cpu_32k_channels") {
        run_case(32768, 6, 2, 13);
    }
}

/// Every launch variant that `gpucbf bench fgpu` sweeps gives the CPU's answer: post-processing
/// thread rows, spectrum tiles per block (several, the last one partial), prefetch on and
/// off, launch bounds; FIR block size, run length, streaming stores, launch bounds, runs
/// balanced over the GPU.
#[test]
fn gpu_tunings_match_cpu() {
    if !gpu::gpu_test_guard("gpu_tunings_match_cpu") {
        return;
    }
    let spectra = 100;
    let case = Case::new(1024, spectra, 4, 8, 31);
    let mut cpu = CpuBackend::new(case.cfg.clone()).unwrap();
    let mut cpu_out = vec![0u8; case.cfg.output_len(spectra)];
    let cs = cpu
        .process(&case.block(0, spectra, false), &mut cpu_out)
        .unwrap();
    let d = Tuning::default();
    let tunings = [
        Tuning::for_unzip(1),
        Tuning::for_unzip(2),
        Tuning {
            post_rows: 2,
            post_tiles: 1,
            ..d
        },
        Tuning {
            post_rows: 4,
            post_tiles: 2,
            post_prefetch: true,
            ..d
        },
        Tuning {
            post_rows: 8,
            post_tiles: 3,
            post_prefetch: false,
            ..d
        },
        Tuning {
            post_rows: 4,
            post_tiles: 8,
            post_min_blocks: 6,
            fir_threads: 64,
            fir_run: 7,
            fir_waves: 0,
            ..d
        },
        Tuning {
            post_rows: 2,
            post_tiles: 2,
            post_min_blocks: 12,
            post_prefetch: false,
            fir_stcs: true,
            fir_min_blocks: 5,
            fir_run: 256,
            fir_waves: 0,
            ..d
        },
        Tuning {
            fir_waves: 1,
            fir_stcs: true,
            ..d
        },
        Tuning {
            fir_threads: 64,
            fir_waves: 2,
            ..Tuning::for_unzip(2)
        },
    ];
    for unzip in [1usize, 4] {
        let mut gpu = GpuBackend::with_unzip(case.cfg.clone(), unzip).unwrap();
        for t in tunings {
            gpu.set_tuning(t).unwrap();
            let mut gpu_out = vec![0xa5u8; cpu_out.len()];
            let gs = gpu
                .process(&case.block(0, spectra, false), &mut gpu_out)
                .unwrap();
            compare(&case, &gpu_out, &cpu_out, &gs, &cs);
        }
    }
    let mut gpu = GpuBackend::new(case.cfg.clone()).unwrap();
    for bad in [
        Tuning { post_tiles: 0, ..d },
        Tuning {
            post_rows: 32,
            post_min_blocks: 3,
            ..d
        },
        Tuning { fir_waves: 65, ..d },
    ] {
        assert!(matches!(
            gpu.set_tuning(bad),
            Err(FError::BadParameter { .. })
        ));
    }
}

/// Blocks that start mid-heap (out_first ≠ 0) leave the rest of the output untouched and
/// give the same result as the CPU on the same split; int16 input on both pols; no dither.
#[test]
fn gpu_split_blocks_match_cpu() {
    if !gpu::gpu_test_guard("gpu_split_blocks_match_cpu") {
        return;
    }
    let mut case = Case::new(256, 40, 16, 8, 21);
    case.cfg.dither = Dither::None;
    let mut cpu = CpuBackend::new(case.cfg.clone()).unwrap();
    let mut gpu = GpuBackend::with_unzip(case.cfg.clone(), 2).unwrap();
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
        assert_eq!(g.input, c.input);
    }
    // Spectra 40..48 were never written: still zero on both.
    compare(&case, &gpu_out, &cpu_out, &gs, &cs);
    for s in 40..48 {
        for ch in 0..case.cfg.channels {
            for p in 0..2 {
                assert_eq!(value8(&gpu_out, &case.cfg, ch, s, p), (0, 0));
            }
        }
    }
}

/// Bad input is an error, not a panic, on the GPU backend too.
#[test]
fn gpu_bad_input_is_an_error() {
    if !gpu::gpu_test_guard("gpu_bad_input_is_an_error") {
        return;
    }
    let case = Case::new(64, 4, 4, 8, 3);
    let mut gpu = GpuBackend::new(case.cfg.clone()).unwrap();
    let mut out = vec![0u8; case.cfg.output_len(4) - 1];
    assert!(matches!(
        gpu.process(&case.block(0, 4, false), &mut out),
        Err(FError::BadOutputLength { .. })
    ));
    let mut out = vec![0u8; case.cfg.output_len(4)];
    let mut b = case.block(0, 4, false);
    b.pols[0].offset = case.xs[0].len();
    assert!(matches!(
        gpu.process(&b, &mut out),
        Err(FError::InputTooShort { .. })
    ));
}

/// The FIR with short runs (not a multiple of the taps) and with runs balanced over the
/// GPU against the CPU FIR (rtol 1e-5) with exact input statistics, for every packed input
/// width and unzip factors 1, 2 and 4, with coarse-delay offsets that put the first sample
/// mid-word.
#[test]
fn gpu_fir_runs_match_cpu_for_all_bit_widths() {
    if !gpu::gpu_test_guard("gpu_fir_runs_match_cpu_for_all_bit_widths") {
        return;
    }
    let spectra = 21;
    let channels = 64;
    let mut cfg = FConfig::wideband(channels, 1);
    cfg.dither = Dither::None;
    let mut cpu = CpuBackend::new(cfg.clone()).unwrap();
    let d = Tuning::default();
    let short = Tuning {
        fir_threads: 32,
        fir_run: 5,
        fir_waves: 0,
        ..d
    };
    let balanced = Tuning {
        fir_threads: 32,
        fir_waves: 1,
        ..d
    };
    let mut cases: Vec<(u32, usize, Tuning)> = (2..=10u32)
        .chain([12, 16])
        .map(|bits| (bits, [1, 2, 4][bits as usize % 3], short))
        .collect();
    cases.extend([1usize, 2, 4].map(|u| (10u32, u, balanced)));
    for (bits, unzip, tuning) in cases {
        let what = format!("{bits} bits, unzip {unzip}, {tuning:?}");
        let mut gpu = GpuBackend::with_unzip(cfg.clone(), unzip).unwrap();
        gpu.set_tuning(tuning).unwrap();
        let offsets = [3usize + bits as usize, 17];
        let seed = 700 + 2 * bits as u64;
        let xs = packed_noise_gpu_vs_cpu(&mut gpu, &mut cpu, &cfg, spectra, bits, seed, offsets);
        let x = [&xs[0][..], &xs[1][..]];
        assert_fir_matches(&gpu, unzip, spectra, x, offsets, cpu.weights(), &what);
    }
}
