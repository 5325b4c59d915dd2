//! The engines' receive side: opening the input (`SRC`: a pcap file or endpoints, through
//! kernel UDP, DPDK or ibverbs) and the receive thread that places packets into chunks.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Instant;

use crate::chunk::{
    Chunk, ChunkAssembler, ChunkGroup, ChunkQueues, ChunkStats, Placement, RecvMonitor,
    StreamCounts, WindowPolicy,
};
use crate::net::{
    recv::pcap::PcapFileSource,
    recv::udp::{UdpRecvConfig, UdpRecvSource},
    recv::{PacketSource, Poll},
};
use crate::telemetry::stages::Stage;

/// Default `--recv-reorder-tol` in ADC ticks: 2^29 (katgpucbf's; 0.31 s at 1712 MS/s).
pub const DEFAULT_REORDER_TOL: u64 = 1 << 29;

/// Chunks open at once in the engines' receive windows (katgpucbf's `MAX_CHUNKS` for fgpu).
pub const ACTIVE_CHUNKS: usize = 2;

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
    /// Several receive threads on an input that one thread must read.
    #[error("--recv-affinity with {threads} cores: {why}")]
    Threads {
        /// Receive threads asked for.
        threads: usize,
        /// Why the input cannot be shared.
        why: String,
    },
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
    /// Every `--recv-interface` address: kernel UDP receive joins each multicast group on
    /// all of them (empty: on `interface` alone).
    pub join: &'a [Ipv4Addr],
    /// DPDK EAL arguments (`--recv-dpdk`).
    pub dpdk: Option<&'a str>,
    /// Raw-packet ibverbs receive (`--recv-ibv`).
    pub ibv: bool,
    /// Kernel UDP receive buffer per socket in bytes (`--recv-buffer`); 0: the default.
    pub buffer: usize,
    /// Wait after a read that drained the sockets (`--recv-hold-us`); `None`: the default.
    pub hold: Option<std::time::Duration>,
}

/// Default `--recv-buffer`: 128 MiB per socket.
pub const DEFAULT_RECV_BUFFER: usize = 128 << 20;

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
            join: &[],
            dpdk,
            ibv: false,
            buffer: 0,
            hold: None,
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
        return open_ibv(ibv_endpoints(src)?, interface);
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
    Ok(Box::new(UdpRecvSource::joined(
        &eps,
        &opts.join_interfaces(),
        opts.recv_buffer(),
        opts.udp_config(),
    )?))
}

impl RecvOptions<'_> {
    /// How the UDP sockets receive (`--recv-hold-us`).
    fn udp_config(&self) -> UdpRecvConfig {
        let mut c = UdpRecvConfig::default();
        if let Some(h) = self.hold {
            c.hold = h;
        }
        c
    }

    /// The interfaces multicast groups are joined on: `join`, else `interface`.
    fn join_interfaces(&self) -> Vec<Ipv4Addr> {
        if self.join.is_empty() {
            vec![self.interface.unwrap_or(Ipv4Addr::UNSPECIFIED)]
        } else {
            self.join.to_vec()
        }
    }

    /// The socket receive buffer asked for.
    fn recv_buffer(&self) -> usize {
        if self.buffer == 0 {
            DEFAULT_RECV_BUFFER
        } else {
            self.buffer
        }
    }
}

/// Opens the input for `threads` receive threads (a stream group): the endpoints' ports
/// dealt round-robin to the threads, each thread its own sockets. One thread takes the
/// input as [`open_source_with`] does; a pcap file, DPDK and ibverbs take one thread.
pub fn open_sources(
    src: &str,
    opts: &RecvOptions<'_>,
    threads: usize,
) -> Result<Vec<Box<dyn PacketSource>>, OpenError> {
    if threads <= 1 {
        return Ok(vec![open_source_with(src, opts)?]);
    }
    let refuse = |why: &str| OpenError::Threads {
        threads,
        why: why.to_string(),
    };
    if opts.dpdk.is_some() {
        return Err(refuse(
            "--recv-dpdk takes one receive thread here (one DPDK queue: give one core)",
        ));
    }
    if opts.ibv {
        // One queue pair (with its flow rules) per thread, each for its share of the
        // endpoints.
        let interface = opts.interface.unwrap_or(Ipv4Addr::UNSPECIFIED);
        return deal_endpoints(&ibv_endpoints(src)?, threads)
            .map_err(|e| refuse(&e))?
            .into_iter()
            .map(|share| open_ibv(share, interface))
            .collect();
    }
    if Path::new(src).is_file() {
        return Err(refuse(
            "a pcap file is replayed by one thread (give one core)",
        ));
    }
    let eps = crate::net::parse_endpoints(src).map_err(|e| OpenError::NeitherFileNorEndpoints {
        src: src.to_string(),
        error: e.to_string(),
    })?;
    let mut ports: Vec<u16> = eps.iter().map(|e| e.port()).collect();
    ports.sort_unstable();
    ports.dedup();
    // More threads than ports: unicast endpoints are shared by every thread through
    // SO_REUSEPORT, a SPEAD heap steered to thread (heap counter mod threads); a multicast
    // port cannot be shared that way. Otherwise each thread reads whole ports.
    let shared = ports.len() < threads;
    if shared && eps.iter().any(|e| e.ip().is_multicast()) {
        return Err(refuse(&format!(
            "the multicast endpoints use {} port(s) and each receive thread reads whole \
             ports: give at most {} cores",
            ports.len(),
            ports.len()
        )));
    }
    let config = UdpRecvConfig {
        shared_by: if shared { threads as u32 } else { 0 },
        ..opts.udp_config()
    };
    let join = opts.join_interfaces();
    (0..threads)
        .map(|t| {
            let mine: Vec<_> = eps
                .iter()
                .filter(|e| {
                    shared || ports.iter().position(|&p| p == e.port()).unwrap_or(0) % threads == t
                })
                .copied()
                .collect();
            let s = UdpRecvSource::joined(&mine, &join, opts.recv_buffer(), config)?;
            Ok(Box::new(s) as Box<dyn PacketSource>)
        })
        .collect()
}

/// The endpoints `--recv-ibv` steers (flow rules need them: no pcap file, no `all`).
fn ibv_endpoints(src: &str) -> Result<Vec<std::net::SocketAddrV4>, OpenError> {
    crate::net::parse_endpoints(src).map_err(|e| OpenError::NotEndpoints {
        option: "--recv-ibv",
        src: src.to_string(),
        error: e.to_string(),
    })
}

/// Deals `eps` to `threads` receive threads round-robin (endpoint i to thread i mod
/// threads); every thread needs one.
fn deal_endpoints(
    eps: &[std::net::SocketAddrV4],
    threads: usize,
) -> Result<Vec<Vec<std::net::SocketAddrV4>>, String> {
    if eps.len() < threads {
        return Err(format!(
            "{} endpoint(s) and each receive thread takes whole endpoints: give at most {} cores",
            eps.len(),
            eps.len()
        ));
    }
    Ok((0..threads)
        .map(|t| eps.iter().skip(t).step_by(threads).copied().collect())
        .collect())
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
    let policy = WindowPolicy::new(ACTIVE_CHUNKS, ChunkAssembler::<P>::JUMP_CHUNKS);
    spawn_receiver_monitored(src, placement, policy, tx, recycle, Box::new(|_, _| {}))
}

/// [`spawn_receiver`] with the window `policy`, reporting its counters to `monitor` as it
/// goes.
pub fn spawn_receiver_monitored<P: Placement + 'static>(
    src: Box<dyn PacketSource>,
    placement: P,
    policy: WindowPolicy,
    tx: crossbeam_channel::Sender<Chunk>,
    recycle: crossbeam_channel::Receiver<Chunk>,
    monitor: RecvMonitor,
) -> std::thread::JoinHandle<std::io::Result<ChunkStats>> {
    std::thread::Builder::new()
        .name("recv".into())
        .spawn(move || receive_alone(src, placement, policy, 0, tx, recycle, monitor))
        .expect("spawn receive thread")
}

/// One receive thread with its own window: packets → chunks → `tx`.
fn receive_alone<P: Placement>(
    mut src: Box<dyn PacketSource>,
    placement: P,
    policy: WindowPolicy,
    prealloc: usize,
    tx: crossbeam_channel::Sender<Chunk>,
    recycle: crossbeam_channel::Receiver<Chunk>,
    mut monitor: RecvMonitor,
) -> std::io::Result<ChunkStats> {
    let mut asm = ChunkAssembler::with_policy(placement, policy);
    asm.prefill(prealloc);
    let mut out = Vec::new();
    let mut stopped = None;
    let queues = |asm: &ChunkAssembler<P>| queues(&tx, asm.free_chunks(), &recycle);
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
            // Out of chunk memory: what was received still goes out, then the engine
            // stops with the error (never an abort).
            stopped = Some(alloc_stopped(e));
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
}

/// The receive error for a chunk that could not be allocated.
fn alloc_stopped(e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("receive stopped: {e}"))
}

/// True for 0 (an engine summary leaves such counters out: `skip_serializing_if`).
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The engine's input: its packet sources (one per receive thread), the cores they are
/// pinned to, and the receive window.
pub struct RecvSetup {
    /// One source per receive thread.
    pub sources: Vec<Box<dyn PacketSource>>,
    /// The core of each receive thread (`--recv-affinity`); empty: not pinned.
    pub cores: Vec<usize>,
    /// Receive window tolerance in ADC ticks (`--recv-reorder-tol`).
    pub reorder_tol: u64,
    /// Chunks open at once (`--recv-chunks`).
    pub window_chunks: usize,
    /// Chunk buffers allocated before receiving (`--recv-prealloc`).
    pub prealloc: usize,
}

impl RecvSetup {
    /// One unpinned receive thread reading `src`, the default window.
    pub fn single(src: Box<dyn PacketSource>) -> Self {
        RecvSetup {
            sources: vec![src],
            cores: Vec::new(),
            reorder_tol: DEFAULT_REORDER_TOL,
            window_chunks: ACTIVE_CHUNKS,
            prealloc: 0,
        }
    }

    /// The window policy for chunks of `chunk_ticks` ADC ticks.
    pub fn policy(&self, chunk_ticks: u64) -> WindowPolicy {
        WindowPolicy::from_ticks(self.window_chunks, self.reorder_tol, chunk_ticks)
    }
}

/// How long a receive thread waits for a slower stream of its group before taking it as
/// stalled.
pub const STALL: std::time::Duration = std::time::Duration::from_millis(50);

/// Runs the receive threads of `setup` (one per source, each pinned to its core if given):
/// packets → chunks → `tx`, until every input ends or shutdown. One thread runs the
/// [`ChunkAssembler`] alone; several share one [`ChunkGroup`] window.
pub fn spawn_receivers<P: Placement + Clone + Sync + 'static>(
    setup: RecvSetup,
    placement: P,
    chunk_ticks: u64,
    tx: crossbeam_channel::Sender<Chunk>,
    recycle: crossbeam_channel::Receiver<Chunk>,
    monitor: RecvMonitor,
) -> std::thread::JoinHandle<std::io::Result<ChunkStats>> {
    let policy = setup.policy(chunk_ticks);
    let prealloc = setup.prealloc;
    let mut sources = setup.sources;
    if sources.len() == 1 {
        let core = setup.cores.first().copied();
        let src = sources.remove(0);
        return std::thread::Builder::new()
            .name("recv".into())
            .spawn(move || {
                pin(core)?;
                receive_alone(src, placement, policy, prealloc, tx, recycle, monitor)
            })
            .expect("spawn receive thread");
    }
    let n = sources.len();
    let group = std::sync::Arc::new(ChunkGroup::new(placement, policy, n, STALL, tx.clone()));
    group.prefill(prealloc);
    let monitor = std::sync::Arc::new(std::sync::Mutex::new(monitor));
    std::thread::Builder::new()
        .name("recv-group".into())
        .spawn(move || {
            let handles: Vec<_> = sources
                .into_iter()
                .enumerate()
                .map(|(i, src)| {
                    let core = setup.cores.get(i).copied();
                    let (group, monitor) = (group.clone(), monitor.clone());
                    let (tx, recycle) = (tx.clone(), recycle.clone());
                    std::thread::Builder::new()
                        .name(format!("recv-{i}"))
                        .spawn(move || {
                            pin(core)?;
                            receive_stream(i, src, &group, &tx, &recycle, &monitor)
                        })
                        .expect("spawn receive thread")
                })
                .collect();
            let mut first_error = None;
            for h in handles {
                match h.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        first_error.get_or_insert(e);
                    }
                    Err(_) => {
                        first_error
                            .get_or_insert(std::io::Error::other("a receive thread panicked"));
                    }
                }
            }
            let stats = group.flush();
            if let Some(e) = first_error {
                return Err(e);
            }
            let q = queues(&tx, group.free_chunks(), &recycle);
            (monitor.lock().unwrap_or_else(|e| e.into_inner()))(&stats, q);
            Ok(stats)
        })
        .expect("spawn receive group")
}

/// The chunk queues around the receive threads: chunks waiting in `tx` for the engine, and
/// free buffers (`free` held by the window plus those returned in `recycle`).
fn queues(
    tx: &crossbeam_channel::Sender<Chunk>,
    free: usize,
    recycle: &crossbeam_channel::Receiver<Chunk>,
) -> ChunkQueues {
    ChunkQueues {
        ready: tx.len(),
        free: free + recycle.len(),
    }
}

/// Pins the calling receive thread to `core`, if given.
fn pin(core: Option<usize>) -> std::io::Result<()> {
    if let Some(c) = core {
        crate::net::affinity::pin_current_thread(c).map_err(std::io::Error::other)?;
    }
    Ok(())
}

/// One stream of a group: its packets into the shared window until its input ends, a
/// stop is requested or the consumer is gone.
fn receive_stream<P: Placement + Clone>(
    i: usize,
    mut src: Box<dyn PacketSource>,
    group: &ChunkGroup<P>,
    tx: &crossbeam_channel::Sender<Chunk>,
    recycle: &crossbeam_channel::Receiver<Chunk>,
    monitor: &std::sync::Mutex<RecvMonitor>,
) -> std::io::Result<()> {
    let mut counts = StreamCounts::default();
    // Receiving and placing (with the group's waits inside), and the bookkeeping after.
    let (receive, sync) = (Stage::new("recv", "receive"), Stage::new("recv", "sync"));
    let waits = (
        Stage::new("recv", "wait_consumer"),
        Stage::new("recv", "wait_streams"),
    );
    loop {
        let mut live = true;
        let t = Instant::now();
        let poll = {
            // Inside the window for the whole batch (one fence at its end).
            let mut batch = group.batch(i, &mut counts);
            src.recv_batch(&mut |p| live &= batch.push(p))?
        };
        let t = receive.since(t);
        let s = group.sync(&mut counts, &mut recycle.try_iter());
        let q = queues(tx, s.free_chunks, recycle);
        (monitor.lock().unwrap_or_else(|e| e.into_inner()))(&s.stats, q);
        sync.since(t);
        let (consumer, streams) = group.take_waits();
        waits.0.add(consumer);
        waits.1.add(streams);
        if let Some(e) = s.alloc_error {
            return Err(alloc_stopped(e));
        }
        if !live || poll == Poll::End || crate::control::shutdown::requested() {
            return Ok(());
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddrV4;

    /// A UDP port of 127.0.0.1 free a moment ago (the kernel's pick).
    fn free_port() -> u16 {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    }

    #[test]
    fn endpoints_are_dealt_round_robin() {
        let eps: Vec<SocketAddrV4> = (0..5)
            .map(|i| SocketAddrV4::new(Ipv4Addr::new(239, 1, 0, i), 7148))
            .collect();
        let d = deal_endpoints(&eps, 2).unwrap();
        assert_eq!(d[0], vec![eps[0], eps[2], eps[4]]);
        assert_eq!(d[1], vec![eps[1], eps[3]]);
        assert_eq!(deal_endpoints(&eps, 5).unwrap().concat().len(), 5);
        let e = deal_endpoints(&eps, 6).unwrap_err();
        assert!(e.contains("at most 5 cores"), "{e}");
    }

    /// Several `--recv-interface`s: every multicast group of SRC is joined on each (one
    /// IP_ADD_MEMBERSHIP per group and interface; a second address of an interface already
    /// joined is fine). On loopback only: groups joined on `lo` receive what is sent to
    /// them there, and a listed address that is no interface fails by name, which shows the
    /// join is made on the second interface too.
    #[test]
    fn multicast_groups_are_joined_on_every_recv_interface() {
        let lo = Ipv4Addr::LOCALHOST;
        let port = free_port();
        let src = format!("239.200.23.1+1:{port}");
        let join = [lo, Ipv4Addr::new(127, 0, 0, 2), lo];
        let opts = RecvOptions {
            interface: Some(lo),
            join: &join,
            ..Default::default()
        };
        let mut rx = open_source_with(&src, &opts).expect("joined on lo");
        let tx = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        tx.set_multicast_if_v4(&lo).unwrap();
        tx.set_multicast_loop_v4(true).unwrap();
        for (i, g) in ["239.200.23.1", "239.200.23.2"].iter().enumerate() {
            let to = SocketAddrV4::new(g.parse().unwrap(), port);
            tx.send_to(&[i as u8 + 1; 8], &to.into()).unwrap();
        }
        let mut got = Vec::new();
        for _ in 0..50 {
            rx.recv_batch(&mut |p| got.push(p[0])).unwrap();
            if got.len() == 2 {
                break;
            }
        }
        got.sort_unstable();
        assert_eq!(got, vec![1, 2]);

        let nowhere = Ipv4Addr::new(10, 255, 255, 1);
        let join = [lo, nowhere];
        let opts = RecvOptions {
            interface: Some(lo),
            join: &join,
            ..Default::default()
        };
        let e = open_source_with(&src, &opts)
            .err()
            .expect("no such interface");
        assert!(
            e.to_string()
                .contains("joining multicast group 239.200.23.1 on interface 10.255.255.1"),
            "{e}"
        );
        // With the same list, two receive threads (one per port) each join on both.
        let src2 = format!("239.200.23.1:{port},239.200.23.2:{}", port + 1);
        let e = open_sources(&src2, &opts, 2)
            .err()
            .expect("no such interface");
        assert!(e.to_string().contains("on interface 10.255.255.1"), "{e}");
    }

    /// More receive threads than ports on a unicast endpoint: every thread gets a socket on
    /// it (SO_REUSEPORT) and each datagram of many senders reaches exactly one of them: a
    /// SPEAD packet the thread (heap counter mod 3), any other datagram by its flow (a
    /// sender's all to one thread); on a multicast port it is refused by name.
    #[test]
    fn threads_share_a_unicast_port_and_not_a_multicast_one() {
        let port = free_port();
        let src = format!("127.0.0.1:{port}");
        let opts = RecvOptions::default();
        let mut rx = open_sources(&src, &opts, 3).expect("three threads on one port");
        assert_eq!(rx.len(), 3);
        // A fourth socket without SO_REUSEPORT (another engine by mistake) cannot bind.
        let e = open_sources(&src, &opts, 1)
            .err()
            .expect("the port is taken");
        assert!(e.to_string().contains(&src), "{e}");
        let (senders, each) = (8u8, 20u8);
        let txs: Vec<_> = (0..senders)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        for k in 0..each {
            for (s, tx) in txs.iter().enumerate() {
                tx.send_to(&[s as u8, k], ("127.0.0.1", port)).unwrap();
            }
        }
        let total = usize::from(senders) * usize::from(each);
        let mut got: Vec<Vec<(u8, u8)>> = vec![Vec::new(); rx.len()];
        for _ in 0..200 {
            for (t, r) in rx.iter_mut().enumerate() {
                r.recv_batch(&mut |p| got[t].push((p[0], p[1]))).unwrap();
            }
            if got.iter().map(Vec::len).sum::<usize>() == total {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut all: Vec<(u8, u8)> = got.concat();
        all.sort_unstable();
        let want: Vec<(u8, u8)> = (0..senders)
            .flat_map(|s| (0..each).map(move |k| (s, k)))
            .collect();
        assert_eq!(all, want, "every datagram exactly once");
        for s in 0..senders {
            let threads = got.iter().filter(|g| g.iter().any(|d| d.0 == s)).count();
            assert_eq!(
                threads, 1,
                "sender {s}'s datagrams reached {threads} threads"
            );
        }
        // SPEAD packets (header, then the immediate heap counter), 4 heaps per sender.
        let spead = |cnt: u8| {
            let mut p = vec![0x53, 4, 2, 6, 0, 0, 0, 1, 0x80, 0x01, 0, 0, 0, 0, 0, cnt];
            p.extend_from_slice(&[0xaa; 8]);
            p
        };
        for (s, tx) in txs.iter().enumerate() {
            for h in 0..4u8 {
                tx.send_to(&spead(4 * s as u8 + h), ("127.0.0.1", port))
                    .unwrap();
            }
        }
        let mut got: Vec<Vec<u8>> = vec![Vec::new(); rx.len()];
        for _ in 0..200 {
            for (t, r) in rx.iter_mut().enumerate() {
                r.recv_batch(&mut |p| got[t].push(p[15])).unwrap();
            }
            if got.iter().map(Vec::len).sum::<usize>() == 4 * usize::from(senders) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(
            got.iter().map(Vec::len).sum::<usize>(),
            4 * usize::from(senders)
        );
        if crate::net::recv::udp::heap_steering_available() {
            for (t, cnts) in got.iter().enumerate() {
                let mut c = cnts.clone();
                c.sort_unstable();
                let want: Vec<u8> = (0..4 * senders)
                    .filter(|c| usize::from(*c) % 3 == t)
                    .collect();
                assert_eq!(c, want, "thread {t}: heap counter mod 3");
            }
        } else {
            eprintln!("SKIP heap steering: SO_ATTACH_REUSEPORT_CBPF refused here (flow hash)");
        }
        let mc = format!("239.200.24.1:{port}");
        let e = open_sources(&mc, &opts, 2).err().expect("refused");
        assert!(
            e.to_string().contains("multicast endpoints use 1 port(s)"),
            "{e}"
        );
    }
}
