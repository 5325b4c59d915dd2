//! CPU throughput benchmark: 2-D type 1 on uniformly random points.

use std::path::Path;
use std::time::{Duration, Instant};

use num_complex::Complex;
use serde::Serialize;

use super::BenchError;
use crate::compute::nufft::{CpuPlan, NufftBackend, NufftType, Options, SplitMix64, StageTimes};
use crate::npy::{write_npy, NpyData};

/// Seconds of each stage of the best repeat.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StageSeconds {
    /// Folding, binning and sorting the points.
    pub sort: f64,
    /// Spreading.
    pub spread: f64,
    /// Fine-grid FFT.
    pub fft: f64,
    /// Deconvolution and copy of the modes.
    pub deconv: f64,
}

/// Result of [`bench_cpu`].
#[derive(Clone, Debug, Serialize)]
pub struct CpuReport {
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
    /// Threads of the rayon pool.
    pub threads: usize,
    /// Repeats (the best is reported).
    pub repeats: usize,
    /// Best plan + set_points + execute seconds over the repeats.
    pub total_s: f64,
    /// Stage seconds of the best repeat.
    pub stages: StageSeconds,
    /// `m / total_s`.
    pub points_per_s: f64,
    /// Process CPU seconds (user + system, all threads) of the best repeat.
    pub cpu_time_s: f64,
    /// `m / cpu_time_s`.
    pub points_per_cpu_s: f64,
    /// Modes checked against an f64 direct sum.
    pub check_modes: usize,
    /// Their relative ℓ2 error (none if no mode was checked).
    pub sample_rel_err: Option<f64>,
}

/// Runs f32 2-D type 1 (`isign = +1`) with `m` uniform points in `[-π, π)²` and unit-variance
/// strengths onto `n × n` modes, `repeats` times (whole call: plan, set_points, execute);
/// prints and returns points/s of the best. With `save_dir`, writes `x.npy`, `y.npy`,
/// `c.npy` and `f.npy` there for cross-checks with FINUFFT on the same input.
pub fn bench_cpu(
    m: usize,
    n: usize,
    eps: f64,
    upsampfac: f64,
    repeats: usize,
    check_modes: usize,
    save_dir: Option<&Path>,
) -> Result<CpuReport, BenchError> {
    let mut rng = SplitMix64(12345);
    let pi = std::f64::consts::PI;
    let x: Vec<f32> = (0..m).map(|_| rng.uniform(-pi, pi) as f32).collect();
    let y: Vec<f32> = (0..m).map(|_| rng.uniform(-pi, pi) as f32).collect();
    let c: Vec<Complex<f32>> = (0..m)
        .map(|_| Complex::new(rng.uniform(-1.0, 1.0) as f32, rng.uniform(-1.0, 1.0) as f32))
        .collect();
    let opts = Options {
        eps,
        isign: 1,
        upsampfac,
    };
    let mut out = vec![Complex::<f32>::default(); n * n];
    let mut best: Option<(Duration, StageTimes, usize, usize, Duration)> = None;
    for _ in 0..repeats.max(1) {
        let cpu0 = process_cpu_time();
        let t = Instant::now();
        let mut plan = CpuPlan::<f32>::new(NufftType::Type1, &[n, n], &opts)?;
        plan.set_points(&[&x, &y])?;
        plan.execute(&c, &mut out)?;
        let el = t.elapsed();
        let cpu = process_cpu_time().saturating_sub(cpu0);
        if best.is_none_or(|b| el < b.0) {
            best = Some((
                el,
                plan.stage_times(),
                plan.fine_grid()[0],
                plan.kernel_params().ns,
                cpu,
            ));
        }
    }
    let (total, stages, nf, ns, cpu_time) = best.expect("at least one repeat ran");
    let sample_rel_err = sample_error(&x, &y, &c, &out, n, check_modes, &mut rng);
    let r = CpuReport {
        m,
        n,
        eps,
        upsampfac,
        nf,
        ns,
        threads: rayon::current_num_threads(),
        repeats: repeats.max(1),
        total_s: total.as_secs_f64(),
        stages: StageSeconds {
            sort: stages.sort.as_secs_f64(),
            spread: stages.spread.as_secs_f64(),
            fft: stages.fft.as_secs_f64(),
            deconv: stages.deconv.as_secs_f64(),
        },
        points_per_s: m as f64 / total.as_secs_f64(),
        cpu_time_s: cpu_time.as_secs_f64(),
        points_per_cpu_s: m as f64 / cpu_time.as_secs_f64(),
        check_modes,
        sample_rel_err: (check_modes > 0).then_some(sample_rel_err),
    };
    println!(
        "nufft bench cpu: 2-D type 1 f32, M = {m}, {n}x{n} modes, eps = {eps:e}, upsampfac = {upsampfac}, \
         nf = {nf}, ns = {ns}, threads = {}",
        rayon::current_num_threads()
    );
    println!(
        "  best of {}: {:.3} s = {:.3e} points/s (sort {:.3} s, spread {:.3} s, fft {:.3} s, deconv {:.3} s)",
        repeats.max(1),
        total.as_secs_f64(),
        r.points_per_s,
        stages.sort.as_secs_f64(),
        stages.spread.as_secs_f64(),
        stages.fft.as_secs_f64(),
        stages.deconv.as_secs_f64()
    );
    println!(
        "  process CPU time of that repeat: {:.3} s = {:.3e} points per CPU-second",
        cpu_time.as_secs_f64(),
        m as f64 / cpu_time.as_secs_f64()
    );
    if check_modes > 0 {
        println!("  relative l2 error on {check_modes} random modes vs f64 direct sum: {sample_rel_err:.2e}");
    }
    if let Some(dir) = save_dir {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::SaveDir(dir.to_path_buf(), e))?;
        write_npy(&dir.join("x.npy"), &[m], &NpyData::F32(x))?;
        write_npy(&dir.join("y.npy"), &[m], &NpyData::F32(y))?;
        write_npy(&dir.join("c.npy"), &[m], &NpyData::C64(c))?;
        write_npy(&dir.join("f.npy"), &[n, n], &NpyData::C64(out))?;
        println!("  inputs and output written to {}", dir.display());
    }
    Ok(r)
}

/// User + system CPU time of this process (all threads) so far.
fn process_cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Relative ℓ2 error over `k` random modes against an f64 direct sum.
pub(super) fn sample_error(
    x: &[f32],
    y: &[f32],
    c: &[Complex<f32>],
    out: &[Complex<f32>],
    n: usize,
    k: usize,
    rng: &mut SplitMix64,
) -> f64 {
    use rayon::prelude::*;
    if k == 0 {
        return f64::NAN;
    }
    let (mut num, mut den) = (0.0, 0.0);
    for _ in 0..k {
        let idx = (rng.next_u64() % (n * n) as u64) as usize;
        let k1 = (idx / n) as f64 - (n / 2) as f64;
        let k2 = (idx % n) as f64 - (n / 2) as f64;
        let exact: Complex<f64> = (0..x.len())
            .into_par_iter()
            .map(|j| {
                let ph = k1 * x[j] as f64 + k2 * y[j] as f64;
                Complex::new(c[j].re as f64, c[j].im as f64) * Complex::from_polar(1.0, ph)
            })
            .sum();
        let got = Complex::new(out[idx].re as f64, out[idx].im as f64);
        num += (got - exact).norm_sqr();
        den += exact.norm_sqr();
    }
    (num / den).sqrt()
}
