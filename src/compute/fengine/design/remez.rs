//! Parks–McClellan (Remez exchange) design of linear-phase, even-symmetric FIR filters,
//! equivalent to `scipy.signal.remez(numtaps, bands, desired, weight, fs=fs)` with the
//! default `type='bandpass'` and grid density 16 (McClellan, Parks & Rabiner 1973).
//!
//! The amplitude response is approximated as a cosine polynomial in x = cos(2πf) on a dense
//! grid; each iteration solves for the equiripple deviation through the barycentric form of
//! the Lagrange interpolant on the current extremal set and exchanges it for the extrema of
//! the new weighted error. Even lengths (type II) use H(f) = cos(πf)·P(f).

use crate::compute::fengine::FError;
use std::f64::consts::PI;

/// One band: edges in Hz (same units as `fs`), desired amplitude, weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Band {
    /// Lower edge, Hz.
    pub lo: f64,
    /// Upper edge, Hz.
    pub hi: f64,
    /// Desired amplitude in the band.
    pub desired: f64,
    /// Weight of the band's error.
    pub weight: f64,
}

const GRID_DENSITY: usize = 16;

struct Grid {
    x: Vec<f64>,
    des: Vec<f64>,
    wt: Vec<f64>,
    /// Index of the band each grid point belongs to.
    band: Vec<usize>,
}

fn build_grid(numtaps: usize, bands: &[Band], fs: f64) -> Grid {
    let nodd = numtaps % 2;
    let nfcns = numtaps / 2 + nodd;
    let delf = 0.5 / (GRID_DENSITY * nfcns) as f64;
    let mut g = Grid {
        x: vec![],
        des: vec![],
        wt: vec![],
        band: vec![],
    };
    for (bi, b) in bands.iter().enumerate() {
        let (lo, hi) = (b.lo / fs, b.hi / fs);
        let mut f = lo;
        let mut pts = vec![];
        while f < hi {
            pts.push(f);
            f += delf;
        }
        // The last point of each band is its upper edge.
        if pts.last().is_none_or(|&l| hi - l > 1e-12) {
            pts.push(hi);
        } else if let Some(l) = pts.last_mut() {
            *l = hi;
        }
        for f in pts {
            let (mut des, mut wt) = (b.desired, b.weight);
            if nodd == 0 {
                // Type II: H = cos(πf)·P; P has a pole at f = ½, so drop that point.
                if f >= 0.5 - 1e-12 {
                    continue;
                }
                let c = (PI * f).cos();
                des /= c;
                wt *= c;
            }
            g.x.push((2.0 * PI * f).cos());
            g.des.push(des);
            g.wt.push(wt);
            g.band.push(bi);
        }
    }
    g
}

/// Barycentric weights for nodes `xs` (scaled by 2 per factor to avoid under/overflow; a
/// common factor cancels in every use).
fn bary_weights(xs: &[f64]) -> Vec<f64> {
    (0..xs.len())
        .map(|k| {
            let mut p = 1.0;
            for (j, &xj) in xs.iter().enumerate() {
                if j != k {
                    p *= 2.0 * (xs[k] - xj);
                }
            }
            1.0 / p
        })
        .collect()
}

struct Interp {
    xs: Vec<f64>,
    ad: Vec<f64>,
    ys: Vec<f64>,
}

impl Interp {
    fn eval(&self, x: f64) -> f64 {
        let (mut num, mut den) = (0.0, 0.0);
        for k in 0..self.xs.len() {
            let d = x - self.xs[k];
            if d == 0.0 {
                return self.ys[k];
            }
            let c = self.ad[k] / d;
            num += c * self.ys[k];
            den += c;
        }
        num / den
    }
}

/// Designs a `numtaps`-tap even-symmetric FIR with the given bands (edges in [0, fs/2]).
pub fn remez(numtaps: usize, bands: &[Band], fs: f64, maxiter: usize) -> Result<Vec<f64>, FError> {
    let fail = |m: String| Err(FError::FilterDesign(m));
    if numtaps < 3 {
        return fail(format!("numtaps {numtaps} < 3"));
    }
    if bands.is_empty() || !fs.is_finite() || fs <= 0.0 {
        return fail("no bands or bad fs".into());
    }
    let mut prev = 0.0;
    for b in bands {
        let ok = [b.lo, b.hi, b.desired, b.weight]
            .iter()
            .all(|v| v.is_finite());
        if !ok || b.lo < prev || b.hi < b.lo || b.hi > fs / 2.0 + 1e-12 || b.weight <= 0.0 {
            return fail(format!("bad band {b:?}"));
        }
        prev = b.hi;
    }
    let g = build_grid(numtaps, bands, fs);
    let nfcns = numtaps / 2 + numtaps % 2;
    let r = nfcns + 1;
    let n = g.x.len();
    if n < 2 * r {
        return fail(format!("grid of {n} points too small for {r} extrema"));
    }
    let mut iext: Vec<usize> = (0..r).map(|j| j * (n - 1) / (r - 1)).collect();
    let mut interp = None;
    for _ in 0..maxiter.max(1) {
        let xs: Vec<f64> = iext.iter().map(|&i| g.x[i]).collect();
        let ad = bary_weights(&xs);
        let (mut num, mut den) = (0.0, 0.0);
        for (k, &i) in iext.iter().enumerate() {
            let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
            num += ad[k] * g.des[i];
            den += sign * ad[k] / g.wt[i];
        }
        let dev = num / den;
        if !dev.is_finite() {
            return fail("singular extremal set".into());
        }
        let ys: Vec<f64> = iext
            .iter()
            .enumerate()
            .map(|(k, &i)| {
                let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
                g.des[i] - sign * dev / g.wt[i]
            })
            .collect();
        // Interpolate through all but the last node (its value is implied).
        let it = Interp {
            xs: xs[..r - 1].to_vec(),
            ad: bary_weights(&xs[..r - 1]),
            ys: ys[..r - 1].to_vec(),
        };
        let err: Vec<f64> = (0..n)
            .map(|j| g.wt[j] * (g.des[j] - it.eval(g.x[j])))
            .collect();
        interp = Some(it);
        let new = exchange(&err, &g.band, dev.abs(), r);
        let max_err = err.iter().fold(0.0f64, |m, e| m.max(e.abs()));
        match new {
            Some(ne) if ne != iext && max_err > dev.abs() * (1.0 + 1e-12) => iext = ne,
            _ => break,
        }
    }
    let it = interp.ok_or_else(|| FError::FilterDesign("no iteration".into()))?;
    // Amplitude response as a function of normalised frequency.
    let amp = |f: f64| {
        let p = it.eval((2.0 * PI * f).cos());
        if numtaps.is_multiple_of(2) {
            p * (PI * f).cos()
        } else {
            p
        }
    };
    let nt = numtaps as f64;
    let c = (nt - 1.0) / 2.0;
    let samples: Vec<f64> = (0..=(numtaps - 1) / 2)
        .map(|k| amp(k as f64 / nt))
        .collect();
    let h = (0..numtaps)
        .map(|m| {
            let mut s = samples[0];
            for (k, &a) in samples.iter().enumerate().skip(1) {
                s += 2.0 * a * (2.0 * PI * k as f64 * (m as f64 - c) / nt).cos();
            }
            s / nt
        })
        .collect();
    Ok(h)
}

/// New extremal set: local extrema of `err` at least `dev` in size, alternating in sign,
/// trimmed to `r` points. `None` if fewer than `r` remain.
fn exchange(err: &[f64], band: &[usize], dev: f64, r: usize) -> Option<Vec<usize>> {
    let n = err.len();
    let thresh = dev * (1.0 - 1e-9);
    let mut cand: Vec<usize> = vec![];
    for j in 0..n {
        let e = err[j];
        if e.abs() < thresh {
            continue;
        }
        let left = (j > 0 && band[j - 1] == band[j]).then(|| err[j - 1]);
        let right = (j + 1 < n && band[j + 1] == band[j]).then(|| err[j + 1]);
        let ext = if e > 0.0 {
            left.is_none_or(|l| e >= l) && right.is_none_or(|rv| e >= rv)
        } else {
            left.is_none_or(|l| e <= l) && right.is_none_or(|rv| e <= rv)
        };
        if ext {
            cand.push(j);
        }
    }
    // Keep the largest of each run of equal sign.
    let mut alt: Vec<usize> = vec![];
    for j in cand {
        match alt.last_mut() {
            Some(l) if (err[*l] > 0.0) == (err[j] > 0.0) => {
                if err[j].abs() > err[*l].abs() {
                    *l = j;
                }
            }
            _ => alt.push(j),
        }
    }
    while alt.len() > r {
        if err[alt[0]].abs() < err[alt[alt.len() - 1]].abs() {
            alt.remove(0);
        } else {
            alt.pop();
        }
    }
    (alt.len() == r).then_some(alt)
}

/// Zero-phase amplitude response of an even-symmetric FIR at normalised frequency f.
#[cfg(test)]
pub(crate) fn amplitude(h: &[f64], f: f64) -> f64 {
    let c = (h.len() as f64 - 1.0) / 2.0;
    h.iter()
        .enumerate()
        .map(|(m, &v)| v * (2.0 * PI * f * (m as f64 - c)).cos())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_err(h: &[f64], lo: f64, hi: f64, desired: f64) -> f64 {
        (0..=2000)
            .map(|i| lo + (hi - lo) * i as f64 / 2000.0)
            .map(|f| (amplitude(h, f) - desired).abs())
            .fold(0.0, f64::max)
    }

    fn check_lowpass(numtaps: usize, wp: f64) {
        let bands = [
            Band {
                lo: 0.0,
                hi: 0.2,
                desired: 1.0,
                weight: wp,
            },
            Band {
                lo: 0.25,
                hi: 0.5,
                desired: 0.0,
                weight: 1.0,
            },
        ];
        let h = remez(numtaps, &bands, 1.0, 1000).unwrap();
        assert_eq!(h.len(), numtaps);
        for i in 0..numtaps {
            assert!((h[i] - h[numtaps - 1 - i]).abs() < 1e-12);
        }
        let ep = max_err(&h, 0.0, 0.2, 1.0);
        let es = max_err(&h, 0.25, 0.5, 0.0);
        // Equiripple: weighted errors equal in both bands (minimax optimum).
        let (a, b) = (ep * wp, es);
        assert!((a - b).abs() < 0.02 * b, "numtaps {numtaps}: {a} vs {b}");
        // Reasonable attenuation for this transition width.
        assert!(es < 0.05, "stop-band error {es}");
    }

    #[test]
    fn lowpass_equiripple_odd_and_even() {
        for n in [31, 32, 64, 65] {
            check_lowpass(n, 1.0);
            check_lowpass(n, 0.1);
        }
    }

    #[test]
    fn more_taps_is_better() {
        let bands = [
            Band {
                lo: 0.0,
                hi: 0.1,
                desired: 1.0,
                weight: 1.0,
            },
            Band {
                lo: 0.15,
                hi: 0.5,
                desired: 0.0,
                weight: 1.0,
            },
        ];
        let e = |n| max_err(&remez(n, &bands, 1.0, 1000).unwrap(), 0.15, 0.5, 0.0);
        assert!(e(61) < 0.3 * e(31));
    }

    #[test]
    fn rejects_bad_bands() {
        let good = Band {
            lo: 0.0,
            hi: 0.2,
            desired: 1.0,
            weight: 1.0,
        };
        assert!(remez(2, &[good], 1.0, 10).is_err());
        assert!(remez(31, &[], 1.0, 10).is_err());
        let bad = Band { hi: 0.7, ..good };
        assert!(remez(31, &[bad], 1.0, 10).is_err());
        let nan = Band {
            weight: f64::NAN,
            ..good
        };
        assert!(remez(31, &[nan], 1.0, 10).is_err());
    }
}
