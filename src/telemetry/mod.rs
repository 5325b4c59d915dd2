//! Logging set-up (human or JSON lines) shared by every subcommand.

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum LogFormat {
    #[default]
    Human,
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

pub mod metrics;
pub mod recv;
