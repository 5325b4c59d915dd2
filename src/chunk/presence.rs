//! Which heaps of a chunk arrived: per-slot received bytes and the byte ranges behind them
//! ([`Chunk`]), and missing-heap counting over the received span ([`SpanMissing`]).

use std::collections::BTreeMap;

use crate::mem::{ChunkMem, MemPolicy};

/// The byte ranges of one heap received so far, merged where they touch: the latest range
/// (`tail`, the one with the highest start) is kept apart so that in-order packets extend
/// it in O(1) without allocating; ranges before it live in a B-tree keyed by start, so a
/// packet out of order costs O(log n) however the heap arrives (a heap of 150k one-byte
/// packets in any order is checked in O(n log n), not O(n²)).
#[derive(Debug, Default, Clone)]
pub struct ByteRanges {
    /// The range with the highest start, if any.
    tail: Option<(u32, u32)>,
    /// The other ranges, start → end: disjoint, none touching another or the tail.
    before: BTreeMap<u32, u32>,
}

impl ByteRanges {
    /// Forgets every range.
    pub fn clear(&mut self) {
        self.tail = None;
        if !self.before.is_empty() {
            self.before.clear();
        }
    }

    /// Disjoint ranges held (touching ones are merged).
    pub fn len(&self) -> usize {
        self.before.len() + self.tail.is_some() as usize
    }

    /// True if no range is held.
    pub fn is_empty(&self) -> bool {
        self.tail.is_none()
    }

    /// True if a received range overlaps [start, end): one that starts before `end` and
    /// ends after `start` (an empty range strictly inside a received one overlaps it).
    pub fn overlaps(&self, start: u32, end: u32) -> bool {
        // Ranges are disjoint and sorted, so of those starting before `end` the last one
        // reaches furthest.
        let last_before_end = match self.tail {
            Some(t) if t.0 < end => Some(t),
            _ => self.before.range(..end).next_back().map(|(&s, &e)| (s, e)),
        };
        last_before_end.is_some_and(|(_, e)| e > start)
    }

    /// Adds [start, end), which must not overlap a held range ([`ByteRanges::overlaps`]);
    /// an empty range is not held.
    pub fn insert(&mut self, start: u32, end: u32) {
        if start >= end {
            return;
        }
        let Some(tail) = self.tail.as_mut() else {
            self.tail = Some((start, end));
            return;
        };
        if start >= tail.1 {
            // At or after the end of the tail: the in-order case.
            if start == tail.1 {
                tail.1 = end;
            } else {
                let old = std::mem::replace(tail, (start, end));
                self.before.insert(old.0, old.1);
            }
            return;
        }
        // Before the tail (end ≤ tail.0 since nothing overlaps).
        let (mut s, mut e) = (start, end);
        if let Some((&ps, &pe)) = self.before.range(..s).next_back() {
            if pe == s {
                self.before.remove(&ps);
                s = ps;
            }
        }
        if e == tail.0 {
            tail.0 = s;
            return;
        }
        if let Some(ne) = self.before.remove(&e) {
            e = ne;
        }
        self.before.insert(s, e);
    }
}

/// Missing-heap counting over the received span, row (heap timestamp) by row in time
/// order: rows before the first row that received anything are not counted, and rows after
/// the latest such row stay pending until a later row receives something (at the end of the
/// stream they are never counted). Counts are kept per stream (e.g. per polarisation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpanMissing {
    started: bool,
    pending: Vec<u64>,
    /// Missing heaps per stream inside the span so far.
    pub missing: Vec<u64>,
}

impl SpanMissing {
    /// A counter over `streams` streams, nothing counted yet.
    pub fn new(streams: usize) -> Self {
        SpanMissing {
            started: false,
            pending: vec![0; streams],
            missing: vec![0; streams],
        }
    }

    /// One row: `missing[k]` heaps of stream k absent; `any_received` if any heap of the
    /// row (any stream) arrived, even partly.
    pub fn row(&mut self, missing: &[u64], any_received: bool) {
        self.rows(1, missing, any_received);
    }

    /// `n` identical rows.
    pub fn rows(&mut self, n: u64, missing: &[u64], any_received: bool) {
        if n == 0 {
            return;
        }
        if any_received {
            self.started = true;
            for ((t, p), &m) in self.missing.iter_mut().zip(&mut self.pending).zip(missing) {
                *t += std::mem::take(p) + n * m;
            }
        } else if self.started {
            for (p, &m) in self.pending.iter_mut().zip(missing) {
                *p += n * m;
            }
        }
    }
}

/// A chunk of heaps: `n_slots × slot_bytes` bytes plus per-slot received bytes.
#[derive(Debug)]
pub struct Chunk {
    /// Chunk sequence number (timestamp / chunk span).
    pub chunk_id: u64,
    /// Bytes per heap slot.
    pub slot_bytes: usize,
    /// The heap slots, back to back (`n_slots × slot_bytes` bytes).
    pub data: ChunkMem,
    /// Payload bytes received per slot; a slot is present when it equals `slot_bytes`.
    pub received: Vec<u32>,
    /// Payload byte ranges received per slot (duplicate and overlap detection).
    pub(super) offsets: Vec<ByteRanges>,
}

impl Chunk {
    /// A zeroed chunk in memory of the process-wide [`MemPolicy::shared`] (hugepages if
    /// reserved, CUDA-registered if a GPU is present).
    pub fn new(n_slots: usize, slot_bytes: usize) -> Self {
        Self::with_policy(n_slots, slot_bytes, MemPolicy::shared())
    }

    /// A zeroed chunk in memory allocated by `policy`. Out of memory aborts, as for a Vec
    /// that cannot grow; [`Chunk::try_with_policy`] returns the error instead.
    pub fn with_policy(n_slots: usize, slot_bytes: usize, policy: &MemPolicy) -> Self {
        Self::try_with_policy(n_slots, slot_bytes, policy).unwrap_or_else(|e| {
            tracing::error!("chunk allocation: {e}");
            let len = n_slots.saturating_mul(slot_bytes);
            std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(len.max(1), 4096)
                    .unwrap_or(std::alloc::Layout::new::<u8>()),
            )
        })
    }

    /// [`Chunk::new`], or an error naming the size when the memory cannot be had.
    pub fn try_new(n_slots: usize, slot_bytes: usize) -> std::io::Result<Self> {
        Self::try_with_policy(n_slots, slot_bytes, MemPolicy::shared())
    }

    /// A zeroed chunk in memory allocated by `policy`, or an error naming the size when
    /// the memory (or the per-slot bookkeeping) cannot be had.
    pub fn try_with_policy(
        n_slots: usize,
        slot_bytes: usize,
        policy: &MemPolicy,
    ) -> std::io::Result<Self> {
        let oom = |what: String| {
            std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("cannot allocate a chunk of {n_slots} heaps × {slot_bytes} bytes: {what}"),
            )
        };
        let len = n_slots
            .checked_mul(slot_bytes)
            .ok_or_else(|| oom("size overflows".into()))?;
        let data = ChunkMem::alloc(len, policy).map_err(|e| oom(e.to_string()))?;
        let mut received = Vec::new();
        let mut offsets = Vec::new();
        received
            .try_reserve_exact(n_slots)
            .and_then(|()| offsets.try_reserve_exact(n_slots))
            .map_err(|e| oom(format!("per-heap bookkeeping: {e}")))?;
        received.resize(n_slots, 0);
        offsets.resize_with(n_slots, ByteRanges::default);
        Ok(Chunk {
            chunk_id: 0,
            slot_bytes,
            data,
            received,
            offsets,
        })
    }

    /// Heap slots in the chunk.
    pub fn n_slots(&self) -> usize {
        self.received.len()
    }

    /// True if every byte of slot `slot` arrived.
    pub fn present(&self, slot: usize) -> bool {
        self.received[slot] as usize == self.slot_bytes
    }

    /// Slots whose heap arrived whole.
    pub fn n_present(&self) -> usize {
        (0..self.n_slots()).filter(|&s| self.present(s)).count()
    }

    /// The bytes of slot `slot`.
    pub fn slot(&self, slot: usize) -> &[u8] {
        &self.data[slot * self.slot_bytes..(slot + 1) * self.slot_bytes]
    }

    /// Readies the chunk for reuse as chunk `chunk_id`: presence is cleared, the bytes are
    /// not (a slot counts as present only once its bytes arrive again).
    pub(super) fn reset(&mut self, chunk_id: u64) {
        self.chunk_id = chunk_id;
        self.received.iter_mut().for_each(|r| *r = 0);
        self.offsets.iter_mut().for_each(ByteRanges::clear);
    }
}
