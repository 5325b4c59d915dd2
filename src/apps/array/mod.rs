//! `gpucbf array`: a small loopback array in one command. One dsim (all antennas' streams,
//! a sky of point sources plus noise and a tone), one F-engine process per antenna, one
//! XB-engine, all over real UDP on 127.0.0.1 with the same subcommands a telescope runs;
//! this process receives the correlation products ([`receive`]) and writes visibilities,
//! plots, a dirty image ([`image`]) and a summary. The sky is [`sky`]'s; the child
//! processes are started and stopped as in `procs.rs`.

pub mod image;
mod procs;
pub mod receive;
pub mod sky;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use tracing::{info, warn};

use crate::apps::soak::{EngineTarget, Soak, SoakOptions, SoakReport};
use crate::engines::common::{Backend, ConfigError};
pub use procs::ChildError;
use procs::{child, stop, stop_all, wait_json, wait_ready, Proc};
pub use receive::Dump;
use receive::{receive_dumps, write_visibilities};

/// `gpucbf array` options.
#[derive(Debug, Clone, Args)]
pub struct ArrayArgs {
    /// Number of antennas (F-engines).
    #[arg(long, default_value_t = 4)]
    pub antennas: usize,
    /// Wideband channels.
    #[arg(long, default_value_t = 1024)]
    pub channels: usize,
    /// Seconds of simulated observation.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Output directory.
    #[arg(long, default_value = "out/array")]
    pub output: PathBuf,
    /// Compute backend of the engines (auto: GPU where one exists).
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// ADC sample rate (scaled down from L-band's 1712e6 so a CPU keeps up).
    #[arg(long, default_value_t = 1712e6 / 512.0)]
    pub adc_sample_rate: f64,
    /// First UDP port used on 127.0.0.1.
    #[arg(long, default_value_t = 17100)]
    pub base_port: u16,
    /// Seconds per correlator dump (rounded to whole batches).
    #[arg(long, default_value_t = 1.0)]
    pub dump_seconds: f64,
    /// Writes a soak report (`gpucbf soak`'s soak.csv, soak.json, soak.png) of every engine
    /// over the run into DIR: the engines serve Prometheus metrics on ports above the
    /// array's, sampled every second. The array then exits non-zero when anything was lost
    /// after --soak-warm-up (after writing its summary); without it, losses are reported in
    /// the summary and the exit status stays 0.
    #[arg(long, value_name = "DIR")]
    pub soak_report: Option<PathBuf>,
    /// Seconds from the start of the data during which the soak report expects losses.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub soak_warm_up: f64,
}

/// A checked array configuration: the options, and the engines' shapes that follow.
#[derive(Debug, Clone)]
pub struct ArrayConfig {
    /// The options (valid).
    pub args: ArrayArgs,
    /// Complex values per F-engine batch.
    pub jones_per_batch: usize,
    /// ADC samples per F-engine batch.
    pub batch_samples: u64,
    /// Batches per correlator dump.
    pub dump_batches: u64,
    /// Digitiser heaps per stream over the run.
    pub heaps_per_stream: u64,
}

impl ArrayArgs {
    /// Checks every option (a bad `--backend` is refused here, not by every child engine).
    pub fn validate(&self) -> Result<ArrayConfig, ConfigError> {
        if self.antennas == 0 || self.antennas > 64 {
            return Err(ConfigError::rule("--antennas", "must be 1..=64"));
        }
        if !(self.duration.is_finite() && self.duration > 0.0 && self.duration <= 3600.0) {
            return Err(ConfigError::rule(
                "--duration",
                "must be in (0, 3600] seconds",
            ));
        }
        if !(self.adc_sample_rate.is_finite()
            && (MIN_ADC_RATE..=MAX_ADC_RATE).contains(&self.adc_sample_rate))
        {
            return Err(ConfigError::rule(
                format!("--adc-sample-rate {}", self.adc_sample_rate),
                format!("must be in {MIN_ADC_RATE:e}..={MAX_ADC_RATE:e} Hz"),
            ));
        }
        if !(self.dump_seconds.is_finite()
            && self.dump_seconds > 0.0
            && self.dump_seconds <= self.duration)
        {
            return Err(ConfigError::rule(
                format!("--dump-seconds {}", self.dump_seconds),
                "must be positive and at most --duration",
            ));
        }
        let extra = if self.soak_report.is_some() {
            // Prometheus ports: the XB-engine, the F-engines, the dsim.
            self.antennas as u32 + 2
        } else {
            0
        };
        if self.soak_report.is_some()
            && !(self.soak_warm_up.is_finite()
                && self.soak_warm_up >= 0.0
                && self.soak_warm_up < self.duration)
        {
            return Err(ConfigError::rule(
                format!("--soak-warm-up {}", self.soak_warm_up),
                "must be at least 0 and shorter than --duration",
            ));
        }
        let last = u32::from(self.base_port) + u32::from(x_port_offset(self.antennas)) + 1 + extra;
        if self.base_port == 0 || last > u32::from(u16::MAX) {
            return Err(ConfigError::rule(
                format!("--base-port {}", self.base_port),
                format!(
                    "must leave room for the array's ports (base + 0..={}): 1..={}",
                    last - u32::from(self.base_port),
                    u32::from(u16::MAX) - (last - u32::from(self.base_port))
                ),
            ));
        }
        let c = self.channels;
        if !c.is_power_of_two() || !(64..=32768).contains(&c) {
            return Err(ConfigError::rule(
                "--channels",
                "must be a power of two in 64..=32768",
            ));
        }
        self.backend.use_gpu(true)?;
        let fs = self.adc_sample_rate;
        let jones = (1usize << 18).max(c * 32);
        let batch = ((jones / c) * 2 * c) as u64;
        Ok(ArrayConfig {
            args: self.clone(),
            jones_per_batch: jones,
            batch_samples: batch,
            dump_batches: ((self.dump_seconds * fs / batch as f64).round() as u64).max(1),
            heaps_per_stream: ((self.duration * fs) as u64).div_ceil(4096),
        })
    }
}

/// Lowest `--adc-sample-rate` (Hz).
const MIN_ADC_RATE: f64 = 1e5;
/// Highest `--adc-sample-rate` (Hz): twice L-band's 1712e6 and more is beyond what the
/// engines of one host keep up with on loopback, and makes runs of absurd heap counts.
const MAX_ADC_RATE: f64 = 4e9;

/// Port offset of the XB-engine's input (its output is the next): above the F-engines'
/// two inputs per antenna.
fn x_port_offset(antennas: usize) -> u16 {
    (2 * antennas).max(100) as u16
}

impl ArrayConfig {
    /// Port `base_port + k` on 127.0.0.1 (validated to fit).
    fn port(&self, k: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.args.base_port + k)
    }

    /// The XB-engine's input and output ports.
    fn x_ports(&self) -> (SocketAddrV4, SocketAddrV4) {
        let k = x_port_offset(self.args.antennas);
        (self.port(k), self.port(k + 1))
    }

    /// With `--soak-report`: the Prometheus port of engine `i` (0: the XB-engine, 1..=n:
    /// the F-engines, n + 1: the dsim), above the XB-engine's ports.
    fn prometheus_port(&self, i: usize) -> Option<u16> {
        self.args.soak_report.as_ref()?;
        Some(self.args.base_port + x_port_offset(self.args.antennas) + 2 + i as u16)
    }

    /// `--prometheus-port P` for engine `i`, when the soak report wants it.
    fn prometheus_args(&self, i: usize) -> Vec<String> {
        self.prometheus_port(i)
            .map(|p| vec!["--prometheus-port".to_string(), p.to_string()])
            .unwrap_or_default()
    }
}

/// Runs the array; returns the summary it also writes to `summary.json`.
pub fn run(cfg: &ArrayConfig) -> anyhow::Result<serde_json::Value> {
    crate::control::shutdown::install();
    let args = &cfg.args;
    let (n, c, fs) = (args.antennas, args.channels, args.adc_sample_rate);
    let exe = std::env::current_exe()?;
    let dir = &args.output;
    std::fs::create_dir_all(dir.join("logs"))?;
    let positions = sky::layout(n);
    let model = sky::SkyModel::demo(fs, c);
    let signals = model.dsim_signals(&positions, fs);
    std::fs::write(dir.join("signals.txt"), &signals)?;
    // Timestamps count from the start of the run.
    let sync = unix_now()?.floor().to_string();
    info!(
        antennas = n,
        channels = c,
        adc_rate = fs,
        dump_batches = cfg.dump_batches,
        "starting the array"
    );
    // Receiver of the X output, then the XB-engine, then the F-engines, then the dsim.
    let stop_rx = Arc::new(AtomicBool::new(false));
    let (x_out, stop2) = (cfg.x_ports().1, stop_rx.clone());
    let rx = std::thread::spawn(move || receive_dumps(x_out, stop2));
    let mut engines = Engines::default();
    let streamed = start_engines(cfg, &exe, &sync, model.fgpu_gain(c), &mut engines)
        .and_then(|()| run_dsim(cfg, &exe, &sync, &signals, &mut engines));
    let (dsim_summary, t0, stream_s, soak_report) = match streamed {
        Ok(v) => v,
        Err(e) => {
            // Leave nothing running: stop every engine that is still up, then fail.
            stop_all(&mut engines.all(), Duration::from_secs(10));
            stop_rx.store(true, Ordering::Relaxed);
            return Err(e);
        }
    };
    let soak = soak_report.transpose()?;
    let (fsum, xsum) = stop_engines(engines)?;
    stop_rx.store(true, Ordering::Relaxed);
    let (mut dumps, rx_stats) = rx
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    dumps.sort_by_key(|d| d.timestamp);
    let wall = t0.elapsed().as_secs_f64();
    write_visibilities(dir, &dumps, n, c)?;
    // Lost data can leave nothing to image: that is reported, not a failure of the run.
    let products = image::write_products(dir, &dumps, n, c, fs, &positions).unwrap_or_else(|e| {
        warn!(error = %e, "no image written");
        json!({"error": e.to_string()})
    });
    let dropped: u64 = rx_stats.total_dropped() + rx_stats.incomplete_heaps_evicted;
    let lost = losses(&fsum, &xsum, dropped);
    if !lost.as_object().is_none_or(|o| o.is_empty()) {
        warn!(lost = %lost, "data were lost: see \"lost\" in the summary");
    }
    let summary = json!({
        "antennas": n,
        "channels": c,
        "adc_sample_rate": fs,
        "duration_s": args.duration,
        "dump_batches": cfg.dump_batches,
        "dump_seconds": (cfg.dump_batches * cfg.batch_samples) as f64 / fs,
        "dumps_produced": dumps.len(),
        "streaming_wall_s": stream_s,
        "total_wall_s": wall,
        // Simulated seconds per second of sending (1.0: the digitisers kept real time).
        "real_time_factor": args.duration / dsim_summary["summary"]["send_seconds"].as_f64().unwrap_or(stream_s),
        "receiver": {"heaps": rx_stats.heaps, "packets": rx_stats.packets, "dropped_packets": dropped},
        // Every loss by engine and counter (only those that occurred); empty: nothing lost.
        "lost": lost,
        "soak": soak.as_ref().map(|r| json!({
            "ok": r.summary.verdict.ok,
            "problems": r.summary.verdict.problems.iter().map(|p| p.message.clone()).collect::<Vec<_>>(),
            "json": r.json, "png": r.png, "csv": r.csv,
        })),
        "engines": {"dsim": dsim_summary, "fgpu": fsum, "xbgpu": xsum},
        "products": products,
        "sky": model.describe(),
    });
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    if dumps.is_empty() {
        warn!(
            "no dumps were produced: see the logs in {}",
            dir.join("logs").display()
        );
    }
    if let Some(r) = &soak {
        // The soak's contract: non-zero when anything was lost after the warm-up (the
        // summary is written first).
        r.summary.verdict.check()?;
    }
    Ok(summary)
}

/// The losses in the engines' summaries, by engine and counter (non-zero ones only):
/// F-engine input heaps missing and receive rejections, output heaps skipped; XB-engine
/// input heaps missing and incomplete, rejections, accumulations skipped or incomplete;
/// packets the array's receiver dropped.
fn losses(fsum: &[serde_json::Value], xsum: &serde_json::Value, dropped: u64) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    let mut note = |engine: &str, what: String, v: u64| {
        if v > 0 {
            let e = out.entry(engine.to_string()).or_insert_with(|| json!({}));
            e[what] = json!(v);
        }
    };
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let rejected = |s: &serde_json::Value, note: &mut dyn FnMut(String, u64)| {
        if let Some(m) = s["recv_rejected"].as_object() {
            for (k, v) in m {
                if k != "metadata_heaps" {
                    note(format!("rejected_{k}"), n(v));
                }
            }
        }
    };
    for (a, f) in fsum.iter().enumerate() {
        let s = &f["summary"];
        let name = format!("fgpu{a}");
        for p in 0..2 {
            note(
                &name,
                format!("input_missing_heaps_pol{p}"),
                n(&s["input_missing_heaps"][p]),
            );
        }
        rejected(s, &mut |k, v| note(&name, k, v));
        for o in s["outputs"].as_array().into_iter().flatten() {
            let stream = o["name"].as_str().unwrap_or("output");
            note(
                &name,
                format!("{stream}_skipped_heaps"),
                n(&o["skipped_heaps"]),
            );
        }
    }
    let s = &xsum["summary"];
    note(
        "xbgpu",
        "input_missing_heaps".into(),
        n(&s["input_missing_heaps"]),
    );
    note(
        "xbgpu",
        "input_incomplete_heaps".into(),
        n(&s["input_incomplete_heaps"]),
    );
    rejected(s, &mut |k, v| note("xbgpu", k, v));
    for x in s["corrprods"].as_array().into_iter().flatten() {
        let stream = x["name"].as_str().unwrap_or("corrprod");
        note(
            "xbgpu",
            format!("{stream}_skipped_accs"),
            n(&x["skipped_accs"]),
        );
        note(
            "xbgpu",
            format!("{stream}_incomplete_accs"),
            n(&x["incomplete_accs"]),
        );
    }
    note("receiver", "dropped_packets".into(), dropped);
    serde_json::Value::Object(out)
}

fn unix_now() -> anyhow::Result<f64> {
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64())
}

/// The engine processes: the XB-engine and one F-engine per antenna (as far as started).
#[derive(Default)]
struct Engines {
    xb: Option<Proc>,
    fengines: Vec<Proc>,
}

impl Engines {
    /// Every engine started, the XB-engine first.
    fn all(&mut self) -> Vec<&mut Proc> {
        self.xb.iter_mut().chain(self.fengines.iter_mut()).collect()
    }
}

/// Starts the XB-engine and the F-engines (into `engines`, so that the caller can stop
/// them on failure) and waits until every one has built its outputs.
fn start_engines(
    cfg: &ArrayConfig,
    exe: &Path,
    sync: &str,
    gain: f64,
    engines: &mut Engines,
) -> anyhow::Result<()> {
    let args = &cfg.args;
    let (n, c, fs) = (args.antennas, args.channels, args.adc_sample_rate);
    let (x_in, x_out) = cfg.x_ports();
    let backend = args.backend.name().to_string();
    let jones = cfg.jones_per_batch;
    let logs = args.output.join("logs");
    let s = |v: &str| v.to_string();
    engines.xb = Some(child(
        "xbgpu",
        exe,
        &[
            s("xbgpu"),
            s("--adc-sample-rate"),
            fs.to_string(),
            s("--sync-time"),
            s(sync),
            s("--array-size"),
            n.to_string(),
            s("--channels"),
            c.to_string(),
            s("--channels-per-substream"),
            c.to_string(),
            s("--samples-between-spectra"),
            (2 * c).to_string(),
            s("--jones-per-batch"),
            jones.to_string(),
            s("--heaps-per-fengine-per-chunk"),
            s("4"),
            s("--corrprod"),
            format!(
                "name=baseline-correlation-products,dst={x_out},heap_accumulation_threshold={}",
                cfg.dump_batches
            ),
            s("--send-enabled"),
            s("--backend"),
            backend.clone(),
        ]
        .into_iter()
        .chain(cfg.prometheus_args(0))
        .chain([x_in.to_string()])
        .collect::<Vec<_>>(),
        &logs.join("xbgpu.log"),
    )?);
    for a in 0..n {
        let src = format!("{},{}", cfg.port(2 * a as u16), cfg.port(2 * a as u16 + 1));
        engines.fengines.push(child(
            &format!("fgpu{a}"),
            exe,
            &[
                s("fgpu"),
                s("--adc-sample-rate"),
                fs.to_string(),
                s("--sync-time"),
                s(sync),
                s("--feng-id"),
                a.to_string(),
                s("--array-size"),
                n.to_string(),
                s("--wideband"),
                format!("name=wideband,channels={c},dst={x_in},jones_per_batch={jones}"),
                s("--recv-chunk-samples"),
                (cfg.batch_samples * 2).to_string(),
                s("--gain"),
                gain.to_string(),
                s("--backend"),
                backend.clone(),
            ]
            .into_iter()
            .chain(cfg.prometheus_args(1 + a))
            .chain([src])
            .collect::<Vec<_>>(),
            &logs.join(format!("fgpu{a}.log")),
        )?);
    }
    // Start the digitisers only once every engine has built its outputs (the GPU engines
    // compile their kernels first, which can take seconds when several start together): data
    // sent before that is lost and can leave every accumulation of a short run incomplete.
    wait_ready(&mut engines.all(), "output ready", Duration::from_secs(120))?;
    std::thread::sleep(Duration::from_millis(200));
    Ok(())
}

/// Runs the dsim over the whole observation (with a progress bar), then returns its
/// summary, when it started, how long it streamed and the soak report (with
/// `--soak-report`: sampled from the dsim's start until a second before its data end, while
/// every engine still serves its metrics). An engine or the dsim exiting
/// before the dsim has sent everything fails the run, naming it and how it exited (the
/// dsim is stopped; the caller stops the engines).
fn run_dsim(
    cfg: &ArrayConfig,
    exe: &Path,
    sync: &str,
    signals: &str,
    engines: &mut Engines,
) -> anyhow::Result<(
    serde_json::Value,
    Instant,
    f64,
    Option<anyhow::Result<SoakReport>>,
)> {
    let args = &cfg.args;
    let s = |v: &str| v.to_string();
    let mut dsim_args = vec![
        s("dsim"),
        s("--adc-sample-rate"),
        args.adc_sample_rate.to_string(),
        s("--sync-time"),
        s(sync),
        s("--period"),
        (1u64 << 22).to_string(),
        s("--heaps"),
        cfg.heaps_per_stream.to_string(),
        s("--dither-seed"),
        s("1"),
        s("--signals"),
        s(signals),
        s("--summary"),
    ];
    dsim_args.extend(cfg.prometheus_args(args.antennas + 1));
    for a in 0..args.antennas {
        dsim_args.push(cfg.port(2 * a as u16).to_string());
        dsim_args.push(cfg.port(2 * a as u16 + 1).to_string());
    }
    let t0 = Instant::now();
    let mut dsim = child("dsim", exe, &dsim_args, &args.output.join("logs/dsim.log"))?;
    let mut soak = match start_soak(cfg, engines, &dsim) {
        Ok(s) => s,
        Err(e) => {
            stop_all(&mut [&mut dsim], Duration::from_secs(10));
            return Err(e);
        }
    };
    let pb = progress_bar(args.duration);
    let mut stopping = false;
    let mut report = None;
    let soak_end = Duration::from_secs_f64((args.duration - 1.0).max(args.soak_warm_up));
    let dsim_summary = loop {
        if soak.is_some() && (t0.elapsed() >= soak_end || stopping) {
            report = soak.take().map(Soak::finish);
        }
        if dsim.try_wait()?.is_some() {
            let (status, summary) = wait_json(&mut dsim, Duration::from_secs(5));
            match status {
                Some(s) if !s.success() => {
                    pb.finish_and_clear();
                    return Err(dsim.exited("during the run", s).into());
                }
                _ => break summary,
            }
        }
        for e in engines.all() {
            if let Some(status) = e.try_wait()? {
                pb.finish_and_clear();
                stop_all(&mut [&mut dsim], Duration::from_secs(10));
                return Err(e.exited("during the run", status).into());
            }
        }
        if crate::control::shutdown::requested() && !stopping {
            stop(&mut dsim);
            stopping = true;
        }
        let sim = t0.elapsed().as_secs_f64().min(args.duration + 30.0);
        pb.set_position(((sim * 10.0) as u64).min(pb.length().unwrap_or(0)));
        std::thread::sleep(Duration::from_millis(100));
    };
    let stream_s = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let report = report.or_else(|| soak.map(Soak::finish));
    Ok((dsim_summary, t0, stream_s, report))
}

/// Starts sampling every engine for `--soak-report` (none without it).
fn start_soak(cfg: &ArrayConfig, engines: &Engines, dsim: &Proc) -> anyhow::Result<Option<Soak>> {
    let Some(dir) = &cfg.args.soak_report else {
        return Ok(None);
    };
    let mut procs: Vec<&Proc> = engines.xb.iter().chain(engines.fengines.iter()).collect();
    procs.push(dsim);
    let targets = procs
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            Some(EngineTarget {
                name: p.name.clone(),
                prometheus: SocketAddrV4::new(Ipv4Addr::LOCALHOST, cfg.prometheus_port(i)?).into(),
                pid: Some(p.child.id()),
            })
        })
        .collect();
    let warm_up = Duration::from_secs_f64(cfg.args.soak_warm_up);
    Ok(Some(Soak::start(targets, SoakOptions::new(dir, warm_up))?))
}

/// A progress bar in tenths of simulated seconds (hidden when stderr carries JSON lines).
fn progress_bar(duration: f64) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new((duration * 10.0) as u64);
    if crate::telemetry::log_format() == crate::telemetry::LogFormat::Json {
        // stderr carries JSON lines only.
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    pb.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} ds simulated {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb
}

/// Stops the F-engines, then the XB-engine (each sends what it holds first), and returns
/// their summaries; an engine that does not exit cleanly (non-zero status, a signal, or
/// killed after the timeout) fails the run, naming it.
fn stop_engines(
    mut engines: Engines,
) -> anyhow::Result<(Vec<serde_json::Value>, serde_json::Value)> {
    std::thread::sleep(Duration::from_millis(500));
    let mut failed = Vec::new();
    let wait = |p: &mut Proc, failed: &mut Vec<String>| {
        let (status, summary) = wait_json(p, Duration::from_secs(60));
        match status {
            Some(s) if s.success() => {}
            Some(s) => failed.push(p.exited("when stopped", s).to_string()),
            None => failed.push(format!(
                "{} (pid {}) did not stop within 60 s and was killed: see {}",
                p.name,
                p.child.id(),
                p.log.display()
            )),
        }
        summary
    };
    for f in engines.fengines.iter_mut() {
        stop(f);
    }
    let fsum = engines
        .fengines
        .iter_mut()
        .map(|f| wait(f, &mut failed))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let xsum = match engines.xb.as_mut() {
        Some(xb) => {
            stop(xb);
            wait(xb, &mut failed)
        }
        None => json!(null),
    };
    if !failed.is_empty() {
        anyhow::bail!("{}", failed.join("; "));
    }
    Ok((fsum, xsum))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ArrayArgs,
    }

    fn validate(extra: &[&str]) -> Result<ArrayConfig, ConfigError> {
        let mut v = vec!["array", "--backend", "cpu"];
        v.extend_from_slice(extra);
        Cli::try_parse_from(v).expect("parse").args.validate()
    }

    /// Ports past 65535 (which wrapped), absurd sample rates and dump lengths are refused
    /// naming the option; the largest base port that fits is taken.
    #[test]
    fn ports_rates_and_dumps_out_of_range_are_refused() {
        let e = validate(&["--base-port", "65530"]).unwrap_err().to_string();
        assert!(e.starts_with("--base-port 65530 must leave room"), "{e}");
        assert!(validate(&["--base-port", "0"]).is_err());
        let cfg = validate(&["--base-port", "65434"]).unwrap();
        assert_eq!(cfg.x_ports().1.port(), 65535);
        assert!(validate(&["--base-port", "65435"]).is_err());
        // 64 antennas use ports base..base+127: the XB-engine moves above them.
        let cfg = validate(&["--antennas", "64", "--base-port", "17100"]).unwrap();
        assert_eq!(cfg.x_ports().0.port(), 17100 + 128);
        assert!(validate(&["--antennas", "64", "--base-port", "65406"]).is_ok());
        assert!(validate(&["--antennas", "64", "--base-port", "65407"]).is_err());

        let e = validate(&["--adc-sample-rate", "1e12"])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--adc-sample-rate 1000000000000 must be in"),
            "{e}"
        );
        assert!(validate(&["--adc-sample-rate", "NaN"]).is_err());
        assert!(validate(&["--adc-sample-rate", "1712e6"]).is_ok());

        for bad in ["inf", "0", "-1", "NaN", "11"] {
            let e = validate(&[&format!("--dump-seconds={bad}")])
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("--dump-seconds"), "{e}");
        }
    }

    /// The summary's `lost` names every non-zero loss counter by engine, and nothing else
    /// (metadata heaps are not losses).
    #[test]
    fn losses_name_each_nonzero_counter_by_engine() {
        let f0 = json!({"summary": {"input_missing_heaps": [0, 0], "recv_rejected": {"metadata_heaps": 3},
            "outputs": [{"name": "wideband", "skipped_heaps": 0}]}});
        let f1 = json!({"summary": {"input_missing_heaps": [5, 0], "recv_rejected": {"too_old_heaps": 2},
            "outputs": [{"name": "wideband", "skipped_heaps": 4}]}});
        let x = json!({"summary": {"input_missing_heaps": 0, "input_incomplete_heaps": 1,
            "recv_rejected": {}, "corrprods": [{"name": "bc", "skipped_accs": 2, "incomplete_accs": 0}]}});
        let lost = losses(&[f0.clone(), f1], &x, 7);
        assert_eq!(
            lost,
            json!({
                "fgpu1": {"input_missing_heaps_pol0": 5, "rejected_too_old_heaps": 2, "wideband_skipped_heaps": 4},
                "xbgpu": {"input_incomplete_heaps": 1, "bc_skipped_accs": 2},
                "receiver": {"dropped_packets": 7},
            })
        );
        let clean = json!({"summary": {"input_missing_heaps": 0, "input_incomplete_heaps": 0,
            "corrprods": [{"name": "bc", "skipped_accs": 0, "incomplete_accs": 0}]}});
        assert_eq!(losses(&[f0], &clean, 0), json!({}));
    }
}
