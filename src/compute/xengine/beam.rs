//! Beam configuration, host-side coefficient preparation and the dither/quantiser shared by
//! the CPU and GPU beamformers (dsp.md §10, icd.md §4.4).

use super::{XError, XShape};

/// One single-polarisation beam.
#[derive(Clone, Debug, PartialEq)]
pub struct Beam {
    /// Input polarisation (0 or 1).
    pub pol: usize,
    /// Quantisation gain g_b (`?beam-quant-gains`).
    pub quant_gain: f64,
    /// Real weight per antenna (`?beam-weights`).
    pub weights: Vec<f64>,
    /// Delay per antenna, seconds (`?beam-delays`).
    pub delays: Vec<f64>,
    /// Phase per antenna at the centre frequency of the whole band, radians.
    pub phases: Vec<f64>,
}

/// All beams of one engine plus the frequency context.
#[derive(Clone, Debug, PartialEq)]
pub struct BeamSet {
    /// The beams.
    pub beams: Vec<Beam>,
    /// Absolute index of this engine's first channel.
    pub channel_offset: usize,
    /// Total channels of the stream (N).
    pub n_channels_total: usize,
    /// Stream bandwidth in Hz (Δf = bandwidth / N).
    pub bandwidth: f64,
    /// Add uniform dither in (−0.5, 0.5) before quantising.
    pub dither: bool,
    /// Dither seed.
    pub seed: u64,
}

/// Per-batch beamformer statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BeamStats {
    /// Number of present antennas (`beam_ants`); a batch with 0 is not sent.
    pub beam_ants: usize,
    /// Saturated complex samples per beam (re or im beyond ±127 before rounding).
    pub saturated: Vec<u64>,
}

/// Host-prepared per-(beam, antenna) tables: `coef` = weight·gain·e^{j(φ − 2πΔf(c0 − N/2)τ)}
/// (zero for absent antennas), `delay` = −2Δfτ wrapped to [−1, 1) (half-turns per channel).
/// The coefficient of local channel c is `coef · e^{jπ·c·delay}`.
#[derive(Clone, Debug, PartialEq)]
pub struct BeamTables {
    /// Interleaved re, im; `[beam][antenna]`.
    pub coef: Vec<f32>,
    /// `[beam][antenna]`.
    pub delay: Vec<f32>,
    /// Polarisation per beam.
    pub pol: Vec<i32>,
    /// Present antennas.
    pub beam_ants: usize,
}

impl BeamSet {
    /// Validates against `shape`: lengths, pols, finite parameters, channel range.
    pub fn validate(&self, shape: &XShape) -> Result<(), XError> {
        if self.beams.is_empty() || self.beams.len() > 4096 {
            return Err(XError::Beam(format!(
                "{} beams, need 1..=4096",
                self.beams.len()
            )));
        }
        if !(self.bandwidth.is_finite() && self.bandwidth > 0.0) {
            return Err(XError::Beam(format!("bandwidth {}", self.bandwidth)));
        }
        if self.n_channels_total == 0
            || self.channel_offset + shape.n_channels > self.n_channels_total
        {
            return Err(XError::Beam(format!(
                "channels {}..{} outside 0..{}",
                self.channel_offset,
                self.channel_offset + shape.n_channels,
                self.n_channels_total
            )));
        }
        for (i, b) in self.beams.iter().enumerate() {
            if b.pol > 1 {
                return Err(XError::Beam(format!(
                    "beam {i}: pol {} (must be 0 or 1)",
                    b.pol
                )));
            }
            if !b.quant_gain.is_finite() {
                return Err(XError::Beam(format!(
                    "beam {i}: quant gain {}",
                    b.quant_gain
                )));
            }
            for (name, v) in [
                ("weights", &b.weights),
                ("delays", &b.delays),
                ("phases", &b.phases),
            ] {
                if v.len() != shape.n_ants {
                    return Err(XError::Beam(format!(
                        "beam {i}: {} {name} for {} antennas",
                        v.len(),
                        shape.n_ants
                    )));
                }
                if let Some(a) = v.iter().position(|x| !x.is_finite()) {
                    return Err(XError::Beam(format!(
                        "beam {i}: {name}[{a}] = {} is not finite",
                        v[a]
                    )));
                }
            }
        }
        Ok(())
    }

    /// Validates and builds the coefficient tables for the given antenna presence.
    pub fn tables(&self, shape: &XShape, present_ants: &[bool]) -> Result<BeamTables, XError> {
        self.validate(shape)?;
        shape.check_present(present_ants)?;
        let df = self.bandwidth / self.n_channels_total as f64;
        let c0 = self.channel_offset as f64 - self.n_channels_total as f64 / 2.0;
        let n = self.beams.len() * shape.n_ants;
        let mut coef = Vec::with_capacity(2 * n);
        let mut delay = Vec::with_capacity(n);
        for b in &self.beams {
            for (a, &present) in present_ants.iter().enumerate() {
                if !present {
                    coef.extend([0.0, 0.0]);
                    delay.push(0.0);
                    continue;
                }
                let tau = b.delays[a];
                let ph = b.phases[a] - 2.0 * std::f64::consts::PI * df * c0 * tau;
                let mag = b.weights[a] * b.quant_gain;
                let (s, c) = ph.sin_cos();
                coef.push((mag * c) as f32);
                coef.push((mag * s) as f32);
                let d = -2.0 * df * tau;
                // e^{jπcd} is 2-periodic in d for integer c: wrap to [-1, 1) for f32 accuracy.
                let w = d - 2.0 * ((d + 1.0) / 2.0).floor();
                delay.push(w as f32);
            }
        }
        Ok(BeamTables {
            coef,
            delay,
            pol: self.beams.iter().map(|b| b.pol as i32).collect(),
            beam_ants: present_ants.iter().filter(|&&p| p).count(),
        })
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z ^= z >> 30;
    z = z.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^= z >> 27;
    z = z.wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z
}

/// 32-bit integer hash (lowbias32), the same as `hash32` in kernels/xengine/beamform.cu.
fn hash32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// Per-batch 32-bit dither seed derived from the 64-bit engine seed.
pub fn batch_dither_seed(seed: u64, batch: u64) -> u32 {
    let h = splitmix64(seed.wrapping_add(batch.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    (h ^ (h >> 32)) as u32
}

/// (2u − 255) / 512 for 8 bits u: uniform in (−0.5, 0.5) on 256 levels, exact in f32.
fn dither8(u: u32) -> f32 {
    (2 * (u & 0xff) as i32 - 255) as f32 * (1.0 / 512.0)
}

/// Dither (re, im), each uniform in (−0.5, 0.5), of beam `b` of `nb` at channel `c`, spectrum
/// `s` of a batch of `ns` spectra, batch `batch`: one 32-bit hash per (channel, spectrum pair,
/// beam), key (c·⌈ns/2⌉ + ⌊s/2⌋)·nb + b plus the batch seed (wrapping to 32 bits), gives four
/// 8-bit uniforms, bytes 0 and 1 (re, im) of the even spectrum and 2 and 3 of the odd one
/// (identical on CPU and GPU: the GPU epilogue hashes once per pair of outputs; 256 levels
/// linearise the 8-bit quantiser as well as a float uniform, within 1/512 LSB).
pub fn beam_dither(
    seed: u64,
    batch: u64,
    c: usize,
    s: usize,
    b: usize,
    ns: usize,
    nb: usize,
) -> (f32, f32) {
    let key = (c as u64 * ns.div_ceil(2) as u64 + (s / 2) as u64) * nb as u64 + b as u64;
    let h = hash32((key as u32).wrapping_add(batch_dither_seed(seed, batch)));
    let j = 16 * (s % 2) as u32;
    (dither8(h >> j), dither8(h >> (j + 8)))
}

/// Clamp to ±127 and round half to even; returns (value, saturated-before-rounding).
pub(crate) fn quantise(v: f32) -> (i8, bool) {
    let sat = v.abs() > 127.0;
    (v.clamp(-127.0, 127.0).round_ties_even() as i8, sat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beam_dither_is_uniform_on_256_levels_and_pairs_spectra() {
        let (ns, nb) = (256, 64);
        let mut hist = vec![0u32; 256];
        let (mut sum, mut n) = (0.0f64, 0u32);
        for c in 0..4 {
            for s in 0..ns {
                for b in 0..nb {
                    let (dr, di) = beam_dither(7, 3, c, s, b, ns, nb);
                    for d in [dr, di] {
                        assert!(d > -0.5 && d < 0.5, "{d}");
                        // (2u - 255) / 512 exactly
                        let u = (d * 512.0 + 255.0) / 2.0;
                        assert_eq!(u, u.round(), "{d}");
                        hist[u as usize] += 1;
                        sum += d as f64;
                        n += 1;
                    }
                }
            }
        }
        // every level used about equally (131072 draws, 512 per level expected)
        let (lo, hi) = (hist.iter().min().unwrap(), hist.iter().max().unwrap());
        assert!(*lo > 380 && *hi < 650, "{lo} .. {hi}");
        assert!((sum / n as f64).abs() < 0.005, "mean {}", sum / n as f64);
        // one hash per spectrum pair: bytes 0, 1 (even) and 2, 3 (odd) of the same word; the
        // next pair, the next beam and the next batch differ
        let key = ((5 * 128 + 10) * nb + 9) as u32;
        let h = hash32(key.wrapping_add(batch_dither_seed(7, 3)));
        let u = |j: u32| dither8(h >> (8 * j));
        assert_eq!(beam_dither(7, 3, 5, 20, 9, ns, nb), (u(0), u(1)));
        assert_eq!(beam_dither(7, 3, 5, 21, 9, ns, nb), (u(2), u(3)));
        let d = beam_dither(7, 3, 5, 20, 9, ns, nb);
        assert_ne!(d, beam_dither(7, 3, 5, 22, 9, ns, nb));
        assert_ne!(d, beam_dither(7, 3, 5, 20, 10, ns, nb));
        assert_ne!(d, beam_dither(7, 4, 5, 20, 9, ns, nb));
        // an odd number of spectra: the pair keys of neighbouring channels stay distinct
        assert_ne!(
            beam_dither(7, 3, 0, 4, 0, 5, 1),
            beam_dither(7, 3, 1, 0, 0, 5, 1)
        );
    }
}
