//! Spreading (type 1) and interpolation (type 2) between non-uniform points and the
//! periodic fine grid.
//!
//! Points are folded into `[0, 2π)` in `f64`, rescaled to grid units, then counting-sorted
//! into bins (axis 0 slowest, as the grid). The sorted list is cut into chunks of at most
//! [`MAX_CHUNK`] points that never cross a bin row, so each chunk is spatially compact.
//! Spreading: each rayon task spreads one chunk into a private subgrid covering the chunk's
//! footprint, then adds it to the fine grid row by row under one mutex per stripe of
//! axis-0 rows. Interpolation reads the grid directly (no locks).

use std::ops::Range;
use std::sync::Mutex;

use num_complex::Complex;
use rayon::prelude::*;

use crate::compute::nufft::kernel::Kernel;
use crate::compute::nufft::plan::check_coords;
use crate::compute::nufft::{fast_floor, NufftError, Real, MAX_NS};

/// Most points per chunk (FINUFFT's subproblem size is of the same order).
pub(crate) const MAX_CHUNK: usize = 8192;
/// log2 of the bin sizes in fine-grid points, axis 0 first: 16×32 in 2-D, 8×8×16 in 3-D.
const BIN_SHIFT_2D: [u32; 3] = [4, 5, 0];
const BIN_SHIFT_3D: [u32; 3] = [3, 3, 4];

/// A raw pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
struct SharedPtr<U>(*mut U);
// SAFETY: used only in the parallel scatter of `SortedPoints::new`, where the writes of
// different tasks go to disjoint positions, and the vectors outlive the tasks.
unsafe impl<U> Send for SharedPtr<U> {}
unsafe impl<U> Sync for SharedPtr<U> {}
impl<U> SharedPtr<U> {
    fn get(self) -> *mut U {
        self.0
    }
}

/// Points in bin order, in grid units.
pub(crate) struct SortedPoints<T> {
    /// Dimension (2 or 3).
    pub dim: usize,
    /// Grid coordinates `t ∈ [0, nf)`, `dim` per point, in sorted order. Kept in `f64`:
    /// in `f32` a coordinate near `nf = 4096` would carry an error of ~2e-4 grid units,
    /// which is a phase error of ~N·ε at the highest modes.
    pub t: Vec<f64>,
    _t: std::marker::PhantomData<T>,
    /// Sorted position → original index.
    pub perm: Vec<usize>,
    /// Ranges of sorted positions processed as one task.
    pub chunks: Vec<Range<usize>>,
}

impl<T: Real> SortedPoints<T> {
    /// Validates, folds, rescales and sorts the points. `nf` has `dim` entries used.
    pub(crate) fn new(coords: &[&[T]], nf: &[usize; 3], dim: usize) -> Result<Self, NufftError> {
        let m = check_coords(coords, dim)?;
        let shift = if dim == 2 { BIN_SHIFT_2D } else { BIN_SHIFT_3D };
        let nbins: Vec<usize> = (0..dim).map(|d| nf[d].div_ceil(1 << shift[d])).collect();
        // Bin of every point (grid coordinates are recomputed, identically, in the scatter).
        let mut key = vec![0usize; m];
        advise_huge(&key);
        key.par_iter_mut().enumerate().for_each(|(j, kj)| {
            let mut b = 0usize;
            for d in 0..dim {
                let t = to_grid(coords[d][j].as_f64(), nf[d]);
                let bd = ((t as usize) >> shift[d]).min(nbins[d] - 1);
                b = b * nbins[d] + bd;
            }
            *kj = b;
        });
        // Counting sort by bin, in parallel: per-block histograms, then each block
        // scatters into its own reserved range of every bin.
        let nb: usize = nbins.iter().product();
        let nblk = (2 * rayon::current_num_threads()).min(m / 65536 + 1);
        let blk_len = m.div_ceil(nblk).max(1);
        let mut offsets: Vec<Vec<usize>> = key
            .par_chunks(blk_len)
            .map(|ks| {
                let mut h = vec![0usize; nb];
                ks.iter().for_each(|&k| h[k] += 1);
                h
            })
            .collect();
        let mut start = vec![0usize; nb + 1];
        let mut run = 0;
        for b in 0..nb {
            start[b] = run;
            for h in offsets.iter_mut() {
                let count = h[b];
                h[b] = run;
                run += count;
            }
        }
        start[nb] = run;
        let mut perm = vec![0usize; m];
        let mut t = vec![0.0f64; m * dim];
        advise_huge(&perm);
        advise_huge(&t);
        let (pp, tp) = (SharedPtr(perm.as_mut_ptr()), SharedPtr(t.as_mut_ptr()));
        key.par_chunks(blk_len)
            .zip(offsets.par_iter_mut())
            .enumerate()
            .for_each(|(blk, (ks, off))| {
                for (o, &k) in ks.iter().enumerate() {
                    let j = blk * blk_len + o;
                    let pos = off[k];
                    off[k] += 1;
                    // SAFETY: `pos < m`, and every (block, point) gets a distinct `pos`: each
                    // block owns the range of every bin reserved for it above.
                    unsafe {
                        *pp.get().add(pos) = j;
                        for d in 0..dim {
                            *tp.get().add(pos * dim + d) = to_grid(coords[d][j].as_f64(), nf[d]);
                        }
                    }
                }
            });
        // Chunks: bins of one row (all but the last axis fixed) are contiguous in sorted order.
        let row_bins = nbins[dim - 1];
        let mut chunks = Vec::new();
        for row in 0..nb / row_bins {
            let (a, b) = (start[row * row_bins], start[(row + 1) * row_bins]);
            let mut s = a;
            while s < b {
                let e = (s + MAX_CHUNK).min(b);
                chunks.push(s..e);
                s = e;
            }
        }
        Ok(SortedPoints {
            dim,
            t,
            perm,
            chunks,
            _t: std::marker::PhantomData,
        })
    }

    /// Number of points.
    pub(crate) fn len(&self) -> usize {
        self.perm.len()
    }
}

/// Folds `x` into `[0, 2π)` and rescales to `[0, nf)` grid units.
/// Asks for transparent huge pages under a large, freshly allocated (not yet touched) buffer:
/// the bin sort scatters into it at random, and with 4 KiB pages nearly every write misses the
/// TLB. Only advice: where THP is off or the call fails nothing changes.
fn advise_huge<T>(v: &[T]) {
    const HUGE: usize = 2 << 20;
    let bytes = std::mem::size_of_val(v);
    if bytes < 4 * HUGE {
        return;
    }
    let start = (v.as_ptr() as usize).next_multiple_of(HUGE);
    let end = (v.as_ptr() as usize + bytes) & !(HUGE - 1);
    if end > start {
        // SAFETY: [start, end) lies inside `v`'s allocation; MADV_HUGEPAGE changes no contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

fn to_grid(x: f64, nf: usize) -> f64 {
    let two_pi = 2.0 * std::f64::consts::PI;
    let u = x / two_pi;
    let t = (u - fast_floor(u)) * nf as f64;
    if (0.0..nf as f64).contains(&t) {
        t
    } else {
        0.0
    }
}

/// Grid geometry: `nf` per axis (unused axes 1), stripes of axis-0 rows for locking.
struct Stripes<'a, T> {
    nf: [usize; 3],
    rows_per: usize,
    locks: Vec<Mutex<&'a mut [Complex<T>]>>,
}

/// Spreads strengths `c` (original order) onto `grid` (zeroed by the caller, C order,
/// shape `nf[0..dim]`).
pub(crate) fn spread<T: Real>(
    pts: &SortedPoints<T>,
    c: &[Complex<T>],
    kernel: &Kernel<T>,
    nf: [usize; 3],
    grid: &mut [Complex<T>],
) {
    let row_len = nf[1] * nf[2];
    let rows_per = nf[0].div_ceil(64).max(1);
    let stripes = Stripes {
        nf,
        rows_per,
        locks: grid
            .chunks_mut(rows_per * row_len)
            .map(Mutex::new)
            .collect(),
    };
    pts.chunks
        .par_iter()
        .for_each_init(Scratch::default, |scratch, r| {
            // Gather the chunk's strengths first: a tight loop of independent random loads.
            scratch.c.clear();
            scratch.c.extend(pts.perm[r.clone()].iter().map(|&j| c[j]));
            if kernel.ns <= 8 {
                spread_chunk::<T, 8>(pts, r.clone(), kernel, &stripes, scratch);
            } else {
                spread_chunk::<T, MAX_NS>(pts, r.clone(), kernel, &stripes, scratch);
            }
        });
}

/// Per-task buffers.
struct Scratch<T> {
    /// Subgrid.
    sub: Vec<Complex<T>>,
    /// Strengths of the chunk, in sorted order.
    c: Vec<Complex<T>>,
}

impl<T> Default for Scratch<T> {
    fn default() -> Self {
        Scratch {
            sub: Vec::new(),
            c: Vec::new(),
        }
    }
}

/// Views complex values as interleaved `re, im` reals.
fn as_reals<T: Real>(v: &mut [Complex<T>]) -> &mut [T] {
    // SAFETY: `Complex<T>` is `#[repr(C)] { re: T, im: T }`, so `n` complex values are
    // `2n` contiguous `T`s with the same alignment; the borrow is carried over.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut T, 2 * v.len()) }
}

/// `dst[q] += a[q]·w[q/2]` over `2W` interleaved reals, `a = (re, im, re, im, …)`.
#[inline(always)]
fn axpy_row<T: Real, const W: usize>(dst: &mut [T], cr: T, ci: T, w: &[T; MAX_NS]) {
    let dst = &mut dst[..2 * W];
    for (pair, &wb) in dst.chunks_exact_mut(2).zip(&w[..W]) {
        pair[0] += cr * wb;
        pair[1] += ci * wb;
    }
}

/// Spreads one chunk; the innermost loop runs over a fixed `W ≥ ns` lanes (kernel values
/// beyond `ns` are exactly 0, the subgrid's last axis is padded by `W − ns`).
fn spread_chunk<T: Real, const W: usize>(
    pts: &SortedPoints<T>,
    r: Range<usize>,
    kernel: &Kernel<T>,
    g: &Stripes<'_, T>,
    scratch: &mut Scratch<T>,
) {
    let sub = &mut scratch.sub;
    let dim = pts.dim;
    let ns = kernel.ns;
    // Footprint of the chunk.
    let mut lo = [isize::MAX; 3];
    let mut hi = [isize::MIN; 3];
    for p in r.clone() {
        for d in 0..dim {
            let i0 = kernel.first_index(pts.t[p * dim + d]);
            lo[d] = lo[d].min(i0);
            hi[d] = hi[d].max(i0);
        }
    }
    let mut size = [1usize; 3];
    for d in 0..dim {
        size[d] = (hi[d] - lo[d]) as usize + ns;
    }
    size[dim - 1] += W - ns;
    if dim == 2 {
        lo[2] = 0;
    }
    sub.clear();
    sub.resize(
        size[0] * size[1] * size[2],
        Complex::new(T::zero(), T::zero()),
    );
    let mut k0 = [T::zero(); MAX_NS];
    let mut k1 = [T::zero(); MAX_NS];
    let mut k2 = [T::zero(); MAX_NS];
    let reals = as_reals(sub);
    for (p, &cj) in r.zip(&scratch.c) {
        let a0 = (kernel.eval(pts.t[p * dim], &mut k0) - lo[0]) as usize;
        let a1 = (kernel.eval(pts.t[p * dim + 1], &mut k1) - lo[1]) as usize;
        if dim == 2 {
            for (i, &w0) in k0[..ns].iter().enumerate() {
                let (cr, ci) = (cj.re * w0, cj.im * w0);
                let row = (a0 + i) * size[1] + a1;
                axpy_row::<T, W>(&mut reals[2 * row..], cr, ci, &k1);
            }
        } else {
            let a2 = (kernel.eval(pts.t[p * dim + 2], &mut k2) - lo[2]) as usize;
            for (i, &w0) in k0[..ns].iter().enumerate() {
                for (j, &w1) in k1[..ns].iter().enumerate() {
                    let w = w0 * w1;
                    let (cr, ci) = (cj.re * w, cj.im * w);
                    let row = ((a0 + i) * size[1] + a1 + j) * size[2] + a2;
                    axpy_row::<T, W>(&mut reals[2 * row..], cr, ci, &k2);
                }
            }
        }
    }
    add_subgrid(g, sub, lo, size);
}

/// Adds the subgrid at offset `lo` (may lie partly outside `[0, nf)`: wrapped) to the grid.
fn add_subgrid<T: Real>(g: &Stripes<'_, T>, sub: &[Complex<T>], lo: [isize; 3], size: [usize; 3]) {
    let nf = g.nf;
    let row_len = nf[1] * nf[2];
    for i in 0..size[0] {
        let gi = (lo[0] + i as isize).rem_euclid(nf[0] as isize) as usize;
        let mut stripe = g.locks[gi / g.rows_per]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let base = (gi % g.rows_per) * row_len;
        if nf[2] == 1 {
            // 2-D: one wrapped add per row.
            let src = &sub[i * size[1]..(i + 1) * size[1]];
            add_wrapped(&mut stripe[base..base + nf[1]], src, lo[1]);
            continue;
        }
        for j in 0..size[1] {
            let gj = (lo[1] + j as isize).rem_euclid(nf[1] as isize) as usize;
            let src = &sub[(i * size[1] + j) * size[2]..(i * size[1] + j + 1) * size[2]];
            let dst = &mut stripe[base + gj * nf[2]..base + (gj + 1) * nf[2]];
            add_wrapped(dst, src, lo[2]);
        }
    }
}

/// `dst[(lo + k) mod len] += src[k]`, in at most a few contiguous segments.
fn add_wrapped<T: Real>(dst: &mut [Complex<T>], src: &[Complex<T>], lo: isize) {
    let n = dst.len();
    let mut start = lo.rem_euclid(n as isize) as usize;
    let mut k = 0;
    while k < src.len() {
        let len = (n - start).min(src.len() - k);
        for (d, s) in dst[start..start + len].iter_mut().zip(&src[k..k + len]) {
            *d += *s;
        }
        k += len;
        start = 0;
    }
}

/// Interpolates the grid at the points: `out` in original order.
pub(crate) fn interp<T: Real>(
    pts: &SortedPoints<T>,
    grid: &[Complex<T>],
    kernel: &Kernel<T>,
    nf: [usize; 3],
    out: &mut [Complex<T>],
) {
    let dim = pts.dim;
    let ns = kernel.ns;
    let mut sorted = vec![Complex::new(T::zero(), T::zero()); pts.len()];
    sorted
        .par_chunks_mut(1024)
        .enumerate()
        .for_each(|(blk, vals)| {
            let mut k = [[T::zero(); MAX_NS]; 3];
            let mut idx = [[0usize; MAX_NS]; 3];
            for (o, v) in vals.iter_mut().enumerate() {
                let p = blk * 1024 + o;
                for d in 0..dim {
                    let i0 = kernel.eval(pts.t[p * dim + d], &mut k[d]);
                    for (a, ix) in idx[d][..ns].iter_mut().enumerate() {
                        *ix = (i0 + a as isize).rem_euclid(nf[d] as isize) as usize;
                    }
                }
                let (mut sr, mut si) = (T::zero(), T::zero());
                for a in 0..ns {
                    let (mut rr, mut ri) = (T::zero(), T::zero());
                    if dim == 2 {
                        let row = &grid[idx[0][a] * nf[1]..(idx[0][a] + 1) * nf[1]];
                        for b in 0..ns {
                            let gv = row[idx[1][b]];
                            rr += gv.re * k[1][b];
                            ri += gv.im * k[1][b];
                        }
                    } else {
                        for b in 0..ns {
                            let base = (idx[0][a] * nf[1] + idx[1][b]) * nf[2];
                            let row = &grid[base..base + nf[2]];
                            let (mut qr, mut qi) = (T::zero(), T::zero());
                            for e in 0..ns {
                                let gv = row[idx[2][e]];
                                qr += gv.re * k[2][e];
                                qi += gv.im * k[2][e];
                            }
                            rr += qr * k[1][b];
                            ri += qi * k[1][b];
                        }
                    }
                    sr += rr * k[0][a];
                    si += ri * k[0][a];
                }
                *v = Complex::new(sr, si);
            }
        });
    for (v, &j) in sorted.iter().zip(&pts.perm) {
        out[j] = *v;
    }
}

#[cfg(test)]
mod unit {
    use super::*;
    use crate::compute::nufft::SplitMix64;

    /// Large enough for the multi-block parallel scatter: the result must be a stable
    /// permutation into bin order carrying the right grid coordinates.
    #[test]
    fn parallel_bin_sort_is_a_stable_permutation() {
        let m = 300_000;
        let mut rng = SplitMix64(5);
        let x: Vec<f64> = (0..m).map(|_| rng.uniform(-10.0, 10.0)).collect();
        let y: Vec<f64> = (0..m).map(|_| rng.uniform(-3.5, 3.5)).collect();
        let nf = [200, 96, 1];
        let s = SortedPoints::<f64>::new(&[&x, &y], &nf, 2).unwrap();
        let mut seen = vec![false; m];
        let bin = |p: usize| ((s.t[2 * p] as usize) / 16, (s.t[2 * p + 1] as usize) / 32);
        for p in 0..m {
            let j = s.perm[p];
            assert!(!seen[j]);
            seen[j] = true;
            assert_eq!(s.t[2 * p], to_grid(x[j], nf[0]));
            assert_eq!(s.t[2 * p + 1], to_grid(y[j], nf[1]));
            if p > 0 {
                assert!(bin(p - 1) <= bin(p), "not in bin order at {p}");
                if bin(p - 1) == bin(p) {
                    assert!(s.perm[p - 1] < j, "not stable at {p}");
                }
            }
        }
        let covered: usize = s.chunks.iter().map(|r| r.len()).sum();
        assert_eq!(covered, m);
        assert!(s.chunks.iter().all(|r| r.len() <= MAX_CHUNK));
    }
}
