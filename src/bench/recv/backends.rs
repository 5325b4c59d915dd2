//! gpucbf's receive backends, one trial each: the pcap file source, UDP loopback (with and
//! without GSO), and DPDK (net_pcap, net_ring) in a child process.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

use super::feed::{payloads, send_all, udp_buffer, Feed};
use super::{RecvBenchArgs, RecvResult, BITS, CHUNK_SAMPLES, HEAP_SAMPLES};
use crate::chunk::placement::DigitiserPlacement;
use crate::chunk::{Chunk, ChunkAssembler};
use crate::net::affinity::PinGuard;
use crate::net::{
    recv::pcap::PcapFileSource,
    recv::udp::UdpRecvSource,
    recv::{PacketSource, Poll},
};
use crate::telemetry::cpu::thread_cpu_seconds;

fn assembler() -> ChunkAssembler<DigitiserPlacement> {
    ChunkAssembler::new(
        DigitiserPlacement::new(HEAP_SAMPLES, BITS, CHUNK_SAMPLES).expect("valid placement"),
        2,
    )
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
    let cpu0 = thread_cpu_seconds();
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
    Ok((asm.stats.packets, secs, placed, thread_cpu_seconds() - cpu0))
}

pub(super) fn bench_file(
    pcap: &Path,
    min_seconds: f64,
    core: Option<usize>,
) -> anyhow::Result<RecvResult> {
    let _pin = PinGuard::new(core)?;
    let (mut packets, mut secs, mut placed, mut passes) = (0, 0.0, 0, 0);
    let cpu0 = thread_cpu_seconds();
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
        thread_cpu_seconds() - cpu0,
        format!("{passes} passes, {placed} heaps placed"),
    ))
}

pub(super) fn bench_udp(
    pcap: &Path,
    core: Option<usize>,
    feed: Feed,
) -> anyhow::Result<RecvResult> {
    let payloads = payloads(pcap)?;
    let sent = payloads.len() as u64 - 1;
    let probe = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, probe.local_addr()?.port());
    drop(probe);
    let mut rx = UdpRecvSource::new(&[dst], Ipv4Addr::UNSPECIFIED, 4 << 20)?;
    let buffer = rx.force_recv_buffer(udp_buffer(&payloads))?;
    let gso_sends = send_all(&payloads, dst, feed.gso())?;
    let _pin = PinGuard::new(core)?;
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
    let (t, cpu0) = (Instant::now(), thread_cpu_seconds());
    run(&mut asm, &mut placed, p0 + target)?;
    let secs = t.elapsed().as_secs_f64();
    let cpu = thread_cpu_seconds() - cpu0;
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
pub(super) fn child(
    args: &RecvBenchArgs,
    backend: &str,
    pcap: &Path,
) -> anyhow::Result<RecvResult> {
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

pub(super) fn run_only(args: &RecvBenchArgs, backend: &str) -> anyhow::Result<RecvResult> {
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
    Ok(r)
}
