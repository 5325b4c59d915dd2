//! The numbers: each compute family behind its backend trait, with a CPU reference and a GPU
//! implementation (cudarc + `kernels/`).
//!
//! * [`fengine`]: channelisation (decode, PFB, FFT, delay, gain, quantise; narrowband DDC).
//! * [`xengine`]: correlation and beamforming.
//! * [`nufft`]: non-uniform FFTs (FINUFFT conventions) for the imager.

pub mod fengine;
pub mod nufft;
pub mod xengine;
