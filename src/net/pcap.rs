//! Classic libpcap files: a sink that writes UDP/IPv4/Ethernet frames with valid checksums,
//! and a source that yields the UDP datagrams of a capture.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;

use super::PacketSink;

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

/// A buffered file shared between the pcap writer and the sink, so the sink can flush it
/// (pcap-file's writer does not expose its inner writer).
#[derive(Clone)]
struct SharedFile(Arc<Mutex<BufWriter<File>>>);

impl Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("poisoned"))?
            .write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("poisoned"))?
            .flush()
    }
}

/// Writes packets into a pcap file instead of sending them.
pub struct PcapSink {
    writer: PcapWriter<SharedFile>,
    file: SharedFile,
    src: SocketAddrV4,
    ttl: u8,
    scratch: Vec<u8>,
    frame: Vec<u8>,
    /// Timestamp of the next frame; advances by `tick` per packet so files sort stably.
    time: Duration,
    tick: Duration,
    pub packets: u64,
    pub bytes: u64,
}

impl PcapSink {
    /// Creates `path`; frames come from `src` (address and UDP port) with the given TTL.
    pub fn create(path: &Path, src: SocketAddrV4, ttl: u8) -> io::Result<Self> {
        let file = File::create(path)?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 65535,
            ..Default::default()
        };
        let file = SharedFile(Arc::new(Mutex::new(BufWriter::with_capacity(
            1 << 20,
            file,
        ))));
        let writer = PcapWriter::with_header(file.clone(), header).map_err(io::Error::other)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Ok(PcapSink {
            writer,
            file,
            src,
            ttl,
            scratch: Vec::new(),
            frame: Vec::new(),
            time: now,
            tick: Duration::from_micros(1),
            packets: 0,
            bytes: 0,
        })
    }
}

impl PacketSink for PcapSink {
    fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> io::Result<()> {
        self.scratch.clear();
        for p in parts {
            self.scratch.extend_from_slice(p);
        }
        let src_ip = *self.src.ip();
        let builder = PacketBuilder::ethernet2(dest_mac(src_ip), dest_mac(*dst.ip()))
            .ipv4(src_ip.octets(), dst.ip().octets(), self.ttl)
            .udp(self.src.port(), dst.port());
        self.frame.clear();
        builder
            .write(&mut self.frame, &self.scratch)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let len = self.frame.len() as u32;
        self.writer
            .write_packet(&PcapPacket::new(self.time, len, &self.frame))
            .map_err(io::Error::other)?;
        self.time += self.tick;
        self.packets += 1;
        self.bytes += self.scratch.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }

    fn is_offline(&self) -> bool {
        true
    }
}

impl Drop for PcapSink {
    fn drop(&mut self) {
        let _ = PacketSink::flush(self);
    }
}

/// One UDP datagram from a capture.
#[derive(Debug, Clone)]
pub struct Datagram {
    pub time: Duration,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub payload: Vec<u8>,
}

/// Counters of frames a [`PcapSource`] could not use.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PcapSourceStats {
    pub frames: u64,
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
    pub stats: PcapSourceStats,
}

impl PcapSource {
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
    pub stats: PcapSourceStats,
}

// SAFETY: the mapping is private to this reader and read-only.
unsafe impl Send for MappedPcap {}

impl MappedPcap {
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
                if let Some((dst, payload)) = super::source::fast_udp_ipv4(frame) {
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
