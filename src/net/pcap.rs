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
                    return Ok(Some(Datagram {
                        time: pkt.timestamp,
                        src: SocketAddrV4::new(src_ip, udp.source_port()),
                        dst: SocketAddrV4::new(dst_ip, udp.destination_port()),
                        payload: udp.payload().to_vec(),
                    }));
                }
                _ => {
                    self.stats.not_udp += 1;
                    continue;
                }
            }
        }
    }
}
