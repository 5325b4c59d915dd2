//! Send: where heaps go. Every sink takes packets (a destination and the parts of one UDP
//! payload) through [`PacketSink`].
//!
//! * [`udp`]: kernel UDP sockets, sendmmsg with UDP GSO for runs of equal-size packets.
//! * [`pcap`]: a classic libpcap file instead of the network.
//! * [`heap`]: SPEAD heaps cut into packets, paced, onto any sink ([`heap::HeapSender`]).
//! * [`peerdirect`]: the `--use-peerdirect` decision (send from GPU memory, or stage
//!   through pinned host memory).
//! * `verbs` (feature `ibverbs`): the PeerDirect sender, heaps from GPU memory through a
//!   raw-packet verbs queue pair.
//! * `ibv` (feature `ibverbs`): `--send-ibv`, any packets through a raw-packet verbs queue
//!   pair from a registered ring of frames in host memory.

#[cfg(feature = "ibverbs")]
pub mod fake_verbs;
pub mod heap;
#[cfg(feature = "ibverbs")]
pub mod ibv;
pub mod pcap;
pub mod peerdirect;
pub mod udp;
#[cfg(feature = "ibverbs")]
pub mod verbs;

use std::io;
use std::net::SocketAddrV4;

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

/// A sink shared by several senders (e.g. all outputs of an engine writing one pcap file).
#[derive(Clone)]
pub struct SharedSink(std::sync::Arc<std::sync::Mutex<Box<dyn PacketSink>>>);

impl SharedSink {
    /// Shares `sink` between several senders.
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
