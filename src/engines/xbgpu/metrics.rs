//! xbgpu's counters (katgpucbf's `xbgpu_output_x_*` and `xbgpu_output_b_*` metrics),
//! updated after every chunk from the outputs' counters.

use super::beams::{BPipeline, BStats};
use super::corrprod::{XPipeline, XStats};
use crate::chunk::RecvMonitor;
use crate::telemetry::metrics::{labels, CounterFamily, Metrics};
use crate::telemetry::recv::{RecvFlavour, RecvMetrics};

/// The metric families of one xbgpu process and what they have counted so far.
pub(crate) struct XbgpuMetrics {
    registry: Metrics,
    recv: Option<RecvMetrics>,
    x_heaps: CounterFamily,
    x_bytes: CounterFamily,
    x_visibilities: CounterFamily,
    x_unsent: CounterFamily,
    x_clipped: CounterFamily,
    x_skipped: CounterFamily,
    x_incomplete: CounterFamily,
    b_heaps: CounterFamily,
    b_bytes: CounterFamily,
    b_samples: CounterFamily,
    b_clipped: CounterFamily,
    b_skipped: CounterFamily,
    seen_x: Vec<XStats>,
    seen_b: Vec<BStats>,
}

impl XbgpuMetrics {
    /// Registers the families (in katgpucbf's order).
    pub(crate) fn new() -> Self {
        let m = Metrics::new("xbgpu");
        let recv = Some(RecvMetrics::new(&m, RecvFlavour::Feng));
        let family = |name: &str, help: &str| m.counter_family(name, help);
        XbgpuMetrics {
            recv,
            x_heaps: family("output_x_heaps", "Correlation heaps transmitted"),
            x_bytes: family("output_x_bytes", "Correlation payload bytes transmitted"),
            x_visibilities: family("output_x_visibilities", "Visibilities transmitted"),
            x_unsent: family(
                "output_x_unsent_accs",
                "Accumulations not sent: output stopped (?capture-stop)",
            ),
            x_clipped: family("output_x_clipped_visibilities", "Saturated visibilities"),
            x_skipped: family(
                "output_x_skipped_accs",
                "Accumulations not sent: no antenna present",
            ),
            x_incomplete: family(
                "output_x_incomplete_accs",
                "Accumulations sent with MISSING markers",
            ),
            b_heaps: family("output_b_heaps", "Beam heaps transmitted"),
            b_bytes: family("output_b_bytes", "Beam payload bytes transmitted"),
            b_samples: family("output_b_samples", "Beam complex samples transmitted"),
            b_clipped: family("output_b_clipped_samples", "Saturated beam samples"),
            b_skipped: family(
                "output_b_skipped_heaps",
                "Beam heaps not sent: no antenna present",
            ),
            seen_x: Vec::new(),
            seen_b: Vec::new(),
            registry: m,
        }
    }

    /// The registry (to serve on the Prometheus port).
    pub(crate) fn registry(&self) -> &Metrics {
        &self.registry
    }

    /// The receive thread's monitor, publishing its counters (taken once).
    pub(crate) fn take_recv_monitor(&mut self) -> RecvMonitor {
        RecvMetrics::take_monitor(&mut self.recv)
    }

    /// Counts what moved since the last call.
    pub(crate) fn update(&mut self, xs: &[XPipeline], bp: Option<&BPipeline>) {
        self.seen_x.resize(xs.len(), Default::default());
        for (x, seen) in xs.iter().zip(self.seen_x.iter_mut()) {
            let s = &x.stats;
            let l = labels(&[("stream", &s.name)]);
            self.x_heaps.get_or_create(&l).inc_by(s.heaps - seen.heaps);
            self.x_bytes.get_or_create(&l).inc_by(s.bytes - seen.bytes);
            self.x_visibilities
                .get_or_create(&l)
                .inc_by(s.visibilities - seen.visibilities);
            self.x_unsent
                .get_or_create(&l)
                .inc_by(s.unsent_accs - seen.unsent_accs);
            self.x_clipped
                .get_or_create(&l)
                .inc_by(s.clipped_visibilities - seen.clipped_visibilities);
            self.x_skipped
                .get_or_create(&l)
                .inc_by(s.skipped_accs - seen.skipped_accs);
            self.x_incomplete
                .get_or_create(&l)
                .inc_by(s.incomplete_accs - seen.incomplete_accs);
            *seen = s.clone();
        }
        let Some(bp) = bp else { return };
        self.seen_b.resize(bp.stats.len(), Default::default());
        for (s, seen) in bp.stats.iter().zip(self.seen_b.iter_mut()) {
            let l = labels(&[("stream", &s.name)]);
            self.b_heaps.get_or_create(&l).inc_by(s.heaps - seen.heaps);
            self.b_bytes.get_or_create(&l).inc_by(s.bytes - seen.bytes);
            // One byte per real value: complex samples are half the payload.
            self.b_samples
                .get_or_create(&l)
                .inc_by((s.bytes - seen.bytes) / 2);
            self.b_clipped
                .get_or_create(&l)
                .inc_by(s.clipped_samples - seen.clipped_samples);
            self.b_skipped
                .get_or_create(&l)
                .inc_by(s.skipped_heaps - seen.skipped_heaps);
            *seen = s.clone();
        }
    }
}
