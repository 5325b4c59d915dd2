//! The XB-engine's work per received chunk ([`ChunkFeed`]): the chunk's batches go, in time
//! order, to every correlation output ([`XPipeline`]) and to the beams ([`BPipeline`])
//! straight from the chunk, without a copy.
//!
//! A chunk's slots are batch-major (slot `b · n_ants + a`), so a batch (every antenna of one
//! timestamp) is contiguous bytes of the chunk, and so are consecutive batches. Slots of
//! absent antennas are zeroed in place (the chunk is the engine's until it goes back to the
//! receivers); then each run of consecutive batches with an antenna present goes to the
//! beams in one call, and to each correlation output in as few calls as its accumulations
//! allow. Before a chunk goes back, every output waits until no copy queued from it is still
//! reading it ([`ChunkFeed::chunk_then_recycle`]): a GPU copies registered chunk memory by
//! DMA after the call that queued the copy has returned.

use tracing::error;

use super::backend::PipelineError;
use super::beams::BPipeline;
use super::corrprod::XPipeline;
use crate::chunk::placement::FengPlacement;
use crate::chunk::{Chunk, Placement};

/// Feeds received chunks to the outputs: batches inside the received span only (none before
/// the first heap; batches with nothing received after the latest heap wait until a later
/// heap arrives, and at the end of the input they are dropped, not counted as skipped).
pub struct ChunkFeed {
    n_ants: usize,
    batches_per_chunk: usize,
    slot_bytes: usize,
    batch_step: u64,
    /// Presence of the current chunk's slots, `[batch][antenna]`.
    present: Vec<bool>,
    /// Per batch of the current chunk: some heap (even an incomplete one) arrived.
    received: Vec<bool>,
    /// Per batch of the current chunk: some antenna is present.
    any_present: Vec<bool>,
    /// Timestamps of the current chunk's batches.
    ts: Vec<u64>,
    started: bool,
    /// Timestamps of batches with nothing received since the latest heap.
    pending_empty: Vec<u64>,
    /// A batch of zeros and its presence (no antenna): batches without data.
    zeros: Vec<i8>,
    absent: Vec<bool>,
    /// The latest chunk fed, as the receive sensors see it.
    pub last: ChunkInfo,
}

/// One received chunk as the receive sensors see it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkInfo {
    /// ADC timestamp of its first batch.
    pub start: u64,
    /// ADC timestamp just past its last batch.
    pub end: u64,
    /// Some heap of it arrived.
    pub heaps: bool,
    /// Heaps missing from it (from the first heap of the stream on).
    pub missing: u64,
}

impl ChunkFeed {
    /// A feed for chunks laid out by `placement`.
    pub fn new(placement: &FengPlacement) -> Self {
        let (n, bpc) = (placement.n_ants, placement.batches_per_chunk);
        ChunkFeed {
            n_ants: n,
            batches_per_chunk: bpc,
            slot_bytes: placement.slot_bytes(),
            batch_step: placement.batch_step(),
            present: vec![false; bpc * n],
            received: vec![false; bpc],
            any_present: vec![false; bpc],
            ts: vec![0; bpc],
            started: false,
            pending_empty: Vec::new(),
            zeros: vec![0; n * placement.slot_bytes()],
            absent: vec![false; n],
            last: ChunkInfo::default(),
        }
    }

    /// Feeds `chunk` ([`ChunkFeed::chunk`]), then waits until no output still reads it
    /// ([`XPipeline::fence_input`], [`BPipeline::fence_input`]) and hands it to `recycle`
    /// (the receivers), also when feeding failed. If the wait itself fails, a copy may still
    /// be reading the chunk: it is leaked rather than reused or unmapped under the copy.
    /// Returns the first error.
    pub fn chunk_then_recycle(
        &mut self,
        mut chunk: Chunk,
        xs: &mut [XPipeline],
        mut beams: Option<&mut BPipeline>,
        recycle: &mut dyn FnMut(Chunk),
    ) -> Result<(), PipelineError> {
        let fed = self.chunk(&mut chunk, xs, beams.as_deref_mut());
        match fence_inputs(xs, beams) {
            Ok(()) => {
                recycle(chunk);
                fed
            }
            Err(e) => {
                error!(error = %e, "waiting for the copies from a chunk failed: chunk leaked");
                std::mem::forget(chunk);
                fed.and(Err(e))
            }
        }
    }

    /// Feeds every batch of `chunk` to `xs` and `beams`, zeroing the slots of absent
    /// antennas in place first. The outputs may still be copying from the chunk when this
    /// returns: see [`ChunkFeed::chunk_then_recycle`].
    pub fn chunk(
        &mut self,
        chunk: &mut Chunk,
        xs: &mut [XPipeline],
        mut beams: Option<&mut BPipeline>,
    ) -> Result<(), PipelineError> {
        self.scan(chunk);
        if let Some(bp) = beams.as_deref() {
            bp.taken(self.last.end);
        }
        let data = as_i8(&chunk.data);
        let bpc = self.batches_per_chunk;
        let mut b = 0;
        while b < bpc {
            if !self.received[b] {
                if self.started {
                    self.pending_empty.push(self.ts[b]);
                }
                b += 1;
                continue;
            }
            self.started = true;
            for t in self.pending_empty.drain(..) {
                feed_one(t, &self.zeros, &self.absent, xs, beams.as_deref_mut())?;
            }
            if !self.any_present[b] {
                feed_one(
                    self.ts[b],
                    &self.zeros,
                    &self.absent,
                    xs,
                    beams.as_deref_mut(),
                )?;
                b += 1;
                continue;
            }
            let end = (b..bpc).find(|&k| !self.any_present[k]).unwrap_or(bpc);
            self.run(b, end, data, xs, beams.as_deref_mut())?;
            b = end;
        }
        Ok(())
    }

    /// Presence, timestamps and which batches arrived ([`ChunkFeed::last`]); zeroes the
    /// slots of absent antennas in batches with an antenna present (the only ones whose
    /// bytes are read).
    fn scan(&mut self, chunk: &mut Chunk) {
        let (n, slot) = (self.n_ants, self.slot_bytes);
        let mut counting = self.started;
        let mut missing = 0;
        for b in 0..self.batches_per_chunk {
            let slots = b * n..(b + 1) * n;
            self.ts[b] =
                (chunk.chunk_id * self.batches_per_chunk as u64 + b as u64) * self.batch_step;
            self.received[b] = chunk.received[slots.clone()].iter().any(|&r| r != 0);
            for s in slots.clone() {
                self.present[s] = chunk.present(s);
            }
            self.any_present[b] = self.present[slots.clone()].iter().any(|&p| p);
            counting |= self.received[b];
            if counting {
                missing += self.present[slots.clone()].iter().filter(|&&p| !p).count() as u64;
            }
            if self.any_present[b] {
                for s in slots.filter(|&s| !self.present[s]) {
                    chunk.data[s * slot..(s + 1) * slot].fill(0);
                }
            }
        }
        let step = self.batch_step * self.batches_per_chunk as u64;
        self.last = ChunkInfo {
            start: chunk.chunk_id * step,
            end: (chunk.chunk_id + 1) * step,
            heaps: self.received.iter().any(|&r| r),
            missing,
        };
    }

    /// Batches `b..end` of the chunk, each with an antenna present: the beams of all of them
    /// in one call, then, between the accumulation boundaries of the outputs, each output's
    /// share in one call and the beam heaps of those batches (the heaps leave in the order
    /// a batch-by-batch feed sends them).
    fn run(
        &self,
        b: usize,
        end: usize,
        data: &[i8],
        xs: &mut [XPipeline],
        mut beams: Option<&mut BPipeline>,
    ) -> Result<(), PipelineError> {
        let (n, bb) = (self.n_ants, self.n_ants * self.slot_bytes);
        let rows = |k: usize, e: usize| (&data[k * bb..e * bb], &self.present[k * n..e * n]);
        if let Some(bp) = beams.as_deref_mut() {
            let (d, p) = rows(b, end);
            bp.prepare(&self.ts[b..end], d, p)?;
        }
        let mut k = b;
        while k < end {
            let left = xs
                .iter()
                .map(|x| x.batches_left(self.ts[k]))
                .min()
                .unwrap_or(u64::MAX);
            let e = end.min(k.saturating_add(usize::try_from(left).unwrap_or(usize::MAX)));
            let (d, p) = rows(k, e);
            for x in xs.iter_mut() {
                x.batches(self.ts[k], d, p)?;
            }
            if let Some(bp) = beams.as_deref_mut() {
                for m in k..e {
                    let (d, p) = rows(m, m + 1);
                    bp.batch(self.ts[m], d, p)?;
                }
            }
            k = e;
        }
        Ok(())
    }
}

/// Waits until no output still reads host input it was handed.
fn fence_inputs(xs: &mut [XPipeline], beams: Option<&mut BPipeline>) -> Result<(), PipelineError> {
    let mut first = Ok(());
    for x in xs.iter_mut() {
        first = first.and(x.fence_input());
    }
    if let Some(bp) = beams {
        first = first.and(bp.fence_input());
    }
    first
}

/// One batch to every correlation output and to the beams.
fn feed_one(
    ts: u64,
    data: &[i8],
    present: &[bool],
    xs: &mut [XPipeline],
    beams: Option<&mut BPipeline>,
) -> Result<(), PipelineError> {
    for x in xs.iter_mut() {
        x.batch(ts, data, present)?;
    }
    if let Some(bp) = beams {
        bp.batch(ts, data, present)?;
    }
    Ok(())
}

/// Chunk bytes as the int8 samples they are.
fn as_i8(b: &[u8]) -> &[i8] {
    // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
    unsafe { std::slice::from_raw_parts(b.as_ptr() as *const i8, b.len()) }
}
