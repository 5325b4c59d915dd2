//! The compute sequence of a GPU F-engine backend on a staged block ([`StagedCompute`]).

use std::sync::Arc;

use cudarc::cufft::sys::float2;
use cudarc::driver::{CudaSlice, CudaStream};

use super::block::ensure;
use crate::compute::fengine::FError;

/// What [`StagedCompute::work_buffers`] lends: the compute stream, the FIR output and FFT
/// buffers, and N (`pfb_channels`).
pub(crate) type WorkBuffers<'a> = (
    &'a Arc<CudaStream>,
    &'a mut CudaSlice<float2>,
    &'a mut CudaSlice<float2>,
    usize,
);

/// The compute of a GPU F-engine backend on the block it has staged, shared by the wideband
/// ([`super::wideband::GpuBackend`]) and narrowband ([`super::narrowband::GpuNarrowband`])
/// backends and the pipelines built on them: each backend says what fits its launch grids,
/// where its FIR/FFT buffers and counters are, and which kernels it queues; the sequence is
/// here.
pub(crate) trait StagedCompute {
    /// Whether `m` spectra per block fit the backend's launch grids.
    fn fits(&self, m: usize) -> bool;

    /// The compute stream, the FIR output and FFT buffers (m·2N complex values each) and
    /// N (`pfb_channels`).
    fn work_buffers(&mut self) -> WorkBuffers<'_>;

    /// Queues the zeroing of the block counters.
    fn reset_counters(&mut self) -> Result<(), FError>;

    /// Queues the kernels (and FFT) of `m` staged spectra into output spectra
    /// out_first..out_first + m.
    fn launch_stages(&mut self, m: usize, out_first: usize) -> Result<(), FError>;

    /// Queues the compute of `m` staged spectra into the device output (which must hold
    /// spectra out_first..out_first + m); `reset` zeroes the counters first, else the
    /// block adds to them (later blocks of a batch).
    fn compute_with(&mut self, m: usize, out_first: usize, reset: bool) -> Result<(), FError> {
        if !self.fits(m) {
            return Err(FError::BadParameter {
                what: "spectra",
                why: format!("{m} spectra per block is too many for the GPU backend"),
            });
        }
        let (stream, fir_out, fft_out, n) = self.work_buffers();
        ensure(stream, fir_out, m * 2 * n)?;
        ensure(stream, fft_out, m * 2 * n)?;
        if reset {
            self.reset_counters()?;
        }
        self.launch_stages(m, out_first)
    }

    /// [`Self::compute_with`] with the counters reset first.
    fn compute(&mut self, m: usize, out_first: usize) -> Result<(), FError> {
        self.compute_with(m, out_first, true)
    }
}
