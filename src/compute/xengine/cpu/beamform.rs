//! The CPU beamformer: float32 in the GPU kernel's arithmetic order, then dither and
//! quantisation.

use rayon::prelude::*;

use crate::compute::xengine::beam::{beam_dither, quantise, BeamTables};
use crate::compute::xengine::{BeamSet, XError, XShape};

/// CPU beamformer on prepared tables (the same arithmetic as `kernels/xengine/beamform.cu`).
pub(super) fn beamform_cpu(
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

/// Checks the lengths of one batch of beamformer input and of its output.
pub(super) fn check_beam_io(
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
