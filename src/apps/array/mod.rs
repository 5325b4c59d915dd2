//! `gpucbf array`: a small loopback array in one command. One dsim (all antennas' streams,
//! a sky of point sources plus noise and a tone), one F-engine process per antenna, one
//! XB-engine, all over real UDP on 127.0.0.1 with the same subcommands a telescope runs;
//! this process receives the correlation products and writes visibilities, plots, a dirty
//! image and a summary.

pub mod sky;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use num_complex::Complex32;
use serde_json::json;
use tracing::{info, warn};

use crate::net::recv::udp::UdpRecvSource;
use crate::net::recv::{PacketSource, Poll};
use crate::spead::{ids, Assembler, ItemValue};

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
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// ADC sample rate (scaled down from L-band's 1712e6 so a CPU keeps up).
    #[arg(long, default_value_t = 1712e6 / 512.0)]
    pub adc_sample_rate: f64,
    /// First UDP port used on 127.0.0.1.
    #[arg(long, default_value_t = 17100)]
    pub base_port: u16,
    /// Seconds per correlator dump (rounded to whole batches).
    #[arg(long, default_value_t = 1.0)]
    pub dump_seconds: f64,
}

/// One dump of correlation products.
pub struct Dump {
    pub timestamp: u64,
    /// (channel, baseline, product, re/im) int32.
    pub raw: Vec<i32>,
}

fn child(exe: &std::path::Path, args: &[String], log: &std::path::Path) -> anyhow::Result<Child> {
    let err = std::fs::File::create(log)?;
    let mut cmd = Command::new(exe);
    // Child logs in the format the array was asked for.
    if crate::telemetry::log_format() == crate::telemetry::LogFormat::Json {
        cmd.args(["--log-format", "json"]);
    }
    Ok(cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()?)
}

fn stop(c: &mut Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(c.id() as i32, libc::SIGTERM);
    }
}

fn wait_json(c: Child, name: &str, timeout: Duration) -> serde_json::Value {
    let t0 = Instant::now();
    let mut c = c;
    loop {
        match c.try_wait() {
            Ok(Some(status)) => {
                let mut out = String::new();
                if let Some(mut o) = c.stdout.take() {
                    let _ = std::io::Read::read_to_string(&mut o, &mut out);
                }
                let v: serde_json::Value =
                    serde_json::from_str(&out).unwrap_or(json!({"stdout": out}));
                return json!({"name": name, "exit_status": status.code(), "summary": v});
            }
            Ok(None) if t0.elapsed() < timeout => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = c.kill();
                let _ = c.wait();
                return json!({"name": name, "exit_status": null, "error": "killed after timeout"});
            }
        }
    }
}

/// Waits until each log file contains `marker` (an engine's start-up line), at most `timeout`;
/// an engine that exits with an error (`Error:` in its log) ends the wait at once.
fn wait_ready(logs: &[std::path::PathBuf], marker: &str, timeout: Duration) -> anyhow::Result<()> {
    let t0 = Instant::now();
    for log in logs {
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if text.contains(marker) {
                break;
            }
            if text.contains("Error:") {
                anyhow::bail!("{} failed to start: see the log", log.display());
            }
            if t0.elapsed() > timeout || crate::control::shutdown::requested() {
                anyhow::bail!(
                    "{} did not report `{marker}` within {:?}: see the log",
                    log.display(),
                    timeout
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// Receives X-engine heaps on `addr` until `stop` is set and the socket has been idle.
fn receive_dumps(
    addr: SocketAddrV4,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<(Vec<Dump>, crate::spead::AssemblerStats)> {
    let mut src = UdpRecvSource::new(&[addr], Ipv4Addr::UNSPECIFIED, 64 << 20)?;
    let mut asm = Assembler::new(8);
    let mut heaps = Vec::new();
    let mut dumps = Vec::new();
    let mut idle = 0;
    loop {
        let r = src.recv_batch(&mut |p| {
            let _ = asm.push(p, &mut heaps);
        })?;
        for h in heaps.drain(..) {
            if let (Some(ts), Some(ItemValue::Bytes(b))) =
                (h.u64_item(ids::TIMESTAMP), h.item(ids::XENG_RAW))
            {
                let raw = b
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                dumps.push(Dump { timestamp: ts, raw });
            }
        }
        match r {
            Poll::Idle if stop.load(std::sync::atomic::Ordering::Relaxed) => {
                idle += 1;
                if idle > 10 {
                    break;
                }
            }
            _ => idle = 0,
        }
    }
    Ok((dumps, asm.stats))
}

/// Runs the array; returns the summary it also writes to `summary.json`.
pub fn run(args: &ArrayArgs) -> anyhow::Result<serde_json::Value> {
    crate::control::shutdown::install();
    if args.antennas == 0 || args.antennas > 64 {
        anyhow::bail!("--antennas must be 1..=64");
    }
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 3600.0) {
        anyhow::bail!("--duration must be in (0, 3600] seconds");
    }
    if !(args.adc_sample_rate.is_finite() && args.adc_sample_rate >= 1e5) {
        anyhow::bail!("--adc-sample-rate must be at least 1e5");
    }
    if !args.channels.is_power_of_two() || args.channels < 64 || args.channels > 32768 {
        anyhow::bail!("--channels must be a power of two in 64..=32768");
    }
    // A bad --backend is refused here, not by every child engine.
    crate::engines::common::cli::use_gpu(&args.backend, true)?;
    let exe = std::env::current_exe()?;
    let dir = &args.output;
    std::fs::create_dir_all(dir.join("logs"))?;
    let n = args.antennas;
    let c = args.channels;
    let fs = args.adc_sample_rate;
    let jones = (1usize << 18).max(c * 32);
    let sph = jones / c;
    let batch = (sph * 2 * c) as u64;
    let threshold = ((args.dump_seconds * fs / batch as f64).round() as u64).max(1);
    let heaps_per_stream = ((args.duration * fs) as u64).div_ceil(4096);
    let port = |k: u16| SocketAddrV4::new(Ipv4Addr::LOCALHOST, args.base_port + k);
    let x_in = port(100);
    let x_out = port(101);
    let positions = sky::layout(n);
    let model = sky::SkyModel::demo(fs, c);
    let signals = model.dsim_signals(&positions, fs);
    std::fs::write(dir.join("signals.txt"), &signals)?;
    let backend = args.backend.clone();
    // Timestamps count from the start of the run.
    let sync = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64()
        .floor()
        .to_string();
    info!(
        antennas = n,
        channels = c,
        adc_rate = fs,
        dump_batches = threshold,
        "starting the array"
    );

    // Receiver of the X output, then the XB-engine, then the F-engines, then the dsim.
    let stop_rx = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop_rx.clone();
    let rx = std::thread::spawn(move || receive_dumps(x_out, stop2));
    let s = |v: &str| v.to_string();
    let xb = child(
        &exe,
        &[
            s("xbgpu"), s("--adc-sample-rate"), fs.to_string(), s("--sync-time"), sync.clone(),
            s("--array-size"), n.to_string(), s("--channels"), c.to_string(),
            s("--channels-per-substream"), c.to_string(), s("--samples-between-spectra"), (2 * c).to_string(),
            s("--jones-per-batch"), jones.to_string(), s("--heaps-per-fengine-per-chunk"), s("4"),
            s("--corrprod"), format!("name=baseline-correlation-products,dst={x_out},heap_accumulation_threshold={threshold}"),
            s("--send-enabled"), s("--backend"), backend.clone(), x_in.to_string(),
        ],
        &dir.join("logs/xbgpu.log"),
    )?;
    let mut fengines = Vec::new();
    for a in 0..n {
        let src = format!("{},{}", port(2 * a as u16), port(2 * a as u16 + 1));
        fengines.push(child(
            &exe,
            &[
                s("fgpu"),
                s("--adc-sample-rate"),
                fs.to_string(),
                s("--sync-time"),
                sync.clone(),
                s("--feng-id"),
                a.to_string(),
                s("--array-size"),
                n.to_string(),
                s("--wideband"),
                format!("name=wideband,channels={c},dst={x_in},jones_per_batch={jones}"),
                s("--recv-chunk-samples"),
                (batch * 2).to_string(),
                s("--gain"),
                model.fgpu_gain(c).to_string(),
                s("--backend"),
                backend.clone(),
                src,
            ],
            &dir.join(format!("logs/fgpu{a}.log")),
        )?);
    }
    // Start the digitisers only once every engine has built its outputs (the GPU engines
    // compile their kernels first, which can take seconds when several start together): data
    // sent before that is lost and can leave every accumulation of a short run incomplete.
    let mut logs = vec![dir.join("logs/xbgpu.log")];
    logs.extend((0..n).map(|a| dir.join(format!("logs/fgpu{a}.log"))));
    wait_ready(&logs, "output ready", Duration::from_secs(120))?;
    std::thread::sleep(Duration::from_millis(200));
    let mut dsim_args = vec![
        s("dsim"),
        s("--adc-sample-rate"),
        fs.to_string(),
        s("--sync-time"),
        sync.clone(),
        s("--period"),
        (1u64 << 22).to_string(),
        s("--heaps"),
        heaps_per_stream.to_string(),
        s("--dither-seed"),
        s("1"),
        s("--signals"),
        signals.clone(),
        s("--summary"),
    ];
    for a in 0..n {
        dsim_args.push(port(2 * a as u16).to_string());
        dsim_args.push(port(2 * a as u16 + 1).to_string());
    }
    let t0 = Instant::now();
    let dsim = child(&exe, &dsim_args, &dir.join("logs/dsim.log"))?;
    let pb = indicatif::ProgressBar::new((args.duration * 10.0) as u64);
    if crate::telemetry::log_format() == crate::telemetry::LogFormat::Json {
        // stderr carries JSON lines only.
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    pb.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} ds simulated {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut dsim = Some(dsim);
    let mut dsim_summary = json!(null);
    while let Some(mut d) = dsim.take() {
        match d.try_wait()? {
            Some(_) => dsim_summary = wait_json(d, "dsim", Duration::from_secs(5)),
            None => {
                if crate::control::shutdown::requested() {
                    stop(&mut d);
                }
                dsim = Some(d);
                let sim = t0.elapsed().as_secs_f64().min(args.duration + 30.0);
                pb.set_position(((sim * 10.0) as u64).min(pb.length().unwrap_or(0)));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    let stream_s = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    std::thread::sleep(Duration::from_millis(500));
    for f in fengines.iter_mut() {
        stop(f);
    }
    let fsum: Vec<serde_json::Value> = fengines
        .into_iter()
        .enumerate()
        .map(|(a, f)| wait_json(f, &format!("fgpu{a}"), Duration::from_secs(60)))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut xb = xb;
    stop(&mut xb);
    let xsum = wait_json(xb, "xbgpu", Duration::from_secs(60));
    stop_rx.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut dumps, rx_stats) = rx
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    dumps.sort_by_key(|d| d.timestamp);
    let wall = t0.elapsed().as_secs_f64();

    let nbl = n * (n + 1) / 2;
    let mut vis = Vec::with_capacity(dumps.len() * c * nbl * 4);
    for d in &dumps {
        if d.raw.len() != c * nbl * 4 * 2 {
            anyhow::bail!(
                "dump at {} has {} values, expected {}",
                d.timestamp,
                d.raw.len(),
                c * nbl * 8
            );
        }
        vis.extend(
            d.raw
                .chunks_exact(2)
                .map(|p| Complex32::new(p[0] as f32, p[1] as f32)),
        );
    }
    crate::npy::write_npy(
        &dir.join("visibilities.npy"),
        &[dumps.len(), c, nbl, 4],
        &crate::npy::NpyData::C64(vis),
    )
    .map_err(|e| anyhow::anyhow!("visibilities.npy: {e}"))?;
    let products = image::write_products(dir, &dumps, n, c, fs, &positions)?;
    let dropped: u64 = rx_stats.total_dropped() + rx_stats.incomplete_heaps_evicted;
    let summary = json!({
        "antennas": n,
        "channels": c,
        "adc_sample_rate": fs,
        "duration_s": args.duration,
        "dump_batches": threshold,
        "dump_seconds": (threshold * batch) as f64 / fs,
        "dumps_produced": dumps.len(),
        "streaming_wall_s": stream_s,
        "total_wall_s": wall,
        // Simulated seconds per second of sending (1.0: the digitisers kept real time).
        "real_time_factor": args.duration / dsim_summary["summary"]["send_seconds"].as_f64().unwrap_or(stream_s),
        "receiver": {"heaps": rx_stats.heaps, "packets": rx_stats.packets, "dropped_packets": dropped},
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
    Ok(summary)
}

pub mod image;
