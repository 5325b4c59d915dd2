//! Multi-dimensional in-place complex FFT from 1-D rustfft transforms, one rayon-parallel
//! pass per axis. The last (contiguous) axis is transformed row by row; other axes by
//! gathering blocks of [`COLS`] adjacent columns into a contiguous buffer.

use std::sync::Arc;

use num_complex::Complex;
use rayon::prelude::*;
use rustfft::{Fft, FftDirection, FftPlanner};

use crate::compute::nufft::Real;

/// Columns gathered per task for strided axes.
const COLS: usize = 16;

/// Plans for a C-ordered array of the given shape, both directions.
pub(crate) struct FftNd<T: Real> {
    shape: Vec<usize>,
    fwd: Vec<Arc<dyn Fft<T>>>,
    inv: Vec<Arc<dyn Fft<T>>>,
}

/// A raw pointer shared by tasks that touch disjoint elements.
#[derive(Clone, Copy)]
struct SharedPtr<T>(*mut Complex<T>);
// SAFETY: only used in `strided_pass`, where every task reads and writes a disjoint set of
// elements (distinct (outer, column) pairs) and the borrow of the slice outlives the tasks.
unsafe impl<T> Send for SharedPtr<T> {}
unsafe impl<T> Sync for SharedPtr<T> {}
impl<T> SharedPtr<T> {
    fn get(self) -> *mut Complex<T> {
        self.0
    }
}

impl<T: Real> FftNd<T> {
    /// Plans for `shape` (every entry ≥ 1).
    pub(crate) fn new(shape: &[usize]) -> Self {
        let mut planner = FftPlanner::<T>::new();
        FftNd {
            shape: shape.to_vec(),
            fwd: shape
                .iter()
                .map(|&n| planner.plan_fft(n, FftDirection::Forward))
                .collect(),
            inv: shape
                .iter()
                .map(|&n| planner.plan_fft(n, FftDirection::Inverse))
                .collect(),
        }
    }

    /// In-place unnormalised transform: `X[k] = Σ_l x[l]·exp(sign·2πi·k·l/n)` on every axis,
    /// `sign = +1` if `positive` (rustfft's inverse), else −1.
    pub(crate) fn process(&self, data: &mut [Complex<T>], positive: bool) {
        assert_eq!(data.len(), self.shape.iter().product::<usize>());
        let plans = if positive { &self.inv } else { &self.fwd };
        for (axis, fft) in plans.iter().enumerate() {
            let n = self.shape[axis];
            if n == 1 {
                continue;
            }
            let outer: usize = self.shape[..axis].iter().product();
            let inner: usize = self.shape[axis + 1..].iter().product();
            if inner == 1 {
                let rows_per_task = (4096 / n).max(1);
                data.par_chunks_mut(n * rows_per_task).for_each_init(
                    || vec![Complex::default(); fft.get_inplace_scratch_len()],
                    |scratch, rows| fft.process_with_scratch(rows, scratch),
                );
            } else {
                strided_pass(data, outer, n, inner, fft.as_ref());
            }
        }
    }
}

/// Transforms the middle axis of `data` viewed as `[outer][n][inner]` (C order).
fn strided_pass<T: Real>(
    data: &mut [Complex<T>],
    outer: usize,
    n: usize,
    inner: usize,
    fft: &dyn Fft<T>,
) {
    assert_eq!(data.len(), outer * n * inner);
    let ptr = SharedPtr(data.as_mut_ptr());
    let nblk = inner.div_ceil(COLS);
    (0..outer * nblk).into_par_iter().for_each_init(
        || {
            (
                vec![Complex::<T>::default(); COLS * n],
                vec![Complex::<T>::default(); fft.get_inplace_scratch_len()],
            )
        },
        |(buf, scratch), task| {
            let o = task / nblk;
            let j0 = (task % nblk) * COLS;
            let w = COLS.min(inner - j0);
            let base = o * n * inner + j0;
            let p = ptr.get();
            for i in 0..n {
                for jj in 0..w {
                    // SAFETY: base + i*inner + jj < outer*n*inner = data.len(); the element
                    // belongs to (o, column j0+jj), owned by this task alone.
                    buf[jj * n + i] = unsafe { *p.add(base + i * inner + jj) };
                }
            }
            fft.process_with_scratch(&mut buf[..w * n], scratch);
            for i in 0..n {
                for jj in 0..w {
                    // SAFETY: as above.
                    unsafe { *p.add(base + i * inner + jj) = buf[jj * n + i] };
                }
            }
        },
    );
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn matches_direct_3d_dft() {
        let shape = [6usize, 5, 4];
        let n: usize = shape.iter().product();
        let x: Vec<Complex<f64>> = (0..n)
            .map(|i| Complex::new((i as f64 * 0.37).sin(), (i as f64 * 0.11).cos()))
            .collect();
        for positive in [false, true] {
            let mut y = x.clone();
            FftNd::<f64>::new(&shape).process(&mut y, positive);
            let s = if positive { 1.0 } else { -1.0 };
            for k in [0usize, 7, 33, n - 1] {
                let (k0, k1, k2) = (k / 20, (k / 4) % 5, k % 4);
                let mut acc = Complex::new(0.0, 0.0);
                for (l, v) in x.iter().enumerate() {
                    let (l0, l1, l2) = (l / 20, (l / 4) % 5, l % 4);
                    let ph = 2.0
                        * std::f64::consts::PI
                        * ((k0 * l0) as f64 / 6.0
                            + (k1 * l1) as f64 / 5.0
                            + (k2 * l2) as f64 / 4.0);
                    acc += v * Complex::from_polar(1.0, s * ph);
                }
                assert!((acc - y[k]).norm() < 1e-10, "k={k}");
            }
        }
    }
}
