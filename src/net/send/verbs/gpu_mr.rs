//! GPU memory registered with the NIC for PeerDirect send: by a dmabuf file descriptor
//! (`cuMemGetHandleForAddressRange` + `ibv_reg_dmabuf_mr`) or, with nvidia-peermem, by
//! `ibv_reg_mr` on the device address.

use std::ffi::{c_int, c_void};

use ibverbs_sys::{mr_lkey, RegDmabufMr, Verbs, IBV_ACCESS_LOCAL_WRITE};

use crate::net::send::peerdirect::GpuMrKind;

/// A device allocation registered with the NIC.
pub struct GpuMr<'v> {
    verbs: &'v Verbs,
    mr: *mut c_void,
    /// How the memory was registered.
    pub kind: GpuMrKind,
    /// The lkey for scatter entries into the region.
    pub lkey: u32,
    dmabuf_fd: c_int,
}

impl<'v> GpuMr<'v> {
    /// Registers `len` bytes at device address `dptr` on protection domain `pd`. With
    /// dmabuf, `dptr` and `len` must be host-page aligned (CUDA's rule for the export).
    ///
    /// # Safety
    /// `pd` must be a live protection domain of `verbs`; `dptr..dptr+len` a live CUDA
    /// allocation in the current context, kept alive until the region is dropped.
    pub unsafe fn register(
        verbs: &'v Verbs,
        pd: *mut c_void,
        dptr: u64,
        len: usize,
        kind: GpuMrKind,
    ) -> std::io::Result<Self> {
        use std::io::Error;
        let access = IBV_ACCESS_LOCAL_WRITE;
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
            GpuMrKind::PeerMem => ((verbs.reg_mr)(pd, dptr as *mut c_void, len, access), -1),
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
            lkey: mr_lkey(mr),
            dmabuf_fd: fd,
        })
    }
}

impl Drop for GpuMr<'_> {
    fn drop(&mut self) {
        // SAFETY: registered once in `register`; the fd belongs to this region.
        unsafe {
            (self.verbs.dereg_mr)(self.mr);
            if self.dmabuf_fd >= 0 {
                libc::close(self.dmabuf_fd);
            }
        }
    }
}
