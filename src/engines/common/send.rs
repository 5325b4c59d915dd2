//! The engines' send side: the output sink (UDP, or a pcap file with `--send-pcap`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use crate::net::send::pcap::PcapSink;
use crate::net::send::udp::UdpSink;
use crate::net::PacketSink;

/// Opens the output sink (a pcap file if asked).
pub fn open_sink(
    pcap: Option<&Path>,
    interface: Ipv4Addr,
    ttl: u32,
) -> std::io::Result<Box<dyn PacketSink>> {
    Ok(match pcap {
        Some(p) => {
            let ip = if interface.is_unspecified() {
                Ipv4Addr::LOCALHOST
            } else {
                interface
            };
            Box::new(PcapSink::create(
                p,
                SocketAddrV4::new(ip, 7148),
                ttl.min(255) as u8,
            )?)
        }
        None => Box::new(UdpSink::new(interface, ttl, 1 << 20)?),
    })
}
