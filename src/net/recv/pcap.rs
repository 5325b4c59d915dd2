//! Classic libpcap files as a source: the UDP datagrams of a capture, read through
//! pcap-file ([`PcapSource`]) or mapped into memory and read in place ([`MappedPcap`],
//! behind [`PcapFileSource`], the engines' file input).

use std::fs::File;
use std::io::{self, BufReader};
use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_file::pcap::PcapReader;
use pcap_file::DataLink;

use super::{PacketSource, Poll};
use crate::net::frame::fast_udp_ipv4;

/// Replays the UDP datagrams of a pcap file (mapped into memory and read in place),
/// keeping those addressed to `endpoints` (all datagrams if the list is empty).
pub struct PcapFileSource {
    src: MappedPcap,
    endpoints: Vec<SocketAddrV4>,
    /// Datagrams skipped because of their destination.
    pub filtered: u64,
}

impl PcapFileSource {
    /// Opens `path` (mapped into memory); `endpoints`: destinations to keep (empty: all).
    pub fn open(path: &Path, endpoints: Vec<SocketAddrV4>) -> io::Result<Self> {
        Ok(PcapFileSource {
            src: MappedPcap::open(path)?,
            endpoints,
            filtered: 0,
        })
    }

    /// The capture's frame counters.
    pub fn stats(&self) -> &PcapSourceStats {
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

/// One UDP datagram from a capture.
#[derive(Debug, Clone)]
pub struct Datagram {
    /// Capture timestamp.
    pub time: Duration,
    /// Source address and UDP port.
    pub src: SocketAddrV4,
    /// Destination address and UDP port.
    pub dst: SocketAddrV4,
    /// The UDP payload.
    pub payload: Vec<u8>,
}

/// Counters of frames a [`PcapSource`] could not use.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PcapSourceStats {
    /// Frames read.
    pub frames: u64,
    /// UDP datagrams handed on.
    pub datagrams: u64,
    /// Not IPv4/UDP (ARP, IPv6, TCP, fragments...).
    pub not_udp: u64,
    /// Frames that could not be parsed.
    pub malformed: u64,
    /// Frames captured shorter than on the wire (snaplen).
    pub truncated: u64,
}

/// Reads the UDP datagrams of a pcap file (Ethernet or raw-IP link types).
pub struct PcapSource {
    reader: PcapReader<BufReader<File>>,
    datalink: DataLink,
    /// Frame counters so far.
    pub stats: PcapSourceStats,
}

impl PcapSource {
    /// Opens `path`: a pcap file of Ethernet, raw-IP or IPv4 link type, or a clear error.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let reader = PcapReader::new(BufReader::with_capacity(1 << 20, file)).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        })?;
        let datalink = reader.header().datalink;
        match datalink {
            DataLink::ETHERNET | DataLink::RAW | DataLink::IPV4 => {}
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: unsupported pcap link type {other:?}", path.display()),
                ))
            }
        }
        Ok(PcapSource {
            reader,
            datalink,
            stats: PcapSourceStats::default(),
        })
    }

    /// The next UDP datagram, `None` at end of file. Unusable frames are counted and skipped;
    /// a corrupt file is an error.
    pub fn next_datagram(&mut self) -> io::Result<Option<Datagram>> {
        self.next_with(|time, src, dst, payload| Datagram {
            time,
            src,
            dst,
            payload: payload.to_vec(),
        })
    }

    /// The next UDP datagram's destination and payload, lent to `f` straight from the
    /// reader's buffer (no copy, no allocation); `None` at end of file.
    pub fn next_payload<R>(
        &mut self,
        f: impl FnOnce(SocketAddrV4, &[u8]) -> R,
    ) -> io::Result<Option<R>> {
        self.next_with(|_, _, dst, payload| f(dst, payload))
    }

    fn next_with<R>(
        &mut self,
        f: impl FnOnce(Duration, SocketAddrV4, SocketAddrV4, &[u8]) -> R,
    ) -> io::Result<Option<R>> {
        loop {
            let pkt = match self.reader.next_packet() {
                None => return Ok(None),
                Some(Ok(p)) => p,
                Some(Err(e)) => {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
                }
            };
            self.stats.frames += 1;
            if (pkt.data.len() as u32) < pkt.orig_len {
                self.stats.truncated += 1;
                continue;
            }
            let sliced = match self.datalink {
                DataLink::ETHERNET => SlicedPacket::from_ethernet(&pkt.data),
                _ => SlicedPacket::from_ip(&pkt.data),
            };
            let sliced = match sliced {
                Ok(s) => s,
                Err(_) => {
                    self.stats.malformed += 1;
                    continue;
                }
            };
            let (src_ip, dst_ip) = match &sliced.net {
                Some(NetSlice::Ipv4(ip)) if !ip.is_payload_fragmented() => {
                    (ip.header().source_addr(), ip.header().destination_addr())
                }
                _ => {
                    self.stats.not_udp += 1;
                    continue;
                }
            };
            match &sliced.transport {
                Some(TransportSlice::Udp(udp)) => {
                    self.stats.datagrams += 1;
                    return Ok(Some(f(
                        pkt.timestamp,
                        SocketAddrV4::new(src_ip, udp.source_port()),
                        SocketAddrV4::new(dst_ip, udp.destination_port()),
                        udp.payload(),
                    )));
                }
                _ => {
                    self.stats.not_udp += 1;
                    continue;
                }
            }
        }
    }
}

/// A pcap file mapped into memory and read in place: the receive path of the file source
/// (no read() copy through the kernel, no per-packet buffer). Classic pcap only, either
/// byte order, micro- or nanosecond timestamps; Ethernet, raw-IP and IPv4 link types.
pub struct MappedPcap {
    map: *const u8,
    len: usize,
    pos: usize,
    swap: bool,
    ethernet: bool,
    /// Frame counters so far.
    pub stats: PcapSourceStats,
}

// SAFETY: the mapping is private to this reader and read-only.
unsafe impl Send for MappedPcap {}

impl MappedPcap {
    /// Maps `path`: a classic pcap file of a supported link type, or a clear error.
    pub fn open(path: &Path) -> io::Result<Self> {
        use std::os::fd::AsRawFd;
        let bad = |m: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {m}", path.display()),
            )
        };
        let file = File::open(path)?;
        let len = file.metadata()?.len() as usize;
        if len < 24 {
            return Err(bad("shorter than a pcap header"));
        }
        // SAFETY: a private read-only mapping of the whole file; unmapped in Drop.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut r = MappedPcap {
            map: map as *const u8,
            len,
            pos: 24,
            swap: false,
            ethernet: true,
            stats: PcapSourceStats::default(),
        };
        // SAFETY: advisory only.
        unsafe { libc::madvise(map, len, libc::MADV_SEQUENTIAL) };
        let h = r.bytes();
        let magic = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        r.swap = match magic {
            0xa1b2_c3d4 | 0xa1b2_3c4d => false,
            0xd4c3_b2a1 | 0x4d3c_b2a1 => true,
            _ => return Err(bad("not a classic pcap file (pcapng is not supported)")),
        };
        let link = r.u32_at(20);
        r.ethernet = match link {
            1 => true,
            101 | 228 => false,
            other => return Err(bad(&format!("unsupported pcap link type {other}"))),
        };
        Ok(r)
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping covers len bytes for the reader's lifetime.
        unsafe { std::slice::from_raw_parts(self.map, self.len) }
    }

    fn u32_at(&self, at: usize) -> u32 {
        let b = self.bytes();
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if self.swap {
            u32::from_be_bytes(v)
        } else {
            u32::from_le_bytes(v)
        }
    }

    /// Lends the next UDP datagram's destination and payload to `f`; `None` at the end.
    /// Unusable frames are counted and skipped; a record running past the end of the file
    /// is an error.
    #[inline]
    pub fn next_payload<R>(
        &mut self,
        f: impl FnOnce(SocketAddrV4, &[u8]) -> R,
    ) -> io::Result<Option<R>> {
        loop {
            if self.pos >= self.len {
                return Ok(None);
            }
            if self.len - self.pos < 16 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "truncated pcap record header",
                ));
            }
            let incl = self.u32_at(self.pos + 8) as usize;
            let orig = self.u32_at(self.pos + 12) as usize;
            let start = self.pos + 16;
            if incl > self.len - start {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "truncated pcap record",
                ));
            }
            self.pos = start + incl;
            self.stats.frames += 1;
            if incl < orig {
                self.stats.truncated += 1;
                continue;
            }
            // SAFETY: start + incl <= len (checked above); the mapping outlives the borrow.
            let frame: &[u8] = unsafe { std::slice::from_raw_parts(self.map.add(start), incl) };
            if self.ethernet {
                if let Some((dst, payload)) = fast_udp_ipv4(frame) {
                    self.stats.datagrams += 1;
                    return Ok(Some(f(dst, payload)));
                }
            }
            let sliced = if self.ethernet {
                SlicedPacket::from_ethernet(frame)
            } else {
                SlicedPacket::from_ip(frame)
            };
            let Ok(sliced) = sliced else {
                self.stats.malformed += 1;
                continue;
            };
            let dst_ip = match &sliced.net {
                Some(NetSlice::Ipv4(ip)) if !ip.is_payload_fragmented() => {
                    ip.header().destination_addr()
                }
                _ => {
                    self.stats.not_udp += 1;
                    continue;
                }
            };
            match &sliced.transport {
                Some(TransportSlice::Udp(udp)) => {
                    self.stats.datagrams += 1;
                    return Ok(Some(f(
                        SocketAddrV4::new(dst_ip, udp.destination_port()),
                        udp.payload(),
                    )));
                }
                _ => {
                    self.stats.not_udp += 1;
                    continue;
                }
            }
        }
    }
}

impl Drop for MappedPcap {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `open`, once.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.len) };
    }
}
