//! Turns a stream's signal into packed digitiser heaps: evaluate, dither, quantise
//! (round half to even, clip to ±(2^(bits−1)−1)), count saturation, pack big-endian.
//! Heaps are independent, so they are generated in parallel (rayon).

use rayon::prelude::*;

use super::signal::{mix64, unit, StreamSignal, Timebase};
use crate::spead::bitpack;

/// Packed heaps for a run of consecutive heap indices of one stream.
pub struct Window {
    /// Samples per heap.
    pub heap_samples: usize,
    /// Packed bytes per heap.
    pub heap_bytes: usize,
    /// Period heap index of the first heap in the window.
    pub first_heap: u64,
    /// `n_heaps × heap_bytes` packed samples.
    pub data: Vec<u8>,
    /// Clipped samples per heap.
    pub saturated: Vec<u32>,
}

impl Window {
    /// Heaps in the window.
    pub fn n_heaps(&self) -> usize {
        self.saturated.len()
    }

    /// Packed samples of heap `i` of the window.
    pub fn heap(&self, i: usize) -> &[u8] {
        &self.data[i * self.heap_bytes..(i + 1) * self.heap_bytes]
    }
}

/// Sample width and heap length of a digitiser stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapFormat {
    /// Bits per sample.
    pub bits: u32,
    /// Samples per heap.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::dsim::signal::{parse, Signal};

    #[test]
    fn quantiser_rounds_half_even_and_clips() {
        assert_eq!(quantise(2.5, 511.0), (2, false));
        assert_eq!(quantise(3.5, 511.0), (4, false));
        assert_eq!(quantise(-0.5, 511.0), (0, false));
        assert_eq!(quantise(511.4, 511.0), (511, false));
        assert_eq!(quantise(511.5, 511.0), (511, true));
        assert_eq!(quantise(-900.0, 511.0), (-511, true));
        assert_eq!(quantise(f64::NAN, 511.0), (0, true));
    }

    #[test]
    fn generation_is_deterministic_and_thread_independent() {
        let sig = parse("cw(0.4, 1e8) + wgn(0.1);", &mut || 42)
            .unwrap()
            .remove(0);
        let tb = Timebase {
            adc_rate: 1712e6,
            period: 1 << 16,
        };
        let fmt = HeapFormat {
            bits: 10,
            heap_samples: 4096,
        };
        let a = generate(&sig, &tb, fmt, 10, 10, 99, 0);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let b = pool.install(|| generate(&sig, &tb, fmt, 10, 10, 99, 0));
        assert_eq!(a.data, b.data);
        // Wraps around the period (16 heaps): window index 6 is heap 16 ≡ heap 0.
        let c = generate(&sig, &tb, fmt, 0, 1, 99, 0);
        assert_eq!(a.heap(6), c.heap(0));
        assert_ne!(a.heap(5), c.heap(0));
        // Another stream gets other dither.
        let d = generate(&sig, &tb, fmt, 10, 10, 99, 1);
        assert_ne!(a.data, d.data);
    }

    #[test]
    fn saturation_counts_and_dither_range() {
        let sig = StreamSignal {
            signal: std::sync::Arc::new(Signal::Const(0.999)),
            dither: true,
        };
        let tb = Timebase {
            adc_rate: 1e6,
            period: 4096,
        };
        let w = generate(
            &sig,
            &tb,
            HeapFormat {
                bits: 10,
                heap_samples: 4096,
            },
            0,
            1,
            5,
            0,
        );
        // 0.999·511 = 510.489; + dither in [−0.5, 0.5) rounds to 510 or 511, never clips.
        assert_eq!(w.saturated[0], 0);
        let mut x = vec![0i16; 4096];
        crate::spead::bitpack::unpack(w.heap(0), 10, &mut x);
        assert!(x.iter().all(|&v| v == 510 || v == 511));
        assert!(x.iter().filter(|&&v| v == 511).count() > 1000);
        let sig = StreamSignal {
            signal: std::sync::Arc::new(Signal::Const(1.2)),
            dither: false,
        };
        let w = generate(
            &sig,
            &tb,
            HeapFormat {
                bits: 4,
                heap_samples: 4096,
            },
            0,
            1,
            5,
            0,
        );
        assert_eq!(w.saturated[0], 4096);
    }
}
