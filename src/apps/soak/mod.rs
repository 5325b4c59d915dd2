//! Soak reports: watch running engines for a long time and say whether anything was lost.
//!
//! Every interval (1 s by default) the sampler scrapes each engine's Prometheus endpoint
//! (`GET /metrics`, [`expo`]) and reads its process from `/proc` ([`probe`]): heaps received,
//! missing, too old, rejected by reason, incomplete, output heaps and skipped heaps, the
//! chunk queue depths, the output lag gauge (`*_output_lag_seconds`, dsim's
//! `dsim_time_error_s`), RSS and CPU seconds per thread ([`series`] lists the names). At the
//! end it writes, in the output directory:
//!
//! * `soak.csv`: every sampled value, in **long format**, one row per (time, engine, series):
//!   `unix_time,elapsed_s,engine,kind,series,labels,value`, e.g.
//!   `1764160000.125,12.001,fgpu0,too_old,fgpu_input_too_old_heaps_total,,0` or
//!   `...,fgpu0,thread_cpu,thread_cpu_seconds,thread=recv,3.52`. Long rather than wide
//!   because the set of series is not known when the file starts: fgpu, xbgpu and dsim export
//!   different metrics, labelled families (per pol, per stream) and threads appear while the
//!   engines run, and the output-lag gauge exists only on newer engines. A wide file would
//!   need its header rewritten, or empty columns for what an engine does not have; the long
//!   file has seven fixed columns, is appended and flushed every second (a killed soak leaves
//!   a valid file), and is one call from any view: `df = pandas.read_csv("soak.csv")`, then
//!   `df[df.kind == "too_old"].pivot_table(index="elapsed_s", columns="engine",
//!   values="value", aggfunc="sum")`. `kind` ([`series::Kind`]) groups the same meaning
//!   across engines (`too_old` is `fgpu_input_too_old_heaps_total` and
//!   `xbgpu_input_too_old_heaps_total`); `series` is the exported name; `labels` is
//!   `k=v;k=v`. Counters are cumulative as exported; a failed scrape is a row `up` = 0.
//! * `soak.json`: [`SoakSummary`]: per engine the counters' final values, losses after the
//!   warm-up by reason and by series, max lag, chunk queue extremes, RSS start/end/growth,
//!   CPU seconds per thread, and the [`Verdict`].
//! * `soak.png`: heap rate, cumulative losses, lag, RSS, CPU per thread and chunk queues
//!   against time, warm-up shaded, verdict in the title ([`plot`]).
//!
//! The soak fails ([`Verdict::check`]) when any missing / too-old / rejected / incomplete /
//! skipped counter rose after the warm-up, when an engine cannot be scraped at the end or its
//! process is gone, and, where limits are given, when lag or RSS growth exceed them
//! ([`summary`] says how each is computed).
//!
//! Use from code (`gpucbf array`): [`Soak::start`] with the engines and [`SoakOptions`], run
//! the array, then [`Soak::finish`] gives the [`SoakReport`]; `report.summary.verdict` says
//! whether it passed. From the command line: `gpucbf soak` ([`SoakArgs`], [`run`]).

pub mod cli;
pub mod curves;
pub mod expo;
pub mod plot;
pub mod probe;
pub mod sampler;
pub mod series;
pub mod summary;
#[cfg(test)]
mod tests_summary;

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

pub use cli::{parse_engine, run, SoakArgs};
pub use sampler::EngineTarget;
pub use summary::{Limits, Problem, SoakSummary, Verdict};

use sampler::{SamplerThread, CSV_HEADER};

/// How a soak samples and what fails it.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakOptions {
    /// Time between samples (1 s for a report; shorter in tests).
    pub interval: Duration,
    /// Warm-up and optional lag / RSS limits.
    pub limits: Limits,
    /// Directory for `soak.csv`, `soak.json` and `soak.png` (created if needed).
    pub output: PathBuf,
}

impl SoakOptions {
    /// Options with a 1 s interval and no lag or RSS limit.
    pub fn new(output: impl Into<PathBuf>, warm_up: Duration) -> Self {
        SoakOptions {
            interval: Duration::from_secs(1),
            limits: Limits {
                warm_up_s: warm_up.as_secs_f64(),
                ..Default::default()
            },
            output: output.into(),
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        let l = &self.limits;
        if self.interval < Duration::from_millis(10) {
            bail!("soak interval {:?} is below 10 ms", self.interval);
        }
        if !(l.warm_up_s.is_finite() && l.warm_up_s >= 0.0) {
            bail!(
                "soak warm-up {} s is not a non-negative number",
                l.warm_up_s
            );
        }
        if let Some(v) = l.max_lag_s.filter(|v| !(v.is_finite() && *v >= 0.0)) {
            bail!("soak lag limit {v} s is not a non-negative number");
        }
        if let Some(v) = l.max_rss_growth_pct.filter(|v| !v.is_finite()) {
            bail!("soak RSS growth limit {v} % is not a number");
        }
        Ok(())
    }
}

/// A running soak: its sampling thread is writing `soak.csv`.
pub struct Soak {
    sampler: SamplerThread,
    opts: SoakOptions,
    csv: PathBuf,
    started: Instant,
}

/// What a finished soak wrote, and its summary.
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// The report (also in `soak.json`); `summary.verdict` says pass or fail.
    pub summary: SoakSummary,
    /// `soak.csv`.
    pub csv: PathBuf,
    /// `soak.json`.
    pub json: PathBuf,
    /// `soak.png`.
    pub png: PathBuf,
}

impl Soak {
    /// Creates the output directory and `soak.csv`, and starts sampling `engines` (the
    /// first sample at once; the warm-up counts from now).
    pub fn start(engines: Vec<EngineTarget>, opts: SoakOptions) -> anyhow::Result<Soak> {
        opts.validate()?;
        if engines.is_empty() {
            bail!("a soak needs at least one engine to watch");
        }
        let mut names = HashSet::new();
        for e in &engines {
            if e.name.is_empty() || !names.insert(e.name.as_str()) {
                bail!("soak engine name {:?} is empty or given twice", e.name);
            }
        }
        std::fs::create_dir_all(&opts.output)
            .with_context(|| format!("creating soak output directory {}", opts.output.display()))?;
        let csv = opts.output.join("soak.csv");
        let file =
            std::fs::File::create(&csv).with_context(|| format!("creating {}", csv.display()))?;
        let mut w = std::io::BufWriter::new(file);
        writeln!(w, "{CSV_HEADER}").with_context(|| format!("writing {}", csv.display()))?;
        let started = Instant::now();
        tracing::info!(
            engines = engines.len(),
            interval_s = opts.interval.as_secs_f64(),
            warm_up_s = opts.limits.warm_up_s,
            csv = %csv.display(),
            "soak: sampling"
        );
        let sampler = SamplerThread::spawn(engines, opts.interval, started, Box::new(w))
            .context("starting the soak sampling thread")?;
        Ok(Soak {
            sampler,
            opts,
            csv,
            started,
        })
    }

    /// Seconds since [`Soak::start`].
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Takes a last sample, stops sampling, and writes `soak.json` and `soak.png`.
    pub fn finish(self) -> anyhow::Result<SoakReport> {
        let logs = self
            .sampler
            .finish()
            .with_context(|| format!("writing {}", self.csv.display()))?;
        let summary = summary::summarise(&logs, self.opts.interval.as_secs_f64(), self.opts.limits);
        let json = self.opts.output.join("soak.json");
        let text = serde_json::to_string_pretty(&summary)?;
        std::fs::write(&json, text + "\n")
            .with_context(|| format!("writing {}", json.display()))?;
        let png = self.opts.output.join("soak.png");
        plot::write_png(&png, &logs, &summary)?;
        for p in &summary.verdict.problems {
            tracing::warn!(engine = %p.engine, what = %p.what, "soak: {}", p.message);
        }
        tracing::info!(
            ok = summary.verdict.ok,
            duration_s = summary.duration_s,
            json = %json.display(),
            png = %png.display(),
            "soak: finished"
        );
        Ok(SoakReport {
            summary,
            csv: self.csv,
            json,
            png,
        })
    }
}
