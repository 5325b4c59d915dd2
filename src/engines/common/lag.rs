//! The output-lag gauge of the engines (`fgpu_output_lag_seconds`,
//! `xbgpu_output_lag_seconds`, one per output stream): wall clock minus the data time of the
//! last output heap sent, where the data time of a heap is `sync_time + timestamp /
//! adc_sample_rate` (Unix seconds).
//!
//! The value is computed when `/metrics` is read, not when the heap is sent: an engine that
//! stalls shows a lag growing second by second rather than its last value frozen, which is
//! what a soak or an alert needs to see. A stream that has sent nothing yet has no sample.
//! X-engine heaps carry the timestamp of the start of their accumulation, so their lag
//! includes the accumulation time. dsim's counterpart is `dsim_time_error_s`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::{MetricType, TypedMetric};

use crate::telemetry::metrics::{labels, Labels, Metrics};

/// The metric name within an engine's namespace.
pub const OUTPUT_LAG: &str = "output_lag_seconds";

/// One stream's gauge: the data time of its last output heap, and the lag it implies when
/// read.
#[derive(Debug, Clone)]
pub struct LagGauge {
    /// Data time (Unix seconds, as `f64` bits) of the last heap sent; NaN before the first.
    data_time: Arc<AtomicU64>,
}

impl Default for LagGauge {
    fn default() -> Self {
        LagGauge {
            data_time: Arc::new(AtomicU64::new(f64::NAN.to_bits())),
        }
    }
}

impl LagGauge {
    /// Records the data time (Unix seconds) of the heap just sent. A time older than the
    /// one recorded is ignored, so the gauge follows the newest output.
    pub fn set_data_time(&self, unix: f64) {
        let _ = self
            .data_time
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                let old = f64::from_bits(old);
                (old.is_nan() || unix > old).then_some(unix.to_bits())
            });
    }

    /// The data time of the last heap sent, `None` before the first.
    pub fn data_time(&self) -> Option<f64> {
        Some(f64::from_bits(self.data_time.load(Ordering::Relaxed))).filter(|t| !t.is_nan())
    }

    /// The lag at wall-clock time `now` (Unix seconds); NaN before the first heap.
    pub fn lag_at(&self, now: f64) -> f64 {
        self.data_time().map_or(f64::NAN, |t| now - t)
    }
}

/// The wall clock in Unix seconds.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl EncodeMetric for LagGauge {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.lag_at(unix_now()))
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

impl TypedMetric for LagGauge {
    const TYPE: MetricType = MetricType::Gauge;
}

/// An engine's output-lag family, labelled by `stream`, and the clock that turns heap
/// timestamps (ADC samples since the sync time) into Unix seconds.
#[derive(Debug, Clone)]
pub struct OutputLag {
    family: Family<Labels, LagGauge>,
    sync_time: f64,
    adc_rate: f64,
}

impl OutputLag {
    /// Registers `NAMESPACE_output_lag_seconds` in `m` for an engine with this sync time
    /// and ADC sample rate.
    pub fn register(m: &Metrics, sync_time: f64, adc_rate: f64) -> Self {
        let family = Family::<Labels, LagGauge>::default();
        m.register(
            OUTPUT_LAG,
            "Wall clock minus the data time (sync_time + timestamp / adc_sample_rate) of the \
             last output heap sent, per stream, in seconds",
            family.clone(),
        );
        OutputLag {
            family,
            sync_time,
            adc_rate,
        }
    }

    /// The data time in Unix seconds of heap timestamp `ts` (ADC samples).
    pub fn data_time(&self, ts: u64) -> f64 {
        self.sync_time + ts as f64 / self.adc_rate
    }

    /// Notes the timestamp of the last heap `stream` sent (`None`: nothing sent yet, no
    /// sample is created).
    pub fn sent(&self, stream: &str, last_ts: Option<u64>) {
        if let Some(ts) = last_ts {
            self.family
                .get_or_create(&labels(&[("stream", stream)]))
                .set_data_time(self.data_time(ts));
        }
    }

    /// The gauge of `stream`, where it has sent something.
    pub fn gauge(&self, stream: &str) -> Option<LagGauge> {
        self.family
            .get(&labels(&[("stream", stream)]))
            .map(|g| g.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_wall_clock_minus_data_time_of_the_newest_heap() {
        let g = LagGauge::default();
        assert_eq!(g.data_time(), None);
        assert!(g.lag_at(100.0).is_nan());
        g.set_data_time(90.0);
        assert_eq!(g.lag_at(100.0), 10.0);
        // An older heap (another destination finishing late) does not pull it back.
        g.set_data_time(80.0);
        assert_eq!(g.data_time(), Some(90.0));
        g.set_data_time(99.5);
        assert_eq!(g.lag_at(100.0), 0.5);
        // A copy shares the value (the family hands out clones).
        assert_eq!(g.clone().data_time(), Some(99.5));
    }

    #[test]
    fn timestamps_become_unix_seconds() {
        let m = Metrics::new("fgpu");
        let lag = OutputLag::register(&m, 1_700_000_000.0, 1712e6);
        assert_eq!(lag.data_time(1712 * 1_000_000 * 3), 1_700_000_003.0);
        lag.sent("wide", None);
        assert!(lag.gauge("wide").is_none());
        assert!(!m.render().contains("fgpu_output_lag_seconds{"));
        lag.sent("wide", Some(856_000_000));
        assert_eq!(
            lag.gauge("wide").unwrap().data_time(),
            Some(1_700_000_000.5)
        );
    }
}
