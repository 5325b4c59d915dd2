//! Several engine batches in flight on the GPU ([`FBackend::submit`] / [`FBackend::complete`]):
//! each batch's packed input (both pols, the whole range its blocks read) is uploaded on a
//! host→device stream, straight from the caller's memory when it is page-locked (the
//! engine's chunks: no CPU copy; the caller keeps it until [`FBackend::fence_input`]), else
//! through a slot's pinned staging; the blocks of the batch (cut
//! where a coarse delay changes) are computed one after the other on the backend's stream,
//! each with its per-block parameters uploaded from the slot's pinned staging just before
//! its kernels; the output and counters come back on a device→host stream. With
//! [`DEPTH`] slots the upload of batch n + 1 overlaps the compute of n and the download
//! of n − 1, and the host fills one slot while the GPU works on the others.
//!
//! Ordering between the streams comes from the buffers (cudarc's multi-stream mode records
//! each device buffer's last reader and writer; see [`super::pipeline`]); pinned host
//! buffers make the host wait before rewriting a buffer a copy still reads.

use std::collections::VecDeque;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DevicePtr, PinnedHostSlice};

use super::block::{ensure, BlockParams, DeviceBlock};
use super::pipeline::PipelineBackend;
use super::staged::StagedCompute;
use crate::compute::fengine::cpu::stats::InputStats;
use crate::compute::fengine::cpu::validate_block;
use crate::compute::fengine::FBackend;
use crate::compute::fengine::{Block, BlockStats, FConfig, FError, Samples};

/// Batches a [`Pipelined`] backend holds in flight.
pub(crate) const DEPTH: usize = 4;
/// Bytes after each pol's staged input on the device (the narrowband DDC's read-ahead).
const PAD: usize = 128;

/// Where one block's input sits in its slot: per pol, the staged index of the first window
/// sample and the ADC timestamp of that sample.
#[derive(Debug, Clone, Copy)]
struct StagedBlock {
    bits: u32,
    first: [usize; 2],
    t0: [u64; 2],
    /// Staged bytes per pol.
    bytes: usize,
}

impl PipelineBackend {
    fn swap_device_block(&mut self, b: &mut DeviceBlock) {
        match self {
            PipelineBackend::Wideband(be) => be.swap_block(b),
            PipelineBackend::Narrowband(be) => be.swap_block(b),
        }
    }

    /// Queues the compute of `m` spectra of the swapped-in block's input (as `st` says)
    /// into its output spectra out_first..; `reset`: zero the counters first (else add).
    fn compute_staged(
        &mut self,
        st: &StagedBlock,
        m: usize,
        out_first: usize,
        reset: bool,
    ) -> Result<(), FError> {
        match self {
            PipelineBackend::Wideband(be) => {
                be.stage_in_place(st.bits, st.first, st.bytes);
                be.compute_with(m, out_first, reset)
            }
            PipelineBackend::Narrowband(be) => {
                let needed = be.config().input_samples_needed(m);
                be.stage_packed_pols(st.bits, st.bytes, st.first, needed, st.t0);
                be.compute_with(m, out_first, reset)
            }
        }
    }

    fn process_block(&mut self, block: &Block, out: &mut [u8]) -> Result<BlockStats, FError> {
        match self {
            PipelineBackend::Wideband(be) => be.process(block, out),
            PipelineBackend::Narrowband(be) => be.process(block, out),
        }
    }
}

/// True if all of `d` lies in page-locked host memory the driver knows (registered or
/// allocated through CUDA), so the device can read it by DMA after the call returns.
pub(crate) fn page_locked(ctx: &CudaContext, d: &[u8]) -> bool {
    use cudarc::driver::sys;
    if d.is_empty() || ctx.bind_to_thread().is_err() {
        return false;
    }
    let host = |p: *const u8| {
        let mut t = 0u32;
        // SAFETY: a query about an address; `t` is the u32 the attribute writes.
        let r = unsafe {
            sys::cuPointerGetAttribute(
                (&mut t as *mut u32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                p as sys::CUdeviceptr,
            )
        };
        r == sys::CUresult::CUDA_SUCCESS && t == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32
    };
    host(d.as_ptr()) && host(d[d.len() - 1..].as_ptr())
}

/// One batch's device buffers and pinned host staging.
struct Slot {
    dev: DeviceBlock,
    input: Vec<PinnedHostSlice<u8>>,
    /// Per block of the batch: delay and dither keys.
    params: Vec<(PinnedHostSlice<f32>, PinnedHostSlice<u64>)>,
    gains: PinnedHostSlice<f32>,
    out: Option<PinnedHostSlice<u8>>,
    in_stats: PinnedHostSlice<u64>,
    sat: PinnedHostSlice<u64>,
    /// Recorded after the batch's downloads.
    done: Option<CudaEvent>,
    /// Output bytes of the batch in the slot.
    out_len: usize,
    /// Input samples per pol the statistics cover (wideband), and their width.
    stat_samples: u64,
    bits: u32,
}

/// A GPU backend (wideband or narrowband) with `DEPTH` (4) batches in flight through
/// [`FBackend::submit`] and [`FBackend::complete`] ([`FBackend::process`] stays the
/// synchronous path).
pub struct Pipelined {
    be: PipelineBackend,
    h2d: Arc<CudaStream>,
    d2h: Arc<CudaStream>,
    slots: Vec<Slot>,
    /// Slots holding submitted batches, oldest first.
    queue: VecDeque<usize>,
    next: usize,
    /// Zeros the length of an output (for [`validate_block`]).
    probe: Vec<u8>,
    /// Gains of a batch's later blocks (not uploaded).
    scratch: Vec<f32>,
    /// True while uploads straight from the caller's memory may still be in flight.
    direct_in_flight: bool,
    /// Batches uploaded straight from the caller's page-locked memory, and through staging.
    pub uploads: [u64; 2],
    /// Output staging buffers lent by [`FBackend::complete_lent`] come back here.
    returned: (Sender<PinnedHostSlice<u8>>, Receiver<PinnedHostSlice<u8>>),
    /// Outputs stay on the device ([`FBackend::set_device_output`]): no output download,
    /// batches completed by a device-to-device copy.
    device_output: bool,
}

/// A batch's output staging, lent to a sender; back to its [`Pipelined`] when dropped.
struct LentStaging {
    buf: Option<PinnedHostSlice<u8>>,
    home: Sender<PinnedHostSlice<u8>>,
}

impl crate::mem::LentBytes for LentStaging {
    fn bytes(&self) -> std::io::Result<&[u8]> {
        match &self.buf {
            Some(b) => b
                .as_slice()
                .map_err(|e| std::io::Error::other(format!("{e:?}"))),
            None => Ok(&[]),
        }
    }
}

impl Drop for LentStaging {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            // The Pipelined may be gone: the buffer is then freed here.
            let _ = self.home.try_send(b);
        }
    }
}

fn pinned<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    ctx: &Arc<CudaContext>,
    len: usize,
    host_reads: bool,
) -> Result<PinnedHostSlice<T>, FError> {
    // SAFETY: every element is written before it is read (staging by the host, outputs
    // and counters by the device copies).
    unsafe {
        if host_reads {
            ctx.alloc_pinned_with_flags::<T>(len.max(1), 0)
        } else {
            ctx.alloc_pinned::<T>(len.max(1))
        }
    }
    .map_err(FError::from)
}

impl Pipelined {
    /// Batches in flight on `be` (its pinned staging and device blocks allocated here).
    pub fn new(be: PipelineBackend) -> Result<Self, FError> {
        let ctx = be.context().clone();
        let stream = be.stream().clone();
        let h2d = ctx.new_stream()?;
        let d2h = ctx.new_stream()?;
        let channels = be.config().channels;
        let mut slots = Vec::with_capacity(DEPTH);
        for _ in 0..DEPTH {
            slots.push(Slot {
                dev: DeviceBlock::new(&stream, channels)?,
                input: vec![],
                params: vec![],
                gains: pinned(&ctx, 4 * channels, false)?,
                out: None,
                in_stats: pinned(&ctx, 4, true)?,
                sat: pinned(&ctx, 2, true)?,
                done: None,
                out_len: 0,
                stat_samples: 0,
                bits: 0,
            });
        }
        stream.synchronize()?;
        Ok(Pipelined {
            be,
            h2d,
            d2h,
            slots,
            queue: VecDeque::new(),
            next: 0,
            probe: vec![],
            scratch: vec![],
            direct_in_flight: false,
            uploads: [0, 0],
            returned: crossbeam_channel::unbounded(),
            device_output: false,
        })
    }

    /// The backend that computes the batches.
    pub fn inner(&self) -> &PipelineBackend {
        &self.be
    }

    /// The packed input shared by all blocks of a batch, per pol (checked).
    fn shared_input<'a>(blocks: &[Block<'a>]) -> Result<([&'a [u8]; 2], u32), FError> {
        let bad = |why: &str| FError::BadParameter {
            what: "batch blocks",
            why: why.into(),
        };
        let first = blocks.first().ok_or_else(|| bad("a batch needs a block"))?;
        let mut data: [&[u8]; 2] = [&[], &[]];
        let mut bits = 0;
        for (p, d) in data.iter_mut().enumerate() {
            match first.pols[p].samples {
                Samples::Packed { data, bits: b, .. } => {
                    *d = data;
                    if p == 1 && b != bits {
                        return Err(bad("both pols must have the same sample width"));
                    }
                    bits = b;
                }
                Samples::Decoded { .. } => {
                    return Err(bad("pipelined batches take packed samples"));
                }
            }
        }
        for b in blocks {
            for (p, d) in data.iter().enumerate() {
                match b.pols[p].samples {
                    Samples::Packed { data, bits: w, .. }
                        if std::ptr::eq(data, *d) && w == bits => {}
                    _ => return Err(bad("all blocks of a batch must read the same input")),
                }
            }
        }
        Ok((data, bits))
    }
}

impl FBackend for Pipelined {
    fn config(&self) -> &FConfig {
        self.be.config()
    }

    fn process(&mut self, block: &Block, out: &mut [u8]) -> Result<BlockStats, FError> {
        self.be.process_block(block, out)
    }

    fn depth(&self) -> usize {
        DEPTH
    }

    fn submit(&mut self, blocks: &[Block], out_len: usize) -> Result<(), FError> {
        if self.queue.len() >= self.slots.len() {
            return Err(FError::BadParameter {
                what: "batches in flight",
                why: format!("all {} slots are busy: complete a batch first", DEPTH),
            });
        }
        let cfg = self.be.config().clone();
        self.probe.resize(out_len, 0);
        let n_out = {
            let mut n = 0;
            for b in blocks {
                n = validate_block(&cfg, b, &self.probe[..out_len])?;
            }
            n
        };
        let (data, bits) = Self::shared_input(blocks)?;
        // The blocks must cover the output once, in order.
        let mut covered = 0;
        for b in blocks {
            if b.out_first != covered {
                return Err(FError::BadParameter {
                    what: "batch blocks",
                    why: format!(
                        "block at spectrum {} leaves a gap at {covered}",
                        b.out_first
                    ),
                });
            }
            covered += b.spectra;
        }
        if covered != n_out {
            return Err(FError::BadParameter {
                what: "batch blocks",
                why: format!("blocks cover {covered} of {n_out} spectra"),
            });
        }
        let ctx = self.be.context().clone();
        let stream = self.be.stream().clone();
        let i = self.next;
        let s = &mut self.slots[i];
        // GPU-mapped chunk memory (`--use-vkgdr`): copied device to device, no upload.
        let mapped = data
            .iter()
            .all(|d| d.is_empty() || crate::mem::vkgdr::device_address(d).is_some());
        let direct = mapped || data.iter().all(|d| page_locked(&ctx, d));
        let staged = if direct {
            // Straight from the caller's page-locked memory: no CPU copy.
            data[0].len().max(data[1].len())
        } else {
            // Host staging of the input (waits for the slot's last upload to finish).
            while s.input.len() < 2 {
                s.input.push(pinned(&ctx, 0, false)?);
            }
            for (p, d) in data.iter().enumerate() {
                if s.input[p].len() < d.len() {
                    // Room for small changes of the range length (coarse delay steps).
                    s.input[p] = pinned(&ctx, d.len() + d.len() / 64 + 64, false)?;
                }
                s.input[p].as_mut_slice()?[..d.len()].copy_from_slice(d);
            }
            s.input[0].len().max(s.input[1].len())
        };
        let stride = staged.next_multiple_of(4) + PAD;
        ensure(&stream, &mut s.dev.input, 2 * stride)?;
        s.dev.in_stride = stride;
        for (p, d) in data.iter().enumerate() {
            if direct {
                let mut dst = s.dev.input.slice_mut(p * stride..p * stride + d.len());
                // An async copy from page-locked (or GPU-mapped) memory: the caller keeps
                // it until fence_input.
                if !(mapped && crate::mem::vkgdr::copy_mapped_to_device(&self.h2d, d, &mut dst)?) {
                    self.h2d.memcpy_htod(*d, &mut dst)?;
                }
            } else {
                let mut dst = s
                    .dev
                    .input
                    .slice_mut(p * stride..p * stride + s.input[p].len());
                self.h2d.memcpy_htod(&s.input[p], &mut dst)?;
            }
        }
        self.direct_in_flight |= direct;
        self.uploads[usize::from(!direct)] += 1;
        // Output staging: the slot's own, else one a sender gave back, else a new one (none
        // where outputs stay on the device).
        while !self.device_output && s.out.as_ref().is_none_or(|o| o.len() != out_len) {
            s.out = match self.returned.1.try_recv() {
                Ok(b) => Some(b),
                Err(_) => Some(pinned(&ctx, out_len, true)?),
            };
        }
        ensure(&stream, &mut s.dev.out, out_len)?;
        ensure(&stream, &mut s.dev.delay, 4 * n_out)?;
        ensure(&stream, &mut s.dev.keys, 2 * n_out)?;
        while s.params.len() < blocks.len() {
            s.params.push((
                pinned(&ctx, 4 * n_out, false)?,
                pinned(&ctx, 2 * n_out, false)?,
            ));
        }
        for (k, b) in blocks.iter().enumerate() {
            let m = b.spectra;
            let (hd, hk) = &mut s.params[k];
            if hd.len() < 4 * m || hk.len() < 2 * m {
                *hd = pinned(&ctx, 4 * n_out, false)?;
                *hk = pinned(&ctx, 2 * n_out, false)?;
            }
            // The gains are the batch's (uploaded once, with the first block): later blocks
            // write them to scratch rather than wait for that upload.
            let gains = if k == 0 {
                s.gains.as_mut_slice()?
            } else {
                self.scratch.resize(4 * cfg.channels, 0.0);
                &mut self.scratch[..]
            };
            BlockParams::of(b).fill(
                &cfg,
                &mut hd.as_mut_slice()?[..4 * m],
                &mut hk.as_mut_slice()?[..2 * m],
                gains,
            );
            if k == 0 {
                stream.memcpy_htod(&s.gains, &mut s.dev.gains)?;
            }
            // Whole staging buffers (entries past the block's are not read).
            let mut d = s.dev.delay.slice_mut(..hd.len());
            stream.memcpy_htod(&*hd, &mut d)?;
            let mut kk = s.dev.keys.slice_mut(..hk.len());
            stream.memcpy_htod(&*hk, &mut kk)?;
            let st = StagedBlock {
                bits,
                first: [b.pols[0].offset, b.pols[1].offset],
                t0: [0, 1].map(|p| b.pols[p].timestamp.wrapping_add(b.pols[p].offset as u64)),
                bytes: staged,
            };
            self.be.swap_device_block(&mut s.dev);
            let r = self.be.compute_staged(&st, m, b.out_first, k == 0);
            self.be.swap_device_block(&mut s.dev);
            r?;
        }
        if let (false, Some(out)) = (self.device_output, s.out.as_mut()) {
            self.d2h.memcpy_dtoh(&s.dev.out.slice(..out_len), out)?;
        }
        s.out_len = out_len;
        self.d2h.memcpy_dtoh(&s.dev.in_stats, &mut s.in_stats)?;
        self.d2h.memcpy_dtoh(&s.dev.sat, &mut s.sat)?;
        s.done = Some(self.d2h.record_event(None)?);
        s.stat_samples = (n_out * cfg.pfb_step()) as u64;
        s.bits = bits;
        self.queue.push_back(i);
        self.next = (i + 1) % self.slots.len();
        Ok(())
    }

    fn fence_input(&mut self) -> Result<(), FError> {
        if self.direct_in_flight {
            self.h2d.synchronize()?;
            self.direct_in_flight = false;
        }
        Ok(())
    }

    fn complete(&mut self, out: &mut [u8], wait: bool) -> Result<Option<BlockStats>, FError> {
        let Some(i) = self.ready(wait) else {
            return Ok(None);
        };
        let s = &self.slots[i];
        let src = match (self.device_output, s.out.as_ref()) {
            (false, Some(src)) => src.as_slice()?,
            _ => {
                return Err(FError::BadParameter {
                    what: "complete",
                    why: "the batch's output stays on the device: complete_to_device".into(),
                })
            }
        };
        if out.len() != src.len() {
            return Err(FError::BadOutputLength {
                expected: src.len(),
                got: out.len(),
            });
        }
        out.copy_from_slice(src);
        let stats = self.slot_stats(i)?;
        self.queue.pop_front();
        Ok(Some(stats))
    }

    fn lends_output(&self) -> bool {
        !self.device_output
    }

    fn set_device_output(&mut self, on: bool) -> bool {
        if !self.queue.is_empty() {
            return false;
        }
        self.device_output = on;
        true
    }

    unsafe fn complete_to_device(
        &mut self,
        dst: u64,
        len: usize,
        wait: bool,
    ) -> Result<Option<BlockStats>, FError> {
        if !self.device_output {
            return Err(FError::BadParameter {
                what: "complete_to_device",
                why: "the outputs are downloaded to the host (set_device_output)".into(),
            });
        }
        let Some(i) = self.ready(wait) else {
            return Ok(None);
        };
        let s = &self.slots[i];
        if len != s.out_len {
            return Err(FError::BadOutputLength {
                expected: s.out_len,
                got: len,
            });
        }
        self.be.context().bind_to_thread()?;
        {
            // On the download stream, after the batch's compute (the buffer's last writer).
            let (src, _record) = s.dev.out.device_ptr(&self.d2h);
            // SAFETY: src holds the batch's len bytes; dst is the caller's device range.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(dst, src, len, self.d2h.cu_stream())?
            };
        }
        // The item is complete before the NIC may read it.
        self.d2h.synchronize()?;
        let stats = self.slot_stats(i)?;
        self.queue.pop_front();
        Ok(Some(stats))
    }

    fn complete_lent(
        &mut self,
        wait: bool,
    ) -> Result<Option<crate::compute::fengine::LentBatch>, FError> {
        if self.device_output {
            return Err(FError::BadParameter {
                what: "complete_lent",
                why: "the batch's output stays on the device: complete_to_device".into(),
            });
        }
        let Some(i) = self.ready(wait) else {
            return Ok(None);
        };
        let stats = self.slot_stats(i)?;
        let buf = self.slots[i].out.take();
        self.queue.pop_front();
        let lent = LentStaging {
            buf,
            home: self.returned.0.clone(),
        };
        Ok(Some((stats, Box::new(lent))))
    }
}

impl Pipelined {
    /// The slot of the oldest batch in flight once it is done (`wait`: waiting for it).
    fn ready(&self, wait: bool) -> Option<usize> {
        let &i = self.queue.front()?;
        let s = &self.slots[i];
        (wait || s.done.as_ref().is_none_or(|e| e.is_complete())).then_some(i)
    }

    /// The counters of the finished batch in slot `i` (reading them waits for their
    /// downloads).
    fn slot_stats(&self, i: usize) -> Result<BlockStats, FError> {
        let s = &self.slots[i];
        let st = s.in_stats.as_slice()?;
        let sat = s.sat.as_slice()?;
        let wideband = self.be.config().narrowband.is_none();
        let input = [0, 1].map(|p| InputStats {
            sum_sq: st[p],
            samples: s.stat_samples,
            clipped: st[2 + p],
            bits: s.bits,
        });
        Ok(BlockStats {
            saturated: [sat[0], sat[1]],
            input: wideband.then_some(input),
        })
    }
}
