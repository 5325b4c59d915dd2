//! The engines' receive side: opening the input (`SRC`: a pcap file or endpoints, through
//! kernel UDP, DPDK or ibverbs) and the receive thread that places packets into chunks.

use std::net::Ipv4Addr;
use std::path::Path;

use crate::chunk::{Chunk, ChunkAssembler, ChunkQueues, ChunkStats, Placement, RecvMonitor};
use crate::net::recv::pcap::PcapFileSource;
use crate::net::recv::udp::UdpRecvSource;
use crate::net::recv::{PacketSource, Poll};

/// How an engine receives (`--recv-interface`, `--recv-dpdk`, `--recv-ibv`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RecvOptions<'a> {
    /// Local interface address (multicast joins; for `--recv-ibv` the RDMA port).
    pub interface: Option<Ipv4Addr>,
    /// DPDK EAL arguments (`--recv-dpdk`).
    pub dpdk: Option<&'a str>,
    /// Raw-packet ibverbs receive (`--recv-ibv`).
    pub ibv: bool,
}

/// Opens the input: an existing file is a pcap replay, anything else an endpoint list.
/// With `dpdk` (EAL arguments, `--recv-dpdk`) the packets come through DPDK instead, and
/// `src` lists the endpoints to keep (`all` or an empty string: every UDP datagram).
pub fn open_source(
    src: &str,
    interface: Ipv4Addr,
    dpdk: Option<&str>,
) -> anyhow::Result<Box<dyn PacketSource>> {
    open_source_with(
        src,
        &RecvOptions {
            interface: Some(interface),
            dpdk,
            ibv: false,
        },
    )
}

/// [`open_source`] with every receive option; `--recv-ibv` steers the endpoints in `src`
/// to a raw-packet queue pair on the RDMA port behind the interface.
pub fn open_source_with(
    src: &str,
    opts: &RecvOptions<'_>,
) -> anyhow::Result<Box<dyn PacketSource>> {
    let interface = opts.interface.unwrap_or(Ipv4Addr::UNSPECIFIED);
    if opts.dpdk.is_some() && opts.ibv {
        anyhow::bail!("--recv-dpdk and --recv-ibv are alternatives: give one");
    }
    if let Some(eal) = opts.dpdk {
        let eps = if src.is_empty() || src == "all" {
            Vec::new()
        } else {
            crate::net::parse_endpoints(src)
                .map_err(|e| anyhow::anyhow!("--recv-dpdk: source {src:?} is not endpoints: {e}"))?
        };
        return open_dpdk(eal, eps);
    }
    if opts.ibv {
        let eps = crate::net::parse_endpoints(src)
            .map_err(|e| anyhow::anyhow!("--recv-ibv: source {src:?} is not endpoints: {e}"))?;
        return open_ibv(eps, interface);
    }
    if Path::new(src).is_file() {
        return Ok(Box::new(PcapFileSource::open(Path::new(src), Vec::new())?));
    }
    let eps = crate::net::parse_endpoints(src)
        .map_err(|e| anyhow::anyhow!("source {src:?} is neither a file nor endpoints: {e}"))?;
    Ok(Box::new(UdpRecvSource::new(&eps, interface, 128 << 20)?))
}

#[cfg(feature = "ibverbs")]
fn open_ibv(
    eps: Vec<std::net::SocketAddrV4>,
    interface: Ipv4Addr,
) -> anyhow::Result<Box<dyn PacketSource>> {
    let s = crate::net::recv::ibv::IbvRecvSource::open(eps, interface)
        .map_err(|e| anyhow::anyhow!("--recv-ibv: {e}"))?;
    Ok(Box::new(s))
}

#[cfg(not(feature = "ibverbs"))]
fn open_ibv(
    _eps: Vec<std::net::SocketAddrV4>,
    _interface: Ipv4Addr,
) -> anyhow::Result<Box<dyn PacketSource>> {
    anyhow::bail!(
        "--recv-ibv: this gpucbf binary was built without ibverbs support (rebuild with `cargo build --features ibverbs`)"
    )
}

#[cfg(feature = "dpdk")]
fn open_dpdk(eal: &str, eps: Vec<std::net::SocketAddrV4>) -> anyhow::Result<Box<dyn PacketSource>> {
    Ok(Box::new(crate::net::recv::dpdk::DpdkSource::new(eal, eps)?))
}

#[cfg(not(feature = "dpdk"))]
fn open_dpdk(
    _eal: &str,
    _eps: Vec<std::net::SocketAddrV4>,
) -> anyhow::Result<Box<dyn PacketSource>> {
    anyhow::bail!(
        "--recv-dpdk: this gpucbf binary was built without DPDK support (rebuild with `cargo build --features dpdk`; needs libdpdk-dev)"
    )
}

/// Runs the receive thread: packets → chunks → `tx`, until end of input or shutdown.
pub fn spawn_receiver<P: Placement + 'static>(
    src: Box<dyn PacketSource>,
    placement: P,
    tx: crossbeam_channel::Sender<Chunk>,
    recycle: crossbeam_channel::Receiver<Chunk>,
) -> std::thread::JoinHandle<anyhow::Result<ChunkStats>> {
    spawn_receiver_monitored(src, placement, tx, recycle, Box::new(|_, _| {}))
}

/// [`spawn_receiver`], reporting its counters to `monitor` as it goes.
pub fn spawn_receiver_monitored<P: Placement + 'static>(
    mut src: Box<dyn PacketSource>,
    placement: P,
    tx: crossbeam_channel::Sender<Chunk>,
    recycle: crossbeam_channel::Receiver<Chunk>,
    mut monitor: RecvMonitor,
) -> std::thread::JoinHandle<anyhow::Result<ChunkStats>> {
    std::thread::Builder::new()
        .name("recv".into())
        .spawn(move || {
            let mut asm = ChunkAssembler::new(placement, 2);
            let mut out = Vec::new();
            let queues = |asm: &ChunkAssembler<P>| ChunkQueues {
                ready: tx.len(),
                free: asm.free_chunks() + recycle.len(),
            };
            loop {
                while let Ok(c) = recycle.try_recv() {
                    asm.recycle(c);
                }
                let poll = src.recv_batch(&mut |p| {
                    let _ = asm.push(p, &mut out);
                })?;
                for c in out.drain(..) {
                    if tx.send(c).is_err() {
                        monitor(&asm.stats, queues(&asm));
                        return Ok(asm.stats);
                    }
                }
                monitor(&asm.stats, queues(&asm));
                if poll == Poll::End || crate::control::shutdown::requested() {
                    break;
                }
            }
            asm.flush(&mut out);
            for c in out.drain(..) {
                let _ = tx.send(c);
            }
            monitor(&asm.stats, queues(&asm));
            Ok(asm.stats)
        })
        .expect("spawn receive thread")
}
