//! The CPU backend: spread → FFT → deconvolve (type 1) and its reverse (type 2).

pub(crate) mod fft;
pub(crate) mod spread;

use std::time::{Duration, Instant};

use num_complex::Complex;
use rayon::prelude::*;

use super::deconv;
use super::kernel::{Kernel, KernelParams};
use super::plan::PlanShape;
use super::{NufftBackend, NufftError, NufftType, Options, Real};

use fft::FftNd;
use spread::SortedPoints;

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
    shape: PlanShape,
    kernel: Kernel<T>,
    weights: [Vec<T>; 3],
    fft: FftNd<T>,
    grid: Vec<Complex<T>>,
    points: Option<SortedPoints<T>>,
    times: StageTimes,
}

impl<T: Real> CpuPlan<T> {
    /// Plans a transform with `modes.len()` ∈ {2, 3} dimensions.
    pub fn new(ty: NufftType, modes: &[usize], opts: &Options) -> Result<Self, NufftError> {
        let shape = PlanShape::new::<T>(ty, modes, opts)?;
        // Refuse (rather than abort on) grids that cannot be allocated.
        let mut grid = Vec::new();
        grid.try_reserve_exact(shape.grid_len)
            .map_err(|_| NufftError::GridTooLarge(shape.nf[0]))?;
        grid.resize(shape.grid_len, Complex::default());
        Ok(CpuPlan {
            kernel: Kernel::new(&shape.params, opts.eps),
            weights: shape.weights(),
            fft: FftNd::new(&shape.nf[..shape.dim]),
            grid,
            points: None,
            times: StageTimes::default(),
            shape,
        })
    }

    /// Kernel parameters chosen for the tolerance.
    pub fn kernel_params(&self) -> KernelParams {
        self.shape.params
    }

    /// Fine grid size per axis (unused axes 1).
    pub fn fine_grid(&self) -> [usize; 3] {
        self.shape.nf
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
        self.shape.ty
    }

    fn modes(&self) -> &[usize] {
        &self.shape.modes
    }

    fn set_points(&mut self, coords: &[&[T]]) -> Result<(), NufftError> {
        let t = Instant::now();
        self.points = Some(SortedPoints::new(coords, &self.shape.nf, self.shape.dim)?);
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
        self.shape.check_input(input.len(), m)?;
        self.shape.check_output(output.len(), m)?;
        let t0 = Instant::now();
        self.zero_grid();
        let pts = self.points.as_ref().ok_or(NufftError::NoPoints)?;
        match self.shape.ty {
            NufftType::Type1 => {
                let t_zero = t0.elapsed();
                let t = Instant::now();
                spread::spread(pts, input, &self.kernel, self.shape.nf, &mut self.grid);
                self.times.spread = t.elapsed();
                let t = Instant::now();
                self.fft.process(&mut self.grid, self.shape.positive);
                self.times.fft = t.elapsed();
                let t = Instant::now();
                deconv::extract(
                    &self.grid,
                    self.shape.nf,
                    self.shape.modes3,
                    &self.weights,
                    output,
                );
                self.times.deconv = t.elapsed() + t_zero;
            }
            NufftType::Type2 => {
                deconv::fill(
                    input,
                    self.shape.nf,
                    self.shape.modes3,
                    &self.weights,
                    &mut self.grid,
                );
                self.times.deconv = t0.elapsed();
                let t = Instant::now();
                self.fft.process(&mut self.grid, self.shape.positive);
                self.times.fft = t.elapsed();
                let t = Instant::now();
                spread::interp(pts, &self.grid, &self.kernel, self.shape.nf, output);
                self.times.spread = t.elapsed();
            }
        }
        Ok(())
    }
}
