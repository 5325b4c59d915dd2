//! Transports: where packets come from and where they go.
//!
//! * [`endpoint`]: `ADDR[+N]:PORT` lists.
//! * [`pcap`]: classic libpcap files (Ethernet/IPv4/UDP) as a source and a sink.
//! * [`udp`]: kernel UDP sockets with sendmmsg (UDP GSO for runs of equal-size packets),
//!   multicast and pacing; [`source`]: receive with recvmmsg and UDP GRO.
//! * `dpdk` (feature `dpdk`): DPDK poll-mode receive.
//! * `ibverbs` (feature `ibverbs`): raw-packet verbs receive, libibverbs loaded at run time;
//!   `ibv_recv`: the engines' `--recv-ibv` (interface → RDMA port, IGMP memberships).
//! * [`peerdirect`]: `--use-peerdirect` (send from GPU memory through verbs) and its fallback.

#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod endpoint;
pub mod heapsend;
#[cfg(feature = "ibverbs")]
pub mod ibv_recv;
#[cfg(feature = "ibverbs")]
pub mod ibverbs;
pub mod pcap;
pub mod peerdirect;
pub mod source;
pub mod udp;
#[cfg(feature = "ibverbs")]
pub mod verbs_send;

use std::io;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

pub use endpoint::parse_endpoints;

/// Where heaps go: every engine writes packets through this seam.
pub trait PacketSink: Send {
    /// Sends one packet (the concatenation of `parts`) to `dst`.
    fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> io::Result<()>;

    /// Sends several packets; transports that can batch (sendmmsg) override this.
    fn send_batch(&mut self, packets: &[(SocketAddrV4, &[&[u8]])]) -> io::Result<()> {
        for (dst, parts) in packets {
            self.send(*dst, parts)?;
        }
        Ok(())
    }

    /// Pushes out anything buffered (and, for files, writes it to disk).
    fn flush(&mut self) -> io::Result<()>;

    /// True if the sink has its own notion of time (a file): senders should not pace.
    fn is_offline(&self) -> bool {
        false
    }
}

/// Rate limiter: keeps the average send rate at or below `bytes_per_second`, measured from
/// the first packet. Bursts of up to `burst` bytes go out back to back.
pub struct Pacer {
    bytes_per_second: f64,
    start: Option<Instant>,
    sent: f64,
}

impl Pacer {
    pub fn new(bytes_per_second: f64) -> Self {
        Pacer {
            bytes_per_second,
            start: None,
            sent: 0.0,
        }
    }

    /// Accounts for `bytes` about to be sent, sleeping until they are due.
    pub fn wait(&mut self, bytes: usize) {
        let start = *self.start.get_or_insert_with(Instant::now);
        if self.bytes_per_second <= 0.0 || !self.bytes_per_second.is_finite() {
            return;
        }
        let due = Duration::from_secs_f64(self.sent / self.bytes_per_second);
        self.sent += bytes as f64;
        let now = start.elapsed();
        if due > now {
            let ahead = due - now;
            if ahead > Duration::from_micros(200) {
                std::thread::sleep(ahead - Duration::from_micros(100));
            }
            while start.elapsed() < due {
                std::hint::spin_loop();
            }
        }
    }

    /// Seconds behind schedule (positive: sending slower than the rate).
    pub fn lag_seconds(&self) -> f64 {
        match self.start {
            Some(s) if self.bytes_per_second > 0.0 => {
                s.elapsed().as_secs_f64() - self.sent / self.bytes_per_second
            }
            _ => 0.0,
        }
    }
}

/// A sink shared by several senders (e.g. all outputs of an engine writing one pcap file).
#[derive(Clone)]
pub struct SharedSink(std::sync::Arc<std::sync::Mutex<Box<dyn PacketSink>>>);

impl SharedSink {
    pub fn new(sink: Box<dyn PacketSink>) -> Self {
        SharedSink(std::sync::Arc::new(std::sync::Mutex::new(sink)))
    }

    fn lock(&self) -> io::Result<std::sync::MutexGuard<'_, Box<dyn PacketSink>>> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("sink lock poisoned"))
    }
}

impl PacketSink for SharedSink {
    fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> io::Result<()> {
        self.lock()?.send(dst, parts)
    }

    fn send_batch(&mut self, packets: &[(SocketAddrV4, &[&[u8]])]) -> io::Result<()> {
        self.lock()?.send_batch(packets)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.lock()?.flush()
    }

    fn is_offline(&self) -> bool {
        self.lock().map(|s| s.is_offline()).unwrap_or(false)
    }
}
