//! Classic libpcap files as a sink: UDP/IPv4/Ethernet frames with valid checksums, written
//! instead of sent. The file only ever receives whole records: a write that fails part-way
//! (a full disk, a file-size limit) is cut back to the last whole record, so the file stays
//! readable whatever stops the engine.

use std::fs::File;
use std::io::{self, Write};
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, PcapError};

use super::PacketSink;
use crate::net::frame::dest_mac;

/// Where a pcap file's bytes land: appended to, measured and cut back.
trait Store: Write + Send {
    /// Bytes stored.
    fn len(&self) -> io::Result<u64>;
    /// Cuts the store back to `n` bytes.
    fn truncate(&mut self, n: u64) -> io::Result<()>;
}

impl Store for File {
    fn len(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn truncate(&mut self, n: u64) -> io::Result<()> {
        self.set_len(n)
    }
}

/// The file's bytes, buffered and written out only in whole records. When a write fails
/// part-way, the store is cut back to the last whole record that landed, and every later
/// write fails (the file then ends cleanly at that record).
struct Records<S: Store> {
    store: S,
    buf: Vec<u8>,
    /// Ends of the whole records in `buf`.
    ends: Vec<usize>,
    /// `buf` is written out once it holds this many bytes of whole records.
    cap: usize,
    /// Bytes of whole records in the store.
    on_disk: u64,
    broken: bool,
}

impl<S: Store> Records<S> {
    fn new(store: S, cap: usize) -> Self {
        Records {
            store,
            buf: Vec::with_capacity(cap),
            ends: Vec::new(),
            cap,
            on_disk: 0,
            broken: false,
        }
    }

    /// The bytes written since the last call are one whole record.
    fn end_record(&mut self) -> io::Result<()> {
        if self.ends.last() != Some(&self.buf.len()) {
            self.ends.push(self.buf.len());
        }
        if self.buf.len() >= self.cap {
            self.write_out()?;
        }
        Ok(())
    }

    fn write_out(&mut self) -> io::Result<()> {
        let whole = self.ends.last().copied().unwrap_or(0);
        if whole == 0 {
            return Ok(());
        }
        if let Err(e) = self.store.write_all(&self.buf[..whole]) {
            // Keep the records that landed whole; cut off the one that landed in part.
            let landed = self.store.len().unwrap_or(self.on_disk);
            let landed = landed.saturating_sub(self.on_disk);
            let keep = self
                .ends
                .iter()
                .rev()
                .find(|&&end| end as u64 <= landed)
                .copied()
                .unwrap_or(0);
            if landed > keep as u64 {
                let _ = self.store.truncate(self.on_disk + keep as u64);
            }
            self.on_disk += keep as u64;
            self.buf.clear();
            self.ends.clear();
            self.broken = true;
            return Err(e);
        }
        self.on_disk += whole as u64;
        self.buf.drain(..whole);
        self.ends.clear();
        Ok(())
    }

    fn check(&self) -> io::Result<()> {
        if self.broken {
            return Err(io::Error::other(
                "an earlier write failed; the file ends at the last whole record",
            ));
        }
        Ok(())
    }
}

impl<S: Store> Write for Records<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.check()?;
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.check()?;
        self.write_out()?;
        self.store.flush()
    }
}

/// The records shared between the pcap writer and the sink, so the sink can mark record
/// ends and flush (pcap-file's writer does not expose its inner writer).
#[derive(Clone)]
struct SharedFile(Arc<Mutex<Records<File>>>);

impl SharedFile {
    fn end_record(&self) -> io::Result<()> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("poisoned"))?
            .end_record()
    }
}

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
        // A file-size limit (RLIMIT_FSIZE) then fails the write with EFBIG, handled as a full
        // disk, instead of killing the process with the file cut mid-record.
        // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        }
        let file = File::create(path).map_err(|e| io_named(path, "creating", e))?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 65535,
            ..Default::default()
        };
        let file = SharedFile(Arc::new(Mutex::new(Records::new(file, 1 << 20))));
        let writer = PcapWriter::with_header(file.clone(), header)
            .map_err(|e| named(path, "writing the header of", e))?;
        file.end_record()
            .map_err(|e| io_named(path, "writing the header of", e))?;
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
            .map_err(|e| named(&self.path, "writing", e))
            .and_then(|_| {
                self.file
                    .end_record()
                    .map_err(|e| io_named(&self.path, "writing", e))
            })
            .inspect_err(|_| self.failed = true)?;
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
        crate::telemetry::logged(|| drop(sink)).1
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

#[cfg(test)]
mod tests_records {
    use super::*;

    /// A disk with `room` bytes left: writes take what fits, then fail with ENOSPC.
    struct Disk {
        data: Vec<u8>,
        room: usize,
    }

    impl Write for Disk {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let n = b.len().min(self.room - self.data.len());
            if n == 0 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.data.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Store for Disk {
        fn len(&self) -> io::Result<u64> {
            Ok(self.data.len() as u64)
        }
        fn truncate(&mut self, n: u64) -> io::Result<()> {
            self.data.truncate(n as usize);
            Ok(())
        }
    }

    /// Records of 10 bytes written in two parts each, 25-byte buffer (written out every
    /// three records), 37 bytes of room: the second write-out lands 7 bytes and fails, the
    /// disk is cut back to the three whole records of the first (30 bytes), and every later
    /// write or flush fails without adding a byte.
    #[test]
    fn a_full_disk_keeps_only_whole_records() {
        let mut r = Records::new(
            Disk {
                data: Vec::new(),
                room: 37,
            },
            25,
        );
        let mut err = None;
        for i in 0..10u8 {
            r.write_all(&[i; 4]).unwrap();
            r.write_all(&[i; 6]).unwrap();
            if let Err(e) = r.end_record() {
                err = Some((i, e));
                break;
            }
        }
        let (at, e) = err.expect("the disk fills");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(
            at, 5,
            "records 3-5 are the second write-out, which fills the disk"
        );
        let want: Vec<u8> = (0..3u8).flat_map(|i| [i; 10]).collect();
        assert_eq!(r.store.data, want);
        assert!(r.write_all(&[9; 10]).is_err());
        assert!(r.flush().is_err());
        assert_eq!(r.store.data.len(), 30);
    }

    /// Nothing fails: every record reaches the store, in order, by the flush.
    #[test]
    fn records_reach_the_store_whole() {
        let mut r = Records::new(
            Disk {
                data: Vec::new(),
                room: 1000,
            },
            25,
        );
        for i in 0..7u8 {
            r.write_all(&[i; 10]).unwrap();
            r.end_record().unwrap();
        }
        assert_eq!(r.store.data.len(), 60, "two write-outs of 30 bytes so far");
        r.flush().unwrap();
        let want: Vec<u8> = (0..7u8).flat_map(|i| [i; 10]).collect();
        assert_eq!(r.store.data, want);
    }
}
