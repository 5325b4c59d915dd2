//! fgpu's chunk sizes from `--send-chunk-jones` and `--max-delay-diff`, as katgpucbf derives
//! them ([`ChunkSizing`]):
//!
//! * an output chunk holds `--send-chunk-jones` Jones vectors rounded up to a multiple of
//!   every output's `jones_per_batch` (their least common multiple), so it is whole batches
//!   of every output; its spectra are `chunk_jones / channels`. gpucbf hands each batch to
//!   the send thread as it is computed; the send queue holds two output chunks of every
//!   output ([`ChunkSizing::send_queue`], katgpucbf keeps a ring of output chunks), and
//!   those chunks count in the memory check;
//! * the input overlap is `--max-delay-diff` plus the longest input window of the outputs
//!   (the samples one spectrum reads: taps × samples per spectrum, plus the DDC filter for a
//!   narrowband output). katgpucbf copies that many samples from each receive chunk onto
//!   the previous one; gpucbf's sample store keeps the previous chunks instead, so the
//!   overlap counts as the receive chunks held for it (memory check) and `?delays` takes
//!   delays of at most `--max-delay-diff` samples.

use super::spec::WidebandSpec;
use crate::compute::fengine::{Dither, FConfig, Narrowband, NarrowbandMode, Window};
use crate::engines::common::ConfigError;

/// Largest `--max-delay-diff` (2^47 samples: half the 48-bit timestamp space).
pub const MAX_DELAY_DIFF: u64 = 1 << 47;

/// Most batches the send queue holds (two output chunks of every output, up to this; the
/// memory check counts the chunks whole).
pub const MAX_SEND_QUEUE: u64 = 1 << 15;

/// The chunk sizes of an fgpu run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSizing {
    /// Jones vectors per output chunk (a multiple of every output's `jones_per_batch`).
    pub chunk_jones: u64,
    /// Largest delay `?delays` takes, in samples (`--max-delay-diff`).
    pub max_delay_diff: u64,
    /// Input samples per pol a receive chunk needs past its end: `--max-delay-diff` plus
    /// the longest input window.
    pub overlap: u64,
    /// Receive chunks held for the overlap (`ceil(overlap / --recv-chunk-samples)`).
    pub overlap_chunks: u64,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Input samples one spectrum of `o` reads (its filter window).
pub fn input_window(o: &WidebandSpec) -> u64 {
    let f = FConfig {
        channels: o.channels,
        taps: o.taps,
        w_cutoff: o.w_cutoff,
        window: Window::Hann,
        out_bits: 8,
        dither: Dither::None,
        dither_seed: 0,
        feng_id: 0,
        n_ants: 1,
        spectra_per_heap: o.spectra_per_heap(),
        narrowband: o.narrowband.map(|nb| Narrowband {
            decimation: nb.decimation,
            centre_frequency: nb.centre_frequency,
            adc_rate: 1.0,
            ddc_taps: nb.ddc_taps,
            weight_pass: nb.weight_pass,
            mode: match nb.pass_bandwidth {
                Some(pass_bandwidth) => NarrowbandMode::NoDiscard { pass_bandwidth },
                None => NarrowbandMode::Discard,
            },
        }),
    };
    f.input_samples_needed(1) as u64
}

impl ChunkSizing {
    /// The sizes for `outputs` (at least one, each checked), or the error naming the option.
    pub fn new(
        send_chunk_jones: u64,
        max_delay_diff: u64,
        recv_chunk_samples: u64,
        outputs: &[WidebandSpec],
    ) -> Result<Self, ConfigError> {
        if send_chunk_jones == 0 {
            return Err(ConfigError::rule(
                "--send-chunk-jones",
                "must be at least 1",
            ));
        }
        if max_delay_diff > MAX_DELAY_DIFF {
            return Err(ConfigError::rule(
                format!("--max-delay-diff {max_delay_diff}"),
                format!("must be at most 2^47 = {MAX_DELAY_DIFF} samples"),
            ));
        }
        let mut lcm = 1u64;
        for o in outputs {
            let j = o.jones_per_batch as u64;
            lcm = (lcm / gcd(lcm, j)).checked_mul(j).ok_or_else(|| {
                ConfigError::rule(
                    "jones_per_batch",
                    "the outputs' batch sizes have a least common multiple past 2^64",
                )
            })?;
        }
        let chunk_jones = send_chunk_jones
            .div_ceil(lcm)
            .checked_mul(lcm)
            .ok_or_else(|| {
                ConfigError::rule(
                    format!("--send-chunk-jones {send_chunk_jones}"),
                    format!("rounded up to a multiple of {lcm} (jones_per_batch) is past 2^64"),
                )
            })?;
        let window = outputs.iter().map(input_window).max().unwrap_or(0);
        let overlap = max_delay_diff + window;
        Ok(ChunkSizing {
            chunk_jones,
            max_delay_diff,
            overlap,
            overlap_chunks: overlap.div_ceil(recv_chunk_samples.max(1)),
        })
    }

    /// Spectra of output `o` in one output chunk.
    pub fn spectra_per_chunk(&self, o: &WidebandSpec) -> u64 {
        self.chunk_jones / o.channels as u64
    }

    /// Batches of output `o` in one output chunk.
    pub fn batches_per_chunk(&self, o: &WidebandSpec) -> u64 {
        self.chunk_jones / o.jones_per_batch as u64
    }

    /// ADC samples an output chunk of `o` spans.
    pub fn chunk_step(&self, o: &WidebandSpec) -> u64 {
        self.batches_per_chunk(o) * o.batch_step()
    }

    /// Batches the send queue holds: two output chunks of every output (at least 2, at
    /// most [`MAX_SEND_QUEUE`]).
    pub fn send_queue(&self, outputs: &[WidebandSpec]) -> usize {
        let per: u64 = outputs.iter().map(|o| self.batches_per_chunk(o)).sum();
        2u64.saturating_mul(per).clamp(2, MAX_SEND_QUEUE) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::fgpu::spec::{parse_narrowband, parse_wideband};

    fn wb(channels: usize, jones: usize) -> WidebandSpec {
        parse_wideband(&format!(
            "name=w{channels},channels={channels},dst=127.0.0.1:7150,jones_per_batch={jones}"
        ))
        .unwrap()
    }

    /// katgpucbf's example: 4096-channel wideband and 32768-channel narrowband, both with
    /// jones_per_batch 2^20: an output chunk of 2^23 Jones is 8 batches, 2048 and 256
    /// spectra; the overlap is max-delay-diff plus the narrowband window.
    #[test]
    fn sizes_as_katgpucbf() {
        let w = wb(4096, 1 << 20);
        let n = parse_narrowband(
            "name=nb,channels=32768,dst=127.0.0.1:7151,jones_per_batch=1048576,\
             decimation=8,centre_frequency=284e6,ddc_taps=128",
        )
        .unwrap();
        let s = ChunkSizing::new(1 << 23, 1 << 20, 1 << 25, &[w.clone(), n.clone()]).unwrap();
        assert_eq!(s.chunk_jones, 1 << 23);
        assert_eq!(
            (s.spectra_per_chunk(&w), s.spectra_per_chunk(&n)),
            (2048, 256)
        );
        assert_eq!(s.batches_per_chunk(&w), 8);
        assert_eq!(s.chunk_step(&w), 2048 * 8192);
        // Two chunks of both outputs: 2 × (8 + 8) batches, katgpucbf's default queue of 16
        // for one output.
        assert_eq!(s.send_queue(&[w.clone(), n.clone()]), 32);
        assert_eq!(s.send_queue(std::slice::from_ref(&w)), 16);
        assert_eq!(input_window(&w), 16 * 8192);
        // Narrowband (discard mode): 16 taps of 2 × 32768 complex samples, subsampled by
        // the decimation, plus the DDC filter.
        assert_eq!(input_window(&n), (16 * 2 * 32768 - 1) * 8 + 128);
        assert_eq!(s.overlap, (1 << 20) + input_window(&n));
        assert_eq!(s.overlap_chunks, 1);
        // Rounded up to the lcm of the batch sizes (3 × 2^16 and 2^18: 3 × 2^18).
        let odd = [wb(256, 3 << 16), wb(1024, 1 << 18)];
        let s = ChunkSizing::new(1 << 20, 0, 1 << 18, &odd).unwrap();
        assert_eq!(s.chunk_jones, 6 << 18);
        assert_eq!(
            (s.batches_per_chunk(&odd[0]), s.batches_per_chunk(&odd[1])),
            (8, 6)
        );
        assert_eq!(
            ChunkSizing::new(1, 0, 1 << 18, &odd).unwrap().chunk_jones,
            3 << 18
        );
        // The overlap in receive chunks of 2^18: 2^20 + 16 × 512 samples.
        let s = ChunkSizing::new(1 << 23, 1 << 20, 1 << 18, &[wb(256, 1 << 16)]).unwrap();
        assert_eq!((s.overlap, s.overlap_chunks), ((1 << 20) + 8192, 5));
    }

    #[test]
    fn impossible_values_are_refused_by_name() {
        let o = [wb(256, 1 << 16)];
        let e = ChunkSizing::new(0, 0, 1 << 18, &o).unwrap_err().to_string();
        assert!(e.starts_with("--send-chunk-jones"), "{e}");
        let e = ChunkSizing::new(1, (1 << 47) + 1, 1 << 18, &o)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--max-delay-diff"), "{e}");
        let e = ChunkSizing::new(u64::MAX, 0, 1 << 18, &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("past 2^64"), "{e}");
        // 2^15 batches of 2^16 Jones in a chunk: the queue stops at 2^15 batches.
        let s = ChunkSizing::new(1 << 31, 0, 1 << 18, &o).unwrap();
        assert_eq!(s.send_queue(&o), 1 << 15);
    }
}
