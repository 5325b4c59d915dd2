//! CUDA registration of chunk memory (`cuMemHostRegister`, portable to all contexts): the
//! pages become page-locked, so copies to the GPU run at full PCIe speed by DMA straight
//! from the chunk.

use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, DriverError};

/// Why chunk memory is not registered with CUDA (it stays pageable; chunks work all the
/// same, copies to the GPU are slower).
#[derive(Debug, Clone, thiserror::Error)]
pub enum PinError {
    /// No GPU (or registration turned off): nothing to register with.
    #[error("no GPU: chunk memory not registered with CUDA")]
    NoGpu,
    /// The CUDA context could not be made current.
    #[error("CUDA context: {0:?}")]
    Context(DriverError),
    /// The driver refused the registration (usually the memlock limit).
    #[error(
        "cuMemHostRegister of {bytes} bytes failed ({result:?}; memlock limit?): chunk memory stays pageable"
    )]
    Register {
        /// Bytes asked to register (the whole mapping).
        bytes: usize,
        /// The driver's answer.
        result: sys::CUresult,
    },
}

/// Registers `len` bytes at `base` with `ctx`, page-locked for every context.
///
/// # Safety
/// `base..base + len` must be a live mapping of ours, unregistered with [`unregister`]
/// before it is unmapped.
pub(super) unsafe fn register(
    base: NonNull<u8>,
    len: usize,
    ctx: &Arc<CudaContext>,
) -> Result<(), PinError> {
    ctx.bind_to_thread().map_err(PinError::Context)?;
    let r = sys::cuMemHostRegister_v2(
        base.as_ptr() as *mut _,
        len,
        sys::CU_MEMHOSTREGISTER_PORTABLE,
    );
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(PinError::Register {
            bytes: len,
            result: r,
        });
    }
    Ok(())
}

/// Undoes [`register`] (if the context can still be made current).
///
/// # Safety
/// `base` must have been registered with `ctx` by [`register`] and still be mapped.
pub(super) unsafe fn unregister(base: NonNull<u8>, ctx: &CudaContext) {
    if ctx.bind_to_thread().is_ok() {
        sys::cuMemHostUnregister(base.as_ptr() as *mut _);
    }
}
