//! [`ConfigError`]: why an engine's command line does not make a configuration. Every engine
//! (and `gpucbf array`) parses its options into a typed configuration before anything starts;
//! a value that breaks a rule fails there, with a message that names the option or key.

/// An invalid option or `key=value` output spec. The messages name what is wrong
/// (`--feng-id must be below --array-size`, `taps=0 out of range 1..=64`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An option or key breaks a rule: `subject` (the option, or `key=value`) and the rule,
    /// e.g. `--adc-sample-rate` / `must be positive`.
    #[error("{subject} {rule}")]
    Rule {
        /// What the rule is about: an option (`--period 1000`) or a key (`channels=1000`).
        subject: String,
        /// The rule it breaks (`must be a power of two ≥ 64`).
        rule: String,
    },
    /// A `key=value` spec item has a value the key does not take (`taps=x: not a number`).
    #[error("{key}={value}: {problem}")]
    Value {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What is wrong with it (`not an integer`, `expected hann or rect`).
        problem: &'static str,
    },
    /// A spec item without `=` where no list continues (`oops` in `--wideband oops`).
    #[error("expected key=value, got {0:?}")]
    NotKeyValue(String),
    /// A key the spec does not know.
    #[error("unknown --{option} key {key:?}")]
    UnknownKey {
        /// The option whose spec it is (`wideband`).
        option: &'static str,
        /// The unknown key.
        key: String,
    },
    /// A key the spec needs was not given (`output needs dst=`).
    #[error("{what} needs {key}=")]
    MissingKey {
        /// What needs it (`output`, `--corrprod`).
        what: &'static str,
        /// The key.
        key: &'static str,
    },
    /// No output was asked for.
    #[error("give at least one {options} output")]
    NoOutput {
        /// The options that make outputs (`--wideband or --narrowband`).
        options: &'static str,
    },
    /// `--backend gpu` where no GPU can be used.
    #[error("--backend gpu: no usable CUDA device found (use --backend cpu or auto)")]
    NoGpu,
    /// Endpoints that do not parse (`ADDR[+N]:PORT[,...]`).
    #[error("{0}")]
    Endpoints(String),
    /// A receive layout (heap and chunk sizes) that does not fit together.
    #[error("{0}")]
    Placement(String),
    /// A compute shape the backends do not take.
    #[error("{0}")]
    Shape(String),
    /// An option's value does not parse: the option and the parser's error (dsim's
    /// `--signals: unknown function or variable "a"`). The message carries the parser's
    /// error whole (so it is not repeated as a cause).
    #[error("{option}: {reason}")]
    Parse {
        /// The option.
        option: &'static str,
        /// Why its value does not parse.
        reason: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl ConfigError {
    /// A [`ConfigError::Rule`]: `subject` breaks `rule`.
    pub fn rule(subject: impl Into<String>, rule: impl Into<String>) -> Self {
        ConfigError::Rule {
            subject: subject.into(),
            rule: rule.into(),
        }
    }

    /// A [`ConfigError::Value`]: `key=value` is `problem`.
    pub fn value(key: &str, value: &str, problem: &'static str) -> Self {
        ConfigError::Value {
            key: key.to_string(),
            value: value.to_string(),
            problem,
        }
    }
}

/// Parses endpoints (`ADDR[+N]:PORT[,...]`) into a [`ConfigError`] on failure.
pub fn endpoints(spec: &str) -> Result<Vec<std::net::SocketAddrV4>, ConfigError> {
    crate::net::parse_endpoints(spec).map_err(|e| ConfigError::Endpoints(e.to_string()))
}

/// Serves `metrics` at `addr` (`--prometheus-port` on `--prometheus-host`), if given; a
/// port that cannot be opened is an error naming the option.
pub fn serve_prometheus(
    metrics: &crate::telemetry::metrics::Metrics,
    addr: Option<std::net::SocketAddrV4>,
) -> std::io::Result<()> {
    if let Some(addr) = addr {
        let bound = metrics
            .serve(addr.into())
            .map_err(listen_error("--prometheus-port", addr))?;
        tracing::info!(%bound, "prometheus metrics at /metrics");
    }
    Ok(())
}

/// A listening socket that could not be opened, named by its option and address
/// (`--prometheus-port 9100: listening on TCP 0.0.0.0:9100: Address already in use`): the
/// operating system's message alone names no port.
pub fn listen_error(
    option: &str,
    addr: impl Into<std::net::SocketAddr>,
) -> impl FnOnce(std::io::Error) -> std::io::Error {
    let addr = addr.into();
    let option = option.to_string();
    move |e| {
        std::io::Error::new(
            e.kind(),
            format!("{option} {}: listening on TCP {addr}: {e}", addr.port()),
        )
    }
}

/// An engine stopped by a failed compute call (a GPU call that failed: a lost device, a
/// failed launch) says so everywhere a telescope looks: logged as an error, counted
/// (`NAMESPACE_compute_failures_total`), `device-status` set to fail, and the error returned
/// with `"the {engine} stopped: a compute call failed"` (the process exits 1). `compute`
/// tells whether `e` is such a failure; other errors pass unchanged.
pub fn compute_failure(
    engine: &str,
    sensors: &crate::control::sensors::SensorSet,
    e: anyhow::Error,
    compute: impl Fn(&(dyn std::error::Error + 'static)) -> bool,
) -> anyhow::Error {
    use crate::control::sensors::{Status, DEVICE_STATUS};
    if !e.chain().any(compute) {
        return e;
    }
    crate::telemetry::faults::add_compute_failure();
    sensors.set(DEVICE_STATUS, "fail", Status::Error);
    tracing::error!(error = %e, "a compute call failed: the {engine} stops");
    e.context(format!("the {engine} stopped: a compute call failed"))
}
