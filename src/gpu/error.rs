//! [`GpuError`]: what the GPU layer and the CUDA backends report. Each compute family's error
//! wraps it (`FError::Gpu`, `XError::Gpu`, `NufftError::Gpu`); the CUDA library errors convert
//! into those through [`impl_from_cuda_errors`], so a backend writes `?` after a driver,
//! cuFFT or cuBLASLt call.

use cudarc::nvrtc::CompileError;

/// A failure of the GPU, its libraries or NVRTC. The Display text of the library variants is
/// the library error's Debug form (its code and description), as the backends have always
/// logged it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpuError {
    /// The CUDA driver library cannot be loaded, or there is no device.
    #[error("no usable CUDA device")]
    NoDevice,
    /// NVRTC cannot be loaded, so no kernel can be compiled.
    #[error(
        "NVRTC (libnvrtc.so.13) is not available: install the CUDA 13 toolkit or the nvidia-cuda-nvrtc wheel and put its lib dir on LD_LIBRARY_PATH"
    )]
    NvrtcMissing,
    /// NVRTC rejected a kernel; `source` holds its options and compile log ([`Self::log`]).
    #[error("NVRTC failed to compile {name} for {arch}: {source:?}")]
    Compile {
        /// The kernel's file name.
        name: String,
        /// The NVRTC target (`compute_90`, ...).
        arch: &'static str,
        /// NVRTC's error, with the log.
        source: CompileError,
    },
    /// The device is older than the kernels support (see `gpu::arch`).
    #[error("compute capability {major}.{minor} is too old: the kernels need 8.0 or newer")]
    TooOld {
        /// Compute capability, major.
        major: i32,
        /// Compute capability, minor.
        minor: i32,
    },
    /// A CUDA driver call failed.
    #[error("{0:?}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// A cuFFT call failed.
    #[error("{0:?}")]
    Fft(#[from] cudarc::cufft::result::CufftError),
    /// A cuBLASLt call failed.
    #[error("{0:?}")]
    Blas(#[from] cudarc::cublaslt::result::CublasError),
    /// The device, the build or the configuration cannot run what was asked (the message
    /// says what and why).
    #[error("{0}")]
    Unsupported(String),
    /// A GPU operation failed in a way the library errors do not describe (the message says
    /// which).
    #[error("{0}")]
    Failed(String),
}

impl GpuError {
    /// NVRTC's compile log, for a [`GpuError::Compile`] that got as far as compiling.
    pub fn log(&self) -> Option<String> {
        match self {
            GpuError::Compile {
                source: CompileError::CompileError { log, .. },
                ..
            } => Some(log.to_string_lossy().into_owned()),
            _ => None,
        }
    }
}

/// Implements `From` for the CUDA library errors (driver, cuFFT, cuBLASLt) on an error type
/// that has a `From<GpuError>`, through [`GpuError`].
macro_rules! impl_from_cuda_errors {
    ($t:ty) => {
        impl From<cudarc::driver::DriverError> for $t {
            fn from(e: cudarc::driver::DriverError) -> Self {
                <$t>::from($crate::gpu::GpuError::from(e))
            }
        }
        impl From<cudarc::cufft::result::CufftError> for $t {
            fn from(e: cudarc::cufft::result::CufftError) -> Self {
                <$t>::from($crate::gpu::GpuError::from(e))
            }
        }
        impl From<cudarc::cublaslt::result::CublasError> for $t {
            fn from(e: cudarc::cublaslt::result::CublasError) -> Self {
                <$t>::from($crate::gpu::GpuError::from(e))
            }
        }
    };
}
pub(crate) use impl_from_cuda_errors;
