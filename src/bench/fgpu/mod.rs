//! `gpucbf bench fgpu` and `fgpu-narrowband`: the GPU F-engine (wideband, then narrowband)
//! resident and end to end, each against a bound measured in the same run.

use serde::Serialize;

use crate::compute::fengine::FError;

pub mod cpu;
pub mod measure;
pub mod narrowband;
pub mod wideband;

/// Input sample width of the benchmarks (MeerKAT digitiser, katgpucbf default).
const IN_BITS: u32 = 10;

/// Report of `gpucbf bench fgpu`.
#[derive(Debug, Clone, Serialize)]
pub struct FgpuReport {
    /// The wideband lines.
    pub wideband: wideband::WidebandReport,
    /// The narrowband lines.
    pub narrowband: narrowband::NarrowbandReport,
}

/// `gpucbf bench fgpu`: the wideband lines, then the narrowband lines.
pub fn bench_fgpu() -> Result<FgpuReport, FError> {
    let wideband = wideband::bench_gpu()?;
    let narrowband = narrowband::bench_gpu_narrowband()?;
    Ok(FgpuReport {
        wideband,
        narrowband,
    })
}
