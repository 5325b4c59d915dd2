//! `gpucbf bench fgpu`: wideband GPU F-engine throughput with data resident on the GPU
//! (each kernel against its own bytes at the measured device copy bandwidth) and end to end
//! from pinned host memory through the three-stream
//! [`GpuPipeline`](crate::compute::fengine::gpu::pipeline::GpuPipeline) (against the measured
//! pinned host→device bandwidth), next to the single-stream copy-compute-copy figure.

use super::measure::{
    bandwidths, gerr, pinned_from, pipelined, pipelined_with, time_gpu, Bandwidths, PipeRates,
    PIPE_CHUNKS, PIPE_WINDOWS,
};
use super::IN_BITS;
use crate::compute::fengine::gpu::staged::StagedCompute;
use crate::compute::fengine::gpu::wideband::{GpuBackend, Tuning};
use crate::compute::fengine::sample_noise;
use crate::compute::fengine::{Block, Dither, FBackend, FConfig, FError};
use crate::gpu::GpuError;
use crate::spead::bitpack;
use num_complex::Complex32;
use serde::Serialize;

/// One wideband line: a channel count and unzip factor, resident and end to end.
#[derive(Debug, Clone, Serialize)]
pub struct WidebandLine {
    /// Channels.
    pub channels: usize,
    /// Unzip factor of the FFT.
    pub unzip: usize,
    /// Spectra per resident block.
    pub spectra: usize,
    /// Resident throughput, real input samples per second (both pols).
    pub resident_samples_per_s: f64,
    /// Its bound: copy bandwidth / bytes moved per sample.
    pub resident_bound_samples_per_s: f64,
    /// Resident / bound.
    pub resident_fraction: f64,
    /// Upload, compute, download one after the other on one stream, samples per second.
    pub single_stream_samples_per_s: f64,
    /// End to end through the three-stream pipeline.
    pub pipeline: PipeRates,
    /// Pipeline steady state / the same uploads alone (its bound).
    pub pipeline_fraction_of_alone: f64,
    /// Pipeline steady state / the 1 GiB host→device bandwidth per sample.
    pub pipeline_fraction_of_h2d: f64,
    /// Pipeline steady state / the duplex host→device bandwidth per sample.
    pub pipeline_fraction_of_duplex: f64,
    /// FIR microseconds per block.
    pub fir_us: f64,
    /// FFT microseconds per block.
    pub fft_us: f64,
    /// Post-processing microseconds per block.
    pub post_us: f64,
    /// Each kernel's bytes per second as a fraction of the copy bandwidth: FIR, FFT, post.
    pub stage_copy_fractions: [f64; 3],
    /// Resident microseconds per block (all kernels).
    pub resident_us: f64,
}

/// Report of the wideband part of `gpucbf bench fgpu`.
#[derive(Debug, Clone, Serialize)]
pub struct WidebandReport {
    /// The bounds, measured once at the start.
    pub bandwidths: Bandwidths,
    /// PFB taps.
    pub taps: usize,
    /// Input sample width.
    pub in_bits: u32,
    /// Bytes the resident kernels move per input sample (FIR + FFT + post).
    pub resident_bytes_per_sample: f64,
    /// One per channel count and unzip factor.
    pub lines: Vec<WidebandLine>,
}

/// PFB taps of the benchmark (katgpucbf default).
const TAPS: usize = 16;
/// Real input samples per pol per resident block (2^26).
const SAMPLES_PER_POL: usize = 1 << 26;
/// Real input samples per pol per pipeline chunk (about 2^23).
const CHUNK_SAMPLES: usize = 1 << 23;
const REPS: usize = 20;
/// Bytes each stage moves per real input sample: FIR reads the packed input and writes one
/// complex f32 per 2 samples; the FFT reads and writes that; the post-processing reads it and
/// writes one byte per sample (8-bit re/im per channel and pol).
const FIR_B: f64 = IN_BITS as f64 / 8.0 + 4.0;
const FFT_B: f64 = 8.0;
const POST_B: f64 = 4.0 + 1.0;

struct Bench {
    cfg: FConfig,
    m: usize,
    packed: Vec<Vec<u8>>,
    fine: Vec<f64>,
    phase: Vec<f64>,
    gains: Vec<Complex32>,
}

impl Bench {
    fn new(channels: usize) -> Bench {
        let step = 2 * channels;
        let m = SAMPLES_PER_POL / step;
        let sph = 256.min(m);
        let mut cfg = FConfig::wideband(channels, sph);
        cfg.taps = TAPS;
        let needed = cfg.input_samples_needed(m);
        let packed = (0..2u64)
            .map(|p| {
                let s = sample_noise(needed, 0x1234_5678 + p);
                let mut b = vec![0u8; bitpack::packed_len(needed, IN_BITS)];
                bitpack::pack(&s, IN_BITS, &mut b);
                b
            })
            .collect();
        Bench {
            cfg,
            m,
            packed,
            fine: vec![0.1; m],
            phase: vec![0.3; m],
            gains: vec![Complex32::new(0.02, 0.0); channels],
        }
    }

    fn block(&self) -> Block<'_> {
        super::packed_block(
            &self.cfg,
            self.m,
            [&self.packed[0], &self.packed[1]],
            &self.fine,
            &self.phase,
            &self.gains,
        )
    }

    /// Real input samples (both pols) of one resident block.
    fn samples(&self) -> f64 {
        (2 * self.m * self.cfg.pfb_step()) as f64
    }
}

/// Per-stage seconds of one resident block with the backend's current tuning.
fn stage_times(be: &mut GpuBackend, m: usize) -> Result<[f64; 3], FError> {
    let stream = be.stream().clone();
    Ok([
        time_gpu(&stream, REPS, || be.launch_fir(m))?,
        time_gpu(&stream, REPS, || be.launch_fft(m))?,
        time_gpu(&stream, REPS, || be.launch_post(m, 0))?,
    ])
}

/// End to end through the pipeline (see [`pipelined`]).
fn pipeline_rate(b: &Bench, unzip: usize) -> Result<PipeRates, FError> {
    let c = (CHUNK_SAMPLES / b.cfg.pfb_step())
        .max(TAPS)
        .next_multiple_of(b.cfg.spectra_per_heap);
    pipelined(&b.cfg, unzip, c, &b.packed, &b.gains)
}

fn pct(x: f64, bound: f64) -> f64 {
    100.0 * x / bound
}

/// Tuning sweep at one configuration: FIR block size and run length, post-processing tile
/// rows, plus two diagnostics (FIR without statistics, post-processing without dither).
fn sweep(b: &Bench, bw: &Bandwidths) -> Result<(), FError> {
    let m = b.m;
    let samples = b.samples();
    let unzip = crate::compute::fengine::gpu::wideband::default_unzip(b.cfg.channels);
    let mut be = GpuBackend::with_unzip(b.cfg.clone(), unzip)?;
    let mut out = vec![0u8; b.cfg.output_len(m)];
    be.process(&b.block(), &mut out)?;
    let stream = be.stream().clone();
    // Variants are changes from the backend's own tuning at this unzip factor.
    let base = be.tuning();
    let gbs = |bytes: f64, t: f64| bytes * samples / t;
    println!(
        "  sweep at {} channels, unzip {unzip} (% of the {:.0} GB/s copy bandwidth):",
        b.cfg.channels,
        bw.copy / 1e9
    );
    let mut line = String::from("    FIR threads x run:");
    for threads in [64u32, 128, 256] {
        for run in [32usize, 64, 128, 256] {
            be.set_tuning(Tuning {
                fir_threads: threads,
                fir_run: run,
                fir_waves: 0,
                ..base
            })?;
            let t = time_gpu(&stream, REPS, || be.launch_fir(m))?;
            line += &format!(" {threads}x{run} {:.1}%", pct(gbs(FIR_B, t), bw.copy));
        }
    }
    println!("{line}");
    let mut line = String::from("    FIR variants:");
    for (name, t) in [
        (
            "general decoder",
            Tuning {
                fir_fast: false,
                ..base
            },
        ),
        (
            "no statistics",
            Tuning {
                fir_stats: false,
                ..base
            },
        ),
        (
            "streaming stores",
            Tuning {
                fir_stcs: true,
                ..base
            },
        ),
        (
            "5 blocks/SM",
            Tuning {
                fir_min_blocks: 5,
                ..base
            },
        ),
    ] {
        be.set_tuning(t)?;
        let t = time_gpu(&stream, REPS, || be.launch_fir(m))?;
        line += &format!(
            " {name} {:.0} us ({:.1}%);",
            t * 1e6,
            pct(gbs(FIR_B, t), bw.copy)
        );
    }
    println!("{line}");
    let mut line = String::from("    post rows x spectrum tiles per block:");
    for rows in [2u32, 4, 8] {
        for tiles in [1usize, 2, 4, 8] {
            be.set_tuning(Tuning {
                post_rows: rows,
                post_tiles: tiles,
                ..base
            })?;
            let t = time_gpu(&stream, REPS, || be.launch_post(m, 0))?;
            line += &format!(
                " {rows}x{tiles} {:.0} us ({:.1}%)",
                t * 1e6,
                pct(gbs(POST_B, t), bw.copy)
            );
        }
    }
    println!("{line}");
    let mut line = String::from("    post variants:");
    let d = base;
    for (name, t) in [
        (
            "sincospif",
            Tuning {
                post_fast_sincos: false,
                ..d
            },
        ),
        (
            "no launch bounds",
            Tuning {
                post_min_blocks: 0,
                ..d
            },
        ),
        ("1 tile", Tuning { post_tiles: 1, ..d }),
        (
            "prefetch",
            Tuning {
                post_prefetch: true,
                post_min_blocks: 0,
                ..d
            },
        ),
        (
            "prefetch 6 blocks/SM",
            Tuning {
                post_prefetch: true,
                post_min_blocks: 6,
                ..d
            },
        ),
        (
            "2 rows 12 blocks/SM",
            Tuning {
                post_rows: 2,
                post_min_blocks: 12,
                ..d
            },
        ),
    ] {
        be.set_tuning(t)?;
        let t = time_gpu(&stream, REPS, || be.launch_post(m, 0))?;
        line += &format!(
            " {name} {:.0} us ({:.1}%);",
            t * 1e6,
            pct(gbs(POST_B, t), bw.copy)
        );
    }
    println!("{line}");
    let mut nd = b.cfg.clone();
    nd.dither = Dither::None;
    let mut be = GpuBackend::with_unzip(nd, unzip)?;
    be.process(&b.block(), &mut out)?;
    let s2 = be.stream().clone();
    let t = time_gpu(&s2, REPS, || be.launch_post(m, 0))?;
    println!(
        "    post without dither {:.0} us ({:.1}%)",
        t * 1e6,
        pct(gbs(POST_B, t), bw.copy)
    );
    Ok(())
}

/// FIR and post-processing launch variants at one configuration, each against the copy
/// bandwidth (compiled and timed here; the backend's tuning is restored after).
fn variants(be: &mut GpuBackend, b: &Bench, bw: &Bandwidths) -> Result<(), FError> {
    let m = b.m;
    let samples = b.samples();
    let base = be.tuning();
    let stream = be.stream().clone();
    let gbs = |bytes: f64, t: f64| bytes * samples / t;
    let fir: [(&str, Tuning); 6] = [
        ("base", base),
        (
            "runs of 128",
            Tuning {
                fir_waves: 0,
                fir_run: 128,
                ..base
            },
        ),
        (
            "waves 1",
            Tuning {
                fir_waves: 1,
                ..base
            },
        ),
        (
            "waves 2",
            Tuning {
                fir_waves: 2,
                ..base
            },
        ),
        (
            "waves 4",
            Tuning {
                fir_waves: 4,
                ..base
            },
        ),
        (
            "waves 8",
            Tuning {
                fir_waves: 8,
                ..base
            },
        ),
    ];
    let mut line = String::from("    FIR variants:");
    for (name, t) in fir {
        be.set_tuning(t)?;
        let t = time_gpu(&stream, REPS, || be.launch_fir(m))?;
        line += &format!(
            " {name} {:.0} us ({:.1}%);",
            t * 1e6,
            pct(gbs(FIR_B, t), bw.copy)
        );
    }
    println!("{line}");
    // Post-processing variants where it was weakest (1k, 32k at unzip 2 and 4) and at 4k.
    let post_here = matches!(
        (b.cfg.channels, be.unzip()),
        (1024, 1) | (4096, 1) | (32768, 2) | (32768, 4)
    );
    if !post_here {
        be.set_tuning(base)?;
        return Ok(());
    }
    let mut line = String::from("    post rows/min blocks:");
    for (rows, mb) in [(4u32, 0u32), (4, 5), (4, 6), (4, 8), (2, 12), (8, 4)] {
        be.set_tuning(Tuning {
            post_rows: rows,
            post_min_blocks: mb,
            ..base
        })?;
        let t = time_gpu(&stream, REPS, || be.launch_post(m, 0))?;
        line += &format!(
            " {rows}/{mb} {:.0} us ({:.1}%);",
            t * 1e6,
            pct(gbs(POST_B, t), bw.copy)
        );
    }
    println!("{line}");
    be.set_tuning(base)?;
    Ok(())
}

/// Whether the older tuning sweep runs at `channels`: GPUCBF_BENCH_SWEEP=1 at 4096 channels,
/// =all at every channel count (unset: none).
fn sweep_at(channels: usize) -> bool {
    match std::env::var("GPUCBF_BENCH_SWEEP").as_deref() {
        Ok("all") => true,
        Ok(_) => channels == 4096,
        Err(_) => false,
    }
}

/// End to end at one configuration for other chunk sizes and slot counts.
fn pipeline_variants(b: &Bench) -> Result<(), FError> {
    let unzip = crate::compute::fengine::gpu::wideband::default_unzip(b.cfg.channels);
    let mut line =
        String::from("    pipeline chunk samples/slots (steady % of alone, uploads % of alone):");
    for (chunk, slots) in [
        (1usize << 22, 4usize),
        (1 << 23, 3),
        (1 << 23, 6),
        (1 << 24, 4),
    ] {
        let c = (chunk / b.cfg.pfb_step())
            .max(TAPS)
            .next_multiple_of(b.cfg.spectra_per_heap);
        let r = pipelined_with(&b.cfg, unzip, c, slots, &b.packed, &b.gains)?;
        line += &format!(
            " 2^{}/{slots} {:.1} GS/s {:.1}% {:.1}%;",
            chunk.trailing_zeros(),
            r.steady / 1e9,
            pct(r.steady, r.alone),
            pct(r.uploads, r.alone)
        );
    }
    println!("{line}");
    Ok(())
}

/// Runs the benchmark and prints one line per (channels, unzip), with each figure as a
/// fraction of its bound; returns them. GPUCBF_BENCH_VARIANTS (set) adds FIR,
/// post-processing and pipeline variants; GPUCBF_BENCH_SWEEP the older tuning sweep (=1 at
/// 4096 channels, =all at every channel count). Variants and sweeps are printed only.
pub fn bench_gpu() -> Result<WidebandReport, FError> {
    if !crate::gpu::gpu_available() {
        return Err(FError::Gpu(GpuError::Unsupported(
            "bench fgpu needs a CUDA device".into(),
        )));
    }
    let mut bw: Option<Bandwidths> = None;
    let total_b = FIR_B + FFT_B + POST_B;
    let variants_wanted = std::env::var_os("GPUCBF_BENCH_VARIANTS").is_some();
    let in_b = IN_BITS as f64 / 8.0;
    let mut lines = Vec::new();
    for channels in [1024usize, 4096, 32768] {
        let b = Bench::new(channels);
        let (m, samples) = (b.m, b.samples());
        let mut out = vec![0u8; b.cfg.output_len(m)];
        for unzip in [1usize, 2, 4] {
            let mut be = GpuBackend::with_unzip(b.cfg.clone(), unzip)?;
            let stream = be.stream().clone();
            let bw = match bw {
                Some(bw) => bw,
                None => {
                    let x = bandwidths(&stream)?;
                    println!(
                        "bench fgpu: device copy {:.0} GB/s (read+write), pinned host->device {:.1} GB/s, \
                         device->host {:.1} GB/s, host->device during device->host {:.1} GB/s",
                        x.copy / 1e9,
                        x.h2d / 1e9,
                        x.d2h / 1e9,
                        x.h2d_duplex / 1e9
                    );
                    println!(
                        "wideband, {TAPS} taps, {IN_BITS}-bit in, 8-bit out, dither on; samples/s count both pols' real input samples; \
                         resident bound = copy bandwidth / {total_b:.2} B (FIR {FIR_B:.2} + FFT {FFT_B:.0} + post {POST_B:.0}); \
                         end-to-end bound = host->device bandwidth / {in_b:.2} B"
                    );
                    bw = Some(x);
                    x
                }
            };
            be.process(&b.block(), &mut out)?;
            let t_res = time_gpu(&stream, REPS, || be.compute(m, 0))?;
            let [t_fir, t_fft, t_post] = stage_times(&mut be, m)?;
            // Single stream: upload, compute, download one after the other.
            let pins = [
                pinned_from(&stream, &b.packed[0])?,
                pinned_from(&stream, &b.packed[1])?,
            ];
            // SAFETY: fully overwritten by the device before it is read.
            let mut pout = unsafe { stream.context().alloc_pinned_with_flags::<u8>(out.len(), 0) }
                .map_err(gerr)?;
            let t_serial = time_gpu(&stream, REPS / 4, || {
                be.upload_pinned([&pins[0], &pins[1]])?;
                be.compute(m, 0)?;
                be.download_pinned(&mut pout)
            })?;
            if variants_wanted {
                variants(&mut be, &b, &bw)?;
            }
            drop(be);
            let e2e = pipeline_rate(&b, unzip)?;
            let res = samples / t_res;
            let res_bound = bw.copy / total_b;
            let duplex = bw.h2d_duplex / in_b;
            println!(
                "channels {channels:>6} unzip {unzip} spectra {m:>6}: resident {:6.1} GS/s ({:4.1}% of {:.0}), single-stream {:5.1} GS/s",
                res / 1e9,
                pct(res, res_bound),
                res_bound / 1e9,
                samples / t_serial / 1e9
            );
            println!(
                "    end-to-end pipelined: steady {:5.1} GS/s (windows {:.1}-{:.1}) = {:4.1}% of the same uploads alone ({:.1} GS/s), {:4.1}% of the 1 GiB H2D ({:.1}), \
                 {:4.1}% of the duplex H2D ({:.1}); all {} chunks incl. drain {:5.1} GS/s ({:4.1}% of alone); \
                 uploads inside the pipeline {:5.1} GS/s ({:4.1}% of alone)",
                e2e.steady / 1e9,
                e2e.steady_range.0 / 1e9,
                e2e.steady_range.1 / 1e9,
                pct(e2e.steady, e2e.alone),
                e2e.alone / 1e9,
                pct(e2e.steady, bw.h2d / in_b),
                bw.h2d / in_b / 1e9,
                pct(e2e.steady, duplex),
                duplex / 1e9,
                PIPE_WINDOWS * PIPE_CHUNKS,
                e2e.window / 1e9,
                pct(e2e.window, e2e.alone),
                e2e.uploads / 1e9,
                pct(e2e.uploads, e2e.alone),
            );
            let gbs = |bytes: f64, t: f64| bytes * samples / t;
            println!(
                "    FIR {:4.0} us ({:4.1}% of copy bw), FFT {:4.0} us ({:4.1}%), post {:4.0} us ({:4.1}%); \
                 kernels {:.0} us of {:.0} us resident",
                t_fir * 1e6,
                pct(gbs(FIR_B, t_fir), bw.copy),
                t_fft * 1e6,
                pct(gbs(FFT_B, t_fft), bw.copy),
                t_post * 1e6,
                pct(gbs(POST_B, t_post), bw.copy),
                (t_fir + t_fft + t_post) * 1e6,
                t_res * 1e6
            );
            lines.push(WidebandLine {
                channels,
                unzip,
                spectra: m,
                resident_samples_per_s: res,
                resident_bound_samples_per_s: res_bound,
                resident_fraction: res / res_bound,
                single_stream_samples_per_s: samples / t_serial,
                pipeline: e2e,
                pipeline_fraction_of_alone: e2e.steady / e2e.alone,
                pipeline_fraction_of_h2d: e2e.steady / (bw.h2d / in_b),
                pipeline_fraction_of_duplex: e2e.steady / duplex,
                fir_us: t_fir * 1e6,
                fft_us: t_fft * 1e6,
                post_us: t_post * 1e6,
                stage_copy_fractions: [
                    gbs(FIR_B, t_fir) / bw.copy,
                    gbs(FFT_B, t_fft) / bw.copy,
                    gbs(POST_B, t_post) / bw.copy,
                ],
                resident_us: t_res * 1e6,
            });
        }
        if sweep_at(channels) {
            sweep(&b, &bw.unwrap_or_default())?;
        }
        if channels == 4096 && variants_wanted {
            pipeline_variants(&b)?;
        }
    }
    Ok(WidebandReport {
        bandwidths: bw.unwrap_or_default(),
        taps: TAPS,
        in_bits: IN_BITS,
        resident_bytes_per_sample: total_b,
        lines,
    })
}
