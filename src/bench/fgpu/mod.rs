//! `gpucbf bench fgpu` and `fgpu-narrowband`: the GPU F-engine (wideband, then narrowband)
//! resident and end to end, each against a bound measured in the same run, and the CPU backend.

pub mod cpu;
mod measure;
pub mod narrowband;
pub mod wideband;

/// Input sample width of the benchmarks (MeerKAT digitiser, katgpucbf default).
const IN_BITS: u32 = 10;
