//! gpucbf: a real-time correlator-beamformer for radio telescopes, wire-compatible with
//! SARAO's katgpucbf (the MeerKAT CBF).
//!
//! Modules, following the data flow (packets in → chunks → GPU → heaps out); [`spead`] and
//! [`chunk`] are sans-IO (bytes in, heaps or chunks and counters out):
//!
//! * [`spead`]: SPEAD-64-48 codec and the ICD's facts (item ids, MISSING, baseline order).
//! * [`chunk`]: packets placed into chunks (timestamp spans), with presence and loss counts.
//! * [`mem`]: where chunk bytes live: hugepages, registered with CUDA when a GPU is present.
//! * [`net`]: transports: pcap, kernel UDP, DPDK and ibverbs sources and sinks, pacing, framing.
//! * [`gpu`]: the CUDA layer: device discovery, NVRTC compile and cache, timing, test guards.
//! * [`compute`]: F-engine, X/B-engine and NUFFT maths, each a CPU reference and a GPU backend.
//! * [`engines`]: the `dsim`, `fgpu` and `xbgpu` processes: arguments → configuration → run.
//! * [`control`]: katcp: message codec, device server, sensors, clean shutdown.
//! * [`telemetry`]: logging set-up and Prometheus metrics.
//! * [`apps`]: tools: `array` (loopback dsim → F → XB), `image`, `pcap-info`/`spead-dump`, `nufft`.
//! * [`bench`](mod@bench): `gpucbf bench`: benchmarks, each against a bound or a peer in one run.
//! * [`npy`]: `.npy` reading and writing for the tools' inputs and outputs.

#![warn(missing_docs, unreachable_pub)]

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
