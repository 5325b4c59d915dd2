//! Transports: where packets come from and where they go.
//!
//! * [`recv`]: packet sources behind [`PacketSource`]: pcap files, kernel UDP sockets
//!   (recvmmsg, UDP GRO), DPDK (feature `dpdk`) and raw-packet ibverbs (feature `ibverbs`).
//! * [`send`]: packet sinks behind [`PacketSink`]: kernel UDP sockets (sendmmsg, UDP GSO),
//!   pcap files; the heap sender; `--use-peerdirect` (send from GPU memory through verbs)
//!   and its fallback.
//! * [`frame`]: Ethernet/IPv4/UDP framing shared by the frame-level sources and sinks.
//! * [`pacing`]: the send rate limiter.
//! * [`endpoint`]: `ADDR[+N]:PORT` lists.
//! * `verbs` (feature `ibverbs`): the safe verbs layer that receive and send share (device
//!   list and open, raw-packet send queue pair) over `ibverbs-sys`, which loads libibverbs
//!   at run time.

pub mod affinity;
pub mod endpoint;
pub mod frame;
pub mod pacing;
pub mod recv;
pub mod send;
#[cfg(feature = "ibverbs")]
pub mod verbs;

pub use endpoint::parse_endpoints;
pub use pacing::Pacer;
pub use recv::{PacketSource, Poll};
pub use send::{PacketSink, SharedSink};
