//! Kernel UDP sockets for send: unicast or multicast, sendmmsg batching and UDP GSO.

use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};

use super::PacketSink;

/// Most packets handed to one sendmmsg call.
pub const MAX_BATCH: usize = 64;
/// Most parts (iovecs) in one packet.
pub const MAX_PARTS: usize = 8;

/// Most segments in one UDP GSO super-datagram (the kernel's UDP_MAX_SEGMENTS was 64 before
/// Linux 6.9).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Largest UDP payload of one IPv4 datagram, and so of one GSO super-datagram.
pub const GSO_MAX_BYTES: usize = 65535 - 20 - 8;

/// Sends UDP datagrams from one socket to any number of destinations.
///
/// With UDP GSO (on unless [`UdpSink::set_gso`] turns it off), every run of equal-size
/// packets to one destination inside a batch goes to the kernel as one super-datagram with a
/// `UDP_SEGMENT` control message (the last packet of a run may be shorter): the kernel, or the
/// NIC, cuts it into ordinary datagrams, so the wire carries exactly the packets a plain
/// sendmmsg would send, for one pass through the socket layer per run. To make runs, a batch's
/// packets are grouped by destination (stable: the order of the packets to each destination
/// is kept; only the interleaving between destinations within one batch changes). Where the
/// kernel refuses GSO (EIO: no checksum offload on the route; EINVAL: a segment larger than
/// the path MTU, or an old kernel), the sink counts it in `gso_refused`, logs it once, and
/// sends plainly from then on.
///
/// Virtual devices (loopback, veth, bridges) pass super-datagrams on whole: sockets on the
/// far side get them split (or, with UDP_GRO, coalesced), but a packet socket there (an
/// AF_PACKET capture, DPDK's net_af_packet on a veth) sees one large frame per run. Turn GSO
/// off with [`UdpSink::set_gso`] for such a consumer; on a physical NIC the segments go out
/// as ordinary frames.
pub struct UdpSink {
    socket: UdpSocket,
    /// Datagrams (segments) sent.
    pub packets: u64,
    /// UDP payload bytes sent.
    pub bytes: u64,
    /// Super-datagrams handed to the kernel with UDP_SEGMENT (2 or more segments each).
    pub gso_sends: u64,
    /// Times the kernel refused a GSO send (the packets then went out plainly).
    pub gso_refused: u64,
    /// Datagrams dropped because their destination could not be reached (no route, the
    /// interface down, refused): the engine goes on, and sends again once it is back.
    pub unreachable_packets: u64,
    unreachable: Unreachable,
    gso: bool,
}

/// The log of unreachable destinations: the first drop at once, then at most one line every
/// 10 s with the count since, and a line when sending works again.
#[derive(Default)]
struct Unreachable {
    logged_at: Option<std::time::Instant>,
    unlogged: u64,
    /// Dropping since the last successful send.
    active: bool,
}

/// Send errors that mean the destination cannot be reached now (it may come back): the
/// packets are dropped and counted, not the engine stopped.
fn is_unreachable(code: i32) -> bool {
    matches!(
        code,
        libc::ENETUNREACH
            | libc::EHOSTUNREACH
            | libc::ENETDOWN
            | libc::EHOSTDOWN
            | libc::ECONNREFUSED
            | libc::EPERM
            | libc::EACCES
            | libc::EADDRNOTAVAIL
    )
}

impl UdpSink {
    /// Opens a socket bound to `interface` (an IPv4 address; `0.0.0.0` for any) with the
    /// given multicast TTL and send buffer size.
    pub fn new(interface: Ipv4Addr, ttl: u32, send_buffer: usize) -> io::Result<Self> {
        // Every error names the interface and the step ("Cannot assign requested address"
        // alone says neither).
        let named = |doing: &str, e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("{doing} (send interface {interface}): {e}"),
            )
        };
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| named("opening a UDP send socket", e))?;
        s.set_send_buffer_size(send_buffer)
            .map_err(|e| named("setting the UDP send buffer size", e))?;
        s.set_multicast_ttl_v4(ttl)
            .map_err(|e| named(&format!("setting the multicast TTL to {ttl}"), e))?;
        s.set_ttl_v4(ttl.max(1))
            .map_err(|e| named(&format!("setting the TTL to {}", ttl.max(1)), e))?;
        if !interface.is_unspecified() {
            s.set_multicast_if_v4(&interface)
                .map_err(|e| named("choosing the multicast interface", e))?;
        }
        s.set_multicast_loop_v4(true)
            .map_err(|e| named("enabling multicast loopback", e))?;
        s.bind(&SocketAddrV4::new(interface, 0).into())
            .map_err(|e| named("binding the UDP send socket", e))?;
        Ok(UdpSink {
            socket: s.into(),
            packets: 0,
            bytes: 0,
            gso_sends: 0,
            gso_refused: 0,
            unreachable_packets: 0,
            unreachable: Unreachable::default(),
            gso: true,
        })
    }

    /// The bound address and port.
    pub fn local_addr(&self) -> io::Result<SocketAddrV4> {
        match self.socket.local_addr()? {
            std::net::SocketAddr::V4(a) => Ok(a),
            _ => Err(io::Error::other("not an IPv4 socket")),
        }
    }

    /// The socket (for options this type does not wrap).
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// Turns UDP GSO on (the default) or off (one sendmmsg message per packet).
    pub fn set_gso(&mut self, on: bool) {
        self.gso = on;
    }

    /// Whether runs of packets go out as GSO super-datagrams (false once the kernel refused).
    pub fn gso(&self) -> bool {
        self.gso
    }
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain old data; zeroed is a valid value.
    let mut s: libc::sockaddr_in = unsafe { MaybeUninit::zeroed().assume_init() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = a.port().to_be();
    s.sin_addr = libc::in_addr {
        s_addr: u32::from(*a.ip()).to_be(),
    };
    s
}

/// One sendmmsg message: `count` packets from `order[start..]`, cut every `segment` bytes.
#[derive(Clone, Copy, Default)]
struct Message {
    start: usize,
    count: usize,
    segment: usize,
}

/// Groups `order` (packet indices) into messages: with `gso`, runs of packets to the same
/// destination whose sizes are all `segment` except a shorter last one, within the kernel's
/// limits; without, one packet per message. Returns the number of messages.
fn plan(
    batch: &[(SocketAddrV4, &[&[u8]])],
    lens: &[usize],
    order: &[usize],
    gso: bool,
    msgs: &mut [Message; MAX_BATCH],
) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < order.len() {
        let first = order[i];
        let segment = lens[first];
        let mut count = 1;
        let mut total = segment;
        if gso && segment > 0 {
            while i + count < order.len() && count < GSO_MAX_SEGMENTS {
                let p = order[i + count];
                let prev = order[i + count - 1];
                if batch[p].0 != batch[first].0
                    || lens[prev] != segment
                    || lens[p] == 0
                    || lens[p] > segment
                    || total + lens[p] > GSO_MAX_BYTES
                {
                    break;
                }
                total += lens[p];
                count += 1;
            }
        }
        msgs[n] = Message {
            start: i,
            count,
            segment,
        };
        n += 1;
        i += count;
    }
    n
}

/// Slots of [`group_by_destination`]'s table: a power of two, at least twice MAX_BATCH (so
/// it is never more than half full and a probe ends at an empty slot).
const GROUP_SLOTS: usize = 2 * MAX_BATCH;
const _: () = assert!(GROUP_SLOTS.is_power_of_two() && GROUP_SLOTS >= 2 * MAX_BATCH);

/// Writes into `order` (`batch.len()` ≤ MAX_BATCH long) the indices of `batch` grouped by
/// destination: destinations in the order of their first packet, each destination's packets
/// in their order in the batch. Linear in the batch: a small open-addressed table maps each
/// destination to its group, and a counting sort places the packets.
fn group_by_destination(batch: &[(SocketAddrV4, &[&[u8]])], order: &mut [usize]) {
    let n = batch.len();
    assert!(n <= MAX_BATCH && order.len() == n, "batch of {n} packets");
    const EMPTY: u8 = u8::MAX;
    // Slot → group; group → its first packet (the destination it stands for).
    let mut slots = [EMPTY; GROUP_SLOTS];
    let mut first_of = [0usize; MAX_BATCH];
    let mut group_of = [0u8; MAX_BATCH];
    let mut sizes = [0usize; MAX_BATCH];
    let mut groups = 0usize;
    for (i, (dst, _)) in batch.iter().enumerate() {
        let key = (u64::from(u32::from(*dst.ip())) << 16) | u64::from(dst.port());
        // Fibonacci hashing: the top bits of the product.
        let mut slot =
            (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - GROUP_SLOTS.ilog2())) as usize;
        let g = loop {
            match slots[slot] {
                EMPTY => {
                    slots[slot] = groups as u8;
                    first_of[groups] = i;
                    groups += 1;
                    break groups - 1;
                }
                g if batch[first_of[g as usize]].0 == *dst => break g as usize,
                _ => slot = (slot + 1) & (GROUP_SLOTS - 1),
            }
        };
        group_of[i] = g as u8;
        sizes[g] += 1;
    }
    // Counting sort: each group's place starts after the groups before it.
    let mut next = [0usize; MAX_BATCH];
    let mut at = 0;
    for (start, size) in next.iter_mut().zip(&sizes[..groups]) {
        *start = at;
        at += size;
    }
    for (i, &g) in group_of[..n].iter().enumerate() {
        let g = g as usize;
        order[next[g]] = i;
        next[g] += 1;
    }
}

/// Space for one `UDP_SEGMENT` control message (a u16), 8-byte aligned.
const CMSG_WORDS: usize = 4;

impl UdpSink {
    /// Sends the packets `order` names (indices into `batch`, at most MAX_BATCH). Returns
    /// `Ok(None)` when all went out, or `Ok(Some(k))` when the kernel refused GSO for the
    /// message starting at `order[k]` (nothing from there on was sent).
    fn transmit(
        &mut self,
        batch: &[(SocketAddrV4, &[&[u8]])],
        lens: &[usize],
        order: &[usize],
        gso: bool,
    ) -> io::Result<Option<usize>> {
        let mut msgs = [Message::default(); MAX_BATCH];
        let n = plan(batch, lens, order, gso, &mut msgs);
        let mut addrs = [sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)); MAX_BATCH];
        let mut iovs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_BATCH * MAX_PARTS];
        let mut cmsgs = [[0u64; CMSG_WORDS]; MAX_BATCH];
        // SAFETY: mmsghdr is plain old data.
        let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { MaybeUninit::zeroed().assume_init() };
        let mut iov_at = 0;
        for (m, msg) in msgs[..n].iter().enumerate() {
            let iov_start = iov_at;
            for &p in &order[msg.start..msg.start + msg.count] {
                for part in batch[p].1 {
                    iovs[iov_at] = libc::iovec {
                        iov_base: part.as_ptr() as *mut _,
                        iov_len: part.len(),
                    };
                    iov_at += 1;
                }
            }
            addrs[m] = sockaddr(batch[order[msg.start]].0);
            let h = &mut hdrs[m].msg_hdr;
            h.msg_name = &mut addrs[m] as *mut _ as *mut libc::c_void;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
            h.msg_iov = &mut iovs[iov_start] as *mut libc::iovec;
            h.msg_iovlen = (iov_at - iov_start) as _;
            if msg.count > 1 {
                // SAFETY: the buffer holds CMSG_SPACE(2) bytes (checked below), is 8-byte
                // aligned and zeroed; CMSG_FIRSTHDR of a msghdr with that control buffer
                // points at its start.
                unsafe {
                    let space = libc::CMSG_SPACE(2) as usize;
                    debug_assert!(space <= CMSG_WORDS * 8);
                    h.msg_control = cmsgs[m].as_mut_ptr() as *mut libc::c_void;
                    h.msg_controllen = space as _;
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, msg.segment as u16);
                }
            }
        }
        let mut done = 0usize;
        while done < n {
            // SAFETY: hdrs[done..n] point at live iovecs, addresses and control buffers on
            // this stack frame.
            let r = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    hdrs.as_mut_ptr().add(done),
                    (n - done) as u32,
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    // Kernel queue full: yield and retry (the socket is blocking; ENOBUFS on
                    // loopback).
                    Some(libc::ENOBUFS) => {
                        std::thread::yield_now();
                        continue;
                    }
                    Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
                        if msgs[done].count > 1 =>
                    {
                        self.count_sent(lens, order, &msgs[..done]);
                        return Ok(Some(msgs[done].start));
                    }
                    Some(code) if is_unreachable(code) => {
                        // This message cannot go now: drop it (counted, logged) and go on.
                        let m = msgs[done];
                        let dropped = &order[m.start..m.start + m.count];
                        self.unreachable_drop(batch[dropped[0]].0, dropped, &e);
                        msgs[done].count = 0;
                        done += 1;
                        continue;
                    }
                    _ => return Err(e),
                }
            }
            done += r as usize;
        }
        self.count_sent(lens, order, &msgs[..n]);
        Ok(None)
    }

    /// Counts the packets of `msgs` (ranges of `order`) as sent; a message dropped as
    /// unreachable has count 0.
    fn count_sent(&mut self, lens: &[usize], order: &[usize], msgs: &[Message]) {
        for m in msgs {
            for &p in &order[m.start..m.start + m.count] {
                self.packets += 1;
                self.bytes += lens[p] as u64;
            }
        }
        self.gso_sends += msgs.iter().filter(|m| m.count > 1).count() as u64;
        if self.unreachable.active && msgs.iter().any(|m| m.count > 0) {
            self.unreachable.active = false;
            tracing::info!(
                dropped = self.unreachable.unlogged,
                "UDP send: destinations reachable again"
            );
            self.unreachable.unlogged = 0;
        }
    }

    /// Counts the packets `dropped` (indices into the batch) whose destination `dst` cannot
    /// be reached, with a rate-limited log line.
    fn unreachable_drop(&mut self, dst: SocketAddrV4, dropped: &[usize], e: &io::Error) {
        self.unreachable_packets += dropped.len() as u64;
        crate::telemetry::faults::add_unreachable_packets(dropped.len() as u64);
        self.unreachable.unlogged += dropped.len() as u64;
        self.unreachable.active = true;
        let u = &mut self.unreachable;
        if u.logged_at
            .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(10))
        {
            tracing::warn!(
                destination = %dst,
                error = %e,
                dropped = u.unlogged,
                total_dropped = self.unreachable_packets,
                "UDP send: destination unreachable; dropping its packets until it is back"
            );
            u.logged_at = Some(std::time::Instant::now());
            u.unlogged = 0;
        }
    }
}

impl PacketSink for UdpSink {
    fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> io::Result<()> {
        self.send_batch(&[(dst, parts)])
    }

    fn send_batch(&mut self, packets: &[(SocketAddrV4, &[&[u8]])]) -> io::Result<()> {
        for batch in packets.chunks(MAX_BATCH) {
            let n = batch.len();
            let mut lens = [0usize; MAX_BATCH];
            for (i, (_, parts)) in batch.iter().enumerate() {
                if parts.len() > MAX_PARTS {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "too many packet parts",
                    ));
                }
                lens[i] = parts.iter().map(|p| p.len()).sum();
            }
            let mut order = [0usize; MAX_BATCH];
            order.iter_mut().enumerate().for_each(|(i, o)| *o = i);
            let order = &mut order[..n];
            if self.gso {
                group_by_destination(batch, order);
                if let Some(k) = self.transmit(batch, &lens[..n], order, true)? {
                    self.gso = false;
                    self.gso_refused += 1;
                    tracing::warn!(
                        "UDP GSO refused by the kernel for this route: sending one datagram \
                         per packet from now on"
                    );
                    self.transmit(batch, &lens[..n], &order[k..], false)?;
                }
            } else {
                self.transmit(batch, &lens[..n], order, false)?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::recv::udp::UdpSource;

    fn plan_of(packets: &[(u16, usize)], gso: bool) -> Vec<(usize, usize, usize)> {
        let bufs: Vec<Vec<u8>> = packets.iter().map(|&(_, n)| vec![0; n]).collect();
        let parts: Vec<[&[u8]; 1]> = bufs.iter().map(|b| [&b[..]]).collect();
        let batch: Vec<(SocketAddrV4, &[&[u8]])> = packets
            .iter()
            .zip(&parts)
            .map(|(&(port, _), p)| (SocketAddrV4::new(Ipv4Addr::LOCALHOST, port), &p[..]))
            .collect();
        let lens: Vec<usize> = packets.iter().map(|p| p.1).collect();
        let order: Vec<usize> = (0..packets.len()).collect();
        let mut msgs = [Message::default(); MAX_BATCH];
        let n = plan(&batch, &lens, &order, gso, &mut msgs);
        msgs[..n]
            .iter()
            .map(|m| (m.start, m.count, m.segment))
            .collect()
    }

    /// A send socket that cannot bind names the interface it was asked for.
    #[test]
    fn bind_errors_name_the_interface() {
        let e = UdpSink::new(Ipv4Addr::new(192, 0, 2, 1), 4, 1 << 16)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("send interface 192.0.2.1"), "{e}");
        assert!(e.contains("Cannot assign requested address"), "{e}");
    }

    /// [`group_by_destination`] on a full batch to 23 destinations interleaved (same
    /// address other ports, same port other addresses): every packet once, each
    /// destination's packets together and in their batch order, destinations in the order
    /// of their first packet; the same from a direct quadratic reference.
    #[test]
    fn grouping_by_destination_keeps_each_destinations_order() {
        let dsts: Vec<SocketAddrV4> = (0..23u16)
            .map(|d| SocketAddrV4::new(Ipv4Addr::new(127, 0, (d % 3) as u8, 1), 7000 + d / 3))
            .collect();
        for seed in 0..20u64 {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let n = if seed == 0 {
                MAX_BATCH
            } else {
                1 + (seed as usize * 7) % MAX_BATCH
            };
            let batch: Vec<(SocketAddrV4, &[&[u8]])> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (dsts[(x % dsts.len() as u64) as usize], &[][..])
                })
                .collect();
            let mut order = vec![usize::MAX; n];
            group_by_destination(&batch, &mut order);
            let mut seen = order.clone();
            seen.sort_unstable();
            assert_eq!(
                seen,
                (0..n).collect::<Vec<_>>(),
                "seed {seed}: each packet once"
            );
            // The reference: destinations by first appearance, then that destination's
            // packets in batch order.
            let mut want = Vec::new();
            for i in 0..n {
                if (0..i).all(|j| batch[j].0 != batch[i].0) {
                    want.extend((i..n).filter(|&k| batch[k].0 == batch[i].0));
                }
            }
            assert_eq!(order, want, "seed {seed}");
            if seed == 0 {
                let groups = want
                    .windows(2)
                    .filter(|w| batch[w[0]].0 != batch[w[1]].0)
                    .count()
                    + 1;
                assert!(groups > 15, "{groups} destinations in the full batch");
            }
        }
    }

    /// A UdpSink batch of packets to 8 loopback destinations, interleaved, sent with GSO:
    /// every destination receives all its packets, in the order they were given.
    #[test]
    fn gso_send_to_interleaved_destinations_keeps_each_destinations_order() {
        let sources: Vec<UdpSource> = (0..8)
            .map(|_| {
                UdpSource::bind(
                    SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
                    Ipv4Addr::UNSPECIFIED,
                    1 << 20,
                )
                .unwrap()
            })
            .collect();
        let dsts: Vec<SocketAddrV4> = sources
            .iter()
            .map(|s| match s.local_addr().unwrap() {
                std::net::SocketAddr::V4(a) => a,
                a => panic!("{a}"),
            })
            .collect();
        // 150 packets (three batches), destination k·7 mod 8 for packet k, sizes 100 but
        // every third 20 (GSO runs form, some ending on a shorter packet): 8 bytes of packet
        // index, then padding.
        let payloads: Vec<Vec<u8>> = (0..150u64)
            .map(|k| {
                let mut p = k.to_le_bytes().to_vec();
                p.resize(if k % 3 == 2 { 20 } else { 100 }, 0xa5);
                p
            })
            .collect();
        let parts: Vec<[&[u8]; 1]> = payloads.iter().map(|p| [&p[..]]).collect();
        let packets: Vec<(SocketAddrV4, &[&[u8]])> = parts
            .iter()
            .enumerate()
            .map(|(k, p)| (dsts[k * 7 % 8], &p[..]))
            .collect();
        let mut sink = UdpSink::new(Ipv4Addr::UNSPECIFIED, 1, 1 << 20).unwrap();
        sink.send_batch(&packets).unwrap();
        assert_eq!(sink.packets, 150);
        if sink.gso() {
            assert!(sink.gso_sends > 0);
        }
        let mut buf = [0u8; 2048];
        for (d, src) in sources.iter().enumerate() {
            let want: Vec<u64> = (0..150u64).filter(|&k| k as usize * 7 % 8 == d).collect();
            let mut got = Vec::new();
            for _ in 0..want.len() {
                let Some(n) = src
                    .recv(&mut buf, std::time::Duration::from_secs(5))
                    .unwrap()
                else {
                    break;
                };
                got.push(u64::from_le_bytes(buf[..8].try_into().unwrap()));
                assert_eq!(n, payloads[*got.last().unwrap() as usize].len());
            }
            assert_eq!(got, want, "destination {d}");
        }
    }

    #[test]
    fn gso_runs_follow_destination_size_and_kernel_limits() {
        // Equal sizes to one destination: one run; a shorter packet ends it.
        assert_eq!(
            plan_of(&[(1, 100), (1, 100), (1, 40), (1, 100)], true),
            vec![(0, 3, 100), (3, 1, 100)]
        );
        // A larger packet or another destination starts a new run.
        assert_eq!(
            plan_of(&[(1, 100), (1, 200), (2, 200), (2, 200)], true),
            vec![(0, 1, 100), (1, 1, 200), (2, 2, 200)]
        );
        // At most 64 KiB of UDP payload per super-datagram: 5192-byte packets go 12 at a time.
        let big = vec![(1, 5192); 30];
        assert_eq!(
            plan_of(&big, true),
            vec![(0, 12, 5192), (12, 12, 5192), (24, 6, 5192)]
        );
        // At most GSO_MAX_SEGMENTS segments.
        let small = vec![(1, 10); MAX_BATCH];
        assert_eq!(plan_of(&small, true), vec![(0, MAX_BATCH, 10)]);
        const { assert!(MAX_BATCH <= GSO_MAX_SEGMENTS) };
        // Without GSO: one message per packet.
        assert_eq!(
            plan_of(&[(1, 100), (1, 100)], false),
            vec![(0, 1, 100), (1, 1, 100)]
        );
        // Empty packets are never part of a run.
        assert_eq!(
            plan_of(&[(1, 0), (1, 0), (1, 5), (1, 0)], true),
            vec![(0, 1, 0), (1, 1, 0), (2, 1, 5), (3, 1, 0)]
        );
    }
}
