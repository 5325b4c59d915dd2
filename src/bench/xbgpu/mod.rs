//! `gpucbf bench xbgpu`: correlator TOPS (8 real operations per complex multiply-add over the
//! a1 ≤ a2 triangle, 4 pol products) for several array sizes, an int8 GEMM through cuBLASLt on
//! the same GPU for comparison, and beamformer throughput against measured device copy bandwidth.
//! The correlator part is [`corr`] (`gpucbf bench xbgpu-corr`), the beamformer part [`beam`]
//! (`gpucbf bench xbgpu-beam`). What these benchmarks measured, round by round, and what each
//! figure taught the kernels is in `docs/bench-log.md`.

use cudarc::driver::CudaStream;
use serde::Serialize;

use crate::compute::xengine::{CorrVariant, XError};
use crate::gpu::GpuError;

pub mod beam;
pub mod corr;
pub mod feed;

use beam::bench_beams;
pub use beam::{bench_gpu_beams, BeamReport};
use corr::{bench_corr, bench_correlator, Kern};
pub use corr::{bench_gpu_corr, CorrLine, CorrReport};

/// Report of `gpucbf bench xbgpu`.
#[derive(Debug, Clone, Serialize)]
pub struct XbgpuReport {
    /// The correlator part (as `xbgpu-corr`).
    pub correlator: CorrReport,
    /// The beamformer part (as `xbgpu-beam`).
    pub beamformer: BeamReport,
    /// The mma.sync correlator on 4-bit input.
    pub four_bit_correlator: Vec<CorrLine>,
}

fn gerr<E: std::fmt::Debug>(e: E) -> XError {
    XError::Gpu(GpuError::Failed(format!("{e:?}")))
}

/// Random int8 in [−127, 127], generated as a 4 MiB block and tiled (content does not matter
/// for timing, only that it is not all zero).
fn random_input(n: usize) -> Vec<i8> {
    let block: Vec<i8> = (0..(4u64 << 20).min(n as u64))
        .map(|i| {
            (crate::compute::xengine::beam_dither(1, 0, 0, i as usize, 0, 1 << 23, 1).0 * 254.0)
                .round() as i8
        })
        .collect();
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        let k = (n - v.len()).min(block.len());
        v.extend_from_slice(&block[..k]);
    }
    v
}

/// Times `reps` runs of `f` on `stream` with CUDA events; returns seconds per run.
fn time_gpu(
    stream: &std::sync::Arc<CudaStream>,
    reps: usize,
    f: impl FnMut() -> Result<(), XError>,
) -> Result<f64, XError> {
    crate::gpu::time_on_stream(stream, reps, f, gerr)
}

/// Runs the X-engine benchmarks on GPU 0 and prints the results (see module docs).
pub fn bench_gpu(ants: &[usize], samples_per_launch: usize) -> Result<XbgpuReport, XError> {
    let (correlator, stream) = bench_corr(ants, samples_per_launch)?;
    let samples = samples_per_launch.div_ceil(256).max(1) * 256;
    let beamformer = bench_beams(&stream)?;
    let mut four_bit_correlator = Vec::new();
    for n in [256, 576] {
        let kern = Kern::Mma(CorrVariant::default());
        four_bit_correlator.push(bench_correlator("4-bit input: ", n, samples, kern, 4)?);
    }
    Ok(XbgpuReport {
        correlator,
        beamformer,
        four_bit_correlator,
    })
}
