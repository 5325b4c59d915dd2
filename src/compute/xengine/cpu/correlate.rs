//! The CPU correlator: exact integer products summed in int64 per (channel, baseline row),
//! and the saturating int32 dump with MISSING markers.

use crate::compute::xengine::{present_baselines, XShape, MISSING};

/// Saturates one int64 accumulator into int32 with MISSING markers; returns the saturation
/// count (what the GPU's `reduce` kernel does).
pub(super) fn reduce_into(
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
pub(super) fn gather(shape: &XShape, batch: &[i8], c: usize) -> (Vec<i32>, Vec<i32>) {
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
pub(super) fn correlate_row(ns: usize, re: &[i32], im: &[i32], a2: usize, row: &mut [i64]) {
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
pub(super) fn rows_of(acc: &mut [i64], na: usize) -> Vec<&mut [i64]> {
    let mut rows = Vec::with_capacity(na);
    let mut rest = acc;
    for a2 in 0..na {
        let (r, t) = rest.split_at_mut((a2 + 1) * 8);
        rows.push(r);
        rest = t;
    }
    rows
}

/// Adds the correlation of channel `c` of one batch into its accumulator `acc`.
pub(super) fn correlate_channel(shape: &XShape, batch: &[i8], c: usize, acc: &mut [i64]) {
    let (re, im) = gather(shape, batch, c);
    for (a2, row) in rows_of(acc, shape.n_ants).into_iter().enumerate() {
        correlate_row(shape.spectra_per_batch, &re, &im, a2, row);
    }
}
