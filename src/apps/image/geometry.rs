//! Array geometry: sidereal time and baseline (u, v, w).

use std::f64::consts::TAU;

use super::Observation;

/// Greenwich mean sidereal time (radians, in `[0, 2π)`) at a UNIX time (UT1 ≈ UTC; the
/// IAU 1982 linear term, good to ≈ 0.1 s over decades, ample for imaging).
pub fn gmst_rad(time_unix: f64) -> f64 {
    let d = time_unix / 86400.0 + 2_440_587.5 - 2_451_545.0;
    let hours = 18.697_374_558 + 24.065_709_824_419_08 * d;
    (hours / 24.0 * TAU).rem_euclid(TAU)
}

/// Local apparent sidereal time approximated by the mean one, radians in `[0, 2π)`.
pub(crate) fn lst_rad(time_unix: f64, longitude_rad: f64) -> f64 {
    (gmst_rad(time_unix) + longitude_rad).rem_euclid(TAU)
}

/// `(ra, dec)` of the zenith at the observation's time and place.
pub fn zenith_radec(obs: &Observation) -> (f64, f64) {
    (lst_rad(obs.time_unix, obs.longitude_rad), obs.latitude_rad)
}

/// The phase centre: the given one, or the zenith.
pub(crate) fn phase_centre(obs: &Observation) -> (f64, f64) {
    obs.phase_centre.unwrap_or_else(|| zenith_radec(obs))
}

/// Rotation from ENU baselines to (u, v, w) for one observation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UvwFrame {
    sin_lat: f64,
    cos_lat: f64,
    sin_h: f64,
    cos_h: f64,
    sin_d: f64,
    cos_d: f64,
}

impl UvwFrame {
    pub(crate) fn new(obs: &Observation) -> Self {
        let (ra, dec) = phase_centre(obs);
        let h = lst_rad(obs.time_unix, obs.longitude_rad) - ra;
        UvwFrame {
            sin_lat: obs.latitude_rad.sin(),
            cos_lat: obs.latitude_rad.cos(),
            sin_h: h.sin(),
            cos_h: h.cos(),
            sin_d: dec.sin(),
            cos_d: dec.cos(),
        }
    }

    /// (u, v, w) in metres of the ENU vector `b`.
    pub(crate) fn rotate(&self, b: [f64; 3]) -> [f64; 3] {
        let [e, n, up] = b;
        // ENU → local equatorial: X towards (H = 0, δ = 0), Y towards H = −6 h (east), Z to the pole.
        let x = -self.sin_lat * n + self.cos_lat * up;
        let y = e;
        let z = self.cos_lat * n + self.sin_lat * up;
        let u = self.sin_h * x + self.cos_h * y;
        let v = -self.sin_d * self.cos_h * x + self.sin_d * self.sin_h * y + self.cos_d * z;
        let w = self.cos_d * self.cos_h * x - self.cos_d * self.sin_h * y + self.sin_d * z;
        [u, v, w]
    }
}

/// Baseline `p_a1 − p_a2` in metres, rotated to (u, v, w) towards the phase centre. Antenna
/// indices out of range give NaN.
pub fn uvw(obs: &Observation, a1: usize, a2: usize) -> [f64; 3] {
    let (Some(p1), Some(p2)) = (obs.positions_enu.get(a1), obs.positions_enu.get(a2)) else {
        return [f64::NAN; 3];
    };
    UvwFrame::new(obs).rotate([p1[0] - p2[0], p1[1] - p2[1], p1[2] - p2[2]])
}
