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

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Parser};

use crate::chunk::placement::DigitiserPlacement;
use crate::chunk::{Chunk, ChunkAssembler};
use crate::net::recv::pcap::PcapFileSource;
use crate::net::recv::udp::UdpRecvSource;
use crate::net::recv::{PacketSource, Poll};
use crate::net::send::udp::UdpSink;
use crate::net::PacketSink;

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
    pub backend: String,
    /// Packets placed into chunks (data packets only).
    pub packets: u64,
    pub seconds: f64,
    pub packets_per_second: f64,
    /// CPU time the receiving thread(s) used over the same span (user + system).
    pub cpu_seconds: f64,
    /// Packets per CPU-second: the rate per core, whatever else the machine was doing.
    pub packets_per_cpu_second: f64,
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

/// CPU seconds (user + system) used so far by the calling thread (`thread`) or the whole
/// process.
fn cpu_seconds(thread: bool) -> f64 {
    let who = if thread {
        libc::RUSAGE_THREAD
    } else {
        libc::RUSAGE_SELF
    };
    // SAFETY: getrusage fills the zeroed struct.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut u);
        u
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

#[derive(Parser)]
struct DsimCli {
    #[command(flatten)]
    args: crate::engines::dsim::DsimArgs,
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
    crate::engines::dsim::run(&cfg)?;
    Ok(())
}

fn assembler() -> ChunkAssembler<DigitiserPlacement> {
    ChunkAssembler::new(
        DigitiserPlacement::new(HEAP_SAMPLES, BITS, CHUNK_SAMPLES).expect("valid placement"),
        2,
    )
}

/// Pins the calling thread to `core` until dropped (then restores its previous mask).
struct Pin(Option<libc::cpu_set_t>);

impl Pin {
    fn new(core: Option<usize>) -> anyhow::Result<Self> {
        let Some(core) = core else {
            return Ok(Pin(None));
        };
        // SAFETY: cpu_set_t is plain data; the calls get valid pointers and sizes.
        unsafe {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut old) != 0 {
                anyhow::bail!("sched_getaffinity: {}", std::io::Error::last_os_error());
            }
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(core, &mut set);
            if libc::sched_setaffinity(0, size, &set) != 0 {
                anyhow::bail!(
                    "pinning the receive thread to core {core}: {}",
                    std::io::Error::last_os_error()
                );
            }
            Ok(Pin(Some(old)))
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            // SAFETY: restores the mask read in `new`.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), old) };
        }
    }
}

/// Sums the presence of emitted chunks and hands their memory back.
fn settle(asm: &mut ChunkAssembler<DigitiserPlacement>, out: &mut Vec<Chunk>) -> u64 {
    let mut placed = 0;
    for c in out.drain(..) {
        placed += c.n_present() as u64;
        asm.recycle(c);
    }
    placed
}

/// Drains `src` into a chunk assembler. Returns (packets placed, seconds from the first
/// packet to the last, heaps present, CPU seconds of this thread over the drain). Ends at
/// End, or after `idle` without packets once some came.
fn drain(
    src: &mut dyn PacketSource,
    idle: Duration,
    give_up: Duration,
) -> anyhow::Result<(u64, f64, u64, f64)> {
    let cpu0 = cpu_seconds(true);
    let mut asm = assembler();
    let mut out = Vec::new();
    let mut placed = 0u64;
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = start;
    loop {
        let poll = src.recv_batch(&mut |p| {
            let _ = asm.push(p, &mut out);
        })?;
        match poll {
            Poll::Packets(_) => {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
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
        placed += settle(&mut asm, &mut out);
    }
    asm.flush(&mut out);
    placed += settle(&mut asm, &mut out);
    let secs = first.map(|f| (last - f).as_secs_f64()).unwrap_or(0.0);
    Ok((asm.stats.packets, secs, placed, cpu_seconds(true) - cpu0))
}

fn bench_file(pcap: &Path, min_seconds: f64, core: Option<usize>) -> anyhow::Result<RecvResult> {
    let _pin = Pin::new(core)?;
    let (mut packets, mut secs, mut placed, mut passes) = (0, 0.0, 0, 0);
    let cpu0 = cpu_seconds(true);
    while passes == 0 || secs < min_seconds {
        let mut src = PcapFileSource::open(pcap, Vec::new())?;
        let t = Instant::now();
        let (p, _, h, _) = drain(&mut src, Duration::from_secs(1), Duration::from_secs(1))?;
        secs += t.elapsed().as_secs_f64();
        packets += p;
        placed += h;
        passes += 1;
    }
    Ok(RecvResult::new(
        "file",
        packets,
        secs,
        cpu_seconds(true) - cpu0,
        format!("{passes} passes, {placed} heaps placed"),
    ))
}

/// The feed's UDP payloads, and a stop heap to end it.
fn payloads(pcap: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut v = Vec::new();
    let mut src = PcapFileSource::open(pcap, Vec::new())?;
    while let Poll::Packets(_) = src.recv_batch(&mut |p| v.push(p.to_vec()))? {}
    let stop = crate::spead::HeapBuilder::new(u64::MAX >> 17).stop();
    let parts = stop.packets(9000, true).map_err(anyhow::Error::msg)?;
    v.extend(parts.iter().map(|p| p.to_bytes()));
    Ok(v)
}

/// Sends every payload to `dst` with sendmmsg (from the calling thread), with UDP GSO
/// (runs of equal-size packets as super-datagrams, cut by the kernel into the same
/// datagrams) or without. Returns the number of GSO super-datagrams.
fn send_all(payloads: &[Vec<u8>], dst: SocketAddrV4, gso: bool) -> anyhow::Result<u64> {
    let mut sink = UdpSink::new(Ipv4Addr::UNSPECIFIED, 1, 8 << 20)?;
    sink.set_gso(gso);
    for group in payloads.chunks(64) {
        let parts: Vec<[&[u8]; 1]> = group.iter().map(|p| [p.as_slice()]).collect();
        let batch: Vec<(SocketAddrV4, &[&[u8]])> = parts.iter().map(|p| (dst, &p[..])).collect();
        sink.send_batch(&batch)?;
    }
    sink.flush()?;
    if gso && (sink.gso_refused > 0 || sink.gso_sends == 0) {
        anyhow::bail!(
            "the kernel refused UDP GSO on loopback ({} refusals)",
            sink.gso_refused
        );
    }
    Ok(sink.gso_sends)
}

/// The two loopback feeds: the same datagrams on the wire, sent with or without GSO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    Gso,
    Plain,
}

impl Feed {
    fn gso(self) -> bool {
        self == Feed::Gso
    }

    fn describe(self, gso_sends: u64) -> String {
        match self {
            Feed::Gso => format!("GSO feed ({gso_sends} super-datagrams)"),
            Feed::Plain => "plain sendmmsg feed".into(),
        }
    }
}

/// Socket receive buffer that holds the whole feed (kernel accounting is about 2× the
/// payload for 5 kB datagrams on loopback).
fn udp_buffer(payloads: &[Vec<u8>]) -> usize {
    payloads.iter().map(|p| 2 * p.len() + 1024).sum::<usize>() + (16 << 20)
}

fn bench_udp(pcap: &Path, core: Option<usize>, feed: Feed) -> anyhow::Result<RecvResult> {
    let payloads = payloads(pcap)?;
    let sent = payloads.len() as u64 - 1;
    let probe = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, probe.local_addr()?.port());
    drop(probe);
    let mut rx = UdpRecvSource::new(&[dst], Ipv4Addr::UNSPECIFIED, 4 << 20)?;
    let buffer = rx.force_recv_buffer(udp_buffer(&payloads))?;
    let gso_sends = send_all(&payloads, dst, feed.gso())?;
    let _pin = Pin::new(core)?;
    let (packets, secs, placed, cpu) =
        drain(&mut rx, Duration::from_millis(300), Duration::from_secs(5))?;
    let st = &rx.stats;
    Ok(RecvResult::new(
        match feed {
            Feed::Gso => "udp-loopback",
            Feed::Plain => "udp-nogso",
        },
        packets,
        secs,
        cpu,
        format!(
            "{sent} sent ({}) into a {} MB socket buffer first, then drained; GRO {}: {} buffers ({} coalesced) for {} datagrams; {} lost; {placed} heaps placed",
            feed.describe(gso_sends),
            buffer >> 20,
            if rx.gro() { "on" } else { "off" },
            st.buffers,
            st.coalesced,
            st.packets,
            sent.saturating_sub(packets)
        ),
    ))
}

#[cfg(feature = "dpdk")]
/// The EAL arguments of a DPDK trial: the user's, the receive core, then `vdev`.
fn eal_for(base: &str, core: Option<usize>, vdev: &str) -> String {
    format!("{base} -l {} --vdev {vdev}", core.unwrap_or(0))
}

#[cfg(feature = "dpdk")]
fn bench_dpdk_pcap(pcap: &Path, eal: &str, core: Option<usize>) -> anyhow::Result<RecvResult> {
    let eal = eal_for(eal, core, &format!("net_pcap0,rx_pcap={}", pcap.display()));
    let mut src = crate::net::recv::dpdk::DpdkSource::new(&eal, Vec::new())?;
    src.set_end_after_idle(None);
    let (packets, secs, placed, cpu) = drain(
        &mut src,
        Duration::from_millis(300),
        Duration::from_secs(10),
    )?;
    let st = src.port_stats().clone();
    Ok(RecvResult::new(
        "dpdk-net_pcap",
        packets,
        secs,
        cpu,
        format!(
            "1 pass, EAL {eal:?}; port ipackets {} imissed {} rx_nombuf {}; {placed} heaps placed",
            st.port_ipackets, st.port_imissed, st.port_rx_nombuf
        ),
    ))
}

/// The feed's first `n` datagrams as Ethernet frames.
#[cfg(feature = "dpdk")]
fn frames(pcap: &Path, n: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut src = crate::net::recv::pcap::PcapSource::open(pcap)?;
    let mut v = Vec::new();
    while v.len() < n {
        let Some(d) = src.next_datagram()? else { break };
        let mut f = Vec::with_capacity(d.payload.len() + 42);
        etherparse::PacketBuilder::ethernet2(
            [2, 0, 0, 0, 0, 1],
            crate::net::frame::dest_mac(*d.dst.ip()),
        )
        .ipv4(d.src.ip().octets(), d.dst.ip().octets(), 4)
        .udp(d.src.port(), d.dst.port())
        .write(&mut f, &d.payload)?;
        v.push(f);
    }
    Ok(v)
}

#[cfg(feature = "dpdk")]
fn bench_dpdk_ring(
    pcap: &Path,
    eal: &str,
    core: Option<usize>,
    target: u64,
) -> anyhow::Result<RecvResult> {
    use crate::net::recv::dpdk::{DpdkSource, RingReplay};
    // net_ring's ring holds 1023 frames: both pols of 511 timestamps (an even count keeps
    // every timestamp whole).
    let frames = frames(pcap, 1022)?;
    let eal = eal_for(eal, core, "net_ring0");
    let mut src = DpdkSource::new(&eal, Vec::new())?;
    let mut replay = RingReplay::new(&frames, crate::spead::ids::TIMESTAMP, HEAP_SAMPLES)?;
    let primed = src.inject(&frames)?;
    if primed != frames.len() {
        anyhow::bail!("the net_ring port took {primed} of {} frames", frames.len());
    }
    let mut asm = assembler();
    let mut out = Vec::new();
    let mut placed = 0u64;
    let mut run = |asm: &mut ChunkAssembler<DigitiserPlacement>, placed: &mut u64, until: u64| {
        while asm.stats.packets < until {
            src.recv_batch_replay(
                &mut |p| {
                    let _ = asm.push(p, &mut out);
                },
                &mut replay,
            )?;
            *placed += settle(asm, &mut out);
        }
        anyhow::Ok(())
    };
    // Warm-up: every chunk buffer allocated and faulted in, caches warm.
    run(&mut asm, &mut placed, 8 * primed as u64)?;
    let (p0, h0) = (asm.stats.packets, placed);
    let (t, cpu0) = (Instant::now(), cpu_seconds(true));
    run(&mut asm, &mut placed, p0 + target)?;
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds(true) - cpu0;
    let packets = asm.stats.packets - p0;
    let heaps = placed - h0;
    let rejected: u64 = asm.stats.rejects.iter().sum();
    Ok(RecvResult::new(
        "dpdk-net_ring",
        packets,
        secs,
        cpu,
        format!(
            "{primed} frames looped through net_ring (timestamps moved on {} per pass), EAL {eal:?}; {heaps} heaps in emitted chunks, {rejected} rejected, {} missing",
            replay.ts_step(),
            asm.stats.missing_heaps
        ),
    ))
}

/// One DPDK trial in a child process (the EAL starts once per process).
fn child(args: &RecvBenchArgs, backend: &str, pcap: &Path) -> anyhow::Result<RecvResult> {
    if !cfg!(feature = "dpdk") {
        anyhow::bail!("not built (cargo feature `dpdk`)");
    }
    let exe = std::env::current_exe()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["bench", "recv", "--only", backend, "--feed"])
        .arg(pcap)
        .args(["--bypass-packets", &args.bypass_packets.to_string()])
        .args(["--dpdk-eal", &args.dpdk_eal]);
    if let Some(c) = args.recv_affinity {
        cmd.args(["--recv-affinity", &c.to_string()]);
    }
    let out = cmd.output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().rev().find(|l| l.starts_with('{')) {
        Some(l) if out.status.success() => Ok(serde_json::from_str(l)?),
        _ => anyhow::bail!(
            "{backend} child failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ")
        ),
    }
}

fn run_only(args: &RecvBenchArgs, backend: &str) -> anyhow::Result<()> {
    let feed = args
        .feed
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("--only needs --feed"))?;
    let r = match backend {
        #[cfg(feature = "dpdk")]
        "dpdk-net_pcap" => bench_dpdk_pcap(feed, &args.dpdk_eal, args.recv_affinity)?,
        #[cfg(feature = "dpdk")]
        "dpdk-net_ring" => bench_dpdk_ring(
            feed,
            &args.dpdk_eal,
            args.recv_affinity,
            args.bypass_packets,
        )?,
        "file" => bench_file(feed, args.min_seconds, args.recv_affinity)?,
        "udp-loopback" => bench_udp(feed, args.recv_affinity, Feed::Gso)?,
        "udp-nogso" => bench_udp(feed, args.recv_affinity, Feed::Plain)?,
        other => anyhow::bail!("unknown or unbuilt backend {other}"),
    };
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

/// File name of the spead2 peer script.
const PEER_SCRIPT: &str = "spead2_recv_bench.py";

/// Where the spead2 peer script is looked for, in order: `given` (`--peer-script`) alone
/// when there is one; otherwise next to the executable `exe`, then in the source tree
/// this binary was built from (absent in a container image).
fn peer_script_candidates(given: Option<&Path>, exe: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = given {
        return vec![p.to_path_buf()];
    }
    let mut c = Vec::new();
    if let Some(dir) = exe.and_then(Path::parent) {
        c.push(dir.join(PEER_SCRIPT));
    }
    c.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tools")
            .join(PEER_SCRIPT),
    );
    c
}

/// The first of [`peer_script_candidates`] that is a file, or an error naming every path
/// tried.
fn find_peer_script(given: Option<&Path>, exe: Option<&Path>) -> anyhow::Result<PathBuf> {
    let tried = peer_script_candidates(given, exe);
    if let Some(p) = tried.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let list = tried
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    anyhow::bail!(
        "the spead2 peer script {PEER_SCRIPT} is not at {list}: give its path with --peer-script \
         (it is tools/{PEER_SCRIPT} in the gpucbf sources)"
    )
}

fn bench_spead2(
    pcap: &Path,
    args: &RecvBenchArgs,
    transport: &str,
    feed: Feed,
) -> anyhow::Result<RecvResult> {
    use std::io::{BufRead, Write};
    let exe = std::env::current_exe().ok();
    let script = find_peer_script(args.peer_script.as_deref(), exe.as_deref())?;
    let mut cmd = std::process::Command::new(&args.python);
    cmd.arg(&script).arg("--pcap").arg(pcap).args([
        "--heap-samples",
        &HEAP_SAMPLES.to_string(),
        "--bits",
        &BITS.to_string(),
        "--chunk-samples",
        &CHUNK_SAMPLES.to_string(),
        "--min-seconds",
        &args.min_seconds.to_string(),
        "--transport",
        transport,
    ]);
    if let Some(c) = args.recv_affinity {
        cmd.args(["--affinity", &c.to_string()]);
    }
    let payloads = if transport == "udp" {
        let p = payloads(pcap)?;
        cmd.args(["--buffer", &udp_buffer(&p).to_string()]);
        Some(p)
    } else {
        None
    };
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut proc = cmd
        .spawn()
        .map_err(|e| anyhow::anyhow!("running {} {}: {e}", args.python, script.display()))?;
    let mut stdout = std::io::BufReader::new(proc.stdout.take().expect("piped"));
    let mut stdin = proc.stdin.take().expect("piped");
    let mut fed = String::new();
    if let Some(p) = &payloads {
        // The script binds its socket and prints the port; we fill it, then say "go".
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let port: u16 = line
            .trim()
            .strip_prefix("port ")
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("spead2 script said {line:?}, not its port"))?;
        let gso_sends = send_all(p, SocketAddrV4::new(Ipv4Addr::LOCALHOST, port), feed.gso())?;
        fed = format!(", {}", feed.describe(gso_sends));
        writeln!(stdin, "go")?;
    }
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest)?;
    let out = proc.wait_with_output()?;
    if !out.status.success() {
        anyhow::bail!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let line = rest
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| anyhow::anyhow!("no JSON from {}", script.display()))?;
    let v: serde_json::Value = serde_json::from_str(line)?;
    let packets = v["packets"].as_u64().unwrap_or(0);
    let secs = v["seconds"].as_f64().unwrap_or(0.0);
    let name = match (transport, feed) {
        ("udp", Feed::Plain) => "spead2-udp-nogso".to_string(),
        _ => format!("spead2-{transport}"),
    };
    Ok(RecvResult::new(
        &name,
        packets,
        secs,
        v["cpu_seconds"].as_f64().unwrap_or(0.0),
        format!(
            "spead2 {} {}, {} passes, {} heaps placed{fed}",
            v["spead2_version"].as_str().unwrap_or("?"),
            v["mode"].as_str().unwrap_or("?"),
            v["passes"],
            v["heaps"]
        ),
    ))
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
pub fn run(args: &RecvBenchArgs) -> anyhow::Result<Vec<RecvResult>> {
    if let Some(b) = &args.only {
        run_only(args, b)?;
        return Ok(Vec::new());
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
    println!(
        "feed: {} digitiser heaps per pol, {HEAP_SAMPLES} samples × {BITS} bits, one {}-byte packet per heap; chunks of {CHUNK_SAMPLES} samples; one receive thread per backend, {}; {} trials each, interleaved; load average {load_before} before, {} after",
        args.heaps,
        crate::engines::dsim::send::data_header_template(0, (HEAP_SAMPLES * BITS as u64 / 8) as usize).len()
            + (HEAP_SAMPLES * BITS as u64 / 8) as usize,
        match core {
            Some(c) => format!("pinned to core {c} (--recv-affinity)"),
            None => "not pinned".into(),
        },
        args.trials.max(1),
        loadavg()
    );
    println!("UDP loopback: ours and spead2 drain the identical wire stream from the same sender: udp-loopback/spead2-udp a GSO feed (UDP_SEGMENT super-datagrams the kernel cuts into the same 1 datagram per heap; our socket takes them coalesced with UDP_GRO, spead2's gets them split), udp-nogso/spead2-udp-nogso one sendmmsg message per datagram (nothing to coalesce)");
    println!("packets/s: wall clock; packets/CPU-s: per CPU-second of the receiving thread(s), the rate per core whatever else the machine runs; median [min-max] over the trials");
    println!(
        "{:<14} {:>26} {:>26}  {:<26}  note (last trial)",
        "backend", "packets/s", "packets/CPU-s", "vs peer (wall, CPU)"
    );
    let mut all = Vec::new();
    for (k, (name, _)) in runs.iter().enumerate() {
        let (Some(w), Some(c)) = (stats(k, false), stats(k, true)) else {
            println!(
                "{name:<14} not run: {}",
                failures[k].as_deref().unwrap_or("no trials")
            );
            continue;
        };
        let peer = match *name {
            "file" | "dpdk-net_pcap" => Some("spead2-pcap"),
            "udp-loopback" => Some("spead2-udp"),
            "udp-nogso" => Some("spead2-udp-nogso"),
            _ => None,
        };
        let vs = match (*name, peer) {
            ("dpdk-net_ring", _) => format!(
                "{:.2}x, {:.2}x 840k target",
                w.0 / BYPASS_TARGET,
                c.0 / BYPASS_TARGET
            ),
            (_, Some(p)) => match (by_name(p, false), by_name(p, true)) {
                (Some(pw), Some(pc)) => format!("{:.2}x, {:.2}x {p}", w.0 / pw.0, c.0 / pc.0),
                _ => "-".into(),
            },
            _ => "-".into(),
        };
        let fmt = |s: (f64, f64, f64)| format!("{:.0} [{:.0}-{:.0}]", s.0, s.1, s.2);
        let note = trials[k].last().map(|r| r.note.as_str()).unwrap_or("");
        println!("{name:<14} {:>26} {:>26}  {vs:<26}  {note}", fmt(w), fmt(c));
        if let Some(e) = &failures[k] {
            println!("{name:<14} a later trial failed: {e}");
        }
        all.extend(trials[k].iter().cloned());
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use crate::bench::recv::*;

    /// The peer script: `--peer-script` alone when given (an error naming it when it is not
    /// there), else next to the executable before the source tree; an error names every
    /// path tried.
    #[test]
    fn peer_script_is_found_at_run_time() {
        let dir = std::env::temp_dir().join(format!("gpucbf-peer-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let exe = dir.join("bin/gpucbf");
        let beside = dir.join("bin").join(PEER_SCRIPT);
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tools")
            .join(PEER_SCRIPT);
        assert!(source.is_file(), "the source tree has {}", source.display());
        // Nothing beside the executable: the source tree's.
        assert_eq!(find_peer_script(None, Some(&exe)).unwrap(), source);
        std::fs::write(&beside, "").unwrap();
        assert_eq!(find_peer_script(None, Some(&exe)).unwrap(), beside);
        // --peer-script wins, and is not replaced by another when missing.
        let given = dir.join("elsewhere.py");
        let e = find_peer_script(Some(&given), Some(&exe))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&given.display().to_string()) && e.contains("--peer-script"),
            "{e}"
        );
        assert!(!e.contains(&beside.display().to_string()), "{e}");
        std::fs::write(&given, "").unwrap();
        assert_eq!(find_peer_script(Some(&given), Some(&exe)).unwrap(), given);
        // Every default place tried is named.
        assert_eq!(
            peer_script_candidates(None, Some(&exe)),
            vec![beside.clone(), source.clone()]
        );
        assert_eq!(peer_script_candidates(None, None), vec![source]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
