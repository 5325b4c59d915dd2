//! What the F-engine benchmarks measure against: device copy and host↔device bandwidths, and
//! the end-to-end rate through the three-stream [`GpuPipeline`] next to the same uploads alone.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
use cudarc::driver::{CudaSlice, CudaStream, PinnedHostSlice};

use super::IN_BITS;
use crate::compute::fengine::gpu::pipeline::{GpuPipeline, PipelineShape};
use crate::compute::fengine::BlockParams;

use crate::compute::fengine::{FConfig, FError};
use crate::gpu::GpuError;
use num_complex::Complex32;
use serde::Serialize;

/// A CUDA library error as an [`FError`] (the compute backends convert with `?`).
pub(super) fn gerr<E: Into<GpuError>>(e: E) -> FError {
    FError::Gpu(e.into())
}

/// Device blocks in flight in the pipeline.
const PIPE_SLOTS: usize = 4;
/// Chunks per timed window of the pipeline.
pub(super) const PIPE_CHUNKS: usize = 64;
/// Windows of PIPE_CHUNKS chunks the pipeline is timed over (their median is reported).
pub(super) const PIPE_WINDOWS: usize = 3;

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
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Bandwidths {
    /// Device-to-device copy (bytes read + written).
    #[serde(rename = "copy_bytes_per_s")]
    pub copy: f64,
    /// Pinned host→device.
    #[serde(rename = "h2d_bytes_per_s")]
    pub h2d: f64,
    /// Device→pinned host.
    #[serde(rename = "d2h_bytes_per_s")]
    pub d2h: f64,
    /// Host→device while a device→host copy of 0.8× its size runs on another stream.
    #[serde(rename = "h2d_duplex_bytes_per_s")]
    pub h2d_duplex: f64,
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

/// Input samples per second (both pols) through a [`GpuPipeline`].
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PipeRates {
    /// All PIPE_WINDOWS × PIPE_CHUNKS chunks from the first upload's start to the last
    /// download's end (the pipeline's drain, one chunk's compute and download, included).
    #[serde(rename = "window_samples_per_s")]
    pub window: f64,
    /// Steady state, the median over the windows: chunks per second between the ends of
    /// the downloads of a window's first and last chunks (the first window's fill left
    /// out).
    #[serde(rename = "steady_samples_per_s")]
    pub steady: f64,
    /// The lowest and highest window of `steady`.
    #[serde(rename = "steady_range_samples_per_s")]
    pub steady_range: (f64, f64),
    /// The uploads inside the pipeline over the same chunks (median over the windows),
    /// i.e. the host→device rate the pipeline got while everything else ran.
    #[serde(rename = "uploads_samples_per_s")]
    pub uploads: f64,
    /// The same uploads with nothing else running, right after (median of PIPE_WINDOWS
    /// repeats): the bound.
    #[serde(rename = "alone_samples_per_s")]
    pub alone: f64,
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
pub(super) fn pipelined_with(
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
