//! `gpucbf array`: a small loopback array in one command. One dsim (all antennas' streams,
//! a sky of point sources plus noise and a tone; at real rates one per antenna), one
//! F-engine process per antenna, one or more XB-engines (each a channel range, the F-engines sending a channel substream to
//! each, as MeerKAT does), all over real UDP on 127.0.0.x with the same subcommands a
//! telescope runs; this process receives the correlation products ([`receive`]) and writes
//! visibilities, plots, a dirty image ([`image`]) and a summary. The sky is [`sky`]'s; the
//! engines' sizes and cores follow the rate ([`plan`]); the child processes are started
//! and stopped as in `engines.rs` and `procs.rs`.

mod engines;
pub mod gpus;
pub mod image;
mod losses;
pub mod plan;
pub(crate) mod procs;
pub mod receive;
pub mod sky;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde_json::json;
use tracing::{info, warn};

use crate::engines::common::{Backend, ConfigError};
use engines::{run_dsim, start_engines, stop_engines, vkgdr_engines, Engines};
use gpus::GpuPlan;
use plan::{dsim_names, xb_recv_threads, xbgpu_names, CorePlan, Dsims, Pin, Sizes};
use procs::stop_all;
pub use procs::ChildError;
pub use receive::Dump;
use receive::{assemble, receive_dumps, write_dumps};

/// `gpucbf array` options.
#[derive(Debug, Clone, Args)]
pub struct ArrayArgs {
    /// Number of antennas (F-engines).
    #[arg(long, default_value_t = 4)]
    pub antennas: usize,
    /// Wideband channels.
    #[arg(long, default_value_t = 1024)]
    pub channels: usize,
    /// XB-engines, each correlating an equal channel range (at least 64 channels): the
    /// F-engines send one channel substream to each (XB-engine k on 127.0.0.(k+1)).
    #[arg(long, default_value_t = 1)]
    pub x_engines: usize,
    /// Seconds of simulated observation.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Output directory.
    #[arg(long, default_value = "out/array")]
    pub output: PathBuf,
    /// Compute backend of the engines (auto: GPU where one exists).
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// ADC sample rate (scaled down from L-band's 1712e6 so a CPU keeps up). From 100e6
    /// the engines take real-rate sizes (see --pin).
    #[arg(long, default_value_t = 1712e6 / 512.0)]
    pub adc_sample_rate: f64,
    /// Thread placement. auto: at real rates (--adc-sample-rate ≥ 100e6), when this
    /// process may use enough cores, every receive and send thread of every engine gets a
    /// core of its own (dsim, then F-engines, then XB-engines); else every engine runs
    /// unpinned. The plan is logged and written to the summary (`core_plan`).
    #[arg(long, value_enum, default_value_t = Pin::Auto)]
    pub pin: Pin,
    /// GPUs the engines spread over (GPU backend): F-engine a on GPU a mod N, XB-engine k
    /// on GPU k mod N, each engine seeing its one device through CUDA_VISIBLE_DEVICES
    /// (indices within the array's own CUDA_VISIBLE_DEVICES where that is set).
    #[arg(long, default_value_t = 1)]
    pub gpus: usize,
    /// Digitiser simulators. auto: one per antenna at real rates (each with its own two
    /// send threads, as a telescope has one digitiser per antenna), else one for all.
    #[arg(long, value_enum, default_value_t = Dsims::Auto)]
    pub dsims: Dsims,
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
    /// UNIX time of ADC timestamp 0 for every dsim and engine (default: the run's start,
    /// whole seconds). The data are a function of the timestamp (the dsims' signals, noise
    /// and dither, the F-engines' dither: every seed fixed), so two arrays started side by
    /// side from one sync time (their own --base-port) give identical dumps for every
    /// timestamp whole in both (`tools/compare_arrays.py`).
    #[arg(long, value_name = "UNIX_SECONDS")]
    pub sync_time: Option<f64>,
    /// Every F- and XB-engine receives into chunks in GPU memory mapped for the CPU (the
    /// engines' `--use-vkgdr`; GPU backend): no host-to-device copy of the input. An engine
    /// where the mapping is unavailable logs why and uses pinned host chunks; the summary
    /// lists the engines that got GPU memory (`vkgdr_engines`).
    #[arg(long)]
    pub use_vkgdr: bool,
}

/// A checked array configuration: the options, and the engines' shapes that follow.
#[derive(Debug, Clone)]
pub struct ArrayConfig {
    /// The options (valid).
    pub args: ArrayArgs,
    /// The engines' sizes at this rate.
    pub sizes: Sizes,
    /// Where the engines' threads run.
    pub plan: CorePlan,
    /// The XB-engines' names (`xbgpu`, or `xbgpu0`… with several).
    pub x_names: Vec<String>,
    /// The dsims' names (`dsim`, or `dsim0`… with several, each feeding as many antennas).
    pub dsim_names: Vec<String>,
    /// Which GPU each engine uses.
    pub gpus: GpuPlan,
    /// ADC samples per F-engine batch.
    pub batch_samples: u64,
    /// Batches per correlator dump.
    pub dump_batches: u64,
    /// Digitiser heaps per stream over the run.
    pub heaps_per_stream: u64,
}

/// Most XB-engines (each listens on its own loopback address).
const MAX_X_ENGINES: usize = 16;
/// Fewest channels per XB-engine.
const MIN_X_CHANNELS: usize = 64;

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
        if let Some(t) = self.sync_time {
            let now = unix_now().unwrap_or(f64::INFINITY);
            // The engines refuse a future one; a day back keeps the 48-bit timestamps far
            // from wrapping at any rate allowed here (2^48 samples: 0.8 days at 4e9).
            if !(t.is_finite() && t > 0.0 && t <= now + 1.0 && now - t <= MAX_SYNC_AGE_S) {
                return Err(ConfigError::rule(
                    format!("--sync-time {t}"),
                    format!(
                        "must be a UNIX time not in the future and at most {} hours ago",
                        MAX_SYNC_AGE_S / 3600.0
                    ),
                ));
            }
        }
        let c = self.channels;
        if !c.is_power_of_two() || !(64..=32768).contains(&c) {
            return Err(ConfigError::rule(
                "--channels",
                "must be a power of two in 64..=32768",
            ));
        }
        let nx = self.x_engines;
        if !(1..=MAX_X_ENGINES).contains(&nx) || !nx.is_power_of_two() || c / nx < MIN_X_CHANNELS {
            return Err(ConfigError::rule(
                format!("--x-engines {nx}"),
                format!(
                    "must be a power of two in 1..={} that splits --channels {c} into parts \
                     of at least {MIN_X_CHANNELS} channels",
                    (c / MIN_X_CHANNELS).min(MAX_X_ENGINES)
                ),
            ));
        }
        let sizes = Sizes::for_rate(self.adc_sample_rate, c);
        let k0 = u32::from(x_port_offset(self.antennas, sizes.ports_per_pol));
        let dsims = self.dsims.count(self.antennas, &sizes);
        // Prometheus ports: the XB-engines, the F-engines, the dsims.
        let extra = match self.soak_report {
            Some(_) => (nx + self.antennas + dsims) as u32,
            None => 0,
        };
        // The XB-engines' input port, then one output port each.
        let last = u32::from(self.base_port) + k0 + nx as u32 + extra;
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
        self.backend.use_gpu(true)?;
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let gpus = GpuPlan::new(self.gpus, visible.as_deref())?;
        if self.gpus > 1 && self.backend == Backend::Cpu {
            return Err(ConfigError::rule(
                format!("--gpus {}", self.gpus),
                "spreads GPU engines: it needs --backend gpu or auto",
            ));
        }
        if self.use_vkgdr && self.backend == Backend::Cpu {
            return Err(ConfigError::rule(
                "--use-vkgdr",
                "puts GPU engines' receive chunks in GPU memory: it needs --backend gpu or auto",
            ));
        }
        let fs = self.adc_sample_rate;
        let jones = sizes.jones_per_batch;
        let batch = ((jones / c) * 2 * c) as u64;
        let available = crate::net::affinity::available_cores().0;
        Ok(ArrayConfig {
            args: self.clone(),
            plan: CorePlan::new(
                self.pin,
                &available,
                self.antennas,
                dsims,
                (nx, xb_recv_threads(self.antennas, fs, nx)),
                &sizes,
            ),
            sizes,
            x_names: xbgpu_names(nx),
            dsim_names: dsim_names(dsims),
            gpus,
            batch_samples: batch,
            dump_batches: ((self.dump_seconds * fs / batch as f64).round() as u64).max(1),
            heaps_per_stream: ((self.duration * fs) as u64).div_ceil(4096),
        })
    }
}

/// Oldest `--sync-time` (seconds before now): 2^48 samples at `MAX_ADC_RATE` last 19.5
/// hours, and the run must fit after it.
const MAX_SYNC_AGE_S: f64 = 12.0 * 3600.0;

/// Lowest `--adc-sample-rate` (Hz).
const MIN_ADC_RATE: f64 = 1e5;
/// Highest `--adc-sample-rate` (Hz): twice L-band's 1712e6 and more is beyond what the
/// engines of one host keep up with on loopback, and makes runs of absurd heap counts.
const MAX_ADC_RATE: f64 = 4e9;

/// Port offset of the XB-engines' input (their outputs follow): above the F-engines'
/// inputs (`ports_per_pol` per pol, two pols per antenna).
fn x_port_offset(antennas: usize, ports_per_pol: usize) -> u16 {
    (2 * ports_per_pol * antennas).max(100) as u16
}

impl ArrayConfig {
    /// Port `base_port + k` on 127.0.0.1 (validated to fit).
    fn port(&self, k: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.args.base_port + k)
    }

    /// The ports of antenna `a`'s pol `p` (the dsim deals the pol's heaps round-robin over
    /// them): `base + 2·P·a + P·p + j`, j < P ports per pol.
    fn pol_endpoints(&self, a: usize, p: usize) -> String {
        let ppp = self.sizes.ports_per_pol;
        (0..ppp)
            .map(|j| self.port((2 * ppp * a + ppp * p + j) as u16).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn x_port_offset(&self) -> u16 {
        x_port_offset(self.args.antennas, self.sizes.ports_per_pol)
    }

    /// XB-engine `k`'s input: one port on 127.0.0.(k+1).
    fn x_in(&self, k: usize) -> SocketAddrV4 {
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::LOCALHOST) + k as u32);
        SocketAddrV4::new(ip, self.args.base_port + self.x_port_offset())
    }

    /// XB-engine `k`'s output (its dumps to this process): the ports after the input's.
    fn x_out(&self, k: usize) -> SocketAddrV4 {
        self.port(self.x_port_offset() + 1 + k as u16)
    }

    /// The antennas dsim `d` feeds (each dsim as many).
    fn dsim_antennas(&self, d: usize) -> std::ops::Range<usize> {
        let per = self.args.antennas / self.dsim_names.len();
        d * per..(d + 1) * per
    }

    /// The F-engines' wideband destinations: every XB-engine's input, one channel
    /// substream each (`127.0.0.1+N:PORT`).
    fn fgpu_dst(&self) -> String {
        let nx = self.args.x_engines;
        let x = self.x_in(0);
        match nx {
            1 => x.to_string(),
            _ => format!("{}+{}:{}", x.ip(), nx - 1, x.port()),
        }
    }

    /// With `--soak-report`: the Prometheus port of engine `i` (the XB-engines, then the
    /// F-engines, then the dsims), above the XB-engines' ports.
    fn prometheus_port(&self, i: usize) -> Option<u16> {
        self.args.soak_report.as_ref()?;
        Some(self.args.base_port + self.x_port_offset() + 1 + (self.args.x_engines + i) as u16)
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
    let (n, c, fs, nx) = (
        args.antennas,
        args.channels,
        args.adc_sample_rate,
        args.x_engines,
    );
    let exe = std::env::current_exe()?;
    let dir = &args.output;
    std::fs::create_dir_all(dir.join("logs"))?;
    let positions = sky::layout(n);
    let model = sky::SkyModel::demo(fs, c);
    let signals = model.dsim_signals(&positions, fs);
    std::fs::write(dir.join("signals.txt"), &signals)?;
    // Each dsim's program: its antennas' streams.
    let signals: Vec<String> = (0..cfg.dsim_names.len())
        .map(|d| model.dsim_signals_for(&positions, fs, cfg.dsim_antennas(d)))
        .collect();
    // Timestamps count from the start of the run, or from the sync time given.
    let sync = match args.sync_time {
        Some(t) => t.to_string(),
        None => unix_now()?.floor().to_string(),
    };
    info!(
        antennas = n,
        channels = c,
        x_engines = nx,
        adc_rate = fs,
        dump_batches = cfg.dump_batches,
        jones_per_batch = cfg.sizes.jones_per_batch,
        recv_chunk_samples = cfg.sizes.recv_chunk_samples,
        ports_per_pol = cfg.sizes.ports_per_pol,
        dsims = cfg.dsim_names.len(),
        gpus = args.gpus,
        "starting the array"
    );
    for line in cfg.plan.lines() {
        if cfg.plan.unpinned.is_some() && cfg.sizes.real_rate && args.pin == Pin::Auto {
            warn!("{line}");
        } else {
            info!("{line}");
        }
    }
    // The array's threads and every engine's unpinned threads (main, GPU driving,
    // metrics) go to the cores the plan left spare: engines inherit this thread's mask.
    let spare = cfg.plan.spare();
    if !spare.is_empty() {
        if let Err(e) = crate::net::affinity::set_current_thread_cores(&spare) {
            warn!(error = %e, "the engines' other threads may run on pinned cores");
        }
    }
    // The kernel's drop counters over the run: a loss before any engine saw the packet.
    let kernel_at_start = crate::telemetry::kernel::KernelDrops::read();
    // A receiver per XB-engine output, then the XB-engines, the F-engines, the dsim.
    let stop_rx = Arc::new(AtomicBool::new(false));
    let receivers: Vec<_> = (0..nx)
        .map(|k| {
            let (x_out, stop2) = (cfg.x_out(k), stop_rx.clone());
            std::thread::spawn(move || receive_dumps(x_out, stop2))
        })
        .collect();
    let mut engines = Engines::default();
    let streamed = start_engines(cfg, &exe, &sync, model.fgpu_gain(c), &mut engines)
        .and_then(|()| run_dsim(cfg, &exe, &sync, &signals, &mut engines));
    let streamed = match streamed {
        Ok(v) => v,
        Err(e) => {
            // Leave nothing running: stop every engine that is still up, then fail.
            stop_all(&mut engines.all(), Duration::from_secs(10));
            stop_rx.store(true, Ordering::Relaxed);
            return Err(e);
        }
    };
    let soak = streamed.soak.transpose()?;
    let (fsum, xsum) = stop_engines(engines)?;
    let kernel_drops = kernel_at_start
        .zip(crate::telemetry::kernel::KernelDrops::read())
        .map(|(a, b)| b.since(&a));
    if let Some(k) = kernel_drops.filter(|k| k.dropped()) {
        warn!(
            backlog_drops = k.backlog_drops,
            udp_rcvbuf_errors = k.udp_rcvbuf_errors,
            udp_in_errors = k.udp_in_errors,
            "the host's kernel dropped packets during the run (host-wide counters: these or other processes' sockets)"
        );
    }
    stop_rx.store(true, Ordering::Relaxed);
    let (mut parts, mut heaps, mut packets, mut dropped) = (Vec::new(), 0, 0, 0);
    for r in receivers {
        let (dumps, st) = r
            .join()
            .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
        parts.push(dumps);
        heaps += st.heaps;
        packets += st.packets;
        dropped += st.total_dropped() + st.incomplete_heaps_evicted;
    }
    let nbl = n * (n + 1) / 2;
    let assembled = assemble(parts, (c / nx) * nbl * 8, &cfg.x_names)?;
    let dumps = assembled.dumps;
    let wall = streamed.t0.elapsed().as_secs_f64();
    write_dumps(dir, &dumps, n, c)?;
    // Lost data can leave nothing to image: that is reported, not a failure of the run.
    let products = image::write_products(dir, &dumps, n, c, fs, &positions).unwrap_or_else(|e| {
        warn!(error = %e, "no image written");
        json!({"error": e.to_string()})
    });
    // Every stream's heaps (the dsims send the same number; the fewest if not).
    let sent = streamed
        .dsims
        .iter()
        .map(|d| d["summary"]["heaps_per_stream"].as_u64())
        .min()
        .flatten();
    let lost = losses::losses(
        &fsum,
        &xsum,
        &cfg.x_names,
        &assembled.missing,
        sent,
        dropped,
    );
    if !lost.as_object().is_none_or(|o| o.is_empty()) {
        warn!(lost = %lost, "data were lost: see \"lost\" in the summary");
    }
    let stream_s = streamed.seconds;
    // The slowest dsim's sending time.
    let send_s = streamed
        .dsims
        .iter()
        .filter_map(|d| d["summary"]["send_seconds"].as_f64())
        .reduce(f64::max)
        .unwrap_or(stream_s);
    // One XB-engine (dsim): its summary as before; several: a list in order.
    let one_or_list = |v: Vec<serde_json::Value>| match <[_; 1]>::try_from(v) {
        Ok([one]) => one,
        Err(v) => json!(v),
    };
    let xb = one_or_list(xsum);
    let dsim_summary = one_or_list(streamed.dsims);
    let mut receiver = json!({"heaps": heaps, "packets": packets, "dropped_packets": dropped});
    if assembled.repeated.iter().any(|&r| r > 0) {
        receiver["repeated_dumps"] = json!(assembled.repeated);
    }
    let summary = json!({
        "antennas": n,
        "channels": c,
        "x_engines": nx,
        "gpus": args.gpus,
        "adc_sample_rate": fs,
        "duration_s": args.duration,
        "dump_batches": cfg.dump_batches,
        "dump_seconds": (cfg.dump_batches * cfg.batch_samples) as f64 / fs,
        "dumps_produced": dumps.len(),
        "streaming_wall_s": stream_s,
        "total_wall_s": wall,
        // Simulated seconds per second of sending (1.0: the digitisers kept real time).
        "real_time_factor": args.duration / send_s,
        "receiver": receiver,
        // Every loss by engine and counter (only those that occurred); empty: nothing lost.
        "lost": lost,
        // The host kernel's drop counters over the run (host-wide; null where unreadable).
        "kernel_drops": kernel_drops,
        "soak": soak.as_ref().map(|r| json!({
            "ok": r.summary.verdict.ok,
            "problems": r.summary.verdict.problems.iter().map(|p| p.message.clone()).collect::<Vec<_>>(),
            "json": r.json, "png": r.png, "csv": r.csv,
        })),
        "sizes": {
            "jones_per_batch": cfg.sizes.jones_per_batch,
            "recv_chunk_samples": cfg.sizes.recv_chunk_samples,
            "heaps_per_fengine_per_chunk": cfg.sizes.heaps_per_fengine_per_chunk,
            "ports_per_pol": cfg.sizes.ports_per_pol,
        },
        "core_plan": cfg.plan.to_json(),
        "use_vkgdr": args.use_vkgdr,
        "vkgdr_engines": args.use_vkgdr.then(|| vkgdr_engines(cfg)),
        "engines": {"dsim": dsim_summary, "fgpu": fsum, "xbgpu": xb},
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

fn unix_now() -> anyhow::Result<f64> {
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64())
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
        assert_eq!(cfg.x_out(0).port(), 65535);
        assert!(validate(&["--base-port", "65435"]).is_err());
        // 64 antennas use ports base..base+127: the XB-engine moves above them.
        let cfg = validate(&["--antennas", "64", "--base-port", "17100"]).unwrap();
        assert_eq!(cfg.x_in(0).port(), 17100 + 128);
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

    /// `--use-vkgdr`: GPU engines only; the summary's `vkgdr_engines` are those whose log
    /// says their chunks are in GPU memory (an engine that fell back is not listed).
    #[test]
    fn use_vkgdr_needs_gpu_engines_and_is_read_from_their_logs() {
        let e = validate(&["--use-vkgdr"]).unwrap_err().to_string();
        assert!(e.starts_with("--use-vkgdr puts GPU engines'"), "{e}");
        let dir = std::env::temp_dir().join(format!("gpucbf-array-vkgdr-{}", std::process::id()));
        let v = [
            "array",
            "--backend",
            "auto",
            "--use-vkgdr",
            "--antennas",
            "2",
        ];
        let mut cfg = Cli::try_parse_from(v).unwrap().args;
        cfg.output = dir.clone();
        let cfg = cfg.validate().unwrap();
        assert!(cfg.args.use_vkgdr);
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        let line = |what: &str| format!("2026-11-28T04:00:00Z  INFO {what}\n");
        let logs = [
            ("xbgpu", line(crate::mem::vkgdr::GPU_MAPPED_LOG)),
            (
                "fgpu0",
                line("--use-vkgdr: no Vulkan loader; using pinned host chunks"),
            ),
            ("fgpu1", line(crate::mem::vkgdr::GPU_MAPPED_LOG)),
        ];
        for (name, text) in logs {
            std::fs::write(dir.join(format!("logs/{name}.log")), text).unwrap();
        }
        assert_eq!(cfg.x_names, ["xbgpu"]);
        assert_eq!(vkgdr_engines(&cfg), ["xbgpu", "fgpu1"]);
        std::fs::remove_file(dir.join("logs/fgpu1.log")).unwrap();
        assert_eq!(vkgdr_engines(&cfg), ["xbgpu"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `--gpus`: 1..=16, GPU engines only; two GPUs alternate the engines.
    #[test]
    fn gpus_are_checked_and_alternate() {
        let e = validate(&["--gpus", "2"]).unwrap_err().to_string();
        assert!(e.starts_with("--gpus 2 spreads GPU engines"), "{e}");
        let e = validate(&["--gpus", "0"]).unwrap_err().to_string();
        assert!(e.starts_with("--gpus 0 must be in 1..=16"), "{e}");
        let one = validate(&[]).unwrap();
        assert_eq!(one.gpus.engine(1), None);
    }

    /// `--sync-time`: a UNIX time now or in the last 12 hours; future, ancient or
    /// non-finite ones are refused by name.
    #[test]
    fn sync_time_must_be_recent_and_not_future() {
        let now = unix_now().unwrap().floor();
        let cfg = validate(&["--sync-time", &(now - 1.0).to_string()]).unwrap();
        assert_eq!(cfg.args.sync_time, Some(now - 1.0));
        assert!(validate(&["--sync-time", &(now - 11.0 * 3600.0).to_string()]).is_ok());
        for bad in [now + 60.0, now - 13.0 * 3600.0, 0.0, f64::NAN] {
            let e = validate(&[&format!("--sync-time={bad}")])
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("--sync-time"), "{e}");
        }
    }

    /// `--x-engines` must split the channels into powers of two of at least 64 channels;
    /// a refusal names the option and the value.
    #[test]
    fn bad_x_engine_counts_are_refused_by_name() {
        for (c, bad) in [
            ("1024", "0"),
            ("1024", "3"),
            ("1024", "32"),
            ("128", "4"),
            ("64", "2"),
        ] {
            let e = validate(&["--channels", c, "--x-engines", bad])
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("--x-engines {bad} must be a power of two")),
                "{e}"
            );
        }
        let e = validate(&["--channels", "256", "--x-engines", "8"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("in 1..=4 that splits --channels 256"), "{e}");
        assert!(validate(&["--channels", "128", "--x-engines", "2"]).is_ok());
        assert!(validate(&["--channels", "32768", "--x-engines", "16"]).is_ok());
        assert!(validate(&["--channels", "32768", "--x-engines", "17"]).is_err());
    }

    /// The ports: each pol on its own port(s), XB-engine k listening on 127.0.0.(k+1),
    /// the F-engines sending to all of them, one output port per XB-engine, the Prometheus
    /// ports above; with one XB-engine and the scaled rate, the layout of before.
    #[test]
    fn ports_follow_the_x_engines_and_ports_per_pol() {
        let one = validate(&[
            "--antennas",
            "2",
            "--soak-report",
            "/tmp/x",
            "--duration",
            "20",
        ])
        .unwrap();
        assert_eq!(one.pol_endpoints(1, 1), "127.0.0.1:17103");
        assert_eq!(one.fgpu_dst(), "127.0.0.1:17200");
        assert_eq!(one.x_out(0).to_string(), "127.0.0.1:17201");
        assert_eq!(one.x_names, ["xbgpu"]);
        assert_eq!(one.dsim_names, ["dsim"]);
        // Prometheus: the XB-engine, the F-engines, the dsim.
        assert_eq!(one.prometheus_port(0), Some(17202));
        assert_eq!(one.prometheus_port(3), Some(17205));
        let two = validate(&[
            "--antennas",
            "2",
            "--x-engines",
            "2",
            "--adc-sample-rate",
            "1712e6",
            "--soak-report",
            "/tmp/x",
            "--duration",
            "20",
        ])
        .unwrap();
        // One port per pol at the real rate too.
        assert_eq!(two.pol_endpoints(0, 1), "127.0.0.1:17101");
        assert_eq!(two.pol_endpoints(1, 0), "127.0.0.1:17102");
        assert_eq!(two.x_in(1).to_string(), "127.0.0.2:17200");
        assert_eq!(two.fgpu_dst(), "127.0.0.1+1:17200");
        assert_eq!(two.x_out(1).to_string(), "127.0.0.1:17202");
        assert_eq!(two.prometheus_port(0), Some(17203));
        assert_eq!(two.x_names, ["xbgpu0", "xbgpu1"]);
        // One dsim per antenna at the real rate, each with a Prometheus port at the end.
        assert_eq!(two.dsim_names, ["dsim0", "dsim1"]);
        assert_eq!(two.prometheus_port(2 + 2 + 1), Some(17208));
        assert_eq!(two.sizes.jones_per_batch, 1 << 20);
        // 64 antennas: the XB-engines move above the 128 digitiser ports; the last port
        // (the last XB-engine's output) must fit.
        let args = [
            "--antennas",
            "64",
            "--adc-sample-rate",
            "1712e6",
            "--x-engines",
            "4",
        ];
        let cfg = validate(&[&args[..], &["--base-port", "1000"]].concat()).unwrap();
        assert_eq!(cfg.x_in(0).port(), 1128);
        assert!(validate(&[&args[..], &["--base-port", "65403"]].concat()).is_ok());
        assert!(validate(&[&args[..], &["--base-port", "65404"]].concat()).is_err());
    }
}
