//! CPU reference back end: exact integer correlation (int64, rayon over channels) and a
//! float32 beamformer that follows the GPU kernel's arithmetic order. 4-bit input is unpacked
//! to int8 first (exact).

mod beamform;
mod correlate;

use rayon::prelude::*;

use beamform::{beamform_cpu, check_beam_io};
use correlate::{correlate_channel, correlate_row, gather, reduce_into, rows_of};

use super::{unpack4, BeamSet, BeamStats, XBackend, XError, XShape};

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
