//! `gpucbf bench nufft` and `gpucbf nufft bench`: 2-D type 1 NUFFT throughput on the CPU and
//! the GPU, with FINUFFT on the same input as the CPU's peer.

use std::path::PathBuf;

use clap::Args;

use crate::compute::nufft::NufftError;
use crate::npy::NpyError;

pub mod cpu;
pub mod gpu;
pub mod peer;

/// Errors of the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Nufft(#[from] NufftError),
    #[error(transparent)]
    Npy(#[from] NpyError),
    #[error("--save-dir {0}: {1}")]
    SaveDir(std::path::PathBuf, std::io::Error),
    /// A size variable (`GPUCBF_NUFFT_BENCH_M` / `_N`) that is not a whole number.
    #[error("{0}={1}: expected a whole number")]
    Env(String, String),
}

/// `nufft bench`.
#[derive(Args, Debug)]
pub struct NufftBenchArgs {
    /// Number of points.
    #[arg(long, default_value_t = 10_000_000)]
    m: usize,
    /// Modes per axis (n × n).
    #[arg(long, default_value_t = 2048)]
    n: usize,
    /// Tolerance.
    #[arg(long, default_value_t = 1e-5)]
    eps: f64,
    /// Upsampling factor.
    #[arg(long, default_value_t = 2.0)]
    upsampfac: f64,
    /// Repeats (best is reported).
    #[arg(long, default_value_t = 2)]
    repeats: usize,
    /// Modes checked against a direct sum.
    #[arg(long, default_value_t = 8)]
    check_modes: usize,
    /// Directory to write x.npy, y.npy, c.npy and f.npy into.
    #[arg(long)]
    save_dir: Option<PathBuf>,
    /// Also run the GPU benchmark (data resident on the device).
    #[arg(long)]
    gpu: bool,
    /// Run only the GPU benchmark (skips the CPU run).
    #[arg(long)]
    gpu_only: bool,
    /// GPU: also time the spreading for several bin sizes and batches.
    #[arg(long)]
    tune: bool,
    /// GPU: spreading bin size (cells per axis; default chosen by the plan).
    #[arg(long)]
    bin: Option<usize>,
    /// GPU: points per shared-memory batch (default chosen by the plan).
    #[arg(long)]
    batch: Option<usize>,
}

/// `gpucbf nufft bench`: the CPU benchmark unless `--gpu-only`, the GPU one with `--gpu` or
/// `--gpu-only`, at the sizes given.
pub fn run_bench(a: &NufftBenchArgs) -> Result<(), BenchError> {
    if !a.gpu_only {
        cpu::bench_cpu(
            a.m,
            a.n,
            a.eps,
            a.upsampfac,
            a.repeats,
            a.check_modes,
            a.save_dir.as_deref(),
        )?;
    }
    if a.gpu || a.gpu_only {
        gpu::bench_gpu(&gpu::GpuBenchOpts {
            m: a.m,
            n: a.n,
            eps: a.eps,
            upsampfac: a.upsampfac,
            reps: a.repeats.max(3),
            check_modes: a.check_modes,
            tune: a.tune,
            bin: a.bin,
            batch: a.batch,
        })?;
    }
    Ok(())
}

/// A whole number from the environment variable `k`, `d` when it is unset.
fn env_size(k: &str, d: usize) -> Result<usize, BenchError> {
    match std::env::var(k) {
        Ok(v) => v.parse().map_err(|_| BenchError::Env(k.into(), v)),
        Err(_) => Ok(d),
    }
}

/// `gpucbf bench nufft`: the issue's problem (2-D type 1, 1e8 points, 4096², eps 1e-5, f32) on
/// the GPU (data resident) where one exists, then on the CPU and through FINUFFT (Python) on
/// the same input in the same run, with the ratio. `GPUCBF_NUFFT_BENCH_M` / `_N` shrink it.
pub fn run_issue_case() -> Result<(), BenchError> {
    let (m, n, eps) = (
        env_size("GPUCBF_NUFFT_BENCH_M", 100_000_000)?,
        env_size("GPUCBF_NUFFT_BENCH_N", 4096)?,
        1e-5,
    );
    if crate::gpu::gpu_available() {
        let mut opts = gpu::GpuBenchOpts::issue_case();
        opts.m = m;
        opts.n = n;
        gpu::bench_gpu(&opts)?;
    } else {
        println!("nufft bench gpu: no CUDA device, GPU figure skipped");
    }
    let dir = std::env::temp_dir().join(format!("gpucbf-nufft-bench-{}", std::process::id()));
    let ours = cpu::bench_cpu(m, n, eps, 2.0, 2, 8, Some(&dir))?;
    let rate = ours.m as f64 / ours.total.as_secs_f64();
    match peer::finufft_peer(&dir, eps, rayon::current_num_threads()) {
        Ok((theirs, text)) => {
            print!("{text}");
            println!(
                "cpu ratio gpucbf / finufft = {:.3e} / {:.3e} points/s = {:.2}",
                rate,
                theirs,
                rate / theirs
            );
        }
        Err(e) => println!("finufft peer not run: {e}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
