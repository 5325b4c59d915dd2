//! Input samples of both polarisations on a common timeline, with per-heap presence, fed
//! chunk by chunk and trimmed as outputs consume it: decoded (int16, for channelisers that
//! take decoded samples) and/or packed as received (for the pipelined GPU channelisers,
//! which decode on the device). A store that keeps only packed samples takes its digitiser
//! statistics from the channelisers ([`SampleStore::add_dig_stats`]).

use crate::chunk::placement::DigitiserPlacement;
use crate::chunk::{Chunk, SpanMissing};
use crate::spead::bitpack;

/// Digitiser statistics per polarisation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputStats {
    /// Heaps received.
    pub heaps: [u64; 2],
    /// Heaps missing inside the received span (not before the first heap or after the last).
    pub missing_heaps: [u64; 2],
    /// Samples at the extreme codes (±(2^(bits−1)−1) or −2^(bits−1)).
    pub clipped_samples: [u64; 2],
    /// Sum of the squared samples (over `stat_samples`).
    pub sum_squares: [f64; 2],
    /// Samples received.
    pub samples: [u64; 2],
    /// Samples that `sum_squares` covers (all received samples when the store decodes).
    pub stat_samples: [u64; 2],
}

impl InputStats {
    /// Mean power relative to a full-scale sine, in dB.
    pub fn rms_dbfs(&self, pol: usize, bits: u32) -> f64 {
        let full = ((1u64 << (bits - 1)) - 1) as f64;
        let p = self.sum_squares[pol] / self.stat_samples[pol].max(1) as f64;
        10.0 * (p / (full * full / 2.0)).log10()
    }
}

/// Samples [base_ts, base_ts + len) of both pols.
pub struct SampleStore {
    /// Samples per digitiser heap.
    pub heap_samples: u64,
    /// Digitiser sample width.
    pub bits: u32,
    /// Timestamp of the first sample held.
    pub base_ts: u64,
    samples: [Vec<i16>; 2],
    /// Packed samples as received (sample i at bit i·bits), when kept.
    packed: Option<[Vec<u8>; 2]>,
    decode: bool,
    /// Samples held per pol.
    len: u64,
    present: [Vec<bool>; 2],
    /// Digitiser statistics so far.
    pub stats: InputStats,
    span: SpanMissing,
    /// Timestamps of the first heap received and the end of the latest one (any pol), on
    /// the current timeline.
    received: Option<(u64, u64)>,
    started: bool,
    /// Times the timeline restarted (the input jumped back, or ahead by more than the gap
    /// the store fills): outputs resynchronise when this changes.
    pub restarts: u64,
}

impl SampleStore {
    /// A store of decoded samples.
    pub fn new(heap_samples: u64, bits: u32) -> Self {
        Self::with_forms(heap_samples, bits, true, false)
    }

    /// A store that keeps decoded samples (`decode`) and/or packed ones (`packed`).
    pub fn with_forms(heap_samples: u64, bits: u32, decode: bool, packed: bool) -> Self {
        SampleStore {
            heap_samples,
            bits,
            base_ts: 0,
            samples: [Vec::new(), Vec::new()],
            packed: packed.then(|| [Vec::new(), Vec::new()]),
            decode,
            len: 0,
            present: [Vec::new(), Vec::new()],
            stats: InputStats::default(),
            span: SpanMissing::new(2),
            received: None,
            started: false,
            restarts: 0,
        }
    }

    /// True until the first chunk arrives.
    pub fn is_empty(&self) -> bool {
        !self.started
    }

    /// Timestamp just past the last sample held.
    pub fn end_ts(&self) -> u64 {
        self.base_ts + self.len
    }

    /// True if the store decodes (and so counts the digitiser statistics itself).
    pub fn decodes(&self) -> bool {
        self.decode
    }

    /// Adds digitiser statistics measured elsewhere (a store that does not decode).
    pub fn add_dig_stats(&mut self, pol: usize, sum_sq: u64, clipped: u64, samples: u64) {
        self.stats.sum_squares[pol] += sum_sq as f64;
        self.stats.clipped_samples[pol] += clipped;
        self.stats.stat_samples[pol] += samples;
    }

    fn packed_bytes(&self, samples: u64) -> usize {
        (samples * self.bits as u64 / 8) as usize
    }

    /// Appends a chunk. Chunks must arrive in increasing order; a gap is filled with absent
    /// heaps (bounded by `max_gap` samples: a larger jump restarts the timeline). Missing
    /// heaps are counted over the received span only ([`SpanMissing`]).
    pub fn append(&mut self, chunk: &Chunk, pl: &DigitiserPlacement, max_gap: u64) {
        let ts = chunk.chunk_id * pl.chunk_samples;
        if !self.started || ts < self.end_ts() || ts - self.end_ts() > max_gap {
            if self.started {
                tracing::warn!(
                    from = self.end_ts(),
                    to = ts,
                    "the input timeline restarts: the input moved back, or ahead by more \
                     than the store fills with absent heaps"
                );
                self.restarts += 1;
                self.received = None;
            }
            self.base_ts = ts;
            for p in 0..2 {
                self.samples[p].clear();
                self.present[p].clear();
            }
            if let Some(pk) = &mut self.packed {
                pk.iter_mut().for_each(Vec::clear);
            }
            self.len = 0;
            self.started = true;
        }
        let gap = ts - self.end_ts();
        self.span.rows(gap / self.heap_samples, &[1, 1], false);
        let gap_bytes = self.packed_bytes(gap);
        if let Some(pk) = &mut self.packed {
            for v in pk.iter_mut() {
                v.resize(v.len() + gap_bytes, 0);
            }
        }
        self.len += gap + pl.chunk_samples;
        for p in 0..2 {
            if self.decode {
                self.samples[p].resize(self.samples[p].len() + gap as usize, 0);
            }
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
                if let Some(pk) = &mut self.packed {
                    let src = chunk.slot(slot);
                    if ok {
                        pk[p].extend_from_slice(src);
                    } else {
                        pk[p].resize(pk[p].len() + src.len(), 0);
                    }
                }
                if !self.decode {
                    if ok {
                        self.stats.heaps[p] += 1;
                        self.stats.samples[p] += hs as u64;
                    }
                    continue;
                }
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
                    self.stats.stat_samples[p] += hs as u64;
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

    /// Packed samples [a, a + len) of `pol` (the range must lie in the store, and the store
    /// keep packed samples): the bytes from the sample at or before `a` a multiple of
    /// `align` (a multiple of 8: a byte boundary) samples into the store, and how many
    /// samples precede `a` in them.
    pub fn packed_slice(
        &self,
        pol: usize,
        a: u64,
        len: usize,
        align: usize,
    ) -> Option<(&[u8], usize)> {
        let pk = self.packed.as_ref()?;
        if align == 0 || !align.is_multiple_of(8) {
            return None;
        }
        let i = (a.checked_sub(self.base_ts)?) as usize;
        let start = i / align * align;
        let b0 = start * self.bits as usize / 8;
        let b1 = ((i + len) * self.bits as usize).div_ceil(8);
        Some((pk[pol].get(b0..b1)?, i - start))
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
        let nb = self.packed_bytes(n as u64);
        for p in 0..2 {
            if self.decode {
                self.samples[p].drain(..n);
            }
            if let Some(pk) = &mut self.packed {
                pk[p].drain(..nb);
            }
            self.present[p].drain(..heaps);
        }
        self.base_ts += n as u64;
        self.len -= n as u64;
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

    /// A store keeping packed samples only: the packed bytes of a range (from a byte
    /// boundary, with the samples to skip) unpack to the samples received, gaps read as zero,
    /// trimming keeps the timeline, and heaps are counted without decoding.
    #[test]
    fn packed_store_slices_match_the_input() {
        let pl = DigitiserPlacement::new(16, 10, 64).unwrap();
        let mut st = SampleStore::with_forms(16, 10, false, true);
        let val = |p: usize, t: u64| ((t * 7 + p as u64 * 3) % 500) as i16 - 250;
        let add = |st: &mut SampleStore, id: u64| {
            let mut c = chunk(
                &pl,
                id,
                &[(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3)],
            );
            for p in 0..2 {
                for h in 0..pl.heaps_per_pol() {
                    let t0 = id * 64 + h as u64 * 16;
                    let s: Vec<i16> = (0..16).map(|i| val(p, t0 + i)).collect();
                    let (k, sb) = (pl.slot(p, h), c.slot_bytes);
                    bitpack::pack(&s, 10, &mut c.data[k * sb..(k + 1) * sb]);
                }
            }
            st.append(&c, &pl, 1024);
        };
        add(&mut st, 1);
        add(&mut st, 3); // chunk 2 never arrived: a gap of zeros
        assert!(!st.decodes());
        assert_eq!(st.stats.heaps, [8, 6]);
        assert_eq!(st.stats.stat_samples, [0, 0]);
        st.add_dig_stats(0, 100, 2, 50);
        assert_eq!(st.stats.clipped_samples[0], 2);
        st.trim_before(80);
        for (a, len, align) in [(83u64, 30usize, 8usize), (100, 60, 8), (90, 100, 24)] {
            for p in 0..2 {
                let (b, skip) = st.packed_slice(p, a, len, align).unwrap();
                assert_eq!((a - st.base_ts - skip as u64) % align as u64, 0);
                let mut s = vec![0i16; skip + len];
                bitpack::unpack(&b[..bitpack::packed_len(skip + len, 10)], 10, &mut s);
                for (i, &v) in s[skip..].iter().enumerate() {
                    let t = a + i as u64;
                    let present = (64..128).contains(&t) || (192..256).contains(&t);
                    let heap_ok = p == 0 || t % 64 < 48;
                    let want = if present && heap_ok { val(p, t) } else { 0 };
                    assert_eq!(v, want, "pol {p} t {t}");
                }
            }
        }
        assert!(
            st.packed_slice(0, 83, 30, 12).is_none(),
            "align must be a multiple of 8"
        );
        assert!(st.packed_slice(0, 0, 30, 8).is_none(), "before the store");
    }
}
