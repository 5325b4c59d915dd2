//! Telemetry: what the engines tell operators besides katcp.
//!
//! * Logging set-up (human or JSON lines on stderr) shared by every subcommand, here.
//! * [`metrics`]: an engine's Prometheus registry and its `/metrics` endpoint.
//! * [`recv`]: the receive thread's chunk counters and queue depths as Prometheus metrics.

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

/// Installs the global subscriber. `RUST_LOG` overrides the default `info` level.
pub fn init_logging(format: LogFormat) {
    let _ = FORMAT.set(format);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

pub mod cpu;
pub mod metrics;
pub mod recv;
