//! Running the array's engines: the XB-engines and F-engines started with their
//! options (sizes and cores from the plan), the dsim over the observation (with the soak
//! report's sampling), and the engines stopped in order with their summaries.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

use super::plan::{fgpu_wideband_args, xbgpu_shape_args};
use super::procs::{child, child_env, stop, stop_all, wait_json, wait_ready, Proc};
use super::ArrayConfig;
use crate::apps::soak::{EngineTarget, Soak, SoakOptions, SoakReport};

/// The F-engines' `--dither-seed` (each engine's dither differs: it is keyed by feng_id).
const FGPU_DITHER_SEED: u64 = 1;

/// The engine processes: the XB-engines and one F-engine per antenna (as far as started).
#[derive(Default)]
pub(super) struct Engines {
    xb: Vec<Proc>,
    fengines: Vec<Proc>,
}

impl Engines {
    /// Every engine started, the XB-engines first.
    pub(super) fn all(&mut self) -> Vec<&mut Proc> {
        self.xb.iter_mut().chain(self.fengines.iter_mut()).collect()
    }
}

/// Starts the XB-engines and the F-engines (into `engines`, so that the caller can stop
/// them on failure) and waits until every one has built its outputs.
pub(super) fn start_engines(
    cfg: &ArrayConfig,
    exe: &Path,
    sync: &str,
    gain: f64,
    engines: &mut Engines,
) -> anyhow::Result<()> {
    let args = &cfg.args;
    let (n, c, fs) = (args.antennas, args.channels, args.adc_sample_rate);
    let nx = args.x_engines;
    let sizes = &cfg.sizes;
    let backend = args.backend.name().to_string();
    let jones = sizes.jones_per_batch;
    let logs = args.output.join("logs");
    let s = |v: &str| v.to_string();
    for (k, name) in cfg.x_names.iter().enumerate() {
        let xb_args = [
            s("xbgpu"),
            s("--adc-sample-rate"),
            fs.to_string(),
            s("--sync-time"),
            s(sync),
            s("--array-size"),
            n.to_string(),
        ]
        .into_iter()
        // The default single XB-engine's command line stays as it was (no offset option).
        .chain(xbgpu_shape_args(
            c,
            c / nx,
            (nx > 1).then_some(k * c / nx),
            2 * c as u64,
            jones,
            sizes.heaps_per_fengine_per_chunk,
        ))
        .chain([
            s("--corrprod"),
            format!(
                "name=baseline-correlation-products,dst={},heap_accumulation_threshold={}",
                cfg.x_out(k),
                cfg.dump_batches
            ),
            s("--send-enabled"),
            s("--backend"),
            backend.clone(),
            // No katcp server: the array drives its engines by their command lines and
            // reads their metrics, so an engine (or another array) already on 7147 does
            // not clash with these.
            s("--katcp-port"),
            s("0"),
        ])
        .chain(args.use_vkgdr.then(|| s("--use-vkgdr")))
        .chain(sizes.xbgpu_recv.iter().cloned())
        .chain(cfg.plan.args(name))
        .chain(cfg.prometheus_args(k))
        .chain([cfg.x_in(k).to_string()])
        .collect::<Vec<_>>();
        engines.xb.push(child_env(
            name,
            exe,
            &xb_args,
            &logs.join(format!("{name}.log")),
            &cfg.gpus.env(cfg.gpus.engine(k)),
        )?);
    }
    for a in 0..n {
        let name = format!("fgpu{a}");
        let src = format!("{},{}", cfg.pol_endpoints(a, 0), cfg.pol_endpoints(a, 1));
        engines.fengines.push(child_env(
            &name,
            exe,
            &[
                s("fgpu"),
                s("--adc-sample-rate"),
                fs.to_string(),
                s("--sync-time"),
                s(sync),
            ]
            .into_iter()
            .chain(fgpu_wideband_args(
                a,
                n,
                c,
                &cfg.fgpu_dst(),
                jones,
                sizes.recv_chunk_samples,
            ))
            .chain([
                s("--gain"),
                gain.to_string(),
                // A fixed seed (the dither is keyed by it, the feng_id and the absolute
                // spectrum): the products are a function of the timestamp, so two arrays
                // from one `--sync-time` agree byte for byte.
                s("--dither-seed"),
                FGPU_DITHER_SEED.to_string(),
                s("--backend"),
                backend.clone(),
                s("--katcp-port"),
                s("0"),
            ])
            .chain(args.use_vkgdr.then(|| s("--use-vkgdr")))
            .chain(sizes.fgpu_recv.iter().cloned())
            .chain(cfg.plan.args(&name))
            .chain(cfg.prometheus_args(nx + a))
            .chain([src])
            .collect::<Vec<_>>(),
            &logs.join(format!("{name}.log")),
            &cfg.gpus.env(cfg.gpus.engine(a)),
        )?);
    }
    // Start the digitisers only once every engine has built its outputs (the GPU engines
    // compile their kernels first, which can take seconds when several start together): data
    // sent before that is lost and can leave every accumulation of a short run incomplete.
    wait_ready(&mut engines.all(), "output ready", Duration::from_secs(120))?;
    std::thread::sleep(Duration::from_millis(200));
    Ok(())
}

/// The F- and XB-engines whose logs say their receive chunks are in GPU memory
/// (`--use-vkgdr` taken; the others fell back to pinned host chunks and logged why).
pub(super) fn vkgdr_engines(cfg: &ArrayConfig) -> Vec<String> {
    let logs = cfg.args.output.join("logs");
    let f_names = (0..cfg.args.antennas).map(|a| format!("fgpu{a}"));
    cfg.x_names
        .iter()
        .cloned()
        .chain(f_names)
        .filter(|name| {
            std::fs::read_to_string(logs.join(format!("{name}.log")))
                .is_ok_and(|log| log.contains(crate::mem::vkgdr::GPU_MAPPED_LOG))
        })
        .collect()
}

/// What the dsims' run gave: their summaries, when they started, how long they streamed
/// and the soak report (with `--soak-report`).
pub(super) struct Streamed {
    /// Each dsim's summary, in order.
    pub(super) dsims: Vec<serde_json::Value>,
    /// When the dsims started.
    pub(super) t0: Instant,
    /// Seconds they streamed (until the last exited).
    pub(super) seconds: f64,
    /// The soak report, when asked for.
    pub(super) soak: Option<anyhow::Result<SoakReport>>,
}

/// Starts dsim `d` (of `cfg.dsim_names`) with its program `signals`: its antennas'
/// streams, two send threads per antenna.
fn start_dsim(
    cfg: &ArrayConfig,
    exe: &Path,
    sync: &str,
    d: usize,
    signals: &str,
) -> anyhow::Result<Proc> {
    let args = &cfg.args;
    let name = &cfg.dsim_names[d];
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
        // Each dsim its own seed (dither, and noise without an explicit seed: the antennas'
        // noise must not repeat from one dsim to the next); one dsim keeps seed 1.
        s("--dither-seed"),
        (1u64 | (d as u64) << 32).to_string(),
        s("--signals"),
        s(signals),
        s("--summary"),
    ];
    dsim_args.extend(cfg.plan.args(name));
    dsim_args.extend(cfg.prometheus_args(args.x_engines + args.antennas + d));
    for a in cfg.dsim_antennas(d) {
        dsim_args.push(cfg.pol_endpoints(a, 0));
        dsim_args.push(cfg.pol_endpoints(a, 1));
    }
    let log = args.output.join(format!("logs/{name}.log"));
    Ok(child(name, exe, &dsim_args, &log)?)
}

/// Runs the dsims (`signals[d]` dsim `d`'s program) over the whole observation (with a
/// progress bar), then returns what [`Streamed`] holds; the soak report is sampled from
/// the dsims' start until a second before their data end, while every engine still serves
/// its metrics. An engine or a dsim exiting before the dsims have sent everything fails
/// the run, naming it and how it exited (the dsims are stopped; the caller stops the
/// engines).
pub(super) fn run_dsim(
    cfg: &ArrayConfig,
    exe: &Path,
    sync: &str,
    signals: &[String],
    engines: &mut Engines,
) -> anyhow::Result<Streamed> {
    let args = &cfg.args;
    let t0 = Instant::now();
    let stop_dsims = |dsims: &mut [Proc]| {
        stop_all(
            &mut dsims.iter_mut().collect::<Vec<_>>(),
            Duration::from_secs(10),
        );
    };
    let mut dsims: Vec<Proc> = Vec::new();
    for (d, program) in signals.iter().enumerate() {
        match start_dsim(cfg, exe, sync, d, program) {
            Ok(p) => dsims.push(p),
            Err(e) => {
                stop_dsims(&mut dsims);
                return Err(e);
            }
        }
    }
    let mut soak = match start_soak(cfg, engines, &dsims) {
        Ok(s) => s,
        Err(e) => {
            stop_dsims(&mut dsims);
            return Err(e);
        }
    };
    let pb = progress_bar(args.duration);
    let mut stopping = false;
    let mut report = None;
    let soak_end = Duration::from_secs_f64((args.duration - 1.0).max(args.soak_warm_up));
    let mut summaries: Vec<Option<serde_json::Value>> = vec![None; dsims.len()];
    while summaries.iter().any(Option::is_none) {
        if soak.is_some() && (t0.elapsed() >= soak_end || stopping) {
            report = soak.take().map(Soak::finish);
        }
        for (dsim, summary) in dsims.iter_mut().zip(summaries.iter_mut()) {
            if summary.is_some() || dsim.try_wait()?.is_none() {
                continue;
            }
            let (status, json) = wait_json(dsim, Duration::from_secs(5));
            if let Some(s) = status.filter(|s| !s.success()) {
                pb.finish_and_clear();
                let e = dsim.exited("during the run", s);
                stop_dsims(&mut dsims);
                return Err(e.into());
            }
            *summary = Some(json);
        }
        for e in engines.all() {
            if let Some(status) = e.try_wait()? {
                pb.finish_and_clear();
                stop_dsims(&mut dsims);
                return Err(e.exited("during the run", status).into());
            }
        }
        if crate::control::shutdown::requested() && !stopping {
            dsims.iter_mut().for_each(stop);
            stopping = true;
        }
        let sim = t0.elapsed().as_secs_f64().min(args.duration + 30.0);
        pb.set_position(((sim * 10.0) as u64).min(pb.length().unwrap_or(0)));
        std::thread::sleep(Duration::from_millis(100));
    }
    let seconds = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    Ok(Streamed {
        dsims: summaries.into_iter().flatten().collect(),
        t0,
        seconds,
        soak: report.or_else(|| soak.map(Soak::finish)),
    })
}

/// Starts sampling every engine for `--soak-report` (none without it): the XB-engines,
/// the F-engines and the dsims, each by its name.
fn start_soak(
    cfg: &ArrayConfig,
    engines: &Engines,
    dsims: &[Proc],
) -> anyhow::Result<Option<Soak>> {
    let Some(dir) = &cfg.args.soak_report else {
        return Ok(None);
    };
    let procs: Vec<&Proc> = engines
        .xb
        .iter()
        .chain(engines.fengines.iter())
        .chain(dsims)
        .collect();
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

/// Stops the F-engines, then the XB-engines (each sends what it holds first), and returns
/// their summaries (the XB-engines' in order); an engine that does not exit cleanly
/// (non-zero status, a signal, or killed after the timeout) fails the run, naming it.
pub(super) fn stop_engines(
    mut engines: Engines,
) -> anyhow::Result<(Vec<serde_json::Value>, Vec<serde_json::Value>)> {
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
    // Every engine of a kind is asked to stop, then each is waited for.
    let mut stop_kind = |procs: &mut [Proc]| -> Vec<serde_json::Value> {
        procs.iter_mut().for_each(stop);
        procs.iter_mut().map(|p| wait(p, &mut failed)).collect()
    };
    let fsum = stop_kind(&mut engines.fengines);
    std::thread::sleep(Duration::from_millis(500));
    let xsum = stop_kind(&mut engines.xb);
    if !failed.is_empty() {
        anyhow::bail!("{}", failed.join("; "));
    }
    Ok((fsum, xsum))
}
