//! fgpu's counters (katgpucbf's `fgpu_input_*` and `fgpu_output_*` metrics), the output-lag
//! gauge (`fgpu_output_lag_seconds{stream}`, [`crate::engines::common::lag`]) and the katcp
//! sensors that follow the input and outputs, updated after every chunk from the store's
//! and the pipelines' counters.

use std::sync::Arc;

use super::device::FgpuDevice;
use super::pipeline::{OutputStats, Pipeline};
use super::store::{InputStats, SampleStore};
use crate::chunk::RecvMonitor;
use crate::control::Status;
use crate::engines::common::lag::OutputLag;
use crate::telemetry::metrics::{labels, CounterFamily, Metrics};
use crate::telemetry::recv::{RecvFlavour, RecvMetrics};

/// The metric families of one fgpu process, what they have counted so far, and the device
/// whose sensors follow them.
pub(crate) struct FgpuMetrics {
    registry: Metrics,
    input_heaps: CounterFamily,
    input_missing: CounterFamily,
    input_clipped: CounterFamily,
    input_samples: CounterFamily,
    input_bytes: CounterFamily,
    recv: Option<RecvMetrics>,
    output_heaps: CounterFamily,
    output_bytes: CounterFamily,
    output_samples: CounterFamily,
    output_skipped: CounterFamily,
    output_before_input: CounterFamily,
    output_delay_error: CounterFamily,
    output_clipped: CounterFamily,
    output_lag: OutputLag,
    seen_in: InputStats,
    seen_out: Vec<OutputStats>,
    device: Arc<FgpuDevice>,
    dbfs: DbfsWindow,
    rx: RxState,
    adc_rate: f64,
}

/// What the receive sensors need between updates.
#[derive(Debug, Clone, Default)]
struct RxState {
    /// Samples per pol in a receive chunk.
    chunk_samples: u64,
}

/// The `input{p}.dig-rms-dbfs` window, as upstream's: about a second of whole receive
/// chunks, aligned to multiples of its length in ADC time; sums since its start. A window
/// the data began inside of is not reported.
#[derive(Debug, Clone, Default, PartialEq)]
struct DbfsWindow {
    /// ADC samples per window.
    len: u64,
    /// Start of the window being summed (`None`: none started at its boundary).
    start: Option<u64>,
    sum_squares: [f64; 2],
    samples: [u64; 2],
    missing: [u64; 2],
}

/// One finished window: its end (ADC) and, per pol, sum of squares, samples and missing
/// heaps.
type DbfsSums = (u64, [f64; 2], [u64; 2], [u64; 2]);

impl DbfsWindow {
    /// Windows of round(`adc_rate` / chunk) chunks of `chunk` samples (at least one).
    fn new(adc_rate: f64, chunk: u64) -> Self {
        let chunk = chunk.max(1);
        let chunks = (adc_rate / chunk as f64).round().max(1.0) as u64;
        DbfsWindow {
            len: chunks * chunk,
            ..DbfsWindow::default()
        }
    }

    /// Adds the chunk `[start, end)` (its sums per pol); the window's sums once the chunk
    /// reaches its end.
    fn add(
        &mut self,
        start: u64,
        end: u64,
        sq: [f64; 2],
        n: [u64; 2],
        missing: [u64; 2],
    ) -> Option<DbfsSums> {
        let len = self.len.max(1);
        let ws = start / len * len;
        if self.start != Some(ws) {
            *self = DbfsWindow {
                len,
                start: (start == ws).then_some(ws),
                ..DbfsWindow::default()
            };
        }
        self.start?;
        for p in 0..2 {
            self.sum_squares[p] += sq[p];
            self.samples[p] += n[p];
            self.missing[p] += missing[p];
        }
        if end < ws + len {
            return None;
        }
        let out = (ws + len, self.sum_squares, self.samples, self.missing);
        *self = DbfsWindow {
            len,
            ..DbfsWindow::default()
        };
        Some(out)
    }
}

/// katgpucbf's grading of `dig-rms-dbfs`: nominal from −30 to −10 dBFS inclusive, warn
/// strictly inside (−33, −7), else error; a window with missing data is the float minimum
/// with failure, one of zero power the minimum with error. The value as katcp writes
/// floats.
pub(crate) fn grade_dbfs(db: f64, missing: bool) -> (String, Status) {
    use crate::control::sampling::float_repr;
    let min = float_repr(f64::MIN);
    if missing {
        return (min, Status::Failure);
    }
    if !db.is_finite() {
        return (min, Status::Error);
    }
    let st = if (-30.0..=-10.0).contains(&db) {
        Status::Nominal
    } else if db > -33.0 && db < -7.0 {
        Status::Warn
    } else {
        Status::Error
    };
    (float_repr(db), st)
}

impl FgpuMetrics {
    /// Registers the families (in katgpucbf's order, then the output lag) for `outputs`
    /// outputs; heap timestamps become data times with `sync_time` and `adc_rate`.
    pub(crate) fn new(
        device: Arc<FgpuDevice>,
        outputs: usize,
        sync_time: f64,
        adc_rate: f64,
    ) -> Self {
        let m = Metrics::new("fgpu");
        crate::telemetry::stages::register(&m);
        let family = |name: &str, help: &str| m.counter_family(name, help);
        let input_heaps = family("input_heaps", "Digitiser heaps received");
        let input_missing = family("input_missing_heaps", "Digitiser heaps missing");
        let input_clipped = family("input_clipped_samples", "Digitiser samples that clipped");
        let input_samples = family("input_samples", "Digitiser samples received");
        let input_bytes = family("input_bytes", "Bytes of digitiser samples received");
        let recv = Some(RecvMetrics::new(&m, RecvFlavour::Digitiser));
        FgpuMetrics {
            input_heaps,
            input_missing,
            input_clipped,
            input_samples,
            input_bytes,
            recv,
            output_heaps: family("output_heaps", "Heaps transmitted"),
            output_bytes: family("output_bytes", "Payload bytes transmitted"),
            output_samples: family("output_samples", "Complex samples transmitted"),
            output_skipped: family(
                "output_skipped_heaps",
                "Heaps not sent because their input was incomplete",
            ),
            output_before_input: family(
                "output_before_input_heaps",
                "Heaps not sent because the delay made their input start before the first sample",
            ),
            output_delay_error: family(
                "output_delay_error_heaps",
                "Heaps not sent because the delay model did not evaluate for their batch",
            ),
            output_clipped: family("output_clipped_samples", "Output values that saturated"),
            output_lag: OutputLag::register(&m, sync_time, adc_rate),
            seen_in: InputStats::default(),
            seen_out: vec![OutputStats::default(); outputs],
            device,
            dbfs: DbfsWindow::new(adc_rate, 1),
            rx: RxState::default(),
            adc_rate,
            registry: m,
        }
    }

    /// Samples per pol of a receive chunk (the receive sensors report chunk starts).
    pub(crate) fn set_chunk_samples(&mut self, n: u64) {
        self.rx.chunk_samples = n;
        self.dbfs = DbfsWindow::new(self.adc_rate, n);
    }

    /// The receive sensors after a chunk: a pol whose chunk brought heaps updates its
    /// `rx.timestamp` and `rx.unixtime` (the chunk's start, data time), a loss its
    /// `rx.missing-unixtime` ([`crate::engines::common::rx_sensors`]).
    fn update_rx(&mut self, store: &SampleStore) {
        let s = &store.stats;
        let chunk_start = store.end_ts().saturating_sub(self.rx.chunk_samples);
        let now = std::time::Instant::now();
        for p in 0..2 {
            let heaps = s.heaps[p] > self.seen_in.heaps[p];
            let lost = s.missing_heaps[p] > self.seen_in.missing_heaps[p];
            self.device.rx.chunk(p, chunk_start, heaps, lost, now);
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

    /// Counts what moved since the last call and updates the sensors.
    pub(crate) fn update(&mut self, store: &SampleStore, pipes: &[Pipeline]) {
        self.update_input(store);
        self.device.apply_due_delays();
        for (k, pl) in pipes.iter().enumerate() {
            self.update_output(k, pl);
        }
    }

    fn update_input(&mut self, store: &SampleStore) {
        self.update_rx(store);
        let s = &store.stats;
        let seen = &self.seen_in;
        for p in 0..2 {
            let pol = p.to_string();
            let l = labels(&[("pol", &pol)]);
            self.input_heaps
                .get_or_create(&l)
                .inc_by(s.heaps[p] - seen.heaps[p]);
            self.input_missing
                .get_or_create(&l)
                .inc_by(s.missing_heaps[p] - seen.missing_heaps[p]);
            self.input_clipped
                .get_or_create(&l)
                .inc_by(s.clipped_samples[p] - seen.clipped_samples[p]);
            let new_samples = s.samples[p] - seen.samples[p];
            self.input_samples.get_or_create(&l).inc_by(new_samples);
            self.input_bytes
                .get_or_create(&l)
                .inc_by(new_samples * store.bits as u64 / 8);
            // Data time of the chunk's end.
            let unix = self.device.rx.unix(store.end_ts());
            self.device.sensors.set_at(
                &format!("input{p}.dig-clip-cnt"),
                s.clipped_samples[p],
                Status::Nominal,
                unix,
            );
        }
        let d = |f: fn(&InputStats, usize) -> u64| [0, 1].map(|p| f(s, p) - f(seen, p));
        let sq = [0, 1].map(|p| s.sum_squares[p] - seen.sum_squares[p]);
        let end = store.end_ts();
        let start = end.saturating_sub(self.rx.chunk_samples);
        let done = self.dbfs.add(
            start,
            end,
            sq,
            d(|x, p| x.stat_samples[p]),
            d(|x, p| x.missing_heaps[p]),
        );
        if let Some((wend, sq, n, missing)) = done {
            let full = ((1u64 << (store.bits - 1)) - 1) as f64;
            for p in 0..2 {
                let power = sq[p] / n[p].max(1) as f64;
                let db = 10.0 * (power / (full * full / 2.0)).log10();
                let (v, st) = grade_dbfs(db, missing[p] > 0);
                let unix = self.device.rx.unix(wend);
                let name = format!("input{p}.dig-rms-dbfs");
                self.device.sensors.set_at(&name, v, st, unix);
            }
        }
        self.seen_in = s.clone();
    }

    fn update_output(&mut self, k: usize, pl: &Pipeline) {
        let o = &pl.stats;
        let seen = &self.seen_out[k];
        let l = labels(&[("stream", &o.name)]);
        self.output_heaps
            .get_or_create(&l)
            .inc_by(o.heaps - seen.heaps);
        self.output_bytes
            .get_or_create(&l)
            .inc_by(o.bytes - seen.bytes);
        let per_heap = (pl.spec.channels_per_substream() * pl.spec.spectra_per_heap() * 2) as u64;
        self.output_samples
            .get_or_create(&l)
            .inc_by((o.heaps - seen.heaps) * per_heap);
        self.output_skipped
            .get_or_create(&l)
            .inc_by(o.skipped_heaps - seen.skipped_heaps);
        self.output_before_input
            .get_or_create(&l)
            .inc_by(o.before_input_heaps - seen.before_input_heaps);
        self.output_delay_error
            .get_or_create(&l)
            .inc_by(o.delay_error_heaps - seen.delay_error_heaps);
        for p in 0..2 {
            let pol = p.to_string();
            self.output_clipped
                .get_or_create(&labels(&[("stream", &o.name), ("pol", &pol)]))
                .inc_by(o.clipped_samples[p] - seen.clipped_samples[p]);
            self.device.sensors.set(
                &format!("{}.input{p}.feng-clip-cnt", o.name),
                o.clipped_samples[p],
                Status::Nominal,
            );
        }
        self.output_lag.sent(&o.name, o.last_timestamp);
        self.seen_out[k] = o.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dig_rms_dbfs_is_graded_as_upstream() {
        assert_eq!(grade_dbfs(-20.5, false), ("-20.5".into(), Status::Nominal));
        assert_eq!(grade_dbfs(-30.0, false).1, Status::Nominal);
        assert_eq!(grade_dbfs(-10.0, false).1, Status::Nominal);
        assert_eq!(grade_dbfs(-32.9, false).1, Status::Warn);
        assert_eq!(grade_dbfs(-7.1, false).1, Status::Warn);
        assert_eq!(grade_dbfs(-33.0, false).1, Status::Error);
        assert_eq!(grade_dbfs(-5.0, false).1, Status::Error);
        let min = "-1.7976931348623157e+308".to_string();
        assert_eq!(
            grade_dbfs(f64::NEG_INFINITY, false),
            (min.clone(), Status::Error)
        );
        assert_eq!(grade_dbfs(-20.0, true), (min, Status::Failure));
    }

    /// Windows of whole chunks (1000 samples/s, chunks of 300: 3 chunks, 900 samples)
    /// aligned to multiples of their length: the first, begun inside, is not reported;
    /// each later one is reported when a chunk reaches its end, with its sums and losses.
    #[test]
    fn dbfs_windows_are_whole_chunks_aligned_in_adc_time() {
        let mut w = DbfsWindow::new(1000.0, 300);
        assert_eq!(w.len, 900);
        let one = |w: &mut DbfsWindow, start: u64, miss: u64| {
            w.add(start, start + 300, [2.0, 3.0], [300, 300], [0, miss])
        };
        // Data from 600: window [0, 900) began before it.
        assert_eq!(one(&mut w, 600, 0), None);
        assert_eq!(one(&mut w, 900, 0), None);
        assert_eq!(one(&mut w, 1200, 1), None);
        assert_eq!(
            one(&mut w, 1500, 0),
            Some((1800, [6.0, 9.0], [900, 900], [0, 1]))
        );
        // A chunk lost inside a window: its sums cover what came (the loss is in the
        // store's missing count), reported at the window's end.
        assert_eq!(one(&mut w, 1800, 0), None);
        assert_eq!(
            one(&mut w, 2400, 2),
            Some((2700, [4.0, 6.0], [600, 600], [0, 2]))
        );
        // A jump into the middle of a later window: not reported.
        assert_eq!(one(&mut w, 3000, 0), None);
        assert_eq!(one(&mut w, 3300, 0), None);
        assert_eq!(one(&mut w, 3600, 0), None);
        assert!(one(&mut w, 4200, 0).is_some());
        // Under a chunk per second: one chunk per window.
        let mut w = DbfsWindow::new(10.0, 300);
        assert_eq!(w.len, 300);
        assert_eq!(
            one(&mut w, 300, 0),
            Some((600, [2.0, 3.0], [300, 300], [0, 0]))
        );
    }

    /// The value of the `fgpu_output_lag_seconds{stream="wideband"}` line, if any.
    fn lag(m: &FgpuMetrics) -> Option<f64> {
        let text = m.registry().render();
        let line = text
            .lines()
            .find(|l| l.starts_with("fgpu_output_lag_seconds{stream=\"wideband\"} "))?;
        line.rsplit(' ').next()?.parse().ok()
    }

    #[test]
    fn output_lag_gauge_per_stream_after_the_first_heap() {
        let device = Arc::new(FgpuDevice::new(
            Vec::new(),
            1712e6,
            1_000.0,
            1.0,
            0,
            1 << 20,
        ));
        let m = FgpuMetrics::new(device, 1, 1_000.0, 1712e6);
        // No sample before a heap is sent (prometheus-client leaves the empty family out).
        assert!(!m.registry().render().contains("fgpu_output_lag_seconds"));
        assert_eq!(lag(&m), None);
        // A heap stamped 2 s after a sync time of 1000 s (Unix): its data time is 1002 s,
        // so the lag is the wall clock minus that (over 50 years).
        m.output_lag.sent("wideband", Some(2 * 1_712_000_000));
        let g = m.output_lag.gauge("wideband").unwrap();
        assert_eq!(g.data_time(), Some(1002.0));
        assert!(m
            .registry()
            .render()
            .contains("# TYPE fgpu_output_lag_seconds gauge"));
        assert!(lag(&m).unwrap() > 1.7e9 - 1002.0);
    }
}
