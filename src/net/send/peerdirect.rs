//! `--use-peerdirect`: transmit heaps straight from GPU memory (output items) through a
//! raw-packet ibverbs queue pair, as katgpucbf does with spead2 and PeerDirect.
//!
//! The pieces, each testable without the hardware:
//! * [`decide`]: which transmit path a host supports, from a [`Probe`] (RDMA device, GPU,
//!   dmabuf export on the GPU and `ibv_reg_dmabuf_mr` in libibverbs, or the nvidia-peermem
//!   module); anything missing gives [`TransmitPath::PinnedHostStaging`] with the reason,
//!   which the engine logs.
//! * [`GpuMr`] (feature `ibverbs`): registers a device allocation with the NIC, by a dmabuf
//!   file descriptor (`cuMemGetHandleForAddressRange` + `ibv_reg_dmabuf_mr`) or, with
//!   nvidia-peermem, by `ibv_reg_mr` on the device address.
//! * [`PacketWrs`]: the send work requests of one output item: per packet two scatter
//!   entries, the headers (host memory) and the payload (GPU memory), only the item's last
//!   packet signalled; [`post_send`] calls the provider like verbs.h's static inline.
//! * [`SendTracker`]: an output item returns to the free queue only when the completion
//!   of its last packet arrives (a send queue completes in order), and
//!   [`output_items_for_peerdirect`] sizes the ring for that longer life.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void};

/// How the engine transmits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransmitPath {
    /// NIC reads the payload from GPU memory registered this way.
    PeerDirect(GpuMrKind),
    /// Output items are copied to pinned host memory and sent from there.
    PinnedHostStaging { reason: String },
}

/// How GPU memory is registered with the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuMrKind {
    /// dmabuf export of the CUDA allocation (`ibv_reg_dmabuf_mr`, kernel ≥ 5.12).
    Dmabuf,
    /// nvidia-peermem kernel module: `ibv_reg_mr` on the device pointer.
    PeerMem,
}

/// What the host offers (filled by [`probe`], or by hand in tests).
#[derive(Debug, Clone)]
pub struct Probe {
    /// The binary has the `ibverbs` feature.
    pub ibverbs_built: bool,
    /// RDMA devices, or why there are none.
    pub rdma: Result<Vec<String>, String>,
    /// A CUDA GPU is present.
    pub gpu: bool,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` on device 0.
    pub gpu_dmabuf: bool,
    /// libibverbs exports `ibv_reg_dmabuf_mr`.
    pub verbs_dmabuf: bool,
    /// `/sys/module/nvidia_peermem` exists.
    pub peermem: bool,
    /// The engines' pipelines can hand batches to the verbs transmit sink
    /// ([`crate::net::send::verbs::PeerDirectSender`], feature `ibverbs`) in GPU memory
    /// (false until the pipelines write into its output items).
    pub verbs_sink: bool,
}

/// The transmit path for `--use-peerdirect` on a host described by `p`.
pub fn decide(p: &Probe) -> TransmitPath {
    let fallback = |reason: &str| TransmitPath::PinnedHostStaging {
        reason: reason.to_string(),
    };
    if !p.ibverbs_built {
        return fallback("this binary was built without the ibverbs feature");
    }
    if let Err(e) = &p.rdma {
        return fallback(e);
    }
    if !p.gpu {
        return fallback("no GPU present");
    }
    let kind = if p.gpu_dmabuf && p.verbs_dmabuf {
        GpuMrKind::Dmabuf
    } else if p.peermem {
        GpuMrKind::PeerMem
    } else {
        return fallback(
            "GPU memory cannot be registered with the NIC (no dmabuf export and no nvidia-peermem module)",
        );
    };
    if !p.verbs_sink {
        return fallback(
            "the engines' pipelines still produce each batch in host memory: the GPU-memory sender (net::verbs_send::PeerDirectSender) is not wired into them yet",
        );
    }
    TransmitPath::PeerDirect(kind)
}

/// Probes this host (loads libibverbs and the CUDA driver only if present).
pub fn probe() -> Probe {
    let gpu = crate::gpu::gpu_available();
    let gpu_dmabuf = gpu && gpu_supports_dmabuf();
    #[cfg(feature = "ibverbs")]
    let (rdma, verbs_dmabuf) = match crate::net::verbs::Verbs::load() {
        Ok(v) => (
            v.device_names().map_err(|e| e.to_string()),
            // SAFETY: only looks the symbol up.
            unsafe { v.optional::<RegDmabufMr>("ibv_reg_dmabuf_mr") }.is_some(),
        ),
        Err(e) => (Err(e.to_string()), false),
    };
    #[cfg(not(feature = "ibverbs"))]
    let (rdma, verbs_dmabuf) = (Err("built without ibverbs".to_string()), false);
    Probe {
        ibverbs_built: cfg!(feature = "ibverbs"),
        rdma,
        gpu,
        gpu_dmabuf,
        verbs_dmabuf,
        peermem: std::path::Path::new("/sys/module/nvidia_peermem").exists(),
        verbs_sink: false,
    }
}

fn gpu_supports_dmabuf() -> bool {
    use cudarc::driver::sys;
    let Ok(ctx) = std::panic::catch_unwind(|| cudarc::driver::CudaContext::new(0)) else {
        return false;
    };
    let Ok(ctx) = ctx else { return false };
    let mut v: c_int = 0;
    // SAFETY: a plain attribute query on a device that the context was created for.
    let r = unsafe {
        sys::cuDeviceGetAttribute(
            &mut v,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
            ctx.cu_device(),
        )
    };
    r == sys::CUresult::CUDA_SUCCESS && v != 0
}

/// The engine's start-up decision for `--use-peerdirect`, logged either way.
pub fn plan(requested: bool) -> Option<TransmitPath> {
    if !requested {
        return None;
    }
    let path = decide(&probe());
    match &path {
        TransmitPath::PeerDirect(kind) => {
            tracing::info!(?kind, "--use-peerdirect: sending heaps from GPU memory")
        }
        TransmitPath::PinnedHostStaging { reason } => tracing::warn!(
            "--use-peerdirect: {reason}; falling back to staging output items through pinned host memory"
        ),
    }
    Some(path)
}

/// Output items an engine needs with PeerDirect: an item stays busy until the NIC has sent
/// all its packets, so besides the `base` items of the pipeline, enough to cover a full
/// send queue (`send_queue_depth` work requests of `packets_per_item` each), plus one.
pub fn output_items_for_peerdirect(
    base: usize,
    send_queue_depth: usize,
    packets_per_item: usize,
) -> usize {
    base + send_queue_depth.div_ceil(packets_per_item.max(1)) + 1
}

// ---- verbs structures (rdma-core verbs.h, x86-64; checked against rdma-core 44) ----

pub const IBV_WR_SEND: u32 = 2;
pub const IBV_SEND_SIGNALED: u32 = 2;
pub const IBV_SEND_IP_CSUM: u32 = 16;
/// `ibv_context.ops.post_send`.
pub(crate) const CTX_OPS_POST_SEND: usize = 208;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr` (128 bytes); the unions after `imm_data` are unused for raw-packet
/// sends and stay zero.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SendWr {
    pub wr_id: u64,
    pub next: *mut SendWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_data: u32,
    pub rest: [u64; 11],
}

type PostSend = unsafe extern "C" fn(*mut c_void, *mut SendWr, *mut *mut SendWr) -> c_int;
#[cfg(feature = "ibverbs")]
type RegDmabufMr = unsafe extern "C" fn(*mut c_void, u64, usize, u64, c_int, c_int) -> *mut c_void;

/// `ibv_post_send` (static inline in verbs.h): `qp->context->ops.post_send(qp, wr, bad)`.
///
/// # Safety
/// `qp` must be a live `struct ibv_qp *` and `wr` a valid list whose buffers stay
/// registered until the sends complete.
pub unsafe fn post_send(qp: *mut c_void, wr: *mut SendWr, bad: *mut *mut SendWr) -> c_int {
    let ctx = *(qp as *const *const u8);
    match *(ctx.add(CTX_OPS_POST_SEND) as *const Option<PostSend>) {
        Some(f) => f(qp, wr, bad),
        None => libc::EOPNOTSUPP,
    }
}

/// Where an item's packets lie: headers in host memory, payloads in GPU memory.
#[derive(Debug, Clone, Copy)]
pub struct ItemLayout {
    /// Host address of packet 0's headers (Ethernet + IPv4 + UDP + SPEAD), `header_stride`
    /// apart, and the host memory region's lkey.
    pub header_addr: u64,
    pub header_stride: u32,
    pub header_len: u32,
    pub header_lkey: u32,
    /// Device address of the item's payload and the GPU memory region's lkey.
    pub payload_addr: u64,
    pub payload_len: u64,
    pub payload_lkey: u32,
    /// Payload bytes per packet (the last packet may be shorter).
    pub packet_payload: u32,
}

/// The chained send work requests of one output item.
pub struct PacketWrs {
    sges: Vec<[Sge; 2]>,
    wrs: Vec<SendWr>,
}

/// wr_id of packet `k` of output item `item`.
pub fn wr_id(item: u32, k: u32) -> u64 {
    ((item as u64) << 32) | k as u64
}

impl PacketWrs {
    /// Builds the work requests for `item`; `None` if the layout is inconsistent (zero
    /// packet size, or more packets than header slots would address).
    pub fn new(item: u32, l: &ItemLayout) -> Option<Self> {
        if l.packet_payload == 0 || l.payload_len == 0 || l.header_stride < l.header_len {
            return None;
        }
        let n = l.payload_len.div_ceil(l.packet_payload as u64);
        let n = u32::try_from(n).ok()?;
        let mut sges = Vec::with_capacity(n as usize);
        for k in 0..n {
            let off = k as u64 * l.packet_payload as u64;
            let len = (l.payload_len - off).min(l.packet_payload as u64) as u32;
            sges.push([
                Sge {
                    addr: l.header_addr + k as u64 * l.header_stride as u64,
                    length: l.header_len,
                    lkey: l.header_lkey,
                },
                Sge {
                    addr: l.payload_addr + off,
                    length: len,
                    lkey: l.payload_lkey,
                },
            ]);
        }
        Self::from_sges(item, sges)
    }

    /// Work requests for explicit packets: per packet its header and payload entries, in
    /// sending order; only the last is signalled. `None` if there are none (or too many
    /// for a u32 index).
    pub fn from_sges(item: u32, sges: Vec<[Sge; 2]>) -> Option<Self> {
        let n = u32::try_from(sges.len()).ok().filter(|&n| n > 0)?;
        let mut w = PacketWrs {
            sges,
            wrs: Vec::with_capacity(n as usize),
        };
        for k in 0..n {
            let last = k + 1 == n;
            w.wrs.push(SendWr {
                wr_id: wr_id(item, k),
                next: std::ptr::null_mut(),
                sg_list: std::ptr::null_mut(),
                num_sge: 2,
                opcode: IBV_WR_SEND,
                send_flags: IBV_SEND_IP_CSUM | if last { IBV_SEND_SIGNALED } else { 0 },
                imm_data: 0,
                rest: [0; 11],
            });
        }
        w.link();
        Some(w)
    }

    fn link(&mut self) {
        for k in 0..self.wrs.len() {
            self.wrs[k].sg_list = self.sges[k].as_mut_ptr();
            self.wrs[k].next = if k + 1 < self.wrs.len() {
                &mut self.wrs[k + 1]
            } else {
                std::ptr::null_mut()
            };
        }
    }

    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    pub fn wrs(&self) -> &[SendWr] {
        &self.wrs
    }

    pub fn sges(&self, k: usize) -> &[Sge; 2] {
        &self.sges[k]
    }

    /// Posts the whole chain on `qp`.
    ///
    /// # Safety
    /// `qp` must be a live raw-packet QP in RTS whose send queue has room for
    /// [`Self::len`] requests; the registered memory must outlive the sends.
    pub unsafe fn post(&mut self, qp: *mut c_void) -> std::io::Result<()> {
        let mut bad = std::ptr::null_mut();
        let rc = post_send(qp, self.wrs.as_mut_ptr(), &mut bad);
        if rc != 0 {
            return Err(std::io::Error::other(format!(
                "ibv_post_send failed: {}",
                std::io::Error::from_raw_os_error(rc)
            )));
        }
        Ok(())
    }
}

/// Output items in flight on the NIC, released when their last packet completes.
#[derive(Debug, Default)]
pub struct SendTracker {
    /// (item, wr_id of its signalled last packet), in posting order.
    in_flight: VecDeque<(u32, u64)>,
    /// Completions that matched no item in flight (counted, never a panic).
    pub stray_completions: u64,
}

impl SendTracker {
    pub fn posted(&mut self, item: u32, wrs: &PacketWrs) {
        if let Some(last) = wrs.wrs().last() {
            self.in_flight.push_back((item, last.wr_id));
        }
    }

    /// A send completion for `wr_id` arrived: returns the items now free, oldest first
    /// (the send queue completes in order, so every earlier item is done too).
    pub fn completed(&mut self, wr_id: u64, free: &mut Vec<u32>) {
        let Some(pos) = self.in_flight.iter().position(|&(_, w)| w == wr_id) else {
            self.stray_completions += 1;
            return;
        };
        free.extend(self.in_flight.drain(..=pos).map(|(item, _)| item));
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

/// A device allocation registered with the NIC (feature `ibverbs`).
#[cfg(feature = "ibverbs")]
pub struct GpuMr<'v> {
    verbs: &'v crate::net::verbs::Verbs,
    mr: *mut c_void,
    pub kind: GpuMrKind,
    pub lkey: u32,
    dmabuf_fd: c_int,
}

#[cfg(feature = "ibverbs")]
impl<'v> GpuMr<'v> {
    /// Registers `len` bytes at device address `dptr` on protection domain `pd`. With
    /// dmabuf, `dptr` and `len` must be host-page aligned (CUDA's rule for the export).
    ///
    /// # Safety
    /// `pd` must be a live protection domain of `verbs`; `dptr..dptr+len` a live CUDA
    /// allocation in the current context, kept alive until the region is dropped.
    pub unsafe fn register(
        verbs: &'v crate::net::verbs::Verbs,
        pd: *mut c_void,
        dptr: u64,
        len: usize,
        kind: GpuMrKind,
    ) -> std::io::Result<Self> {
        use std::io::Error;
        let access = crate::net::verbs::IBV_ACCESS_LOCAL_WRITE;
        let (mr, fd) = match kind {
            GpuMrKind::Dmabuf => {
                use cudarc::driver::sys;
                let reg: RegDmabufMr = verbs
                    .optional("ibv_reg_dmabuf_mr")
                    .ok_or_else(|| Error::other("libibverbs has no ibv_reg_dmabuf_mr"))?;
                let mut fd: c_int = -1;
                let r = sys::cuMemGetHandleForAddressRange(
                    &mut fd as *mut c_int as *mut c_void,
                    dptr,
                    len,
                    sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    0,
                );
                if r != sys::CUresult::CUDA_SUCCESS {
                    return Err(Error::other(format!(
                        "cuMemGetHandleForAddressRange(DMA_BUF_FD) failed: {r:?}"
                    )));
                }
                (reg(pd, 0, len, dptr, fd, access), fd)
            }
            GpuMrKind::PeerMem => (verbs.reg_mr_raw(pd, dptr as *mut c_void, len, access), -1),
        };
        if mr.is_null() {
            let e = Error::last_os_error();
            if fd >= 0 {
                libc::close(fd);
            }
            return Err(Error::other(format!(
                "registering {len} bytes of GPU memory with the NIC ({kind:?}) failed: {e}"
            )));
        }
        Ok(GpuMr {
            verbs,
            mr,
            kind,
            lkey: *((mr as *const u8).add(36) as *const u32),
            dmabuf_fd: fd,
        })
    }
}

#[cfg(feature = "ibverbs")]
impl Drop for GpuMr<'_> {
    fn drop(&mut self) {
        // SAFETY: registered once in `register`; the fd belongs to this region.
        unsafe {
            self.verbs.dereg_mr_raw(self.mr);
            if self.dmabuf_fd >= 0 {
                libc::close(self.dmabuf_fd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Probe {
        Probe {
            ibverbs_built: true,
            rdma: Ok(vec!["mlx5_0".into()]),
            gpu: true,
            gpu_dmabuf: true,
            verbs_dmabuf: true,
            peermem: false,
            verbs_sink: true,
        }
    }

    fn reason(p: &Probe) -> String {
        match decide(p) {
            TransmitPath::PinnedHostStaging { reason } => reason,
            other => panic!("expected a fallback, got {other:?}"),
        }
    }

    #[test]
    fn decision_covers_every_missing_piece() {
        assert_eq!(decide(&full()), TransmitPath::PeerDirect(GpuMrKind::Dmabuf));
        let mut p = full();
        p.verbs_dmabuf = false;
        p.peermem = true;
        assert_eq!(decide(&p), TransmitPath::PeerDirect(GpuMrKind::PeerMem));
        p.peermem = false;
        assert!(reason(&p).contains("cannot be registered"));
        let mut p = full();
        p.rdma = Err("no RDMA device found".into());
        assert_eq!(reason(&p), "no RDMA device found");
        let mut p = full();
        p.gpu = false;
        assert_eq!(reason(&p), "no GPU present");
        let mut p = full();
        p.ibverbs_built = false;
        assert!(reason(&p).contains("without the ibverbs feature"));
        let mut p = full();
        p.verbs_sink = false;
        assert!(reason(&p).contains("not wired"));
    }

    #[test]
    fn this_host_falls_back_with_a_reason() {
        let p = probe();
        eprintln!("peerdirect probe: {p:?}");
        // The verbs transmit sink is not wired in, so every host stages for now.
        assert!(matches!(decide(&p), TransmitPath::PinnedHostStaging { .. }));
        assert!(plan(false).is_none());
        assert!(matches!(
            plan(true),
            Some(TransmitPath::PinnedHostStaging { .. })
        ));
    }

    #[test]
    fn items_cover_the_longer_life() {
        assert_eq!(output_items_for_peerdirect(4, 4096, 512), 4 + 8 + 1);
        assert_eq!(output_items_for_peerdirect(2, 1000, 3), 2 + 334 + 1);
        assert_eq!(output_items_for_peerdirect(2, 10, 0), 2 + 10 + 1);
    }

    #[test]
    fn send_wr_layout_matches_verbs_h() {
        // offsetof/sizeof printed by a C program against rdma-core 44's verbs.h (x86-64).
        assert_eq!(std::mem::size_of::<SendWr>(), 128);
        assert_eq!(std::mem::offset_of!(SendWr, num_sge), 24);
        assert_eq!(std::mem::offset_of!(SendWr, opcode), 28);
        assert_eq!(std::mem::offset_of!(SendWr, send_flags), 32);
        assert_eq!(std::mem::offset_of!(SendWr, imm_data), 36);
        assert_eq!(std::mem::size_of::<Sge>(), 16);
    }

    fn layout() -> ItemLayout {
        ItemLayout {
            header_addr: 0x1000,
            header_stride: 128,
            header_len: 42 + 72,
            header_lkey: 7,
            payload_addr: 0x7f00_0000_0000,
            payload_len: 3 * 8192 + 100,
            payload_lkey: 9,
            packet_payload: 8192,
        }
    }

    #[test]
    fn work_requests_split_the_item_into_packets() {
        let w = PacketWrs::new(5, &layout()).unwrap();
        assert_eq!(w.len(), 4);
        for (k, wr) in w.wrs().iter().enumerate() {
            assert_eq!(wr.wr_id, (5u64 << 32) | k as u64);
            assert_eq!((wr.num_sge, wr.opcode), (2, IBV_WR_SEND));
            assert_eq!(wr.send_flags & IBV_SEND_SIGNALED != 0, k == 3);
            assert_ne!(wr.send_flags & IBV_SEND_IP_CSUM, 0);
            assert_eq!(wr.sg_list as *const Sge, w.sges(k).as_ptr());
            let next = if k < 3 {
                &w.wrs()[k + 1] as *const SendWr
            } else {
                std::ptr::null()
            };
            assert_eq!(wr.next as *const SendWr, next);
            let [h, p] = *w.sges(k);
            assert_eq!(
                h,
                Sge {
                    addr: 0x1000 + 128 * k as u64,
                    length: 114,
                    lkey: 7
                }
            );
            assert_eq!(p.addr, 0x7f00_0000_0000 + 8192 * k as u64);
            assert_eq!(p.length, if k == 3 { 100 } else { 8192 });
            assert_eq!(p.lkey, 9);
        }
        let mut bad = layout();
        bad.packet_payload = 0;
        assert!(PacketWrs::new(0, &bad).is_none());
        let mut bad = layout();
        bad.header_stride = 64;
        assert!(PacketWrs::new(0, &bad).is_none());
    }

    static POSTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    unsafe extern "C" fn fake_post_send(
        _qp: *mut c_void,
        mut wr: *mut SendWr,
        _bad: *mut *mut SendWr,
    ) -> c_int {
        while !wr.is_null() {
            POSTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            wr = (*wr).next;
        }
        0
    }

    #[test]
    fn post_send_goes_through_the_context_ops() {
        #[repr(C, align(8))]
        struct Ctx([u8; 328]);
        let mut ctx = Box::new(Ctx([0; 328]));
        let c = ctx.0.as_mut_ptr();
        let mut w = PacketWrs::new(1, &layout()).unwrap();
        // SAFETY: offsets inside the fake context; the "qp" starts with the context pointer.
        unsafe {
            let mut qp: [usize; 4] = [c as usize, 0, 0, 0];
            let q = qp.as_mut_ptr() as *mut c_void;
            // No provider function: EOPNOTSUPP, no call through NULL.
            assert!(w.post(q).is_err());
            *(c.add(CTX_OPS_POST_SEND) as *mut usize) = fake_post_send as *const () as usize;
            w.post(q).unwrap();
        }
        assert_eq!(POSTED.load(std::sync::atomic::Ordering::Relaxed), 4);
    }

    #[test]
    fn items_are_freed_only_when_their_last_packet_completes() {
        let l = layout();
        let a = PacketWrs::new(0, &l).unwrap();
        let b = PacketWrs::new(1, &l).unwrap();
        let c = PacketWrs::new(2, &l).unwrap();
        let mut t = SendTracker::default();
        t.posted(0, &a);
        t.posted(1, &b);
        t.posted(2, &c);
        let mut free = Vec::new();
        // A completion for an unsignalled packet is not expected: counted, nothing freed.
        t.completed(wr_id(1, 0), &mut free);
        assert!(free.is_empty());
        assert_eq!(t.stray_completions, 1);
        // Item 1's last packet completes: items 0 and 1 are done (in-order completion).
        t.completed(wr_id(1, 3), &mut free);
        assert_eq!(free, [0, 1]);
        assert_eq!(t.in_flight(), 1);
        t.completed(wr_id(2, 3), &mut free);
        assert_eq!(free, [0, 1, 2]);
        assert_eq!(t.in_flight(), 0);
    }

    #[cfg(feature = "ibverbs")]
    #[test]
    fn gpu_registration_fails_cleanly_without_hardware() {
        // Without a library or device there is nothing to register against: the probe says
        // so, and the fallback names the reason.
        let p = probe();
        if p.rdma.is_ok() && p.gpu {
            eprintln!("SKIP: this host has RDMA and a GPU");
            return;
        }
        let r = reason(&Probe {
            verbs_sink: true,
            ..p
        });
        assert!(
            r.contains("RDMA") || r.contains("could not load") || r.contains("GPU"),
            "{r}"
        );
    }
}
