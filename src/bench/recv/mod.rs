//! `gpucbf bench recv`: receive throughput (packets per second on one receive thread, pinned
//! to one core with `--recv-affinity`) of each packet source on the same digitiser feed,
//! all through the F-engine's chunk assembler, next to spead2's ChunkStream (placement
//! callback in C, as katgpucbf's numba cfunc) on the same transport
//! (tools/spead2_recv_bench.py). Every backend runs `--trials` times, interleaved, and the
//! table gives the median and the spread of each.
//!
//! * `file`: the pcap file source (vs spead2's `add_udp_pcap_file_reader`).
//! * `udp-loopback`: the feed is sent over loopback into a socket with a receive buffer
//!   large enough to hold all of it (SO_RCVBUFFORCE), then drained: the rate is that of the
//!   receive side alone (vs spead2 reading the same way from a socket it was handed). The
//!   sender uses UDP GSO (one UDP_SEGMENT super-datagram per run of equal-size packets); the
//!   datagrams are the same as without it, and both receivers get that same feed: ours with
//!   UDP_GRO takes the runs coalesced and splits them, spead2's socket gets them split by
//!   the kernel.
//! * `udp-nogso`: the same with a plain sendmmsg feed (nothing for GRO to coalesce), vs
//!   spead2 on that feed.
//! * `dpdk-net_pcap`: DPDK's pcap PMD reading the file (libpcap on the receive core).
//! * `dpdk-net_ring`: kernel bypass with a source that costs the receive core almost
//!   nothing ([`crate::net::recv::dpdk::RingReplay`]), for a fixed packet count: rx_burst → parse
//!   → place into the chunk → presence; against the 840k packets/s per core target.
//!
//! DPDK's EAL can start once per process, so each DPDK trial runs in a child process
//! (`--only BACKEND --feed FILE`) with its main lcore on the receive core.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

mod backends;
mod feed;
mod spead2;

use backends::{bench_file, bench_udp, child, run_only};
use feed::{write_feed, Feed};
use spead2::bench_spead2;

const HEAP_SAMPLES: u64 = 4096;
const BITS: u32 = 10;
const CHUNK_SAMPLES: u64 = 1 << 20;
/// Kernel-bypass target of issue 8 (digitiser packets per second per core).
const BYPASS_TARGET: f64 = 840e3;

/// Options of `gpucbf bench recv`.
#[derive(Debug, Clone, Args)]
pub struct RecvBenchArgs {
    /// Digitiser heaps per polarisation in the feed (one packet each).
    #[arg(long, default_value_t = 20000)]
    pub heaps: u64,
    /// Each file-backend trial repeats passes over the file until this many seconds.
    #[arg(long, default_value_t = 0.3)]
    pub min_seconds: f64,
    /// Trials per backend (interleaved); the table gives median, min and max.
    #[arg(long, default_value_t = 5)]
    pub trials: usize,
    /// Packets per trial of the kernel-bypass (`dpdk-net_ring`) backend.
    #[arg(long, default_value_t = 2_000_000)]
    pub bypass_packets: u64,
    /// Core for every receive thread (ours, DPDK's main lcore, spead2's worker thread).
    #[arg(long)]
    pub recv_affinity: Option<usize>,
    /// Python with spead2 and numpy, for the spead2 comparison ("" to skip it).
    #[arg(long, default_value = "/opt/gpucbf-venv/bin/python")]
    pub python: String,
    /// The spead2 peer script (tools/spead2_recv_bench.py); by default the one next to
    /// this executable, else the one in the source tree it was built from.
    #[arg(long)]
    pub peer_script: Option<PathBuf>,
    /// Directory for the feed (a pcap file, deleted afterwards).
    #[arg(long, default_value = "/tmp")]
    pub dir: PathBuf,
    /// EAL arguments for the DPDK backends (feature `dpdk`); `-l CORE` and the vdev are
    /// added.
    #[arg(
        long,
        default_value = "--no-huge --no-pci -m 1024",
        allow_hyphen_values = true
    )]
    pub dpdk_eal: String,
    /// Internal: run one backend once on `--feed` and print its result as JSON.
    #[arg(long, hide = true)]
    pub only: Option<String>,
    /// Internal: the feed for `--only`.
    #[arg(long, hide = true)]
    pub feed: Option<PathBuf>,
}

/// One trial of one backend.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RecvResult {
    /// Backend.
    pub backend: String,
    /// Packets placed into chunks (data packets only).
    pub packets: u64,
    /// Wall-clock seconds the trial took to receive them.
    pub seconds: f64,
    /// `packets / seconds`.
    pub packets_per_second: f64,
    /// CPU time the receiving thread(s) used over the same span (user + system).
    pub cpu_seconds: f64,
    /// Packets per CPU-second: the rate per core, whatever else the machine was doing.
    pub packets_per_cpu_second: f64,
    /// What the trial did (passes, losses, counters), as the table prints it.
    pub note: String,
}

fn rate(n: u64, s: f64) -> f64 {
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

impl RecvResult {
    fn new(backend: &str, packets: u64, seconds: f64, cpu_seconds: f64, note: String) -> Self {
        RecvResult {
            backend: backend.into(),
            packets,
            seconds,
            packets_per_second: rate(packets, seconds),
            cpu_seconds,
            packets_per_cpu_second: rate(packets, cpu_seconds),
            note,
        }
    }
}

/// The feed and the conditions of a run.
#[derive(Debug, Clone, Serialize)]
pub struct FeedInfo {
    /// Digitiser heaps per polarisation.
    pub heaps_per_pol: u64,
    /// Samples per heap.
    pub heap_samples: u64,
    /// Sample width.
    pub sample_bits: u32,
    /// Bytes per packet (one per heap).
    pub packet_bytes: usize,
    /// Samples per chunk.
    pub chunk_samples: u64,
    /// The core every receive thread was pinned to.
    pub recv_affinity: Option<usize>,
    /// Trials per backend.
    pub trials: usize,
    /// /proc/loadavg (1, 5, 15 minutes) before the trials.
    pub load_before: String,
    /// The same after.
    pub load_after: String,
}

/// Median, min and max over the trials.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Lowest.
    pub min: f64,
    /// Highest.
    pub max: f64,
}

/// One row of the table: a backend's rates over its trials, against its peer.
#[derive(Debug, Clone, Serialize)]
pub struct BackendLine {
    /// Backend.
    pub backend: String,
    /// Packets per second, wall clock (none if no trial ran).
    pub packets_per_s: Option<Spread>,
    /// Packets per CPU-second of the receiving thread(s).
    pub packets_per_cpu_s: Option<Spread>,
    /// What the rates are measured against: the spead2 peer on the same transport, or the
    /// 840k packets/s kernel-bypass target.
    pub versus: Option<String>,
    /// Median wall-clock rate / the peer's (or the target).
    pub versus_wall: Option<f64>,
    /// Median per-CPU-second rate / the peer's (or the target).
    pub versus_cpu: Option<f64>,
    /// The last trial's note.
    pub note: Option<String>,
    /// Why it did not run, or why a later trial failed.
    pub failure: Option<String>,
}

/// Report of `gpucbf bench recv`.
#[derive(Debug, Clone, Serialize)]
pub struct RecvReport {
    /// The feed (none for an `--only` child run).
    pub feed: Option<FeedInfo>,
    /// The table's rows, in order.
    pub backends: Vec<BackendLine>,
    /// Every trial of every backend.
    pub trials: Vec<RecvResult>,
}

/// Median, min and max of the trials' rates.
fn summary(rates: &mut [f64]) -> (f64, f64, f64) {
    rates.sort_by(f64::total_cmp);
    let n = rates.len();
    let med = if !n.is_multiple_of(2) {
        rates[n / 2]
    } else {
        (rates[n / 2 - 1] + rates[n / 2]) / 2.0
    };
    (med, rates[0], rates[n - 1])
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Runs every backend `--trials` times (interleaved) and prints each one's median rate,
/// spread, and ratio against its peer on the same transport.
pub fn run(args: &RecvBenchArgs) -> anyhow::Result<RecvReport> {
    if let Some(b) = &args.only {
        let r = run_only(args, b)?;
        return Ok(RecvReport {
            feed: None,
            backends: Vec::new(),
            trials: vec![r],
        });
    }
    let pcap = args
        .dir
        .join(format!("gpucbf-bench-recv-{}.pcap", std::process::id()));
    write_feed(&pcap, args.heaps, 7148)?;
    let load_before = loadavg();
    type Bench<'a> = Box<dyn Fn() -> anyhow::Result<RecvResult> + 'a>;
    let core = args.recv_affinity;
    let pcap = pcap.as_path();
    let spead2 = |t: &'static str, feed: Feed| -> Bench {
        Box::new(move || {
            if args.python.is_empty() {
                anyhow::bail!("skipped (--python \"\")")
            }
            bench_spead2(pcap, args, t, feed)
        })
    };
    let runs: Vec<(&str, Bench)> = vec![
        (
            "file",
            Box::new(|| bench_file(pcap, args.min_seconds, core)),
        ),
        ("spead2-pcap", spead2("pcap", Feed::Plain)),
        (
            "udp-loopback",
            Box::new(|| bench_udp(pcap, core, Feed::Gso)),
        ),
        ("spead2-udp", spead2("udp", Feed::Gso)),
        ("udp-nogso", Box::new(|| bench_udp(pcap, core, Feed::Plain))),
        ("spead2-udp-nogso", spead2("udp", Feed::Plain)),
        (
            "dpdk-net_pcap",
            Box::new(|| child(args, "dpdk-net_pcap", pcap)),
        ),
        (
            "dpdk-net_ring",
            Box::new(|| child(args, "dpdk-net_ring", pcap)),
        ),
    ];
    let mut trials: Vec<Vec<RecvResult>> = vec![Vec::new(); runs.len()];
    let mut failures: Vec<Option<String>> = vec![None; runs.len()];
    for _ in 0..args.trials.max(1) {
        for (k, (_, f)) in runs.iter().enumerate() {
            if failures[k].is_some() {
                continue;
            }
            match f() {
                Ok(r) => trials[k].push(r),
                Err(e) => failures[k] = Some(e.to_string()),
            }
        }
    }
    std::fs::remove_file(pcap).ok();
    let stats = |k: usize, cpu: bool| -> Option<(f64, f64, f64)> {
        let mut r: Vec<f64> = trials[k]
            .iter()
            .map(|r| {
                if cpu {
                    r.packets_per_cpu_second
                } else {
                    r.packets_per_second
                }
            })
            .collect();
        (!r.is_empty()).then(|| summary(&mut r))
    };
    let by_name = |n: &str, cpu: bool| {
        runs.iter()
            .position(|(b, _)| *b == n)
            .and_then(|k| stats(k, cpu))
    };
    let heap_bytes = (HEAP_SAMPLES * BITS as u64 / 8) as usize;
    let feed = FeedInfo {
        heaps_per_pol: args.heaps,
        heap_samples: HEAP_SAMPLES,
        sample_bits: BITS,
        packet_bytes: crate::engines::dsim::send::data_header_template(0, heap_bytes).len()
            + heap_bytes,
        chunk_samples: CHUNK_SAMPLES,
        recv_affinity: core,
        trials: args.trials.max(1),
        load_before,
        load_after: loadavg(),
    };
    println!(
        "feed: {} digitiser heaps per pol, {HEAP_SAMPLES} samples × {BITS} bits, one {}-byte packet per heap; chunks of {CHUNK_SAMPLES} samples; one receive thread per backend, {}; {} trials each, interleaved; load average {} before, {} after",
        feed.heaps_per_pol,
        feed.packet_bytes,
        match core {
            Some(c) => format!("pinned to core {c} (--recv-affinity)"),
            None => "not pinned".into(),
        },
        feed.trials,
        feed.load_before,
        feed.load_after
    );
    println!("UDP loopback: ours and spead2 drain the identical wire stream from the same sender: udp-loopback/spead2-udp a GSO feed (UDP_SEGMENT super-datagrams the kernel cuts into the same 1 datagram per heap; our socket takes them coalesced with UDP_GRO, spead2's gets them split), udp-nogso/spead2-udp-nogso one sendmmsg message per datagram (nothing to coalesce)");
    println!("packets/s: wall clock; packets/CPU-s: per CPU-second of the receiving thread(s), the rate per core whatever else the machine runs; median [min-max] over the trials");
    println!(
        "{:<14} {:>26} {:>26}  {:<26}  note (last trial)",
        "backend", "packets/s", "packets/CPU-s", "vs peer (wall, CPU)"
    );
    let mut all = Vec::new();
    let mut backends = Vec::new();
    for (k, (name, _)) in runs.iter().enumerate() {
        let (Some(w), Some(c)) = (stats(k, false), stats(k, true)) else {
            let why = failures[k].as_deref().unwrap_or("no trials");
            println!("{name:<14} not run: {why}");
            backends.push(BackendLine {
                backend: name.to_string(),
                packets_per_s: None,
                packets_per_cpu_s: None,
                versus: None,
                versus_wall: None,
                versus_cpu: None,
                note: None,
                failure: Some(why.to_string()),
            });
            continue;
        };
        let peer = match *name {
            "file" | "dpdk-net_pcap" => Some("spead2-pcap"),
            "udp-loopback" => Some("spead2-udp"),
            "udp-nogso" => Some("spead2-udp-nogso"),
            _ => None,
        };
        // (what against, wall-clock ratio, per-CPU-second ratio)
        let versus = match (*name, peer) {
            ("dpdk-net_ring", _) => Some(("840k target", w.0 / BYPASS_TARGET, c.0 / BYPASS_TARGET)),
            (_, Some(p)) => match (by_name(p, false), by_name(p, true)) {
                (Some(pw), Some(pc)) => Some((p, w.0 / pw.0, c.0 / pc.0)),
                _ => None,
            },
            _ => None,
        };
        let vs = match versus {
            Some((what, rw, rc)) => format!("{rw:.2}x, {rc:.2}x {what}"),
            None => "-".into(),
        };
        let fmt = |s: (f64, f64, f64)| format!("{:.0} [{:.0}-{:.0}]", s.0, s.1, s.2);
        let note = trials[k].last().map(|r| r.note.as_str()).unwrap_or("");
        println!("{name:<14} {:>26} {:>26}  {vs:<26}  {note}", fmt(w), fmt(c));
        if let Some(e) = &failures[k] {
            println!("{name:<14} a later trial failed: {e}");
        }
        let spread = |s: (f64, f64, f64)| Spread {
            median: s.0,
            min: s.1,
            max: s.2,
        };
        backends.push(BackendLine {
            backend: name.to_string(),
            packets_per_s: Some(spread(w)),
            packets_per_cpu_s: Some(spread(c)),
            versus: versus.map(|v| v.0.to_string()),
            versus_wall: versus.map(|v| v.1),
            versus_cpu: versus.map(|v| v.2),
            note: Some(note.to_string()),
            failure: failures[k].clone(),
        });
        all.extend(trials[k].iter().cloned());
    }
    Ok(RecvReport {
        feed: Some(feed),
        backends,
        trials: all,
    })
}
