//! `--monitor-log FILE` (fgpu, xbgpu): katgpucbf's JSON-lines queue and event monitor.
//!
//! One JSON object per line, each with `time` (seconds since the monitor was created, on
//! the monotonic clock), `type` and `name`, as katgpucbf's `FileMonitor` writes them:
//!
//! * `{"type": "qsize", "name": Q, "qsize": N, "maxsize": M}`: the depth of queue Q
//!   (`maxsize` 0: not bounded), written once when the queue is registered and then by a
//!   sampler thread every [`SAMPLE_INTERVAL`] (katgpucbf writes one per put and get; a
//!   sampler keeps the receive thread's cost to a few atomic stores);
//! * `{"type": "state", "name": T, "state": S}`: a task's state changes (`engine`:
//!   `running`, `stop-requested`, `stopped`; `recv`: `receiving` at the first chunk);
//! * `{"type": "count", "name": C, "value": N, "delta": D}`: a receive counter that moved
//!   during the interval (`chunks`, `missing-heaps`), gpucbf's addition.
//!
//! Every line is flushed when written; the sampler stops and the file is closed (after a
//! last sample and `engine stopped`) when the [`MonitorLog`] is dropped, which the engines
//! do on their way out, also after SIGINT/SIGTERM.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::chunk::{ChunkQueues, ChunkStats, RecvMonitor};

/// How often the sampler writes the queue depths.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(250);

/// Chunks the receive threads may queue for the engine (the channel's bound in both
/// engines), the `maxsize` of the `recv-ready` queue.
pub const READY_QUEUE: usize = 4;

/// The file and its clock.
struct Writer {
    file: Mutex<BufWriter<File>>,
    t0: Instant,
}

impl Writer {
    /// Writes one record with `time` and `type` in front, and flushes it. A write error is
    /// logged once and the monitor goes quiet (the engine runs on).
    fn event(&self, ty: &str, mut fields: serde_json::Map<String, serde_json::Value>) {
        let mut rec = serde_json::Map::new();
        rec.insert("time".into(), json!(self.t0.elapsed().as_secs_f64()));
        rec.insert("type".into(), json!(ty));
        rec.append(&mut fields);
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let line = serde_json::Value::Object(rec).to_string();
        if let Err(e) = writeln!(f, "{line}").and_then(|()| f.flush()) {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| tracing::warn!(error = %e, "--monitor-log: write failed"));
        }
    }
}

fn fields(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// What the receive threads publish for the sampler (atomic stores only).
#[derive(Default)]
struct RecvGauges {
    ready: AtomicU64,
    free: AtomicU64,
    chunks: AtomicU64,
    missing: AtomicU64,
}

/// An open `--monitor-log` file with its sampler thread.
pub struct MonitorLog {
    writer: Arc<Writer>,
    recv: Arc<RecvGauges>,
    stop: Option<crossbeam_channel::Sender<()>>,
    sampler: Option<std::thread::JoinHandle<()>>,
}

impl MonitorLog {
    /// Creates (truncates) `path`, writes the queues' first sizes and `engine running`, and
    /// starts the sampler, which writes `engine stop-requested` once `stop_requested` says
    /// so (the engines pass their SIGINT/SIGTERM flag). The error names the option and the
    /// file.
    pub fn create(path: &Path, stop_requested: fn() -> bool) -> std::io::Result<Self> {
        let file = File::create(path).map_err(|e| {
            std::io::Error::new(e.kind(), format!("--monitor-log {}: {e}", path.display()))
        })?;
        let writer = Arc::new(Writer {
            file: Mutex::new(BufWriter::new(file)),
            t0: Instant::now(),
        });
        let recv = Arc::new(RecvGauges::default());
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        write_queues(&writer, &recv);
        writer.event(
            "state",
            fields(json!({"name": "engine", "state": "running"})),
        );
        let (w, r) = (writer.clone(), recv.clone());
        let sampler = std::thread::Builder::new()
            .name("monitor-log".into())
            .spawn(move || sample(&w, &r, &stopped, stop_requested))?;
        Ok(MonitorLog {
            writer,
            recv,
            stop: Some(stop),
            sampler: Some(sampler),
        })
    }

    /// Wraps a receive-thread monitor: `inner` still gets every call, and the queue depths
    /// and chunk counts are stored for the sampler.
    pub fn recv_monitor(&self, mut inner: RecvMonitor) -> RecvMonitor {
        let g = self.recv.clone();
        Box::new(move |s: &ChunkStats, q: ChunkQueues| {
            g.ready.store(q.ready as u64, Ordering::Relaxed);
            g.free.store(q.free as u64, Ordering::Relaxed);
            g.chunks.store(s.chunks, Ordering::Relaxed);
            g.missing.store(s.missing_heaps, Ordering::Relaxed);
            inner(s, q);
        })
    }

    /// Writes a `state` record now (e.g. a task starting or stopping).
    pub fn state(&self, name: &str, state: &str) {
        self.writer
            .event("state", fields(json!({"name": name, "state": state})));
    }
}

impl Drop for MonitorLog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(h) = self.sampler.take() {
            let _ = h.join();
        }
        self.writer.event(
            "state",
            fields(json!({"name": "engine", "state": "stopped"})),
        );
    }
}

/// The depth of each queue.
fn write_queues(w: &Writer, g: &RecvGauges) {
    let q = |name: &str, n: &AtomicU64, max: usize| {
        let v = json!({"name": name, "qsize": n.load(Ordering::Relaxed), "maxsize": max});
        w.event("qsize", fields(v));
    };
    q("recv-ready", &g.ready, READY_QUEUE);
    q("recv-free", &g.free, 0);
}

/// The sampler: every interval the queue depths, the counters that moved and the state
/// changes, until `stopped` disconnects; then one last sample.
fn sample(
    w: &Writer,
    g: &RecvGauges,
    stopped: &crossbeam_channel::Receiver<()>,
    stop_requested: fn() -> bool,
) {
    let mut last = [0u64; 2];
    let mut stop_seen = false;
    loop {
        let end = matches!(
            stopped.recv_timeout(SAMPLE_INTERVAL),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) | Ok(())
        );
        write_queues(w, g);
        let now = [
            g.chunks.load(Ordering::Relaxed),
            g.missing.load(Ordering::Relaxed),
        ];
        if last[0] == 0 && now[0] > 0 {
            w.event(
                "state",
                fields(json!({"name": "recv", "state": "receiving"})),
            );
        }
        for (k, name) in ["chunks", "missing-heaps"].iter().enumerate() {
            if now[k] != last[k] {
                let delta = now[k].saturating_sub(last[k]);
                w.event(
                    "count",
                    fields(json!({"name": name, "value": now[k], "delta": delta})),
                );
            }
        }
        last = now;
        if !stop_seen && stop_requested() {
            stop_seen = true;
            w.event(
                "state",
                fields(json!({"name": "engine", "state": "stop-requested"})),
            );
        }
        if end {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect()
    }

    /// Records as katgpucbf's monitor writes them, the receive monitor still called, counts
    /// that moved, and the file complete (last line `engine stopped`) once dropped.
    #[test]
    fn writes_queue_depths_counts_and_states() {
        let dir = std::env::temp_dir().join(format!("gpucbf-monitor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("monitor.jsonl");
        static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let log = MonitorLog::create(&path, || STOP.load(Ordering::Relaxed)).unwrap();
        let calls = Arc::new(AtomicU64::new(0));
        let c = calls.clone();
        let mut m = log.recv_monitor(Box::new(move |_, _| {
            c.fetch_add(1, Ordering::Relaxed);
        }));
        let stats = ChunkStats {
            chunks: 3,
            missing_heaps: 5,
            ..Default::default()
        };
        m(&stats, ChunkQueues { ready: 2, free: 6 });
        std::thread::sleep(SAMPLE_INTERVAL * 2);
        STOP.store(true, Ordering::Relaxed);
        drop(log);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        let recs = lines(&path);
        assert!(recs
            .iter()
            .all(|r| r["time"].is_f64() && r["name"].is_string()));
        let times: Vec<f64> = recs.iter().map(|r| r["time"].as_f64().unwrap()).collect();
        assert!(times.windows(2).all(|t| t[0] <= t[1]), "{times:?}");
        assert_eq!(recs[0]["type"], "qsize");
        assert_eq!(recs[0]["name"], "recv-ready");
        assert_eq!(recs[0]["qsize"], 0);
        assert_eq!(recs[0]["maxsize"], READY_QUEUE);
        let has = |ty: &str, name: &str, key: &str, v: serde_json::Value| {
            recs.iter()
                .any(|r| r["type"] == ty && r["name"] == name && r[key] == v)
        };
        assert!(has("qsize", "recv-ready", "qsize", json!(2)));
        assert!(has("qsize", "recv-free", "qsize", json!(6)));
        assert!(has("state", "recv", "state", json!("receiving")));
        assert!(has("count", "missing-heaps", "delta", json!(5)));
        assert!(has("count", "chunks", "value", json!(3)));
        assert!(has("state", "engine", "state", json!("stop-requested")));
        let last = recs.last().unwrap();
        assert_eq!(
            (&last["type"], &last["state"]),
            (&json!("state"), &json!("stopped"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_cannot_be_made_is_named() {
        let e = MonitorLog::create(Path::new("/nonexistent-dir/m.jsonl"), || false)
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .starts_with("--monitor-log /nonexistent-dir/m.jsonl"),
            "{e}"
        );
    }
}
