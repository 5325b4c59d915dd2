//! `gpucbf bench nufft` and `gpucbf nufft bench`: 2-D type 1 NUFFT throughput on the CPU and
//! the GPU, with FINUFFT on the same input as the CPU's peer.

use crate::compute::nufft::NufftError;
use crate::npy::NpyError;

pub mod cpu;
pub mod gpu;
pub mod peer;

/// Errors of the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Nufft(#[from] NufftError),
    #[error(transparent)]
    Npy(#[from] NpyError),
    #[error("--save-dir {0}: {1}")]
    SaveDir(std::path::PathBuf, std::io::Error),
}
