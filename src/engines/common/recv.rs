//! The engines' receive side: opening the input (`SRC`: a pcap file or endpoints, through
//! kernel UDP, DPDK or ibverbs) and the receive thread that places packets into chunks.

use std::net::Ipv4Addr;
use std::path::Path;

use crate::chunk::{Chunk, ChunkAssembler, ChunkQueues, ChunkStats, Placement, RecvMonitor};
use crate::net::{
    recv::pcap::PcapFileSource,
    recv::udp::UdpRecvSource,
    recv::{PacketSource, Poll},
};

/// Why the input could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// `--recv-dpdk` and `--recv-ibv` together.
    #[error("--recv-dpdk and --recv-ibv are alternatives: give one")]
    DpdkAndIbv,
    /// `SRC` is not an endpoint list where the receive path needs one.
    #[error("{option}: source {src:?} is not endpoints: {error}")]
    NotEndpoints {
        /// The receive option (`--recv-dpdk`, `--recv-ibv`).
        option: &'static str,
        /// The source given.
        src: String,
        /// Why it does not parse.
        error: String,
    },
    /// `SRC` is neither an existing file nor an endpoint list.
    #[error("source {src:?} is neither a file nor endpoints: {error}")]
    NeitherFileNorEndpoints {
        /// The source given.
        src: String,
        /// Why it does not parse as endpoints.
        error: String,
    },
    /// The ibverbs receive path could not be opened (no RDMA device, no libibverbs).
    #[error("--recv-ibv: {0}")]
    Ibv(std::io::Error),
    /// This binary has no ibverbs receive path.
    #[error("--recv-ibv: this gpucbf binary was built without ibverbs support (rebuild with `cargo build --features ibverbs`)")]
    NoIbverbs,
    /// This binary has no DPDK receive path.
    #[error("--recv-dpdk: this gpucbf binary was built without DPDK support (rebuild with `cargo build --features dpdk`; needs libdpdk-dev)")]
    NoDpdk,
    /// Opening the pcap file, the sockets or DPDK failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

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
) -> Result<Box<dyn PacketSource>, OpenError> {
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
) -> Result<Box<dyn PacketSource>, OpenError> {
    let interface = opts.interface.unwrap_or(Ipv4Addr::UNSPECIFIED);
    if opts.dpdk.is_some() && opts.ibv {
        return Err(OpenError::DpdkAndIbv);
    }
    let not_endpoints = |option, e: String| OpenError::NotEndpoints {
        option,
        src: src.to_string(),
        error: e,
    };
    if let Some(eal) = opts.dpdk {
        let eps = if src.is_empty() || src == "all" {
            Vec::new()
        } else {
            crate::net::parse_endpoints(src)
                .map_err(|e| not_endpoints("--recv-dpdk", e.to_string()))?
        };
        return open_dpdk(eal, eps);
    }
    if opts.ibv {
        let eps = crate::net::parse_endpoints(src)
            .map_err(|e| not_endpoints("--recv-ibv", e.to_string()))?;
        return open_ibv(eps, interface);
    }
    // An existing path is a capture (a directory or device then fails by name in the pcap
    // reader, rather than as "not endpoints").
    if Path::new(src).exists() {
        return Ok(Box::new(PcapFileSource::open(Path::new(src), Vec::new())?));
    }
    let eps = crate::net::parse_endpoints(src).map_err(|e| OpenError::NeitherFileNorEndpoints {
        src: src.to_string(),
        error: e.to_string(),
    })?;
    Ok(Box::new(UdpRecvSource::new(&eps, interface, 128 << 20)?))
}

#[cfg(feature = "ibverbs")]
fn open_ibv(
    eps: Vec<std::net::SocketAddrV4>,
    interface: Ipv4Addr,
) -> Result<Box<dyn PacketSource>, OpenError> {
    let s = crate::net::recv::ibv::IbvRecvSource::open(eps, interface).map_err(OpenError::Ibv)?;
    Ok(Box::new(s))
}

#[cfg(not(feature = "ibverbs"))]
fn open_ibv(
    _eps: Vec<std::net::SocketAddrV4>,
    _interface: Ipv4Addr,
) -> Result<Box<dyn PacketSource>, OpenError> {
    Err(OpenError::NoIbverbs)
}

#[cfg(feature = "dpdk")]
fn open_dpdk(
    eal: &str,
    eps: Vec<std::net::SocketAddrV4>,
) -> Result<Box<dyn PacketSource>, OpenError> {
    Ok(Box::new(crate::net::recv::dpdk::DpdkSource::new(eal, eps)?))
}

#[cfg(not(feature = "dpdk"))]
fn open_dpdk(
    _eal: &str,
    _eps: Vec<std::net::SocketAddrV4>,
) -> Result<Box<dyn PacketSource>, OpenError> {
    Err(OpenError::NoDpdk)
}

/// Runs the receive thread: packets → chunks → `tx`, until end of input or shutdown.
pub fn spawn_receiver<P: Placement + 'static>(
    src: Box<dyn PacketSource>,
    placement: P,
    tx: crossbeam_channel::Sender<Chunk>,
    recycle: crossbeam_channel::Receiver<Chunk>,
) -> std::thread::JoinHandle<std::io::Result<ChunkStats>> {
    spawn_receiver_monitored(src, placement, tx, recycle, Box::new(|_, _| {}))
}

/// [`spawn_receiver`], reporting its counters to `monitor` as it goes.
pub fn spawn_receiver_monitored<P: Placement + 'static>(
    mut src: Box<dyn PacketSource>,
    placement: P,
    tx: crossbeam_channel::Sender<Chunk>,
    recycle: crossbeam_channel::Receiver<Chunk>,
    mut monitor: RecvMonitor,
) -> std::thread::JoinHandle<std::io::Result<ChunkStats>> {
    std::thread::Builder::new()
        .name("recv".into())
        .spawn(move || {
            let mut asm = ChunkAssembler::new(placement, 2);
            let mut out = Vec::new();
            let mut stopped = None;
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
                if let Some(e) = asm.take_alloc_error() {
                    // Out of chunk memory: what was received still goes out, then the
                    // engine stops with the error (never an abort).
                    stopped = Some(std::io::Error::new(
                        e.kind(),
                        format!("receive stopped: {e}"),
                    ));
                    break;
                }
                if poll == Poll::End || crate::control::shutdown::requested() {
                    break;
                }
            }
            asm.flush(&mut out);
            for c in out.drain(..) {
                let _ = tx.send(c);
            }
            monitor(&asm.stats, queues(&asm));
            match stopped {
                Some(e) => Err(e),
                None => Ok(asm.stats),
            }
        })
        .expect("spawn receive thread")
}

/// The receiver's rejected packets by reason name, for the reasons that occurred (an
/// engine summary's `recv_rejected`).
pub fn rejected_counts(stats: &ChunkStats) -> std::collections::BTreeMap<String, u64> {
    crate::chunk::Reject::ALL
        .into_iter()
        .map(|r| (r.name().to_string(), stats.rejected(r)))
        .filter(|&(_, n)| n > 0)
        .collect()
}
