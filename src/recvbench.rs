//! `gpucbf bench recv`: receive throughput (packets per second on one receive thread) of
//! each packet source on the same digitiser feed, all through the F-engine's chunk
//! assembler, next to spead2's ChunkStream on the same file (tools/spead2_recv_bench.py).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Parser};

use crate::chunk::placement::DigitiserPlacement;
use crate::chunk::ChunkAssembler;
use crate::net::source::{PacketSource, PcapFileSource, Poll, UdpRecvSource};
use crate::net::udp::UdpSink;
use crate::net::PacketSink;

const HEAP_SAMPLES: u64 = 4096;
const BITS: u32 = 10;
const CHUNK_SAMPLES: u64 = 1 << 20;

/// Options of `gpucbf bench recv`.
#[derive(Debug, Clone, Args)]
pub struct RecvBenchArgs {
    /// Digitiser heaps per polarisation in the feed (one packet each).
    #[arg(long, default_value_t = 40000)]
    pub heaps: u64,
    /// Repeat file passes (file source, spead2) until this many seconds.
    #[arg(long, default_value_t = 2.0)]
    pub min_seconds: f64,
    /// Python with spead2 and numpy, for the spead2 comparison ("" to skip it).
    #[arg(long, default_value = "/opt/gpucbf-venv/bin/python")]
    pub python: String,
    /// Directory for the feed (a pcap file, deleted afterwards).
    #[arg(long, default_value = "/tmp")]
    pub dir: PathBuf,
    /// Extra EAL arguments for the DPDK backend (feature `dpdk`).
    #[arg(
        long,
        default_value = "--no-huge --no-pci -m 1024 -l 0",
        allow_hyphen_values = true
    )]
    pub dpdk_eal: String,
}

/// One backend's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecvResult {
    pub backend: String,
    pub packets: u64,
    pub seconds: f64,
    pub packets_per_second: f64,
    pub note: String,
}

impl RecvResult {
    fn new(backend: &str, packets: u64, seconds: f64, note: String) -> Self {
        RecvResult {
            backend: backend.into(),
            packets,
            seconds,
            packets_per_second: if seconds > 0.0 {
                packets as f64 / seconds
            } else {
                0.0
            },
            note,
        }
    }
}

#[derive(Parser)]
struct DsimCli {
    #[command(flatten)]
    args: crate::dsim::DsimArgs,
}

/// Writes the digitiser feed (two pols to 127.0.0.1:`port`) with the dsim library.
pub fn write_feed(path: &Path, heaps: u64, port: u16) -> anyhow::Result<()> {
    let dest = format!("127.0.0.1:{port}");
    let cli = DsimCli::try_parse_from([
        "dsim",
        "--adc-sample-rate",
        "1712e6",
        "--heaps",
        &heaps.to_string(),
        "--period",
        &(1u64 << 22).to_string(),
        "--dither-seed",
        "1",
        "--rate-factor",
        "0",
        "--pcap",
        path.to_str()
            .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path"))?,
        &dest,
        &dest,
    ])?;
    let cfg = cli.args.validate().map_err(anyhow::Error::msg)?;
    crate::dsim::run(&cfg)?;
    Ok(())
}

fn assembler() -> ChunkAssembler<DigitiserPlacement> {
    ChunkAssembler::new(
        DigitiserPlacement::new(HEAP_SAMPLES, BITS, CHUNK_SAMPLES).expect("valid placement"),
        2,
    )
}

/// Drains `src` into a chunk assembler. Returns (packets, seconds from the first packet to
/// the last, heaps placed). Ends at End, or after `idle` without packets once some came.
fn drain(
    src: &mut dyn PacketSource,
    idle: Duration,
    give_up: Duration,
) -> anyhow::Result<(u64, f64, u64)> {
    let mut asm = assembler();
    let mut out = Vec::new();
    let mut packets = 0u64;
    let mut placed = 0u64;
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = start;
    loop {
        let poll = src.recv_batch(&mut |p| {
            let _ = asm.push(p, &mut out);
        })?;
        match poll {
            Poll::Packets(n) => {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                packets += n as u64;
            }
            Poll::Idle => {
                if first.is_some() && last.elapsed() >= idle {
                    break;
                }
                if first.is_none() && start.elapsed() >= give_up {
                    break;
                }
            }
            Poll::End => break,
        }
        for c in out.drain(..) {
            placed += c.n_present() as u64;
            asm.recycle(c);
        }
    }
    asm.flush(&mut out);
    placed += out.iter().map(|c| c.n_present() as u64).sum::<u64>();
    let secs = first.map(|f| (last - f).as_secs_f64()).unwrap_or(0.0);
    Ok((packets, secs, placed))
}

fn bench_file(pcap: &Path, min_seconds: f64) -> anyhow::Result<RecvResult> {
    let (mut packets, mut secs, mut placed, mut passes) = (0, 0.0, 0, 0);
    while passes == 0 || secs < min_seconds {
        let mut src = PcapFileSource::open(pcap, Vec::new())?;
        let t = Instant::now();
        let (p, _, h) = drain(&mut src, Duration::from_secs(1), Duration::from_secs(1))?;
        secs += t.elapsed().as_secs_f64();
        packets += p;
        placed += h;
        passes += 1;
    }
    Ok(RecvResult::new(
        "file",
        packets,
        secs,
        format!("{passes} passes, {placed} heaps placed"),
    ))
}

fn bench_udp(pcap: &Path, port: u16) -> anyhow::Result<RecvResult> {
    let mut payloads = Vec::new();
    let mut src = PcapFileSource::open(pcap, Vec::new())?;
    while let Poll::Packets(_) = src.recv_batch(&mut |p| payloads.push(p.to_vec()))? {}
    let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let mut rx = UdpRecvSource::new(&[dst], Ipv4Addr::UNSPECIFIED, 64 << 20)?;
    let sent = payloads.len() as u64;
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let mut sink = UdpSink::new(Ipv4Addr::UNSPECIFIED, 1, 8 << 20)?;
        for group in payloads.chunks(64) {
            let parts: Vec<[&[u8]; 1]> = group.iter().map(|p| [p.as_slice()]).collect();
            let batch: Vec<(SocketAddrV4, &[&[u8]])> =
                parts.iter().map(|p| (dst, &p[..])).collect();
            sink.send_batch(&batch)?;
        }
        sink.flush()
    });
    let (packets, secs, placed) =
        drain(&mut rx, Duration::from_millis(300), Duration::from_secs(5))?;
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("UDP sender panicked"))??;
    Ok(RecvResult::new(
        "udp-loopback",
        packets,
        secs,
        format!(
            "1 pass; {sent} sent by a sendmmsg thread on the same host, {} lost; {placed} heaps placed",
            sent.saturating_sub(packets)
        ),
    ))
}

#[cfg(feature = "dpdk")]
fn bench_dpdk(pcap: &Path, eal: &str) -> anyhow::Result<RecvResult> {
    let eal = format!("{eal} --vdev net_pcap0,rx_pcap={}", pcap.display());
    let mut src = crate::net::dpdk::DpdkSource::new(&eal, Vec::new())?;
    src.set_end_after_idle(None);
    let (packets, secs, placed) = drain(
        &mut src,
        Duration::from_millis(300),
        Duration::from_secs(10),
    )?;
    let st = src.port_stats().clone();
    Ok(RecvResult::new(
        "dpdk-net_pcap",
        packets,
        secs,
        format!(
            "1 pass, EAL {eal:?}; port ipackets {} imissed {} rx_nombuf {}; {placed} heaps placed",
            st.port_ipackets, st.port_imissed, st.port_rx_nombuf
        ),
    ))
}

#[cfg(not(feature = "dpdk"))]
fn bench_dpdk(_pcap: &Path, _eal: &str) -> anyhow::Result<RecvResult> {
    anyhow::bail!("not built (cargo feature `dpdk`)")
}

fn bench_spead2(pcap: &Path, python: &str, min_seconds: f64) -> anyhow::Result<RecvResult> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/spead2_recv_bench.py");
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg("--pcap")
        .arg(pcap)
        .args([
            "--heap-samples",
            &HEAP_SAMPLES.to_string(),
            "--bits",
            &BITS.to_string(),
            "--chunk-samples",
            &CHUNK_SAMPLES.to_string(),
            "--min-seconds",
            &min_seconds.to_string(),
        ])
        .output()
        .map_err(|e| anyhow::anyhow!("running {python} {}: {e}", script.display()))?;
    if !out.status.success() {
        anyhow::bail!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(out.stdout.trim_ascii())?;
    let packets = v["packets"].as_u64().unwrap_or(0);
    let secs = v["seconds"].as_f64().unwrap_or(0.0);
    Ok(RecvResult::new(
        "spead2",
        packets,
        secs,
        format!(
            "spead2 {} {}, {} passes, {} heaps placed",
            v["spead2_version"].as_str().unwrap_or("?"),
            v["mode"].as_str().unwrap_or("?"),
            v["passes"],
            v["heaps"]
        ),
    ))
}

/// Runs every backend and prints a table with each one's rate relative to spead2.
pub fn run(args: &RecvBenchArgs) -> anyhow::Result<Vec<RecvResult>> {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let pcap = args
        .dir
        .join(format!("gpucbf-bench-recv-{}.pcap", std::process::id()));
    write_feed(&pcap, args.heaps, port)?;
    let mut results = Vec::new();
    let mut failures = Vec::new();
    type Bench<'a> = Box<dyn Fn() -> anyhow::Result<RecvResult> + 'a>;
    let runs: [(&str, Bench); 4] = [
        ("file", Box::new(|| bench_file(&pcap, args.min_seconds))),
        ("udp-loopback", Box::new(|| bench_udp(&pcap, port))),
        (
            "dpdk-net_pcap",
            Box::new(|| bench_dpdk(&pcap, &args.dpdk_eal)),
        ),
        (
            "spead2",
            Box::new(|| {
                if args.python.is_empty() {
                    anyhow::bail!("skipped (--python \"\")")
                }
                bench_spead2(&pcap, &args.python, args.min_seconds)
            }),
        ),
    ];
    for (name, f) in runs.iter() {
        match f() {
            Ok(r) => results.push(r),
            Err(e) => failures.push((name.to_string(), e.to_string())),
        }
    }
    std::fs::remove_file(&pcap).ok();
    let spead2 = results
        .iter()
        .find(|r| r.backend == "spead2")
        .map(|r| r.packets_per_second);
    println!(
        "feed: {} digitiser heaps per pol, {HEAP_SAMPLES} samples × {BITS} bits, one {}-byte packet per heap; chunks of {CHUNK_SAMPLES} samples; one receive thread per backend",
        args.heaps,
        crate::dsim::send::data_header_template(0, (HEAP_SAMPLES * BITS as u64 / 8) as usize).len()
            + (HEAP_SAMPLES * BITS as u64 / 8) as usize
    );
    println!(
        "{:<14} {:>10} {:>8} {:>12} {:>10}  note",
        "backend", "packets", "seconds", "packets/s", "vs spead2"
    );
    for r in &results {
        let ratio = spead2
            .filter(|s| *s > 0.0)
            .map(|s| format!("{:.2}x", r.packets_per_second / s))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<14} {:>10} {:>8.3} {:>12.0} {:>10}  {}",
            r.backend, r.packets, r.seconds, r.packets_per_second, ratio, r.note
        );
    }
    for (name, e) in &failures {
        println!("{name:<14} not run: {e}");
    }
    Ok(results)
}
