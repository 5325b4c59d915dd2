//! Output items in device memory for PeerDirect send: one allocation holding every item of
//! an output, its start and length aligned to [`REGISTER_ALIGN`] so that the whole range can
//! be exported as a dmabuf (CUDA requires host-page alignment) and registered with the NIC.
//! [`DeviceItems::from_raw`] wraps any range (tests stand host memory in for the device).

use std::any::Any;
use std::io;
use std::sync::Arc;

use cudarc::driver::{CudaContext, DevicePtr};

/// Alignment of the items' range (start and registered length): 64 KiB, a multiple of
/// every host page size.
pub const REGISTER_ALIGN: usize = 1 << 16;

/// A range of device memory holding an output's items, kept alive by its owner.
pub struct DeviceItems {
    base: u64,
    len: usize,
    _owner: Box<dyn Any + Send>,
}

impl DeviceItems {
    /// `len` bytes at `base` (at least `len` rounded up to [`REGISTER_ALIGN`] must be
    /// addressable: that is what gets registered), alive as long as `owner`.
    ///
    /// # Safety
    /// `base..base + len.next_multiple_of(REGISTER_ALIGN)` must stay allocated, and be
    /// written only through the sender's acquired items, as long as `owner` lives.
    pub unsafe fn from_raw(base: u64, len: usize, owner: Box<dyn Any + Send>) -> Self {
        DeviceItems {
            base,
            len,
            _owner: owner,
        }
    }

    /// A zeroed device allocation of at least `len` bytes in `ctx`, its start aligned to
    /// [`REGISTER_ALIGN`] and room to the aligned end.
    pub fn alloc(ctx: &Arc<CudaContext>, len: usize) -> io::Result<Self> {
        let err = |e: cudarc::driver::DriverError| {
            io::Error::other(format!(
                "allocating {len} bytes of output items on the GPU: {e}"
            ))
        };
        let stream = ctx.default_stream();
        let buf = stream
            .alloc_zeros::<u8>(len.next_multiple_of(REGISTER_ALIGN) + REGISTER_ALIGN)
            .map_err(err)?;
        let base = {
            let (p, _record) = buf.device_ptr(&stream);
            p.next_multiple_of(REGISTER_ALIGN as u64)
        };
        // The zeroing is done before any other stream writes the range by its address.
        stream.synchronize().map_err(err)?;
        // SAFETY: base..base + aligned len lies inside `buf`, which the owner keeps.
        Ok(unsafe { Self::from_raw(base, len, Box::new(buf)) })
    }

    /// Device address of the first byte.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes of the items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An error unless `n_items` items of `item_bytes` fit (a sender's items over this
    /// memory).
    pub fn check_fits(&self, n_items: usize, item_bytes: usize) -> std::io::Result<()> {
        if n_items * item_bytes > self.len {
            return Err(std::io::Error::other(format!(
                "{n_items} items of {item_bytes} bytes do not fit {} bytes of device memory",
                self.len
            )));
        }
        Ok(())
    }

    /// True if `addr..addr + len` lies inside the items.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        addr >= self.base && addr + len as u64 <= self.base + self.len as u64
    }
}
