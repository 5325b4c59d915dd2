//! The CPU implementation of [`FBackend`] (the reference: multi-threaded with rayon) and its
//! stages: sample decode, PFB FIR and FFT, post-processing, narrowband DDC, input statistics.

pub(crate) mod ddc;
pub(crate) mod decode;
pub(crate) mod pfb;
pub(crate) mod postproc;
pub(crate) mod stats;

use super::design::weights::pfb_weights;
use super::{Block, BlockStats, Dither, FBackend, FConfig, FError};
use ddc::{ddc_weights, Ddc, MixerFrequency};
use decode::{decode_f32, validate as validate_samples};
use num_complex::Complex32;
use pfb::{channelise_complex, channelise_real, duplicate_weights, Transform, Work};
use postproc::{dither_key, Post};
use rayon::prelude::*;
use stats::InputStats;

/// CPU backend: rayon over tiles of spectra; FIR, FFT and post-processing fused per tile.
pub struct CpuBackend {
    cfg: FConfig,
    weights: Vec<f32>,
    /// Narrowband: each weight twice, for the complex FIR.
    weights_dup: Vec<f32>,
    transform: Transform,
    post: Post,
    ddc: Option<Ddc>,
    /// Decoded input per pol (reused).
    xbuf: [Vec<f32>; 2],
    /// DDC output per pol (narrowband, reused).
    ubuf: [Vec<Complex32>; 2],
}

impl CpuBackend {
    /// A CPU backend for `cfg` (validated; PFB and DDC weights designed here).
    pub fn new(cfg: FConfig) -> Result<Self, FError> {
        cfg.validate()?;
        let n_pfb = cfg.pfb_channels();
        let weights = pfb_weights(cfg.pfb_step(), cfg.taps, cfg.w_cutoff, cfg.window)?;
        let ddc = match cfg.narrowband {
            None => None,
            Some(nb) => {
                let s = cfg.subsampling();
                let h = ddc_weights(&nb, s, cfg.ddc_taps())?;
                let mixer = MixerFrequency::from_hz(nb.centre_frequency, nb.adc_rate)?;
                Some(Ddc::new(&h, s, mixer))
            }
        };
        let post = Post {
            channels: cfg.channels,
            n_pfb,
            narrowband: cfg.narrowband.is_some(),
            fine_divisor: cfg.internal_decimation(),
            qmax: if cfg.out_bits == 4 { 7.0 } else { 127.0 },
            four_bit: cfg.out_bits == 4,
        };
        let weights_dup = if cfg.narrowband.is_some() {
            duplicate_weights(&weights)
        } else {
            vec![]
        };
        Ok(CpuBackend {
            weights_dup,
            transform: Transform::new(n_pfb, cfg.narrowband.is_some()),
            cfg,
            weights,
            post,
            ddc,
            xbuf: [vec![], vec![]],
            ubuf: [vec![], vec![]],
        })
    }

    /// The PFB weights in use (f32, Σw² = 1).
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    fn validate(&self, block: &Block, out: &[u8]) -> Result<usize, FError> {
        validate_block(&self.cfg, block, out)
    }
}

/// Checks a block and its output buffer against `cfg` (shared by all backends); returns
/// the number of spectra `out` holds.
pub(crate) fn validate_block(cfg: &FConfig, block: &Block, out: &[u8]) -> Result<usize, FError> {
    let m = block.spectra;
    if m == 0 {
        return Err(FError::BadParameter {
            what: "spectra",
            why: "must be positive".into(),
        });
    }
    let row = cfg.channels * 2 * cfg.out_bytes_per_value();
    let n_out = out.len() / row;
    if !out.len().is_multiple_of(row) || !n_out.is_multiple_of(cfg.spectra_per_heap) {
        return Err(FError::BadOutputLength {
            expected: row * cfg.spectra_per_heap * n_out.div_ceil(cfg.spectra_per_heap).max(1),
            got: out.len(),
        });
    }
    if block.out_first.checked_add(m).is_none_or(|end| end > n_out) {
        return Err(FError::BadOutputLength {
            expected: (block.out_first.saturating_add(m))
                .div_ceil(cfg.spectra_per_heap)
                .saturating_mul(cfg.spectra_per_heap * row),
            got: out.len(),
        });
    }
    let needed = cfg.input_samples_needed(m);
    for (p, pol) in block.pols.iter().enumerate() {
        validate_samples(&pol.samples, p)?;
        for (what, len) in [
            ("fine_delay", pol.fine_delay.len()),
            ("phase", pol.phase.len()),
        ] {
            if len != m {
                return Err(FError::BadLength {
                    what,
                    expected: m,
                    got: len,
                });
            }
        }
        if pol.gains.len() != cfg.channels {
            return Err(FError::BadLength {
                what: "gains",
                expected: cfg.channels,
                got: pol.gains.len(),
            });
        }
        for &v in pol.fine_delay.iter().chain(pol.phase) {
            if !v.is_finite() {
                return Err(FError::NotFinite {
                    what: "fine delay / phase",
                    value: v,
                });
            }
        }
        for g in pol.gains {
            if !g.re.is_finite() || !g.im.is_finite() {
                let value = if g.re.is_finite() { g.im } else { g.re } as f64;
                return Err(FError::NotFinite {
                    what: "gain",
                    value,
                });
            }
        }
        let end = pol.offset.saturating_add(needed);
        if end > pol.samples.len() {
            return Err(FError::InputTooShort {
                pol: p,
                needed: end,
                have: pol.samples.len(),
            });
        }
        let s = cfg.subsampling();
        if pol.offset % s != 0 {
            return Err(FError::BadParameter {
                what: "offset",
                why: format!("{} is not a multiple of the subsampling {s}", pol.offset),
            });
        }
    }
    Ok(n_out)
}

/// Computed output of one tile of spectra (all within one heap).
struct Tile {
    first: usize,
    len: usize,
    /// (channel, spectrum-in-tile, pol, value bytes).
    data: Vec<u8>,
}

impl FBackend for CpuBackend {
    fn config(&self) -> &FConfig {
        &self.cfg
    }

    fn process(&mut self, block: &Block, out: &mut [u8]) -> Result<BlockStats, FError> {
        let n_out = self.validate(block, out)?;
        let cfg = &self.cfg;
        let m = block.spectra;
        let needed = cfg.input_samples_needed(m);
        let step = cfg.pfb_step();
        let mut input_stats = None;
        for (p, pol) in block.pols.iter().enumerate() {
            let x = &mut self.xbuf[p];
            x.resize(needed, 0.0);
            decode_f32(&pol.samples, pol.offset, x)?;
            if let Some(ddc) = &self.ddc {
                let u = &mut self.ubuf[p];
                u.resize((m + cfg.taps - 1) * step, Complex32::new(0.0, 0.0));
                ddc.run(x, pol.timestamp.wrapping_add(pol.offset as u64), u);
            }
        }
        if cfg.narrowband.is_none() {
            // Each spectrum counts the last `step` samples of its window.
            let bits = [0, 1].map(|p| block.pols[p].samples.bits());
            let st = [0, 1].map(|p| {
                let x = &self.xbuf[p][(cfg.taps - 1) * step..];
                x[..m * step]
                    .par_chunks(step * 16)
                    .map(|c| {
                        let mut s = InputStats::new(bits[p]);
                        s.add(c);
                        s
                    })
                    .reduce(
                        || InputStats::new(bits[p]),
                        |mut a, b| {
                            a.merge(&b);
                            a
                        },
                    )
            });
            input_stats = Some(st);
        }

        // Tiles of spectra that never straddle a heap boundary.
        let sph = cfg.spectra_per_heap;
        let threads = rayon::current_num_threads().max(1);
        let ts = (m / (4 * threads)).clamp(1, 32);
        let mut tiles = vec![];
        let mut s = 0;
        while s < m {
            let abs = block.out_first + s;
            let len = ts.min(m - s).min(sph - abs % sph);
            tiles.push((s, len));
            s += len;
        }
        let bpv = cfg.out_bytes_per_value();
        let stride = 2 * bpv; // per spectrum: 2 pols
        let dither = cfg.dither == Dither::Uniform;
        let (seed, seq) = (cfg.dither_seed, cfg.feng_id);
        let (weights, weights_dup) = (&self.weights, &self.weights_dup);
        let (transform, post) = (&self.transform, &self.post);
        let (xbuf, ubuf) = (&self.xbuf, &self.ubuf);
        let narrow = self.ddc.is_some();
        let channels = cfg.channels;
        let n_pfb = cfg.pfb_channels();
        let results: Vec<Result<(Tile, [u64; 2]), FError>> = tiles
            .par_iter()
            .map_init(
                || Work::new(n_pfb, transform),
                |work, &(first, len)| {
                    let mut data = vec![0u8; channels * len * stride];
                    let mut sat = [0u64; 2];
                    for ls in 0..len {
                        let s = first + ls;
                        for (p, pol) in block.pols.iter().enumerate() {
                            if narrow {
                                channelise_complex(&ubuf[p], weights_dup, s, transform, work)?;
                            } else {
                                channelise_real(&xbuf[p], weights, s, transform, work)?;
                            }
                            let key = dither.then(|| {
                                dither_key(
                                    seed,
                                    seq,
                                    p,
                                    block.first_spectrum.wrapping_add(s as u64),
                                )
                            });
                            let o = (ls * 2 + p) * bpv;
                            sat[p] += post.spectrum(
                                &work.spec,
                                pol.fine_delay[s],
                                pol.phase[s],
                                pol.gains,
                                key,
                                &mut data[o..],
                                len * stride,
                            );
                        }
                    }
                    Ok((Tile { first, len, data }, sat))
                },
            )
            .collect();
        let mut saturated = [0u64; 2];
        let mut done = Vec::with_capacity(results.len());
        for r in results {
            let (t, sat) = r?;
            saturated[0] += sat[0];
            saturated[1] += sat[1];
            done.push(t);
        }
        // Scatter tiles into (heap, channel) rows, in parallel over rows.
        let row_len = sph * stride;
        let out_first = block.out_first;
        out.par_chunks_mut(row_len)
            .enumerate()
            .for_each(|(r, row)| {
                let (heap, c) = (r / channels, r % channels);
                let (lo, hi) = (heap * sph, (heap + 1) * sph);
                // Tiles are in order of spectrum; pick those within this heap.
                let a = done.partition_point(|t| out_first + t.first < lo);
                let b = done.partition_point(|t| out_first + t.first < hi);
                for t in &done[a..b] {
                    let dst = (out_first + t.first - lo) * stride;
                    let n = t.len * stride;
                    row[dst..dst + n].copy_from_slice(&t.data[c * n..(c + 1) * n]);
                }
            });
        debug_assert_eq!(out.len(), n_out * channels * stride);
        Ok(BlockStats {
            saturated,
            input: input_stats,
        })
    }
}
