//! The reference the NUFFT tests check both back ends against: the transforms as plainly
//! written direct sums in f64 (O(N·M), for small cases).

use num_complex::Complex;
use rayon::prelude::*;

type C64 = Complex<f64>;

/// Mode vector (k1, k2, k3) of flat index `idx` for `modes` (modeord = 0, first axis slowest).
fn mode_of(idx: usize, modes: &[usize]) -> [f64; 3] {
    let mut k = [0.0; 3];
    let mut rem = idx;
    for d in (0..modes.len()).rev() {
        k[d] = (rem % modes[d]) as f64 - (modes[d] / 2) as f64;
        rem /= modes[d];
    }
    k
}

/// k·x_j for mode vector `k` and point `j`.
fn phase(k: &[f64; 3], coords: &[Vec<f64>], j: usize) -> f64 {
    coords.iter().enumerate().map(|(d, x)| k[d] * x[j]).sum()
}

/// Type 1: f[k] = Σ_j c_j exp(s·i·k·x_j).
pub(super) fn direct_type1(
    coords: &[Vec<f64>],
    c: &[C64],
    modes: &[usize],
    isign: i32,
) -> Vec<C64> {
    let s = if isign >= 0 { 1.0 } else { -1.0 };
    let n: usize = modes.iter().product();
    (0..n)
        .into_par_iter()
        .map(|idx| {
            let k = mode_of(idx, modes);
            (0..c.len())
                .map(|j| c[j] * C64::from_polar(1.0, s * phase(&k, coords, j)))
                .sum()
        })
        .collect()
}

/// Type 2: c_j = Σ_k f[k] exp(s·i·k·x_j).
pub(super) fn direct_type2(
    coords: &[Vec<f64>],
    f: &[C64],
    modes: &[usize],
    isign: i32,
) -> Vec<C64> {
    let s = if isign >= 0 { 1.0 } else { -1.0 };
    let m = coords[0].len();
    (0..m)
        .into_par_iter()
        .map(|j| {
            f.iter()
                .enumerate()
                .map(|(idx, fk)| {
                    fk * C64::from_polar(1.0, s * phase(&mode_of(idx, modes), coords, j))
                })
                .sum()
        })
        .collect()
}
