//! `gpucbf bench fgpu` and `fgpu-narrowband`: the GPU F-engine (wideband, then narrowband)
//! resident and end to end, each against a bound measured in the same run, then one line of
//! the CPU backend.

use serde::Serialize;

use num_complex::Complex32;

use crate::compute::fengine::{Block, FConfig, FError, PolBlock, Samples};

pub mod cpu;
pub mod measure;
pub mod narrowband;
pub mod vkgdr;
pub mod wideband;

/// Input sample width of the benchmarks (MeerKAT digitiser, katgpucbf default).
const IN_BITS: u32 = 10;

/// The CPU line's configuration: wideband 4096 channels, 256 spectra per heap, the GPU
/// benchmark's 16 taps and 10-bit input; blocks of 256 spectra (2^21 samples per pol), timed
/// over `CPU_ITERS` blocks after one warm-up block.
const CPU_CHANNELS: usize = 4096;
/// Spectra per block of the CPU line.
const CPU_SPECTRA: usize = 256;
/// Blocks timed for the CPU line.
const CPU_ITERS: usize = 4;

/// Report of `gpucbf bench fgpu`.
#[derive(Debug, Clone, Serialize)]
pub struct FgpuReport {
    /// The wideband lines.
    pub wideband: wideband::WidebandReport,
    /// The narrowband lines.
    pub narrowband: narrowband::NarrowbandReport,
    /// The CPU backend at one wideband configuration.
    pub cpu: cpu::CpuLine,
}

/// `gpucbf bench fgpu`: the wideband lines, the narrowband lines, then the CPU line.
pub fn bench_fgpu() -> Result<FgpuReport, FError> {
    let wideband = wideband::bench_gpu()?;
    let narrowband = narrowband::bench_gpu_narrowband()?;
    let cfg = FConfig::wideband(CPU_CHANNELS, CPU_SPECTRA);
    let cpu = cpu::bench_cpu(cfg, CPU_SPECTRA, IN_BITS, CPU_ITERS)?;
    Ok(FgpuReport {
        wideband,
        narrowband,
        cpu,
    })
}

/// A block of `spectra` output spectra from both pols' packed `IN_BITS` samples `data`
/// (timestamp 0, each pol from its first sample), with per-spectrum `fine` delays and
/// `phase`s and per-channel `gains`: the resident and end-to-end lines' input.
pub(crate) fn packed_block<'a>(
    cfg: &FConfig,
    spectra: usize,
    data: [&'a [u8]; 2],
    fine: &'a [f64],
    phase: &'a [f64],
    gains: &'a [Complex32],
) -> Block<'a> {
    let pol = |p: usize| PolBlock {
        samples: Samples::Packed {
            data: data[p],
            bits: IN_BITS,
            len: cfg.input_samples_needed(spectra),
        },
        timestamp: 0,
        offset: 0,
        fine_delay: fine,
        phase,
        gains,
    };
    Block {
        spectra,
        first_spectrum: 0,
        out_first: 0,
        pols: [pol(0), pol(1)],
    }
}
