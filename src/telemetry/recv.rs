//! Live receive metrics: the chunk assembler's counters (heaps, drops by reason, missing and
//! incomplete heaps) and the chunk queue depths, published by the receive thread itself so
//! they move even while no chunk reaches the engine (everything dropped, or a stall).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use super::metrics::Metrics;
use crate::chunk::{ChunkQueues, ChunkStats, Reject};

/// Which totals the receive thread owns for an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvFlavour {
    /// fgpu: heaps and missing heaps are counted per pol by the engine (its timeline), and
    /// the stream id is the digitiser id.
    Digitiser,
    /// xbgpu: the receiver counts heaps and missing heaps; the stream id is the feng_id.
    Feng,
}

/// Prometheus counters fed from [`ChunkStats`] snapshots (by difference, so a snapshot may
/// be published any number of times).
pub struct RecvMetrics {
    packets: Counter,
    bytes: Option<Counter>,
    chunks: Counter,
    incomplete: Counter,
    heaps: Option<Counter>,
    missing: Option<Counter>,
    rejects: Vec<Counter>,
    ready: Gauge,
    free: Gauge,
    last: ChunkStats,
}

/// katgpucbf's counter name of a drop reason (`input_<name>_total`).
pub fn reject_metric(r: Reject, flavour: RecvFlavour) -> &'static str {
    match (r, flavour) {
        (Reject::BadId, RecvFlavour::Feng) => "input_bad_feng_id_heaps",
        (Reject::BadId, RecvFlavour::Digitiser) => "input_bad_digitiser_id_heaps",
        (Reject::Malformed, _) => "input_malformed_packets",
        (Reject::MetadataHeap, _) => "input_metadata_heaps",
        (Reject::BadTimestamp, _) => "input_bad_timestamp_heaps",
        (Reject::TooOld, _) => "input_too_old_heaps",
        (Reject::Duplicate, _) => "input_duplicate_packets",
        (Reject::BadOffset, _) => "input_bad_offset_packets",
        (Reject::BadFrequency, _) => "input_bad_frequency_heaps",
    }
}

fn reject_help(r: Reject) -> &'static str {
    match r {
        Reject::Malformed => "Packets dropped: not SPEAD of our flavour",
        Reject::MetadataHeap => "Heaps dropped: wrong size or missing items (descriptors)",
        Reject::BadTimestamp => {
            "Heaps dropped: timestamp not a multiple of the heap step, or far outside the window"
        }
        Reject::BadId => "Heaps dropped: stream id (feng_id, digitiser id) out of range",
        Reject::TooOld => "Heaps dropped: older than the chunk window",
        Reject::Duplicate => "Packets dropped: payload already received",
        Reject::BadOffset => "Packets dropped: payload outside the heap",
        Reject::BadFrequency => "Heaps dropped: frequency item not this engine's first channel",
    }
}

impl RecvMetrics {
    /// Registers the receive metrics in `m`: packets, bytes, chunks, incomplete heaps, one
    /// counter per drop reason ([`reject_metric`]), the ready/free queue gauges and, for
    /// [`RecvFlavour::Feng`] only, heaps and missing heaps.
    pub fn new(m: &Metrics, flavour: RecvFlavour) -> Self {
        let own_totals = flavour == RecvFlavour::Feng;
        RecvMetrics {
            packets: m.counter("input_packets", "Packets placed into chunks"),
            // fgpu counts its bytes per pol itself (`fgpu_input_bytes{pol}`): one family.
            bytes: own_totals.then(|| m.counter("input_bytes", "Payload bytes placed into chunks")),
            chunks: m.counter("input_chunks", "Chunks received"),
            incomplete: m.counter(
                "input_incomplete_heaps",
                "Heaps only partly received when their chunk was handed on",
            ),
            heaps: own_totals.then(|| m.counter("input_heaps", "Heaps received")),
            missing: own_totals.then(|| {
                m.counter(
                    "input_missing_heaps",
                    "Heaps missing inside the received span",
                )
            }),
            rejects: Reject::ALL
                .iter()
                .map(|&r| m.counter(reject_metric(r, flavour), reject_help(r)))
                .collect(),
            ready: m.gauge(
                "input_ready_chunks",
                "Received chunks waiting for the engine",
            ),
            free: m.gauge(
                "input_free_chunks",
                "Chunk buffers returned for reuse by the receiver",
            ),
            last: ChunkStats::default(),
        }
    }

    /// Publishes a snapshot of the receive counters and the queue depths.
    pub fn publish(&mut self, s: &ChunkStats, q: ChunkQueues) {
        let d = |new: u64, old: u64| new.saturating_sub(old);
        let l = &self.last;
        self.packets.inc_by(d(s.packets, l.packets));
        if let Some(c) = &self.bytes {
            c.inc_by(d(s.bytes, l.bytes));
        }
        self.chunks.inc_by(d(s.chunks, l.chunks));
        self.incomplete
            .inc_by(d(s.incomplete_heaps, l.incomplete_heaps));
        if let Some(c) = &self.heaps {
            c.inc_by(d(s.heaps, l.heaps));
        }
        if let Some(c) = &self.missing {
            c.inc_by(d(s.missing_heaps, l.missing_heaps));
        }
        for (k, c) in self.rejects.iter().enumerate() {
            c.inc_by(d(s.rejects[k], l.rejects[k]));
        }
        self.ready.set(q.ready as i64);
        self.free.set(q.free as i64);
        self.last = s.clone();
    }

    /// As a receive-thread monitor ([`crate::engines::common::recv::spawn_receivers`]).
    pub fn into_monitor(mut self) -> crate::chunk::RecvMonitor {
        Box::new(move |s, q| self.publish(s, q))
    }

    /// The monitor of an engine's receive metrics, taken once: later calls (and an engine
    /// without receive metrics) get a monitor that publishes nothing.
    pub fn take_monitor(slot: &mut Option<RecvMetrics>) -> crate::chunk::RecvMonitor {
        match slot.take() {
            Some(r) => r.into_monitor(),
            None => Box::new(|_, _| {}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishes_differences_and_depths() {
        let m = Metrics::new("xbgpu");
        let mut r = RecvMetrics::new(&m, RecvFlavour::Feng);
        let mut s = ChunkStats {
            heaps: 10,
            missing_heaps: 2,
            chunks: 1,
            ..Default::default()
        };
        s.rejects[Reject::TooOld as usize] = 3;
        s.rejects[Reject::BadId as usize] = 1;
        r.publish(&s, ChunkQueues { ready: 2, free: 1 });
        r.publish(&s, ChunkQueues { ready: 2, free: 1 });
        s.heaps = 15;
        s.rejects[Reject::TooOld as usize] = 4;
        r.publish(&s, ChunkQueues { ready: 0, free: 3 });
        let t = m.render();
        for want in [
            "xbgpu_input_heaps_total 15",
            "xbgpu_input_missing_heaps_total 2",
            "xbgpu_input_too_old_heaps_total 4",
            "xbgpu_input_bad_feng_id_heaps_total 1",
            "xbgpu_input_metadata_heaps_total 0",
            "xbgpu_input_chunks_total 1",
            "xbgpu_input_ready_chunks 0",
            "xbgpu_input_free_chunks 3",
        ] {
            assert!(t.contains(want), "{want} not in\n{t}");
        }
        let m = Metrics::new("fgpu");
        let _r = RecvMetrics::new(&m, RecvFlavour::Digitiser);
        let t = m.render();
        assert!(t.contains("fgpu_input_too_old_heaps_total 0"), "{t}");
        assert!(
            !t.contains("fgpu_input_heaps_total"),
            "per-pol heaps are the engine's: {t}"
        );
        // So are its bytes: one fgpu_input_bytes family (per pol), not two.
        assert!(!t.contains("fgpu_input_bytes"), "{t}");
    }
}
