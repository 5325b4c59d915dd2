//! Classic libpcap files as a source: the UDP datagrams of a capture, read through
//! pcap-file ([`PcapSource`]) or mapped into memory and read in place ([`MappedPcap`],
//! behind [`PcapFileSource`], the engines' file input).

use std::fs::File;
use std::io::{self, BufReader};
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::time::Duration;

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_file::pcap::PcapReader;
use pcap_file::{DataLink, PcapError};

use super::{PacketSource, Poll};
use crate::net::frame::fast_udp_ipv4;

/// Replays the UDP datagrams of a pcap file (mapped into memory and read in place),
/// keeping those addressed to `endpoints` (all datagrams if the list is empty).
pub struct PcapFileSource {
    src: MappedPcap,
    endpoints: Vec<SocketAddrV4>,
    /// Datagrams skipped because of their destination.
    pub filtered: u64,
    /// The end was reached and the unusable frames reported.
    ended: bool,
}

impl PcapFileSource {
    /// Opens `path` (mapped into memory); `endpoints`: destinations to keep (empty: all).
    pub fn open(path: &Path, endpoints: Vec<SocketAddrV4>) -> io::Result<Self> {
        Ok(PcapFileSource {
            src: MappedPcap::open(path)?,
            endpoints,
            filtered: 0,
            ended: false,
        })
    }

    /// At the end of the capture, once: frames that gave no datagram are reported. None
    /// usable at all is an error (a capture of the wrong link type, or of no UDP, would
    /// otherwise end the engine with no output and no word why); some is a warning with
    /// the counts.
    fn check_end(&mut self) -> io::Result<()> {
        if std::mem::replace(&mut self.ended, true) {
            return Ok(());
        }
        let m = &self.src;
        let st = &m.stats;
        let unusable = st.not_udp + st.malformed + st.truncated;
        if unusable == 0 {
            return Ok(());
        }
        let counts = format!(
            "{} not IPv4/UDP, {} unparseable as {}, {} cut by the snap length",
            st.not_udp,
            st.malformed,
            link_name(m.link),
            st.truncated
        );
        if st.datagrams == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: none of its {} frames is a whole IPv4/UDP datagram ({counts}); \
                     the header says link type {} ({}): is that what was captured?",
                    m.path.display(),
                    st.frames,
                    m.link,
                    link_name(m.link)
                ),
            ));
        }
        tracing::warn!(
            file = %m.path.display(),
            link_type = m.link,
            frames = st.frames,
            datagrams = st.datagrams,
            not_udp = st.not_udp,
            malformed = st.malformed,
            truncated = st.truncated,
            "pcap: {unusable} of {} frames were skipped ({counts})",
            st.frames
        );
        Ok(())
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
                None => {
                    self.check_end()?;
                    return Ok(if n == 0 { Poll::End } else { Poll::Packets(n) });
                }
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
    /// Byte offset of a last record cut short by the end of the file (a capture that was
    /// still being written, or a copy that stopped early): the records before it were read,
    /// it and anything after were not.
    pub cut_at: Option<u64>,
}

/// Opens `path` for reading as a pcap file: an error names the file and says what failed
/// (a directory or other non-file is refused here rather than failing on its first read).
fn open_capture(path: &Path) -> io::Result<(File, u64)> {
    let named =
        |e: io::Error| io::Error::new(e.kind(), format!("opening pcap {}: {e}", path.display()));
    let file = File::open(path).map_err(named)?;
    let meta = file.metadata().map_err(named)?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("opening pcap {}: not a regular file", path.display()),
        ));
    }
    Ok((file, meta.len()))
}

/// The name of a supported link type, for messages.
fn link_name(link: u32) -> &'static str {
    match link {
        1 => "Ethernet",
        101 => "raw IP",
        228 => "IPv4",
        _ => "unknown",
    }
}

/// Says once, with the file and offset, that the capture ends in a cut record: `have`
/// bytes of a record that needs `need` (16 for a record header).
fn warn_cut(path: &Path, at: u64, have: u64, need: u64, frames: u64) {
    tracing::warn!(
        file = %path.display(),
        offset = at,
        have,
        need,
        frames_read = frames,
        "pcap ends in a cut record: the {frames} records before byte {at} were read, the last \
         ({have} of {need} bytes) was not"
    );
}

/// Reads the UDP datagrams of a pcap file (Ethernet or raw-IP link types).
pub struct PcapSource {
    reader: PcapReader<BufReader<File>>,
    datalink: DataLink,
    path: PathBuf,
    /// File length and the offset of the next record (for a cut or corrupt record's report).
    len: u64,
    pos: u64,
    /// The end was reached (or a cut last record found).
    done: bool,
    /// Frame counters so far.
    pub stats: PcapSourceStats,
}

impl PcapSource {
    /// Opens `path`: a pcap file of Ethernet, raw-IP or IPv4 link type, or a clear error.
    pub fn open(path: &Path) -> io::Result<Self> {
        let (file, len) = open_capture(path)?;
        let reader = PcapReader::new(BufReader::with_capacity(1 << 20, file)).map_err(|e| {
            let why = match e {
                PcapError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    "shorter than a pcap header".to_string()
                }
                PcapError::IoError(e) => format!("reading its header: {e}"),
                other => format!("not a classic pcap file (pcapng is not supported): {other}"),
            };
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {why}", path.display()),
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
            path: path.to_path_buf(),
            len,
            pos: 24,
            done: false,
            stats: PcapSourceStats::default(),
        })
    }

    /// What stopped the reader at record offset `self.pos`: the end of the file inside the
    /// record (a cut last record: counted, warned about, the end) or a corrupt record (an
    /// error naming the file and offset).
    fn record_error<R>(&mut self, e: PcapError) -> io::Result<Option<R>> {
        let at = self.pos;
        let have = self.len.saturating_sub(at);
        // Bytes the record needs: its header, then the captured length its header gives.
        let need = if have < 16 {
            16
        } else {
            use std::os::unix::fs::FileExt;
            let mut h = [0u8; 16];
            File::open(&self.path)
                .and_then(|f| f.read_exact_at(&mut h, at))
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("reading pcap {} at byte {at}: {e}", self.path.display()),
                    )
                })?;
            let b = [h[8], h[9], h[10], h[11]];
            let incl = match self.reader.header().endianness {
                pcap_file::Endianness::Big => u32::from_be_bytes(b),
                pcap_file::Endianness::Little => u32::from_le_bytes(b),
            };
            16 + incl as u64
        };
        let corrupt = |why: String| {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: corrupt pcap record at byte {at}: {why}",
                    self.path.display()
                ),
            ))
        };
        match e {
            PcapError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                if need > have {
                    self.done = true;
                    self.stats.cut_at = Some(at);
                    warn_cut(&self.path, at, have, need, self.stats.frames);
                    Ok(None)
                } else {
                    corrupt(format!(
                        "captured length {} is larger than a frame",
                        need - 16
                    ))
                }
            }
            PcapError::IoError(e) => Err(io::Error::new(
                e.kind(),
                format!("reading pcap {} at byte {at}: {e}", self.path.display()),
            )),
            other => corrupt(other.to_string()),
        }
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
            if self.done {
                return Ok(None);
            }
            let pkt = match self.reader.next_packet() {
                None => {
                    self.done = true;
                    return Ok(None);
                }
                Some(Ok(p)) => p,
                Some(Err(e)) => return self.record_error(e),
            };
            self.pos += 16 + pkt.data.len() as u64;
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
    path: PathBuf,
    map: *const u8,
    len: usize,
    pos: usize,
    swap: bool,
    /// The header's link type (1 Ethernet, 101 raw IP, 228 IPv4).
    link: u32,
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
        let (file, len) = open_capture(path)?;
        let len = usize::try_from(len).map_err(|_| bad("too large to map"))?;
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
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "mapping pcap {} ({len} bytes) into memory: {e}",
                    path.display()
                ),
            ));
        }
        let mut r = MappedPcap {
            path: path.to_path_buf(),
            map: map as *const u8,
            len,
            pos: 24,
            swap: false,
            link: 1,
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
        r.link = link;
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

    /// The end of the file inside the record at `self.pos`: the records before it were
    /// read; this one is counted in `stats.cut_at`, warned about once, and is the end.
    #[cold]
    fn cut(&mut self, need: usize) {
        let have = self.len - self.pos;
        self.stats.cut_at = Some(self.pos as u64);
        warn_cut(
            &self.path,
            self.pos as u64,
            have as u64,
            need as u64,
            self.stats.frames,
        );
        self.pos = self.len;
    }

    /// Lends the next UDP datagram's destination and payload to `f`; `None` at the end.
    /// Unusable frames are counted and skipped; a last record cut short by the end of the
    /// file ends the capture (counted in `stats.cut_at`, with a warning).
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
                self.cut(16);
                return Ok(None);
            }
            let incl = self.u32_at(self.pos + 8) as usize;
            let orig = self.u32_at(self.pos + 12) as usize;
            let start = self.pos + 16;
            if incl > self.len - start {
                self.cut(16 + incl);
                return Ok(None);
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

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("gpucbf-pcap-recv-{}-{name}", std::process::id()))
    }

    /// A little-endian microsecond capture of `n` Ethernet/IPv4/UDP frames with 100-byte
    /// payloads (payload k filled with k); the offset of each record.
    fn capture(path: &Path, n: u8) -> Vec<u64> {
        let mut out = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&65535u32.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        let mut offsets = Vec::new();
        for k in 0..n {
            let mut frame = Vec::new();
            etherparse::PacketBuilder::ethernet2([2; 6], [3; 6])
                .ipv4(
                    Ipv4Addr::LOCALHOST.octets(),
                    Ipv4Addr::LOCALHOST.octets(),
                    1,
                )
                .udp(7148, 7149)
                .write(&mut frame, &[k; 100])
                .unwrap();
            offsets.push(out.len() as u64);
            out.extend_from_slice(&(k as u32).to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
            out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
            out.extend_from_slice(&frame);
        }
        std::fs::write(path, out).unwrap();
        offsets
    }

    fn read_mapped(path: &Path) -> (Vec<Vec<u8>>, PcapSourceStats) {
        let mut src = PcapFileSource::open(path, Vec::new()).unwrap();
        let mut got = Vec::new();
        while src.recv_batch(&mut |p| got.push(p.to_vec())).unwrap() != Poll::End {}
        (got, src.stats().clone())
    }

    fn read_streamed(path: &Path) -> (Vec<Vec<u8>>, PcapSourceStats) {
        let mut src = PcapSource::open(path).unwrap();
        let mut got = Vec::new();
        while let Some(d) = src.next_datagram().unwrap() {
            got.push(d.payload);
        }
        assert!(src.next_datagram().unwrap().is_none());
        (got, src.stats.clone())
    }

    /// A capture whose last record is cut (inside its header or its data) gives every
    /// record before it, records where it was cut and ends; it is not an error.
    #[test]
    fn a_cut_last_record_ends_the_capture_after_the_good_ones() {
        let whole = tmp("whole.pcap");
        let offsets = capture(&whole, 5);
        let bytes = std::fs::read(&whole).unwrap();
        let last = offsets[4];
        assert_eq!(bytes.len() as u64, last + 16 + 142);
        let cut = tmp("cut.pcap");
        for keep in [last + 1, last + 15, last + 16, last + 16 + 100] {
            std::fs::write(&cut, &bytes[..keep as usize]).unwrap();
            for (got, stats) in [read_mapped(&cut), read_streamed(&cut)] {
                assert_eq!(got.len(), 4, "cut at {keep}");
                assert!(got.iter().enumerate().all(|(k, p)| p == &[k as u8; 100]));
                assert_eq!(stats.cut_at, Some(last), "cut at {keep}");
                assert_eq!((stats.frames, stats.datagrams), (4, 4));
            }
        }
        for (got, stats) in [read_mapped(&whole), read_streamed(&whole)] {
            assert_eq!((got.len(), stats.cut_at), (5, None));
        }
        std::fs::remove_file(&whole).ok();
        std::fs::remove_file(&cut).ok();
    }

    /// Reads `path` through the engines' source to the end: the payloads, or the error.
    fn read_to_end(path: &Path) -> io::Result<Vec<Vec<u8>>> {
        let mut src = PcapFileSource::open(path, Vec::new())?;
        let mut got = Vec::new();
        for _ in 0..1000 {
            if src.recv_batch(&mut |p| got.push(p.to_vec()))? == Poll::End {
                // Reported once: a further call is a plain end.
                assert_eq!(src.recv_batch(&mut |_| {}).unwrap(), Poll::End);
                return Ok(got);
            }
        }
        panic!("no end");
    }

    /// An Ethernet capture whose header says link type 101 (raw IP) gives no datagram:
    /// that is an error naming the file, the link type and the counts (the engines ended
    /// with exit 0, no output and no word). Some unusable frames among good ones are
    /// skipped (and warned about), not an error.
    #[test]
    fn a_capture_with_no_usable_frame_is_an_error() {
        let path = tmp("link101.pcap");
        capture(&path, 3);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20..24].copy_from_slice(&101u32.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let e = read_to_end(&path).unwrap_err().to_string();
        assert!(
            e.contains(&*path.to_string_lossy())
                && e.contains("none of its 3 frames")
                && e.contains("link type 101 (raw IP)")
                && e.contains("3 unparseable as raw IP"),
            "{e}"
        );
        // Ethernet again, plus a record that is not a UDP datagram: the 3 good ones.
        bytes[20..24].copy_from_slice(&1u32.to_le_bytes());
        for v in [0u32, 0, 20, 20] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&[0xee; 20]);
        std::fs::write(&path, &bytes).unwrap();
        let got = read_to_end(&path).unwrap();
        assert_eq!(got.len(), 3);
        // An empty capture is not an error: there is nothing to say.
        std::fs::write(&path, &bytes[..24]).unwrap();
        assert!(read_to_end(&path).unwrap().is_empty());
        std::fs::remove_file(&path).ok();
    }

    /// Files that cannot be read as captures fail with the file named and what is wrong.
    #[test]
    fn unreadable_captures_are_named() {
        let err = |p: &Path| {
            let a = PcapFileSource::open(p, Vec::new())
                .err()
                .unwrap()
                .to_string();
            let b = PcapSource::open(p).err().unwrap().to_string();
            (a, b)
        };
        let missing = tmp("missing.pcap");
        for e in <[String; 2]>::from(err(&missing)) {
            assert!(e.contains(&*missing.to_string_lossy()), "{e}");
            assert!(
                e.contains("opening pcap") && e.contains("No such file"),
                "{e}"
            );
        }
        let dir = std::env::temp_dir();
        for e in <[String; 2]>::from(err(&dir)) {
            assert!(e.contains(&*dir.to_string_lossy()), "{e}");
            assert!(e.contains("not a regular file"), "{e}");
        }
        let short = tmp("short.pcap");
        std::fs::write(&short, [0xd4, 0xc3, 0xb2, 0xa1, 2, 0]).unwrap();
        for e in <[String; 2]>::from(err(&short)) {
            assert!(e.contains(&*short.to_string_lossy()), "{e}");
            assert!(e.contains("shorter than a pcap header"), "{e}");
        }
        std::fs::remove_file(&short).ok();
    }
}
