//! The XB-engine's work per received chunk ([`ChunkFeed`]): the chunk's batches go, in time
//! order, to every correlation output ([`XPipeline`]) and to the beams ([`BPipeline`]).

use super::backend::PipelineError;
use super::beams::BPipeline;
use super::corrprod::XPipeline;
use crate::chunk::placement::FengPlacement;
use crate::chunk::{Chunk, Placement};

/// Feeds received chunks to the outputs: batches inside the received span only (see
/// [`Feed`]), the beams of a chunk formed in one call.
pub struct ChunkFeed {
    batches: ChunkBatches,
    feed: Feed,
}

impl ChunkFeed {
    /// A feed for chunks laid out by `placement`.
    pub fn new(placement: &FengPlacement) -> Self {
        ChunkFeed {
            batches: ChunkBatches::new(placement),
            feed: Feed::default(),
        }
    }

    /// Feeds every batch of `chunk` to `xs` and `beams`.
    pub fn chunk(
        &mut self,
        chunk: &Chunk,
        xs: &mut [XPipeline],
        mut beams: Option<&mut BPipeline>,
    ) -> Result<(), PipelineError> {
        self.batches.gather(chunk);
        if let Some(bp) = beams.as_deref_mut() {
            let b = &self.batches;
            bp.prepare(&b.ts, b.data(), &b.present)?;
        }
        self.feed.chunk(chunk, &self.batches, xs, beams)
    }
}

/// A chunk's batches with an antenna present, back to back (absent antennas zeroed), with
/// their presence and timestamps: the beams of a chunk are formed in one call.
struct ChunkBatches {
    placement: FengPlacement,
    /// Bytes of one batch (every antenna).
    batch_bytes: usize,
    data: Vec<i8>,
    /// Presence, `[batch][antenna]`.
    present: Vec<bool>,
    /// Timestamps of the gathered batches.
    ts: Vec<u64>,
    /// Per batch of the chunk: its index among the gathered ones, if gathered.
    row: Vec<Option<usize>>,
    /// A batch of zeros and its presence (no antenna): batches without data.
    zeros: Vec<i8>,
    absent: Vec<bool>,
}

impl ChunkBatches {
    fn new(placement: &FengPlacement) -> Self {
        let n = placement.n_ants;
        let bpc = placement.batches_per_chunk;
        let batch_bytes = n * placement.slot_bytes();
        ChunkBatches {
            placement: placement.clone(),
            batch_bytes,
            data: vec![0; bpc * batch_bytes],
            present: Vec::with_capacity(bpc * n),
            ts: Vec::with_capacity(bpc),
            row: vec![None; bpc],
            zeros: vec![0; batch_bytes],
            absent: vec![false; n],
        }
    }

    /// Timestamp of batch `b` of `chunk`.
    fn batch_ts(&self, chunk: &Chunk, b: usize) -> u64 {
        (chunk.chunk_id * self.placement.batches_per_chunk as u64 + b as u64)
            * self.placement.batch_step()
    }

    /// True if any heap of batch `b` arrived (even an incomplete one).
    fn received(&self, chunk: &Chunk, b: usize) -> bool {
        let n = self.placement.n_ants;
        (0..n).any(|a| chunk.received[b * n + a] != 0)
    }

    /// Gathers the batches of `chunk` that were received with an antenna present.
    fn gather(&mut self, chunk: &Chunk) {
        let n = self.placement.n_ants;
        let slot = self.placement.slot_bytes();
        self.present.clear();
        self.ts.clear();
        for b in 0..self.row.len() {
            self.row[b] = None;
            if !self.received(chunk, b) || !(0..n).any(|a| chunk.present(b * n + a)) {
                continue;
            }
            let j = self.ts.len();
            self.row[b] = Some(j);
            self.ts.push(self.batch_ts(chunk, b));
            for a in 0..n {
                let s = b * n + a;
                let present = chunk.present(s);
                self.present.push(present);
                let at = j * self.batch_bytes + a * slot;
                let dst = &mut self.data[at..at + slot];
                if present {
                    dst.iter_mut()
                        .zip(chunk.slot(s))
                        .for_each(|(d, &x)| *d = x as i8);
                } else {
                    dst.iter_mut().for_each(|d| *d = 0);
                }
            }
        }
    }

    /// The gathered batches' data.
    fn data(&self) -> &[i8] {
        &self.data[..self.ts.len() * self.batch_bytes]
    }

    /// Data and presence of batch `b` of the chunk: zeros and no antenna for a batch
    /// received without any antenna present.
    fn batch(&self, b: usize) -> (&[i8], &[bool]) {
        let n = self.placement.n_ants;
        match self.row[b] {
            Some(j) => (
                &self.data[j * self.batch_bytes..(j + 1) * self.batch_bytes],
                &self.present[j * n..(j + 1) * n],
            ),
            None => (&self.zeros, &self.absent),
        }
    }
}

/// Batches are fed inside the received span only: none before the first heap, and batches
/// with nothing received after the latest heap wait here until a later heap arrives (at the
/// end of the input they are dropped, not counted as skipped).
#[derive(Default)]
struct Feed {
    started: bool,
    pending_empty: Vec<u64>,
}

impl Feed {
    /// Feeds every batch of `chunk` (gathered in `batches`) to the outputs.
    fn chunk(
        &mut self,
        chunk: &Chunk,
        batches: &ChunkBatches,
        xs: &mut [XPipeline],
        mut beams: Option<&mut BPipeline>,
    ) -> Result<(), PipelineError> {
        for b in 0..batches.row.len() {
            let ts = batches.batch_ts(chunk, b);
            if !batches.received(chunk, b) {
                if self.started {
                    self.pending_empty.push(ts);
                }
                continue;
            }
            self.started = true;
            for t in self.pending_empty.drain(..) {
                feed_batch(t, &batches.zeros, &batches.absent, xs, beams.as_deref_mut())?;
            }
            let (data, present) = batches.batch(b);
            feed_batch(ts, data, present, xs, beams.as_deref_mut())?;
        }
        Ok(())
    }
}

/// One batch to every correlation output and to the beams.
fn feed_batch(
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
