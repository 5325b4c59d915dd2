//! The GPU implementation of [`super::FBackend`]: one Rust wrapper per kernel family of
//! `kernels/fengine/` (wideband PFB FIR + cuFFT + post-processing, narrowband DDC + complex
//! PFB + post-processing), the DDC autotuner, batches in flight and the three-stream pipeline.

pub(crate) mod batches;
pub(crate) mod block;
pub(crate) mod ddc_tune;
pub(crate) mod narrowband;
pub(crate) mod pipeline;
pub(crate) mod staged;
pub(crate) mod wideband;
