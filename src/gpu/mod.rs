//! The GPU layer under every CUDA backend, one file per concept:
//! * `device`: discovery and opening ([`gpu_available`], [`open_device`]); cudarc panics
//!   when the CUDA libraries are absent, so everything here probes first;
//! * `arch`: the one table of NVRTC targets by compute capability ([`nvrtc_arch`]);
//! * `nvrtc`: kernel compilation ([`compile_ptx`]) and its per-process cache
//!   ([`compile_ptx_cached`]);
//! * `error`: [`GpuError`], which the compute families' errors wrap;
//! * `timing`: kernel timing with CUDA events ([`time_on_stream`]);
//! * `guard`: the guards every GPU or NVRTC test goes through ([`gpu_test_guard`],
//!   [`nvrtc_test_guard`]): skip with a notice, or fail where `GPUCBF_REQUIRE_GPU=1` /
//!   `GPUCBF_REQUIRE_NVRTC=1`.

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
