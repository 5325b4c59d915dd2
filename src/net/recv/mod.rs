//! Receive: where packets come from. Every source hands UDP payloads to a callback, a
//! batch at a time, through [`PacketSource`].
//!
//! * [`pcap`]: classic libpcap files, read in place ([`pcap::PcapFileSource`]) or
//!   datagram by datagram ([`pcap::PcapSource`]).
//! * [`udp`]: kernel UDP sockets with recvmmsg and UDP GRO ([`udp::UdpRecvSource`]), and a
//!   plain socket ([`udp::UdpSource`]).
//! * `dpdk` (feature `dpdk`): DPDK poll-mode receive.
//! * `ibv` (feature `ibverbs`): a raw-packet verbs queue pair with flow steering, and the
//!   engines' `--recv-ibv` (interface → RDMA port, IGMP memberships).

#[cfg(feature = "dpdk")]
pub mod dpdk;
#[cfg(feature = "ibverbs")]
pub mod ibv;
pub mod pcap;
pub mod udp;

use std::io;

/// What a receive call produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// This many packets were handed to the callback.
    Packets(usize),
    /// Nothing arrived within the poll interval.
    Idle,
    /// The source is exhausted (end of file).
    End,
}

/// Where packets come from.
pub trait PacketSource: Send {
    /// Hands up to one batch of packet payloads (UDP payloads) to `f`.
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8])) -> io::Result<Poll>;
}
