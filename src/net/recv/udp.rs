//! Kernel UDP sockets for receive: recvmmsg over one socket per port (multicast joined),
//! with UDP GRO where the kernel has it ([`UdpRecvSource`]), and a plain socket
//! ([`UdpSource`]).

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};

use super::{PacketSource, Poll};

const BATCH: usize = 64;
const MAX_DATAGRAM: usize = 9216;
/// A receive slot with UDP GRO: the largest coalesced datagram (64 KiB of UDP payload).
pub const GRO_SLOT: usize = 65536;
/// Receive slots per recvmmsg call with GRO (each may hold tens of packets): 8 slots of
/// 64 KiB stay in L2. On the bench feed (2 cores, loaded), packets per CPU-second with a GSO
/// feed were 482k/484k/446k/398k at 4/8/16/32 slots (median of 5), and without coalescing
/// 285k/302k/309k/307k.
const GRO_BATCH: usize = 8;
/// Control-message space per received datagram (one `UDP_GRO` int needs 24 bytes).
const CTRL_WORDS: usize = 8;

/// How a [`UdpRecvSource`] receives.
#[derive(Debug, Clone, Copy)]
pub struct UdpRecvConfig {
    /// Ask the kernel for UDP GRO (`UDP_GRO` socket option): consecutive datagrams of one
    /// flow arrive coalesced, with their segment size in a control message, and are split
    /// here. Falls back to plain datagrams, with a warning, where the kernel lacks it.
    pub gro: bool,
    /// Bytes per receive slot (one datagram, or one coalesced run with GRO); a datagram
    /// larger than its slot is dropped and counted (`truncated`). Default: 64 KiB with GRO,
    /// 9216 bytes without.
    pub slot_bytes: Option<usize>,
    /// When the sockets were drained by the last read, wait this long before reading
    /// again instead of sleeping in poll() until the next datagram: each wake-up then
    /// takes a batch of what arrived meanwhile rather than a datagram or two, and the
    /// sender does not wake this thread per datagram. Zero: poll at once.
    pub hold: std::time::Duration,
    /// Bind unicast endpoints with SO_REUSEPORT, shared by this many sockets (receive
    /// threads, the n-th of them bound n-th; 0 or 1: not shared). A SPEAD packet goes to
    /// socket heap counter mod n ([`steer_by_heap`]), so a heap's packets meet in one
    /// socket and a sender's heaps spread over all; other datagrams, or a kernel without
    /// the steering program, go by the kernel's hash of the flow. Multicast endpoints are
    /// never shared this way.
    pub shared_by: u32,
}

/// Default [`UdpRecvConfig::hold`]: 100 µs (a few hundred kilobytes at a digitiser's rate,
/// far below the socket buffers).
pub const DEFAULT_HOLD: std::time::Duration = std::time::Duration::from_micros(100);

impl Default for UdpRecvConfig {
    fn default() -> Self {
        UdpRecvConfig {
            gro: true,
            slot_bytes: None,
            hold: DEFAULT_HOLD,
            shared_by: 0,
        }
    }
}

/// Counters of a [`UdpRecvSource`].
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct UdpRecvStats {
    /// Buffers recvmmsg returned (datagrams, or coalesced runs of datagrams with GRO).
    pub buffers: u64,
    /// Of those, buffers holding two or more GRO segments.
    pub coalesced: u64,
    /// Packets (datagrams, after splitting coalesced buffers) handed on.
    pub packets: u64,
    /// Buffers dropped because they were larger than the receive slot (MSG_TRUNC).
    pub truncated: u64,
    /// Buffers dropped because their control message was cut short (MSG_CTRUNC), so a
    /// coalesced buffer could not be split.
    pub ctrl_truncated: u64,
    /// Waits of [`UdpRecvConfig::hold`] after a read that drained the sockets.
    pub holds: u64,
    /// poll() calls that slept for data.
    pub polls: u64,
}

/// Receives UDP datagrams for a list of endpoints: one socket per port, bound to the
/// unicast address or joined to every multicast group of that port on each interface
/// ([`UdpRecvSource::joined`]).
pub struct UdpRecvSource {
    sockets: Vec<UdpSocket>,
    bufs: Vec<u8>,
    ctrl: Vec<[u64; CTRL_WORDS]>,
    slot: usize,
    batch: usize,
    gro: bool,
    /// poll() set, reused across calls (no allocation per batch).
    fds: Vec<libc::pollfd>,
    poll_ms: i32,
    hold: std::time::Duration,
    /// The last read emptied every socket (the next one waits `hold` first).
    drained: bool,
    /// Counters so far.
    pub stats: UdpRecvStats,
}

impl UdpRecvSource {
    /// Sockets for `endpoints` with UDP GRO where the kernel has it.
    pub fn new(
        endpoints: &[SocketAddrV4],
        interface: Ipv4Addr,
        recv_buffer: usize,
    ) -> io::Result<Self> {
        Self::with_config(endpoints, interface, recv_buffer, UdpRecvConfig::default())
    }

    /// Sockets for `endpoints` receiving as `config` says (GRO, slot size).
    pub fn with_config(
        endpoints: &[SocketAddrV4],
        interface: Ipv4Addr,
        recv_buffer: usize,
        config: UdpRecvConfig,
    ) -> io::Result<Self> {
        Self::joined(endpoints, &[interface], recv_buffer, config)
    }

    /// [`Self::with_config`] joining every multicast group on each of `interfaces` (one
    /// IP_ADD_MEMBERSHIP per group and interface; addresses of one interface are joined
    /// once). Unicast endpoints are bound as they are.
    pub fn joined(
        endpoints: &[SocketAddrV4],
        interfaces: &[Ipv4Addr],
        recv_buffer: usize,
        config: UdpRecvConfig,
    ) -> io::Result<Self> {
        let interfaces = join_interfaces(interfaces);
        let mut ports: Vec<u16> = endpoints.iter().map(|e| e.port()).collect();
        ports.sort_unstable();
        ports.dedup();
        let mut sockets = Vec::new();
        for port in ports {
            let eps: Vec<&SocketAddrV4> = endpoints.iter().filter(|e| e.port() == port).collect();
            let multicast = eps.iter().any(|e| e.ip().is_multicast());
            if !multicast {
                // Unicast addresses (127.0.0.2+7:7148, as a multicast group list reads on a
                // loopback test): one socket bound to each.
                for e in &eps {
                    sockets.push(receive_socket(
                        **e,
                        None,
                        &interfaces,
                        recv_buffer,
                        config.shared_by,
                    )?);
                }
                continue;
            }
            let group = multicast.then_some(&eps[..]);
            sockets.push(receive_socket(*eps[0], group, &interfaces, recv_buffer, 0)?);
        }
        let gro = config.gro
            && match sockets.iter().try_for_each(|s| set_udp_gro(s, true)) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "UDP GRO not available: one datagram per receive slot");
                    sockets.iter().for_each(|s| {
                        let _ = set_udp_gro(s, false);
                    });
                    false
                }
            };
        let slot = config
            .slot_bytes
            .unwrap_or(if gro { GRO_SLOT } else { MAX_DATAGRAM })
            .clamp(64, GRO_SLOT);
        let batch = if gro { GRO_BATCH } else { BATCH };
        let fds = sockets
            .iter()
            .map(|s: &UdpSocket| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let src = UdpRecvSource {
            sockets,
            bufs: vec![0; batch * slot],
            ctrl: vec![[0; CTRL_WORDS]; batch],
            slot,
            batch,
            gro,
            fds,
            poll_ms: 100,
            hold: config.hold,
            drained: false,
            stats: UdpRecvStats::default(),
        };
        // SO_RCVBUF is capped at net.core.rmem_max (often 208 KiB), far below what a burst of
        // heaps from several engines needs: past the cap with SO_RCVBUFFORCE where allowed
        // (CAP_NET_ADMIN), otherwise say so once.
        let granted = src.recv_buffer_size();
        if granted < recv_buffer {
            let forced = src.force_recv_buffer(recv_buffer).unwrap_or(granted);
            if forced < recv_buffer {
                tracing::warn!(
                    requested = recv_buffer,
                    granted = forced,
                    "UDP receive buffer capped by net.core.rmem_max (raise it, or run with \
                     CAP_NET_ADMIN): bursts may be dropped"
                );
            }
        }
        Ok(src)
    }

    /// Whether the sockets receive with UDP GRO.
    pub fn gro(&self) -> bool {
        self.gro
    }

    /// The smallest receive buffer of the sockets, as the kernel reports it.
    pub fn recv_buffer_size(&self) -> usize {
        self.sockets
            .iter()
            .map(|s| socket2::SockRef::from(s).recv_buffer_size().unwrap_or(0))
            .min()
            .unwrap_or(0)
    }
}

/// `e` with what was being done (`binding UDP 10.0.0.1:7148`) in front: the operating
/// system's message alone ("Address already in use") names no endpoint.
fn named(e: io::Error, doing: std::fmt::Arguments<'_>) -> io::Error {
    io::Error::new(e.kind(), format!("{doing}: {e}"))
}

/// The interfaces to join multicast groups on: each address once, in the order given (the
/// wildcard alone when none is given). Two addresses of one interface (`lo,127.0.0.1`)
/// make the second IP_ADD_MEMBERSHIP answer "address in use", which [`receive_socket`]
/// takes as joined.
pub fn join_interfaces(interfaces: &[Ipv4Addr]) -> Vec<Ipv4Addr> {
    let mut out: Vec<Ipv4Addr> = Vec::new();
    for &i in interfaces {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    if out.is_empty() {
        out.push(Ipv4Addr::UNSPECIFIED);
    }
    out
}

/// SO_ATTACH_REUSEPORT_CBPF (Linux's asm-generic value; not in libc for every target).
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Attaches to `s`'s SO_REUSEPORT group a classic BPF program choosing the socket for a
/// datagram: when its first SPEAD item pointer (payload bytes 8..16) is the immediate heap
/// counter (id 0x8001), socket (heap counter mod `n`), taken from the counter's low 32
/// bits; otherwise an index past the group, which makes the kernel choose by its flow hash
/// (as does a datagram too short to hold the pointer: the program then returns 0).
fn steer_by_heap(s: &Socket, n: u32) -> io::Result<()> {
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    // BPF_LD|BPF_W|BPF_ABS, BPF_ALU|BPF_RSH|BPF_K, BPF_JMP|BPF_JEQ|BPF_K,
    // BPF_ALU|BPF_MOD|BPF_K, BPF_RET|BPF_A, BPF_RET|BPF_K.
    let prog = [
        op(0x20, 0, 0, 8),
        op(0x74, 0, 0, 16),
        op(0x15, 0, 3, 0x8001),
        op(0x20, 0, 0, 12),
        op(0x94, 0, 0, n.max(1)),
        op(0x16, 0, 0, 0),
        op(0x06, 0, 0, u32::MAX),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: a valid program the kernel copies during the call; `s` is an open socket.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether this kernel (and sandbox) takes the heap-steering program of shared ports: on a
/// throwaway SO_REUSEPORT socket of 127.0.0.1.
pub fn heap_steering_available() -> bool {
    let Ok(s) = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)) else {
        return false;
    };
    let any = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    s.set_reuse_port(true).is_ok() && s.bind(&any.into()).is_ok() && steer_by_heap(&s, 2).is_ok()
}

/// A non-blocking UDP receive socket for `addr`'s port: bound to the unicast `addr`, or,
/// with `groups` (multicast addresses of that port), bound to the port and joined to each
/// group on every one of `interfaces`; `shared_by` ≥ 2 (unicast only) lets that many
/// sockets of this process's receive threads share the endpoint. Every error names the
/// endpoint and the step that failed.
fn receive_socket(
    addr: SocketAddrV4,
    groups: Option<&[&SocketAddrV4]>,
    interfaces: &[Ipv4Addr],
    recv_buffer: usize,
    shared_by: u32,
) -> io::Result<UdpSocket> {
    let port = addr.port();
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| named(e, format_args!("opening a UDP socket for {addr}")))?;
    // Several receivers of one multicast port (engines of one host) need SO_REUSEADDR; a
    // unicast endpoint must not have it: Linux then hands every datagram to the socket
    // bound last, so a second engine started on the same port by mistake would silently
    // take the first one's input (seen: a 10-minute loss of one pol in a soak while
    // another array ran on overlapping ports). Without it the second bind fails, by name.
    if groups.is_some() {
        s.set_reuse_address(true)
            .map_err(|e| named(e, format_args!("setting SO_REUSEADDR for UDP {addr}")))?;
    }
    let shared = shared_by >= 2 && groups.is_none();
    if shared {
        s.set_reuse_port(true)
            .map_err(|e| named(e, format_args!("setting SO_REUSEPORT for UDP {addr}")))?;
    }
    let _ = s.set_recv_buffer_size(recv_buffer);
    match groups {
        Some(groups) => {
            let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
            s.bind(&any.into())
                .map_err(|e| named(e, format_args!("binding UDP port {port} (for {addr})")))?;
            // Only the groups this socket joins: Linux otherwise delivers every group that
            // any socket of the host (network namespace) joined on this port, so engines
            // sharing a host and a port (one per antenna, or fgpu and xbgpu on 7148) would
            // read each other's streams.
            s.set_multicast_all_v4(false).map_err(|e| {
                named(
                    e,
                    format_args!("setting IP_MULTICAST_ALL off for UDP port {port}"),
                )
            })?;
            for g in groups.iter().filter(|g| g.ip().is_multicast()) {
                for (k, interface) in interfaces.iter().enumerate() {
                    match s.join_multicast_v4(g.ip(), interface) {
                        Ok(()) => {}
                        // A second address of an interface already joined.
                        Err(e) if k > 0 && e.raw_os_error() == Some(libc::EADDRINUSE) => {}
                        Err(e) => {
                            return Err(named(
                                e,
                                format_args!(
                                    "joining multicast group {} on interface {interface}",
                                    g.ip()
                                ),
                            ))
                        }
                    }
                }
            }
        }
        None => s
            .bind(&addr.into())
            .map_err(|e| named(e, format_args!("binding UDP {addr}")))?,
    }
    if shared {
        if let Err(e) = steer_by_heap(&s, shared_by) {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(error = %e, "receive threads sharing a port: no heap steering \
                    program (SO_ATTACH_REUSEPORT_CBPF); the kernel's flow hash spreads the senders")
            });
        }
    }
    s.set_nonblocking(true)
        .map_err(|e| named(e, format_args!("receiving on UDP {addr}")))?;
    Ok(s.into())
}

/// Sets or clears `UDP_GRO` on a socket.
fn set_udp_gro(s: &UdpSocket, on: bool) -> io::Result<()> {
    let v: libc::c_int = on.into();
    // SAFETY: setsockopt on an open socket with a c_int argument.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_GRO,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The GRO segment size of a received message (its `UDP_GRO` control message), if any.
///
/// # Safety
/// `h` must be a msghdr filled by recvmsg/recvmmsg whose control buffer is still alive.
unsafe fn gro_segment(h: &libc::msghdr) -> Option<usize> {
    let mut c = libc::CMSG_FIRSTHDR(h);
    while !c.is_null() {
        if (*c).cmsg_level == libc::SOL_UDP
            && (*c).cmsg_type == libc::UDP_GRO
            && (*c).cmsg_len as usize
                >= libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize
        {
            let v = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int);
            return usize::try_from(v).ok().filter(|&v| v > 0);
        }
        c = libc::CMSG_NXTHDR(h, c);
    }
    None
}

impl UdpRecvSource {
    /// Raises every socket's receive buffer to `bytes` past `net.core.rmem_max`
    /// (SO_RCVBUFFORCE, which needs CAP_NET_ADMIN). Returns the smallest buffer the kernel
    /// reports afterwards (it doubles the request for its bookkeeping).
    pub fn force_recv_buffer(&self, bytes: usize) -> io::Result<usize> {
        let want = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        for s in &self.sockets {
            // SAFETY: setsockopt on an open socket with a c_int argument.
            let r = unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUFFORCE,
                    &want as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if r != 0 {
                return Err(io::Error::other(format!(
                    "SO_RCVBUFFORCE of {bytes} bytes: {}",
                    io::Error::last_os_error()
                )));
            }
        }
        Ok(self.recv_buffer_size())
    }
}

impl PacketSource for UdpRecvSource {
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8])) -> io::Result<Poll> {
        if !self.hold.is_zero() {
            if self.drained {
                // Data are flowing: let a batch gather rather than wake per datagram.
                std::thread::sleep(self.hold);
                self.stats.holds += 1;
            }
            let p = self.read(f, false)?;
            if p != Poll::Idle {
                return Ok(p);
            }
            self.drained = false;
        }
        let fds = &mut self.fds;
        fds.iter_mut().for_each(|p| p.revents = 0);
        // SAFETY: fds is a valid array of pollfd for the duration of the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, self.poll_ms) };
        self.stats.polls += 1;
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(Poll::Idle)
            } else {
                Err(e)
            };
        }
        if r == 0 {
            return Ok(Poll::Idle);
        }
        self.read(f, true)
    }
}

impl UdpRecvSource {
    /// One recvmmsg on each socket (with `polled`, only those poll() found readable),
    /// non-blocking; the packets to `f`. Notes whether every socket was drained.
    fn read(&mut self, f: &mut dyn FnMut(&[u8]), polled: bool) -> io::Result<Poll> {
        let (slot, batch) = (self.slot, self.batch);
        let mut any = false;
        let mut total = 0;
        let mut drained = true;
        for i in 0..self.sockets.len() {
            if polled && self.fds[i].revents & libc::POLLIN == 0 {
                continue;
            }
            // On the stack: no allocation per batch.
            let base = self.bufs.as_mut_ptr();
            let mut iovs: [libc::iovec; BATCH] = std::array::from_fn(|k| libc::iovec {
                // SAFETY: for k < batch, k * slot < bufs.len() (batch slots of `slot`
                // bytes); later entries are never handed to the kernel.
                iov_base: if k < batch {
                    unsafe { base.add(k * slot) as *mut _ }
                } else {
                    std::ptr::null_mut()
                },
                iov_len: if k < batch { slot } else { 0 },
            });
            // SAFETY: mmsghdr is plain old data; each header points at one iovec above and
            // (with GRO) at its control buffer.
            let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            for (k, (h, iov)) in hdrs.iter_mut().zip(iovs.iter_mut()).enumerate().take(batch) {
                h.msg_hdr.msg_iov = iov;
                h.msg_hdr.msg_iovlen = 1;
                if self.gro {
                    h.msg_hdr.msg_control = self.ctrl[k].as_mut_ptr() as *mut libc::c_void;
                    h.msg_hdr.msg_controllen = CTRL_WORDS * 8;
                }
            }
            // SAFETY: buffers outlive the call; the socket is non-blocking.
            let n = unsafe {
                libc::recvmmsg(
                    self.sockets[i].as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    batch as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) {
                    continue;
                }
                return Err(e);
            }
            any |= n > 0;
            drained &= (n as usize) < batch;
            self.stats.buffers += n as u64;
            for (k, h) in hdrs.iter().take(n as usize).enumerate() {
                let flags = h.msg_hdr.msg_flags;
                if flags & libc::MSG_TRUNC != 0 {
                    self.stats.truncated += 1;
                    continue;
                }
                let len = (h.msg_len as usize).min(slot);
                let buf = &self.bufs[k * slot..k * slot + len];
                // SAFETY: the header was filled by recvmmsg and its control buffer
                // (self.ctrl[k]) is alive.
                let seg = if self.gro {
                    if flags & libc::MSG_CTRUNC != 0 {
                        self.stats.ctrl_truncated += 1;
                        continue;
                    }
                    unsafe { gro_segment(&h.msg_hdr) }
                } else {
                    None
                };
                match seg {
                    Some(seg) if seg < len => {
                        self.stats.coalesced += 1;
                        for p in buf.chunks(seg) {
                            f(p);
                            total += 1;
                        }
                    }
                    _ => {
                        f(buf);
                        total += 1;
                    }
                }
            }
        }
        self.stats.packets += total as u64;
        self.drained = any && drained;
        Ok(if any {
            Poll::Packets(total)
        } else {
            Poll::Idle
        })
    }
}

/// A plain UDP receive socket (unicast, or multicast joined on `interface`).
pub struct UdpSource {
    socket: UdpSocket,
}

impl UdpSource {
    /// Binds `addr`; for a multicast address, binds the port and joins the group.
    pub fn bind(addr: SocketAddrV4, interface: Ipv4Addr, recv_buffer: usize) -> io::Result<Self> {
        let group = [&addr];
        let group = addr.ip().is_multicast().then_some(&group[..]);
        let socket = receive_socket(addr, group, &[interface], recv_buffer, 0)?;
        socket
            .set_nonblocking(false)
            .map_err(|e| named(e, format_args!("receiving on UDP {addr}")))?;
        Ok(UdpSource { socket })
    }

    /// The bound address (the port the kernel chose for port 0).
    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.socket.local_addr()
    }

    /// Receives one datagram into `buf`; `Ok(None)` after `timeout` with nothing.
    pub fn recv(&self, buf: &mut [u8], timeout: std::time::Duration) -> io::Result<Option<usize>> {
        self.socket
            .set_read_timeout(Some(timeout.max(std::time::Duration::from_millis(1))))?;
        match self.socket.recv(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address this host does not have (TEST-NET-1, never assigned).
    const ABSENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

    /// A second receiver of a unicast endpoint already in use fails by name instead of
    /// taking the first one's datagrams; a multicast port can still be shared (one host's
    /// engines on 7148). Nothing is sent.
    #[test]
    fn a_unicast_endpoint_in_use_is_refused_a_multicast_port_is_shared() {
        let first = UdpRecvSource::new(
            &[SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)],
            Ipv4Addr::UNSPECIFIED,
            1 << 16,
        );
        // an ephemeral port, then the same endpoint again
        let port = first
            .as_ref()
            .map(|f| f.sockets[0].local_addr().unwrap().port())
            .unwrap();
        let ep = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        let e = UdpRecvSource::new(&[ep], Ipv4Addr::UNSPECIFIED, 1 << 16)
            .err()
            .expect("a second bind of a unicast endpoint in use must fail")
            .to_string();
        assert!(e.contains(&format!("binding UDP 127.0.0.1:{port}")), "{e}");
        assert!(e.to_lowercase().contains("in use"), "{e}");
        let group = SocketAddrV4::new(Ipv4Addr::new(239, 9, 9, 10), 17_151);
        let a = UdpRecvSource::new(&[group], Ipv4Addr::LOCALHOST, 1 << 16);
        let b = UdpRecvSource::new(&[group], Ipv4Addr::LOCALHOST, 1 << 16);
        assert!(a.is_ok() && b.is_ok(), "{:?} {:?}", a.err(), b.err());
    }

    /// Bind and join failures name the endpoint (and the interface), not just the
    /// operating system's "Cannot assign requested address". Nothing is sent.
    #[test]
    fn bind_errors_name_the_endpoint() {
        let ep = SocketAddrV4::new(ABSENT, 17_148);
        let e = UdpRecvSource::new(&[ep], Ipv4Addr::UNSPECIFIED, 1 << 16)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("binding UDP 192.0.2.1:17148"), "{e}");
        let e = UdpSource::bind(ep, Ipv4Addr::UNSPECIFIED, 1 << 16)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("binding UDP 192.0.2.1:17148"), "{e}");
        // A group joined on an interface address this host does not have.
        let group = SocketAddrV4::new(Ipv4Addr::new(239, 9, 9, 9), 17_149);
        let e = UdpRecvSource::new(&[group], ABSENT, 1 << 16)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("joining multicast group 239.9.9.9 on interface 192.0.2.1"),
            "{e}"
        );
        let two = [
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, 17_150),
            SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 17_150),
        ];
        // Unicast addresses sharing a port: one socket bound to each.
        let src = UdpRecvSource::new(&two, Ipv4Addr::UNSPECIFIED, 1 << 16).unwrap();
        assert_eq!(src.sockets.len(), 2);
    }

    /// Two receive sources on one port, each joined to its own group on lo: each gets only
    /// its group's datagrams (IP_MULTICAST_ALL off), as two engines sharing a host and a
    /// port must. Skipped (said on stderr) where lo takes no multicast membership.
    #[test]
    fn a_multicast_source_reads_only_the_groups_it_joined() {
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let ga = SocketAddrV4::new(Ipv4Addr::new(239, 254, 77, 1), port);
        let gb = SocketAddrV4::new(Ipv4Addr::new(239, 254, 77, 2), port);
        let lo = Ipv4Addr::LOCALHOST;
        let (mut a, mut b) = match (
            UdpRecvSource::new(&[ga], lo, 1 << 16),
            UdpRecvSource::new(&[gb], lo, 1 << 16),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("skipped: no multicast membership on lo here: {e}");
                return;
            }
        };
        for s in a.sockets.iter().chain(&b.sockets) {
            assert!(!socket2::SockRef::from(s).multicast_all_v4().unwrap());
        }
        a.poll_ms = 20;
        b.poll_ms = 20;
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&tx)
            .set_multicast_if_v4(&lo)
            .unwrap();
        tx.set_multicast_loop_v4(true).unwrap();
        tx.send_to(b"to-a", ga).unwrap();
        tx.send_to(b"to-b", gb).unwrap();
        let read = |src: &mut UdpRecvSource| {
            let mut got = Vec::new();
            for _ in 0..3 {
                src.recv_batch(&mut |p| got.push(p.to_vec())).unwrap();
            }
            got
        };
        assert_eq!(read(&mut a), [b"to-a".to_vec()]);
        assert_eq!(read(&mut b), [b"to-b".to_vec()]);
    }

    /// Sends `n` datagrams of 100 bytes (byte k of datagram i: i + k) to a fresh receive
    /// source configured with `hold`, then reads twice; returns the datagrams received and
    /// the source's counters.
    fn two_reads(n: u8, hold: std::time::Duration) -> (Vec<Vec<u8>>, UdpRecvStats) {
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, probe.local_addr().unwrap().port());
        drop(probe);
        let config = UdpRecvConfig {
            hold,
            ..UdpRecvConfig::default()
        };
        let mut rx =
            UdpRecvSource::with_config(&[dst], Ipv4Addr::UNSPECIFIED, 1 << 20, config).unwrap();
        rx.poll_ms = 20;
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..n {
            let d: Vec<u8> = (0..100u8).map(|k| i.wrapping_add(k)).collect();
            tx.send_to(&d, dst).unwrap();
        }
        let mut got = Vec::new();
        for _ in 0..2 {
            rx.recv_batch(&mut |p| got.push(p.to_vec())).unwrap();
        }
        (got, rx.stats.clone())
    }

    /// With a hold, a read that drained the socket is followed by a wait (not a poll per
    /// datagram), then a poll once nothing came; without one, every call polls. Either
    /// way every datagram arrives once, in order.
    #[test]
    fn a_drained_socket_is_held_before_polling() {
        // Fewer datagrams than one read takes (GRO_BATCH buffers): the first read drains.
        let want: Vec<Vec<u8>> = (0..5u8)
            .map(|i| (0..100u8).map(|k| i.wrapping_add(k)).collect())
            .collect();
        let (got, st) = two_reads(5, std::time::Duration::from_millis(1));
        assert!(got == want, "{} datagrams", got.len());
        assert_eq!((st.holds, st.polls), (1, 1), "{st:?}");
        let (got, st) = two_reads(5, std::time::Duration::ZERO);
        assert!(got == want, "{} datagrams", got.len());
        assert_eq!((st.holds, st.polls), (0, 2), "{st:?}");
    }
}
