//! Non-uniform FFT (NUFFT) of types 1 and 2 in 2 and 3 dimensions, with FINUFFT's
//! conventions, behind a [`NufftBackend`] trait (CPU implementation: [`CpuPlan`]).
//!
//! Conventions (FINUFFT, `modeord=0`, Python layout):
//!
//! * **Type 1** (non-uniform → uniform, the gridding direction):
//!   `f[k1, k2(, k3)] = Σ_j c_j · exp(isign · i · (k1·x_j + k2·y_j (+ k3·z_j)))`.
//! * **Type 2** (uniform → non-uniform, degridding; the adjoint of type 1 with the opposite
//!   sign): `c_j = Σ_k f[k] · exp(isign · i · k·x_j)`.
//! * Modes run over `k_d = -⌊N_d/2⌋ ..= ⌈N_d/2⌉ - 1` in increasing order; the mode array is
//!   C-ordered with shape `(N1, N2(, N3))` and its **first axis goes with x**, so element
//!   `[i1, i2, i3]` (flat index `(i1·N2 + i2)·N3 + i3`) is mode
//!   `(i1 - ⌊N1/2⌋, i2 - ⌊N2/2⌋, i3 - ⌊N3/2⌋)`. This is the layout `finufft.nufft2d1` returns.
//! * No normalisation. `isign ≥ 0` means `+`, negative means `-`.
//! * Coordinates are 2π-periodic: any finite value is folded into `[0, 2π)`.
//!
//! Algorithm: exponential-of-semicircle (ES) kernel with FINUFFT's legacy width/shape rule
//! (see [`kernel`]), spreading onto a fine grid of the smallest even 2,3,5-smooth size
//! `≥ max(σ·N, 2·ns)` from bin-sorted points with per-thread subgrids, a complex FFT of the
//! fine grid (rustfft, one rayon-parallel pass per axis), and deconvolution by the kernel's
//! Fourier transform (Gauss–Legendre quadrature).

pub(crate) mod cpu;
mod deconv;
pub mod gpu;
pub mod kernel;
mod plan;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

pub use cpu::{CpuPlan, StageTimes};
pub use gpu::GpuPlan;
pub use num_complex::Complex;

/// Floating-point precision the NUFFT is generic over (`f32` or `f64`).
pub trait Real:
    rustfft::FftNum
    + num_traits::Float
    + Default
    + num_traits::NumAssign
    + std::iter::Sum
    + cudarc::driver::DeviceRepr
    + cudarc::driver::ValidAsZeroBits
{
    /// Human-readable name ("f32" / "f64").
    const NAME: &'static str;
    /// Smallest tolerance accepted for this precision.
    const MIN_EPS: f64;
    /// Widest kernel used when σ < 1.4 (single precision cannot use more, see [`kernel`]).
    const MAX_NS_LOW_SIGMA: usize;
    /// Conversion from `f64` (rounding).
    fn cast(v: f64) -> Self;
    /// Conversion to `f64` (exact).
    fn as_f64(self) -> f64;
}

impl Real for f32 {
    const NAME: &'static str = "f32";
    const MIN_EPS: f64 = 1e-7;
    const MAX_NS_LOW_SIGMA: usize = 8;
    fn cast(v: f64) -> Self {
        v as f32
    }
    fn as_f64(self) -> f64 {
        self as f64
    }
}

impl Real for f64 {
    const NAME: &'static str = "f64";
    const MIN_EPS: f64 = 1e-15;
    const MAX_NS_LOW_SIGMA: usize = MAX_NS;
    fn cast(v: f64) -> Self {
        v
    }
    fn as_f64(self) -> f64 {
        self
    }
}

/// Largest tolerance accepted (a coarser request would give a kernel narrower than 2).
pub const MAX_EPS: f64 = 0.1;
/// Widest kernel supported (grid points per dimension), as in FINUFFT.
pub const MAX_NS: usize = 16;
/// Range of upsampling factors accepted. Tested values are 2.0 and 1.25.
pub const UPSAMPFAC_RANGE: (f64, f64) = (1.2, 3.0);

/// Which transform a plan computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NufftType {
    /// Non-uniform points → uniform modes.
    Type1,
    /// Uniform modes → non-uniform points.
    Type2,
}

/// Which implementation to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// The GPU if one is usable, else the CPU.
    Auto,
    /// The CPU reference (rayon).
    Cpu,
    /// The CUDA backend ([`GpuPlan`]); an error without a usable GPU.
    Gpu,
}

/// Plan options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    /// Requested relative ℓ2 tolerance.
    pub eps: f64,
    /// Sign of the exponent: `≥ 0` means `+i`, negative means `-i`.
    pub isign: i32,
    /// Upsampling factor σ of the fine grid (2.0 or 1.25; others in [`UPSAMPFAC_RANGE`]).
    pub upsampfac: f64,
}

impl Options {
    /// Options with the given tolerance, `isign = +1` and `upsampfac = 2.0`.
    pub fn new(eps: f64) -> Self {
        Options {
            eps,
            isign: 1,
            upsampfac: 2.0,
        }
    }
}

/// Everything that can go wrong: bad input is reported, never a panic.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum NufftError {
    /// The transform is not 2-D or 3-D.
    #[error("NUFFT dimension must be 2 or 3, got {0}")]
    BadDimension(usize),
    /// An axis has no modes.
    #[error("number of modes along axis {axis} is 0; every axis needs at least one mode")]
    ZeroModes {
        /// The axis.
        axis: usize,
    },
    /// The tolerance is outside what the precision can reach.
    #[error("tolerance eps = {eps} is out of range [{min:e}, {max}] for {precision}")]
    EpsOutOfRange {
        /// The tolerance asked for.
        eps: f64,
        /// The smallest supported.
        min: f64,
        /// The largest supported.
        max: f64,
        /// `f32` or `f64`.
        precision: &'static str,
    },
    /// The upsampling factor is outside the accepted range.
    #[error(
        "upsampfac = {0} is not supported: use 2.0 or 1.25 (values in [{min}, {max}] are accepted)",
        min = UPSAMPFAC_RANGE.0, max = UPSAMPFAC_RANGE.1
    )]
    BadUpsampfac(f64),
    /// The tolerance needs a spreading kernel wider than supported at this upsampling.
    #[error(
        "eps = {eps} needs a kernel width of {ns} > {MAX_NS} at upsampfac {upsampfac}; \
         raise eps or use upsampfac 2.0"
    )]
    KernelTooWide {
        /// The tolerance asked for.
        eps: f64,
        /// The kernel width it needs.
        ns: usize,
        /// The upsampling factor.
        upsampfac: f64,
    },
    /// The fine grid would not fit in memory (or in the backend's indices).
    #[error("fine grid of {0} points on the first axis is too large to allocate")]
    GridTooLarge(usize),
    /// The number of coordinate arrays is not the dimension.
    #[error("expected {expected} coordinate arrays (one per dimension), got {got}")]
    WrongCoordCount {
        /// The dimension.
        expected: usize,
        /// Arrays given.
        got: usize,
    },
    /// The coordinate arrays differ in length.
    #[error("coordinate arrays have different lengths: {0:?}")]
    LengthMismatch(Vec<usize>),
    /// A coordinate is NaN or infinite.
    #[error("non-finite coordinate {value} at point {index} on axis {axis}")]
    NonFiniteCoordinate {
        /// The axis.
        axis: usize,
        /// The point.
        index: usize,
        /// Its coordinate.
        value: f64,
    },
    /// An input or output slice has the wrong length.
    #[error("{what} has length {got}, expected {expected}")]
    WrongLength {
        /// Which slice.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length needed.
        expected: usize,
    },
    /// `execute` was called before `set_points`.
    #[error("set_points must be called before execute")]
    NoPoints,
    /// The GPU, a CUDA library or NVRTC failed, or the GPU backend cannot run the plan.
    #[error("GPU NUFFT backend: {0}")]
    Gpu(#[from] crate::gpu::GpuError),
}

crate::gpu::impl_from_cuda_errors!(NufftError);

/// A NUFFT plan: fixed type, modes and options; points are set, then executed on
/// strengths (type 1) or modes (type 2), possibly many times.
pub trait NufftBackend<T: Real>: Send {
    /// Short name of the implementation ("cpu", ...).
    fn backend_name(&self) -> &'static str;
    /// The transform type.
    fn nufft_type(&self) -> NufftType;
    /// Modes per axis, `(N1, N2(, N3))`.
    fn modes(&self) -> &[usize];
    /// Sets (and sorts) the non-uniform points: one slice per dimension, equal lengths.
    fn set_points(&mut self, coords: &[&[T]]) -> Result<(), NufftError>;
    /// Number of points set (0 before [`NufftBackend::set_points`]).
    fn num_points(&self) -> usize;
    /// Type 1: `input` = strengths (length M), `output` = modes (length N1·N2(·N3)).
    /// Type 2: `input` = modes, `output` = values at the points.
    fn execute(
        &mut self,
        input: &[Complex<T>],
        output: &mut [Complex<T>],
    ) -> Result<(), NufftError>;
}

/// Makes a plan on the requested backend. `Auto` takes the GPU when one is usable and
/// falls back to the CPU (with a warning) if the GPU plan cannot be made for a reason other
/// than bad input; `Gpu` reports every failure.
pub fn make_plan<T: Real>(
    backend: Backend,
    ty: NufftType,
    modes: &[usize],
    opts: &Options,
) -> Result<Box<dyn NufftBackend<T>>, NufftError> {
    match backend {
        Backend::Cpu => Ok(Box::new(CpuPlan::<T>::new(ty, modes, opts)?)),
        Backend::Gpu => Ok(Box::new(GpuPlan::<T>::new(ty, modes, opts)?)),
        Backend::Auto => {
            if crate::gpu::gpu_available() {
                match GpuPlan::<T>::new(ty, modes, opts) {
                    Ok(p) => return Ok(Box::new(p)),
                    Err(NufftError::Gpu(why)) => {
                        tracing::warn!("GPU NUFFT unavailable, using the CPU: {why}")
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(Box::new(CpuPlan::<T>::new(ty, modes, opts)?))
        }
    }
}

/// One-shot type 1 on the CPU: returns the `N1·N2(·N3)` modes (layout in the module docs).
pub fn nufft_type1<T: Real>(
    coords: &[&[T]],
    c: &[Complex<T>],
    modes: &[usize],
    opts: &Options,
) -> Result<Vec<Complex<T>>, NufftError> {
    let mut plan = CpuPlan::<T>::new(NufftType::Type1, modes, opts)?;
    plan.set_points(coords)?;
    let mut out = vec![Complex::default(); modes.iter().product()];
    plan.execute(c, &mut out)?;
    Ok(out)
}

/// One-shot type 2 on the CPU: returns the M values at the points.
pub fn nufft_type2<T: Real>(
    coords: &[&[T]],
    f: &[Complex<T>],
    modes: &[usize],
    opts: &Options,
) -> Result<Vec<Complex<T>>, NufftError> {
    let mut plan = CpuPlan::<T>::new(NufftType::Type2, modes, opts)?;
    plan.set_points(coords)?;
    let mut out = vec![Complex::default(); plan.num_points()];
    plan.execute(f, &mut out)?;
    Ok(out)
}

/// `⌊x⌋` without a libm call (the x86-64 baseline has no `roundsd`, so `f64::floor` is a
/// function call in hot loops). Exact for all finite `x`.
#[inline(always)]
pub(crate) fn fast_floor(x: f64) -> f64 {
    if x.abs() < 4.5e15 {
        let i = x as i64 as f64;
        if i > x {
            i - 1.0
        } else {
            i
        }
    } else {
        x.floor()
    }
}

/// `⌈x⌉` without a libm call; exact for all finite `x`.
#[inline(always)]
pub(crate) fn fast_ceil(x: f64) -> f64 {
    -fast_floor(-x)
}

/// Smallest even 2,3,5-smooth integer `≥ n` (FINUFFT's `next235even`).
pub fn next_smooth_even(n: usize) -> usize {
    let mut m = n.max(2);
    if m % 2 == 1 {
        m += 1;
    }
    loop {
        let mut r = m;
        for p in [2, 3, 5] {
            while r.is_multiple_of(p) {
                r /= p;
            }
        }
        if r == 1 {
            return m;
        }
        m += 2;
    }
}

/// SplitMix64: a tiny deterministic generator for test and benchmark inputs.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
}
