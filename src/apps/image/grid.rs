//! Dirty imaging: weighting, w-stacking and type-1 NUFFT gridding.

use std::collections::HashMap;
use std::f64::consts::{PI, TAU};

use num_complex::Complex64;

use super::geometry::{phase_centre, UvwFrame};
use super::{
    baseline_index, DirtyImage, ImagingError, ImagingParams, Observation, Visibilities, Weighting,
    MAX_IMAGE_SIZE, SPEED_OF_LIGHT,
};
use crate::compute::nufft::{make_plan, Backend, NufftType, Options};

/// NUFFT tolerance used for gridding.
pub(crate) const GRID_EPS: f64 = 1e-6;
/// Largest w-phase error (cycles) tolerated at the image corner when `w_planes = 0`: half a
/// plane's width times the largest |n − 1|.
const W_PHASE_TOL_CYCLES: f64 = 0.02;
/// Most w-planes picked automatically.
const MAX_AUTO_W_PLANES: usize = 512;

/// Visibilities to grid, in wavelengths, one per baseline and channel. Each stands for itself
/// and its Hermitian conjugate `(−u, −v, −w, V*)`, whose contribution to every pixel is the
/// complex conjugate of its own: the pair sums to twice the real part, so only one half is
/// gridded and the real part taken.
struct Points {
    u: Vec<f64>,
    v: Vec<f64>,
    w: Vec<f64>,
    vis: Vec<Complex64>,
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, ImagingError> {
    Err(ImagingError::Invalid(msg.into()))
}

fn validate(
    obs: &Observation,
    vis: &Visibilities,
    params: &ImagingParams,
    pol_product: usize,
) -> Result<(), ImagingError> {
    vis.validate()?;
    if obs.positions_enu.len() != vis.n_ants {
        return Err(ImagingError::WrongLength {
            what: "positions_enu",
            got: obs.positions_enu.len(),
            expected: vis.n_ants,
        });
    }
    if obs.freqs_hz.len() != vis.channels {
        return Err(ImagingError::WrongLength {
            what: "freqs_hz",
            got: obs.freqs_hz.len(),
            expected: vis.channels,
        });
    }
    if vis.channels == 0 {
        return invalid("zero channels");
    }
    if obs.positions_enu.iter().flatten().any(|x| !x.is_finite()) {
        return invalid("antenna positions must be finite");
    }
    if obs.freqs_hz.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
        return invalid("channel frequencies must be finite and positive");
    }
    let (ra, dec) = obs.phase_centre.unwrap_or((0.0, 0.0));
    if ![obs.latitude_rad, obs.longitude_rad, obs.time_unix, ra, dec]
        .iter()
        .all(|x| x.is_finite())
    {
        return invalid("latitude, longitude, time and phase centre must be finite");
    }
    if pol_product >= 4 {
        return invalid(format!("pol_product {pol_product} out of range 0..4"));
    }
    if params.size == 0 || params.size > MAX_IMAGE_SIZE {
        return invalid(format!(
            "image size {} out of range 1..={MAX_IMAGE_SIZE}",
            params.size
        ));
    }
    if let Some(c) = params.cell_rad {
        if !(c.is_finite() && c > 0.0 && c < 1.0) {
            return invalid(format!("cell size {c} rad must be in (0, 1)"));
        }
    }
    if let Weighting::Briggs(r) = params.weighting {
        if !r.is_finite() {
            return invalid("Briggs robustness must be finite");
        }
    }
    if params.w_planes > 4096 {
        return invalid("at most 4096 w-planes");
    }
    Ok(())
}

/// The points to grid. Positions and frequencies are finite (checked), but a baseline or
/// its (u, v, w) in wavelengths can still overflow to infinity (and turn NaN on rotation):
/// that is an error naming the antennas and the values, not a NaN coordinate later.
fn collect_points(
    obs: &Observation,
    vis: &Visibilities,
    pol_product: usize,
) -> Result<Points, ImagingError> {
    let n = vis.n_ants;
    let frame = UvwFrame::new(obs);
    let mut base = Vec::with_capacity(n * n.saturating_sub(1) / 2);
    for a2 in 0..n {
        for a1 in 0..a2 {
            let (p1, p2) = (obs.positions_enu[a1], obs.positions_enu[a2]);
            let enu = [p1[0] - p2[0], p1[1] - p2[1], p1[2] - p2[2]];
            if !enu.iter().all(|x| x.is_finite()) {
                return invalid(format!(
                    "baseline between antennas {a1} and {a2} overflows: east/north/up \
                     {enu:?} m (antenna positions too large)"
                ));
            }
            let uvw = frame.rotate(enu);
            if !uvw.iter().all(|x| x.is_finite()) {
                return invalid(format!(
                    "baseline between antennas {a1} and {a2} overflows when projected: \
                     (u, v, w) {uvw:?} m from east/north/up {enu:?} m (antenna positions \
                     too large)"
                ));
            }
            base.push((baseline_index(a1, a2), uvw));
        }
    }
    let max_m = base
        .iter()
        .flat_map(|(_, uvw)| uvw.iter().map(|x| x.abs()))
        .fold(0.0, f64::max);
    let max_f = obs.freqs_hz.iter().fold(0.0, |a: f64, &f| a.max(f));
    if !(max_m * max_f / SPEED_OF_LIGHT).is_finite() {
        return invalid(format!(
            "(u, v, w) in wavelengths overflows: a baseline component of {max_m:e} m at \
             {max_f:e} Hz (antenna positions or frequencies too large)"
        ));
    }
    let cap = base.len() * vis.channels;
    let mut p = Points {
        u: Vec::with_capacity(cap),
        v: Vec::with_capacity(cap),
        w: Vec::with_capacity(cap),
        vis: Vec::with_capacity(cap),
    };
    let nb = super::n_baselines(n);
    for (ch, &f) in obs.freqs_hz.iter().enumerate() {
        let scale = f / SPEED_OF_LIGHT;
        for &(bl, [u, v, w]) in &base {
            if vis.flagged[ch * nb + bl] {
                continue;
            }
            let Some(x) = vis.get(ch, bl, pol_product) else {
                continue;
            };
            if !(x.re.is_finite() && x.im.is_finite()) {
                continue;
            }
            p.u.push(u * scale);
            p.v.push(v * scale);
            p.w.push(w * scale);
            p.vis.push(Complex64::new(x.re as f64, x.im as f64));
        }
    }
    Ok(p)
}

/// Imaging weights per point (natural weights are 1). The uv-cell densities count both halves
/// of each Hermitian pair.
fn weights(p: &Points, weighting: Weighting, size: usize, cell: f64) -> Vec<f64> {
    let n = p.u.len();
    let robust = match weighting {
        Weighting::Natural => return vec![1.0; n],
        Weighting::Uniform => None,
        Weighting::Briggs(r) => Some(r),
    };
    let du = 1.0 / (size as f64 * cell);
    // Clamped so that negating a key cannot overflow.
    let cell_of = |x: f64| (x / du).round().clamp(-1e15, 1e15) as i64;
    let key = |i: usize| (cell_of(p.u[i]), cell_of(p.v[i]));
    let mut cells: HashMap<(i64, i64), f64> = HashMap::new();
    for i in 0..n {
        let (ku, kv) = key(i);
        *cells.entry((ku, kv)).or_insert(0.0) += 1.0;
        *cells.entry((-ku, -kv)).or_insert(0.0) += 1.0;
    }
    match robust {
        None => (0..n).map(|i| 1.0 / cells[&key(i)]).collect(),
        Some(r) => {
            let sum_w2: f64 = cells.values().map(|w| w * w).sum();
            let f2 = (5.0 * 10f64.powf(-r)).powi(2) / (sum_w2 / (2 * n) as f64);
            (0..n).map(|i| 1.0 / (1.0 + f2 * cells[&key(i)])).collect()
        }
    }
}

/// Dirty image of one correlation product (`pol_product` 0..4: aa, ba, ab, bb).
pub fn dirty_image(
    obs: &Observation,
    vis: &Visibilities,
    params: &ImagingParams,
    pol_product: usize,
) -> Result<DirtyImage, ImagingError> {
    validate(obs, vis, params, pol_product)?;
    let p = collect_points(obs, vis, pol_product)?;
    if p.u.is_empty() {
        return Err(ImagingError::NoData);
    }
    let n = params.size;
    let cell = match params.cell_rad {
        Some(c) => c,
        None => {
            let uv_max =
                p.u.iter()
                    .zip(&p.v)
                    .map(|(u, v)| u.hypot(*v))
                    .fold(0.0, f64::max);
            if !(uv_max > 0.0 && uv_max.is_finite()) {
                return invalid("all baselines have zero projected length: give cell_rad");
            }
            1.0 / (3.0 * uv_max)
        }
    };
    // Pixel-scaled coordinates (2π·u·cell) must stay finite for the NUFFT.
    let uv_max = p.u.iter().chain(&p.v).fold(0.0, |a: f64, x| a.max(x.abs()));
    if !(TAU * uv_max * cell).is_finite() {
        return invalid(format!(
            "gridding coordinates overflow: |u|, |v| up to {uv_max:e} wavelengths × cell \
             {cell:e} rad"
        ));
    }
    let wts = weights(&p, params.weighting, n, cell);
    // Sum over both halves of every Hermitian pair.
    let sum_w: f64 = 2.0 * wts.iter().sum::<f64>();

    // n − 1 per pixel (NaN outside the unit circle).
    let c0 = (n / 2) as f64;
    let mut nm1 = vec![0.0f64; n * n];
    let mut max_nm1 = 0.0f64;
    for row in 0..n {
        let m = (row as f64 - c0) * cell;
        for col in 0..n {
            let l = (col as f64 - c0) * cell;
            let r2 = l * l + m * m;
            let v = if r2 < 1.0 {
                -r2 / (1.0 + (1.0 - r2).sqrt())
            } else {
                f64::NAN
            };
            if v.is_finite() {
                max_nm1 = max_nm1.max(-v);
            }
            nm1[row * n + col] = v;
        }
    }

    let (w_min, w_max) =
        p.w.iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &w| {
                (a.min(w), b.max(w))
            });
    let range = w_max - w_min;
    let n_planes = if params.w_planes > 0 {
        params.w_planes
    } else {
        let need = (range * max_nm1 / (2.0 * W_PHASE_TOL_CYCLES)).ceil() as usize;
        if need > MAX_AUTO_W_PLANES {
            tracing::warn!(
                need,
                used = MAX_AUTO_W_PLANES,
                "w-range needs more planes than the automatic limit; wide-field accuracy drops"
            );
        }
        need.clamp(1, MAX_AUTO_W_PLANES)
    };
    let width = range / n_planes as f64;
    let plane_of = |w: f64| {
        if width > 0.0 {
            (((w - w_min) / width) as usize).min(n_planes - 1)
        } else {
            0
        }
    };

    let mut planes: Vec<Vec<usize>> = vec![Vec::new(); n_planes];
    for (i, &w) in p.w.iter().enumerate() {
        planes[plane_of(w)].push(i);
    }
    let opts = Options {
        eps: GRID_EPS,
        isign: -1,
        upsampfac: 2.0,
    };
    let mut acc = vec![0.0f64; n * n];
    // One plan for all w-planes, on the GPU when one is usable.
    let mut plan = make_plan::<f64>(Backend::Auto, NufftType::Type1, &[n, n], &opts)?;
    let mut grid = vec![Complex64::default(); n * n];
    for (k, idx) in planes.iter().enumerate() {
        if idx.is_empty() {
            continue;
        }
        let w_p = if width > 0.0 {
            w_min + (k as f64 + 0.5) * width
        } else {
            w_min
        };
        // Rows go with m (first axis ↔ y = 2π v Δm), columns with l.
        let x: Vec<f64> = idx.iter().map(|&i| TAU * p.u[i] * cell).collect();
        let y: Vec<f64> = idx.iter().map(|&i| TAU * p.v[i] * cell).collect();
        let c: Vec<Complex64> = idx.iter().map(|&i| p.vis[i] * wts[i]).collect();
        plan.set_points(&[&y, &x])?;
        plan.execute(&c, &mut grid)?;
        for ((a, g), d) in acc.iter_mut().zip(&grid).zip(&nm1) {
            if d.is_finite() {
                let ph = -2.0 * PI * w_p * d;
                *a += g.re * ph.cos() - g.im * ph.sin();
            }
        }
    }

    let (ra, dec) = phase_centre(obs);
    let freq_hz = obs.freqs_hz.iter().sum::<f64>() / obs.freqs_hz.len() as f64;
    Ok(DirtyImage {
        size: n,
        cell_rad: cell,
        pixels: acc.iter().map(|a| (2.0 * a / sum_w) as f32).collect(),
        ra,
        dec,
        freq_hz,
        sum_weights: sum_w,
        time_unix: obs.time_unix,
        pol_product,
    })
}
