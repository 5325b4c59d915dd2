//! `--recv-ibv`: the engines' ibverbs receive path (cargo feature `ibverbs`), as katgpucbf
//! uses spead2's `add_udp_ibv_reader`:
//!
//! 1. the RDMA device and port behind `--recv-interface` (an IPv4 address) are found the way
//!    rdma_cm binds to an address: the interface holding the address (getifaddrs), then
//!    `/sys/class/net/IF/device/infiniband/DEV` and `/sys/class/net/IF/dev_port` (+1);
//! 2. a kernel UDP socket joins every multicast group on that interface, so IGMP membership
//!    reaches the switch (the raw-packet QP itself never sends IGMP);
//! 3. [`IbvSource`] creates the raw-packet QP with one `ibv_create_flow` rule per endpoint
//!    (group MAC + IPv4 + UDP port; the interface MAC for unicast endpoints).
//!
//! Without RDMA hardware every step fails with a clear message: "no RDMA device found"
//! (no device at all), "no RDMA device behind interface lo (127.0.0.1)", or the library
//! missing ("could not load libibverbs.so.1").

use std::ffi::CStr;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::Path;

use socket2::{Domain, Protocol, Socket, Type};

use super::ibverbs::{IbvConfig, IbvSource, Verbs};
use super::source::{FrameStats, PacketSource, Poll};

/// The network interface that holds `ip` (e.g. `"ens1f0"`).
pub fn interface_with_address(ip: Ipv4Addr) -> io::Result<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list that we free with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut p = head;
    // SAFETY: walking the list returned by getifaddrs; sockaddr_in is read only for AF_INET.
    unsafe {
        while !p.is_null() {
            let a = (*p).ifa_addr;
            if !a.is_null() && (*a).sa_family as i32 == libc::AF_INET {
                let sin = &*(a as *const libc::sockaddr_in);
                if Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)) == ip {
                    found = Some(CStr::from_ptr((*p).ifa_name).to_string_lossy().into_owned());
                    break;
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    found.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no network interface has the address {ip} (--recv-interface)"),
        )
    })
}

/// What sysfs says about an interface: its MAC and the RDMA device/port behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaPort {
    pub interface: String,
    pub mac: [u8; 6],
    pub device: String,
    /// 1-based port number on the device.
    pub port: u8,
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = s
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    v.try_into().ok()
}

/// Looks up `interface` under `sys` (normally `/sys`): the RDMA device in
/// `class/net/IF/device/infiniband/`, the port from `class/net/IF/dev_port` (0-based there),
/// the MAC from `class/net/IF/address`.
pub fn rdma_port_of_interface(sys: &Path, interface: &str) -> io::Result<RdmaPort> {
    let net = sys.join("class/net").join(interface);
    let no_dev = || {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no RDMA device behind interface {interface}"),
        )
    };
    let mut devices: Vec<String> = std::fs::read_dir(net.join("device/infiniband"))
        .map_err(|_| no_dev())?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    devices.sort();
    let device = devices.into_iter().next().ok_or_else(no_dev)?;
    let dev_port: u8 = std::fs::read_to_string(net.join("dev_port"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let port = dev_port.checked_add(1).ok_or_else(no_dev)?;
    let mac = std::fs::read_to_string(net.join("address"))
        .ok()
        .and_then(|s| parse_mac(&s))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("interface {interface} has no Ethernet address in sysfs"),
            )
        })?;
    Ok(RdmaPort {
        interface: interface.to_string(),
        mac,
        device,
        port,
    })
}

/// A kernel socket that holds IGMP membership of `groups` on `interface` for as long as
/// it lives (`None` when no endpoint is multicast).
pub fn join_groups(
    endpoints: &[SocketAddrV4],
    interface: Ipv4Addr,
) -> io::Result<Option<UdpSocket>> {
    let groups: Vec<Ipv4Addr> = endpoints
        .iter()
        .map(|e| *e.ip())
        .filter(|ip| ip.is_multicast())
        .collect();
    if groups.is_empty() {
        return Ok(None);
    }
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    // A tiny buffer: the QP gets the packets; this socket only keeps the memberships.
    let _ = s.set_recv_buffer_size(4096);
    s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0).into())?;
    for g in groups {
        s.join_multicast_v4(&g, &interface)
            .map_err(|e| io::Error::new(e.kind(), format!("joining {g} on {interface}: {e}")))?;
    }
    Ok(Some(s.into()))
}

/// The engines' `--recv-ibv` source: the raw-packet QP plus the IGMP memberships.
pub struct IbvRecvSource {
    src: IbvSource,
    _memberships: Option<UdpSocket>,
    pub port: Option<RdmaPort>,
}

impl IbvRecvSource {
    /// Opens the RDMA port behind `interface` (unspecified: the first device, port 1) and
    /// steers `endpoints` to one queue pair.
    pub fn open(endpoints: Vec<SocketAddrV4>, interface: Ipv4Addr) -> io::Result<Self> {
        if endpoints.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--recv-ibv needs the endpoints to receive (flow steering rules), not \"all\"",
            ));
        }
        // First the library and the device list: on a host without RDMA this is the
        // error to give ("no RDMA device found"), whatever the interface.
        let names = Verbs::load()?.device_names()?;
        let mut cfg = IbvConfig {
            endpoints: endpoints.clone(),
            ..Default::default()
        };
        let port = if interface.is_unspecified() {
            None
        } else {
            let ifname = interface_with_address(interface)?;
            let p = rdma_port_of_interface(Path::new("/sys"), &ifname).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{e} ({interface}); RDMA devices present: {names:?}"),
                )
            })?;
            cfg.device = Some(p.device.clone());
            cfg.port = p.port;
            cfg.unicast_mac = Some(p.mac);
            Some(p)
        };
        let memberships = join_groups(&endpoints, interface)?;
        let src = IbvSource::open(&cfg)?;
        tracing::info!(?port, endpoints = endpoints.len(), "ibverbs receive ready");
        Ok(IbvRecvSource {
            src,
            _memberships: memberships,
            port,
        })
    }

    pub fn stats(&self) -> &FrameStats {
        &self.src.stats
    }
}

impl PacketSource for IbvRecvSource {
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8])) -> io::Result<Poll> {
        self.src.recv_batch(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_sys(name: &str) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("gpucbf-sys-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        root
    }

    #[test]
    fn loopback_address_is_found() {
        assert_eq!(interface_with_address(Ipv4Addr::LOCALHOST).unwrap(), "lo");
        let e = interface_with_address(Ipv4Addr::new(192, 0, 2, 77)).unwrap_err();
        assert!(e
            .to_string()
            .contains("no network interface has the address 192.0.2.77"));
    }

    #[test]
    fn rdma_port_from_sysfs() {
        let root = fake_sys("mlx");
        let net = root.join("class/net/ens1f1");
        std::fs::create_dir_all(net.join("device/infiniband/mlx5_1")).unwrap();
        std::fs::write(net.join("dev_port"), "0\n").unwrap();
        std::fs::write(net.join("address"), "0c:42:a1:0b:0c:0d\n").unwrap();
        let p = rdma_port_of_interface(&root, "ens1f1").unwrap();
        assert_eq!(
            p,
            RdmaPort {
                interface: "ens1f1".into(),
                mac: [0x0c, 0x42, 0xa1, 0x0b, 0x0c, 0x0d],
                device: "mlx5_1".into(),
                port: 1,
            }
        );
        // A dual-port device (mlx4 style): dev_port 1 is verbs port 2.
        std::fs::write(net.join("dev_port"), "1").unwrap();
        assert_eq!(rdma_port_of_interface(&root, "ens1f1").unwrap().port, 2);
        // Bad MAC: clear error, no panic.
        std::fs::write(net.join("address"), "zz:00").unwrap();
        assert!(rdma_port_of_interface(&root, "ens1f1").is_err());
        // A plain NIC (no infiniband directory).
        std::fs::create_dir_all(root.join("class/net/eth0/device")).unwrap();
        let e = rdma_port_of_interface(&root, "eth0").unwrap_err();
        assert_eq!(e.to_string(), "no RDMA device behind interface eth0");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn loopback_has_no_rdma_device() {
        let e = rdma_port_of_interface(Path::new("/sys"), "lo").unwrap_err();
        assert!(
            e.to_string().contains("no RDMA device behind interface lo"),
            "{e}"
        );
    }

    #[test]
    fn multicast_groups_are_joined_on_loopback() {
        let eps = [
            SocketAddrV4::new(Ipv4Addr::new(239, 102, 0, 1), 7148),
            SocketAddrV4::new(Ipv4Addr::new(239, 102, 0, 2), 7148),
        ];
        match join_groups(&eps, Ipv4Addr::LOCALHOST) {
            Ok(s) => assert!(s.is_some()),
            // Some sandboxes have no multicast route on lo; the error must say what failed.
            Err(e) => assert!(e.to_string().contains("joining 239.102.0.1"), "{e}"),
        }
        let uni = [SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148)];
        assert!(join_groups(&uni, Ipv4Addr::LOCALHOST).unwrap().is_none());
    }

    #[test]
    fn open_without_hardware_is_a_clear_error() {
        let eps = vec![SocketAddrV4::new(Ipv4Addr::new(239, 102, 0, 1), 7148)];
        for iface in [Ipv4Addr::UNSPECIFIED, Ipv4Addr::LOCALHOST] {
            match IbvRecvSource::open(eps.clone(), iface) {
                Ok(_) => eprintln!("SKIP: this host has an RDMA device"),
                Err(e) => {
                    let m = e.to_string();
                    assert!(
                        m.contains("no RDMA device") || m.contains("could not load"),
                        "{m}"
                    );
                }
            }
        }
        let e = IbvRecvSource::open(Vec::new(), Ipv4Addr::UNSPECIFIED)
            .err()
            .unwrap();
        assert!(e.to_string().contains("needs the endpoints"));
    }
}
