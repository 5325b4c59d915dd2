//! `soak.json` and the verdict: per engine, the counters' totals, what was lost after the
//! warm-up (by reason and by series), the largest lag, RSS growth and CPU per thread.
//!
//! Losses are increases of the counters of [`Kind::is_loss`] kinds from the **baseline** (the
//! engine's last successful sample at or before the end of the warm-up; its first successful
//! sample where there is none) to the last sample. A series absent at the baseline counts
//! from zero (a labelled family is created when it first counts). A counter that goes down
//! was reset (the engine restarted): its new value counts as increase, as Prometheus's
//! `increase()` does. A missed scrape hides nothing, since counters are cumulative; an engine
//! that cannot be scraped at the end, or whose process is gone, fails the soak.

use std::collections::BTreeMap;

use serde::Serialize;

use super::sampler::{EngineLog, Sample};
use super::series::Kind;

/// What fails a soak besides losses.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Limits {
    /// Seconds from the start during which losses are expected (start-up).
    pub warm_up_s: f64,
    /// Largest output lag (or dsim time error) allowed after the warm-up, in seconds.
    pub max_lag_s: Option<f64>,
    /// Largest RSS growth allowed from the end of the warm-up to the end, in percent.
    pub max_rss_growth_pct: Option<f64>,
}

/// The whole report (`soak.json`).
#[derive(Debug, Clone, Serialize)]
pub struct SoakSummary {
    /// Unix time of the first sample.
    pub started_unix: f64,
    /// Seconds from the first sample to the last.
    pub duration_s: f64,
    /// Sampling interval in seconds.
    pub interval_s: f64,
    /// The limits applied.
    pub limits: Limits,
    /// One entry per engine, in the order given.
    pub engines: Vec<EngineSummary>,
    /// Pass or fail, and why.
    pub verdict: Verdict,
}

/// One engine's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct EngineSummary {
    /// The engine's name.
    pub name: String,
    /// Its Prometheus endpoint.
    pub prometheus: String,
    /// Its process id, where given.
    pub pid: Option<u32>,
    /// Samples taken.
    pub samples: usize,
    /// Samples whose scrape failed.
    pub scrape_failures: u64,
    /// The latest scrape error.
    pub last_scrape_error: Option<String>,
    /// Exposition lines that did not parse.
    pub malformed_lines: u64,
    /// Seconds (since the start) of the baseline sample losses are counted from.
    pub baseline_s: Option<f64>,
    /// Final value of every recorded counter, keyed `name{labels}`.
    pub totals: BTreeMap<String, f64>,
    /// Sum of the final input heap counters.
    pub input_heaps: f64,
    /// Sum of the final output heap counters.
    pub output_heaps: f64,
    /// Increase after the warm-up per loss reason (`missing`, `too_old`, `rejected`,
    /// `incomplete`, `skipped`; zero where nothing was lost).
    pub losses_after_warm_up: BTreeMap<&'static str, f64>,
    /// Every series that lost something after the warm-up.
    pub loss_series: Vec<LossSeries>,
    /// Largest output lag or dsim time error after the warm-up, in seconds (`None` where the
    /// engine exports neither).
    pub max_lag_s: Option<f64>,
    /// Most received chunks waiting for the engine after the warm-up.
    pub max_ready_chunks: Option<f64>,
    /// Fewest free chunk buffers after the warm-up (0: the receiver ran out).
    pub min_free_chunks: Option<f64>,
    /// Resident memory, where a pid was given and read.
    pub rss: Option<RssSummary>,
    /// CPU time per thread name over the soak, busiest first.
    pub threads: Vec<ThreadCpu>,
    /// True when this engine raised no problem.
    pub ok: bool,
}

/// A counter that rose after the warm-up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LossSeries {
    /// `name{labels}`.
    pub series: String,
    /// Its loss reason.
    pub kind: Kind,
    /// How much it rose.
    pub amount: f64,
    /// Seconds since the start of the first sample that showed the rise.
    pub first_at_s: f64,
}

/// Resident memory of an engine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RssSummary {
    /// At the baseline (end of the warm-up), bytes.
    pub start_bytes: u64,
    /// At the last sample, bytes.
    pub end_bytes: u64,
    /// Largest seen, bytes.
    pub max_bytes: u64,
    /// (end - start) / start, percent.
    pub growth_pct: f64,
}

/// CPU time of an engine's threads of one name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadCpu {
    /// Thread name (`comm`).
    pub thread: String,
    /// CPU seconds used during the soak.
    pub cpu_seconds: f64,
    /// Mean use in percent of one core.
    pub mean_cpu_percent: f64,
}

/// Pass or fail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// True when no engine raised a problem.
    pub ok: bool,
    /// What failed, engine by engine.
    pub problems: Vec<Problem>,
}

/// One reason a soak failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    /// The engine.
    pub engine: String,
    /// What: a loss reason (`too_old`, ...), `lag`, `rss_growth`, `unreachable` or `exited`.
    pub what: String,
    /// The series concerned, for losses.
    pub series: Option<String>,
    /// How much (heaps lost, seconds of lag, percent of growth; 0 otherwise).
    pub amount: f64,
    /// A sentence naming the engine, the counter and the amount.
    pub message: String,
}

impl Verdict {
    /// `Ok` when the soak passed, otherwise an error listing every problem.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.ok {
            return Ok(());
        }
        let lines: Vec<&str> = self.problems.iter().map(|p| p.message.as_str()).collect();
        anyhow::bail!("soak failed:\n  {}", lines.join("\n  "))
    }
}

/// The report of sampled logs.
pub fn summarise(logs: &[EngineLog], interval_s: f64, limits: Limits) -> SoakSummary {
    let mut problems = Vec::new();
    let engines: Vec<EngineSummary> = logs
        .iter()
        .map(|l| engine_summary(l, &limits, &mut problems))
        .collect();
    let first = logs.iter().filter_map(|l| l.samples.first());
    let last = logs.iter().filter_map(|l| l.samples.last());
    let t0 = first
        .clone()
        .map(|s| s.elapsed)
        .fold(f64::INFINITY, f64::min);
    let t1 = last.map(|s| s.elapsed).fold(f64::NEG_INFINITY, f64::max);
    SoakSummary {
        started_unix: first.map(|s| s.unix - s.elapsed).next().unwrap_or(0.0),
        duration_s: if t1 >= t0 { t1 - t0 } else { 0.0 },
        interval_s,
        limits,
        engines,
        verdict: Verdict {
            ok: problems.is_empty(),
            problems,
        },
    }
}

/// The baseline sample: the last successful one at or before the warm-up's end, else the
/// first successful one.
pub fn baseline(samples: &[Sample], warm_up_s: f64) -> Option<usize> {
    let ok = || samples.iter().enumerate().filter(|(_, s)| s.up);
    ok().rfind(|(_, s)| s.elapsed <= warm_up_s)
        .or_else(|| ok().next())
        .map(|(i, _)| i)
}

/// Increase of series `id` from sample `from` to the end (absent at `from` = 0; a drop is a
/// reset), and the time of the first sample that showed an increase.
pub fn increase(samples: &[Sample], from: usize, id: u32) -> (f64, Option<f64>) {
    let Some(start) = samples.get(from) else {
        return (0.0, None);
    };
    let mut prev = start.get(id).filter(|v| v.is_finite()).unwrap_or(0.0);
    let mut total = 0.0;
    let mut first = None;
    for s in &samples[from + 1..] {
        let Some(v) = s.get(id).filter(|v| v.is_finite()) else {
            continue;
        };
        let inc = if v >= prev { v - prev } else { v };
        if inc > 0.0 {
            total += inc;
            first.get_or_insert(s.elapsed);
        }
        prev = v;
    }
    (total, first)
}

fn engine_summary(l: &EngineLog, lim: &Limits, problems: &mut Vec<Problem>) -> EngineSummary {
    let name = &l.target.name;
    let n_before = problems.len();
    let mut problem = |what: &str, series: Option<String>, amount: f64, message: String| {
        problems.push(Problem {
            engine: name.clone(),
            what: what.to_string(),
            series,
            amount,
            message,
        })
    };
    let samples = &l.samples;
    let base = baseline(samples, lim.warm_up_s);
    let after = |s: &&Sample| s.elapsed > lim.warm_up_s;

    // Totals: the last value of every counter.
    let mut totals = BTreeMap::new();
    let (mut input_heaps, mut output_heaps) = (0.0, 0.0);
    for (id, (key, kind)) in l.series.iter().enumerate() {
        if !kind.is_counter() || *kind == Kind::ThreadCpu {
            continue;
        }
        if let Some(v) = samples.iter().rev().find_map(|s| s.get(id as u32)) {
            totals.insert(key.display(), v);
            match kind {
                Kind::InputHeaps => input_heaps += v,
                Kind::OutputHeaps => output_heaps += v,
                _ => {}
            }
        }
    }

    // Losses after the warm-up.
    let mut losses: BTreeMap<&'static str, f64> = [
        Kind::Missing,
        Kind::TooOld,
        Kind::Rejected,
        Kind::Incomplete,
        Kind::Skipped,
    ]
    .iter()
    .map(|k| (k.as_str(), 0.0))
    .collect();
    let mut loss_series = Vec::new();
    if let Some(b) = base {
        for (id, (key, kind)) in l.series.iter().enumerate() {
            if !kind.is_loss() {
                continue;
            }
            let (amount, first) = increase(samples, b, id as u32);
            if let (true, Some(first_at_s)) = (amount > 0.0, first) {
                *losses.entry(kind.as_str()).or_default() += amount;
                let series = key.display();
                problem(
                    kind.as_str(),
                    Some(series.clone()),
                    amount,
                    format!("{name}: {series} rose by {amount} after the warm-up (first seen at {first_at_s:.1} s)"),
                );
                loss_series.push(LossSeries {
                    series,
                    kind: *kind,
                    amount,
                    first_at_s,
                });
            }
        }
    }

    // Reachability and the process.
    let addr = l.target.prometheus;
    let err = l.last_error.as_deref().unwrap_or("no sample");
    match (base, samples.last()) {
        (None, _) => problem(
            "unreachable",
            None,
            0.0,
            format!("{name}: no scrape of http://{addr}/metrics succeeded ({err})"),
        ),
        (Some(_), Some(last)) if !last.up => {
            let last_ok = samples
                .iter()
                .rev()
                .find(|s| s.up)
                .map_or(0.0, |s| s.elapsed);
            problem(
                "unreachable",
                None,
                0.0,
                format!("{name}: the last scrape failed ({err}); losses after {last_ok:.1} s are unknown"),
            );
        }
        _ => {}
    }
    let rss_id = l.ids_of(Kind::Rss).next();
    if let (Some(pid), Some(last)) = (l.target.pid, samples.last()) {
        if rss_id.and_then(|id| last.get(id)).is_none() {
            problem(
                "exited",
                None,
                0.0,
                format!(
                    "{name}: process {pid} is gone (no /proc/{pid}/status) at the end of the soak"
                ),
            );
        }
    }

    // Lag and queues after the warm-up.
    let max_of = |kinds: &[Kind], pick: fn(f64, f64) -> f64| -> Option<f64> {
        let ids: Vec<u32> = kinds.iter().flat_map(|&k| l.ids_of(k)).collect();
        samples
            .iter()
            .filter(after)
            .flat_map(|s| ids.iter().filter_map(|&id| s.get(id)))
            .filter(|v| v.is_finite())
            .reduce(pick)
    };
    let max_lag_s = max_of(&[Kind::OutputLag, Kind::TimeError], f64::max);
    if let (Some(lag), Some(limit)) = (max_lag_s, lim.max_lag_s) {
        if lag > limit {
            problem(
                "lag",
                None,
                lag,
                format!(
                    "{name}: output lag reached {lag:.3} s after the warm-up (limit {limit} s)"
                ),
            );
        }
    }

    let rss = rss_id.and_then(|id| rss_summary(samples, id, base.unwrap_or(0)));
    if let (Some(r), Some(limit)) = (&rss, lim.max_rss_growth_pct) {
        if r.growth_pct > limit {
            let g = r.growth_pct;
            problem(
                "rss_growth",
                None,
                g,
                format!(
                    "{name}: RSS grew {g:.1} % after the warm-up ({} -> {} MiB; limit {limit} %)",
                    r.start_bytes >> 20,
                    r.end_bytes >> 20
                ),
            );
        }
    }

    EngineSummary {
        name: name.clone(),
        prometheus: addr.to_string(),
        pid: l.target.pid,
        samples: samples.len(),
        scrape_failures: l.scrape_failures,
        last_scrape_error: l.last_error.clone(),
        malformed_lines: l.malformed_lines,
        baseline_s: base.map(|b| samples[b].elapsed),
        totals,
        input_heaps,
        output_heaps,
        losses_after_warm_up: losses,
        loss_series,
        max_lag_s,
        max_ready_chunks: max_of(&[Kind::ReadyChunks], f64::max),
        min_free_chunks: max_of(&[Kind::FreeChunks], f64::min),
        rss,
        threads: thread_cpu(l),
        ok: problems.len() == n_before,
    }
}

/// RSS from the first reading at or after sample `from` to the last reading.
fn rss_summary(samples: &[Sample], id: u32, from: usize) -> Option<RssSummary> {
    let readings: Vec<u64> = samples
        .iter()
        .filter_map(|s| s.get(id))
        .map(|v| v as u64)
        .collect();
    let start = samples[from.min(samples.len().saturating_sub(1))..]
        .iter()
        .find_map(|s| s.get(id))
        .map(|v| v as u64)
        .or(readings.first().copied())?;
    let end = *readings.last()?;
    Some(RssSummary {
        start_bytes: start,
        end_bytes: end,
        max_bytes: readings.iter().copied().max().unwrap_or(end),
        growth_pct: if start > 0 {
            (end as f64 - start as f64) / start as f64 * 100.0
        } else {
            0.0
        },
    })
}

/// CPU seconds per thread from the first sample that read the process to the last.
fn thread_cpu(l: &EngineLog) -> Vec<ThreadCpu> {
    let ids: Vec<u32> = l.ids_of(Kind::ThreadCpu).collect();
    let samples = &l.samples;
    let Some(from) = samples
        .iter()
        .position(|s| ids.iter().any(|&id| s.get(id).is_some()))
    else {
        return Vec::new();
    };
    let span = samples.last().map_or(0.0, |s| s.elapsed) - samples[from].elapsed;
    let mut out: Vec<ThreadCpu> = ids
        .iter()
        .map(|&id| {
            let (secs, _) = increase(samples, from, id);
            let thread = l.series[id as usize]
                .0
                .labels
                .first()
                .map_or(String::new(), |(_, v)| v.clone());
            ThreadCpu {
                thread,
                cpu_seconds: secs,
                mean_cpu_percent: if span > 0.0 { secs / span * 100.0 } else { 0.0 },
            }
        })
        .collect();
    out.sort_by(|a, b| b.cpu_seconds.total_cmp(&a.cpu_seconds));
    out
}
