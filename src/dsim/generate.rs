//! Turns a stream's signal into packed digitiser heaps: evaluate, dither, quantise
//! (round half to even, clip to ±(2^(bits−1)−1)), count saturation, pack big-endian.
//! Heaps are independent, so they are generated in parallel (rayon).

use rayon::prelude::*;

use super::signal::{mix64, unit, StreamSignal, Timebase};
use crate::bitpack;

/// Packed heaps for a run of consecutive heap indices of one stream.
pub struct Window {
    pub heap_samples: usize,
    pub heap_bytes: usize,
    /// Period heap index of the first heap in the window.
    pub first_heap: u64,
    /// `n_heaps × heap_bytes` packed samples.
    pub data: Vec<u8>,
    /// Clipped samples per heap.
    pub saturated: Vec<u32>,
}

impl Window {
    pub fn n_heaps(&self) -> usize {
        self.saturated.len()
    }

    pub fn heap(&self, i: usize) -> &[u8] {
        &self.data[i * self.heap_bytes..(i + 1) * self.heap_bytes]
    }
}

/// Sample width and heap length of a digitiser stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapFormat {
    pub bits: u32,
    pub heap_samples: usize,
}

/// Dither value in [−0.5, 0.5) for sample `i` of stream `stream` (counter based).
#[inline]
pub fn dither(seed: u64, stream: u64, i: u64) -> f64 {
    unit(mix64(seed ^ mix64((stream << 48) ^ i))) - 0.5
}

/// Quantises one value: returns (code, clipped).
#[inline]
pub fn quantise(x: f64, scale: f64) -> (i16, bool) {
    let q = x.round_ties_even();
    if q > scale {
        (scale as i16, true)
    } else if q < -scale {
        (-scale as i16, true)
    } else if q.is_nan() {
        (0, true)
    } else {
        (q as i16, false)
    }
}

/// Generates heaps `first_heap .. first_heap + n_heaps` (indices modulo the period's heap
/// count) of stream `stream`.
pub fn generate(
    sig: &StreamSignal,
    tb: &Timebase,
    fmt: HeapFormat,
    first_heap: u64,
    n_heaps: usize,
    dither_seed: u64,
    stream: u64,
) -> Window {
    let HeapFormat { bits, heap_samples } = fmt;
    let heap_bytes = bitpack::packed_len(heap_samples, bits);
    let heaps_per_period = tb.period / heap_samples as u64;
    let scale = ((1i64 << (bits - 1)) - 1) as f64;
    let mut data = vec![0u8; n_heaps * heap_bytes];
    let mut saturated = vec![0u32; n_heaps];
    data.par_chunks_mut(heap_bytes)
        .zip(saturated.par_iter_mut())
        .enumerate()
        .for_each_init(
            || (vec![0f64; heap_samples], vec![0i16; heap_samples]),
            |(x, q), (k, (out, sat))| {
                let h = (first_heap + k as u64) % heaps_per_period;
                let start = h * heap_samples as u64;
                x.iter_mut().for_each(|v| *v = 0.0);
                sig.signal.eval_add(tb, start, x);
                let mut n = 0u32;
                for (i, (xv, qv)) in x.iter().zip(q.iter_mut()).enumerate() {
                    let mut v = xv * scale;
                    if sig.dither {
                        v += dither(dither_seed, stream, start + i as u64);
                    }
                    let (code, clipped) = quantise(v, scale);
                    *qv = code;
                    n += clipped as u32;
                }
                *sat = n;
                bitpack::pack(q, bits, out);
            },
        );
    Window {
        heap_samples,
        heap_bytes,
        first_heap,
        data,
        saturated,
    }
}
