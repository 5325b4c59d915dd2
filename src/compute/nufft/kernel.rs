//! The exponential-of-semicircle (ES) spreading kernel and its Fourier transform.
//!
//! With `z = 2x/ns` (x in fine-grid units), `φ(z) = exp(β·(√(1 − z²) − 1))` for `|z| ≤ 1`,
//! else 0 (Barnett, Magland, af Klinteberg 2019). Width and shape follow FINUFFT's legacy ES
//! rule, which cuFINUFFT still uses:
//!
//! * σ = 2: `ns = ⌈log10(10/ε)⌉`, `β = 2.30·ns` (2.20, 2.26, 2.38 for ns = 2, 3, 4);
//! * other σ: `ns = ⌈ln(1/ε) / (π·√(1 − 1/σ))⌉`, `β = 0.97·π·(1 − 1/(2σ))·ns`;
//! * `ns ≥ 2`; a width above [`MAX_NS`] is an error rather than a silent clamp;
//! * in `f32` with σ < 1.4 the width is capped at 8 (as FINUFFT 2.5 does): β grows with ns,
//!   so does the dynamic range of `1/φ̂` that amplifies single-precision rounding at the
//!   band edge, and beyond ns = 8 that amplification costs more than the wider kernel gains.
//!
//! The deconvolution factors `φ̂(k)` come from Gauss–Legendre quadrature of the kernel's
//! Fourier integral over its half-support, in `f64`.

use super::{fast_ceil, NufftError, Real, MAX_NS};

/// Kernel parameters fixed at plan time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelParams {
    /// Width in fine-grid points per dimension.
    pub ns: usize,
    /// Shape parameter β.
    pub beta: f64,
}

impl KernelParams {
    /// Width and β for tolerance `eps` at upsampling factor `sigma` (legacy ES rule).
    pub fn from_eps(eps: f64, sigma: f64) -> Result<Self, NufftError> {
        let ns_real = if sigma == 2.0 {
            (10.0 / eps).log10().ceil()
        } else {
            ((1.0 / eps).ln() / (std::f64::consts::PI * (1.0 - 1.0 / sigma).sqrt())).ceil()
        };
        let ns = (ns_real.max(2.0)) as usize;
        if ns > MAX_NS {
            return Err(NufftError::KernelTooWide {
                eps,
                ns,
                upsampfac: sigma,
            });
        }
        Ok(Self::with_ns(ns, sigma))
    }

    /// Parameters for a given width `ns` at upsampling factor `sigma` (β from the legacy rule).
    pub fn with_ns(ns: usize, sigma: f64) -> Self {
        let beta_over_ns = if sigma == 2.0 {
            match ns {
                2 => 2.20,
                3 => 2.26,
                4 => 2.38,
                _ => 2.30,
            }
        } else {
            0.97 * std::f64::consts::PI * (1.0 - 1.0 / (2.0 * sigma))
        };
        KernelParams {
            ns,
            beta: beta_over_ns * ns as f64,
        }
    }

    /// φ at offset `x` from the point, in grid units (f64 reference).
    pub fn phi(&self, x: f64) -> f64 {
        let z = 2.0 * x / self.ns as f64;
        let a = 1.0 - z * z;
        if a < 0.0 {
            0.0
        } else {
            (self.beta * (a.sqrt() - 1.0)).exp()
        }
    }

    /// `φ̂(k) = ∫ φ(x)·exp(2πi·k·x/nf) dx` for `k = 0..=kmax` (φ is even, so φ̂ is real and
    /// even), by Gauss–Legendre quadrature over `[0, ns/2]`.
    pub fn fourier_series(&self, nf: usize, kmax: usize) -> Vec<f64> {
        let half = self.ns as f64 / 2.0;
        let q = 4 + 3 * self.ns;
        let (nodes, weights) = gauss_legendre(q);
        // Map [-1, 1] → [0, half].
        let pts: Vec<(f64, f64)> = nodes
            .iter()
            .zip(&weights)
            .map(|(&u, &w)| {
                let x = half * (u + 1.0) / 2.0;
                (x, 2.0 * (half / 2.0) * w * self.phi(x))
            })
            .collect();
        (0..=kmax)
            .map(|k| {
                let om = 2.0 * std::f64::consts::PI * k as f64 / nf as f64;
                pts.iter().map(|&(x, wp)| wp * (om * x).cos()).sum()
            })
            .collect()
    }
}

/// Most polynomial coefficients per panel.
const MAX_COEFS: usize = 20;

/// Kernel evaluator: one polynomial per unit panel (as FINUFFT's Horner tables), fitted
/// at plan time in `f64` by Chebyshev interpolation to well below `eps`, evaluated for all
/// panels at once in `T` (vectorisable). Computing `exp` directly in `f32` would cost
/// ~|β·(√(1−z²)−1)|·ε relative accuracy (the exponent reaches −30), which the
/// deconvolution amplifies at the band edge.
#[derive(Clone, Debug)]
pub struct Kernel<T> {
    /// Width.
    pub ns: usize,
    half_ns: f64,
    /// `coef[d][j]`: coefficient of `s^d` for panel `j` (zero for `j ≥ ns`).
    coef: Vec<[T; MAX_NS]>,
    /// Largest fit error seen at plan time (relative to φ(0) = 1).
    pub fit_err: f64,
}

/// Monomial coefficients (in `s ∈ [-1, 1]`) of the Chebyshev interpolant of degree
/// `deg` of every panel: panel `j` holds `φ(x)` for `x = (s+1)/2 − ns/2 + j`.
#[allow(clippy::needless_range_loop)] // `j` is the inner index of `mono[d][j]`
fn fit_panels(p: &KernelParams, deg: usize) -> Vec<[f64; MAX_NS]> {
    let n = deg + 1;
    let pi = std::f64::consts::PI;
    let nodes: Vec<f64> = (0..n)
        .map(|m| (pi * (m as f64 + 0.5) / n as f64).cos())
        .collect();
    let mut mono = vec![[0.0; MAX_NS]; n];
    for j in 0..p.ns {
        let f: Vec<f64> = nodes
            .iter()
            .map(|&s| p.phi((s + 1.0) / 2.0 - p.ns as f64 / 2.0 + j as f64))
            .collect();
        // Chebyshev coefficients, then Σ a_k T_k(s) expanded with T_{k+1} = 2s·T_k − T_{k-1}.
        let (mut tkm1, mut tk) = (vec![0.0; n], vec![0.0; n]);
        tk[0] = 1.0;
        for k in 0..n {
            let ak: f64 = f
                .iter()
                .enumerate()
                .map(|(m, fm)| fm * (pi * k as f64 * (m as f64 + 0.5) / n as f64).cos())
                .sum::<f64>()
                * if k == 0 { 1.0 } else { 2.0 }
                / n as f64;
            for (d, c) in tk.iter().enumerate() {
                mono[d][j] += ak * c;
            }
            let next: Vec<f64> = if k == 0 {
                (0..n).map(|d| if d == 1 { 1.0 } else { 0.0 }).collect()
            } else {
                (0..n)
                    .map(|d| if d > 0 { 2.0 * tk[d - 1] } else { 0.0 } - tkm1[d])
                    .collect()
            };
            tkm1 = std::mem::replace(&mut tk, next);
        }
    }
    mono
}

impl<T: Real> Kernel<T> {
    /// Evaluator for the given parameters, accurate to well below `eps`.
    pub fn new(p: &KernelParams, eps: f64) -> Self {
        let target = 1e-2 * eps;
        let mut best: Option<(f64, Vec<[f64; MAX_NS]>)> = None;
        for deg in (p.ns + 1)..MAX_COEFS {
            let mono = fit_panels(p, deg);
            let err = fit_error(p, &mono);
            if best.as_ref().is_none_or(|b| err < b.0) {
                best = Some((err, mono));
            }
            if err <= target {
                break;
            }
        }
        let (fit_err, mono) = best.expect("at least one degree is tried");
        Kernel {
            ns: p.ns,
            half_ns: p.ns as f64 / 2.0,
            coef: mono.iter().map(|row| row.map(T::cast)).collect(),
            fit_err,
        }
    }

    /// The panel polynomials as one table: entry `d·ns + j` is the coefficient of `s^d`
    /// for panel `j` (the GPU kernels' layout).
    pub fn coef_flat(&self) -> Vec<T> {
        self.coef
            .iter()
            .flat_map(|row| row[..self.ns].iter().copied())
            .collect()
    }

    /// First grid index the kernel touches for a point at grid coordinate `t`:
    /// `i0 = ⌈t − ns/2⌉`.
    #[inline]
    pub fn first_index(&self, t: f64) -> isize {
        fast_ceil(t - self.half_ns) as isize
    }

    /// For a point at grid coordinate `t`: returns [`Kernel::first_index`] and writes the
    /// kernel values at `i0, i0+1, …, i0+ns−1` into `vals[..ns]`; `vals[ns..8]` become 0
    /// (all of `vals[ns..]` when `ns > 8`), the rest is left alone.
    #[inline]
    pub fn eval(&self, t: f64, vals: &mut [T; MAX_NS]) -> isize {
        if self.ns <= 8 {
            self.eval_lanes::<8>(t, vals)
        } else {
            self.eval_lanes::<MAX_NS>(t, vals)
        }
    }

    /// [`Kernel::eval`] over a fixed number of lanes `W ≥ ns` (values `ns..W` are 0).
    #[inline]
    fn eval_lanes<const W: usize>(&self, t: f64, vals: &mut [T; MAX_NS]) -> isize {
        let i0 = fast_ceil(t - self.half_ns);
        let s = T::cast(2.0 * (i0 - t + self.half_ns) - 1.0);
        let (last, rest) = self.coef.split_last().expect("non-empty table");
        let v = &mut vals[..W];
        v.copy_from_slice(&last[..W]);
        for c in rest.iter().rev() {
            for (vj, &cj) in v.iter_mut().zip(&c[..W]) {
                *vj = *vj * s + cj;
            }
        }
        i0 as isize
    }
}

/// Largest |Horner(f64) − φ| over a dense sample of every panel.
fn fit_error(p: &KernelParams, mono: &[[f64; MAX_NS]]) -> f64 {
    let mut err: f64 = 0.0;
    for i in 0..=64 {
        let s = -1.0 + 2.0 * i as f64 / 64.0;
        for j in 0..p.ns {
            let v = mono.iter().rev().fold(0.0, |acc, c| acc * s + c[j]);
            let x = (s + 1.0) / 2.0 - p.ns as f64 / 2.0 + j as f64;
            err = err.max((v - p.phi(x)).abs());
        }
    }
    err
}

/// Gauss–Legendre nodes and weights on `[-1, 1]` (Newton iteration on `P_n`).
pub fn gauss_legendre(n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut nodes = Vec::with_capacity(n);
    let mut weights = Vec::with_capacity(n);
    for i in 0..n {
        let mut x = (std::f64::consts::PI * (i as f64 + 0.75) / (n as f64 + 0.5)).cos();
        let mut dp = 1.0;
        for _ in 0..100 {
            let (mut p0, mut p1) = (1.0, x);
            for k in 2..=n {
                let p2 = ((2 * k - 1) as f64 * x * p1 - (k - 1) as f64 * p0) / k as f64;
                p0 = p1;
                p1 = p2;
            }
            let pn = if n == 0 { 1.0 } else { p1 };
            let pn1 = if n <= 1 { 1.0 } else { p0 };
            dp = n as f64 * (x * pn - pn1) / (x * x - 1.0);
            let dx = pn / dp;
            x -= dx;
            if dx.abs() < 1e-16 {
                break;
            }
        }
        nodes.push(x);
        weights.push(2.0 / ((1.0 - x * x) * dp * dp));
    }
    (nodes, weights)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn gauss_legendre_integrates_polynomials_exactly() {
        let (x, w) = gauss_legendre(7);
        // Exact for degree ≤ 13: ∫ x^12 = 2/13, ∫ x^13 = 0.
        let i12: f64 = x.iter().zip(&w).map(|(x, w)| w * x.powi(12)).sum();
        let i13: f64 = x.iter().zip(&w).map(|(x, w)| w * x.powi(13)).sum();
        assert!((i12 - 2.0 / 13.0).abs() < 1e-14, "{i12}");
        assert!(i13.abs() < 1e-14);
    }

    #[test]
    fn legacy_width_rule() {
        for (eps, ns) in [(1e-3, 4), (1e-5, 6), (1e-6, 7), (1e-9, 10)] {
            assert_eq!(KernelParams::from_eps(eps, 2.0).unwrap().ns, ns);
        }
        assert_eq!(KernelParams::from_eps(1e-6, 1.25).unwrap().ns, 10);
        assert_eq!(KernelParams::from_eps(1e-9, 1.25).unwrap().ns, 15);
        assert!(KernelParams::from_eps(1e-10, 1.25).is_err());
        let p = KernelParams::from_eps(1e-6, 2.0).unwrap();
        assert!((p.beta - 2.30 * 7.0).abs() < 1e-12);
    }

    #[test]
    fn horner_tables_match_the_kernel() {
        for (eps, sigma) in [
            (1e-3, 2.0),
            (1e-6, 2.0),
            (1e-9, 2.0),
            (1e-5, 1.25),
            (1e-9, 1.25),
        ] {
            let p = KernelParams::from_eps(eps, sigma).unwrap();
            let k = Kernel::<f64>::new(&p, eps);
            assert!(
                k.fit_err < 0.05 * eps,
                "eps={eps} sigma={sigma}: {}",
                k.fit_err
            );
            let mut v = [0.0; MAX_NS];
            for t in [10.0, 10.3, 10.5, 10.999, 11.0 - 1e-12] {
                let i0 = k.eval(t, &mut v);
                assert_eq!(i0, (t - p.ns as f64 / 2.0).ceil() as isize);
                for (j, &vj) in v.iter().enumerate() {
                    let want = if j < p.ns {
                        p.phi(i0 as f64 + j as f64 - t)
                    } else {
                        0.0
                    };
                    assert!(
                        (vj - want).abs() < 0.05 * eps,
                        "t={t} j={j}: {vj} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn fourier_series_matches_dense_riemann_sum() {
        let p = KernelParams::from_eps(1e-6, 2.0).unwrap();
        let nf = 64;
        let fs = p.fourier_series(nf, 16);
        let h = 1e-4;
        let n = (p.ns as f64 / h) as i64;
        for (k, &v) in fs.iter().enumerate() {
            let om = 2.0 * std::f64::consts::PI * k as f64 / nf as f64;
            let r: f64 = (-n / 2..=n / 2)
                .map(|i| {
                    let x = i as f64 * h;
                    p.phi(x) * (om * x).cos() * h
                })
                .sum();
            assert!((v - r).abs() < 1e-6 * fs[0], "k={k}: {v} vs {r}");
        }
    }
}
