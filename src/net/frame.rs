//! Ethernet II / IPv4 / UDP framing, shared by the sources that see whole frames (pcap files,
//! DPDK, ibverbs) and the sinks that build them (pcap files, PeerDirect): the MAC of an IPv4
//! destination, a fast path for the common frame, and exact classification with etherparse.

use std::net::{Ipv4Addr, SocketAddrV4};

/// Ethernet MAC for an IPv4 destination: the multicast mapping for 224/4, otherwise a fixed
/// locally administered address.
pub fn dest_mac(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    if ip.is_multicast() {
        [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
    } else {
        [0x02, 0x00, o[0], o[1], o[2], o[3]]
    }
}

/// Ethernet II + IPv4 + UDP header bytes of the frames the sinks build.
pub const UDP_HEADERS: usize = 14 + 20 + 8;

/// IPv4 header checksum of `h` (0 when `h` already carries a correct one).
pub fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum = 0u32;
    for w in h.chunks(2) {
        sum += u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Writes the Ethernet II, IPv4 (no options, identification 0, don't fragment, header
/// checksum computed) and UDP (checksum 0, valid over IPv4) headers of a frame from
/// `src_mac`/`src` to `dst` carrying `udp_payload` bytes into `h[..UDP_HEADERS]`. The
/// destination MAC is [`dest_mac`]'s unless `dst_mac` names one (a resolved neighbour).
pub fn write_udp_headers(
    h: &mut [u8],
    src_mac: [u8; 6],
    dst_mac: Option<[u8; 6]>,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    ttl: u8,
    udp_payload: usize,
) {
    h[0..6].copy_from_slice(&dst_mac.unwrap_or_else(|| dest_mac(*dst.ip())));
    h[6..12].copy_from_slice(&src_mac);
    h[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut h[14..34];
    ip.fill(0);
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + 8 + udp_payload) as u16).to_be_bytes());
    ip[6] = 0x40;
    ip[8] = ttl;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.ip().octets());
    ip[16..20].copy_from_slice(&dst.ip().octets());
    let c = ipv4_checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp = &mut h[34..42];
    udp[0..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&((8 + udp_payload) as u16).to_be_bytes());
    udp[6..8].copy_from_slice(&[0, 0]);
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
