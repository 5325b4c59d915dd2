//! CPU reference back end: exact integer correlation (int64, rayon over channels) and a
//! float32 beamformer that follows the GPU kernel's arithmetic order. 4-bit input is unpacked
//! to int8 first (exact).

use rayon::prelude::*;

use super::beam::{beam_dither, quantise, BeamTables};
use super::{present_baselines, unpack4, BeamSet, BeamStats, XBackend, XError, XShape, MISSING};

/// CPU implementation of [`XBackend`].
pub struct CpuX {
    shape: XShape,
    acc: Vec<i64>,
}

impl CpuX {
    /// A CPU back end for `shape` with a zeroed accumulator.
    pub fn new(shape: XShape) -> Self {
        Self {
            shape,
            acc: vec![0; shape.output_len()],
        }
    }

    /// The raw 64-bit accumulator `[channel][baseline][product][re/im]`.
    pub fn accumulator(&self) -> &[i64] {
        &self.acc
    }
}

/// Saturates one int64 accumulator into int32 with MISSING markers; returns the saturation
/// count. Shared by the CPU back end and tests of the GPU's reduce.
pub(crate) fn reduce_into(
    shape: &XShape,
    acc: &[i64],
    present_ants: &[bool],
    out: &mut [i32],
) -> u64 {
    let pb = present_baselines(present_ants);
    let nbl = shape.n_baselines();
    let lim = i32::MAX as i64;
    let mut sat = 0u64;
    for (i, (o, a)) in out.chunks_exact_mut(2).zip(acc.chunks_exact(2)).enumerate() {
        let bl = (i / 4) % nbl;
        if pb[bl] == 0 {
            o.copy_from_slice(&MISSING);
            continue;
        }
        if a[0].abs() > lim || a[1].abs() > lim {
            sat += 1;
        }
        o[0] = a[0].clamp(-lim, lim) as i32;
        o[1] = a[1].clamp(-lim, lim) as i32;
    }
    sat
}

/// re/im of every input (antenna, pol) of channel `c` as contiguous i32 time series.
fn gather(shape: &XShape, batch: &[i8], c: usize) -> (Vec<i32>, Vec<i32>) {
    let (na, nc, ns) = (shape.n_ants, shape.n_channels, shape.spectra_per_batch);
    let mut re = vec![0i32; na * 2 * ns];
    let mut im = vec![0i32; na * 2 * ns];
    for a in 0..na {
        let base = (a * nc + c) * ns * 4;
        let src = &batch[base..base + ns * 4];
        for (s, v) in src.chunks_exact(4).enumerate() {
            for p in 0..2 {
                re[(a * 2 + p) * ns + s] = v[2 * p] as i32;
                im[(a * 2 + p) * ns + s] = v[2 * p + 1] as i32;
            }
        }
    }
    (re, im)
}

/// Adds the baselines (a1, a2), a1 = 0..=a2, of one channel into `row` (`(a2 + 1) × 8` values).
fn correlate_row(ns: usize, re: &[i32], im: &[i32], a2: usize, row: &mut [i64]) {
    for a1 in 0..=a2 {
        for p2 in 0..2 {
            let (r2, i2) = (
                &re[(a2 * 2 + p2) * ns..][..ns],
                &im[(a2 * 2 + p2) * ns..][..ns],
            );
            for p1 in 0..2 {
                let (r1, i1) = (
                    &re[(a1 * 2 + p1) * ns..][..ns],
                    &im[(a1 * 2 + p1) * ns..][..ns],
                );
                let mut sr = 0i64;
                let mut si = 0i64;
                for s in 0..ns {
                    sr += (r1[s] * r2[s] + i1[s] * i2[s]) as i64;
                    si += (i1[s] * r2[s] - r1[s] * i2[s]) as i64;
                }
                let o = (a1 * 4 + p1 + 2 * p2) * 2;
                row[o] += sr;
                row[o + 1] += si;
            }
        }
    }
}

/// Splits one channel's accumulator into the rows of baselines sharing a2.
fn rows_of(acc: &mut [i64], na: usize) -> Vec<&mut [i64]> {
    let mut rows = Vec::with_capacity(na);
    let mut rest = acc;
    for a2 in 0..na {
        let (r, t) = rest.split_at_mut((a2 + 1) * 8);
        rows.push(r);
        rest = t;
    }
    rows
}

fn correlate_channel(shape: &XShape, batch: &[i8], c: usize, acc: &mut [i64]) {
    let (re, im) = gather(shape, batch, c);
    for (a2, row) in rows_of(acc, shape.n_ants).into_iter().enumerate() {
        correlate_row(shape.spectra_per_batch, &re, &im, a2, row);
    }
}

/// CPU beamformer on prepared tables (the same arithmetic as `kernels/xengine/beamform.cu`).
pub(crate) fn beamform_cpu(
    shape: &XShape,
    batch: &[i8],
    beams: &BeamSet,
    t: &BeamTables,
    batch_index: u64,
    out: &mut [i8],
) -> Vec<u64> {
    let (na, nc, ns) = (shape.n_ants, shape.n_channels, shape.spectra_per_batch);
    let nb = beams.beams.len();
    out.par_chunks_mut(nc * ns * 2)
        .enumerate()
        .map(|(b, ob)| {
            let pol = t.pol[b] as usize;
            let mut sat = 0u64;
            let mut ar = vec![0f32; ns];
            let mut ai = vec![0f32; ns];
            for c in 0..nc {
                ar.fill(0.0);
                ai.fill(0.0);
                for a in 0..na {
                    let k = b * na + a;
                    let (wr, wi) = (t.coef[2 * k] as f64, t.coef[2 * k + 1] as f64);
                    let (sn, cs) = (std::f64::consts::PI * c as f64 * t.delay[k] as f64).sin_cos();
                    let cr = (wr * cs - wi * sn) as f32;
                    let ci = (wr * sn + wi * cs) as f32;
                    let base = (a * nc + c) * ns * 4;
                    for s in 0..ns {
                        let xr = batch[base + 4 * s + 2 * pol] as f32;
                        let xi = batch[base + 4 * s + 2 * pol + 1] as f32;
                        ar[s] = cr.mul_add(xr, (-ci).mul_add(xi, ar[s]));
                        ai[s] = cr.mul_add(xi, ci.mul_add(xr, ai[s]));
                    }
                }
                for s in 0..ns {
                    let (mut vr, mut vi) = (ar[s], ai[s]);
                    if beams.dither {
                        let (dr, di) = beam_dither(beams.seed, batch_index, c, s, b, ns, nb);
                        vr += dr;
                        vi += di;
                    }
                    let (qr, sr) = quantise(vr);
                    let (qi, si) = quantise(vi);
                    sat += u64::from(sr || si);
                    let o = (c * ns + s) * 2;
                    ob[o] = qr;
                    ob[o + 1] = qi;
                }
            }
            sat
        })
        .collect()
}

pub(crate) fn check_beam_io(
    shape: &XShape,
    batch: &[i8],
    beams: &BeamSet,
    out: &[i8],
) -> Result<(), XError> {
    if batch.len() != shape.batch_bytes() {
        return Err(XError::Size {
            what: "beamformer input batch",
            expected: shape.batch_bytes(),
            got: batch.len(),
        });
    }
    let want = shape.beam_output_len(beams.beams.len());
    if out.len() != want {
        return Err(XError::Size {
            what: "beamformer output",
            expected: want,
            got: out.len(),
        });
    }
    Ok(())
}

impl XBackend for CpuX {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn shape(&self) -> XShape {
        self.shape
    }

    fn accumulate(&mut self, input: &[i8]) -> Result<(), XError> {
        let n_batches = self.shape.check_input(input)?;
        let unpacked;
        let input = if self.shape.sample_bits == 4 {
            unpacked = unpack4(input);
            &unpacked[..]
        } else {
            input
        };
        let shape = self.shape.unpacked();
        let per_ch = shape.n_baselines() * 8;
        for b in 0..n_batches {
            let batch = &input[b * shape.batch_bytes()..][..shape.batch_bytes()];
            if shape.n_channels >= rayon::current_num_threads() {
                self.acc
                    .par_chunks_mut(per_ch)
                    .enumerate()
                    .for_each(|(c, acc)| correlate_channel(&shape, batch, c, acc));
            } else {
                // few channels: parallel over baseline rows instead
                for (c, acc) in self.acc.chunks_mut(per_ch).enumerate() {
                    let (re, im) = gather(&shape, batch, c);
                    rows_of(acc, shape.n_ants)
                        .into_par_iter()
                        .enumerate()
                        .for_each(|(a2, row)| {
                            correlate_row(shape.spectra_per_batch, &re, &im, a2, row)
                        });
                }
            }
        }
        Ok(())
    }

    fn dump(&mut self, present_ants: &[bool], out: &mut [i32]) -> Result<u64, XError> {
        self.shape.check_present(present_ants)?;
        if out.len() != self.shape.output_len() {
            return Err(XError::Size {
                what: "correlator output",
                expected: self.shape.output_len(),
                got: out.len(),
            });
        }
        let sat = reduce_into(&self.shape, &self.acc, present_ants, out);
        self.acc.fill(0);
        Ok(sat)
    }

    fn beamform(
        &mut self,
        batch: &[i8],
        present_ants: &[bool],
        beams: &BeamSet,
        batch_index: u64,
        out: &mut [i8],
    ) -> Result<BeamStats, XError> {
        let t = beams.tables(&self.shape, present_ants)?;
        check_beam_io(&self.shape, batch, beams, out)?;
        let unpacked;
        let batch = if self.shape.sample_bits == 4 {
            unpacked = unpack4(batch);
            &unpacked[..]
        } else {
            batch
        };
        let saturated = beamform_cpu(&self.shape.unpacked(), batch, beams, &t, batch_index, out);
        Ok(BeamStats {
            beam_ants: t.beam_ants,
            saturated,
        })
    }
}
