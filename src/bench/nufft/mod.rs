//! `gpucbf bench nufft` and `gpucbf nufft bench`: 2-D type 1 NUFFT throughput on the CPU and
//! the GPU, with FINUFFT on the same input as the CPU's peer.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::compute::nufft::NufftError;
use crate::npy::NpyError;

pub mod cpu;
pub mod gpu;
pub mod peer;

/// Errors of the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Planning or running the transform.
    #[error(transparent)]
    Nufft(#[from] NufftError),
    /// Writing the saved input.
    #[error(transparent)]
    Npy(#[from] NpyError),
    /// Creating `--save-dir`.
    #[error("--save-dir {0}: {1}")]
    SaveDir(std::path::PathBuf, std::io::Error),
    /// A size variable (`GPUCBF_NUFFT_BENCH_M` / `_N`) that is not a whole number.
    #[error("{0}={1}: expected a whole number")]
    Env(String, String),
}

/// FINUFFT on the CPU benchmark's input, in the same run.
#[derive(Debug, Clone, Serialize)]
pub struct PeerReport {
    /// Its points per second.
    pub points_per_s: f64,
    /// gpucbf's CPU points per second / FINUFFT's.
    pub cpu_ratio: f64,
    /// The peer's output, as printed.
    pub output: String,
}

/// Report of `gpucbf bench nufft`.
#[derive(Debug, Clone, Serialize)]
pub struct NufftReport {
    /// Points.
    pub m: usize,
    /// Modes per axis.
    pub n: usize,
    /// Requested tolerance.
    pub eps: f64,
    /// The GPU benchmark (none without a CUDA device).
    pub gpu: Option<gpu::GpuReport>,
    /// The CPU benchmark.
    pub cpu: cpu::CpuReport,
    /// FINUFFT on the same input (none if it did not run).
    pub finufft: Option<PeerReport>,
    /// Why FINUFFT did not run.
    pub finufft_error: Option<String>,
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
pub fn run_issue_case() -> Result<NufftReport, BenchError> {
    let (m, n, eps) = (
        env_size("GPUCBF_NUFFT_BENCH_M", 100_000_000)?,
        env_size("GPUCBF_NUFFT_BENCH_N", 4096)?,
        1e-5,
    );
    let gpu = if crate::gpu::gpu_available() {
        let mut opts = gpu::GpuBenchOpts::issue_case();
        opts.m = m;
        opts.n = n;
        Some(gpu::bench_gpu(&opts)?)
    } else {
        println!("nufft bench gpu: no CUDA device, GPU figure skipped");
        None
    };
    let dir = std::env::temp_dir().join(format!("gpucbf-nufft-bench-{}", std::process::id()));
    let ours = cpu::bench_cpu(m, n, eps, 2.0, 2, 8, Some(&dir))?;
    let rate = ours.points_per_s;
    let (finufft, finufft_error) = match peer::finufft_peer(&dir, eps, rayon::current_num_threads())
    {
        Ok((theirs, text)) => {
            print!("{text}");
            println!(
                "cpu ratio gpucbf / finufft = {:.3e} / {:.3e} points/s = {:.2}",
                rate,
                theirs,
                rate / theirs
            );
            let peer = PeerReport {
                points_per_s: theirs,
                cpu_ratio: rate / theirs,
                output: text,
            };
            (Some(peer), None)
        }
        Err(e) => {
            println!("finufft peer not run: {e}");
            (None, Some(e.to_string()))
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    Ok(NufftReport {
        m,
        n,
        eps,
        gpu,
        cpu: ours,
        finufft,
        finufft_error,
    })
}
