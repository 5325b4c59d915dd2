//! The safe verbs layer that receive and send share (cargo feature `ibverbs`), over
//! `ibverbs-sys` (libibverbs loaded at run time): which RDMA device and port sit behind a
//! network interface (sysfs), the device list, opening a device, and a raw-packet queue pair
//! for sending ([`RawSendQp`]). Without RDMA hardware every step fails with a clear message:
//! "no RDMA device found", "no RDMA device behind interface lo", or the library missing
//! ("could not load libibverbs.so.1").

use std::ffi::{c_int, c_void, CStr};
use std::io;
use std::net::Ipv4Addr;
use std::path::Path;

pub use ibverbs_sys::Verbs;
use ibverbs_sys::{
    mr_lkey, IbvQpAttr, IbvQpCap, IbvQpInitAttr, IBV_ACCESS_LOCAL_WRITE, IBV_QPS_INIT, IBV_QPS_RTR,
    IBV_QPS_RTS, IBV_QPT_RAW_PACKET, IBV_QP_PORT, IBV_QP_STATE,
};

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
    /// Interface name (`ens1f0`).
    pub interface: String,
    /// The interface's Ethernet address.
    pub mac: [u8; 6],
    /// RDMA device name (`mlx5_0`).
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

/// Names of the RDMA devices; "no RDMA device found" if there are none (or the kernel
/// has no RDMA support).
pub fn device_names(v: &Verbs) -> io::Result<Vec<String>> {
    let mut n: c_int = 0;
    // SAFETY: ibv_get_device_list returns NULL or an array of n device pointers that
    // we free with ibv_free_device_list.
    unsafe {
        let list = (v.get_device_list)(&mut n);
        if list.is_null() {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no RDMA device found (ibv_get_device_list: {e})"),
            ));
        }
        let mut names = Vec::new();
        for k in 0..n.max(0) as usize {
            let p = (v.get_device_name)(*list.add(k));
            if !p.is_null() {
                names.push(CStr::from_ptr(p).to_string_lossy().into_owned());
            }
        }
        (v.free_device_list)(list);
        if names.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no RDMA device found",
            ));
        }
        Ok(names)
    }
}

/// Opens the RDMA device named `want` (`names`: those present, for the error message).
///
/// # Safety
/// `v` holds libibverbs' entry points.
pub(crate) unsafe fn open_device(
    v: &Verbs,
    want: &str,
    names: &[String],
) -> io::Result<*mut c_void> {
    let mut n: c_int = 0;
    let list = (v.get_device_list)(&mut n);
    if list.is_null() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no RDMA device found",
        ));
    }
    let mut dev = std::ptr::null_mut();
    for k in 0..n.max(0) as usize {
        let d = *list.add(k);
        let p = (v.get_device_name)(d);
        if !p.is_null() && CStr::from_ptr(p).to_bytes() == want.as_bytes() {
            dev = d;
        }
    }
    if dev.is_null() {
        (v.free_device_list)(list);
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("RDMA device {want:?} not found (have {names:?})"),
        ));
    }
    let ctx = (v.open_device)(dev);
    (v.free_device_list)(list);
    if ctx.is_null() {
        return Err(io::Error::other(format!(
            "ibv_open_device failed: {}",
            io::Error::last_os_error()
        )));
    }
    Ok(ctx)
}

/// A raw-packet queue pair for sending (PeerDirect transmit): device context, protection
/// domain, one completion queue and a QP in RTS on `port`. Released in reverse order.
pub struct RawSendQp {
    /// The loaded library (owns the entry points the objects below are released with).
    pub verbs: Verbs,
    /// Device context (`struct ibv_context *`).
    pub ctx: *mut c_void,
    /// Protection domain.
    pub pd: *mut c_void,
    /// Completion queue (send and receive).
    pub cq: *mut c_void,
    /// The raw-packet queue pair, in RTS.
    pub qp: *mut c_void,
    mrs: Vec<*mut c_void>,
}

// SAFETY: the verbs objects are owned here and used from one thread at a time.
unsafe impl Send for RawSendQp {}

impl RawSendQp {
    /// Opens `device` (None: the first), creates the CQ and a `IBV_QPT_RAW_PACKET` QP with
    /// `depth` send work requests of two scatter entries (headers, payload) and moves it
    /// to RTS.
    pub fn open(device: Option<&str>, port: u8, depth: usize) -> io::Result<Self> {
        let verbs = Verbs::load()?;
        let names = device_names(&verbs)?;
        let want = device
            .map(str::to_string)
            .unwrap_or_else(|| names[0].clone());
        let mut q = RawSendQp {
            verbs,
            ctx: std::ptr::null_mut(),
            pd: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            qp: std::ptr::null_mut(),
            mrs: Vec::new(),
        };
        let fail =
            |what: &str| io::Error::other(format!("{what} failed: {}", io::Error::last_os_error()));
        // SAFETY: each verb gets valid arguments; every object is recorded in q and released
        // by Drop (also on the error returns below).
        unsafe {
            let v = &q.verbs;
            q.ctx = open_device(v, &want, &names)?;
            q.pd = (v.alloc_pd)(q.ctx);
            if q.pd.is_null() {
                return Err(fail("ibv_alloc_pd"));
            }
            let depth = depth.clamp(1, c_int::MAX as usize) as c_int;
            q.cq = (v.create_cq)(q.ctx, depth, std::ptr::null_mut(), std::ptr::null_mut(), 0);
            if q.cq.is_null() {
                return Err(fail("ibv_create_cq"));
            }
            let mut init = IbvQpInitAttr {
                qp_context: std::ptr::null_mut(),
                send_cq: q.cq,
                recv_cq: q.cq,
                srq: std::ptr::null_mut(),
                cap: IbvQpCap {
                    max_send_wr: depth as u32,
                    max_recv_wr: 1,
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: IBV_QPT_RAW_PACKET,
                sq_sig_all: 0,
            };
            q.qp = (v.create_qp)(q.pd, &mut init);
            if q.qp.is_null() {
                return Err(fail(
                    "ibv_create_qp(IBV_QPT_RAW_PACKET) (needs CAP_NET_RAW)",
                ));
            }
            for (state, port, mask) in [
                (IBV_QPS_INIT, Some(port), IBV_QP_STATE | IBV_QP_PORT),
                (IBV_QPS_RTR, None, IBV_QP_STATE),
                (IBV_QPS_RTS, None, IBV_QP_STATE),
            ] {
                let mut a = IbvQpAttr::new(state, port);
                let rc = (v.modify_qp)(q.qp, &mut a, mask);
                if rc != 0 {
                    return Err(io::Error::other(format!(
                        "ibv_modify_qp(state {state}) failed: {}",
                        io::Error::from_raw_os_error(rc)
                    )));
                }
            }
        }
        Ok(q)
    }

    /// Registers host memory with the NIC (kept until the QP is dropped); returns its lkey.
    ///
    /// # Safety
    /// `addr..addr+len` must stay allocated for the life of this QP.
    pub unsafe fn register_host(&mut self, addr: *mut u8, len: usize) -> io::Result<u32> {
        let mr = (self.verbs.reg_mr)(self.pd, addr as *mut c_void, len, IBV_ACCESS_LOCAL_WRITE);
        if mr.is_null() {
            return Err(io::Error::other(format!(
                "ibv_reg_mr of {len} bytes of host memory failed: {}",
                io::Error::last_os_error()
            )));
        }
        self.mrs.push(mr);
        Ok(mr_lkey(mr))
    }
}

impl Drop for RawSendQp {
    fn drop(&mut self) {
        let v = &self.verbs;
        // SAFETY: objects are destroyed once, in reverse order of creation.
        unsafe {
            if !self.qp.is_null() {
                (v.destroy_qp)(self.qp);
            }
            for &mr in &self.mrs {
                (v.dereg_mr)(mr);
            }
            if !self.cq.is_null() {
                (v.destroy_cq)(self.cq);
            }
            if !self.pd.is_null() {
                (v.dealloc_pd)(self.pd);
            }
            if !self.ctx.is_null() {
                (v.close_device)(self.ctx);
            }
        }
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
}
