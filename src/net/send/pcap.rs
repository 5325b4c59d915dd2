//! Classic libpcap files as a sink: UDP/IPv4/Ethernet frames with valid checksums, written
//! instead of sent.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, PcapError};

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

/// `e` as an error that names the file and the operation (pcap-file's own message for an
/// I/O error is "Error reading bytes", even for a write).
fn named(path: &Path, op: &str, e: PcapError) -> io::Error {
    match e {
        PcapError::IoError(e) => io_named(path, op, e),
        other => io::Error::other(format!("{op} pcap {}: {other}", path.display())),
    }
}

fn io_named(path: &Path, op: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{op} pcap {}: {e}", path.display()))
}

/// Writes packets into a pcap file instead of sending them.
pub struct PcapSink {
    writer: PcapWriter<SharedFile>,
    file: SharedFile,
    path: PathBuf,
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
    /// A write or flush failed and the error went to the caller: dropping does not
    /// report it again.
    failed: bool,
}

impl PcapSink {
    /// Creates `path`; frames come from `src` (address and UDP port) with the given TTL.
    pub fn create(path: &Path, src: SocketAddrV4, ttl: u8) -> io::Result<Self> {
        let file = File::create(path).map_err(|e| io_named(path, "creating", e))?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 65535,
            ..Default::default()
        };
        let file = SharedFile(Arc::new(Mutex::new(BufWriter::with_capacity(
            1 << 20,
            file,
        ))));
        let writer = PcapWriter::with_header(file.clone(), header)
            .map_err(|e| named(path, "writing the header of", e))?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Ok(PcapSink {
            writer,
            file,
            path: path.to_path_buf(),
            src,
            ttl,
            scratch: Vec::new(),
            frame: Vec::new(),
            time: now,
            tick: Duration::from_micros(1),
            packets: 0,
            bytes: 0,
            failed: false,
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
            .map_err(|e| {
                self.failed = true;
                named(&self.path, "writing", e)
            })?;
        self.time += self.tick;
        self.packets += 1;
        self.bytes += self.scratch.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush().map_err(|e| {
            self.failed = true;
            io_named(&self.path, "writing", e)
        })
    }

    fn is_offline(&self) -> bool {
        true
    }
}

impl Drop for PcapSink {
    fn drop(&mut self) {
        // Callers flush and see the error; one that did not still hears of lost packets
        // (once: an error already returned is not logged again).
        if self.failed {
            return;
        }
        if let Err(e) = PacketSink::flush(self) {
            tracing::error!(error = %e, "pcap output incomplete");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    /// What dropping `sink` logs.
    fn logged_on_drop(sink: PcapSink) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let w = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || w.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || drop(sink));
        let out = buf.0.lock().unwrap().clone();
        String::from_utf8(out).unwrap()
    }

    /// A write that fails (a full disk) names the file and the operation, not pcap-file's
    /// "Error reading bytes"; so does a file that cannot be created.
    #[test]
    fn write_errors_name_the_file() {
        let src = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148);
        let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7149);
        let full = Path::new("/dev/full");
        let mut sink = PcapSink::create(full, src, 1).unwrap();
        let e = (0..20_000)
            .map(|_| sink.send(dst, &[&[0u8; 1000]]))
            .find_map(Result::err)
            .or_else(|| sink.flush().err())
            .expect("/dev/full refuses writes")
            .to_string();
        assert!(e.contains("writing pcap /dev/full"), "{e}");
        assert!(e.contains("No space left on device"), "{e}");
        assert!(!e.contains("Error reading bytes"), "{e}");
        // The error went to the caller: dropping the sink does not log it again.
        assert_eq!(logged_on_drop(sink), "");
        // Unflushed packets that a caller never flushed are logged when dropped.
        let mut sink = PcapSink::create(full, src, 1).unwrap();
        sink.send(dst, &[&[0u8; 100]]).unwrap();
        let log = logged_on_drop(sink);
        assert!(log.contains("pcap output incomplete"), "{log}");
        assert!(log.contains("writing pcap /dev/full"), "{log}");
        let nowhere =
            std::env::temp_dir().join(format!("gpucbf-none-{}/x.pcap", std::process::id()));
        let e = PcapSink::create(&nowhere, src, 1)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("creating pcap") && e.contains(&*nowhere.to_string_lossy()),
            "{e}"
        );
        let e = PcapSink::create(&std::env::temp_dir(), src, 1)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("creating pcap") && e.contains("directory"),
            "{e}"
        );
    }
}
