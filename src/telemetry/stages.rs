//! Where the engines' threads spend their time: wall-clock seconds per thread and stage
//! (`NAMESPACE_thread_stage_seconds_total{thread, stage}`), e.g. the F-engine's main thread
//! waiting for input, waiting for the GPU, copying outputs, waiting for the send queue.
//!
//! The device host has no `perf` or `strace`, so these counters are how a soak finds the
//! stage that holds the data path up: a thread whose `wait_*` stages stop growing while its
//! input backs up is the one to look at. Timing costs two clock reads per timed stage; the
//! timed stages run per chunk, per batch or per heap, never per packet.
//!
//! The counters are process-wide (one engine per process); [`register`] adds them to an
//! engine's registry.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::telemetry::metrics::{labels, Labels, Metrics};

type Seconds = Counter<f64, std::sync::atomic::AtomicU64>;

fn family() -> &'static Family<Labels, Seconds> {
    static FAMILY: OnceLock<Family<Labels, Seconds>> = OnceLock::new();
    FAMILY.get_or_init(Family::default)
}

/// Adds the stage counters to `m` as `thread_stage_seconds` (exposed with `_total`).
pub fn register(m: &Metrics) {
    m.register(
        "thread_stage_seconds",
        "Wall-clock seconds a thread spent in a stage of its loop",
        family().clone(),
    );
}

/// One (thread, stage) counter.
#[derive(Clone)]
pub struct Stage(Seconds);

impl Stage {
    /// The counter of `stage` on `thread` (created at zero the first time).
    pub fn new(thread: &str, stage: &str) -> Self {
        Stage(
            family()
                .get_or_create(&labels(&[("thread", thread), ("stage", stage)]))
                .clone(),
        )
    }

    /// Adds `d`.
    pub fn add(&self, d: Duration) {
        self.0.inc_by(d.as_secs_f64());
    }

    /// Adds the time since `start`; returns now (the start of the next stage).
    pub fn since(&self, start: Instant) -> Instant {
        let now = Instant::now();
        self.add(now - start);
        now
    }

    /// Runs `f`, adding its duration.
    pub fn time<T>(&self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        self.since(t);
        r
    }

    /// Seconds counted so far.
    pub fn seconds(&self) -> f64 {
        self.0.get()
    }
}

/// Declares a struct of [`Stage`]s of one thread and its `new()`:
/// `stage_set!(struct Name("thread") { /// doc
/// field = "stage", ... })`.
#[macro_export]
macro_rules! stage_set {
    ($(#[$m:meta])* $vis:vis struct $name:ident($thread:literal) {
        $($(#[$fm:meta])* $field:ident = $stage:literal),* $(,)?
    }) => {
        $(#[$m])*
        $vis struct $name {
            $($(#[$fm])* $field: $crate::telemetry::stages::Stage,)*
        }

        impl $name {
            fn new() -> Self {
                $name {
                    $($field: $crate::telemetry::stages::Stage::new($thread, $stage),)*
                }
            }
        }
    };
}

/// A sender's stages on thread `thread`: building packets, waiting for the pacer, the
/// socket calls.
#[derive(Clone)]
pub struct SendStages {
    /// Building the packets (headers).
    pub build: Stage,
    /// Waiting for the pacer.
    pub pace: Stage,
    /// In the sink (the socket calls).
    pub sink: Stage,
}

impl SendStages {
    /// The stages `build`, `pace` and `sink` of `thread`.
    pub fn new(thread: &str) -> Self {
        SendStages {
            build: Stage::new(thread, "build"),
            pace: Stage::new(thread, "pace"),
            sink: Stage::new(thread, "sink"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_accumulate_and_render_with_labels() {
        let s = Stage::new("test-thread", "sleep");
        s.add(Duration::from_millis(250));
        s.time(|| std::thread::sleep(Duration::from_millis(5)));
        assert!(
            s.seconds() >= 0.255 && s.seconds() < 10.0,
            "{}",
            s.seconds()
        );
        // The same labels share the counter.
        assert_eq!(Stage::new("test-thread", "sleep").seconds(), s.seconds());
        let m = Metrics::new("t");
        register(&m);
        let text = m.render();
        assert!(
            text.contains("t_thread_stage_seconds_total{thread=\"test-thread\",stage=\"sleep\"}"),
            "{text}"
        );
    }
}
