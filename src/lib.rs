//! gpucbf: a real-time correlator-beamformer for radio telescopes, wire-compatible with
//! SARAO's katgpucbf (the MeerKAT CBF).
//!
//! Modules follow the data flow: [`spead`] (wire format, sans-IO), [`net`] (transports),
//! [`dsim`] (digitiser simulator), engines and compute stages (CPU reference and GPU
//! backends), [`telemetry`] (logs and metrics).

/// A kernel's CUDA source, embedded so binaries need no kernel files at run time:
/// `kernel_source!("xengine/correlate.cu")` is `kernels/xengine/correlate.cu`;
/// `kernel_source!(["xengine/xshape.cuh", ...], "xengine" / "correlate.cu")` puts the headers in
/// front, then a `#line 1 "correlate.cu"` so NVRTC's messages give the kernel's own lines.
#[macro_export]
macro_rules! kernel_source {
    ($file:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/", $file))
    };
    ([$($head:literal),* $(,)?], $dir:literal / $file:literal) => {
        concat!(
            $(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/", $head)),)*
            "#line 1 \"", $file, "\"\n",
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/", $dir, "/", $file))
        )
    };
}

pub mod apps;
pub mod bench;
pub mod chunk;
pub mod compute;
pub mod control;
pub mod engines;
pub mod gpu;
pub mod mem;
pub mod net;
pub mod npy;
pub mod spead;
pub mod telemetry;
