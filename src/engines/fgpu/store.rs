//! Input samples of both polarisations on a common timeline, with per-heap presence, fed
//! chunk by chunk and trimmed as outputs consume it: decoded (int16, for channelisers that
//! take decoded samples) and/or packed as received (for the pipelined GPU channelisers,
//! which decode on the device). A store that keeps only packed samples takes its digitiser
//! statistics from the channelisers ([`SampleStore::add_dig_stats`]).
//!
//! Packed samples are not copied: the store keeps the received chunks themselves (one
//! segment per chunk, both pols; a chunk that never arrived is an empty segment) and hands
//! out slices of their memory, which is page-locked for the GPU where one is present, so
//! the channelisers upload straight from it. Chunks the outputs no longer need are
//! released ([`SampleStore::take_released`]) for the engine to recycle once no upload
//! still reads them.

use std::collections::VecDeque;

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

/// One chunk's span of the timeline in a packed store: the chunk, or `None` for a chunk
/// that never arrived (its samples read as zeros).
struct Segment {
    /// Timestamp of the segment's first sample.
    ts: u64,
    chunk: Option<Chunk>,
}

/// The packed form of a store: segments of `seg_samples` samples back to back, covering at
/// least [base_ts, end_ts), and the chunks trimmed out and not yet taken.
struct Packed {
    segments: VecDeque<Segment>,
    seg_samples: u64,
    /// Packed bytes of one pol in a segment.
    pol_bytes: usize,
    released: Vec<Chunk>,
}

impl Packed {
    fn release_all(&mut self) {
        let chunks = self.segments.drain(..).filter_map(|s| s.chunk);
        self.released.extend(chunks);
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
    /// Packed samples as received, when kept: the chunks that hold them, oldest first.
    packed: Option<Packed>,
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
            packed: packed.then(|| Packed {
                segments: VecDeque::new(),
                seg_samples: 0,
                pol_bytes: 0,
                released: Vec::new(),
            }),
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

    /// Appends a chunk. Chunks must arrive in increasing order; a gap is filled with absent
    /// heaps (bounded by `max_gap` samples: a larger jump restarts the timeline). Missing
    /// heaps are counted over the received span only ([`SpanMissing`]). A store that keeps
    /// packed samples keeps the chunk (returning `None`); otherwise the chunk comes back for
    /// reuse.
    pub fn append(&mut self, chunk: Chunk, pl: &DigitiserPlacement, max_gap: u64) -> Option<Chunk> {
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
                pk.release_all();
                pk.seg_samples = pl.chunk_samples;
                pk.pol_bytes = pl.heaps_per_pol() * chunk.slot_bytes;
            }
            self.len = 0;
            self.started = true;
        }
        let gap = ts - self.end_ts();
        self.span.rows(gap / self.heap_samples, &[1, 1], false);
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
        let Some(pk) = &mut self.packed else {
            return Some(chunk);
        };
        // Each pol's heaps lie back to back in the chunk (pol-major slots).
        debug_assert!((0..2).all(|p| pl.slot(p, 0) == p * pl.heaps_per_pol()));
        let mut at = ts - gap;
        while at < ts {
            pk.segments.push_back(Segment {
                ts: at,
                chunk: None,
            });
            at += pk.seg_samples;
        }
        pk.segments.push_back(Segment {
            ts,
            chunk: Some(chunk),
        });
        None
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
    /// samples precede `a` in them. The bytes are the chunk's own memory when the range lies
    /// in one chunk; a range across chunks is joined in `join` (absent chunks read as zeros).
    pub fn packed_slice<'a>(
        &'a self,
        pol: usize,
        a: u64,
        len: usize,
        align: usize,
        join: &'a mut Vec<u8>,
    ) -> Option<(&'a [u8], usize)> {
        let pk = self.packed.as_ref()?;
        if align == 0 || !align.is_multiple_of(8) || pol > 1 {
            return None;
        }
        let i = (a.checked_sub(self.base_ts)?) as usize;
        if a + len as u64 > self.end_ts() {
            return None;
        }
        let start = i / align * align;
        let bits = self.bits as usize;
        // Byte offsets from the first segment's start: the store's base is a whole number of
        // heaps (whole bytes) into it, and `start` a multiple of 8 samples past the base.
        let seg0 = pk.segments.front()?.ts;
        let base = ((self.base_ts - seg0) / self.heap_samples) as usize
            * (self.heap_samples as usize * bits / 8);
        let b0 = base + start * bits / 8;
        let b1 = base + ((i + len) * bits).div_ceil(8);
        if b1 <= b0 {
            return Some((&[], i - start));
        }
        let pb = pk.pol_bytes;
        let piece = |k: usize, from: usize, to: usize| -> Option<Option<&'a [u8]>> {
            let seg = pk.segments.get(k)?;
            Some(
                seg.chunk
                    .as_ref()
                    .map(|c| &c.data[pol * pb + from..pol * pb + to]),
            )
        };
        let (k0, k1) = (b0 / pb, (b1 - 1) / pb);
        if k0 == k1 {
            if let Some(d) = piece(k0, b0 % pb, b0 % pb + (b1 - b0))? {
                return Some((d, i - start));
            }
        }
        join.clear();
        for k in k0..=k1 {
            let from = if k == k0 { b0 % pb } else { 0 };
            let to = if k == k1 { (b1 - 1) % pb + 1 } else { pb };
            match piece(k, from, to)? {
                // GPU-mapped chunks are read back by DMA, never by CPU loads.
                Some(d) => crate::mem::vkgdr::read_chunk_bytes(join, d),
                None => join.resize(join.len() + (to - from), 0),
            }
        }
        Some((&join[..], i - start))
    }

    /// Chunks trimmed out of a packed store (or dropped by a restart) since the last call.
    /// Their memory may still be read by uploads in flight: the engine recycles them only
    /// once the channelisers say no upload reads host input any more.
    pub fn take_released(&mut self) -> Vec<Chunk> {
        self.packed
            .as_mut()
            .map(|pk| std::mem::take(&mut pk.released))
            .unwrap_or_default()
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
            if self.decode {
                self.samples[p].drain(..n);
            }
            self.present[p].drain(..heaps);
        }
        self.base_ts += n as u64;
        self.len -= n as u64;
        if let Some(pk) = &mut self.packed {
            while pk
                .segments
                .front()
                .is_some_and(|s| s.ts + pk.seg_samples <= self.base_ts)
            {
                if let Some(c) = pk.segments.pop_front().and_then(|s| s.chunk) {
                    pk.released.push(c);
                }
            }
        }
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
        st.append(chunk(&pl, 0, &[(0, 2), (1, 2), (0, 3), (1, 3)]), &pl, 128);
        assert_eq!(st.stats.missing_heaps, [0, 0]);
        st.append(chunk(&pl, 2, &[(0, 0)]), &pl, 128);
        assert_eq!(st.stats.heaps, [3, 2]);
        assert_eq!(st.stats.missing_heaps, [4, 5]);
        assert_eq!(st.received_span(), Some((16, 72)));
        assert!(st.all_present(0, 16, 32) && !st.all_present(0, 0, 24));
    }

    /// A store keeping packed samples only: the packed bytes of a range (from a byte
    /// boundary, with the samples to skip) unpack to the samples received, a chunk that never
    /// arrived reads as zeros, trimming keeps the timeline, and heaps are counted without
    /// decoding. A range in one chunk is that chunk's memory; one across chunks is joined.
    /// Trimmed chunks are released once, whole.
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
            assert!(
                st.append(c, &pl, 1024).is_none(),
                "a packed store keeps its chunks"
            );
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
                let mut join = Vec::new();
                let (b, skip) = st.packed_slice(p, a, len, align, &mut join).unwrap();
                assert_eq!((a - st.base_ts - skip as u64) % align as u64, 0);
                let mut s = vec![0i16; skip + len];
                bitpack::unpack(&b[..bitpack::packed_len(skip + len, 10)], 10, &mut s);
                for (i, &v) in s[skip..].iter().enumerate() {
                    let t = a + i as u64;
                    let present = (64..128).contains(&t) || (192..256).contains(&t);
                    let heap_ok = p == 0 || t % 64 < 48;
                    if !heap_ok {
                        continue; // an absent heap's bytes are not defined
                    }
                    let want = if present { val(p, t) } else { 0 };
                    assert_eq!(v, want, "pol {p} t {t}");
                }
                let crosses = (a - skip as u64) / 64 != (a + len as u64 - 1) / 64;
                assert_eq!(!join.is_empty(), crosses, "{a}..+{len}");
            }
        }
        let mut join = Vec::new();
        let (b, _) = st.packed_slice(1, 200, 40, 8, &mut join).unwrap();
        let mut s = vec![0i16; 40];
        bitpack::unpack(&b[..bitpack::packed_len(40, 10)], 10, &mut s);
        assert!(join.is_empty(), "one chunk's range is borrowed, not joined");
        assert_eq!(s, (200..240).map(|t| val(1, t)).collect::<Vec<_>>());
        assert!(st.take_released().is_empty(), "chunk 1 is still needed");
        st.trim_before(200);
        let rel = st.take_released();
        assert_eq!(rel.iter().map(|c| c.chunk_id).collect::<Vec<_>>(), [1]);
        assert!(st.take_released().is_empty());
        assert!(
            st.packed_slice(0, 83, 30, 12, &mut Vec::new()).is_none(),
            "align must be a multiple of 8"
        );
        assert!(
            st.packed_slice(0, 0, 30, 8, &mut Vec::new()).is_none(),
            "before the store"
        );
    }
}
