//! The F-engine loop: receive digitiser heaps into chunks (own thread), place them on the
//! common timeline of a [`SampleStore`], let every output [`Pipeline`] take the batches
//! whose input is in, trim what no output still needs; at the end, a [`FgpuSummary`].

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;
use tracing::{info, warn};

use super::pipeline::{OutputStats, Pipeline};
use super::store::SampleStore;
use crate::chunk::placement::DigitiserPlacement;
use crate::chunk::{Chunk, RecvMonitor};
use crate::engines::common::recv::{rejected_counts, spawn_receivers, RecvSetup};
use crate::net::recv::PacketSource;

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct FgpuSummary {
    /// Digitiser heaps received per pol.
    pub input_heaps: [u64; 2],
    /// Digitiser heaps missing inside the received span, per pol.
    pub input_missing_heaps: [u64; 2],
    /// Digitiser samples at the extreme codes, per pol.
    pub input_clipped_samples: [u64; 2],
    /// Input power relative to a full-scale sine (dB), per pol.
    pub input_rms_dbfs: [f64; 2],
    /// Packets the receiver rejected, by reason (only reasons that occurred).
    pub recv_rejected: BTreeMap<String, u64>,
    /// Per-output counters.
    pub outputs: Vec<OutputStats>,
    /// What the receiver rejected and why, each kind once (a set-up mismatch, a foreign
    /// stream, far timestamps); absent when nothing was.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recv_notes: Vec<String>,
    /// Times the receive window moved because the stream really moved (absent when 0).
    #[serde(skip_serializing_if = "crate::engines::common::recv::is_zero")]
    pub recv_window_moves: u64,
}

/// Drives the engine until the input ends (pcap) or a stop is requested.
pub fn run_pipelines(
    src: Box<dyn PacketSource>,
    placement: DigitiserPlacement,
    pipelines: Vec<Pipeline>,
    bits: u32,
    hook: &mut dyn FnMut(&SampleStore, &[Pipeline]),
) -> anyhow::Result<FgpuSummary> {
    run_pipelines_monitored(
        RecvSetup::single(src),
        placement,
        pipelines,
        bits,
        hook,
        Box::new(|_, _| {}),
    )
}

/// [`run_pipelines`] with a receive-thread monitor (live receive metrics) and a receive
/// setup of `recv` (receive threads, window).
pub fn run_pipelines_monitored(
    recv: RecvSetup,
    placement: DigitiserPlacement,
    mut pipelines: Vec<Pipeline>,
    bits: u32,
    hook: &mut dyn FnMut(&SampleStore, &[Pipeline]),
    monitor: RecvMonitor,
) -> anyhow::Result<FgpuSummary> {
    let (tx, rx) = crossbeam_channel::bounded::<Chunk>(crate::telemetry::monitor::READY_QUEUE);
    let (back_tx, back_rx) = crossbeam_channel::bounded::<Chunk>(8);
    let receiver = spawn_receivers(
        recv,
        placement.clone(),
        placement.chunk_samples,
        tx,
        back_rx,
        monitor,
    );
    let forms = StoreForms::of(&pipelines);
    let mut store =
        SampleStore::with_forms(placement.heap_samples, bits, forms.decode, forms.packed);
    let fed = feed(
        &rx,
        &back_tx,
        &placement,
        &mut store,
        &mut pipelines,
        &forms,
        hook,
    );
    // No upload may outlive the chunks the store holds, whatever happened above.
    for p in pipelines.iter_mut() {
        if let Err(e) = p.fence_input() {
            warn!(error = %e, "waiting for the input uploads to finish failed");
        }
    }
    if let Err(e) = fed {
        // A failed compute call stops the engine, but the batches computed before it are
        // data: they go out first (best effort: after a failed GPU call, waiting for the
        // batches in flight may fail too, which is logged).
        if e.chain().any(super::pipeline::is_compute_failure) {
            for p in pipelines.iter_mut() {
                if let Err(f) = p.finish() {
                    warn!(error = %f, "sending the batches computed before the failure failed");
                }
            }
        }
        return Err(e);
    }
    let recv_stats = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receive thread panicked"))??;
    for p in pipelines.iter_mut() {
        p.finish()?;
    }
    forms.collect_dig_stats(&mut pipelines, &mut store);
    let s = &store.stats;
    let summary = FgpuSummary {
        input_heaps: s.heaps,
        input_missing_heaps: s.missing_heaps,
        input_clipped_samples: s.clipped_samples,
        input_rms_dbfs: [s.rms_dbfs(0, bits), s.rms_dbfs(1, bits)],
        recv_rejected: rejected_counts(&recv_stats),
        outputs: pipelines.iter().map(|p| p.stats.clone()).collect(),
        recv_notes: recv_stats.notes.clone(),
        recv_window_moves: recv_stats.window_moves,
    };
    if summary.outputs.iter().any(|o| o.skipped_heaps > 0) {
        warn!("some output heaps were skipped because their input was incomplete");
    }
    info!(?summary, "fgpu finished");
    Ok(summary)
}

/// Places every chunk from `rx` in `store` and lets every output take the batches whose
/// input is in; chunks no output needs go back to the receivers through `back` once no
/// upload still reads them.
fn feed(
    rx: &crossbeam_channel::Receiver<Chunk>,
    back: &crossbeam_channel::Sender<Chunk>,
    placement: &DigitiserPlacement,
    store: &mut SampleStore,
    pipelines: &mut [Pipeline],
    forms: &StoreForms,
    hook: &mut dyn FnMut(&SampleStore, &[Pipeline]),
) -> anyhow::Result<()> {
    let max_gap = 4 * placement.chunk_samples;
    let st = MainStages::new();
    let mut t = Instant::now();
    while let Ok(chunk) = rx.recv() {
        t = st.wait_input.since(t);
        if let Some(c) = store.append(chunk, placement, max_gap) {
            let _ = back.try_send(c);
        }
        t = st.store.since(t);
        for p in pipelines.iter_mut() {
            p.run_ready(store)?;
        }
        t = st.outputs.since(t);
        forms.collect_dig_stats(pipelines, store);
        if let Some(keep) = pipelines.iter().filter_map(|p| p.needed_from()).min() {
            store.trim_before(keep);
        }
        let released = store.take_released();
        t = st.store.since(t);
        if !released.is_empty() {
            for p in pipelines.iter_mut() {
                p.fence_input()?;
            }
            for c in released {
                let _ = back.try_send(c);
            }
        }
        t = st.fence.since(t);
        hook(store, pipelines);
        t = st.metrics.since(t);
    }
    Ok(())
}

crate::stage_set! {
    /// The main thread's stages (`fgpu_thread_stage_seconds_total{thread="main"}`); the
    /// outputs' share is split further by [`Pipeline`].
    struct MainStages("main") {
        wait_input = "wait_input",
        store = "store",
        outputs = "outputs",
        fence = "fence_input",
        metrics = "metrics",
    }
}

/// Which forms of the samples the store keeps, and who counts the digitiser statistics.
/// Pipelined (GPU) outputs take the packed samples as received; the store decodes only for
/// the others, or to count the digitiser statistics when no wideband output measures them
/// on the GPU.
struct StoreForms {
    packed: bool,
    decode: bool,
    /// The wideband pipelined output that measures the digitiser statistics, if any.
    stats_from: Option<usize>,
}

impl StoreForms {
    fn of(pipelines: &[Pipeline]) -> Self {
        let stats_from = pipelines
            .iter()
            .position(|p| p.takes_packed() && p.spec.narrowband.is_none());
        StoreForms {
            packed: pipelines.iter().any(|p| p.takes_packed()),
            decode: pipelines.iter().any(|p| !p.takes_packed()) || stats_from.is_none(),
            stats_from,
        }
    }

    /// Adds the digitiser statistics the measuring output reported since the last call
    /// (when the store does not decode, and so does not count them itself).
    fn collect_dig_stats(&self, pipelines: &mut [Pipeline], store: &mut SampleStore) {
        if let (false, Some(i)) = (self.decode, self.stats_from) {
            if let Some(st) = pipelines[i].take_dig_stats() {
                for (p, s) in st.iter().enumerate() {
                    store.add_dig_stats(p, s.sum_sq, s.clipped, s.samples);
                }
            }
        }
    }
}
