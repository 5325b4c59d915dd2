//! `gpucbf bench fgpu`: wideband GPU F-engine throughput with data resident on the GPU
//! (each kernel against its own bytes at the measured device copy bandwidth) and end to end
//! from pinned host memory through the three-stream [`GpuPipeline`] (against the measured
//! pinned host→device bandwidth), next to the single-stream copy-compute-copy figure.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
use cudarc::driver::{CudaSlice, CudaStream, PinnedHostSlice};

use crate::compute::fengine::gpu::pipeline::{GpuPipeline, PipelineShape};
use crate::compute::fengine::gpu::staged::StagedCompute;
use crate::compute::fengine::gpu::wideband::{GpuBackend, Tuning};
use crate::compute::fengine::sample_noise;
use crate::compute::fengine::BlockParams;
use crate::compute::fengine::{Block, Dither, FBackend, FConfig, FError, PolBlock, Samples};
use crate::gpu::GpuError;
use crate::spead::bitpack;
use num_complex::Complex32;

/// A CUDA library error as an [`FError`] (the compute backends convert with `?`).
pub(crate) fn gerr<E: Into<GpuError>>(e: E) -> FError {
    FError::Gpu(e.into())
}

/// Input sample width and taps of the benchmark (MeerKAT digitiser, katgpucbf default).
const IN_BITS: u32 = 10;
const TAPS: usize = 16;
/// Real input samples per pol per resident block (2^26).
const SAMPLES_PER_POL: usize = 1 << 26;
/// Real input samples per pol per pipeline chunk (about 2^23).
const CHUNK_SAMPLES: usize = 1 << 23;
const PIPE_SLOTS: usize = 4;
const PIPE_CHUNKS: usize = 64;
/// Windows of PIPE_CHUNKS chunks the pipeline is timed over (their median is reported).
const PIPE_WINDOWS: usize = 3;
const REPS: usize = 20;
/// Bytes each stage moves per real input sample: FIR reads the packed input and writes one
/// complex f32 per 2 samples; the FFT reads and writes that; the post-processing reads it and
/// writes one byte per sample (8-bit re/im per channel and pol).
const FIR_B: f64 = IN_BITS as f64 / 8.0 + 4.0;
const FFT_B: f64 = 8.0;
const POST_B: f64 = 4.0 + 1.0;

/// Seconds per call of `f` over `reps` calls, timed with CUDA events on `stream`.
pub(super) fn time_gpu(
    stream: &Arc<CudaStream>,
    reps: usize,
    f: impl FnMut() -> Result<(), FError>,
) -> Result<f64, FError> {
    crate::gpu::time_on_stream(stream, reps, f, gerr)
}

pub(super) fn pinned_from(
    stream: &Arc<CudaStream>,
    data: &[u8],
) -> Result<PinnedHostSlice<u8>, FError> {
    // SAFETY: the memory is fully written below before any use.
    let mut p = unsafe { stream.context().alloc_pinned::<u8>(data.len()) }.map_err(gerr)?;
    p.as_mut_slice().map_err(gerr)?.copy_from_slice(data);
    Ok(p)
}

/// Measured bandwidths, bytes per second.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Bandwidths {
    /// Device-to-device copy (bytes read + written).
    pub(super) copy: f64,
    pub(super) h2d: f64,
    pub(super) d2h: f64,
    /// Host→device while a device→host copy of 0.8× its size runs on another stream.
    pub(super) h2d_duplex: f64,
}

pub(super) fn bandwidths(stream: &Arc<CudaStream>) -> Result<Bandwidths, FError> {
    let len = 1usize << 30;
    let a: CudaSlice<u8> = stream.alloc_zeros(len).map_err(gerr)?;
    let mut b: CudaSlice<u8> = stream.alloc_zeros(len).map_err(gerr)?;
    let t = time_gpu(stream, 10, || stream.memcpy_dtod(&a, &mut b).map_err(gerr))?;
    let copy = 2.0 * len as f64 / t;
    drop(b);
    drop(a);
    let hlen = 1usize << 28;
    let h = pinned_from(stream, &vec![1u8; hlen])?;
    let mut dev: CudaSlice<u8> = stream.alloc_zeros(hlen).map_err(gerr)?;
    let t = time_gpu(stream, 10, || {
        stream.memcpy_htod(&h, &mut dev).map_err(gerr)
    })?;
    let h2d = hlen as f64 / t;
    // Output buffers the host reads are plain pinned memory.
    let mut hout =
        unsafe { stream.context().alloc_pinned_with_flags::<u8>(hlen, 0) }.map_err(gerr)?;
    let t = time_gpu(stream, 10, || {
        stream.memcpy_dtoh(&dev, &mut hout).map_err(gerr)
    })?;
    let d2h = hlen as f64 / t;
    // Both directions at once (the pipeline's steady state: 1.25 B in, 1 B out per sample).
    let other = stream.context().new_stream().map_err(gerr)?;
    let olen = hlen / 5 * 4;
    let odev: CudaSlice<u8> = other.alloc_zeros(olen).map_err(gerr)?;
    let mut ohost =
        unsafe { stream.context().alloc_pinned_with_flags::<u8>(olen, 0) }.map_err(gerr)?;
    other.synchronize().map_err(gerr)?;
    let t = time_gpu(stream, 10, || {
        other.join(stream).map_err(gerr)?;
        other
            .memcpy_dtoh(&odev.slice(..olen), &mut ohost)
            .map_err(gerr)?;
        stream.memcpy_htod(&h, &mut dev).map_err(gerr)?;
        stream.join(&other).map_err(gerr)
    })?;
    let h2d_duplex = hlen as f64 / t;
    Ok(Bandwidths {
        copy,
        h2d,
        d2h,
        h2d_duplex,
    })
}

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
        let pol = |p: usize| PolBlock {
            samples: Samples::Packed {
                data: &self.packed[p],
                bits: IN_BITS,
                len: self.cfg.input_samples_needed(self.m),
            },
            timestamp: 0,
            offset: 0,
            fine_delay: &self.fine,
            phase: &self.phase,
            gains: &self.gains,
        };
        Block {
            spectra: self.m,
            first_spectrum: 0,
            out_first: 0,
            pols: [pol(0), pol(1)],
        }
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

/// Input samples per second (both pols) through a [`GpuPipeline`].
#[derive(Debug, Clone, Copy)]
pub(super) struct PipeRates {
    /// All PIPE_WINDOWS × PIPE_CHUNKS chunks from the first upload's start to the last
    /// download's end (the pipeline's drain, one chunk's compute and download, included).
    pub(super) window: f64,
    /// Steady state, the median over the windows: chunks per second between the ends of
    /// the downloads of a window's first and last chunks (the first window's fill left
    /// out).
    pub(super) steady: f64,
    /// The lowest and highest window of `steady`.
    pub(super) steady_range: (f64, f64),
    /// The uploads inside the pipeline over the same chunks (median over the windows),
    /// i.e. the host→device rate the pipeline got while everything else ran.
    pub(super) uploads: f64,
    /// The same uploads with nothing else running, right after (median of PIPE_WINDOWS
    /// repeats): the bound.
    pub(super) alone: f64,
}

/// End to end through a [`GpuPipeline`] of `cfg` (wideband or narrowband) with chunks of
/// `c` spectra taken from the start of `packed` (at least two chunks per pol), over
/// PIPE_CHUNKS chunks after a warm-up (see [`PipeRates`]).
pub(super) fn pipelined(
    cfg: &FConfig,
    unzip: usize,
    c: usize,
    packed: &[Vec<u8>],
    gains: &[Complex32],
) -> Result<PipeRates, FError> {
    pipelined_with(cfg, unzip, c, PIPE_SLOTS, packed, gains)
}

/// [`pipelined`] with `slots` device blocks in flight.
fn pipelined_with(
    cfg: &FConfig,
    unzip: usize,
    c: usize,
    slots: usize,
    packed: &[Vec<u8>],
    gains: &[Complex32],
) -> Result<PipeRates, FError> {
    let sbs = cfg.samples_between_spectra();
    let shape = PipelineShape {
        chunk_spectra: c,
        bits: IN_BITS,
        slots,
    };
    let mut pipe = GpuPipeline::new(cfg.clone(), unzip, shape)?;
    let cb = pipe.chunk_bytes();
    let stream = pipe.backend().stream().clone();
    // Two pinned chunks per pol, alternated (the contents do not matter for timing).
    let hosts: Vec<[PinnedHostSlice<u8>; 2]> = (0..2)
        .map(|i| -> Result<_, FError> {
            let o = i * cb;
            let part = |p: usize| {
                packed[p].get(o..o + cb).ok_or(FError::BadLength {
                    what: "bench input",
                    expected: o + cb,
                    got: packed[p].len(),
                })
            };
            Ok([
                pinned_from(&stream, part(0)?)?,
                pinned_from(&stream, part(1)?)?,
            ])
        })
        .collect::<Result<_, _>>()?;
    let fine = vec![0.1; c];
    let phase = vec![0.3; c];
    let push = |pipe: &mut GpuPipeline, k: usize| -> Result<(), FError> {
        let h = &hosts[k % 2];
        let params = BlockParams {
            first_spectrum: (k * c) as u64,
            spectra: c,
            fine_delay: [&fine, &fine],
            phase: [&phase, &phase],
            gains: [gains, gains],
        };
        pipe.push([&h[0], &h[1]], &params).map(|_| ())
    };
    for k in 0..slots + 1 {
        push(&mut pipe, k)?;
    }
    pipe.synchronize()?;
    let [h2d, _, d2h] = pipe.streams();
    let (h2d, d2h) = (h2d.clone(), d2h.clone());
    let start = h2d.record_event(Some(CU_EVENT_DEFAULT)).map_err(gerr)?;
    // After push k: the upload of chunk k (and its head copied behind chunk k − 1) on the
    // upload stream, the download of chunk k − 1 on the download stream. PIPE_WINDOWS
    // windows of PIPE_CHUNKS chunks back to back (the rates vary from window to window).
    let (mut up, mut down) = (Vec::new(), Vec::new());
    let total = PIPE_WINDOWS * PIPE_CHUNKS;
    for k in slots + 1..slots + 1 + total {
        push(&mut pipe, k)?;
        up.push(h2d.record_event(Some(CU_EVENT_DEFAULT)).map_err(gerr)?);
        down.push(d2h.record_event(Some(CU_EVENT_DEFAULT)).map_err(gerr)?);
    }
    let end = d2h.record_event(Some(CU_EVENT_DEFAULT)).map_err(gerr)?;
    end.synchronize().map_err(gerr)?;
    let secs = start.elapsed_ms(&end).map_err(gerr)? as f64 * 1e-3;
    let chunk = (2 * c * sbs) as f64;
    // Chunks per second over window w, from the end of its first event (after the fill in
    // the first window) to the end of its last.
    let rate = |ev: &[cudarc::driver::CudaEvent], w: usize| -> Result<f64, FError> {
        let a = w * PIPE_CHUNKS + if w == 0 { slots } else { 0 };
        let b = (w + 1) * PIPE_CHUNKS - 1;
        let ms = ev[a].elapsed_ms(&ev[b]).map_err(gerr)?;
        Ok((b - a) as f64 * chunk / (ms as f64 * 1e-3))
    };
    let mut steady = (0..PIPE_WINDOWS)
        .map(|w| rate(&down, w))
        .collect::<Result<Vec<_>, _>>()?;
    let mut uploads = (0..PIPE_WINDOWS)
        .map(|w| rate(&up, w))
        .collect::<Result<Vec<_>, _>>()?;
    pipe.synchronize()?;
    // The same host→device copies with nothing else running, PIPE_WINDOWS times.
    let mut dev: CudaSlice<u8> = h2d.alloc_zeros(cb).map_err(gerr)?;
    h2d.synchronize().map_err(gerr)?;
    let mut alone = Vec::new();
    for _ in 0..PIPE_WINDOWS {
        let t0 = h2d.record_event(Some(CU_EVENT_DEFAULT)).map_err(gerr)?;
        for k in 0..PIPE_CHUNKS {
            for h in &hosts[k % 2] {
                h2d.memcpy_htod(h, &mut dev).map_err(gerr)?;
            }
        }
        let t1 = h2d.record_event(Some(CU_EVENT_DEFAULT)).map_err(gerr)?;
        t1.synchronize().map_err(gerr)?;
        let secs = t0.elapsed_ms(&t1).map_err(gerr)? as f64 * 1e-3;
        alone.push(PIPE_CHUNKS as f64 * chunk / secs);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(PipeRates {
        window: total as f64 * chunk / secs,
        steady: median(&mut steady),
        steady_range: (steady[0], steady[steady.len() - 1]),
        uploads: median(&mut uploads),
        alone: median(&mut alone),
    })
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
/// fraction of its bound. GPUCBF_BENCH_VARIANTS (set) adds FIR, post-processing and
/// pipeline variants; GPUCBF_BENCH_SWEEP the older tuning sweep (see [`sweep_at`]).
pub fn bench_gpu() -> Result<(), FError> {
    if !crate::gpu::gpu_available() {
        return Err(FError::Gpu(GpuError::Unsupported(
            "bench fgpu needs a CUDA device".into(),
        )));
    }
    let mut bw: Option<Bandwidths> = None;
    let total_b = FIR_B + FFT_B + POST_B;
    let variants_wanted = std::env::var_os("GPUCBF_BENCH_VARIANTS").is_some();
    let in_b = IN_BITS as f64 / 8.0;
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
        }
        if sweep_at(channels) {
            sweep(&b, &bw.unwrap_or_default())?;
        }
        if channels == 4096 && variants_wanted {
            pipeline_variants(&b)?;
        }
    }
    Ok(())
}
