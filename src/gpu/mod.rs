//! The GPU layer under every CUDA backend: device discovery ([`gpu_available`]; cudarc panics
//! when the CUDA libraries are absent, so everything here probes first), kernel compilation
//! with NVRTC ([`compile_ptx`]), kernel timing ([`time_on_stream`]) and the guards of GPU and
//! NVRTC tests ([`gpu_test_guard`], [`nvrtc_test_guard`]).

mod arch;
mod device;
mod error;
mod guard;
mod nvrtc;
mod timing;

pub use arch::{compute_capability, device_arch, nvrtc_arch, SM90A};
pub use device::{gpu_available, open_device};
pub(crate) use error::impl_from_cuda_errors;
pub use error::GpuError;
pub use guard::{gpu_test_guard, nvrtc_test_guard};
pub use nvrtc::{compile_ptx, compile_ptx_cached, cuda_include_dirs, nvrtc_available};
pub use timing::time_on_stream;
