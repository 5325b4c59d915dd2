//! Telemetry: what the engines tell operators besides katcp.
//!
//! * Logging set-up (human or JSON lines on stderr) shared by every subcommand, here.
//! * [`metrics`]: an engine's Prometheus registry and its `/metrics` endpoint.
//! * [`recv`]: the receive thread's chunk counters and queue depths as Prometheus metrics.
//! * [`monitor`]: `--monitor-log`, katgpucbf's JSON-lines queue and event monitor.
//! * [`stages`]: wall-clock seconds per thread and stage of the engines' loops.
//! * [`faults`]: process-wide fault counters (packets dropped for unreachable destinations).
//! * [`kernel`]: the host kernel's own drop counters (backlog, UDP receive buffers).

use tracing_subscriber::EnvFilter;

/// How log lines are written to stderr (`--log-format`).
///
/// The variants' docs are for rustdoc only: `help = None` keeps them out of `--help`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum LogFormat {
    /// tracing-subscriber's default text format: time, level, target, message, fields.
    #[default]
    #[value(help = None::<&'static str>)]
    Human,
    /// One JSON object per line (tracing-subscriber's `json` format), for log collectors.
    #[value(help = None::<&'static str>)]
    Json,
}

static FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// The format chosen at start-up (for tools that start child engines or draw progress).
pub fn log_format() -> LogFormat {
    FORMAT.get().copied().unwrap_or_default()
}

/// The katcp log levels (`?log-level`, aiokatcp's names), from most to least verbose.
pub const LOG_LEVELS: [&str; 8] = [
    "all", "trace", "debug", "info", "warn", "error", "fatal", "off",
];

/// A `?log-level` that is none of [`LOG_LEVELS`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown log level {0:?}: expected one of all, trace, debug, info, warn, error, fatal, off"
)]
pub struct UnknownLogLevel(pub String);

/// The tracing filter that a katcp level stands for (`all` is `trace`, `fatal` is `error`:
/// tracing has no finer or coarser levels).
fn level_directive(level: &str) -> Option<&'static str> {
    Some(match level {
        "all" | "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" => "warn",
        "error" | "fatal" => "error",
        "off" => "off",
        _ => return None,
    })
}

type ReloadHandle = tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>;

/// The installed subscriber's filter (set once by [`init_logging`]) and the katcp name of
/// the level it was last set to.
static FILTER: std::sync::OnceLock<ReloadHandle> = std::sync::OnceLock::new();
static LEVEL: std::sync::Mutex<Option<&'static str>> = std::sync::Mutex::new(None);

/// The current level as katcp names it: the one last set with [`set_log_level`], else the
/// most verbose level that the start-up filter (`RUST_LOG`, default `info`) lets through.
pub fn log_level() -> &'static str {
    if let Some(l) = LEVEL.lock().ok().and_then(|l| *l) {
        return l;
    }
    use tracing::level_filters::LevelFilter;
    match tracing::level_filters::LevelFilter::current() {
        LevelFilter::TRACE => "trace",
        LevelFilter::DEBUG => "debug",
        LevelFilter::INFO => "info",
        LevelFilter::WARN => "warn",
        LevelFilter::ERROR => "error",
        _ => "off",
    }
}

/// Sets the level of the installed subscriber (katcp `?log-level <level>`), replacing any
/// `RUST_LOG` filter; takes effect at once, for every thread.
pub fn set_log_level(level: &str) -> Result<(), UnknownLogLevel> {
    let directive = level_directive(level).ok_or_else(|| UnknownLogLevel(level.to_string()))?;
    let name = LOG_LEVELS
        .iter()
        .find(|l| **l == level)
        .copied()
        .unwrap_or("off");
    let mut held = LEVEL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(h) = FILTER.get() {
        // Only fails when the subscriber is gone (the process is ending).
        let _ = h.reload(EnvFilter::new(directive));
    }
    *held = Some(name);
    Ok(())
}

/// Installs the global subscriber. `RUST_LOG` overrides the default `info` level; katcp
/// `?log-level` changes it later ([`set_log_level`]).
pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let _ = FORMAT.set(format);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    let installed = match format {
        LogFormat::Human => registry.with(fmt).try_init(),
        LogFormat::Json => registry.with(fmt.json()).try_init(),
    };
    if installed.is_ok() {
        let _ = FILTER.set(handle);
    }
}

pub mod cpu;
pub mod faults;
pub mod kernel;
pub mod metrics;
pub mod monitor;
pub mod process;
pub mod recv;
pub mod stages;

/// Runs `f`, returning its result and what it logged on this thread (no colours): tests
/// that check an engine's log lines.
#[cfg(test)]
pub(crate) fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let w = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || w.clone())
        .finish();
    let r = tracing::subscriber::with_default(subscriber, f);
    let out = buf.0.lock().unwrap().clone();
    (r, String::from_utf8(out).unwrap())
}
