//! `gpucbf soak`: watch engines that are already running for `--seconds`, write the report,
//! and fail (exit non-zero, naming engine, counter and amount) when anything was lost after
//! `--warm-up`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;

use super::{EngineTarget, Limits, Soak, SoakOptions, SoakReport};
use crate::control::shutdown;

/// `gpucbf soak` options.
#[derive(Debug, Clone, Args)]
pub struct SoakArgs {
    /// An engine to watch: `name=NAME,prometheus=HOST:PORT[,pid=PID]` (its
    /// `--prometheus-port`; the pid adds RSS and CPU per thread). Repeat for each engine.
    #[arg(long = "engine", value_name = "SPEC", required = true, value_parser = parse_engine)]
    pub engines: Vec<EngineTarget>,
    /// Seconds to sample. SIGINT or SIGTERM ends the soak early; the report is still written.
    #[arg(long, default_value_t = 60.0)]
    pub seconds: f64,
    /// Seconds from the start during which losses are expected (engines starting up).
    #[arg(long, default_value_t = 10.0)]
    pub warm_up: f64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Directory for soak.csv, soak.json and soak.png (created if needed).
    #[arg(long)]
    pub output: PathBuf,
    /// Also fail when the output lag (dsim: time error) exceeds this many seconds after the
    /// warm-up.
    #[arg(long, value_name = "SECONDS")]
    pub max_lag: Option<f64>,
    /// Also fail when an engine's RSS grows by more than this many percent after the warm-up.
    #[arg(long, value_name = "PERCENT")]
    pub max_rss_growth: Option<f64>,
}

impl SoakArgs {
    /// The sampling options; errors name the option.
    pub fn options(&self) -> anyhow::Result<SoakOptions> {
        if !(self.seconds.is_finite() && self.seconds > 0.0) {
            bail!("--seconds {} must be a positive number", self.seconds);
        }
        if !(self.interval.is_finite() && (0.01..=3600.0).contains(&self.interval)) {
            bail!(
                "--interval {} must be between 0.01 and 3600 s",
                self.interval
            );
        }
        if !(self.warm_up.is_finite() && self.warm_up >= 0.0 && self.warm_up < self.seconds) {
            bail!(
                "--warm-up {} must be at least 0 and shorter than --seconds {}",
                self.warm_up,
                self.seconds
            );
        }
        Ok(SoakOptions {
            interval: Duration::from_secs_f64(self.interval),
            limits: Limits {
                warm_up_s: self.warm_up,
                max_lag_s: self.max_lag,
                max_rss_growth_pct: self.max_rss_growth,
            },
            output: self.output.clone(),
        })
    }
}

/// Parses `name=NAME,prometheus=HOST:PORT[,pid=PID]` (`--engine`).
pub fn parse_engine(spec: &str) -> Result<EngineTarget, String> {
    let (mut name, mut prometheus, mut pid) = (None, None, None);
    for part in spec.split(',') {
        let Some((k, v)) = part.split_once('=') else {
            return Err(format!("{part:?} in engine {spec:?} is not KEY=VALUE"));
        };
        let (k, v) = (k.trim(), v.trim());
        let dup = match k {
            "name" => name.replace(v.to_string()).is_some(),
            "prometheus" => prometheus.replace(resolve(v)?).is_some(),
            "pid" => {
                let p =
                    v.parse::<u32>().ok().filter(|&p| p > 0).ok_or_else(|| {
                        format!("pid {v:?} in engine {spec:?} is not a process id")
                    })?;
                pid.replace(p).is_some()
            }
            _ => {
                return Err(format!(
                    "unknown key {k:?} in engine {spec:?} (want name, prometheus, pid)"
                ))
            }
        };
        if dup {
            return Err(format!("{k} given twice in engine {spec:?}"));
        }
    }
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("engine {spec:?} has no name=NAME"))?;
    let prometheus =
        prometheus.ok_or_else(|| format!("engine {spec:?} has no prometheus=HOST:PORT"))?;
    Ok(EngineTarget {
        name,
        prometheus,
        pid,
    })
}

/// `HOST:PORT` to one address (IPv4 first).
fn resolve(v: &str) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = v
        .to_socket_addrs()
        .map_err(|e| format!("prometheus address {v:?}: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("prometheus address {v:?} resolves to nothing"))
}

/// Runs `gpucbf soak`: samples for `--seconds` (or until SIGINT/SIGTERM) and writes the
/// report. The caller checks `report.summary.verdict`.
pub fn run(args: &SoakArgs) -> anyhow::Result<SoakReport> {
    let opts = args.options()?;
    shutdown::install();
    let soak = Soak::start(args.engines.clone(), opts)?;
    let end = Instant::now() + Duration::from_secs_f64(args.seconds);
    while !shutdown::requested() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
    if shutdown::requested() {
        tracing::info!(
            after_s = soak.elapsed().as_secs_f64(),
            "soak: stopped by a signal; writing the report"
        );
    }
    soak.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_specs() {
        let e = parse_engine("name=fgpu0,prometheus=127.0.0.1:9100,pid=1234").unwrap();
        assert_eq!(e.name, "fgpu0");
        assert_eq!(e.prometheus, "127.0.0.1:9100".parse().unwrap());
        assert_eq!(e.pid, Some(1234));
        let e = parse_engine(" prometheus = localhost:9 , name = x ").unwrap();
        assert_eq!((e.name.as_str(), e.pid), ("x", None));
        assert!(e.prometheus.ip().is_loopback());
        for (bad, want) in [
            ("name=a", "no prometheus"),
            ("prometheus=127.0.0.1:1", "no name"),
            ("name=,prometheus=127.0.0.1:1", "no name"),
            ("name=a,prometheus=127.0.0.1", "prometheus address"),
            ("name=a,prometheus=127.0.0.1:1,pid=x", "not a process id"),
            ("name=a,prometheus=127.0.0.1:1,pid=0", "not a process id"),
            ("name=a,name=b,prometheus=127.0.0.1:1", "name given twice"),
            (
                "name=a,prometheus=127.0.0.1:1,port=3",
                "unknown key \"port\"",
            ),
            ("name=a,prometheus=127.0.0.1:1,junk", "not KEY=VALUE"),
        ] {
            let e = parse_engine(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn option_ranges() {
        let args = |seconds: f64, warm_up: f64, interval: f64| SoakArgs {
            engines: vec![],
            seconds,
            warm_up,
            interval,
            output: "/tmp/x".into(),
            max_lag: None,
            max_rss_growth: None,
        };
        let o = args(60.0, 10.0, 1.0).options().unwrap();
        assert_eq!(o.interval, Duration::from_secs(1));
        assert_eq!(o.limits.warm_up_s, 10.0);
        for (a, want) in [
            (args(0.0, 0.0, 1.0), "--seconds"),
            (args(f64::NAN, 0.0, 1.0), "--seconds"),
            (args(10.0, 10.0, 1.0), "--warm-up"),
            (args(10.0, -1.0, 1.0), "--warm-up"),
            (args(10.0, 1.0, 0.0), "--interval"),
            (args(10.0, 1.0, f64::INFINITY), "--interval"),
        ] {
            let e = a.options().unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}
