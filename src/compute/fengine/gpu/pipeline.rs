//! Pipelined GPU F-engine over a stream of input chunks: host→device copies on their own
//! stream, the compute (wideband: FIR + FFT + post-processing; narrowband: DDC + FIR + FFT +
//! post-processing) on the backend's stream, device→host copies on a third, with several
//! device blocks in flight so that all three overlap.
//!
//! Chunk k holds `chunk_spectra`·(samples between spectra) packed samples per pol. Its
//! compute also needs the head of chunk k + 1 (wideband: the FIR's (TAPS − 1)·2N samples;
//! narrowband: the PFB footprint in DDC outputs plus the DDC filter's), so once chunk k + 1
//! is on the device its head is copied (device to device, on the upload stream) behind
//! chunk k, and only then is chunk k computed: outputs lag inputs by one chunk. The per-chunk gains,
//! delays and dither keys go through pinned staging buffers per slot and are uploaded on the
//! compute stream just before the kernels, so they never queue behind the bulk copies and
//! the host can fill one slot's while the GPU works on another.
//!
//! Ordering between the streams comes from the buffers themselves: the backend's context
//! runs in cudarc's multi-stream mode, where every device buffer records its last reader and
//! writer with events and each use on another stream waits for them (the upload into a slot
//! waits for the compute that last read it, the compute for the upload and the tail copy,
//! the download for the compute, the next compute into that output for the download).
//! Pinned host buffers likewise make the host wait before it rewrites them.

use std::sync::Arc;

use cudarc::driver::{CudaStream, PinnedHostSlice};

use super::block::{BlockParams, DeviceBlock};
use super::narrowband::GpuNarrowband;
use super::staged::StagedCompute;
use super::wideband::GpuBackend;
use crate::compute::fengine::cpu::stats::InputStats;
use crate::compute::fengine::{BlockStats, FBackend, FConfig, FError};

/// One device block with its pinned host staging.
struct Slot {
    dev: DeviceBlock,
    h_delay: PinnedHostSlice<f32>,
    h_keys: PinnedHostSlice<u64>,
    h_gains: PinnedHostSlice<f32>,
    out: PinnedHostSlice<u8>,
    in_stats: PinnedHostSlice<u64>,
    sat: PinnedHostSlice<u64>,
    /// Chunk whose output (being) downloaded into `out`.
    holds: Option<u64>,
}

/// Shape of a [`GpuPipeline`].
#[derive(Debug, Clone, Copy)]
pub struct PipelineShape {
    /// Spectra per chunk (a multiple of spectra_per_heap, at least TAPS − 1).
    pub chunk_spectra: usize,
    /// Packed big-endian sample width of the input (2..=10, 12 or 16).
    pub bits: u32,
    /// Device blocks in flight (≥ 3: one uploading, one waiting for the next chunk's head,
    /// one computing; 4 lets the download of the previous one overlap too).
    pub slots: usize,
}

/// The compute behind a [`GpuPipeline`].
pub enum PipelineBackend {
    /// A wideband output.
    Wideband(GpuBackend),
    /// A narrowband output.
    Narrowband(GpuNarrowband),
}

impl PipelineBackend {
    /// The configuration of the output.
    pub fn config(&self) -> &FConfig {
        match self {
            PipelineBackend::Wideband(b) => b.config(),
            PipelineBackend::Narrowband(b) => b.config(),
        }
    }

    /// The compute stream.
    pub fn stream(&self) -> &Arc<CudaStream> {
        match self {
            PipelineBackend::Wideband(b) => b.stream(),
            PipelineBackend::Narrowband(b) => b.stream(),
        }
    }

    /// The CUDA context.
    pub fn context(&self) -> &Arc<cudarc::driver::CudaContext> {
        match self {
            PipelineBackend::Wideband(b) => b.context(),
            PipelineBackend::Narrowband(b) => b.context(),
        }
    }

    /// Queues the compute of `c` spectra held by `dev` (packed `bits`-wide input of `bytes`
    /// per pol, first ADC sample at `t0`) into `dev`'s output.
    fn compute_in(
        &mut self,
        dev: &mut DeviceBlock,
        c: usize,
        input: (u32, usize),
        t0: u64,
    ) -> Result<(), FError> {
        match self {
            PipelineBackend::Wideband(b) => {
                b.swap_block(dev);
                let r = b.compute(c, 0);
                b.swap_block(dev);
                r
            }
            PipelineBackend::Narrowband(b) => {
                let nvalid = b.config().input_samples_needed(c);
                b.swap_block(dev);
                b.stage_packed(input.0, input.1, nvalid, t0);
                let r = b.compute(c, 0);
                b.swap_block(dev);
                r
            }
        }
    }
}

/// Pipelined channeliser (wideband or narrowband) of a continuous stream of packed chunks.
pub struct GpuPipeline {
    be: PipelineBackend,
    h2d: Arc<CudaStream>,
    d2h: Arc<CudaStream>,
    slots: Vec<Slot>,
    shape: PipelineShape,
    chunk_bytes: usize,
    tail_bytes: usize,
    /// Chunks uploaded so far.
    pushed: u64,
    /// ADC timestamp of the last chunk pushed.
    last_t0: u64,
}

impl GpuPipeline {
    /// Checks a shape against `cfg` (no GPU needed).
    pub fn check_shape(cfg: &FConfig, shape: &PipelineShape) -> Result<(), FError> {
        cfg.validate()?;
        let bad = |what, why: String| Err(FError::BadParameter { what, why });
        if cfg.narrowband.is_some() {
            GpuNarrowband::check_config(cfg)?;
        }
        if !(2..=10).contains(&shape.bits) && shape.bits != 12 && shape.bits != 16 {
            return bad("bits", format!("{} is not 2..=10, 12 or 16", shape.bits));
        }
        let c = shape.chunk_spectra;
        // The head of the next chunk this one's compute needs.
        let tail = cfg
            .input_samples_needed(c.max(1))
            .saturating_sub(c * cfg.samples_between_spectra());
        if c == 0
            || !c.is_multiple_of(cfg.spectra_per_heap)
            || c * cfg.samples_between_spectra() < tail
        {
            return bad(
                "chunk_spectra",
                format!(
                    "{c} must be a positive multiple of spectra_per_heap {} and span at least the {tail} input samples of the filters' footprint",
                    cfg.spectra_per_heap,
                ),
            );
        }
        if !(c * cfg.samples_between_spectra()).is_multiple_of(8) {
            return bad(
                "chunk_spectra",
                format!("{c} spectra are not a whole number of bytes of packed input"),
            );
        }
        if shape.slots < 3 {
            return bad("slots", format!("{} must be at least 3", shape.slots));
        }
        Ok(())
    }

    /// Opens device 0 (unzip factor `unzip`, see [`GpuBackend::with_unzip`]).
    /// Narrowband configurations get a [`GpuNarrowband`] (`unzip` is then unused).
    pub fn new(cfg: FConfig, unzip: usize, shape: PipelineShape) -> Result<Self, FError> {
        Self::check_shape(&cfg, &shape)?;
        let be = if cfg.narrowband.is_some() {
            PipelineBackend::Narrowband(GpuNarrowband::new(cfg)?)
        } else {
            PipelineBackend::Wideband(GpuBackend::with_unzip(cfg, unzip)?)
        };
        Self::with_backend(be, shape)
    }

    /// Builds the pipeline around an open backend (its tuning is kept).
    pub fn with_backend(be: PipelineBackend, shape: PipelineShape) -> Result<Self, FError> {
        let cfg = be.config().clone();
        Self::check_shape(&cfg, &shape)?;
        let bits = shape.bits as usize;
        let chunk_samples = shape.chunk_spectra * cfg.samples_between_spectra();
        let chunk_bytes = chunk_samples * bits / 8;
        let tail_samples = cfg.input_samples_needed(shape.chunk_spectra) - chunk_samples;
        let tail_bytes = (tail_samples * bits).div_ceil(8);
        let pad = if cfg.narrowband.is_some() {
            super::narrowband::IN_PAD
        } else {
            0
        };
        let ctx = be.context().clone();
        let h2d = ctx.new_stream()?;
        let d2h = ctx.new_stream()?;
        let stream = be.stream().clone();
        let c = shape.chunk_spectra;
        let mut slots = Vec::with_capacity(shape.slots);
        for _ in 0..shape.slots {
            let mut dev = DeviceBlock::new(&stream, cfg.channels)?;
            dev.shape_packed_pad(
                &stream,
                &cfg,
                (shape.bits, chunk_bytes + tail_bytes, pad),
                c,
            )?;
            // SAFETY (all): every element is written before it is read (parameters by
            // `fill`, outputs and counters by the device copies).
            let staged = unsafe {
                (
                    ctx.alloc_pinned::<f32>(4 * c),
                    ctx.alloc_pinned::<u64>(2 * c),
                    ctx.alloc_pinned::<f32>(4 * cfg.channels),
                )
            };
            // Outputs are read by the host: plain (not write-combined) pinned memory.
            let outs = unsafe {
                (
                    ctx.alloc_pinned_with_flags::<u8>(cfg.output_len(c), 0),
                    ctx.alloc_pinned_with_flags::<u64>(4, 0),
                    ctx.alloc_pinned_with_flags::<u64>(2, 0),
                )
            };
            slots.push(Slot {
                dev,
                h_delay: staged.0?,
                h_keys: staged.1?,
                h_gains: staged.2?,
                out: outs.0?,
                in_stats: outs.1?,
                sat: outs.2?,
                holds: None,
            });
        }
        // The buffers were allocated (and zeroed) on the compute stream.
        stream.synchronize()?;
        Ok(GpuPipeline {
            be,
            h2d,
            d2h,
            slots,
            shape,
            chunk_bytes,
            tail_bytes,
            pushed: 0,
            last_t0: 0,
        })
    }

    /// Packed bytes per pol of one chunk.
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    /// The chunk shape the pipeline was built for.
    pub fn shape(&self) -> PipelineShape {
        self.shape
    }

    /// The backend that computes each chunk.
    pub fn backend(&self) -> &PipelineBackend {
        &self.be
    }

    /// The upload, compute and download streams.
    pub fn streams(&self) -> [&Arc<CudaStream>; 3] {
        [&self.h2d, self.be.stream(), &self.d2h]
    }

    /// Queues chunk `k` = [`Self::pushed`] (both pols' packed samples, `chunk_bytes` each,
    /// in pinned memory) with the parameters of its spectra (first_spectrum should be
    /// k·chunk_spectra plus the stream's origin). Then, since chunk k − 1 now has its FIR
    /// tail, queues its compute and its download; returns k − 1 in that case. Blocks the host
    /// only while the slot it reuses is still busy. The chunk's first sample has ADC
    /// timestamp first_spectrum × samples between spectra (see [`Self::push_at`]).
    pub fn push(
        &mut self,
        input: [&PinnedHostSlice<u8>; 2],
        params: &BlockParams,
    ) -> Result<Option<u64>, FError> {
        let sbs = self.be.config().samples_between_spectra() as u64;
        self.push_at(input, params, params.first_spectrum.wrapping_mul(sbs))
    }

    /// [`Self::push`] with the ADC timestamp `t0` of the chunk's first sample given (it
    /// sets the narrowband mixer phase; wideband ignores it).
    pub fn push_at(
        &mut self,
        input: [&PinnedHostSlice<u8>; 2],
        params: &BlockParams,
        t0: u64,
    ) -> Result<Option<u64>, FError> {
        let cfg = self.be.config().clone();
        let c = self.shape.chunk_spectra;
        for h in input {
            if h.len() != self.chunk_bytes {
                return Err(FError::BadLength {
                    what: "pipeline input chunk",
                    expected: self.chunk_bytes,
                    got: h.len(),
                });
            }
        }
        if params.spectra != c {
            return Err(FError::BadLength {
                what: "pipeline chunk spectra",
                expected: c,
                got: params.spectra,
            });
        }
        params.validate(&cfg)?;
        let k = self.pushed;
        let n = self.slots.len();
        let cur = (k % n as u64) as usize;
        {
            // Host staging of this chunk's parameters (waits for the slot's last upload).
            let s = &mut self.slots[cur];
            let d = s.h_delay.as_mut_slice()?;
            let kk = s.h_keys.as_mut_slice()?;
            let g = s.h_gains.as_mut_slice()?;
            params.fill(&cfg, d, kk, g);
            // Bulk upload of the chunk.
            let stride = s.dev.in_stride;
            for (p, h) in input.iter().enumerate() {
                let mut dst = s.dev.input.slice_mut(p * stride..p * stride + h.len());
                self.h2d.memcpy_htod(*h, &mut dst)?;
            }
        }
        self.pushed += 1;
        let prev_t0 = self.last_t0;
        self.last_t0 = t0;
        if k == 0 {
            return Ok(None);
        }
        let prev = (cur + n - 1) % n;
        // This chunk's head becomes the previous chunk's FIR tail.
        {
            let (a, b) = if prev < cur {
                let (lo, hi) = self.slots.split_at_mut(cur);
                (&mut lo[prev], &hi[0])
            } else {
                let (lo, hi) = self.slots.split_at_mut(prev);
                (&mut hi[0], &lo[cur])
            };
            let stride = a.dev.in_stride;
            for p in 0..2 {
                let src = b.dev.input.slice(p * stride..p * stride + self.tail_bytes);
                let o = p * stride + self.chunk_bytes;
                let mut dst = a.dev.input.slice_mut(o..o + self.tail_bytes);
                self.h2d.memcpy_dtod(&src, &mut dst)?;
            }
        }
        self.compute(prev, k - 1, prev_t0)?;
        Ok(Some(k - 1))
    }

    /// Queues parameter upload, kernels and download of chunk `k` (first sample at `t0`) in
    /// slot `i`.
    fn compute(&mut self, i: usize, k: u64, t0: u64) -> Result<(), FError> {
        let c = self.shape.chunk_spectra;
        let stream = self.be.stream().clone();
        let s = &mut self.slots[i];
        let mut d = s.dev.delay.slice_mut(..4 * c);
        stream.memcpy_htod(&s.h_delay, &mut d)?;
        let mut kk = s.dev.keys.slice_mut(..2 * c);
        stream.memcpy_htod(&s.h_keys, &mut kk)?;
        stream.memcpy_htod(&s.h_gains, &mut s.dev.gains)?;
        let input = (self.shape.bits, self.chunk_bytes + self.tail_bytes);
        self.be.compute_in(&mut s.dev, c, input, t0)?;
        let len = s.out.len();
        self.d2h.memcpy_dtoh(&s.dev.out.slice(..len), &mut s.out)?;
        self.d2h.memcpy_dtoh(&s.dev.in_stats, &mut s.in_stats)?;
        self.d2h.memcpy_dtoh(&s.dev.sat, &mut s.sat)?;
        s.holds = Some(k);
        Ok(())
    }

    /// Chunks pushed so far.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    /// The output of chunk `k` ((heap, channel, spectrum-in-heap, pol, re/im) bytes as
    /// [`crate::compute::fengine::FBackend::process`] writes them) and its counters, waiting
    /// for its download. Only the last `slots` computed chunks are still held.
    pub fn output(&self, k: u64) -> Result<(&[u8], BlockStats), FError> {
        let s = &self.slots[(k % self.slots.len() as u64) as usize];
        if s.holds != Some(k) {
            return Err(FError::BadParameter {
                what: "chunk",
                why: format!("chunk {k} is not (or no longer) held by the pipeline"),
            });
        }
        let out = s.out.as_slice()?;
        let st = s.in_stats.as_slice()?;
        let sat = s.sat.as_slice()?;
        let samples = (self.shape.chunk_spectra * self.be.config().pfb_step()) as u64;
        let input = [0, 1].map(|p| InputStats {
            sum_sq: st[p],
            samples,
            clipped: st[2 + p],
            bits: self.shape.bits,
        });
        // Narrowband outputs have no digitiser statistics (like katgpucbf).
        let wideband = matches!(self.be, PipelineBackend::Wideband(_));
        Ok((
            out,
            BlockStats {
                saturated: [sat[0], sat[1]],
                input: wideband.then_some(input),
            },
        ))
    }

    /// Waits until everything queued has finished.
    pub fn synchronize(&self) -> Result<(), FError> {
        for s in self.streams() {
            s.synchronize()?;
        }
        Ok(())
    }
}
