//! References the X-engine tests check both back ends against, written from the documents
//! rather than from the back ends: the correlator from the ICD (§4.3), the beamformer in f64
//! from dsp.md §10.

use super::{beam_dither, BeamSet, XShape};

/// Naive reference written straight from the ICD: int64 sums, then saturation / MISSING.
pub(super) fn naive_dump(shape: &XShape, batches: &[&[i8]], present: &[bool]) -> (Vec<i32>, u64) {
    let (na, nc, ns) = (shape.n_ants, shape.n_channels, shape.spectra_per_batch);
    let nbl = na * (na + 1) / 2;
    let mut out = vec![0i32; nc * nbl * 8];
    let mut sat = 0;
    let x = |buf: &[i8], a: usize, c: usize, s: usize, p: usize| -> (i64, i64) {
        let o = (((a * nc) + c) * ns + s) * 4 + 2 * p;
        (buf[o] as i64, buf[o + 1] as i64)
    };
    for c in 0..nc {
        for a2 in 0..na {
            for a1 in 0..=a2 {
                let bl = a2 * (a2 + 1) / 2 + a1;
                for p2 in 0..2 {
                    for p1 in 0..2 {
                        let (mut re, mut im) = (0i64, 0i64);
                        for buf in batches {
                            for chunk in buf.chunks(shape.batch_bytes()) {
                                for s in 0..ns {
                                    // (ar + j ai)(br - j bi)
                                    let (ar, ai) = x(chunk, a1, c, s, p1);
                                    let (br, bi) = x(chunk, a2, c, s, p2);
                                    re += ar * br + ai * bi;
                                    im += ai * br - ar * bi;
                                }
                            }
                        }
                        let o = ((c * nbl + bl) * 4 + p1 + 2 * p2) * 2;
                        if !(present[a1] && present[a2]) {
                            out[o] = i32::MIN;
                            out[o + 1] = 1;
                            continue;
                        }
                        let lim = i32::MAX as i64;
                        if re.abs() > lim || im.abs() > lim {
                            sat += 1;
                        }
                        out[o] = re.clamp(-lim, lim) as i32;
                        out[o + 1] = im.clamp(-lim, lim) as i32;
                    }
                }
            }
        }
    }
    (out, sat)
}

/// f64 reference straight from dsp.md §10; returns (pre-quantisation value, quantised).
pub(super) fn beam_reference(
    shape: &XShape,
    batch: &[i8],
    present: &[bool],
    bs: &BeamSet,
    batch_index: u64,
) -> Vec<(f64, i8)> {
    let (na, nc, ns) = (shape.n_ants, shape.n_channels, shape.spectra_per_batch);
    let nb = bs.beams.len();
    let df = bs.bandwidth / bs.n_channels_total as f64;
    let mut out = Vec::new();
    for (b, beam) in bs.beams.iter().enumerate() {
        for c in 0..nc {
            let cabs = (bs.channel_offset + c) as f64;
            for s in 0..ns {
                let (mut re, mut im) = (0f64, 0f64);
                for a in (0..na).filter(|&a| present[a]) {
                    let ph = beam.phases[a]
                        - 2.0
                            * std::f64::consts::PI
                            * df
                            * (cabs - bs.n_channels_total as f64 / 2.0)
                            * beam.delays[a];
                    let g = beam.quant_gain * beam.weights[a];
                    let (wr, wi) = (g * ph.cos(), g * ph.sin());
                    let o = ((a * nc + c) * ns + s) * 4 + 2 * beam.pol;
                    let (xr, xi) = (batch[o] as f64, batch[o + 1] as f64);
                    re += wr * xr - wi * xi;
                    im += wr * xi + wi * xr;
                }
                if bs.dither {
                    let (dr, di) = beam_dither(bs.seed, batch_index, c, s, b, ns, nb);
                    re += dr as f64;
                    im += di as f64;
                }
                for v in [re, im] {
                    let q = v.clamp(-127.0, 127.0).round_ties_even() as i8;
                    out.push((v, q));
                }
            }
        }
    }
    out
}
