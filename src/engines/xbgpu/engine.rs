//! The XB-engine loop: F-engine heaps → chunks (batches × antennas, own receive thread) →
//! every batch, straight from the chunk, to each correlation output ([`XPipeline`]) and to
//! the beams ([`BPipeline`], which form a run of batches in one call) through a
//! [`ChunkFeed`], which returns each chunk to the receivers once no output reads it any
//! more; at the end, a [`XbgpuSummary`].

use std::collections::BTreeMap;

use serde::Serialize;
use tracing::info;

use super::beams::{BPipeline, BStats};
use super::corrprod::{XPipeline, XStats};
use super::feed::{ChunkFeed, ChunkInfo};
use crate::chunk::placement::FengPlacement;
use crate::chunk::{Chunk, RecvMonitor};
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

/// What the engine calls after each chunk: the outputs and the chunk (metrics, sensors).
pub type ChunkHook<'a> = dyn FnMut(&[XPipeline], Option<&BPipeline>, &ChunkInfo) + 'a;

/// Drives the engine until the input ends or a stop is requested; `monitor` receives the
/// receive threads' counters as they move; `recv` sets up the receive threads and window;
/// `hook` sees the outputs and the chunk after each chunk.
pub fn run_pipelines(
    recv: RecvSetup,
    placement: FengPlacement,
    mut xs: Vec<XPipeline>,
    mut beams: Option<BPipeline>,
    hook: &mut ChunkHook<'_>,
    monitor: RecvMonitor,
) -> anyhow::Result<XbgpuSummary> {
    let (tx, rx) = crossbeam_channel::bounded::<Chunk>(crate::telemetry::monitor::READY_QUEUE);
    let (back_tx, back_rx) = crossbeam_channel::bounded::<Chunk>(8);
    let chunk_ticks = placement.batch_step() * placement.batches_per_chunk as u64;
    let receiver = spawn_receivers(recv, placement.clone(), chunk_ticks, tx, back_rx, monitor);
    let mut feed = ChunkFeed::new(&placement);
    let stage = |name| crate::telemetry::stages::Stage::new("main", name);
    let (wait_input, outputs, metrics) = (stage("wait_input"), stage("outputs"), stage("metrics"));
    let mut t = std::time::Instant::now();
    while let Ok(chunk) = rx.recv() {
        t = wait_input.since(t);
        // every output is done reading the chunk before it goes back to the receivers
        feed.chunk_then_recycle(chunk, &mut xs, beams.as_mut(), &mut |c| {
            let _ = back_tx.try_send(c);
        })?;
        t = outputs.since(t);
        hook(&xs, beams.as_ref(), &feed.last);
        t = metrics.since(t);
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
