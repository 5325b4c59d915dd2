//! Raw-packet ibverbs receive (cargo feature `ibverbs`), the way spead2 does it: a
//! `IBV_QPT_RAW_PACKET` queue pair, one flow-steering rule per destination endpoint
//! (Ethernet dst MAC + IPv4 dst + UDP dst port), a registered ring of receive buffers
//! ([`IbvSource`]); and `--recv-ibv`, the engines' ibverbs receive path
//! ([`IbvRecvSource`]), as katgpucbf uses spead2's `add_udp_ibv_reader`:
//!
//! 1. the RDMA device and port behind `--recv-interface` (an IPv4 address) are found the way
//!    rdma_cm binds to an address: the interface holding the address (getifaddrs), then
//!    `/sys/class/net/IF/device/infiniband/DEV` and `/sys/class/net/IF/dev_port` (+1)
//!    ([`crate::net::verbs::interface_with_address`],
//!    [`crate::net::verbs::rdma_port_of_interface`]);
//! 2. a kernel UDP socket joins every multicast group on that interface, so IGMP membership
//!    reaches the switch (the raw-packet QP itself never sends IGMP);
//! 3. [`IbvSource`] creates the raw-packet QP with one `ibv_create_flow` rule per endpoint
//!    (group MAC + IPv4 + UDP port; the interface MAC for unicast endpoints).
//!
//! Without RDMA hardware every step fails with a clear message: "no RDMA device found"
//! (no device at all), "no RDMA device behind interface lo (127.0.0.1)", or the library
//! missing ("could not load libibverbs.so.1").

use std::ffi::{c_int, c_void};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::Path;

use socket2::{Domain, Protocol, Socket, Type};

use super::{PacketSource, Poll};
use crate::net::frame::{deliver_frame, FrameStats};
use crate::net::verbs::{
    device_names, interface_with_address, open_device, rdma_port_of_interface, RdmaPort, Verbs,
};
use ibverbs_sys::{
    create_flow, destroy_flow, mr_lkey, poll_cq, post_recv, FlowRule, IbvQpAttr, IbvQpCap,
    IbvQpInitAttr, IbvRecvWr, IbvSge, IbvWc, IBV_ACCESS_LOCAL_WRITE, IBV_QPS_INIT, IBV_QPS_RTR,
    IBV_QPT_RAW_PACKET, IBV_QP_PORT, IBV_QP_STATE, IBV_WC_SUCCESS,
};

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

/// Receive settings.
#[derive(Debug, Clone)]
pub struct IbvConfig {
    /// Device name (`mlx5_0`); `None`: the first device.
    pub device: Option<String>,
    /// Port number on the device (1-based).
    pub port: u8,
    /// Destinations to steer to this queue pair (at least one).
    pub endpoints: Vec<SocketAddrV4>,
    /// MAC of the interface, matched for unicast endpoints (`None`: not matched).
    pub unicast_mac: Option<[u8; 6]>,
    /// Receive buffers (work requests) and their size.
    pub buffers: usize,
    /// Bytes per receive buffer (the largest frame taken whole).
    pub buffer_size: usize,
}

impl Default for IbvConfig {
    fn default() -> Self {
        IbvConfig {
            device: None,
            port: 1,
            endpoints: Vec::new(),
            unicast_mac: None,
            buffers: 4096,
            buffer_size: 9216 + 64,
        }
    }
}

/// Raw-packet receive from one RDMA device port.
pub struct IbvSource {
    verbs: Verbs,
    ctx: *mut c_void,
    pd: *mut c_void,
    cq: *mut c_void,
    qp: *mut c_void,
    mr: *mut c_void,
    flows: Vec<*mut c_void>,
    endpoints: Vec<SocketAddrV4>,
    /// The receive ring (hugepages when reserved; registered with the NIC).
    mem: crate::mem::ChunkMem,
    buffer_size: usize,
    lkey: u32,
    sges: Vec<IbvSge>,
    wrs: Vec<IbvRecvWr>,
    wc: Vec<IbvWc>,
    /// Frame counters of the receive path.
    pub stats: FrameStats,
    /// Work completions with an error status.
    pub wc_errors: u64,
}

// SAFETY: the verbs objects are owned by this source and used from one thread at a time.
unsafe impl Send for IbvSource {}

impl IbvSource {
    /// Loads libibverbs, opens the device, creates the QP and flow rules, and posts every
    /// receive buffer. Errors: library missing, "no RDMA device found", device not found,
    /// or the failing verb.
    pub fn open(cfg: &IbvConfig) -> io::Result<Self> {
        if cfg.endpoints.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ibverbs receive needs at least one endpoint",
            ));
        }
        if cfg.buffers == 0 || cfg.buffer_size < 64 || cfg.buffer_size > u32::MAX as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad ibverbs buffer settings",
            ));
        }
        let verbs = Verbs::load()?;
        let names = device_names(&verbs)?;
        let want = cfg.device.clone().unwrap_or_else(|| names[0].clone());
        let mut src = IbvSource {
            verbs,
            ctx: std::ptr::null_mut(),
            pd: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            qp: std::ptr::null_mut(),
            mr: std::ptr::null_mut(),
            flows: Vec::new(),
            endpoints: cfg.endpoints.clone(),
            mem: crate::mem::ChunkMem::alloc(
                cfg.buffers.saturating_mul(cfg.buffer_size),
                &crate::mem::MemPolicy {
                    hugepages: true,
                    ..Default::default()
                },
            )?,
            buffer_size: cfg.buffer_size,
            lkey: 0,
            sges: vec![IbvSge::default(); cfg.buffers],
            wrs: Vec::new(),
            wc: vec![IbvWc::default(); 64],
            stats: FrameStats::default(),
            wc_errors: 0,
        };
        src.setup(&want, &names, cfg)?;
        Ok(src)
    }

    fn setup(&mut self, want: &str, names: &[String], cfg: &IbvConfig) -> io::Result<()> {
        let fail =
            |what: &str| io::Error::other(format!("{what} failed: {}", io::Error::last_os_error()));
        // SAFETY: each verb gets valid arguments; every object created is recorded in self
        // and released in Drop in reverse order.
        unsafe {
            let v = &self.verbs;
            self.ctx = open_device(v, want, names)?;
            self.pd = (v.alloc_pd)(self.ctx);
            if self.pd.is_null() {
                return Err(fail("ibv_alloc_pd"));
            }
            let depth = self.sges.len() as c_int;
            self.cq = (v.create_cq)(
                self.ctx,
                depth,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            );
            if self.cq.is_null() {
                return Err(fail("ibv_create_cq"));
            }
            let mut init = IbvQpInitAttr {
                qp_context: std::ptr::null_mut(),
                send_cq: self.cq,
                recv_cq: self.cq,
                srq: std::ptr::null_mut(),
                cap: IbvQpCap {
                    max_send_wr: 1,
                    max_recv_wr: depth as u32,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: IBV_QPT_RAW_PACKET,
                sq_sig_all: 0,
            };
            self.qp = (v.create_qp)(self.pd, &mut init);
            if self.qp.is_null() {
                return Err(fail(
                    "ibv_create_qp(IBV_QPT_RAW_PACKET) (needs CAP_NET_RAW)",
                ));
            }
            let mut a = IbvQpAttr::new(IBV_QPS_INIT, Some(cfg.port));
            let rc = (v.modify_qp)(self.qp, &mut a, IBV_QP_STATE | IBV_QP_PORT);
            if rc != 0 {
                return Err(io::Error::other(format!(
                    "ibv_modify_qp(INIT) failed: {}",
                    io::Error::from_raw_os_error(rc)
                )));
            }
            self.mr = (v.reg_mr)(
                self.pd,
                self.mem.as_mut_ptr() as *mut c_void,
                self.mem.len(),
                IBV_ACCESS_LOCAL_WRITE,
            );
            if self.mr.is_null() {
                return Err(fail("ibv_reg_mr"));
            }
            self.lkey = mr_lkey(self.mr);
            for ep in &cfg.endpoints {
                let mut rule = FlowRule::new(*ep, cfg.port, cfg.unicast_mac);
                let flow = create_flow(self.qp, &mut rule)?;
                self.flows.push(flow);
            }
            let mut a = IbvQpAttr::new(IBV_QPS_RTR, None);
            let rc = (v.modify_qp)(self.qp, &mut a, IBV_QP_STATE);
            if rc != 0 {
                return Err(io::Error::other(format!(
                    "ibv_modify_qp(RTR) failed: {}",
                    io::Error::from_raw_os_error(rc)
                )));
            }
            let all: Vec<u64> = (0..self.sges.len() as u64).collect();
            self.post(&all)?;
        }
        Ok(())
    }

    /// Posts the receive buffers `ids` as one linked list of work requests.
    fn post(&mut self, ids: &[u64]) -> io::Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.wrs.clear();
        for &id in ids {
            let k = id as usize;
            self.sges[k] = IbvSge {
                addr: self.mem[k * self.buffer_size..].as_ptr() as u64,
                length: self.buffer_size as u32,
                lkey: self.lkey,
            };
            let sge: *mut IbvSge = &mut self.sges[k];
            self.wrs.push(IbvRecvWr {
                wr_id: id,
                next: std::ptr::null_mut(),
                sg_list: sge,
                num_sge: 1,
            });
        }
        for k in 0..self.wrs.len() - 1 {
            let next: *mut IbvRecvWr = &mut self.wrs[k + 1];
            self.wrs[k].next = next;
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: the list and its buffers stay alive until the work completes (the
        // buffers are owned by self; the WR list is copied by the provider during the call).
        let rc = unsafe { post_recv(self.qp, self.wrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(io::Error::other(format!(
                "ibv_post_recv failed: {}",
                io::Error::from_raw_os_error(rc)
            )));
        }
        Ok(())
    }
}

impl PacketSource for IbvSource {
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8])) -> io::Result<Poll> {
        // SAFETY: cq is live; wc has room for its length.
        let n = unsafe { poll_cq(self.cq, self.wc.len() as c_int, self.wc.as_mut_ptr()) };
        if n < 0 {
            return Err(io::Error::other(format!("ibv_poll_cq failed ({n})")));
        }
        if n == 0 {
            std::thread::sleep(std::time::Duration::from_micros(20));
            return Ok(Poll::Idle);
        }
        let mut handed = 0;
        let mut ids = Vec::with_capacity(n as usize);
        for k in 0..n as usize {
            let wc = self.wc[k];
            if wc.wr_id as usize >= self.sges.len() {
                self.wc_errors += 1;
                continue;
            }
            ids.push(wc.wr_id);
            if wc.status != IBV_WC_SUCCESS {
                self.wc_errors += 1;
                continue;
            }
            self.stats.frames += 1;
            let start = wc.wr_id as usize * self.buffer_size;
            let len = (wc.byte_len as usize).min(self.buffer_size);
            let frame = &self.mem[start..start + len];
            handed += deliver_frame(&self.endpoints, &mut self.stats, frame, f) as usize;
        }
        self.post(&ids)?;
        Ok(Poll::Packets(handed))
    }
}

impl Drop for IbvSource {
    fn drop(&mut self) {
        let v = &self.verbs;
        // SAFETY: objects are destroyed once, in reverse order of creation.
        unsafe {
            for &fl in &self.flows {
                destroy_flow(self.ctx as *const u8, fl);
            }
            if !self.qp.is_null() {
                (v.destroy_qp)(self.qp);
            }
            if !self.mr.is_null() {
                (v.dereg_mr)(self.mr);
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

/// The engines' `--recv-ibv` source: the raw-packet QP plus the IGMP memberships.
pub struct IbvRecvSource {
    src: IbvSource,
    _memberships: Option<UdpSocket>,
    /// The RDMA port behind `--recv-interface` (`None` when no interface was given).
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
        let names = device_names(&Verbs::load()?)?;
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

    /// Frame counters of the receive path.
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
    fn no_device_or_no_library_is_a_clear_error() {
        let cfg = IbvConfig {
            endpoints: vec![SocketAddrV4::new(Ipv4Addr::new(239, 1, 1, 1), 7148)],
            buffers: 4,
            ..Default::default()
        };
        match IbvSource::open(&cfg) {
            Ok(_) => eprintln!("SKIP: this host has an RDMA device"),
            Err(e) => {
                let m = e.to_string();
                assert!(
                    m.contains("no RDMA device found") || m.contains("could not load"),
                    "{m}"
                );
            }
        }
        assert!(IbvSource::open(&IbvConfig::default()).is_err());
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
