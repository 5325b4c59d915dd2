//! The sampling thread: every interval it observes all engines at once (one short-lived
//! thread per engine, so a slow or dead engine does not delay the others), keeps the values
//! for the summary and the plot, and appends them to `soak.csv` (flushed every tick, so a
//! soak that is killed still leaves its CSV up to the last second).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::expo::{self, Exposition};
use super::probe;
use super::series::{Kind, SeriesKey};
use crate::telemetry::cpu::threads_cpu_seconds_of;

/// An engine to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineTarget {
    /// Name in the report (`fgpu0`); unique within a soak.
    pub name: String,
    /// Its Prometheus endpoint (`GET /metrics`).
    pub prometheus: SocketAddr,
    /// Its process, for RSS and CPU per thread; `None` records metrics only.
    pub pid: Option<u32>,
}

/// The header of `soak.csv`.
pub const CSV_HEADER: &str = "unix_time,elapsed_s,engine,kind,series,labels,value";

/// One sample of one engine: the values of its recorded series (indices into
/// [`EngineLog::series`]).
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since the soak started.
    pub elapsed: f64,
    /// Unix time of the sample.
    pub unix: f64,
    /// True when the `/metrics` scrape succeeded.
    pub up: bool,
    /// (series index, value).
    pub values: Vec<(u32, f64)>,
}

impl Sample {
    /// The value of series `id` in this sample.
    pub fn get(&self, id: u32) -> Option<f64> {
        self.values.iter().find(|(i, _)| *i == id).map(|&(_, v)| v)
    }
}

/// Everything sampled from one engine.
#[derive(Debug, Clone)]
pub struct EngineLog {
    /// The engine.
    pub target: EngineTarget,
    /// The series seen so far (index = id in [`Sample::values`]).
    pub series: Vec<(SeriesKey, Kind)>,
    index: HashMap<SeriesKey, u32>,
    /// The samples in time order.
    pub samples: Vec<Sample>,
    /// Scrapes that failed.
    pub scrape_failures: u64,
    /// The latest scrape error.
    pub last_error: Option<String>,
    /// Exposition lines that did not parse, over all scrapes.
    pub malformed_lines: u64,
}

/// What one observation of an engine read.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Seconds since the soak started.
    pub elapsed: f64,
    /// Unix time.
    pub unix: f64,
    /// The parsed `/metrics` page, or why the scrape failed.
    pub page: Result<Exposition, String>,
    /// Resident set size in bytes (`None`: no pid, or the process is gone).
    pub rss: Option<u64>,
    /// CPU seconds per thread name (`None`: no pid, or the process is gone).
    pub threads: Option<BTreeMap<String, f64>>,
}

/// Reads an engine's page, RSS and threads' CPU time now.
pub fn observe(t: &EngineTarget, t0: Instant, timeout: Duration) -> Observation {
    let elapsed = t0.elapsed().as_secs_f64();
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let page = probe::scrape(t.prometheus, timeout).map(|body| expo::parse(&body));
    Observation {
        elapsed,
        unix,
        page,
        rss: t.pid.and_then(probe::rss_bytes),
        threads: t.pid.and_then(threads_cpu_seconds_of),
    }
}

impl EngineLog {
    /// An empty log of `target`.
    pub fn new(target: EngineTarget) -> Self {
        EngineLog {
            target,
            series: Vec::new(),
            index: HashMap::new(),
            samples: Vec::new(),
            scrape_failures: 0,
            last_error: None,
            malformed_lines: 0,
        }
    }

    /// The id of a series, added on first sight.
    fn id(&mut self, key: SeriesKey, kind: Kind) -> u32 {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.series.len() as u32;
        self.index.insert(key.clone(), i);
        self.series.push((key, kind));
        i
    }

    /// Ids of the series of `kind`.
    pub fn ids_of(&self, kind: Kind) -> impl Iterator<Item = u32> + '_ {
        (0..self.series.len() as u32).filter(move |&i| self.series[i as usize].1 == kind)
    }

    /// Keeps an observation and appends its rows to `csv`.
    pub fn record(&mut self, obs: Observation, csv: &mut impl Write) -> std::io::Result<()> {
        let mut values = Vec::new();
        let up = obs.page.is_ok();
        values.push((
            self.id(SeriesKey::new("up", vec![]), Kind::Up),
            up as u8 as f64,
        ));
        match obs.page {
            Ok(page) => {
                self.malformed_lines += page.malformed as u64;
                for s in page.samples {
                    if let Some(kind) = Kind::of_metric(&s.name) {
                        let id = self.id(SeriesKey::new(&s.name, s.labels), kind);
                        values.push((id, s.value));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(engine = %self.target.name, error = %e, "soak: scrape failed");
                self.scrape_failures += 1;
                self.last_error = Some(e);
            }
        }
        if let Some(rss) = obs.rss {
            values.push((
                self.id(SeriesKey::new("rss_bytes", vec![]), Kind::Rss),
                rss as f64,
            ));
        }
        for (thread, secs) in obs.threads.into_iter().flatten() {
            let key = SeriesKey::new("thread_cpu_seconds", vec![("thread".into(), thread)]);
            values.push((self.id(key, Kind::ThreadCpu), secs));
        }
        for &(id, v) in &values {
            let (key, kind) = &self.series[id as usize];
            writeln!(
                csv,
                "{:.3},{:.3},{},{},{},{},{v}",
                obs.unix,
                obs.elapsed,
                csv_field(&self.target.name),
                kind.as_str(),
                csv_field(&key.name),
                csv_field(&key.labels_text()),
            )?;
        }
        self.samples.push(Sample {
            elapsed: obs.elapsed,
            unix: obs.unix,
            up,
            values,
        });
        Ok(())
    }
}

/// A CSV field, quoted (RFC 4180) where it holds a comma, a quote or a line break.
pub fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

/// The running sampling thread.
pub struct SamplerThread {
    stop: Sender<()>,
    thread: JoinHandle<std::io::Result<Vec<EngineLog>>>,
}

impl SamplerThread {
    /// Starts sampling `targets` every `interval` from `t0` (the first sample at once),
    /// appending to `csv` (its header already written).
    pub fn spawn(
        targets: Vec<EngineTarget>,
        interval: Duration,
        t0: Instant,
        csv: Box<dyn Write + Send>,
    ) -> std::io::Result<Self> {
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("soak".into())
            .spawn(move || sample_loop(targets, interval, t0, csv, stopped))?;
        Ok(SamplerThread { stop, thread })
    }

    /// Takes a last sample, stops the thread and returns the logs.
    pub fn finish(self) -> std::io::Result<Vec<EngineLog>> {
        let _ = self.stop.send(());
        self.thread
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("soak sampling thread panicked")))
    }
}

fn sample_loop(
    targets: Vec<EngineTarget>,
    interval: Duration,
    t0: Instant,
    mut csv: Box<dyn Write + Send>,
    stopped: Receiver<()>,
) -> std::io::Result<Vec<EngineLog>> {
    let timeout = interval
        .mul_f64(0.8)
        .clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut logs: Vec<EngineLog> = targets.into_iter().map(EngineLog::new).collect();
    let mut tick = 0u32;
    loop {
        record_all(&mut logs, t0, timeout, &mut csv)?;
        // The next tick on the t0 + k * interval grid; ticks that a slow sample overran
        // are skipped rather than taken in a burst.
        let now = t0.elapsed();
        tick = (tick + 1).max((now.as_secs_f64() / interval.as_secs_f64()).ceil() as u32);
        let wait = (interval * tick).saturating_sub(now);
        match stopped.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    // The last sample: the state at the end, so losses of the final second are seen.
    record_all(&mut logs, t0, timeout, &mut csv)?;
    Ok(logs)
}

/// Observes every engine at once (a thread each) and records the observations.
fn record_all(
    logs: &mut [EngineLog],
    t0: Instant,
    timeout: Duration,
    csv: &mut impl Write,
) -> std::io::Result<()> {
    let observations: Vec<Observation> = std::thread::scope(|s| {
        let handles: Vec<_> = logs
            .iter()
            .map(|l| s.spawn(|| observe(&l.target, t0, timeout)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("observing an engine does not panic"))
            .collect()
    });
    for (log, obs) in logs.iter_mut().zip(observations) {
        log.record(obs, csv)?;
    }
    csv.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> EngineTarget {
        EngineTarget {
            name: "fgpu,0".into(),
            prometheus: "127.0.0.1:1".parse().unwrap(),
            pid: None,
        }
    }

    #[test]
    fn records_kinds_and_writes_rows() {
        let mut log = EngineLog::new(target());
        let mut csv = Vec::new();
        let page = "fgpu_input_heaps_total{pol=\"1\"} 10\nfgpu_input_bytes_total 5\n\
                    fgpu_input_too_old_heaps_total 0\nbroken line\n";
        let obs = Observation {
            elapsed: 1.0,
            unix: 1700000000.5,
            page: Ok(expo::parse(page)),
            rss: Some(4096),
            threads: Some(BTreeMap::from([("recv, 1".to_string(), 2.5)])),
        };
        log.record(obs, &mut csv).unwrap();
        let failed = Observation {
            elapsed: 2.0,
            unix: 1700000001.5,
            page: Err("scrape http://127.0.0.1:1/metrics: refused".into()),
            rss: None,
            threads: None,
        };
        log.record(failed, &mut csv).unwrap();
        let text = String::from_utf8(csv).unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(
            rows,
            [
                "1700000000.500,1.000,\"fgpu,0\",up,up,,1",
                "1700000000.500,1.000,\"fgpu,0\",input_heaps,fgpu_input_heaps_total,pol=1,10",
                "1700000000.500,1.000,\"fgpu,0\",too_old,fgpu_input_too_old_heaps_total,,0",
                "1700000000.500,1.000,\"fgpu,0\",rss,rss_bytes,,4096",
                "1700000000.500,1.000,\"fgpu,0\",thread_cpu,thread_cpu_seconds,\"thread=recv, 1\",2.5",
                "1700000001.500,2.000,\"fgpu,0\",up,up,,0",
            ]
        );
        assert_eq!(log.malformed_lines, 1);
        assert_eq!(log.scrape_failures, 1);
        assert!(log.last_error.as_deref().unwrap().contains("refused"));
        assert_eq!(log.samples.len(), 2);
        assert!(log.samples[0].up && !log.samples[1].up);
        let heaps = log.ids_of(Kind::InputHeaps).next().unwrap();
        assert_eq!(log.samples[0].get(heaps), Some(10.0));
        assert_eq!(log.samples[1].get(heaps), None);
    }
}
