//! Post-processing of one channelised spectrum (dsp.md §4–§7): channel selection (Nyquist
//! dropped for wideband; fftshift and optional discard for narrowband), fine delay + phase
//! as a per-channel phasor, complex gain, dither, quantisation (round half to even after
//! clamping to ±qmax) with saturation counting, optional 4-bit packing.

use num_complex::Complex32;
use std::f64::consts::PI;

/// splitmix64 finaliser: a bijective 64-bit mixer.
#[inline(always)]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Key of the dither stream for (seed, sequence, pol, absolute spectrum). The F-engine's
/// sequence is its feng_id (katgpucbf: sequence_first = feng_id, step = n_ants), so engines
/// never share dither.
pub(crate) fn dither_key(seed: u64, sequence: u64, pol: usize, spectrum: u64) -> u64 {
    let k = mix64(seed ^ mix64(sequence.wrapping_add(0x9e37_79b9_7f4a_7c15)));
    let k = mix64(k ^ (pol as u64).wrapping_mul(0xd1b5_4a32_d192_ed03));
    mix64(k ^ spectrum.wrapping_mul(0x8cb9_2ba7_2f3d_8dd7))
}

/// One xor-shift-multiply-xor-shift round: the per-value dither mixer (kernels/fengine/quant.cuh
/// `dither_mix1`). Its input is the full-entropy key of the (spectrum, pol) stream xor the
/// channel's salt, so one round is enough; the shifts by 32 are single 32-bit xors on the GPU.
#[inline(always)]
fn mix1(z: u64) -> u64 {
    let z = (z ^ (z >> 32)).wrapping_mul(0xd6e8_feb8_6659_fd93);
    z ^ (z >> 32)
}

/// The dither salt of `channel` (the GPU hoists it out of its spectrum loops).
#[inline(always)]
fn dither_salt(channel: usize) -> u64 {
    mix1((channel as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Maps 22 bits j of `r` (bits 1..=22) to (j + ½)·2⁻²² − ½ ∈ (−½, ½) through the float
/// bits of 1 + (2j + 1)·2⁻²³ (exact): 2²² levels, symmetric about 0 with mean exactly 0,
/// |value| ≤ ½ − 2⁻²³ < ½.
#[inline(always)]
fn dither_unit(r: u32) -> f32 {
    f32::from_bits(0x3f80_0001 | (r & 0x007f_fffe)) - 1.5
}

/// The (re, im) dither for `channel` in the stream identified by `key` (uniform in (−½, ½),
/// independent between re and im, channels and streams).
#[inline(always)]
pub fn dither_value(key: u64, channel: usize) -> (f32, f32) {
    let r = mix1(key ^ dither_salt(channel));
    (dither_unit(r as u32), dither_unit((r >> 32) as u32))
}

/// Quantises `v` (dither already added): clamp to ±qmax, round half to even. Returns the
/// value and whether it saturated (|v| > qmax before rounding). NaN gives 0, unsaturated.
#[inline(always)]
pub fn quantise(v: f32, qmax: f32) -> (i8, bool) {
    let c = v.clamp(-qmax, qmax);
    (round_half_even(c) as i8, v.abs() > qmax)
}

/// Round half to even for |x| < 2^22 without a libm call: adding 1.5·2^23 leaves no
/// fraction bits, so the FPU's default rounding (to nearest, ties to even) does the work.
#[inline(always)]
fn round_half_even(x: f32) -> f32 {
    const M: f32 = 12_582_912.0;
    (x + M) - M
}

/// Static parameters of the post-processing of one output stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Post {
    /// Output channels C.
    pub channels: usize,
    /// PFB (FFT) channels N.
    pub n_pfb: usize,
    /// Narrowband: output channel c comes from FFT bin (c − C/2) mod N.
    pub narrowband: bool,
    /// Divides the fine delay (internal decimation; 1 for wideband).
    pub fine_divisor: f64,
    pub qmax: f32,
    pub four_bit: bool,
}

impl Post {
    #[inline(always)]
    fn bin(&self, c: usize) -> usize {
        if self.narrowband {
            // n_pfb is a power of two.
            (c + self.n_pfb - self.channels / 2) & (self.n_pfb - 1)
        } else {
            c
        }
    }

    /// Processes one spectrum `spec` (FFT bin order) of one pol. Output value for channel
    /// c goes to `out[c * stride .. ]` (2 bytes, or 1 packed byte for 4-bit). Returns the
    /// number of saturated complex values.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn spectrum(
        &self,
        spec: &[Complex32],
        fine_delay: f64,
        phase: f64,
        gains: &[Complex32],
        dither: Option<u64>,
        out: &mut [u8],
        stride: usize,
    ) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (just checked).
            return unsafe {
                self.spectrum_avx2(spec, fine_delay, phase, gains, dither, out, stride)
            };
        }
        self.spectrum_generic(spec, fine_delay, phase, gains, dither, out, stride)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn spectrum_avx2(
        &self,
        spec: &[Complex32],
        fine_delay: f64,
        phase: f64,
        gains: &[Complex32],
        dither: Option<u64>,
        out: &mut [u8],
        stride: usize,
    ) -> u64 {
        self.spectrum_generic(spec, fine_delay, phase, gains, dither, out, stride)
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn spectrum_generic(
        &self,
        spec: &[Complex32],
        fine_delay: f64,
        phase: f64,
        gains: &[Complex32],
        dither: Option<u64>,
        out: &mut [u8],
        stride: usize,
    ) -> u64 {
        // phase_c = fine·(−π/N)·(c − C/2) + phase, with the fine delay divided by the
        // internal decimation for narrowband (dsp.md §6). e^{j·phase_c} = hi·lo with
        // hi = e^{j(slope·(c0 − C/2) + phase)} exact per block of BLOCK channels and
        // lo[i] = e^{j·slope·i} from an f64 recurrence shared by all blocks.
        const BLOCK: usize = 64;
        let slope = -PI * (fine_delay / self.fine_divisor) / self.n_pfb as f64;
        let half = (self.channels / 2) as f64;
        let mut lo = [Complex32::new(0.0, 0.0); BLOCK];
        let (ss, cs) = slope.sin_cos();
        let (mut pr, mut pi) = (1.0f64, 0.0f64);
        for l in lo.iter_mut() {
            *l = Complex32::new(pr as f32, pi as f32);
            let npr = pr * cs - pi * ss;
            pi = pr * ss + pi * cs;
            pr = npr;
        }
        let mut vr = [0f32; BLOCK];
        let mut vi = [0f32; BLOCK];
        let mut sat = 0u64;
        let q = self.qmax;
        for c0 in (0..self.channels).step_by(BLOCK) {
            let n = BLOCK.min(self.channels - c0);
            let (s0, k0) = (slope * (c0 as f64 - half) + phase).sin_cos();
            let hi = Complex32::new(k0 as f32, s0 as f32);
            let g = &gains[c0..c0 + n];
            for i in 0..n {
                let x = spec[self.bin(c0 + i)];
                let v = x * (hi * lo[i] * g[i]);
                vr[i] = v.re;
                vi[i] = v.im;
            }
            if let Some(key) = dither {
                for i in 0..n {
                    let (dr, di) = dither_value(key, c0 + i);
                    vr[i] += dr;
                    vi[i] += di;
                }
            }
            // Branch-free quantisation over the block (vectorises), then the stores.
            let mut nsat = 0u32;
            for i in 0..n {
                let (r, m) = (vr[i], vi[i]);
                nsat += ((r.abs() > q) | (m.abs() > q)) as u32;
                vr[i] = round_half_even(r.clamp(-q, q));
                vi[i] = round_half_even(m.clamp(-q, q));
            }
            sat += nsat as u64;
            let dst = &mut out[c0 * stride..];
            if self.four_bit {
                for i in 0..n {
                    let (qr, qi) = (vr[i] as i8, vi[i] as i8);
                    dst[i * stride] = ((qr as u8) << 4) | (qi as u8 & 0x0f);
                }
            } else {
                for i in 0..n {
                    dst[i * stride] = vr[i] as i8 as u8;
                    dst[i * stride + 1] = vi[i] as i8 as u8;
                }
            }
        }
        sat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantise_rounds_half_even_and_counts_saturation() {
        assert_eq!(quantise(0.5, 127.0), (0, false));
        assert_eq!(quantise(1.5, 127.0), (2, false));
        assert_eq!(quantise(-2.5, 127.0), (-2, false));
        assert_eq!(quantise(126.5, 127.0), (126, false));
        assert_eq!(quantise(127.0, 127.0), (127, false));
        assert_eq!(quantise(127.3, 127.0), (127, true));
        assert_eq!(quantise(-1000.0, 127.0), (-127, true));
        assert_eq!(quantise(7.2, 7.0), (7, true));
        assert_eq!(quantise(-6.5, 7.0), (-6, false));
        assert_eq!(quantise(f32::NAN, 127.0), (0, false));
        for i in -2540..=2540 {
            let x = i as f32 * 0.05;
            assert_eq!(round_half_even(x), x.round_ties_even(), "{x}");
        }
    }

    #[test]
    fn dither_is_bounded_symmetric_and_uniform() {
        let lo = 0.5 - 2f32.powi(-23);
        assert_eq!(dither_unit(0), -lo);
        assert_eq!(dither_unit(u32::MAX), lo);
        assert_eq!(dither_unit(0x0040_0000), 2f32.powi(-23));
        assert_eq!(dither_unit(0x003f_fffe), -2f32.powi(-23));
        // Symmetric: j and 2^22 − 1 − j give opposite values.
        for j in [0u32, 1, 12345, 0x1f_ffff] {
            assert_eq!(dither_unit(j << 1), -dither_unit((0x3f_ffff - j) << 1));
        }
        assert!(lo < 0.5 && -lo > -0.5);
        let key = dither_key(1234, 3, 0, 99);
        let n = 200_000;
        let mut hist = [0usize; 10];
        let (mut sum, mut sum2) = (0f64, 0f64);
        for c in 0..n / 2 {
            let (a, b) = dither_value(key, c);
            for v in [a, b] {
                assert!(v > -0.5 && v < 0.5);
                hist[((v + 0.5) * 10.0) as usize] += 1;
                sum += v as f64;
                sum2 += (v as f64).powi(2);
            }
        }
        let mean = sum / n as f64;
        let var = sum2 / n as f64 - mean * mean;
        assert!(mean.abs() < 0.005, "mean {mean}");
        assert!((var - 1.0 / 12.0).abs() < 0.002, "var {var}");
        for h in hist {
            assert!((h as f64 - n as f64 / 10.0).abs() < 0.05 * n as f64 / 10.0);
        }
    }

    /// Pearson correlation of two equally long series.
    fn corr(a: &[f64], b: &[f64]) -> f64 {
        let n = a.len() as f64;
        let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
        let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
        for (x, y) in a.iter().zip(b) {
            ab += (x - ma) * (y - mb);
            aa += (x - ma).powi(2);
            bb += (y - mb).powi(2);
        }
        ab / (aa * bb).sqrt()
    }

    #[test]
    fn dither_is_uncorrelated_between_components_channels_and_spectra() {
        // Over many spectra: re/im of one channel, neighbouring and distant channels of one
        // spectrum, one channel in consecutive spectra, and the sign of the four-point product
        // (the pattern a xor-only combination of key and channel would fix exactly).
        let spectra = 100_000u64;
        let chans = [0usize, 1, 2, 31, 32, 33, 1000, 4095];
        let series: Vec<[Vec<f64>; 2]> = chans
            .iter()
            .map(|&c| {
                let mut re = Vec::new();
                let mut im = Vec::new();
                for s in 0..spectra {
                    let (a, b) = dither_value(dither_key(42, 1, 0, s), c);
                    re.push(a as f64);
                    im.push(b as f64);
                }
                [re, im]
            })
            .collect();
        let bound = 5.0 / (spectra as f64).sqrt();
        for (i, a) in series.iter().enumerate() {
            assert!(
                corr(&a[0], &a[1]).abs() < bound,
                "re/im of channel {}",
                chans[i]
            );
            for (j, b) in series.iter().enumerate().skip(i + 1) {
                for (x, y) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                    let r = corr(&a[x], &b[y]);
                    assert!(r.abs() < bound, "channels {} {}: {r}", chans[i], chans[j]);
                }
            }
            let n = a[0].len();
            let r = corr(&a[0][..n - 1], &a[0][1..]);
            assert!(
                r.abs() < bound,
                "consecutive spectra, channel {}: {r}",
                chans[i]
            );
        }
        let (u, v) = (&series[1][0], &series[2][0]);
        let mut sign = 0f64;
        for s in 0..spectra as usize - 1 {
            sign += (u[s] * v[s] * u[s + 1] * v[s + 1]).signum();
        }
        let sign = sign / (spectra - 1) as f64;
        assert!(sign.abs() < bound, "four-point sign mean {sign}");
    }

    #[test]
    fn dither_streams_differ_by_feng_id_pol_and_spectrum() {
        let base = dither_value(dither_key(7, 0, 0, 0), 5);
        assert_ne!(base, dither_value(dither_key(7, 1, 0, 0), 5));
        assert_ne!(base, dither_value(dither_key(7, 0, 1, 0), 5));
        assert_ne!(base, dither_value(dither_key(7, 0, 0, 1), 5));
        assert_ne!(base, dither_value(dither_key(8, 0, 0, 0), 5));
        assert_eq!(base, dither_value(dither_key(7, 0, 0, 0), 5));
    }

    #[test]
    fn four_bit_packing_real_in_high_nibble() {
        let post = Post {
            channels: 2,
            n_pfb: 2,
            narrowband: false,
            fine_divisor: 1.0,
            qmax: 7.0,
            four_bit: true,
        };
        let spec = [Complex32::new(3.0, -2.0), Complex32::new(-9.0, 7.6)];
        let gains = [Complex32::new(1.0, 0.0); 2];
        let mut out = [0u8; 2];
        let sat = post.spectrum(&spec, 0.0, 0.0, &gains, None, &mut out, 1);
        assert_eq!(out[0], 0x3e);
        assert_eq!(out[1], 0x97);
        assert_eq!(sat, 1);
    }
}
