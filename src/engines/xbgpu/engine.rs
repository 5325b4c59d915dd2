//! The XB-engine loop: F-engine heaps → chunks (batches × antennas, own receive thread) →
//! every batch to each correlation output ([`XPipeline`]) and to the beams ([`BPipeline`],
//! which form a chunk's batches in one call); at the end, a [`XbgpuSummary`].

use std::collections::BTreeMap;

use serde::Serialize;
use tracing::info;

use super::backend::PipelineError;
use super::beams::{BPipeline, BStats};
use super::corrprod::{XPipeline, XStats};
use crate::chunk::placement::FengPlacement;
use crate::chunk::{Chunk, Placement, RecvMonitor};
use crate::engines::common::recv::{rejected_counts, spawn_receivers, RecvSetup};

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct XbgpuSummary {
    /// F-engine heaps received.
    pub input_heaps: u64,
    /// F-engine heaps missing.
    pub input_missing_heaps: u64,
    /// F-engine heaps received incomplete.
    pub input_incomplete_heaps: u64,
    /// Packets the receiver rejected, by reason (only reasons that occurred).
    pub recv_rejected: BTreeMap<String, u64>,
    /// Per correlation output counters.
    pub corrprods: Vec<XStats>,
    /// Per beam counters.
    pub beams: Vec<BStats>,
    /// What the receiver rejected and why, each kind once (a set-up mismatch, another
    /// substream's heaps, far timestamps); absent when nothing was.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recv_notes: Vec<String>,
    /// Times the receive window moved because the stream really moved (absent when 0).
    #[serde(skip_serializing_if = "crate::engines::common::recv::is_zero")]
    pub recv_window_moves: u64,
}

/// Drives the engine until the input ends or a stop is requested; `monitor` receives the
/// receive threads' counters as they move; `recv` sets up the receive threads and window.
pub fn run_pipelines(
    recv: RecvSetup,
    placement: FengPlacement,
    mut xs: Vec<XPipeline>,
    mut beams: Option<BPipeline>,
    hook: &mut dyn FnMut(&[XPipeline], Option<&BPipeline>),
    monitor: RecvMonitor,
) -> anyhow::Result<XbgpuSummary> {
    let (tx, rx) = crossbeam_channel::bounded::<Chunk>(4);
    let (back_tx, back_rx) = crossbeam_channel::bounded::<Chunk>(8);
    let chunk_ticks = placement.batch_step() * placement.batches_per_chunk as u64;
    let receiver = spawn_receivers(recv, placement.clone(), chunk_ticks, tx, back_rx, monitor);
    let mut batches = ChunkBatches::new(&placement);
    let mut feed = Feed::default();
    for chunk in rx.iter() {
        batches.gather(&chunk);
        if let Some(bp) = beams.as_mut() {
            bp.prepare(&batches.ts, batches.data(), &batches.present)?;
        }
        feed.chunk(&chunk, &batches, &mut xs, beams.as_mut())?;
        let _ = back_tx.try_send(chunk);
        hook(&xs, beams.as_ref());
    }
    let recv = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receive thread panicked"))??;
    for x in xs.iter_mut() {
        x.finish()?;
    }
    if let Some(bp) = beams.as_mut() {
        bp.finish()?;
    }
    let summary = XbgpuSummary {
        input_heaps: recv.heaps,
        input_missing_heaps: recv.missing_heaps,
        input_incomplete_heaps: recv.incomplete_heaps,
        recv_rejected: rejected_counts(&recv),
        corrprods: xs.iter().map(|x| x.stats.clone()).collect(),
        beams: beams.map(|b| b.stats.clone()).unwrap_or_default(),
        recv_notes: recv.notes.clone(),
        recv_window_moves: recv.window_moves,
    };
    info!(?summary, "xbgpu finished");
    Ok(summary)
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
