//! Decoded input samples of both polarisations on a common timeline, with per-heap
//! presence, fed chunk by chunk and trimmed as outputs consume it.

use crate::bitpack;
use crate::chunk::placement::DigitiserPlacement;
use crate::chunk::{Chunk, SpanMissing};

/// Digitiser statistics per polarisation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputStats {
    pub heaps: [u64; 2],
    /// Heaps missing inside the received span (not before the first heap or after the last).
    pub missing_heaps: [u64; 2],
    /// Samples at the extreme codes (±(2^(bits−1)−1) or −2^(bits−1)).
    pub clipped_samples: [u64; 2],
    pub sum_squares: [f64; 2],
    pub samples: [u64; 2],
}

impl InputStats {
    /// Mean power relative to a full-scale sine, in dB.
    pub fn rms_dbfs(&self, pol: usize, bits: u32) -> f64 {
        let full = ((1u64 << (bits - 1)) - 1) as f64;
        let p = self.sum_squares[pol] / self.samples[pol].max(1) as f64;
        10.0 * (p / (full * full / 2.0)).log10()
    }
}

/// Samples [base_ts, base_ts + len) of both pols.
pub struct SampleStore {
    pub heap_samples: u64,
    pub bits: u32,
    pub base_ts: u64,
    samples: [Vec<i16>; 2],
    present: [Vec<bool>; 2],
    pub stats: InputStats,
    span: SpanMissing,
    /// Timestamps of the first heap received and the end of the latest one (any pol).
    received: Option<(u64, u64)>,
    started: bool,
}

impl SampleStore {
    pub fn new(heap_samples: u64, bits: u32) -> Self {
        SampleStore {
            heap_samples,
            bits,
            base_ts: 0,
            samples: [Vec::new(), Vec::new()],
            present: [Vec::new(), Vec::new()],
            stats: InputStats::default(),
            span: SpanMissing::new(2),
            received: None,
            started: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.started
    }

    pub fn end_ts(&self) -> u64 {
        self.base_ts + self.samples[0].len() as u64
    }

    /// Appends a chunk. Chunks must arrive in increasing order; a gap is filled with absent
    /// heaps (bounded by `max_gap` samples: a larger jump restarts the timeline). Missing
    /// heaps are counted over the received span only ([`SpanMissing`]).
    pub fn append(&mut self, chunk: &Chunk, pl: &DigitiserPlacement, max_gap: u64) {
        let ts = chunk.chunk_id * pl.chunk_samples;
        if !self.started || ts < self.end_ts() || ts - self.end_ts() > max_gap {
            self.base_ts = ts;
            for p in 0..2 {
                self.samples[p].clear();
                self.present[p].clear();
            }
            self.started = true;
        }
        let gap = ts - self.end_ts();
        self.span.rows(gap / self.heap_samples, &[1, 1], false);
        for p in 0..2 {
            self.samples[p].resize(self.samples[p].len() + gap as usize, 0);
            self.present[p].resize(
                self.present[p].len() + (gap / self.heap_samples) as usize,
                false,
            );
        }
        let hs = self.heap_samples as usize;
        let clip_hi = (1i16 << (self.bits - 1)) - 1;
        for p in 0..2 {
            for h in 0..pl.heaps_per_pol() {
                let slot = pl.slot(p, h);
                let ok = chunk.present(slot);
                self.present[p].push(ok);
                let start = self.samples[p].len();
                self.samples[p].resize(start + hs, 0);
                if ok {
                    let dst = &mut self.samples[p][start..];
                    bitpack::unpack(chunk.slot(slot), self.bits, dst);
                    let mut clipped = 0u64;
                    let mut sq = 0i64;
                    for &s in dst.iter() {
                        clipped += (s >= clip_hi || s <= -clip_hi) as u64;
                        sq += s as i64 * s as i64;
                    }
                    self.stats.heaps[p] += 1;
                    self.stats.clipped_samples[p] += clipped;
                    self.stats.sum_squares[p] += sq as f64;
                    self.stats.samples[p] += hs as u64;
                }
            }
        }
        for h in 0..pl.heaps_per_pol() {
            let m = [0, 1].map(|p| !chunk.present(pl.slot(p, h)) as u64);
            let any = (0..2).any(|p| chunk.received[pl.slot(p, h)] > 0);
            self.span.row(&m, any);
            if any {
                let t = ts + h as u64 * self.heap_samples;
                let first = self.received.map_or(t, |r| r.0);
                self.received = Some((first, t + self.heap_samples));
            }
        }
        self.stats.missing_heaps = [self.span.missing[0], self.span.missing[1]];
    }

    /// The received span: from the first heap that arrived to the end of the latest one.
    /// Outputs are made inside it only, so the unfilled head of the first chunk and tail of
    /// the last are neither processed nor counted as skipped.
    pub fn received_span(&self) -> Option<(u64, u64)> {
        self.received
    }

    /// True if every heap overlapping [a, b) of `pol` is present (and in the store).
    pub fn all_present(&self, pol: usize, a: u64, b: u64) -> bool {
        if a < self.base_ts || b > self.end_ts() {
            return false;
        }
        let h0 = ((a - self.base_ts) / self.heap_samples) as usize;
        let h1 = (b - self.base_ts).div_ceil(self.heap_samples) as usize;
        self.present[pol][h0..h1].iter().all(|&x| x)
    }

    /// Samples [a, a + len) of `pol`; the range must lie in the store.
    pub fn slice(&self, pol: usize, a: u64, len: usize) -> &[i16] {
        let off = (a - self.base_ts) as usize;
        &self.samples[pol][off..off + len]
    }

    /// Drops samples before `ts` (rounded down to a heap boundary).
    pub fn trim_before(&mut self, ts: u64) {
        if ts <= self.base_ts {
            return;
        }
        let heaps = ((ts.min(self.end_ts()) - self.base_ts) / self.heap_samples) as usize;
        if heaps == 0 {
            return;
        }
        let n = heaps * self.heap_samples as usize;
        for p in 0..2 {
            self.samples[p].drain(..n);
            self.present[p].drain(..heaps);
        }
        self.base_ts += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(pl: &DigitiserPlacement, id: u64, present: &[(usize, usize)]) -> Chunk {
        let mut c = Chunk::new(
            crate::chunk::Placement::n_slots(pl),
            crate::chunk::Placement::slot_bytes(pl),
        );
        c.chunk_id = id;
        for &(p, h) in present {
            c.received[pl.slot(p, h)] = c.slot_bytes as u32;
        }
        c
    }

    /// The unfilled head of the first chunk and tail of the last are not missing; a gap
    /// between chunks (a chunk that never arrived) and a lone absent pol are.
    #[test]
    fn missing_heaps_inside_the_received_span_only() {
        let pl = DigitiserPlacement::new(8, 8, 32).unwrap();
        let mut st = SampleStore::new(8, 8);
        st.append(&chunk(&pl, 0, &[(0, 2), (1, 2), (0, 3), (1, 3)]), &pl, 128);
        assert_eq!(st.stats.missing_heaps, [0, 0]);
        st.append(&chunk(&pl, 2, &[(0, 0)]), &pl, 128);
        assert_eq!(st.stats.heaps, [3, 2]);
        assert_eq!(st.stats.missing_heaps, [4, 5]);
        assert_eq!(st.received_span(), Some((16, 72)));
        assert!(st.all_present(0, 16, 32) && !st.all_present(0, 0, 24));
    }
}
