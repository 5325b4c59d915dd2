//! The libibverbs ABI that gpucbf uses: constants, structures and function types of
//! rdma-core's `verbs.h` (x86-64, ABI of libibverbs.so.1, checked against rdma-core 44 by the
//! layout tests), the run-time loader ([`Verbs`]: `dlopen("libibverbs.so.1")`, so building
//! needs nothing and a binary runs on hosts without RDMA), and the verbs that `verbs.h`
//! declares `static inline`, emulated as the header does it: [`poll_cq`], [`post_recv`] and
//! [`post_send`] call through `context->ops`; [`create_flow`] and [`destroy_flow`] through
//! the extended `verbs_context` that lies just before the `ibv_context` in memory.
//!
//! The declarations are our own (no bindgen: no headers needed to build). Only what the
//! raw-packet receive and PeerDirect send paths use is declared; the safe layer lives next
//! to its users (gpucbf's `net::verbs`, `net::recv::ibv`, `net::send::verbs`).
#![warn(missing_docs)]

use std::ffi::{c_char, c_int, c_void};
use std::io;
use std::net::SocketAddrV4;

// ---- ABI constants (rdma-core verbs.h) ----
/// `enum ibv_qp_type`: a raw Ethernet queue pair.
pub const IBV_QPT_RAW_PACKET: u32 = 8;
/// `enum ibv_qp_attr_mask`: `qp_state` is set.
pub const IBV_QP_STATE: c_int = 1;
/// `enum ibv_qp_attr_mask`: `port_num` is set.
pub const IBV_QP_PORT: c_int = 32;
/// `enum ibv_qp_state`: initialised.
pub const IBV_QPS_INIT: u32 = 1;
/// `enum ibv_qp_state`: ready to receive.
pub const IBV_QPS_RTR: u32 = 2;
/// `enum ibv_qp_state`: ready to send.
pub const IBV_QPS_RTS: u32 = 3;
/// `enum ibv_access_flags`: the NIC may write the region (receive buffers).
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
/// `enum ibv_flow_attr_type`: a normal steering rule.
pub const IBV_FLOW_ATTR_NORMAL: u32 = 0;
/// `enum ibv_flow_spec_type`: Ethernet header match.
pub const IBV_FLOW_SPEC_ETH: u32 = 0x20;
/// `enum ibv_flow_spec_type`: IPv4 header match.
pub const IBV_FLOW_SPEC_IPV4: u32 = 0x30;
/// `enum ibv_flow_spec_type`: UDP header match.
pub const IBV_FLOW_SPEC_UDP: u32 = 0x41;
/// `enum ibv_wc_status`: the work request completed.
pub const IBV_WC_SUCCESS: u32 = 0;
/// `enum ibv_wr_opcode`: a send.
pub const IBV_WR_SEND: u32 = 2;
/// `enum ibv_send_flags`: generate a completion for this request.
pub const IBV_SEND_SIGNALED: u32 = 2;
/// `enum ibv_send_flags`: the NIC computes the IPv4 (and UDP) checksums.
pub const IBV_SEND_IP_CSUM: u32 = 16;

// Byte offsets inside `struct ibv_context` (x86-64): `ops` starts at 8.
/// `ibv_context.ops.poll_cq`.
pub const CTX_OPS_POLL_CQ: usize = 8 + 88;
/// `ibv_context.ops.post_send`.
pub const CTX_OPS_POST_SEND: usize = 208;
/// `ibv_context.ops.post_recv`.
pub const CTX_OPS_POST_RECV: usize = 8 + 208;
/// `ibv_context.abi_compat`.
pub const CTX_ABI_COMPAT: usize = 320;
/// `verbs_context` fields, as negative offsets from its trailing `ibv_context` (new
/// fields are added at the front, so these are stable), and `sizeof(verbs_context) -
/// offsetof(field)`, the `sz` a provider must report for the field to exist.
pub const VCTX_SZ_NEG: usize = 8;
/// `verbs_context.ibv_create_flow`, bytes before the `ibv_context`.
pub const VCTX_CREATE_FLOW_NEG: usize = 80;
/// `verbs_context.ibv_destroy_flow`, bytes before the `ibv_context`.
pub const VCTX_DESTROY_FLOW_NEG: usize = 96;
/// The `sz` a provider reports when its `verbs_context` has `ibv_create_flow`.
pub const VCTX_CREATE_FLOW_NEED: usize = 408;
/// The `sz` a provider reports when its `verbs_context` has `ibv_destroy_flow`.
pub const VCTX_DESTROY_FLOW_NEED: usize = 424;
/// `__VERBS_ABI_IS_EXTENDED`: `abi_compat` holds `(void *)-1` on extended contexts.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;
/// Byte offset of `lkey` in `struct ibv_mr`.
pub const MR_LKEY: usize = 36;

/// `struct ibv_qp_cap`: queue sizes asked of `ibv_create_qp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`: what `ibv_create_qp` creates.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub cap: IbvQpCap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_qp_attr` (144 bytes); only `qp_state` (offset 0) and `port_num` (129) are set.
#[repr(C, align(8))]
pub struct IbvQpAttr(pub [u8; 144]);

impl IbvQpAttr {
    /// Attributes for `ibv_modify_qp` to `state` (and, with `port`, on that port).
    pub fn new(state: u32, port: Option<u8>) -> Self {
        let mut a = IbvQpAttr([0; 144]);
        a.0[0..4].copy_from_slice(&state.to_ne_bytes());
        if let Some(p) = port {
            a.0[129] = p;
        }
        a
    }
}

/// `struct ibv_sge`: one scatter/gather entry (address, length, lkey of its region).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_recv_wr`: a receive work request (a linked list through `next`).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

/// `struct ibv_send_wr` (128 bytes); the unions after `imm_data` are unused for raw-packet
/// sends and stay zero.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_data: u32,
    pub rest: [u64; 11],
}

/// `struct ibv_wc`: a work completion.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// Multicast MAC of an IPv4 group (01:00:5e + low 23 bits).
pub fn multicast_mac(ip: std::net::Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
}

/// `sizeof(struct ibv_flow_attr)`.
pub const FLOW_ATTR_SIZE: usize = 20;
/// `sizeof(struct ibv_flow_spec_eth)`.
pub const FLOW_SPEC_ETH_SIZE: usize = 40;
/// `sizeof(struct ibv_flow_spec_ipv4)`.
pub const FLOW_SPEC_IPV4_SIZE: usize = 24;
/// `sizeof(struct ibv_flow_spec_tcp_udp)`.
pub const FLOW_SPEC_UDP_SIZE: usize = 16;
/// A [`FlowRule`]: the attribute and its three specs.
pub const FLOW_RULE_SIZE: usize =
    FLOW_ATTR_SIZE + FLOW_SPEC_ETH_SIZE + FLOW_SPEC_IPV4_SIZE + FLOW_SPEC_UDP_SIZE;

/// A flow-steering rule as `ibv_create_flow` takes it: `struct ibv_flow_attr` followed by
/// `ibv_flow_spec_eth`, `ibv_flow_spec_ipv4`, `ibv_flow_spec_tcp_udp` (spead2's
/// `create_flow`): for a multicast group the Ethernet destination is the group's MAC, for
/// unicast `unicast_mac` (the interface's MAC; `None` leaves the MAC unmatched); IPv4
/// destination and UDP destination port match exactly. Addresses and ports are in network
/// byte order, the spec headers in host order.
#[repr(C, align(4))]
pub struct FlowRule(pub [u8; FLOW_RULE_SIZE]);

impl FlowRule {
    /// The rule steering datagrams to `ep` arriving on port `port_num`.
    pub fn new(ep: SocketAddrV4, port_num: u8, unicast_mac: Option<[u8; 6]>) -> Self {
        let mut b = [0u8; FLOW_RULE_SIZE];
        // ibv_flow_attr: comp_mask, type, size, priority, num_of_specs, port, flags.
        b[4..8].copy_from_slice(&IBV_FLOW_ATTR_NORMAL.to_ne_bytes());
        b[8..10].copy_from_slice(&(FLOW_RULE_SIZE as u16).to_ne_bytes());
        b[12] = 3;
        b[13] = port_num;
        // ibv_flow_spec_eth: type, size, val{dst_mac, src_mac, ether_type, vlan_tag}, mask.
        let e = FLOW_ATTR_SIZE;
        b[e..e + 4].copy_from_slice(&IBV_FLOW_SPEC_ETH.to_ne_bytes());
        b[e + 4..e + 6].copy_from_slice(&(FLOW_SPEC_ETH_SIZE as u16).to_ne_bytes());
        let mac = if ep.ip().is_multicast() {
            Some(multicast_mac(*ep.ip()))
        } else {
            unicast_mac
        };
        if let Some(mac) = mac {
            b[e + 6..e + 12].copy_from_slice(&mac);
            b[e + 22..e + 28].copy_from_slice(&[0xff; 6]);
        }
        // ibv_flow_spec_ipv4: type, size, val{src_ip, dst_ip}, mask.
        let i = e + FLOW_SPEC_ETH_SIZE;
        b[i..i + 4].copy_from_slice(&IBV_FLOW_SPEC_IPV4.to_ne_bytes());
        b[i + 4..i + 6].copy_from_slice(&(FLOW_SPEC_IPV4_SIZE as u16).to_ne_bytes());
        if !ep.ip().is_unspecified() {
            b[i + 12..i + 16].copy_from_slice(&ep.ip().octets());
            b[i + 20..i + 24].copy_from_slice(&[0xff; 4]);
        }
        // ibv_flow_spec_tcp_udp: type, size, val{dst_port, src_port}, mask.
        let u = i + FLOW_SPEC_IPV4_SIZE;
        b[u..u + 4].copy_from_slice(&IBV_FLOW_SPEC_UDP.to_ne_bytes());
        b[u + 4..u + 6].copy_from_slice(&(FLOW_SPEC_UDP_SIZE as u16).to_ne_bytes());
        b[u + 6..u + 8].copy_from_slice(&ep.port().to_be_bytes());
        b[u + 10..u + 12].copy_from_slice(&[0xff; 2]);
        FlowRule(b)
    }
}

// Function types of the verbs, as `verbs.h` declares them (objects as `void *`).
/// `ibv_get_device_list`.
pub type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
/// `ibv_free_device_list`.
pub type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
/// `ibv_get_device_name`.
pub type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;
/// `ibv_open_device`.
pub type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
/// `ibv_close_device`.
pub type CloseDevice = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `ibv_alloc_pd`.
pub type AllocPd = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
/// `ibv_dealloc_pd`, `ibv_destroy_cq`, `ibv_destroy_qp`, `ibv_dereg_mr`, `ibv_destroy_flow`.
pub type Destroy = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `ibv_create_cq`.
pub type CreateCq =
    unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, *mut c_void, c_int) -> *mut c_void;
/// `ibv_create_qp`.
pub type CreateQp = unsafe extern "C" fn(*mut c_void, *mut IbvQpInitAttr) -> *mut c_void;
/// `ibv_modify_qp`.
pub type ModifyQp = unsafe extern "C" fn(*mut c_void, *mut IbvQpAttr, c_int) -> c_int;
/// `ibv_reg_mr`.
pub type RegMr = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut c_void;
/// `ibv_context.ops.poll_cq`.
pub type PollCq = unsafe extern "C" fn(*mut c_void, c_int, *mut IbvWc) -> c_int;
/// `ibv_context.ops.post_recv`.
pub type PostRecv = unsafe extern "C" fn(*mut c_void, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
/// `verbs_context.ibv_create_flow`.
pub type CreateFlow = unsafe extern "C" fn(*mut c_void, *mut FlowRule) -> *mut c_void;
/// `ibv_context.ops.post_send`.
pub type PostSend = unsafe extern "C" fn(*mut c_void, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
/// `ibv_reg_dmabuf_mr` (rdma-core 34 and later).
pub type RegDmabufMr =
    unsafe extern "C" fn(*mut c_void, u64, usize, u64, c_int, c_int) -> *mut c_void;

/// The exported verbs we call, resolved from libibverbs at run time.
#[allow(missing_docs)]
pub struct Verbs {
    lib: libloading::Library,
    pub get_device_list: GetDeviceList,
    pub free_device_list: FreeDeviceList,
    pub get_device_name: GetDeviceName,
    pub open_device: OpenDevice,
    pub close_device: CloseDevice,
    pub alloc_pd: AllocPd,
    pub dealloc_pd: Destroy,
    pub create_cq: CreateCq,
    pub destroy_cq: Destroy,
    pub create_qp: CreateQp,
    pub destroy_qp: Destroy,
    pub modify_qp: ModifyQp,
    pub reg_mr: RegMr,
    pub dereg_mr: Destroy,
}

impl Verbs {
    /// Loads `libibverbs.so.1`.
    pub fn load() -> io::Result<Self> {
        Self::load_from("libibverbs.so.1")
    }

    /// Loads the verbs library from `name` (a soname or a path).
    pub fn load_from(name: &str) -> io::Result<Self> {
        // SAFETY: loading libibverbs runs its constructors, which are safe to run.
        let lib = unsafe { libloading::Library::new(name) }.map_err(|e| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("could not load {name} (install libibverbs1 / rdma-core): {e}"),
            )
        })?;
        fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> io::Result<T> {
            // SAFETY: T is the function type declared in verbs.h for `name`.
            unsafe { lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| io::Error::other(format!("libibverbs lacks {name}: {e}")))
        }
        Ok(Verbs {
            get_device_list: sym(&lib, "ibv_get_device_list")?,
            free_device_list: sym(&lib, "ibv_free_device_list")?,
            get_device_name: sym(&lib, "ibv_get_device_name")?,
            open_device: sym(&lib, "ibv_open_device")?,
            close_device: sym(&lib, "ibv_close_device")?,
            alloc_pd: sym(&lib, "ibv_alloc_pd")?,
            dealloc_pd: sym(&lib, "ibv_dealloc_pd")?,
            create_cq: sym(&lib, "ibv_create_cq")?,
            destroy_cq: sym(&lib, "ibv_destroy_cq")?,
            create_qp: sym(&lib, "ibv_create_qp")?,
            destroy_qp: sym(&lib, "ibv_destroy_qp")?,
            modify_qp: sym(&lib, "ibv_modify_qp")?,
            reg_mr: sym(&lib, "ibv_reg_mr")?,
            dereg_mr: sym(&lib, "ibv_dereg_mr")?,
            lib,
        })
    }

    /// An optional symbol of the library (newer verbs such as `ibv_reg_dmabuf_mr`).
    ///
    /// # Safety
    /// `T` must be the C function type of `name`.
    pub unsafe fn optional<T: Copy>(&self, name: &str) -> Option<T> {
        self.lib.get::<T>(name.as_bytes()).ok().map(|s| *s)
    }
}

/// `ibv_poll_cq` (static inline in verbs.h): `cq->context->ops.poll_cq(cq, n, wc)`.
///
/// # Safety
/// `cq` must be a live `struct ibv_cq *` and `wc` must have room for `n` entries.
pub unsafe fn poll_cq(cq: *mut c_void, n: c_int, wc: *mut IbvWc) -> c_int {
    let ctx = *(cq as *const *const u8);
    let f = *(ctx.add(CTX_OPS_POLL_CQ) as *const Option<PollCq>);
    match f {
        Some(f) => f(cq, n, wc),
        None => -libc::EOPNOTSUPP,
    }
}

/// `ibv_post_recv` (static inline): `qp->context->ops.post_recv(qp, wr, bad_wr)`.
///
/// # Safety
/// `qp` must be a live `struct ibv_qp *`; `wr` a valid list of receive work requests.
pub unsafe fn post_recv(qp: *mut c_void, wr: *mut IbvRecvWr, bad: *mut *mut IbvRecvWr) -> c_int {
    let ctx = *(qp as *const *const u8);
    match *(ctx.add(CTX_OPS_POST_RECV) as *const Option<PostRecv>) {
        Some(f) => f(qp, wr, bad),
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_send` (static inline): `qp->context->ops.post_send(qp, wr, bad)`.
///
/// # Safety
/// `qp` must be a live `struct ibv_qp *` and `wr` a valid list whose buffers stay
/// registered until the sends complete.
pub unsafe fn post_send(qp: *mut c_void, wr: *mut IbvSendWr, bad: *mut *mut IbvSendWr) -> c_int {
    let ctx = *(qp as *const *const u8);
    match *(ctx.add(CTX_OPS_POST_SEND) as *const Option<PostSend>) {
        Some(f) => f(qp, wr, bad),
        None => libc::EOPNOTSUPP,
    }
}

/// The `lkey` of a memory region (`mr->lkey`).
///
/// # Safety
/// `mr` must be a live `struct ibv_mr *`.
pub unsafe fn mr_lkey(mr: *const c_void) -> u32 {
    *((mr as *const u8).add(MR_LKEY) as *const u32)
}

/// The extended-context function pointer at `neg` bytes before `ctx`, if the provider's
/// `verbs_context` is extended, large enough (`sz >= need`) and sets it.
unsafe fn vctx_op(ctx: *const u8, neg: usize, need: usize) -> Option<*const c_void> {
    if *(ctx.add(CTX_ABI_COMPAT) as *const usize) != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    if *(ctx.sub(VCTX_SZ_NEG) as *const usize) < need {
        return None;
    }
    let f = *(ctx.sub(neg) as *const *const c_void);
    (!f.is_null()).then_some(f)
}

/// `ibv_create_flow` (static inline): through `verbs_context.ibv_create_flow`.
///
/// # Safety
/// `qp` must be a live `struct ibv_qp *`.
pub unsafe fn create_flow(qp: *mut c_void, rule: &mut FlowRule) -> io::Result<*mut c_void> {
    let ctx = *(qp as *const *const u8);
    let f = vctx_op(ctx, VCTX_CREATE_FLOW_NEG, VCTX_CREATE_FLOW_NEED).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "the RDMA provider has no flow steering (ibv_create_flow)",
        )
    })?;
    let f: CreateFlow = std::mem::transmute(f);
    let flow = f(qp, rule);
    if flow.is_null() {
        return Err(io::Error::other(format!(
            "ibv_create_flow failed: {}",
            io::Error::last_os_error()
        )));
    }
    Ok(flow)
}

/// `ibv_destroy_flow` (static inline): through `verbs_context.ibv_destroy_flow`.
///
/// # Safety
/// `ctx` must be the context of the QP that `flow` was created on.
pub unsafe fn destroy_flow(ctx: *const u8, flow: *mut c_void) -> c_int {
    match vctx_op(ctx, VCTX_DESTROY_FLOW_NEG, VCTX_DESTROY_FLOW_NEED) {
        Some(f) => {
            let f: Destroy = std::mem::transmute(f);
            f(flow)
        }
        None => libc::EOPNOTSUPP,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn struct_sizes_match_verbs_h() {
        // Values printed by a C program against rdma-core 44's verbs.h (x86-64).
        assert_eq!(std::mem::size_of::<IbvQpInitAttr>(), 64);
        assert_eq!(std::mem::offset_of!(IbvQpInitAttr, cap), 32);
        assert_eq!(std::mem::offset_of!(IbvQpInitAttr, qp_type), 52);
        assert_eq!(std::mem::offset_of!(IbvQpInitAttr, sq_sig_all), 56);
        assert_eq!(std::mem::size_of::<IbvQpAttr>(), 144);
        assert_eq!(std::mem::size_of::<IbvWc>(), 48);
        assert_eq!(std::mem::offset_of!(IbvWc, status), 8);
        assert_eq!(std::mem::offset_of!(IbvWc, byte_len), 20);
        assert_eq!(std::mem::offset_of!(IbvWc, wc_flags), 36);
        assert_eq!(std::mem::size_of::<IbvRecvWr>(), 32);
        assert_eq!(std::mem::size_of::<IbvSge>(), 16);
        assert_eq!(FLOW_RULE_SIZE, 20 + 40 + 24 + 16);
        assert_eq!(std::mem::size_of::<FlowRule>(), FLOW_RULE_SIZE);
        let a = IbvQpAttr::new(IBV_QPS_INIT, Some(1));
        assert_eq!(&a.0[0..4], &1u32.to_ne_bytes());
        assert_eq!(a.0[129], 1);
    }

    #[test]
    fn flow_rule_for_multicast_group() {
        let ep = SocketAddrV4::new(Ipv4Addr::new(239, 129, 2, 3), 7148);
        let r = FlowRule::new(ep, 1, None).0;
        let u16_at = |o: usize| u16::from_ne_bytes([r[o], r[o + 1]]);
        let u32_at = |o: usize| u32::from_ne_bytes(r[o..o + 4].try_into().unwrap());
        // ibv_flow_attr
        assert_eq!(u32_at(0), 0);
        assert_eq!(u32_at(4), IBV_FLOW_ATTR_NORMAL);
        assert_eq!(u16_at(8) as usize, FLOW_RULE_SIZE);
        assert_eq!((r[12], r[13]), (3, 1));
        // eth spec at 20: dst MAC 01:00:5e:01:02:03 (bit 23 of the group cleared), full mask
        assert_eq!(u32_at(20), 0x20);
        assert_eq!(u16_at(24), 40);
        assert_eq!(&r[26..32], &[0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]);
        assert_eq!(&r[42..48], &[0xff; 6]);
        assert!(r[32..42].iter().chain(&r[48..60]).all(|&b| b == 0));
        // ipv4 spec at 60: dst 239.129.2.3 in network order, mask on dst only
        assert_eq!(u32_at(60), 0x30);
        assert_eq!(u16_at(64), 24);
        assert_eq!(&r[68..72], &[0; 4]);
        assert_eq!(&r[72..76], &[239, 129, 2, 3]);
        assert_eq!(&r[76..80], &[0; 4]);
        assert_eq!(&r[80..84], &[0xff; 4]);
        // udp spec at 84: dst port 7148 big-endian, mask on dst port only
        assert_eq!(u32_at(84), 0x41);
        assert_eq!(u16_at(88), 16);
        assert_eq!(&r[90..92], &7148u16.to_be_bytes());
        assert_eq!(&r[92..94], &[0, 0]);
        assert_eq!(&r[94..96], &[0xff, 0xff]);
        assert_eq!(&r[96..100], &[0; 4]);
        // unicast: MAC given is matched, none given leaves the MAC mask empty
        let uni = SocketAddrV4::new(Ipv4Addr::new(169, 254, 1, 2), 7149);
        let r = FlowRule::new(uni, 2, Some([2, 3, 4, 5, 6, 7])).0;
        assert_eq!(&r[26..32], &[2, 3, 4, 5, 6, 7]);
        assert_eq!(r[13], 2);
        let r = FlowRule::new(uni, 1, None).0;
        assert_eq!(&r[42..48], &[0; 6]);
        assert_eq!(&r[72..76], &[169, 254, 1, 2]);
    }

    #[test]
    fn missing_library_is_a_clear_error() {
        let e = Verbs::load_from("libibverbs-gpucbf-absent.so.1")
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(
            e.to_string()
                .contains("could not load libibverbs-gpucbf-absent.so.1"),
            "{e}"
        );
    }

    // A fake provider: an extended verbs_context (648 bytes, ibv_context at 320) whose ops
    // and extended ops point at recording functions, to check the static-inline emulation.
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    static CALLS: [AtomicUsize; 4] = [
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ];
    unsafe extern "C" fn fake_poll(_cq: *mut c_void, n: c_int, _wc: *mut IbvWc) -> c_int {
        CALLS[0].fetch_add(1, Relaxed);
        n - 1
    }
    unsafe extern "C" fn fake_post(
        _qp: *mut c_void,
        _w: *mut IbvRecvWr,
        _b: *mut *mut IbvRecvWr,
    ) -> c_int {
        CALLS[1].fetch_add(1, Relaxed);
        0
    }
    unsafe extern "C" fn fake_send(
        _qp: *mut c_void,
        _w: *mut IbvSendWr,
        _b: *mut *mut IbvSendWr,
    ) -> c_int {
        CALLS[3].fetch_add(1, Relaxed);
        0
    }
    unsafe extern "C" fn fake_flow(qp: *mut c_void, rule: *mut FlowRule) -> *mut c_void {
        CALLS[2].fetch_add(1, Relaxed);
        if (*rule).0[12] == 3 {
            qp
        } else {
            std::ptr::null_mut()
        }
    }

    #[test]
    fn static_inline_verbs_go_through_the_context() {
        #[repr(C, align(8))]
        struct Fake([u8; 648]);
        let mut vctx = Box::new(Fake([0; 648]));
        let base = vctx.0.as_mut_ptr();
        // SAFETY: all offsets lie inside the 648-byte block; pointers are 8-aligned.
        unsafe {
            let ctx = base.add(320);
            *(ctx.add(CTX_OPS_POLL_CQ) as *mut usize) = fake_poll as *const () as usize;
            *(ctx.add(CTX_OPS_POST_RECV) as *mut usize) = fake_post as *const () as usize;
            *(ctx.add(CTX_OPS_POST_SEND) as *mut usize) = fake_send as *const () as usize;
            *(ctx.add(CTX_ABI_COMPAT) as *mut usize) = usize::MAX;
            *(ctx.sub(VCTX_SZ_NEG) as *mut usize) = 648;
            *(ctx.sub(VCTX_CREATE_FLOW_NEG) as *mut usize) = fake_flow as *const () as usize;
            // A "qp"/"cq" whose first word is the context pointer.
            let mut obj: [usize; 8] = [ctx as usize, 0, 0, 0, 0, 0, 0, 0];
            let o = obj.as_mut_ptr() as *mut c_void;
            let mut wc = [IbvWc::default(); 4];
            assert_eq!(poll_cq(o, 4, wc.as_mut_ptr()), 3);
            assert_eq!(post_recv(o, std::ptr::null_mut(), std::ptr::null_mut()), 0);
            assert_eq!(post_send(o, std::ptr::null_mut(), std::ptr::null_mut()), 0);
            let mut rule =
                FlowRule::new(SocketAddrV4::new(Ipv4Addr::new(239, 0, 0, 1), 1), 1, None);
            assert_eq!(create_flow(o, &mut rule).unwrap(), o);
            // destroy_flow is not set: EOPNOTSUPP instead of a call through NULL.
            assert_eq!(destroy_flow(ctx, o), libc::EOPNOTSUPP);
            // A provider whose verbs_context is too small for ibv_create_flow.
            *(ctx.sub(VCTX_SZ_NEG) as *mut usize) = 400;
            let e = create_flow(o, &mut rule).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::Unsupported);
            // Not an extended context at all.
            *(ctx.sub(VCTX_SZ_NEG) as *mut usize) = 648;
            *(ctx.add(CTX_ABI_COMPAT) as *mut usize) = 0;
            assert!(create_flow(o, &mut rule).is_err());
            let calls: Vec<usize> = CALLS.iter().map(|c| c.load(Relaxed)).collect();
            assert_eq!(calls, [1, 1, 1, 1]);
        }
    }

    #[test]
    fn send_wr_layout_matches_verbs_h() {
        // offsetof/sizeof printed by a C program against rdma-core 44's verbs.h (x86-64).
        assert_eq!(std::mem::size_of::<IbvSendWr>(), 128);
        assert_eq!(std::mem::offset_of!(IbvSendWr, num_sge), 24);
        assert_eq!(std::mem::offset_of!(IbvSendWr, opcode), 28);
        assert_eq!(std::mem::offset_of!(IbvSendWr, send_flags), 32);
        assert_eq!(std::mem::offset_of!(IbvSendWr, imm_data), 36);
        assert_eq!(std::mem::size_of::<IbvSge>(), 16);
    }
}
