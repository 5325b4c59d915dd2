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

/// Which heaps of the replay ring a [`Window`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Ring heap index of the window's first heap.
    pub first_heap: u64,
    /// Heaps in the window (it wraps around the ring).
    pub n_heaps: usize,
    /// Heaps in the ring (`--max-period` / heap samples): the dither repeats with the ring,
    /// the signal with its own period (which divides the ring).
    pub ring_heaps: u64,
}

/// Generates heaps `first_heap .. first_heap + n_heaps` (indices modulo the ring's heap
/// count) of stream `stream`. The signal is evaluated with its period `tb.period`, which
/// must divide the ring; a heap that crosses a period boundary is evaluated in pieces.
pub fn generate(
    sig: &StreamSignal,
    tb: &Timebase,
    fmt: HeapFormat,
    span: Span,
    dither_seed: u64,
    stream: u64,
) -> Window {
    let HeapFormat { bits, heap_samples } = fmt;
    let heap_bytes = bitpack::packed_len(heap_samples, bits);
    let ring_heaps = span.ring_heaps.max(1);
    let scale = ((1i64 << (bits - 1)) - 1) as f64;
    let n_heaps = span.n_heaps;
    let mut data = vec![0u8; n_heaps * heap_bytes];
    let mut saturated = vec![0u32; n_heaps];
    let period = tb.period.max(1);
    data.par_chunks_mut(heap_bytes)
        .zip(saturated.par_iter_mut())
        .enumerate()
        .for_each_init(
            || (vec![0f64; heap_samples], vec![0i16; heap_samples]),
            |(x, q), (k, (out, sat))| {
                let h = (span.first_heap + k as u64) % ring_heaps;
                let start = h * heap_samples as u64;
                x.iter_mut().for_each(|v| *v = 0.0);
                // Pieces that do not cross the signal period's end.
                let mut i = 0usize;
                while i < heap_samples {
                    let s = start + i as u64;
                    let left = (period - s % period) as usize;
                    let n = left.min(heap_samples - i);
                    sig.signal.eval_add(tb, s, &mut x[i..i + n]);
                    i += n;
                }
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
        first_heap: span.first_heap,
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
        let span = |first_heap, n_heaps| Span {
            first_heap,
            n_heaps,
            ring_heaps: 16,
        };
        let a = generate(&sig, &tb, fmt, span(10, 10), 99, 0);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let b = pool.install(|| generate(&sig, &tb, fmt, span(10, 10), 99, 0));
        assert_eq!(a.data, b.data);
        // Wraps around the period (16 heaps): window index 6 is heap 16 ≡ heap 0.
        let c = generate(&sig, &tb, fmt, span(0, 1), 99, 0);
        assert_eq!(a.heap(6), c.heap(0));
        assert_ne!(a.heap(5), c.heap(0));
        // Another stream gets other dither.
        let d = generate(&sig, &tb, fmt, span(10, 10), 99, 1);
        assert_ne!(a.data, d.data);
    }

    /// A ring (`--max-period`) of 8 heaps holding a signal of period 2 heaps: the signal
    /// repeats every 2 heaps, the dither only with the ring; a window starting at ring heap 6
    /// wraps to heap 0.
    #[test]
    fn ring_longer_than_the_period() {
        let sig = parse("cw(0.4, 1e8) + wgn(0.1);", &mut || 7)
            .unwrap()
            .remove(0);
        let undithered = StreamSignal {
            dither: false,
            ..sig.clone()
        };
        let tb = Timebase {
            adc_rate: 1712e6,
            period: 2 * 4096,
        };
        let fmt = HeapFormat {
            bits: 10,
            heap_samples: 4096,
        };
        let ring = |first_heap, n_heaps| Span {
            first_heap,
            n_heaps,
            ring_heaps: 8,
        };
        let w = generate(&undithered, &tb, fmt, ring(0, 8), 3, 0);
        for h in 2..8 {
            assert_eq!(w.heap(h), w.heap(h % 2), "heap {h}");
        }
        assert_ne!(w.heap(0), w.heap(1));
        let d = generate(&sig, &tb, fmt, ring(0, 8), 3, 0);
        assert_ne!(d.heap(0), d.heap(2), "the dither runs over the ring");
        let wrapped = generate(&sig, &tb, fmt, ring(6, 4), 3, 0);
        assert_eq!(wrapped.heap(0), d.heap(6));
        assert_eq!(wrapped.heap(2), d.heap(0));
        assert_eq!(wrapped.heap(3), d.heap(1));
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
            Span {
                first_heap: 0,
                n_heaps: 1,
                ring_heaps: 1,
            },
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
            Span {
                first_heap: 0,
                n_heaps: 1,
                ring_heaps: 1,
            },
            5,
            0,
        );
        assert_eq!(w.saturated[0], 4096);
    }
}
