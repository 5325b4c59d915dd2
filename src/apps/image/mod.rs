//! Radio-interferometric imaging: correlator visibilities → dirty image.
//!
//! Conventions (shared with the `gpucbf array` simulator):
//!
//! * The correlator's `V[a1, a2] = Σ x_a1 · conj(x_a2)` (ICD §4.3), baseline index
//!   `a2(a2+1)/2 + a1` for `a1 ≤ a2`, products `4·bl + p1 + 2·p2`.
//! * A plane wave from unit direction ŝ reaches antenna a with delay `τ_a = −(p_a·ŝ)/c`, so
//!   `V_ab ∝ exp(+2πi(u l + v m + w(n−1)))` with `(u, v, w) = uvw(a, b)/λ`, relative to the phase
//!   centre.
//! * Dirty image `I(l, m) = Re Σ_k w_k V_k exp(−2πi(u_k l + v_k m + w_k(n−1))) / Σ w_k`, each
//!   baseline summed with its Hermitian conjugate, autocorrelations and flagged data skipped.
//!   Gridding is a type-1 NUFFT ([`crate::compute::nufft::make_plan`], GPU when usable, isign −1, ε = 1e-6) per w-plane
//!   (w-stacking), so a unit point source peaks at 1.0.
//! * Pixels are stored `[row m][col l]`: row 0 is the most negative m, column 0 the most negative
//!   l, and the phase centre is pixel `(⌊N/2⌋, ⌊N/2⌋)`.

pub mod cli;
mod fits;
mod font;
mod geometry;
mod grid;
mod plot;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cli;

pub use fits::write_fits;
pub use geometry::{gmst_rad, uvw, zenith_radec};
pub use grid::dirty_image;
pub use plot::{write_image_png, write_spectrum_png};

pub use crate::spead::icd::{baseline_index, n_baselines, MISSING};
use num_complex::Complex32;

/// MeerKAT reference latitude (−30.7110°), radians.
pub const MEERKAT_LAT_RAD: f64 = -30.7110 * std::f64::consts::PI / 180.0;
/// MeerKAT reference longitude (21.4438° east), radians.
pub const MEERKAT_LON_RAD: f64 = 21.4438 * std::f64::consts::PI / 180.0;
/// Speed of light, m/s.
pub const SPEED_OF_LIGHT: f64 = 299_792_458.0;
/// Largest image side accepted.
pub const MAX_IMAGE_SIZE: usize = 16384;

/// Visibility weighting.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Weighting {
    /// Every visibility weighs 1.
    Natural,
    /// Each visibility divided by the summed weight of its uv cell (size `1/(N·Δl)`).
    Uniform,
    /// Briggs robust weighting with the given robustness R (WSClean's definition).
    Briggs(f64),
}

/// Imaging parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct ImagingParams {
    /// Pixels per side.
    pub size: usize,
    /// Pixel size (direction cosine, ≈ radians); `None`: `1/(3·u_max)`.
    pub cell_rad: Option<f64>,
    /// Weighting scheme.
    pub weighting: Weighting,
    /// Number of w-planes; 0 picks enough that the w-phase error within a plane stays small.
    pub w_planes: usize,
}

/// Array geometry, time, phase centre and channel frequencies.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// Antenna positions, east/north/up metres.
    pub positions_enu: Vec<[f64; 3]>,
    /// Geodetic latitude of the array reference position, radians (north positive).
    pub latitude_rad: f64,
    /// Longitude of the array reference position, radians (east positive).
    pub longitude_rad: f64,
    /// UNIX time of the observation (mid-dump).
    pub time_unix: f64,
    /// `(ra, dec)` in radians; `None` = zenith at `time_unix`.
    pub phase_centre: Option<(f64, f64)>,
    /// Sky frequency of each channel, Hz.
    pub freqs_hz: Vec<f64>,
}

/// Everything that can go wrong; bad input is reported, never a panic.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ImagingError {
    /// A parameter or input value is out of range or malformed (the text says which).
    #[error("invalid input: {0}")]
    Invalid(String),
    /// An array's length does not match the antenna and channel counts.
    #[error("{what} has length {got}, expected {expected}")]
    WrongLength {
        /// Which array (`xeng_raw`, `flagged`, `data`, `positions_enu`, `freqs_hz`).
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length the antenna and channel counts call for.
        expected: usize,
    },
    /// Every cross-correlation is flagged or not finite (autocorrelations are never imaged).
    #[error("no unflagged cross-correlation visibilities to image")]
    NoData,
    /// The gridding NUFFT failed (plan or execution).
    #[error("NUFFT: {0}")]
    Nufft(#[from] crate::compute::nufft::NufftError),
}

/// Correlation products of one or more summed dumps.
#[derive(Clone, Debug, PartialEq)]
pub struct Visibilities {
    /// Number of antennas; there are `n_ants(n_ants+1)/2` baselines, autocorrelations
    /// included, in the ICD order ([`baseline_index`]).
    pub n_ants: usize,
    /// Number of frequency channels.
    pub channels: usize,
    /// `[channel][baseline][product 4]`.
    pub data: Vec<Complex32>,
    /// `[channel][baseline]`: the baseline was MISSING (some antenna absent).
    pub flagged: Vec<bool>,
}

impl Visibilities {
    /// Zeroed, unflagged visibilities.
    pub fn zeros(n_ants: usize, channels: usize) -> Self {
        let nb = n_baselines(n_ants);
        Visibilities {
            n_ants,
            channels,
            data: vec![Complex32::new(0.0, 0.0); channels * nb * 4],
            flagged: vec![false; channels * nb],
        }
    }

    /// Decodes one `xeng_raw` heap: `channels × baselines × 4 × (re, im)` int32. A baseline is
    /// flagged if any of its products carries the MISSING marker.
    pub fn from_xeng_raw(
        n_ants: usize,
        channels: usize,
        raw: &[i32],
    ) -> Result<Self, ImagingError> {
        if n_ants == 0 || channels == 0 {
            return Err(ImagingError::Invalid(format!(
                "n_ants = {n_ants} and channels = {channels} must both be positive"
            )));
        }
        let nb = n_baselines(n_ants);
        let expected = channels
            .checked_mul(nb * 8)
            .ok_or_else(|| ImagingError::Invalid("xeng_raw size overflows".into()))?;
        if raw.len() != expected {
            return Err(ImagingError::WrongLength {
                what: "xeng_raw",
                got: raw.len(),
                expected,
            });
        }
        let mut v = Visibilities::zeros(n_ants, channels);
        for (i, pair) in raw.chunks_exact(2).enumerate() {
            if pair == MISSING {
                v.flagged[i / 4] = true;
            } else {
                v.data[i] = Complex32::new(pair[0] as f32, pair[1] as f32);
            }
        }
        for (f, d) in v.flagged.iter().zip(v.data.chunks_exact_mut(4)) {
            if *f {
                d.fill(Complex32::new(0.0, 0.0));
            }
        }
        Ok(v)
    }

    /// Checks that the array lengths match `n_ants` and `channels`.
    pub fn validate(&self) -> Result<(), ImagingError> {
        if self.n_ants == 0 {
            return Err(ImagingError::Invalid("zero antennas".into()));
        }
        let nb = n_baselines(self.n_ants);
        let nf = self.channels.saturating_mul(nb);
        if self.flagged.len() != nf {
            return Err(ImagingError::WrongLength {
                what: "flagged",
                got: self.flagged.len(),
                expected: nf,
            });
        }
        if self.data.len() != nf.saturating_mul(4) {
            return Err(ImagingError::WrongLength {
                what: "data",
                got: self.data.len(),
                expected: nf.saturating_mul(4),
            });
        }
        Ok(())
    }

    /// Adds another dump; a baseline is flagged if it is flagged in either.
    pub fn add(&mut self, other: &Visibilities) -> Result<(), ImagingError> {
        self.validate()?;
        other.validate()?;
        if self.n_ants != other.n_ants || self.channels != other.channels {
            return Err(ImagingError::Invalid(format!(
                "cannot add {}×{} (antennas × channels) to {}×{}",
                other.n_ants, other.channels, self.n_ants, self.channels
            )));
        }
        for (a, b) in self.data.iter_mut().zip(&other.data) {
            *a += *b;
        }
        for (a, b) in self.flagged.iter_mut().zip(&other.flagged) {
            *a |= *b;
        }
        Ok(())
    }

    /// Visibility of product `p` (0..4) of baseline `bl` in channel `ch`; `None` when any
    /// index is out of range (or the arrays are shorter than the counts say).
    pub fn get(&self, ch: usize, bl: usize, p: usize) -> Option<Complex32> {
        let nb = n_baselines(self.n_ants);
        if ch >= self.channels || bl >= nb || p >= 4 {
            return None;
        }
        self.data.get((ch * nb + bl) * 4 + p).copied()
    }
}

/// A dirty image.
#[derive(Clone, Debug, PartialEq)]
pub struct DirtyImage {
    /// Pixels per side (the image is square).
    pub size: usize,
    /// Pixel size: the step in direction cosine (l or m) between pixel centres, ≈ radians.
    pub cell_rad: f64,
    /// `[row m][col l]`, row 0 = most negative m, column 0 = most negative l.
    pub pixels: Vec<f32>,
    /// Right ascension of the phase centre, radians.
    pub ra: f64,
    /// Declination of the phase centre, radians.
    pub dec: f64,
    /// Mean frequency of the channels used, Hz.
    pub freq_hz: f64,
    /// Sum of the imaging weights over every gridded visibility and its Hermitian conjugate:
    /// the normalisation that makes a unit point source peak at 1.0.
    pub sum_weights: f64,
    /// Time of the observation (for DATE-OBS).
    pub time_unix: f64,
    /// Correlation product imaged (0..4: aa, ba, ab, bb; see ICD §4.3).
    pub pol_product: usize,
}

impl DirtyImage {
    /// Largest pixel value and its `(col, row)`; NaNs are ignored.
    pub fn peak(&self) -> (f32, usize, usize) {
        let mut best = (f32::NEG_INFINITY, 0, 0);
        for (i, &p) in self.pixels.iter().enumerate() {
            if p > best.0 {
                best = (p, i % self.size.max(1), i / self.size.max(1));
            }
        }
        best
    }

    /// Direction cosines `(l, m)` of a pixel centre.
    pub fn lm_of(&self, col: usize, row: usize) -> (f64, f64) {
        let c = (self.size / 2) as f64;
        (
            (col as f64 - c) * self.cell_rad,
            (row as f64 - c) * self.cell_rad,
        )
    }

    /// Pixel value at `(col, row)`; `None` outside the image.
    pub fn at(&self, col: usize, row: usize) -> Option<f32> {
        if col >= self.size || row >= self.size {
            return None;
        }
        self.pixels.get(row * self.size + col).copied()
    }
}

static LAYOUT: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/meerkat_like_layout.txt"
));

/// Parses an ENU layout: one antenna per line, east, north and up in metres, separated by
/// spaces or commas (numbers after the third are ignored); `#` starts a comment and blank
/// lines are skipped.
pub fn parse_layout(text: &str) -> Result<Vec<[f64; 3]>, ImagingError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let vals: Vec<f64> = line
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|e| ImagingError::Invalid(format!("layout line {}: {e}", n + 1)))?;
        if vals.len() < 3 || vals.iter().any(|v| !v.is_finite()) {
            return Err(ImagingError::Invalid(format!(
                "layout line {}: need three finite numbers (east north up)",
                n + 1
            )));
        }
        out.push([vals[0], vals[1], vals[2]]);
    }
    Ok(out)
}

/// The shipped MeerKAT-like layout (`data/meerkat_like_layout.txt`): 64 antennas, a dense
/// ~1 km core and outer stations to ~8 km, ENU metres.
pub fn default_layout() -> Vec<[f64; 3]> {
    parse_layout(LAYOUT).expect("shipped layout parses")
}
