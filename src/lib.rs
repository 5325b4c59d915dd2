//! gpucbf: a real-time correlator-beamformer for radio telescopes, wire-compatible with
//! SARAO's katgpucbf (the MeerKAT CBF).
//!
//! Modules follow the data flow: [`spead`] (wire format, sans-IO), [`net`] (transports),
//! [`dsim`] (digitiser simulator), engines and compute stages (CPU reference and GPU
//! backends), [`telemetry`] (logs and metrics).

pub mod array;
pub mod bitpack;
pub mod chunk;
pub mod cli_util;
pub mod control;
pub mod dsim;
pub mod fengine;
pub mod fgpu;
pub mod gpu;
pub mod imaging;
pub mod inspect;
pub mod net;
pub mod nufft;
pub mod recvbench;
pub mod shutdown;
pub mod spead;
pub mod telemetry;
pub mod xbgpu;
pub mod xengine;
