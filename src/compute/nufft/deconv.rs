//! Deconvolution: dividing the kept modes by the kernel's Fourier transform and moving
//! them between the fine grid (FFT order, size `nf`) and the mode array (`modeord=0`:
//! index `i` is mode `k = i − ⌊N/2⌋`).

use num_complex::Complex;
use rayon::prelude::*;

use crate::compute::nufft::kernel::KernelParams;
use crate::compute::nufft::Real;

/// Per-axis correction factors `1/φ̂(k)` for `i = 0..n` (mode `k = i − ⌊n/2⌋`).
pub(super) fn weights<T: Real>(p: &KernelParams, nf: usize, n: usize) -> Vec<T> {
    let half = n / 2;
    let fs = p.fourier_series(nf, half.max(n - 1 - half));
    (0..n)
        .map(|i| T::cast(1.0 / fs[(i as isize - half as isize).unsigned_abs()]))
        .collect()
}

/// Fine-grid index of mode index `i` on an axis with `n` modes and `nf` grid points.
#[inline]
fn grid_index(i: usize, n: usize, nf: usize) -> usize {
    (i as isize - (n / 2) as isize).rem_euclid(nf as isize) as usize
}

/// Type 1: `out[i] = grid[k(i)] · Π_d w_d[i_d]`. `modes` and `nf` have 3 entries
/// (unused axes 1); `w` has one vector per axis (`[1]` for unused axes).
pub(super) fn extract<T: Real>(
    grid: &[Complex<T>],
    nf: [usize; 3],
    modes: [usize; 3],
    w: &[Vec<T>; 3],
    out: &mut [Complex<T>],
) {
    let plane = modes[1] * modes[2];
    out.par_chunks_mut(plane).enumerate().for_each(|(i0, o)| {
        let g0 = grid_index(i0, modes[0], nf[0]);
        for i1 in 0..modes[1] {
            let g1 = grid_index(i1, modes[1], nf[1]);
            let w01 = w[0][i0] * w[1][i1];
            let row = &grid[(g0 * nf[1] + g1) * nf[2]..(g0 * nf[1] + g1 + 1) * nf[2]];
            for (i2, ov) in o[i1 * modes[2]..(i1 + 1) * modes[2]].iter_mut().enumerate() {
                let g2 = grid_index(i2, modes[2], nf[2]);
                *ov = row[g2] * (w01 * w[2][i2]);
            }
        }
    });
}

/// Type 2: writes `f[i] · Π_d w_d[i_d]` into `grid[k(i)]`; the rest of the grid must be 0.
pub(super) fn fill<T: Real>(
    f: &[Complex<T>],
    nf: [usize; 3],
    modes: [usize; 3],
    w: &[Vec<T>; 3],
    grid: &mut [Complex<T>],
) {
    let slab = nf[1] * nf[2];
    // Each fine-grid slab along axis 0 receives at most one mode plane.
    let mut src_of_slab = vec![usize::MAX; nf[0]];
    for i0 in 0..modes[0] {
        src_of_slab[grid_index(i0, modes[0], nf[0])] = i0;
    }
    grid.par_chunks_mut(slab)
        .zip(src_of_slab.par_iter())
        .for_each(|(g, &i0)| {
            if i0 == usize::MAX {
                return;
            }
            for i1 in 0..modes[1] {
                let g1 = grid_index(i1, modes[1], nf[1]);
                let w01 = w[0][i0] * w[1][i1];
                let src = &f[(i0 * modes[1] + i1) * modes[2]..(i0 * modes[1] + i1 + 1) * modes[2]];
                let row = &mut g[g1 * nf[2]..(g1 + 1) * nf[2]];
                for (i2, sv) in src.iter().enumerate() {
                    row[grid_index(i2, modes[2], nf[2])] = *sv * (w01 * w[2][i2]);
                }
            }
        });
}
