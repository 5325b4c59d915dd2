//! The CPU backend: spread → FFT → deconvolve (type 1) and its reverse (type 2).

use std::time::{Duration, Instant};

use num_complex::Complex;
use rayon::prelude::*;

use super::deconv;
use super::fft::FftNd;
use super::kernel::{Kernel, KernelParams};
use super::spread::{self, SortedPoints};
use super::{
    next_smooth_even, NufftBackend, NufftError, NufftType, Options, Real, MAX_EPS, UPSAMPFAC_RANGE,
};

/// Largest fine grid per axis accepted (guards against absurd allocations).
const MAX_NF: usize = 1 << 24;

/// Wall time of the stages of the last `set_points` / `execute`.
#[derive(Clone, Copy, Debug, Default)]
pub struct StageTimes {
    /// Folding, binning and sorting the points.
    pub sort: Duration,
    /// Spreading (type 1) or interpolation (type 2).
    pub spread: Duration,
    /// Fine-grid FFT.
    pub fft: Duration,
    /// Deconvolution and copy of the modes (including zeroing the grid).
    pub deconv: Duration,
}

/// CPU NUFFT plan (rayon global pool).
pub struct CpuPlan<T: Real> {
    ty: NufftType,
    dim: usize,
    modes: Vec<usize>,
    modes3: [usize; 3],
    nf: [usize; 3],
    positive: bool,
    params: KernelParams,
    kernel: Kernel<T>,
    weights: [Vec<T>; 3],
    fft: FftNd<T>,
    grid: Vec<Complex<T>>,
    points: Option<SortedPoints<T>>,
    times: StageTimes,
}

/// Checks the options and returns the kernel parameters.
pub(super) fn check_options<T: Real>(opts: &Options) -> Result<KernelParams, NufftError> {
    let eps = opts.eps;
    if !(eps >= T::MIN_EPS && eps <= MAX_EPS) {
        return Err(NufftError::EpsOutOfRange {
            eps,
            min: T::MIN_EPS,
            max: MAX_EPS,
            precision: T::NAME,
        });
    }
    let s = opts.upsampfac;
    if !(s >= UPSAMPFAC_RANGE.0 && s <= UPSAMPFAC_RANGE.1) {
        return Err(NufftError::BadUpsampfac(s));
    }
    let p = KernelParams::from_eps(eps, s)?;
    if s < 1.4 && p.ns > T::MAX_NS_LOW_SIGMA {
        return Ok(KernelParams::with_ns(T::MAX_NS_LOW_SIGMA, s));
    }
    Ok(p)
}

impl<T: Real> CpuPlan<T> {
    /// Plans a transform with `modes.len()` ∈ {2, 3} dimensions.
    pub fn new(ty: NufftType, modes: &[usize], opts: &Options) -> Result<Self, NufftError> {
        let dim = modes.len();
        if !(2..=3).contains(&dim) {
            return Err(NufftError::BadDimension(dim));
        }
        if let Some(axis) = modes.iter().position(|&n| n == 0) {
            return Err(NufftError::ZeroModes { axis });
        }
        let params = check_options::<T>(opts)?;
        let mut modes3 = [1usize; 3];
        let mut nf = [1usize; 3];
        let mut weights = [vec![T::one()], vec![T::one()], vec![T::one()]];
        for d in 0..dim {
            modes3[d] = modes[d];
            let want = (opts.upsampfac * modes[d] as f64 - 1e-9).ceil() as usize;
            if want > MAX_NF {
                return Err(NufftError::GridTooLarge(want));
            }
            nf[d] = next_smooth_even(want.max(2 * params.ns));
        }
        // Refuse (rather than abort on) grids that cannot be allocated.
        let total = nf.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
        let total = total.ok_or(NufftError::GridTooLarge(nf[0]))?;
        let mut grid = Vec::new();
        grid.try_reserve_exact(total)
            .map_err(|_| NufftError::GridTooLarge(nf[0]))?;
        grid.resize(total, Complex::default());
        for d in 0..dim {
            weights[d] = deconv::weights(&params, nf[d], modes[d]);
        }
        Ok(CpuPlan {
            ty,
            dim,
            modes: modes.to_vec(),
            modes3,
            nf,
            positive: opts.isign >= 0,
            params,
            kernel: Kernel::new(&params, opts.eps),
            weights,
            fft: FftNd::new(&nf[..dim]),
            grid,
            points: None,
            times: StageTimes::default(),
        })
    }

    /// Kernel parameters chosen for the tolerance.
    pub fn kernel_params(&self) -> KernelParams {
        self.params
    }

    /// Fine grid size per axis (unused axes 1).
    pub fn fine_grid(&self) -> [usize; 3] {
        self.nf
    }

    /// Stage timings of the last calls.
    pub fn stage_times(&self) -> StageTimes {
        self.times
    }

    fn zero_grid(&mut self) {
        self.grid
            .par_chunks_mut(1 << 16)
            .for_each(|g| g.fill(Complex::default()));
    }
}

impl<T: Real> NufftBackend<T> for CpuPlan<T> {
    fn backend_name(&self) -> &'static str {
        "cpu"
    }

    fn nufft_type(&self) -> NufftType {
        self.ty
    }

    fn modes(&self) -> &[usize] {
        &self.modes
    }

    fn set_points(&mut self, coords: &[&[T]]) -> Result<(), NufftError> {
        let t = Instant::now();
        self.points = Some(SortedPoints::new(coords, &self.nf, self.dim)?);
        self.times.sort = t.elapsed();
        Ok(())
    }

    fn num_points(&self) -> usize {
        self.points.as_ref().map_or(0, |p| p.len())
    }

    fn execute(
        &mut self,
        input: &[Complex<T>],
        output: &mut [Complex<T>],
    ) -> Result<(), NufftError> {
        let m = self.points.as_ref().ok_or(NufftError::NoPoints)?.len();
        let nmodes: usize = self.modes.iter().product();
        let (n_in, n_out, what_in, what_out) = match self.ty {
            NufftType::Type1 => (m, nmodes, "strengths", "mode output"),
            NufftType::Type2 => (nmodes, m, "mode input", "output"),
        };
        if input.len() != n_in {
            return Err(NufftError::WrongLength {
                what: what_in,
                got: input.len(),
                expected: n_in,
            });
        }
        if output.len() != n_out {
            return Err(NufftError::WrongLength {
                what: what_out,
                got: output.len(),
                expected: n_out,
            });
        }
        let t0 = Instant::now();
        self.zero_grid();
        let pts = self.points.as_ref().ok_or(NufftError::NoPoints)?;
        match self.ty {
            NufftType::Type1 => {
                let t_zero = t0.elapsed();
                let t = Instant::now();
                spread::spread(pts, input, &self.kernel, self.nf, &mut self.grid);
                self.times.spread = t.elapsed();
                let t = Instant::now();
                self.fft.process(&mut self.grid, self.positive);
                self.times.fft = t.elapsed();
                let t = Instant::now();
                deconv::extract(&self.grid, self.nf, self.modes3, &self.weights, output);
                self.times.deconv = t.elapsed() + t_zero;
            }
            NufftType::Type2 => {
                deconv::fill(input, self.nf, self.modes3, &self.weights, &mut self.grid);
                self.times.deconv = t0.elapsed();
                let t = Instant::now();
                self.fft.process(&mut self.grid, self.positive);
                self.times.fft = t.elapsed();
                let t = Instant::now();
                spread::interp(pts, &self.grid, &self.kernel, self.nf, output);
                self.times.spread = t.elapsed();
            }
        }
        Ok(())
    }
}
