//! `gpucbf qualify`: the telescope's acceptance tests (katgpucbf's `qualification/`,
//! katgpucbf-compat.md §6) run against a live loopback array on one host. A dsim and
//! an F-engine per antenna, an XB-engine (and with `--narrowband` a second XB-engine for
//! the narrowband output) run as real processes over UDP ([`launch`]); the checks drive
//! them only through katcp as the telescope's controller does ([`harness`]), take the real
//! correlation-product and beam heaps off loopback ([`recv`]) and compute each check's
//! number from them ([`suite`], [`result`]). The result is `report.json` and a self-contained
//! `report.html` with plots ([`report`], [`plot`]); the exit status is 0 only when every
//! selected check passed.

pub mod analysis;
pub mod beams;
pub mod channel;
pub mod delay;
pub mod gains;
pub mod harness;
pub mod katcp;
pub mod launch;
pub mod plot;
pub mod recv;
pub mod report;
pub mod result;
pub mod suite;

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::engines::common::{Backend, ConfigError};
pub use result::{CheckResult, Plot, Series};

/// A fault `--debug-break` injects into the engines (test only: the checks must catch it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DebugBreak {
    /// The F-engines apply every delay model with the opposite sign.
    DelaySign,
    /// The F-engines ignore `?gain` and `?gain-all`.
    Gains,
    /// The XB-engine swaps the data of two baselines (0,1 and 1,1 in ICD order: 1 and 2).
    Baselines,
}

/// `gpucbf qualify` options.
#[derive(Debug, Clone, Args)]
pub struct QualifyArgs {
    /// Compute backend of the engines (auto: GPU where one exists).
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// Number of antennas (F-engines), 2..=16.
    #[arg(long, default_value_t = 4)]
    pub antennas: usize,
    /// Wideband channels (a power of two, 256..=32768).
    #[arg(long, default_value_t = 1024)]
    pub channels: usize,
    /// Runs only the checks whose name contains one of these comma-separated words
    /// (`quick`: the quick subset).
    #[arg(long, value_name = "PATTERN")]
    pub only: Option<String>,
    /// Report directory (report.json, report.html, the engines' logs).
    #[arg(long, default_value = "out/qualify")]
    pub output: PathBuf,
    /// ADC sample rate (scaled down from L-band's 1712e6 so a CPU keeps up).
    #[arg(long, default_value_t = 1712e6 / 512.0)]
    pub adc_sample_rate: f64,
    /// Also run a narrowband output (decimation 8 at katgpucbf's centre, adc × 3456789 /
    /// 2^24) into a second XB-engine, and its channelisation check.
    #[arg(long)]
    pub narrowband: bool,
    /// Correlator integration time in seconds (rounded to whole batches).
    #[arg(long, default_value_t = 0.5)]
    pub int_time: f64,
    /// First UDP/TCP port used on 127.0.0.1.
    #[arg(long, default_value_t = 18400)]
    pub base_port: u16,
    /// Serve every engine's Prometheus metrics on 127.0.0.1 while the checks run (the
    /// XB-engines from base port + 130, the F-engines from + 140, the dsims from + 160; the
    /// log names each), so that `gpucbf soak` or a browser can watch the array.
    #[arg(long)]
    pub prometheus: bool,
    /// Seed of the random gains, delays and tones.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Test only: makes the engines misbehave (see the README's "Qualification").
    #[arg(long, value_enum, hide = true)]
    pub debug_break: Option<DebugBreak>,
}

/// Longest wait for the array to become steady before the checks.
const WARM_UP_LIMIT: std::time::Duration = std::time::Duration::from_secs(90);

/// Most antennas (the check of baseline ordering needs a channel per input pair).
const MAX_ANTENNAS: usize = 16;

impl QualifyArgs {
    /// Checks the options.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(2..=MAX_ANTENNAS).contains(&self.antennas) {
            return Err(ConfigError::rule(
                format!("--antennas {}", self.antennas),
                format!("must be in 2..={MAX_ANTENNAS}"),
            ));
        }
        let c = self.channels;
        if !c.is_power_of_two() || !(256..=32768).contains(&c) {
            return Err(ConfigError::rule(
                format!("--channels {c}"),
                "must be a power of two in 256..=32768",
            ));
        }
        let pairs = 2 * self.antennas * (2 * self.antennas + 1) / 2;
        if pairs > c / 2 {
            return Err(ConfigError::rule(
                format!("--antennas {}", self.antennas),
                format!("needs at least {} channels (--channels {c})", 2 * pairs),
            ));
        }
        if !(self.adc_sample_rate.is_finite() && (1e6..=4e9).contains(&self.adc_sample_rate)) {
            return Err(ConfigError::rule(
                format!("--adc-sample-rate {}", self.adc_sample_rate),
                "must be in 1e6..=4e9 Hz",
            ));
        }
        if !(self.int_time.is_finite() && (0.05..=10.0).contains(&self.int_time)) {
            return Err(ConfigError::rule(
                format!("--int-time {}", self.int_time),
                "must be in 0.05..=10 s",
            ));
        }
        if self.base_port < 1024 || u32::from(self.base_port) + 200 > u32::from(u16::MAX) {
            return Err(ConfigError::rule(
                format!("--base-port {}", self.base_port),
                "must be in 1024..=65335",
            ));
        }
        self.backend.use_gpu(true)?;
        Ok(())
    }
}

/// Runs the selected checks; returns the results (also written to the report). Errors are
/// failures to run the array at all.
pub fn run(args: &QualifyArgs) -> anyhow::Result<Vec<CheckResult>> {
    args.validate()?;
    crate::control::shutdown::install();
    let selected = suite::select(args.only.as_deref(), args.narrowband)?;
    std::fs::create_dir_all(args.output.join("logs"))?;
    let launch::Array { mut procs, io } = launch::Array::start(args)?;
    // Beam heaps formed from fewer antennas than the array's, so far (all beams).
    let beam_heaps = || -> u64 {
        io.beams
            .iter()
            .map(|b| {
                b.stream
                    .incomplete
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .sum()
    };
    let mut skipped = report::Skipped::default();
    let result = (|| -> anyhow::Result<(Vec<CheckResult>, u64)> {
        let mut h = harness::Harness::connect(&io, args)?;
        // The checks start once the array is steady: every correlator stream, capturing,
        // has sent a dump with no MISSING marker (the engines' start-up, first chunks and
        // GPU warm-up, may lose data). Not steady in time: the checks run and say what
        // fails.
        match h.reset().and_then(|()| h.settle(WARM_UP_LIMIT)) {
            Ok((seconds, incomplete)) => {
                tracing::info!(seconds, incomplete, "the array is steady");
                skipped.warm_up_seconds = seconds;
                skipped.warm_up_incomplete_dumps = incomplete;
            }
            Err(e) => tracing::warn!(error = %e, "the array did not become steady"),
        }
        // What the beams lost before the checks began belongs to the warm-up.
        skipped.warm_up_incomplete_beam_heaps = beam_heaps();
        let mut results = Vec::new();
        let mut incomplete = 0;
        for check in &selected {
            if crate::control::shutdown::requested() {
                anyhow::bail!("interrupted");
            }
            tracing::info!(check = check.name, "running");
            let t0 = std::time::Instant::now();
            let r = match h.reset().and_then(|()| (check.run)(&mut h)) {
                Ok(r) => r,
                Err(e) => CheckResult::error(check, &format!("{e:#}")),
            };
            let r = r.with_seconds(t0.elapsed().as_secs_f64());
            println!("{}", r.line());
            results.push(r);
            incomplete = h.incomplete_dumps;
            procs.check_alive()?;
        }
        if incomplete > 0 {
            tracing::warn!(incomplete, "dumps with MISSING markers were skipped");
        }
        Ok((results, incomplete))
    })();
    let engines = procs.stop();
    let beam_heaps = beam_heaps() - skipped.warm_up_incomplete_beam_heaps;
    if beam_heaps > 0 {
        tracing::warn!(
            beam_heaps,
            "beam heaps formed from fewer antennas were skipped"
        );
    }
    drop(io);
    let (results, incomplete) = result?;
    skipped.incomplete_dumps = incomplete;
    skipped.incomplete_beam_heaps = beam_heaps;
    report::write(&args.output, args, &results, &engines, skipped)?;
    Ok(results)
}
