//! Packet sources for the engines' receive side: a pcap file (replayed as fast as the
//! consumer takes it) or UDP sockets (recvmmsg over one socket per port, multicast joined).

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::Path;

use socket2::{Domain, Protocol, Socket, Type};

use super::pcap::MappedPcap;

/// What a receive call produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// This many packets were handed to the callback.
    Packets(usize),
    /// Nothing arrived within the poll interval.
    Idle,
    /// The source is exhausted (end of file).
    End,
}

/// Where packets come from.
pub trait PacketSource: Send {
    /// Hands up to one batch of packet payloads (UDP payloads) to `f`.
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8])) -> io::Result<Poll>;
}

/// Replays the UDP datagrams of a pcap file (mapped into memory and read in place),
/// keeping those addressed to `endpoints` (all datagrams if the list is empty).
pub struct PcapFileSource {
    src: MappedPcap,
    endpoints: Vec<SocketAddrV4>,
    /// Datagrams skipped because of their destination.
    pub filtered: u64,
}

impl PcapFileSource {
    pub fn open(path: &Path, endpoints: Vec<SocketAddrV4>) -> io::Result<Self> {
        Ok(PcapFileSource {
            src: MappedPcap::open(path)?,
            endpoints,
            filtered: 0,
        })
    }

    pub fn stats(&self) -> &super::pcap::PcapSourceStats {
        &self.src.stats
    }
}

impl PacketSource for PcapFileSource {
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8])) -> io::Result<Poll> {
        let mut n = 0;
        while n < 64 {
            let eps = &self.endpoints;
            let got = self.src.next_payload(|dst, payload| {
                let keep = eps.is_empty() || eps.contains(&dst);
                if keep {
                    f(payload);
                }
                keep
            })?;
            match got {
                None => return Ok(if n == 0 { Poll::End } else { Poll::Packets(n) }),
                Some(true) => n += 1,
                Some(false) => self.filtered += 1,
            }
        }
        Ok(Poll::Packets(n))
    }
}

/// Counters for sources that see whole Ethernet frames (DPDK, ibverbs).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FrameStats {
    /// Frames taken from the device.
    pub frames: u64,
    /// UDP payloads handed on.
    pub datagrams: u64,
    /// Frames that were not unfragmented IPv4/UDP (ARP, IPv6, fragments, ...).
    pub not_udp: u64,
    /// Frames that could not be parsed.
    pub malformed: u64,
    /// UDP datagrams to other endpoints.
    pub filtered: u64,
}

/// The common case on the per-packet path of the bypass sources: an untagged Ethernet II
/// frame with an unfragmented IPv4/UDP datagram whose lengths are consistent. Returns the
/// destination and the UDP payload (bounded by the IPv4 total length and the UDP length,
/// so Ethernet padding is dropped); `None` for anything else, which [`deliver_frame`] then
/// hands to etherparse for exact classification.
#[inline]
pub fn fast_udp_ipv4(frame: &[u8]) -> Option<(SocketAddrV4, &[u8])> {
    if frame.len() < 14 + 20 + 8 || frame[12] != 0x08 || frame[13] != 0x00 {
        return None;
    }
    let ip = &frame[14..];
    let ihl = (ip[0] & 0x0f) as usize * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip[9] != 17 {
        return None;
    }
    // More-fragments flag or a fragment offset: not a whole datagram.
    if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
        return None;
    }
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    if total < ihl + 8 || total > ip.len() {
        return None;
    }
    let udp = &ip[ihl..total];
    let udp_len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
    if udp_len < 8 || udp_len > udp.len() {
        return None;
    }
    let dst = SocketAddrV4::new(
        Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
        u16::from_be_bytes([udp[2], udp[3]]),
    );
    Some((dst, &udp[8..udp_len]))
}

/// Parses an Ethernet frame and hands its UDP payload to `f` if its destination is in
/// `endpoints` (or `endpoints` is empty). Anything else is counted in `stats`. True if
/// handed on.
pub fn deliver_frame(
    endpoints: &[SocketAddrV4],
    stats: &mut FrameStats,
    frame: &[u8],
    f: &mut dyn FnMut(&[u8]),
) -> bool {
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    if let Some((dst, payload)) = fast_udp_ipv4(frame) {
        if endpoints.is_empty() || endpoints.contains(&dst) {
            stats.datagrams += 1;
            f(payload);
            return true;
        }
        stats.filtered += 1;
        return false;
    }
    let sliced = match SlicedPacket::from_ethernet(frame) {
        Ok(s) => s,
        Err(_) => {
            stats.malformed += 1;
            return false;
        }
    };
    let dst_ip = match &sliced.net {
        Some(NetSlice::Ipv4(ip)) if !ip.is_payload_fragmented() => ip.header().destination_addr(),
        _ => {
            stats.not_udp += 1;
            return false;
        }
    };
    match &sliced.transport {
        Some(TransportSlice::Udp(udp)) => {
            let dst = SocketAddrV4::new(dst_ip, udp.destination_port());
            if endpoints.is_empty() || endpoints.contains(&dst) {
                stats.datagrams += 1;
                f(udp.payload());
                true
            } else {
                stats.filtered += 1;
                false
            }
        }
        _ => {
            stats.not_udp += 1;
            false
        }
    }
}

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
}

impl Default for UdpRecvConfig {
    fn default() -> Self {
        UdpRecvConfig {
            gro: true,
            slot_bytes: None,
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
}

/// Receives UDP datagrams for a list of endpoints: one socket per port, bound to the
/// unicast address or joined to every multicast group of that port on `interface`.
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

    pub fn with_config(
        endpoints: &[SocketAddrV4],
        interface: Ipv4Addr,
        recv_buffer: usize,
        config: UdpRecvConfig,
    ) -> io::Result<Self> {
        let mut ports: Vec<u16> = endpoints.iter().map(|e| e.port()).collect();
        ports.sort_unstable();
        ports.dedup();
        let mut sockets = Vec::new();
        for port in ports {
            let eps: Vec<&SocketAddrV4> = endpoints.iter().filter(|e| e.port() == port).collect();
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
            s.set_reuse_address(true)?;
            let _ = s.set_recv_buffer_size(recv_buffer);
            let multicast = eps.iter().any(|e| e.ip().is_multicast());
            if multicast {
                s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port).into())?;
                for e in &eps {
                    if e.ip().is_multicast() {
                        s.join_multicast_v4(e.ip(), &interface)?;
                    }
                }
            } else {
                if eps.len() > 1 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("several unicast addresses share port {port}"),
                    ));
                }
                s.bind(&(*eps[0]).into())?;
            }
            s.set_nonblocking(true)?;
            sockets.push(s.into());
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
    fn recv_buffer_size(&self) -> usize {
        self.sockets
            .iter()
            .map(|s| socket2::SockRef::from(s).recv_buffer_size().unwrap_or(0))
            .min()
            .unwrap_or(0)
    }
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
        let fds = &mut self.fds;
        fds.iter_mut().for_each(|p| p.revents = 0);
        // SAFETY: fds is a valid array of pollfd for the duration of the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, self.poll_ms) };
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
        let (slot, batch) = (self.slot, self.batch);
        let mut any = false;
        let mut total = 0;
        for i in 0..self.fds.len() {
            if self.fds[i].revents & libc::POLLIN == 0 {
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
        Ok(if any {
            Poll::Packets(total)
        } else {
            Poll::Idle
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_parsed_and_filtered() {
        let ep = SocketAddrV4::new(Ipv4Addr::new(239, 1, 2, 3), 7148);
        let mut frame = Vec::new();
        etherparse::PacketBuilder::ethernet2([2; 6], [1, 0, 0x5e, 1, 2, 3])
            .ipv4([169, 254, 0, 1], ep.ip().octets(), 4)
            .udp(1000, 7148)
            .write(&mut frame, b"hello")
            .unwrap();
        let mut st = FrameStats::default();
        let mut got = Vec::new();
        assert!(deliver_frame(&[ep], &mut st, &frame, &mut |p| got.push(p.to_vec())));
        assert!(deliver_frame(&[], &mut st, &frame, &mut |p| got.push(p.to_vec())));
        let other = SocketAddrV4::new(*ep.ip(), 7149);
        assert!(!deliver_frame(&[other], &mut st, &frame, &mut |_| {}));
        assert!(!deliver_frame(&[], &mut st, &frame[..20], &mut |_| {}));
        let mut arp = frame.clone();
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(!deliver_frame(&[], &mut st, &arp[..42], &mut |_| {}));
        assert_eq!(got, vec![b"hello".to_vec(), b"hello".to_vec()]);
        assert_eq!(st.datagrams, 2);
        assert_eq!(st.filtered, 1);
        assert_eq!(st.malformed + st.not_udp, 2);
    }

    /// etherparse's reading of a frame: the reference for the fast path.
    fn reference(frame: &[u8]) -> Option<(SocketAddrV4, Vec<u8>)> {
        use etherparse::{NetSlice, SlicedPacket, TransportSlice};
        let s = SlicedPacket::from_ethernet(frame).ok()?;
        let dst = match &s.net {
            Some(NetSlice::Ipv4(ip)) if !ip.is_payload_fragmented() => {
                ip.header().destination_addr()
            }
            _ => return None,
        };
        match &s.transport {
            Some(TransportSlice::Udp(u)) => Some((
                SocketAddrV4::new(dst, u.destination_port()),
                u.payload().to_vec(),
            )),
            _ => None,
        }
    }

    #[test]
    fn fast_path_agrees_with_etherparse() {
        let mut base = Vec::new();
        etherparse::PacketBuilder::ethernet2([2; 6], [1, 0, 0x5e, 1, 2, 3])
            .ipv4([169, 254, 0, 1], [239, 1, 2, 3], 4)
            .udp(1000, 7148)
            .write(&mut base, &[0xab; 40])
            .unwrap();
        let (dst, p) = fast_udp_ipv4(&base).unwrap();
        assert_eq!(dst, SocketAddrV4::new(Ipv4Addr::new(239, 1, 2, 3), 7148));
        assert_eq!(p, &[0xab; 40]);
        // Ethernet padding after the datagram is not payload.
        let mut padded = base.clone();
        padded.extend_from_slice(&[0; 16]);
        assert_eq!(fast_udp_ipv4(&padded).unwrap().1.len(), 40);
        // splitmix64: a seeded stream of pseudo-random numbers in [0, n).
        let mut state = 5u64;
        let mut below = |n: usize| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % n as u64) as usize
        };
        let mut fast = 0;
        for _ in 0..20000 {
            let mut fr = padded.clone();
            // Mutate header bytes (Ethernet type, IPv4 header, UDP header) and the length.
            for _ in 0..1 + below(3) {
                let k = 12 + below(2 + 20 + 8);
                fr[k] = match below(4) {
                    0 => 0,
                    1 => 0xff,
                    2 => fr[k] ^ (1 << below(8)),
                    _ => below(256) as u8,
                };
            }
            let keep = 30 + below(fr.len() - 30 + 1);
            fr.truncate(keep);
            if let Some((d, p)) = fast_udp_ipv4(&fr) {
                fast += 1;
                assert_eq!(reference(&fr), Some((d, p.to_vec())), "frame {fr:02x?}");
            }
        }
        assert!(
            fast > 1000,
            "the fast path must take most valid frames ({fast})"
        );
    }
}
