//! The engines' send side: the output sink (UDP, ibverbs with `--send-ibv`, or a pcap file
//! with `--send-pcap`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use super::error::ConfigError;
use super::iface::interface_of;
use crate::net::send::pcap::PcapSink;
use crate::net::send::udp::UdpSink;
use crate::net::PacketSink;

/// Opens the output sink: a pcap file if asked; else the live sink of [`open_live`].
pub fn open_sink(
    pcap: Option<&Path>,
    interface: Ipv4Addr,
    ttl: u32,
    send_buffer: usize,
    ibv: bool,
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
        None => open_live(interface, ttl, send_buffer, ibv)?,
    })
}

/// The network sink out of `interface`: with `ibv` (`--send-ibv`, dsim `--ibv`) an ibverbs
/// raw-packet queue pair on the RDMA NIC behind it; where there is none (or the binary has
/// no ibverbs) UDP sockets with a `send_buffer`-byte kernel send buffer, said in one log
/// line per interface.
pub fn open_live(
    interface: Ipv4Addr,
    ttl: u32,
    send_buffer: usize,
    ibv: bool,
) -> std::io::Result<Box<dyn PacketSink>> {
    #[cfg(feature = "ibverbs")]
    if ibv {
        match crate::net::send::ibv::IbvSink::open(interface, ttl, send_buffer) {
            Ok(s) => return Ok(Box::new(s)),
            Err(e) => warn_udp_once(interface, &e.to_string()),
        }
    }
    #[cfg(not(feature = "ibverbs"))]
    if ibv {
        warn_udp_once(interface, "built without the ibverbs feature");
    }
    Ok(Box::new(UdpSink::new(interface, ttl, send_buffer)?))
}

/// Says once per interface (every send thread and output opens its own sink) why
/// `--send-ibv` sends through UDP there.
fn warn_udp_once(interface: Ipv4Addr, why: &str) {
    static SAID: std::sync::Mutex<Vec<Ipv4Addr>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    if !said.contains(&interface) {
        said.push(interface);
        tracing::warn!(%interface, "--send-ibv: {why}; sending through UDP sockets");
    }
}

/// Sends each destination's packets out of one of several sinks (one per
/// `--send-interface`): `route` maps a destination to its sink; others use the first.
pub struct RoutedSink {
    /// One sink per interface.
    pub sinks: Vec<Box<dyn PacketSink>>,
    /// Destination → index into `sinks`.
    pub route: std::collections::HashMap<SocketAddrV4, usize>,
}

impl RoutedSink {
    /// One sink per interface of `ifs` (opened by `open`), each sending its contiguous
    /// block of every output's destinations (katgpucbf's rule, [`interface_of`]); a
    /// destination not listed goes out of the first.
    pub fn open(
        ifs: &[Ipv4Addr],
        outputs: &[&[SocketAddrV4]],
        open: impl Fn(Ipv4Addr) -> std::io::Result<Box<dyn PacketSink>>,
    ) -> std::io::Result<Self> {
        let sinks = ifs.iter().map(|&ip| open(ip)).collect::<Result<_, _>>()?;
        let mut route = std::collections::HashMap::new();
        for dsts in outputs {
            for (i, d) in dsts.iter().enumerate() {
                route.insert(*d, interface_of(i, dsts.len(), ifs.len()));
            }
        }
        Ok(RoutedSink { sinks, route })
    }
}

impl PacketSink for RoutedSink {
    fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> std::io::Result<()> {
        let i = self.route.get(&dst).copied().unwrap_or(0);
        self.sinks[i].send(dst, parts)
    }

    fn send_batch(&mut self, packets: &[(SocketAddrV4, &[&[u8]])]) -> std::io::Result<()> {
        // Runs of packets for one sink go out as one batch.
        let mut start = 0;
        while start < packets.len() {
            let i = self.route.get(&packets[start].0).copied().unwrap_or(0);
            let mut end = start + 1;
            while end < packets.len() && self.route.get(&packets[end].0).copied().unwrap_or(0) == i
            {
                end += 1;
            }
            self.sinks[i].send_batch(&packets[start..end])?;
            start = end;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sinks.iter_mut().try_for_each(|s| s.flush())
    }
}

/// Refuses an output file that is the input (`--send-pcap` naming `SRC`, through any path,
/// symlink or hard link): creating the output would truncate the input before it is read.
/// Paths that do not exist yet cannot be the input.
pub fn check_output_is_not_input(
    option: &str,
    output: &Path,
    input: &str,
) -> Result<(), ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let (Ok(o), Ok(i)) = (std::fs::metadata(output), std::fs::metadata(input)) else {
        return Ok(());
    };
    if (o.dev(), o.ino()) == (i.dev(), i.ino()) {
        return Err(ConfigError::rule(
            format!("{option} {}", output.display()),
            format!("is the input {input:?}: writing it would destroy the input before it is read"),
        ));
    }
    Ok(())
}

/// The source of the frames an engine sends from output items: IPv4 address and UDP port,
/// Ethernet address, TTL.
pub type ItemSource = (SocketAddrV4, [u8; 6], u8);

/// Where an engine sends output items from (`--send-ibv`, `--use-peerdirect`): the RDMA NIC
/// behind its one `--send-interface` (`interfaces`), and the packets' source (that address
/// with port 7148, the NIC's Ethernet address, `--send-ttl`). An error with several
/// interfaces or no RDMA NIC behind the address.
#[cfg(feature = "ibverbs")]
pub fn item_source(
    interfaces: &super::iface::Interfaces,
    ttl: u32,
) -> std::io::Result<(crate::net::verbs::RdmaPort, ItemSource)> {
    use crate::net::verbs::{interface_with_address, rdma_port_of_interface};
    if interfaces.0.len() > 1 {
        return Err(std::io::Error::other(
            "several --send-interface: output items are sent from one interface only",
        ));
    }
    let ip = interfaces.first();
    let port = rdma_port_of_interface(Path::new("/sys"), &interface_with_address(ip)?)?;
    let src = (SocketAddrV4::new(ip, 7148), port.mac, ttl.min(255) as u8);
    Ok((port, src))
}

/// The GPU whose memory holds an engine's output items, bound to the calling thread.
#[cfg(feature = "ibverbs")]
pub fn item_gpu() -> std::io::Result<std::sync::Arc<cudarc::driver::CudaContext>> {
    let ctx = crate::gpu::open_device(0)
        .map_err(|e| std::io::Error::other(format!("opening the GPU: {e}")))?;
    ctx.bind_to_thread()
        .map_err(|e| std::io::Error::other(format!("binding the GPU: {e}")))?;
    Ok(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--send-ibv` where the interface has no RDMA NIC (loopback): the sink is UDP and the
    /// packets arrive all the same.
    #[test]
    fn send_ibv_without_a_nic_sends_through_udp() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let dst = match rx.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            a => panic!("{a}"),
        };
        for ibv in [true, false] {
            let mut sink = open_sink(None, Ipv4Addr::LOCALHOST, 4, 1 << 16, ibv).unwrap();
            assert!(!sink.is_offline());
            sink.send(dst, &[b"spead", &[ibv as u8]]).unwrap();
            sink.flush().unwrap();
            let mut buf = [0u8; 16];
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[b's', b'p', b'e', b'a', b'd', ibv as u8]);
        }
    }
}
