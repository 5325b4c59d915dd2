//! GPU throughput benchmark: 2-D type 1, f32, uniformly random points, data resident on
//! the device. Times (CUDA events, best of the per-stage averages) the sort (`set_points`
//! on resident coordinates), the whole execute (zero + spread + FFT + deconvolution) and
//! each stage alone, and prints points/s against the 2e9 points/s target; `tune` times the
//! spreading for several bin sizes and batches on the same resident points.

use std::time::Instant;

use num_complex::Complex;
use rayon::prelude::*;
use serde::Serialize;

use super::cpu::sample_error;
use super::BenchError;
use crate::compute::nufft::gpu::GpuPlan;
use crate::compute::nufft::SplitMix64;
use crate::compute::nufft::{NufftError, NufftType, Options};

/// Target throughput of the resident execute (issue #5).
pub const TARGET_POINTS_PER_S: f64 = 2e9;

/// The spreading kernel's launch geometry.
#[derive(Clone, Debug, Serialize)]
pub struct SpreadGeometry {
    /// Bin size per axis (cells).
    pub bin: [usize; 2],
    /// Groups (tiles) per block.
    pub groups: usize,
    /// Threads per group.
    pub group_threads: usize,
    /// Points staged in shared memory at once, per group.
    pub batch: usize,
    /// Subproblems.
    pub subproblems: usize,
    /// Most points per subproblem.
    pub sub: usize,
}

/// One line of the `--tune` sweep: the spreading alone at one bin size and batch.
#[derive(Clone, Debug, Serialize)]
pub struct TuneLine {
    /// Bin size (cells per axis).
    pub bin: usize,
    /// Points per batch.
    pub batch: usize,
    /// Groups per block (none if the configuration was refused).
    pub groups: Option<usize>,
    /// Threads per group.
    pub group_threads: Option<usize>,
    /// Milliseconds of the spreading alone.
    pub spread_ms: Option<f64>,
    /// Points per second of the spreading alone.
    pub spread_points_per_s: Option<f64>,
    /// Why the configuration was refused.
    pub error: Option<String>,
}

/// Result of [`bench_gpu`].
#[derive(Clone, Debug, Serialize)]
pub struct GpuReport {
    /// The device's name.
    pub device: String,
    /// The architecture the kernels were built for.
    pub arch: &'static str,
    /// Points.
    pub m: usize,
    /// Modes per axis.
    pub n: usize,
    /// Requested tolerance.
    pub eps: f64,
    /// Upsampling factor.
    pub upsampfac: f64,
    /// Fine grid per axis.
    pub nf: usize,
    /// Kernel width.
    pub ns: usize,
    /// The spreading kernel's geometry.
    pub spreading: SpreadGeometry,
    /// Setup seconds (not in the rates): input generation, plan (NVRTC + cuFFT), upload and
    /// first sort.
    pub setup_s: [f64; 3],
    /// Milliseconds of the resident execute (zero + spread + FFT + deconvolution).
    pub execute_ms: f64,
    /// Points per second of the resident execute.
    pub points_per_s: f64,
    /// The target it is measured against.
    pub target_points_per_s: f64,
    /// `points_per_s` / target.
    pub target_ratio: f64,
    /// Milliseconds of the spreading alone.
    pub spread_ms: f64,
    /// Milliseconds of zeroing the grid, the FFT and the deconvolution.
    pub zero_fft_deconv_ms: [f64; 3],
    /// Milliseconds of the sort (plan time).
    pub sort_ms: f64,
    /// Points per second of sort + execute.
    pub sort_and_execute_points_per_s: f64,
    /// Relative ℓ2 error over the checked modes against an f64 direct sum.
    pub sample_rel_err: Option<f64>,
    /// The `--tune` sweep.
    pub tune: Vec<TuneLine>,
}

/// Options of [`bench_gpu`].
#[derive(Clone, Debug)]
pub struct GpuBenchOpts {
    /// Points.
    pub m: usize,
    /// Modes per axis.
    pub n: usize,
    /// Tolerance.
    pub eps: f64,
    /// Upsampling factor.
    pub upsampfac: f64,
    /// Timed repetitions per stage.
    pub reps: usize,
    /// Modes checked against an f64 direct sum.
    pub check_modes: usize,
    /// Also sweep bin sizes and batches of the spreading kernel.
    pub tune: bool,
    /// Forced bin size (default: the heuristic).
    pub bin: Option<usize>,
    /// Forced batch (default: the heuristic).
    pub batch: Option<usize>,
}

impl GpuBenchOpts {
    /// The issue's case: 1e8 points, 4096², eps 1e-5, σ = 2.
    pub fn issue_case() -> Self {
        GpuBenchOpts {
            m: 100_000_000,
            n: 4096,
            eps: 1e-5,
            upsampfac: 2.0,
            reps: 5,
            check_modes: 8,
            tune: false,
            bin: None,
            batch: None,
        }
    }
}

/// Uniform points in [-π, π)² and strengths in the unit square, generated in parallel
/// (deterministic: one generator per block of 2^20 points).
fn random_input(m: usize) -> (Vec<f32>, Vec<f32>, Vec<Complex<f32>>) {
    let pi = std::f64::consts::PI;
    let mut x = vec![0f32; m];
    let mut y = vec![0f32; m];
    let mut c = vec![Complex::<f32>::default(); m];
    x.par_chunks_mut(1 << 20)
        .zip(y.par_chunks_mut(1 << 20))
        .zip(c.par_chunks_mut(1 << 20))
        .enumerate()
        .for_each(|(b, ((xs, ys), cs))| {
            let mut rng = SplitMix64(0x5eed_0000 + b as u64);
            for ((xv, yv), cv) in xs.iter_mut().zip(ys.iter_mut()).zip(cs.iter_mut()) {
                *xv = rng.uniform(-pi, pi) as f32;
                *yv = rng.uniform(-pi, pi) as f32;
                *cv = Complex::new(rng.uniform(-1.0, 1.0) as f32, rng.uniform(-1.0, 1.0) as f32);
            }
        });
    (x, y, c)
}

fn timed(
    plan: &mut GpuPlan<f32>,
    reps: usize,
    mut f: impl FnMut(&mut GpuPlan<f32>) -> Result<(), NufftError>,
) -> Result<f64, NufftError> {
    let stream = plan.stream().clone();
    crate::gpu::time_on_stream(&stream, reps, || f(plan), NufftError::from)
}

/// Runs the benchmark and prints its lines.
pub fn bench_gpu(o: &GpuBenchOpts) -> Result<GpuReport, BenchError> {
    let (m, n) = (o.m, o.n);
    let t = Instant::now();
    let (x, y, c) = random_input(m);
    let t_gen = t.elapsed().as_secs_f64();
    let opts = Options {
        eps: o.eps,
        isign: 1,
        upsampfac: o.upsampfac,
    };
    let t = Instant::now();
    let mut plan = GpuPlan::<f32>::with_config(NufftType::Type1, &[n, n], &opts, o.bin, o.batch)?;
    let t_plan = t.elapsed().as_secs_f64();
    let device = plan.context().name().unwrap_or_else(|_| "?".into());
    let t = Instant::now();
    plan.upload_points(&[&x, &y])?;
    plan.sort_resident()?;
    plan.upload_input(&c)?;
    plan.stream().synchronize().map_err(NufftError::from)?;
    let t_up = t.elapsed().as_secs_f64();
    let reps = o.reps.max(1);
    let sort = timed(&mut plan, reps, |p| p.sort_resident())?;
    let exec = timed(&mut plan, reps, |p| p.execute_resident())?;
    let zero = timed(&mut plan, reps, |p| p.zero_grid())?;
    let spread = timed(&mut plan, reps, |p| {
        p.zero_grid()?;
        p.spread_resident()
    })? - zero;
    let fft = timed(&mut plan, reps, |p| p.fft_resident())?;
    let deconv = timed(&mut plan, reps, |p| p.deconv_resident())?;
    let cfg = plan.spread_config();
    let subproblems = plan.subproblems();
    let nf = plan.fine_grid()[0];
    let ns = plan.kernel_params().ns;
    println!(
        "nufft bench gpu: 2-D type 1 f32, M = {m}, {n}x{n} modes, eps = {:e}, upsampfac = {}, nf = {nf}, ns = {ns}, device {device} ({})",
        o.eps, o.upsampfac, plan.arch()
    );
    println!(
        "  spreading: bins {}x{}, {} groups x {} threads per block, batch {}, subproblems {} (<= {} points)",
        cfg.bin[0], cfg.bin[1], cfg.groups, cfg.group_threads, cfg.batch, plan.subproblems(), cfg.sub
    );
    println!(
        "  setup (not in the rates): input generation {t_gen:.2} s, plan (NVRTC + cuFFT) {t_plan:.2} s, upload + first sort {t_up:.2} s"
    );
    let pps = m as f64 / exec;
    println!(
        "  execute, resident (zero + spread + FFT + deconv): {:.2} ms = {pps:.3e} points/s; ratio to target {TARGET_POINTS_PER_S:.0e}: {:.2}",
        exec * 1e3,
        pps / TARGET_POINTS_PER_S
    );
    println!(
        "  spread alone: {:.2} ms = {:.3e} points/s; zero {:.2} ms, FFT {:.2} ms, deconv {:.2} ms",
        spread * 1e3,
        m as f64 / spread,
        zero * 1e3,
        fft * 1e3,
        deconv * 1e3
    );
    println!(
        "  sort (plan time, separate): {:.2} ms = {:.3e} points/s; sort + execute {:.3e} points/s",
        sort * 1e3,
        m as f64 / sort,
        m as f64 / (sort + exec)
    );
    let mut sample_rel_err = None;
    if o.check_modes > 0 {
        plan.execute_resident()?;
        let mut out = vec![Complex::<f32>::default(); n * n];
        plan.download_output(&mut out)?;
        let mut rng = SplitMix64(777);
        let err = sample_error(&x, &y, &c, &out, n, o.check_modes, &mut rng);
        println!(
            "  relative l2 error on {} random modes vs f64 direct sum: {err:.2e} (eps {:e})",
            o.check_modes, o.eps
        );
        sample_rel_err = Some(err);
    }
    let mut tune = Vec::new();
    if o.tune {
        println!("  tune: spread alone (ms, points/s) by bin size and batch");
        for bin in [8, 16, 32] {
            for batch in [32, 64, 128] {
                match plan.set_spread_config(Some(bin), Some(batch)) {
                    Ok(()) => {}
                    Err(e) => {
                        println!("    bin {bin:2} batch {batch:3}: {e}");
                        tune.push(TuneLine {
                            bin,
                            batch,
                            groups: None,
                            group_threads: None,
                            spread_ms: None,
                            spread_points_per_s: None,
                            error: Some(e.to_string()),
                        });
                        continue;
                    }
                }
                plan.sort_resident()?;
                let s = timed(&mut plan, reps, |p| {
                    p.zero_grid()?;
                    p.spread_resident()
                })? - zero;
                let c = plan.spread_config();
                println!(
                    "    bin {bin:2} batch {batch:3} ({} groups x {}): {:.2} ms = {:.3e} points/s",
                    c.groups,
                    c.group_threads,
                    s * 1e3,
                    m as f64 / s
                );
                tune.push(TuneLine {
                    bin,
                    batch,
                    groups: Some(c.groups),
                    group_threads: Some(c.group_threads),
                    spread_ms: Some(s * 1e3),
                    spread_points_per_s: Some(m as f64 / s),
                    error: None,
                });
            }
        }
    }
    Ok(GpuReport {
        device,
        arch: plan.arch(),
        m,
        n,
        eps: o.eps,
        upsampfac: o.upsampfac,
        nf,
        ns,
        spreading: SpreadGeometry {
            bin: [cfg.bin[0], cfg.bin[1]],
            groups: cfg.groups,
            group_threads: cfg.group_threads,
            batch: cfg.batch,
            subproblems,
            sub: cfg.sub,
        },
        setup_s: [t_gen, t_plan, t_up],
        execute_ms: exec * 1e3,
        points_per_s: pps,
        target_points_per_s: TARGET_POINTS_PER_S,
        target_ratio: pps / TARGET_POINTS_PER_S,
        spread_ms: spread * 1e3,
        zero_fft_deconv_ms: [zero * 1e3, fft * 1e3, deconv * 1e3],
        sort_ms: sort * 1e3,
        sort_and_execute_points_per_s: m as f64 / (sort + exec),
        sample_rel_err,
        tune,
    })
}
