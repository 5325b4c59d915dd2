//! The GPU implementation of [`super::FBackend`]: one Rust wrapper per kernel family of
//! `kernels/fengine/` (wideband PFB FIR + cuFFT + post-processing, narrowband DDC + complex
//! PFB + post-processing), the DDC autotuner, batches in flight and the three-stream pipeline.

pub(super) mod batches;
pub(super) mod ddc_tune;
pub(super) mod narrowband;
pub(super) mod pipeline;
pub(super) mod wideband;
