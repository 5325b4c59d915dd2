//! GPU pipeline tests: shape checks (CPU-side), and a stream of chunks through the
//! three-stream pipeline against one large block on the single-stream backend (skipped
//! without a GPU, required with GPUCBF_REQUIRE_GPU=1).

use crate::compute::fengine::gpu::block::BlockParams;
use crate::compute::fengine::gpu::pipeline::{GpuPipeline, PipelineShape};
use crate::compute::fengine::gpu::wideband::GpuBackend;
use crate::compute::fengine::reference::*;
use crate::compute::fengine::*;
use crate::gpu;

const BITS: u32 = 10;

fn cfg() -> FConfig {
    let mut c = FConfig::wideband(1024, 16);
    c.dither_seed = 7;
    c.feng_id = 1;
    c.n_ants = 4;
    c
}

/// Per-spectrum fine delays (±½ sample) and phases (±6 rad) for both pols, and per-channel
/// gains of magnitude `gain`·(0.8..1.2) with random phases, drawn from `rng(seed)`.
struct Params {
    fine: [Vec<f64>; 2],
    phase: [Vec<f64>; 2],
    gains: [Vec<Complex32>; 2],
}

impl Params {
    fn random(seed: u64, spectra: usize, channels: usize, gain: f32) -> Self {
        let mut r = rng(seed);
        let fine = [0, 1].map(|_| uniform_values(&mut r, spectra, 1.0));
        let phase = [0, 1].map(|_| uniform_values(&mut r, spectra, 12.0));
        let gains = random_gains(&mut r, channels, gain);
        Params { fine, phase, gains }
    }

    /// Pol `p` of a block reading `samples` from its start, for spectra 0..m.
    fn pol<'a>(&'a self, p: usize, samples: Samples<'a>, m: usize) -> PolBlock<'a> {
        pol(
            samples,
            0,
            &self.fine[p][..m],
            &self.phase[p][..m],
            &self.gains[p],
        )
    }

    /// The parameters of spectra `rg`, the first of them absolute spectrum `first_spectrum`.
    fn chunk(&self, first_spectrum: u64, rg: std::ops::Range<usize>) -> BlockParams<'_> {
        BlockParams {
            first_spectrum,
            spectra: rg.len(),
            fine_delay: [&self.fine[0][rg.clone()], &self.fine[1][rg.clone()]],
            phase: [&self.phase[0][rg.clone()], &self.phase[1][rg]],
            gains: [&self.gains[0], &self.gains[1]],
        }
    }
}

/// Pinned host copies of chunk `k` (`cb` bytes) of each pol's packed input.
fn pinned_chunk(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    bufs: &[Vec<u8>; 2],
    k: usize,
    cb: usize,
) -> [cudarc::driver::PinnedHostSlice<u8>; 2] {
    [0, 1].map(|p| {
        let mut h = unsafe { ctx.alloc_pinned::<u8>(cb) }.unwrap();
        h.as_mut_slice()
            .unwrap()
            .copy_from_slice(&bufs[p][k * cb..(k + 1) * cb]);
        h
    })
}

/// Output values off by exactly 1 LSB and by more, over all comparisons.
#[derive(Default)]
struct LsbDiffs {
    one: usize,
    worse: usize,
}

impl LsbDiffs {
    fn add(&mut self, got: &[u8], want: &[u8]) {
        for (a, b) in got.iter().zip(want) {
            match (*a as i8 as i32 - *b as i8 as i32).abs() {
                0 => {}
                1 => self.one += 1,
                _ => self.worse += 1,
            }
        }
    }
}

#[test]
fn gpu_pipeline_refuses_bad_shapes() {
    let good = PipelineShape {
        chunk_spectra: 32,
        bits: 10,
        slots: 4,
    };
    assert!(GpuPipeline::check_shape(&cfg(), &good).is_ok());
    for (shape, what) in [
        (
            PipelineShape {
                chunk_spectra: 24,
                ..good
            },
            "chunk_spectra",
        ),
        (
            PipelineShape {
                chunk_spectra: 0,
                ..good
            },
            "chunk_spectra",
        ),
        (PipelineShape { bits: 11, ..good }, "bits"),
        (PipelineShape { slots: 2, ..good }, "slots"),
    ] {
        match GpuPipeline::check_shape(&cfg(), &shape) {
            Err(FError::BadParameter { what: w, .. }) => assert_eq!(w, what),
            other => panic!("{shape:?}: expected a {what} error, got {other:?}"),
        }
    }
    // Chunks shorter than the FIR footprint cannot borrow their tail from one chunk.
    let mut c = FConfig::wideband(1024, 4);
    c.taps = 16;
    let short = PipelineShape {
        chunk_spectra: 12,
        ..good
    };
    assert!(GpuPipeline::check_shape(&c, &short).is_err());
}

/// Chunks pushed through the pipeline (3 slots, so outputs are read before their slot is
/// reused; head-of-next-chunk tail copies; parameters per chunk) give the single-stream
/// backend's output of the whole span, byte for byte up to 1 LSB on ≤ 0.1 % of values,
/// with the same counters.
#[test]
fn gpu_pipeline_matches_one_block() {
    if !gpu::gpu_test_guard("gpu_pipeline_matches_one_block") {
        return;
    }
    let cfg = cfg();
    let (c, k_chunks) = (32usize, 6usize);
    let step = cfg.pfb_step();
    let total = c * k_chunks; // spectra worth of input; k_chunks − 1 chunks are computed
    let xs = [0, 1].map(|p| noise(total * step, 120.0, BITS, 50 + p));
    let bufs = [pack(&xs[0], BITS), pack(&xs[1], BITS)];
    let prm = Params::random(9, total, cfg.channels, 0.9);

    // Reference: one block of (k_chunks − 1)·C spectra on the single-stream backend.
    let m = (k_chunks - 1) * c;
    let mut be = GpuBackend::with_unzip(cfg.clone(), 2).unwrap();
    let pol = |p: usize| prm.pol(p, packed(&bufs[p], BITS, xs[p].len()), m);
    let block = Block {
        spectra: m,
        first_spectrum: 500,
        out_first: 0,
        pols: [pol(0), pol(1)],
    };
    let mut want = vec![0u8; cfg.output_len(m)];
    let ws = be.process(&block, &mut want).unwrap();

    let shape = PipelineShape {
        chunk_spectra: c,
        bits: BITS,
        slots: 3,
    };
    let mut pipe = GpuPipeline::new(cfg.clone(), 2, shape).unwrap();
    let cb = pipe.chunk_bytes();
    assert_eq!(cb, c * step * BITS as usize / 8);
    let ctx = pipe.backend().context().clone();
    let chunk_len = cfg.output_len(c);
    let mut diffs = LsbDiffs::default();
    let mut sat = [0u64; 2];
    let (mut sum_sq, mut clipped) = ([0u64; 2], [0u64; 2]);
    // Bad chunk lengths are errors, and leave the pipeline where it was.
    let short = unsafe { ctx.alloc_pinned::<u8>(cb - 1) }.unwrap();
    let ok = unsafe { ctx.alloc_pinned::<u8>(cb) }.unwrap();
    let p0 = prm.chunk(500, 0..c);
    assert!(matches!(
        pipe.push([&short, &ok], &p0),
        Err(FError::BadLength { .. })
    ));
    assert!(matches!(
        pipe.push(
            [&ok, &ok],
            &BlockParams {
                spectra: c - 1,
                ..p0
            }
        ),
        Err(FError::BadLength { .. })
    ));
    assert_eq!(pipe.pushed(), 0);
    let mut done = Vec::new();
    for k in 0..k_chunks {
        let host = pinned_chunk(&ctx, &bufs, k, cb);
        let params = prm.chunk(500 + (k * c) as u64, k * c..(k + 1) * c);
        let got = pipe.push([&host[0], &host[1]], &params).unwrap();
        assert_eq!(got, k.checked_sub(1).map(|j| j as u64));
        if let Some(j) = got {
            let (out, st) = pipe.output(j).unwrap();
            diffs.add(
                out,
                &want[j as usize * chunk_len..(j as usize + 1) * chunk_len],
            );
            for p in 0..2 {
                sat[p] += st.saturated[p];
                let i = st.input.unwrap()[p];
                sum_sq[p] += i.sum_sq;
                clipped[p] += i.clipped;
                assert_eq!(i.samples, (c * step) as u64);
            }
            done.push(j);
        }
        // `host` may be dropped here: dropping pinned memory waits for its copy.
    }
    assert_eq!(done, (0..k_chunks as u64 - 1).collect::<Vec<_>>());
    // Older chunks are no longer held.
    assert!(pipe.output(0).is_err());
    pipe.synchronize().unwrap();
    assert_eq!(diffs.worse, 0, "values off by more than 1 LSB");
    assert!(
        diffs.one * 1000 <= want.len(),
        "{} values off by 1 LSB of {}",
        diffs.one,
        want.len()
    );
    let wi = ws.input.unwrap();
    for p in 0..2 {
        assert_eq!(sum_sq[p], wi[p].sum_sq, "pol {p} Σx²");
        assert_eq!(clipped[p], wi[p].clipped, "pol {p} clipped");
        assert!(sat[p].abs_diff(ws.saturated[p]) <= 2, "pol {p} saturated");
    }
    assert!(ws.saturated[0] > 0, "the case should saturate some values");
}

/// The FIR's packed-sample decoders (the word-stepping one where a window row is whole
/// 32-bit words, the general one elsewhere: 8 channels with odd widths) against the CPU
/// for every width 2..=16 with sub-byte start offsets: FIR output rtol 1e-5, exact Σx² and
/// clip counts.
#[test]
fn gpu_fir_decoders_match_cpu_for_all_bit_widths() {
    if !gpu::gpu_test_guard("gpu_fir_decoders_match_cpu_for_all_bit_widths") {
        return;
    }
    use crate::compute::fengine::cpu::pfb::fir_real;
    let spectra = 24;
    for channels in [8usize, 64] {
        let mut cfg = FConfig::wideband(channels, 8);
        cfg.dither = Dither::None;
        let step = cfg.pfb_step();
        let mut cpu = CpuBackend::new(cfg.clone()).unwrap();
        let mut gpu = GpuBackend::with_unzip(cfg.clone(), 1).unwrap();
        for bits in 2..=16u32 {
            let offsets = [5usize + bits as usize, 19];
            let seed = 300 + 2 * bits as u64;
            let xs =
                packed_noise_gpu_vs_cpu(&mut gpu, &mut cpu, &cfg, spectra, bits, seed, offsets);
            let got = gpu.fir_output(spectra).unwrap();
            let mut y = vec![0f32; step];
            for p in 0..2 {
                let x: Vec<f32> = xs[p][offsets[p]..].iter().map(|&v| v as f32).collect();
                for s in 0..spectra {
                    fir_real(&x, cpu.weights(), step, s, &mut y);
                    let scale = (y.iter().map(|v| v * v).sum::<f32>() / step as f32).sqrt();
                    for m in 0..channels {
                        let v = got[(s * 2 + p) * channels + m];
                        for (a, b) in [(v.re, y[2 * m]), (v.im, y[2 * m + 1])] {
                            assert!(
                                (a - b).abs() <= 1e-5 * (b.abs() + scale),
                                "{channels} ch, {bits} bits, pol {p}, spectrum {s}, m {m}: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Narrowband (discard and no-discard) through the pipeline: chunks whose compute needs the
/// next chunk's head for both the DDC filter and the PFB footprint, the mixer phase set from
/// each chunk's ADC timestamp, give the single-stream narrowband backend's output of the
/// whole span (≤ 1 LSB on ≤ 0.1 % of values) with the same saturation counts; the shape
/// check refuses chunks shorter than that footprint.
#[test]
fn gpu_pipeline_narrowband_matches_one_block() {
    use crate::compute::fengine::gpu::ddc_tune::candidates;
    use crate::compute::fengine::gpu::narrowband::{
        ddc_taps_per_phase, DdcTuningChoice, GpuNarrowband,
    };
    use crate::compute::fengine::gpu::pipeline::PipelineBackend;
    for no_discard in [false, true] {
        let mut cfg = FConfig::wideband(64, 8);
        cfg.dither_seed = 5;
        cfg.feng_id = 2;
        cfg.n_ants = 4;
        cfg.narrowband = Some(Narrowband {
            decimation: 8,
            centre_frequency: 321e6,
            adc_rate: 1712e6,
            ddc_taps: None,
            weight_pass: 0.005,
            mode: if no_discard {
                NarrowbandMode::NoDiscard {
                    pass_bandwidth: 0.8 * 0.5 * 1712e6 / 8.0,
                }
            } else {
                NarrowbandMode::Discard
            },
        });
        let short = PipelineShape {
            chunk_spectra: 8,
            bits: BITS,
            slots: 3,
        };
        match GpuPipeline::check_shape(&cfg, &short) {
            Err(FError::BadParameter { what, .. }) => assert_eq!(what, "chunk_spectra"),
            other => panic!("short narrowband chunks: {other:?}"),
        }
        assert!(GpuPipeline::check_shape(
            &cfg,
            &PipelineShape {
                chunk_spectra: 32,
                ..short
            }
        )
        .is_ok());
        if !gpu::gpu_test_guard("gpu_pipeline_narrowband_matches_one_block") {
            return;
        }
        let (c, k_chunks) = (32usize, 5usize);
        let sbs = cfg.samples_between_spectra();
        let total = c * k_chunks;
        let xs = [0, 1].map(|p| noise(total * sbs, 150.0, BITS, 70 + p));
        let bufs = [pack(&xs[0], BITS), pack(&xs[1], BITS)];
        let prm = Params::random(11, total, cfg.channels, 0.7);
        let open = || {
            let (s, w) = (cfg.subsampling(), ddc_taps_per_phase(&cfg));
            let t = candidates(s, w)[0];
            GpuNarrowband::with_tuning(cfg.clone(), DdcTuningChoice::Fixed(t)).unwrap()
        };
        let t0 = 987_654_321u64;
        let m = (k_chunks - 1) * c;
        let mut be = open();
        let pol = |p: usize| PolBlock {
            timestamp: t0,
            ..prm.pol(p, packed(&bufs[p], BITS, xs[p].len()), m)
        };
        let block = Block {
            spectra: m,
            first_spectrum: 40,
            out_first: 0,
            pols: [pol(0), pol(1)],
        };
        let mut want = vec![0u8; cfg.output_len(m)];
        let ws = be.process(&block, &mut want).unwrap();
        drop(be);

        let shape = PipelineShape {
            chunk_spectra: c,
            bits: BITS,
            slots: 3,
        };
        let mut pipe =
            GpuPipeline::with_backend(PipelineBackend::Narrowband(open()), shape).unwrap();
        let cb = pipe.chunk_bytes();
        assert_eq!(cb, c * sbs * BITS as usize / 8);
        let ctx = pipe.backend().context().clone();
        let chunk_len = cfg.output_len(c);
        let mut diffs = LsbDiffs::default();
        let mut sat = [0u64; 2];
        for k in 0..k_chunks {
            let host = pinned_chunk(&ctx, &bufs, k, cb);
            let params = prm.chunk(40 + (k * c) as u64, k * c..(k + 1) * c);
            let at = t0 + (k * c * sbs) as u64;
            let got = pipe.push_at([&host[0], &host[1]], &params, at).unwrap();
            assert_eq!(got, k.checked_sub(1).map(|j| j as u64));
            if let Some(j) = got {
                let (out, st) = pipe.output(j).unwrap();
                assert!(st.input.is_none(), "narrowband has no input statistics");
                diffs.add(
                    out,
                    &want[j as usize * chunk_len..(j as usize + 1) * chunk_len],
                );
                for (acc, v) in sat.iter_mut().zip(st.saturated) {
                    *acc += v;
                }
            }
        }
        pipe.synchronize().unwrap();
        assert_eq!(
            diffs.worse, 0,
            "no_discard {no_discard}: values off by more than 1 LSB"
        );
        assert!(
            diffs.one * 1000 <= want.len(),
            "no_discard {no_discard}: {} values off by 1 LSB of {}",
            diffs.one,
            want.len()
        );
        assert!(want.iter().any(|&x| x != 0), "all-zero reference");
        for (p, (a, b)) in sat.iter().zip(ws.saturated).enumerate() {
            assert!(a.abs_diff(b) <= 2, "pol {p} saturated");
        }
        assert!(ws.saturated[0] > 0, "the case should saturate some values");
    }
}
