//! `gpucbf replay`: sends the UDP datagrams of a pcap capture (the engines' format: dsim
//! `--pcap`, `--send-pcap`) to UDP endpoints at a chosen rate, with seeded faults
//! ([`faults`]): drops, duplicates, reordering, truncation, payload bit flips and delay
//! bursts, each logged per packet and heap (`--injected FILE`) so that a test can hold an
//! engine's counters against it. `--pcap-out FILE` writes the faulty stream to a capture
//! instead (the engines read it as they read UDP, deterministically).

pub mod faults;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use serde::Serialize;

pub use faults::{FaultConfig, FaultLog, Hit, Injected, Injector, OutPacket};

use crate::net::recv::pcap::{MappedPcap, PcapSource};
use crate::net::send::pcap::PcapSink;
use crate::net::send::udp::UdpSink;
use crate::net::send::PacketSink;
use crate::spead::{ids, PacketView};

/// `gpucbf replay` options.
#[derive(Args, Debug, Clone)]
pub struct ReplayArgs {
    /// The capture (classic pcap; Ethernet, raw-IP or IPv4 link type).
    pub pcap: PathBuf,
    /// Where to send, `ADDR:PORT`: one for every packet, or one per destination of the
    /// capture (in order of first appearance). None: the capture's own destinations.
    pub dest: Vec<SocketAddrV4>,
    /// Speed as a multiple of real time (capture timestamps, or the heaps' timestamps with
    /// `--adc-sample-rate`).
    #[arg(long, default_value_t = 1.0, conflicts_with_all = ["pps", "fast"])]
    pub rate: f64,
    /// Packets per second instead of the capture's timing.
    #[arg(long, conflicts_with = "fast")]
    pub pps: Option<f64>,
    /// As fast as the socket takes them.
    #[arg(long)]
    pub fast: bool,
    /// Real time from each heap's timestamp item (ADC samples at this rate) rather than the
    /// capture's record times (which writers such as dsim `--pcap` do not set to real time).
    #[arg(long)]
    pub adc_sample_rate: Option<f64>,
    /// Probability of dropping a packet.
    #[arg(long, default_value_t = 0.0)]
    pub drop: f64,
    /// Probability of sending a packet twice.
    #[arg(long, default_value_t = 0.0)]
    pub duplicate: f64,
    /// Send packets in a random order within a sliding window of this many.
    #[arg(long, default_value_t = 0)]
    pub reorder: usize,
    /// Probability of cutting a packet short.
    #[arg(long, default_value_t = 0.0)]
    pub truncate: f64,
    /// Probability of flipping one bit of a packet's heap payload.
    #[arg(long, default_value_t = 0.0)]
    pub corrupt: f64,
    /// Stall this many milliseconds, then send the held packets at once.
    #[arg(long, default_value_t = 0.0)]
    pub delay_burst: f64,
    /// One delay burst per this many packets sent.
    #[arg(long, default_value_t = 10_000)]
    pub delay_burst_interval: u64,
    /// Seed of the fault choices.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write what was injected (per fault: count, packets, heaps) as JSON here.
    #[arg(long)]
    pub injected: Option<PathBuf>,
    /// Write the stream to this pcap file instead of sending it.
    #[arg(long)]
    pub pcap_out: Option<PathBuf>,
    /// Multicast interface address to send from.
    #[arg(long, default_value = "0.0.0.0")]
    pub interface: Ipv4Addr,
    /// IP TTL (multicast hops).
    #[arg(long, default_value_t = 4)]
    pub ttl: u32,
}

/// What `gpucbf replay` did (its JSON output).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplaySummary {
    /// Datagrams read from the capture.
    pub packets_in: u64,
    /// Datagrams sent or written.
    pub packets_out: u64,
    /// Their bytes (UDP payloads).
    pub bytes_out: u64,
    /// Sends that failed (the datagram is lost; counted, the replay goes on).
    pub send_errors: u64,
    /// The first send error, in words.
    pub first_send_error: Option<String>,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Packets per second achieved.
    pub packets_per_second: f64,
    /// The capture's destinations and where they went.
    pub destinations: Vec<(String, String)>,
    /// Count per fault (the details go to `--injected`).
    pub faults: std::collections::BTreeMap<String, u64>,
}

impl ReplayArgs {
    /// The fault settings, checked.
    pub fn faults(&self) -> anyhow::Result<FaultConfig> {
        let c = FaultConfig {
            drop: self.drop,
            duplicate: self.duplicate,
            truncate: self.truncate,
            corrupt: self.corrupt,
            reorder: self.reorder,
            delay_burst_ms: self.delay_burst,
            delay_burst_interval: self.delay_burst_interval,
            seed: self.seed,
        };
        c.validate().map_err(anyhow::Error::msg)?;
        Ok(c)
    }
}

/// The capture's destinations in order of first appearance, and its datagram count.
fn scan(path: &Path) -> anyhow::Result<(Vec<SocketAddrV4>, u64)> {
    let mut m = MappedPcap::open(path)?;
    let mut dsts = Vec::new();
    let mut n = 0;
    while let Some(dst) = m.next_payload(|dst, _| dst)? {
        n += 1;
        if !dsts.contains(&dst) {
            dsts.push(dst);
        }
    }
    Ok((dsts, n))
}

/// Where each of the capture's destinations goes.
fn route(capture: &[SocketAddrV4], dest: &[SocketAddrV4]) -> anyhow::Result<Vec<SocketAddrV4>> {
    match dest.len() {
        0 => Ok(capture.to_vec()),
        1 => Ok(vec![dest[0]; capture.len()]),
        n if n == capture.len() => Ok(dest.to_vec()),
        n => anyhow::bail!(
            "{n} destinations given for a capture with {} ({}): give one, or one per \
             destination in order of first appearance",
            capture.len(),
            capture
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Real-time clock of the capture: record times, or heap timestamps at the ADC rate
/// (a packet without one keeps the previous packet's time).
struct Clock {
    adc: Option<f64>,
    pps: Option<f64>,
    first: Option<f64>,
    last: f64,
}

impl Clock {
    fn time(&mut self, index: u64, record: Duration, payload: &[u8]) -> f64 {
        if let Some(p) = self.pps {
            return index as f64 / p;
        }
        let t = match self.adc {
            Some(rate) => match PacketView::parse(payload)
                .ok()
                .and_then(|v| v.immediate(ids::TIMESTAMP))
            {
                Some(ts) => ts as f64 / rate,
                None => return self.last,
            },
            None => record.as_secs_f64(),
        };
        let first = *self.first.get_or_insert(t);
        self.last = (t - first).max(0.0);
        self.last
    }
}

fn progress(total: u64) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total);
    if crate::telemetry::log_format() == crate::telemetry::LogFormat::Json {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} packets {per_sec} eta {eta} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb
}

/// Replays the capture; writes `--injected` and returns the summary.
pub fn run(args: &ReplayArgs) -> anyhow::Result<ReplaySummary> {
    let cfg = args.faults()?;
    if !(args.rate.is_finite() && args.rate > 0.0) {
        anyhow::bail!("--rate {}: a multiple of real time, above 0", args.rate);
    }
    if let Some(p) = args.pps.filter(|p| !(p.is_finite() && *p > 0.0)) {
        anyhow::bail!("--pps {p}: packets per second, above 0");
    }
    if let Some(r) = args
        .adc_sample_rate
        .filter(|r| !(r.is_finite() && *r > 0.0))
    {
        anyhow::bail!("--adc-sample-rate {r}: Hz, above 0");
    }
    let (capture_dsts, total) = scan(&args.pcap)?;
    let routes = route(&capture_dsts, &args.dest)?;
    let mut sink: Box<dyn PacketSink> = match &args.pcap_out {
        Some(p) => {
            let same = std::fs::canonicalize(p).ok() == std::fs::canonicalize(&args.pcap).ok();
            if same {
                anyhow::bail!("--pcap-out {} is the input capture", p.display());
            }
            Box::new(
                PcapSink::create(p, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7000), 4)
                    .with_context(|| format!("creating {}", p.display()))?,
            )
        }
        None => Box::new(UdpSink::new(args.interface, args.ttl, 8 << 20)?),
    };
    let paced = !(args.fast || sink.is_offline());
    let mut src = PcapSource::open(&args.pcap)?;
    let mut clock = Clock {
        adc: args.adc_sample_rate,
        pps: args.pps,
        first: None,
        last: 0.0,
    };
    let rate = if args.pps.is_some() { 1.0 } else { args.rate };
    let mut inj = Injector::new(cfg);
    let mut summary = ReplaySummary::default();
    let pb = progress(total);
    let start = Instant::now();
    let mut out = Vec::new();
    let mut index = 0u64;
    let mut send = |out: &mut Vec<OutPacket>, s: &mut ReplaySummary| -> anyhow::Result<()> {
        for p in out.drain(..) {
            if paced {
                let due = start + Duration::from_secs_f64(p.time / rate);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            let k = capture_dsts.iter().position(|d| *d == p.dst).unwrap_or(0);
            match sink.send(routes[k], &[&p.payload]) {
                Ok(()) => {
                    s.packets_out += 1;
                    s.bytes_out += p.payload.len() as u64;
                }
                Err(e) => {
                    s.send_errors += 1;
                    s.first_send_error
                        .get_or_insert_with(|| format!("to {}: {e}", routes[k]));
                }
            }
        }
        Ok(())
    };
    while let Some(d) = src.next_datagram()? {
        let t = clock.time(index, d.time, &d.payload);
        inj.push(index, t, d.dst, d.payload, &mut out);
        index += 1;
        send(&mut out, &mut summary)?;
        if index.is_multiple_of(1024) {
            pb.set_position(index);
        }
    }
    let log = inj.finish(&mut out);
    send(&mut out, &mut summary)?;
    sink.flush()?;
    pb.finish_and_clear();
    summary.packets_in = log.packets_in;
    summary.seconds = start.elapsed().as_secs_f64();
    summary.packets_per_second = summary.packets_out as f64 / summary.seconds.max(1e-9);
    summary.destinations = capture_dsts
        .iter()
        .zip(&routes)
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    for (k, l) in [
        ("drop", &log.drop),
        ("duplicate", &log.duplicate),
        ("truncate", &log.truncate),
        ("corrupt", &log.corrupt),
        ("reorder", &log.reorder),
        ("delay_burst", &log.delay_burst),
    ] {
        summary.faults.insert(k.into(), l.count);
    }
    if let Some(path) = &args.injected {
        let text = serde_json::to_string_pretty(&log)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if summary.send_errors > 0 {
        tracing::warn!(
            errors = summary.send_errors,
            first = summary.first_send_error.as_deref().unwrap_or(""),
            "replay: some sends failed"
        );
    }
    Ok(summary)
}
