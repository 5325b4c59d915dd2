//! DPDK receive (cargo feature `dpdk`): EAL initialised from a user string, one port, one
//! RX queue, `rte_eth_rx_burst`, Ethernet/IPv4/UDP parsed with etherparse and filtered by
//! destination endpoint.
//!
//! The EAL can be initialised once per process, so at most one [`DpdkSource`] exists per
//! process (a second one is a clear error). With a `net_pcap` `rx_pcap=FILE` vdev the
//! source reports [`Poll::End`] once the file has been delivered (no packet for
//! `end_after_idle` after having received some).

use std::ffi::{CStr, CString};
use std::io;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dpdk_sys as sys;

use super::{PacketSource, Poll};
use crate::net::frame::{deliver_frame, fast_udp_ipv4, FrameStats};

/// Set once the EAL has been initialised in this process (it cannot be initialised twice,
/// not even after `rte_eal_cleanup`).
static EAL_USED: AtomicBool = AtomicBool::new(false);

const BURST: usize = 64;
/// Largest frame we accept in one mbuf segment (jumbo digitiser packets fit).
const MAX_FRAME: u32 = 9216 + 64;

/// Counters of the DPDK source: frame counters plus the port's own.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct DpdkStats {
    /// Frame counters of the receive path.
    #[serde(flatten)]
    pub frames: FrameStats,
    /// Port counters at the last [`DpdkSource::port_stats`] call.
    pub port_ipackets: u64,
    /// Packets the port dropped for lack of room in the RX queue (`imissed`).
    pub port_imissed: u64,
    /// Receive failures for lack of mbufs (`rx_nombuf`).
    pub port_rx_nombuf: u64,
}

/// Splits the user's EAL string and makes sure runs cannot collide in /var/run/dpdk: unless
/// the user already chose `--file-prefix` or `--in-memory`, a unique `--file-prefix` is added.
pub fn eal_argv(user: &str) -> Vec<String> {
    let mut v = vec!["gpucbf".to_string()];
    v.extend(user.split_whitespace().map(str::to_string));
    let has_prefix = v
        .iter()
        .any(|a| a == "--in-memory" || a.starts_with("--file-prefix"));
    if !has_prefix {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        v.push(format!(
            "--file-prefix=gpucbf-{}-{nanos}",
            std::process::id()
        ));
    }
    v
}

/// True if the EAL arguments replay a pcap file (the source then ends when it is drained).
pub fn replays_pcap_file(user: &str) -> bool {
    user.contains("rx_pcap=")
}

fn rte_err(what: &str, rc: i32) -> io::Error {
    let code = rc.unsigned_abs() as i32;
    // SAFETY: rte_strerror returns a pointer to a static or thread-local string.
    let msg = unsafe {
        let p = sys::rte_strerror(code);
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    io::Error::other(format!("DPDK {what} failed ({rc}: {msg})"))
}

/// One DPDK port with one RX queue.
pub struct DpdkSource {
    port: u16,
    pool: *mut sys::rte_mempool,
    endpoints: Vec<SocketAddrV4>,
    bufs: Vec<*mut sys::rte_mbuf>,
    scratch: Vec<u8>,
    /// `Some(d)`: report End once no packet arrived for `d` after some had arrived.
    end_after_idle: Option<Duration>,
    last_packet: Option<Instant>,
    idle_sleep: Duration,
    started: bool,
    /// Counters so far.
    pub stats: DpdkStats,
}

// SAFETY: the raw pointers are owned by this source (the mempool and the mbufs in flight)
// and only used from the thread that owns the source; DPDK allows rx_burst from any thread
// as long as one thread at a time polls a queue.
unsafe impl Send for DpdkSource {}

impl DpdkSource {
    /// Initialises the EAL with `eal_args` (e.g. `"--no-huge --no-pci -m 512 --vdev
    /// net_pcap0,rx_pcap=FILE"`), opens the first port with one RX queue and starts it.
    /// `endpoints`: destinations to keep (empty: every UDP datagram).
    pub fn new(eal_args: &str, endpoints: Vec<SocketAddrV4>) -> io::Result<Self> {
        if EAL_USED.swap(true, Ordering::SeqCst) {
            return Err(io::Error::other(
                "the DPDK EAL was already initialised in this process (one DPDK source per process)",
            ));
        }
        let args: Vec<CString> = eal_argv(eal_args)
            .into_iter()
            .map(CString::new)
            .collect::<Result<_, _>>()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in EAL arguments"))?;
        // The EAL may keep pointers into argv: leak it (once per process).
        let args: &'static [CString] = Box::leak(args.into_boxed_slice());
        let mut argv: Vec<*mut libc::c_char> = args
            .iter()
            .map(|a| a.as_ptr() as *mut libc::c_char)
            .collect();
        let argv: &'static mut [*mut libc::c_char] =
            Box::leak(argv.split_off(0).into_boxed_slice());
        // SAFETY: argv points at NUL-terminated strings that live for the whole process.
        let rc = unsafe { sys::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
        if rc < 0 {
            return Err(io::Error::other(format!(
                "DPDK EAL initialisation failed with arguments {:?} (see the EAL messages above)",
                eal_argv(eal_args)
            )));
        }
        let mut src = DpdkSource {
            port: 0,
            pool: std::ptr::null_mut(),
            endpoints,
            bufs: vec![std::ptr::null_mut(); BURST],
            scratch: Vec::new(),
            end_after_idle: replays_pcap_file(eal_args).then(|| Duration::from_millis(500)),
            last_packet: None,
            idle_sleep: Duration::from_micros(50),
            started: false,
            stats: DpdkStats::default(),
        };
        src.setup()?;
        Ok(src)
    }

    fn setup(&mut self) -> io::Result<()> {
        // SAFETY: plain EAL/ethdev calls after a successful rte_eal_init; every pointer
        // passed is valid for the call.
        unsafe {
            if sys::rte_eth_dev_count_avail() == 0 {
                return Err(io::Error::other(
                    "DPDK found no Ethernet port (give a --vdev or bind a NIC to a DPDK driver)",
                ));
            }
            let port = sys::rte_eth_find_next(0);
            if port as u32 >= sys::RTE_MAX_ETHPORTS {
                return Err(io::Error::other("DPDK found no valid port"));
            }
            self.port = port;
            let socket = sys::rte_eth_dev_socket_id(port).max(0);
            let name = CString::new(format!("gpucbf_rx{port}")).expect("no NUL");
            let room = (MAX_FRAME + sys::RTE_PKTMBUF_HEADROOM) as u16;
            self.pool = sys::rte_pktmbuf_pool_create(name.as_ptr(), 8191, 256, 0, room, socket);
            if self.pool.is_null() {
                return Err(io::Error::other(
                    "DPDK could not create the mbuf pool (too little EAL memory? try -m 512)",
                ));
            }
            let conf: sys::rte_eth_conf = std::mem::zeroed();
            let rc = sys::rte_eth_dev_configure(port, 1, 1, &conf);
            if rc < 0 {
                return Err(rte_err("rte_eth_dev_configure", rc));
            }
            let rc = sys::rte_eth_rx_queue_setup(
                port,
                0,
                1024,
                socket as u32,
                std::ptr::null(),
                self.pool,
            );
            if rc < 0 {
                return Err(rte_err("rte_eth_rx_queue_setup", rc));
            }
            let rc = sys::rte_eth_tx_queue_setup(port, 0, 512, socket as u32, std::ptr::null());
            if rc < 0 {
                return Err(rte_err("rte_eth_tx_queue_setup", rc));
            }
            let rc = sys::rte_eth_dev_start(port);
            if rc < 0 {
                return Err(rte_err("rte_eth_dev_start", rc));
            }
            self.started = true;
            // Multicast groups: not every PMD supports these (pcap files do not need them).
            let _ = sys::rte_eth_promiscuous_enable(port);
            let _ = sys::rte_eth_allmulticast_enable(port);
        }
        Ok(())
    }

    /// Changes the idle time after which a pcap replay counts as finished (`None`: never).
    pub fn set_end_after_idle(&mut self, d: Option<Duration>) {
        self.end_after_idle = d;
    }

    /// Reads the port counters into `stats` and returns them.
    pub fn port_stats(&mut self) -> &DpdkStats {
        // SAFETY: zeroed rte_eth_stats is valid; the port exists.
        unsafe {
            let mut s: sys::rte_eth_stats = std::mem::zeroed();
            if sys::rte_eth_stats_get(self.port, &mut s) == 0 {
                self.stats.port_ipackets = s.ipackets;
                self.stats.port_imissed = s.imissed;
                self.stats.port_rx_nombuf = s.rx_nombuf;
            }
        }
        &self.stats
    }
}

impl DpdkSource {
    /// The port this source polls.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Hands the UDP payloads of the `n` frames in `self.bufs[..n]` to `f`; returns how
    /// many were handed on. The mbufs stay owned by the caller.
    #[inline]
    fn deliver_burst(&mut self, n: usize, f: &mut dyn FnMut(&[u8])) -> usize {
        let mut handed = 0;
        self.stats.frames.frames += n as u64;
        for i in 0..n {
            let m = self.bufs[i];
            // SAFETY: rx_burst returned n valid mbufs; each segment's data lies at
            // buf_addr + data_off for data_len bytes. They are freed by the caller.
            unsafe {
                if i + 1 < n {
                    // The next frame's headers (Ethernet, IPv4, UDP, SPEAD pointers) span
                    // two cache lines: fetch them while this packet is copied.
                    let nx = &*self.bufs[i + 1];
                    let p = (nx.buf_addr as *const u8).add(nx.data_off as usize);
                    prefetch(p);
                    prefetch(p.add(64));
                }
                let seg = &*m;
                let first = std::slice::from_raw_parts(
                    (seg.buf_addr as *const u8).add(seg.data_off as usize),
                    seg.data_len as usize,
                );
                let ok = if seg.nb_segs <= 1 || seg.next.is_null() {
                    deliver_frame(&self.endpoints, &mut self.stats.frames, first, f)
                } else {
                    self.gather_and_deliver(m, f)
                };
                handed += ok as usize;
            }
        }
        handed
    }

    /// A chained (multi-segment) frame: copied into scratch first (rare: jumbo frames on
    /// PMDs without scatter-free receive).
    #[cold]
    unsafe fn gather_and_deliver(
        &mut self,
        m: *mut sys::rte_mbuf,
        f: &mut dyn FnMut(&[u8]),
    ) -> bool {
        self.scratch.clear();
        let mut s = m;
        while !s.is_null() {
            let r = &*s;
            self.scratch.extend_from_slice(std::slice::from_raw_parts(
                (r.buf_addr as *const u8).add(r.data_off as usize),
                r.data_len as usize,
            ));
            s = r.next;
        }
        deliver_frame(&self.endpoints, &mut self.stats.frames, &self.scratch, f)
    }

    /// The benchmark's kernel-bypass feed: the same receive path as
    /// [`PacketSource::recv_batch`] on a `net_ring` loop-back port (see [`RingReplay`]),
    /// except that the burst's frames go back into the ring (with their timestamps moved
    /// on by one ring's span) instead of being freed.
    pub fn recv_batch_replay(
        &mut self,
        f: &mut dyn FnMut(&[u8]),
        replay: &mut RingReplay,
    ) -> io::Result<Poll> {
        // SAFETY: bufs has room for BURST mbuf pointers; the port and queue are started.
        let n = unsafe { sys::rte_eth_rx_burst(self.port, 0, self.bufs.as_mut_ptr(), BURST as u16) }
            as usize;
        if n == 0 {
            return Ok(Poll::Idle);
        }
        let handed = self.deliver_burst(n, f);
        // SAFETY: the n mbufs came from rx_burst and are not used after being sent.
        unsafe { replay.requeue(self.port, &mut self.bufs[..n]) }?;
        Ok(Poll::Packets(handed))
    }

    /// Allocates mbufs from this source's pool, fills them with `frames` and sends them on
    /// the port (for a `net_ring` loop-back port: into the ring it receives from). Returns
    /// how many frames the port took.
    pub fn inject(&mut self, frames: &[Vec<u8>]) -> io::Result<usize> {
        let mut sent = 0;
        for f in frames {
            // SAFETY: the pool is ours; the mbuf is written within its data room (checked
            // by rte_pktmbuf_append) and handed to tx_burst, which takes ownership if it
            // returns 1 (else we free it).
            unsafe {
                let m = sys::rte_pktmbuf_alloc(self.pool);
                if m.is_null() {
                    return Err(io::Error::other("DPDK mbuf pool exhausted while injecting"));
                }
                let dst = sys::rte_pktmbuf_append(m, f.len() as u16) as *mut u8;
                if dst.is_null() {
                    sys::rte_pktmbuf_free(m);
                    return Err(io::Error::other(format!(
                        "frame of {} bytes does not fit an mbuf",
                        f.len()
                    )));
                }
                std::ptr::copy_nonoverlapping(f.as_ptr(), dst, f.len());
                let mut one = m;
                if sys::rte_eth_tx_burst(self.port, 0, &mut one, 1) != 1 {
                    sys::rte_pktmbuf_free(m);
                    break;
                }
            }
            sent += 1;
        }
        Ok(sent)
    }
}

#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A kernel-bypass packet feed that costs the receive core almost nothing, for `gpucbf
/// bench recv` on a machine without a NIC: a `net_ring` vdev is a loop-back port (what is
/// sent on its TX queue comes back on its RX queue), primed with the digitiser feed's first
/// frames. After the receive path has handled a burst, each frame's SPEAD timestamp and
/// heap counter are moved on by the span of the primed frames and the burst is sent back
/// into the ring, so the stream of timestamps keeps rising and every packet is placed in a
/// chunk (not rejected as too old). That rewrite (two 8-byte item pointers in a header the
/// parser has just read) and the ring enqueue are charged to the receive core, so the
/// measured rate is a lower bound for the receive path alone.
#[derive(Debug, Clone)]
pub struct RingReplay {
    /// Offsets in the frame of the timestamp and heap-counter item pointers.
    ts_at: usize,
    cnt_at: usize,
    ts_step: u64,
    cnt_step: u64,
    /// Frames sent back into the ring.
    pub requeued: u64,
}

impl RingReplay {
    /// Learns the layout from `frames` (Ethernet/IPv4/UDP/SPEAD frames with item
    /// `timestamp_id` as an immediate, all sharing one header layout). The span is the
    /// distance from the first timestamp to one past the last (`ts_unit` per step), likewise
    /// for heap counters.
    pub fn new(frames: &[Vec<u8>], timestamp_id: u16, ts_unit: u64) -> io::Result<Self> {
        use crate::spead::{ids, ItemPointer, PacketView};
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        let first = frames
            .first()
            .ok_or_else(|| bad("no frames to replay".into()))?;
        let (_, udp) =
            fast_udp_ipv4(first).ok_or_else(|| bad("first frame is not IPv4/UDP".into()))?;
        let spead_at = udp.as_ptr() as usize - first.as_ptr() as usize;
        let pkt = PacketView::parse(udp).map_err(|e| bad(format!("{e:?}")))?;
        let find = |id: u16| {
            pkt.all_pointers()
                .position(|p| p.immediate && p.id == id)
                .map(|k| spead_at + crate::spead::HEADER_BYTES + 8 * k)
                .ok_or_else(|| bad(format!("item 0x{id:x} not in the first packet")))
        };
        let (ts_at, cnt_at) = (find(timestamp_id)?, find(ids::HEAP_CNT)?);
        let read = |f: &[u8], at: usize| -> io::Result<ItemPointer> {
            let b: [u8; 8] = f
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| bad("short frame".into()))?;
            Ok(ItemPointer::from_raw(u64::from_be_bytes(b)))
        };
        let (mut ts, mut cnt) = (Vec::new(), Vec::new());
        for f in frames {
            let (t, c) = (read(f, ts_at)?, read(f, cnt_at)?);
            if !t.immediate || t.id != timestamp_id || !c.immediate || c.id != ids::HEAP_CNT {
                return Err(bad("frames do not share one header layout".into()));
            }
            ts.push(t.value);
            cnt.push(c.value);
        }
        let span = |v: &mut Vec<u64>, unit: Option<u64>| {
            v.sort_unstable();
            v.dedup();
            let step = unit.unwrap_or_else(|| v.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(1));
            v[v.len() - 1] - v[0] + step
        };
        Ok(RingReplay {
            ts_at,
            cnt_at,
            ts_step: span(&mut ts, Some(ts_unit)),
            cnt_step: span(&mut cnt, None),
            requeued: 0,
        })
    }

    /// Timestamp distance between one pass over the ring and the next.
    pub fn ts_step(&self) -> u64 {
        self.ts_step
    }

    #[inline]
    fn bump(p: *mut u8, by: u64) {
        use crate::spead::ADDRESS_MASK;
        // SAFETY (caller): p points at 8 bytes inside the frame.
        unsafe {
            let raw = u64::from_be(std::ptr::read_unaligned(p as *const u64));
            let v = (raw & !ADDRESS_MASK) | (raw.wrapping_add(by) & ADDRESS_MASK);
            std::ptr::write_unaligned(p as *mut u64, v.to_be());
        }
    }

    /// Moves the frames of `bufs` on by one span and sends them back into the ring.
    ///
    /// # Safety
    /// `bufs` must be mbufs owned by the caller, single-segment frames with the primed
    /// layout; ownership passes to the port.
    unsafe fn requeue(&mut self, port: u16, bufs: &mut [*mut sys::rte_mbuf]) -> io::Result<()> {
        for &m in bufs.iter() {
            let r = &*m;
            if (r.data_len as usize) < self.ts_at.max(self.cnt_at) + 8 {
                continue;
            }
            let p = (r.buf_addr as *mut u8).add(r.data_off as usize);
            Self::bump(p.add(self.ts_at), self.ts_step);
            Self::bump(p.add(self.cnt_at), self.cnt_step);
        }
        let n = bufs.len() as u16;
        let sent = sys::rte_eth_tx_burst(port, 0, bufs.as_mut_ptr(), n);
        if sent < n {
            sys::rte_pktmbuf_free_bulk(bufs.as_mut_ptr().add(sent as usize), (n - sent) as u32);
            return Err(io::Error::other(
                "net_ring replay: the ring refused frames it had just given",
            ));
        }
        self.requeued += n as u64;
        Ok(())
    }
}

impl PacketSource for DpdkSource {
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8])) -> io::Result<Poll> {
        // SAFETY: bufs has room for BURST mbuf pointers; the port and queue are started.
        let n = unsafe { sys::rte_eth_rx_burst(self.port, 0, self.bufs.as_mut_ptr(), BURST as u16) }
            as usize;
        if n == 0 {
            if let (Some(limit), Some(last)) = (self.end_after_idle, self.last_packet) {
                if last.elapsed() >= limit {
                    return Ok(Poll::End);
                }
            }
            std::thread::sleep(self.idle_sleep);
            return Ok(Poll::Idle);
        }
        self.last_packet = Some(Instant::now());
        let handed = self.deliver_burst(n, f);
        // SAFETY: the n mbufs from rx_burst are all done with; each is freed once.
        unsafe { sys::rte_pktmbuf_free_bulk(self.bufs.as_mut_ptr(), n as u32) };
        Ok(Poll::Packets(handed))
    }
}

impl Drop for DpdkSource {
    fn drop(&mut self) {
        // SAFETY: the port was configured by us; the pool is ours and no mbuf of it is held
        // (every received mbuf is freed in recv_batch).
        unsafe {
            if self.started {
                let _ = sys::rte_eth_dev_stop(self.port);
            }
            let _ = sys::rte_eth_dev_close(self.port);
            if !self.pool.is_null() {
                sys::rte_mempool_free(self.pool);
            }
            let _ = sys::rte_eal_cleanup();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eal_args_get_a_unique_prefix_unless_given() {
        let v = eal_argv("--no-huge --no-pci  --vdev net_pcap0,rx_pcap=/tmp/x.pcap");
        assert_eq!(v[0], "gpucbf");
        assert_eq!(
            v[1..5],
            [
                "--no-huge",
                "--no-pci",
                "--vdev",
                "net_pcap0,rx_pcap=/tmp/x.pcap"
            ]
        );
        assert!(v[5].starts_with("--file-prefix=gpucbf-"));
        assert_eq!(v.len(), 6);
        assert_eq!(eal_argv("--in-memory").len(), 2);
        assert_eq!(eal_argv("--file-prefix=abc").len(), 2);
        assert!(replays_pcap_file("--vdev net_pcap0,rx_pcap=f"));
        assert!(!replays_pcap_file("--vdev net_af_packet0,iface=va"));
    }
}
