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

use super::source::{deliver_frame, FrameStats, PacketSource, Poll};

/// Set once the EAL has been initialised in this process (it cannot be initialised twice,
/// not even after `rte_eal_cleanup`).
static EAL_USED: AtomicBool = AtomicBool::new(false);

const BURST: usize = 64;
/// Largest frame we accept in one mbuf segment (jumbo digitiser packets fit).
const MAX_FRAME: u32 = 9216 + 64;

/// Counters of the DPDK source: frame counters plus the port's own.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct DpdkStats {
    #[serde(flatten)]
    pub frames: FrameStats,
    /// Port counters at the last [`DpdkSource::port_stats`] call.
    pub port_ipackets: u64,
    pub port_imissed: u64,
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
        let mut handed = 0;
        for i in 0..n {
            let m = self.bufs[i];
            self.stats.frames.frames += 1;
            // SAFETY: rx_burst returned n valid mbufs; each segment's data lies at
            // buf_addr + data_off for data_len bytes. They are freed in bulk below.
            unsafe {
                let seg = &*m;
                let first = std::slice::from_raw_parts(
                    (seg.buf_addr as *const u8).add(seg.data_off as usize),
                    seg.data_len as usize,
                );
                let ok = if seg.nb_segs <= 1 || seg.next.is_null() {
                    deliver_frame(&self.endpoints, &mut self.stats.frames, first, f)
                } else {
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
                };
                handed += ok as usize;
            }
        }
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
