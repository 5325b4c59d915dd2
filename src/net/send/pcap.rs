//! Classic libpcap files as a sink: UDP/IPv4/Ethernet frames with valid checksums, written
//! instead of sent.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddrV4;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;

use super::PacketSink;
use crate::net::frame::dest_mac;

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
    /// Packets written.
    pub packets: u64,
    /// UDP payload bytes written.
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
