//! What both backends ([`super::CpuPlan`], [`super::GpuPlan`]) derive from a plan request
//! in the same way: the checked dimension, modes and options, the kernel parameters, the
//! fine grid and the deconvolution weights; and the checks of coordinates and buffer
//! lengths they both apply.

use rayon::prelude::*;

use super::deconv;
use super::kernel::KernelParams;
use super::{next_smooth_even, NufftError, NufftType, Options, Real, MAX_EPS, UPSAMPFAC_RANGE};

/// Largest fine grid per axis accepted (guards against absurd allocations).
const MAX_NF: usize = 1 << 24;

/// The backend-independent part of a plan.
#[derive(Clone, Debug)]
pub(super) struct PlanShape {
    pub ty: NufftType,
    /// 2 or 3.
    pub dim: usize,
    /// Modes per axis, `dim` entries.
    pub modes: Vec<usize>,
    /// Modes per axis, unused axes 1.
    pub modes3: [usize; 3],
    /// Fine grid per axis, unused axes 1.
    pub nf: [usize; 3],
    /// `isign ≥ 0`.
    pub positive: bool,
    pub params: KernelParams,
    /// Fine-grid points in all (the product of `nf`; it does not overflow).
    pub grid_len: usize,
}

impl PlanShape {
    /// Checks a request for a transform with `modes.len()` ∈ {2, 3} dimensions and sizes its
    /// fine grid: the smallest even 2,3,5-smooth size `≥ max(σ·N, 2·ns)` per axis.
    pub(super) fn new<T: Real>(
        ty: NufftType,
        modes: &[usize],
        opts: &Options,
    ) -> Result<Self, NufftError> {
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
        for d in 0..dim {
            modes3[d] = modes[d];
            let want = (opts.upsampfac * modes[d] as f64 - 1e-9).ceil() as usize;
            if want > MAX_NF {
                return Err(NufftError::GridTooLarge(want));
            }
            nf[d] = next_smooth_even(want.max(2 * params.ns));
        }
        let grid_len = nf.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
        let grid_len = grid_len.ok_or(NufftError::GridTooLarge(nf[0]))?;
        Ok(PlanShape {
            ty,
            dim,
            modes: modes.to_vec(),
            modes3,
            nf,
            positive: opts.isign >= 0,
            params,
            grid_len,
        })
    }

    /// Modes in all, `N1·N2(·N3)`.
    pub(super) fn num_modes(&self) -> usize {
        self.modes.iter().product()
    }

    /// Deconvolution factors `1/φ̂` per axis (`[1]` on unused axes).
    pub(super) fn weights<T: Real>(&self) -> [Vec<T>; 3] {
        std::array::from_fn(|d| {
            if d < self.dim {
                deconv::weights(&self.params, self.nf[d], self.modes[d])
            } else {
                vec![T::one()]
            }
        })
    }

    /// Checks the length of the input (type 1: `m` strengths; type 2: the modes).
    pub(super) fn check_input(&self, got: usize, m: usize) -> Result<(), NufftError> {
        let (what, expected) = match self.ty {
            NufftType::Type1 => ("strengths", m),
            NufftType::Type2 => ("mode input", self.num_modes()),
        };
        check_len(what, got, expected)
    }

    /// Checks the length of the output (type 1: the modes; type 2: `m` values).
    pub(super) fn check_output(&self, got: usize, m: usize) -> Result<(), NufftError> {
        let (what, expected) = match self.ty {
            NufftType::Type1 => ("mode output", self.num_modes()),
            NufftType::Type2 => ("output", m),
        };
        check_len(what, got, expected)
    }
}

fn check_len(what: &'static str, got: usize, expected: usize) -> Result<(), NufftError> {
    if got != expected {
        return Err(NufftError::WrongLength {
            what,
            got,
            expected,
        });
    }
    Ok(())
}

/// Checks the options and returns the kernel parameters.
fn check_options<T: Real>(opts: &Options) -> Result<KernelParams, NufftError> {
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

/// Checks coordinate slices: one per dimension, equal lengths, all finite (the first
/// non-finite value is reported). Returns the number of points.
pub(super) fn check_coords<T: Real>(coords: &[&[T]], dim: usize) -> Result<usize, NufftError> {
    if coords.len() != dim {
        return Err(NufftError::WrongCoordCount {
            expected: dim,
            got: coords.len(),
        });
    }
    let m = coords[0].len();
    if coords.iter().any(|c| c.len() != m) {
        return Err(NufftError::LengthMismatch(
            coords.iter().map(|c| c.len()).collect(),
        ));
    }
    for (axis, c) in coords.iter().enumerate() {
        let bad_block = c
            .par_chunks(1 << 16)
            .position_first(|b| !b.iter().all(|v| v.is_finite()));
        if let Some(blk) = bad_block {
            let start = blk << 16;
            let index = start + c[start..].iter().position(|v| !v.is_finite()).unwrap_or(0);
            return Err(NufftError::NonFiniteCoordinate {
                axis,
                index,
                value: c[index].as_f64(),
            });
        }
    }
    Ok(m)
}
