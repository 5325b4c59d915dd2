//! Device discovery. cudarc panics when the CUDA libraries are absent, so everything here
//! probes first and reports absence as `false` (or an error), never a panic.

use std::sync::Arc;

use cudarc::driver::CudaContext;

use super::GpuError;

/// True if the CUDA driver library can be loaded and at least one device exists.
pub fn gpu_available() -> bool {
    // SAFETY: is_culib_present only attempts to dlopen the driver library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return false;
    }
    std::panic::catch_unwind(|| cudarc::driver::CudaContext::device_count().unwrap_or(0) > 0)
        .unwrap_or(false)
}

/// Opens device `ordinal` after probing ([`GpuError::NoDevice`] without the CUDA driver or a
/// device, where cudarc would panic).
pub fn open_device(ordinal: usize) -> Result<Arc<CudaContext>, GpuError> {
    if !gpu_available() {
        return Err(GpuError::NoDevice);
    }
    Ok(CudaContext::new(ordinal)?)
}
