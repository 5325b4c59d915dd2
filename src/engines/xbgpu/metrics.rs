//! xbgpu's counters (katgpucbf's `xbgpu_output_x_*` and `xbgpu_output_b_*` metrics) and
//! the output-lag gauge (`xbgpu_output_lag_seconds{stream}`, one per corrprod and beam
//! stream, [`crate::engines::common::lag`]), updated after every chunk from the outputs'
//! counters.

use super::beams::{BPipeline, BStats};
use super::corrprod::{XPipeline, XStats};
use crate::chunk::RecvMonitor;
use crate::engines::common::lag::OutputLag;
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
    output_lag: OutputLag,
    seen_x: Vec<XStats>,
    seen_b: Vec<BStats>,
}

impl XbgpuMetrics {
    /// Registers the families (in katgpucbf's order, then the output lag); heap timestamps
    /// become data times with `sync_time` and `adc_rate`.
    pub(crate) fn new(sync_time: f64, adc_rate: f64) -> Self {
        let m = Metrics::new("xbgpu");
        crate::telemetry::stages::register(&m);
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
            output_lag: OutputLag::register(&m, sync_time, adc_rate),
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
        let x_stats: Vec<&XStats> = xs.iter().map(|x| &x.stats).collect();
        self.update_stats(&x_stats, bp.map(|b| b.stats.as_slice()));
    }

    /// [`XbgpuMetrics::update`] from the outputs' counters.
    fn update_stats(&mut self, xs: &[&XStats], beams: Option<&[BStats]>) {
        self.seen_x.resize(xs.len(), Default::default());
        for (&s, seen) in xs.iter().zip(self.seen_x.iter_mut()) {
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
            self.output_lag.sent(&s.name, s.last_timestamp);
            *seen = s.clone();
        }
        let Some(beams) = beams else { return };
        self.seen_b.resize(beams.len(), Default::default());
        for (s, seen) in beams.iter().zip(self.seen_b.iter_mut()) {
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
            self.output_lag.sent(&s.name, s.last_timestamp);
            *seen = s.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `xbgpu_output_lag_seconds` samples: (stream, value).
    fn lags(m: &XbgpuMetrics) -> Vec<(String, f64)> {
        let text = m.registry().render();
        let prefix = "xbgpu_output_lag_seconds{stream=\"";
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .filter_map(|l| {
                let (stream, value) = l.split_once("\"} ")?;
                Some((stream.to_string(), value.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn output_lag_gauge_per_corrprod_and_beam_stream() {
        // Sync time: 1 s before the Unix epoch's 1e9 s mark; 1e6 ADC samples per second.
        let mut m = XbgpuMetrics::new(999_999_999.0, 1e6);
        let mut x = XStats {
            name: "bl".into(),
            ..Default::default()
        };
        let beams = [
            BStats {
                name: "beam_0x".into(),
                heaps: 1,
                last_timestamp: Some(3_000_000),
                ..Default::default()
            },
            BStats {
                name: "beam_0y".into(),
                ..Default::default()
            },
        ];
        m.update_stats(&[&x], Some(&beams));
        // Only streams that have sent something have a sample.
        let got = lags(&m);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "beam_0x");
        assert!(m
            .registry()
            .render()
            .contains("# TYPE xbgpu_output_lag_seconds gauge"));
        let beam = m.output_lag.gauge("beam_0x").unwrap();
        assert_eq!(beam.data_time(), Some(1_000_000_002.0));
        // The wall clock is well past 2001: the lag is that many seconds.
        assert!(got[0].1 > 7e8, "{got:?}");
        x.heaps = 1;
        x.last_timestamp = Some(500_000);
        m.update_stats(&[&x], Some(&beams));
        let x_gauge = m.output_lag.gauge("bl").unwrap();
        assert_eq!(x_gauge.data_time(), Some(999_999_999.5));
        let got = lags(&m);
        assert_eq!(got.len(), 2, "{got:?}");
        // The corrprod heap is older data than the beam heap: its lag is 2.5 s larger.
        let x_lag = got.iter().find(|g| g.0 == "bl").unwrap().1;
        let b_lag = got.iter().find(|g| g.0 == "beam_0x").unwrap().1;
        assert!((x_lag - b_lag - 2.5).abs() < 1.0, "{got:?}");
    }
}
