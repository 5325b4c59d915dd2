//! Chunks: fixed spans of timestamps for all streams of an engine, filled straight from
//! packets by a placement function, with a presence map per heap.
//!
//! * [`Placement`] maps a packet to (chunk id, slot, byte offset) or a named rejection.
//! * [`ChunkAssembler`] keeps a window of active chunks, copies payloads into place, counts
//!   late, too-early, malformed and duplicate packets, and emits chunks in order when the
//!   window moves past them (or at the end of the stream); chunks that received nothing
//!   are not emitted. Missing heaps are counted only inside the received span
//!   ([`SpanMissing`]): the unfilled rows of the first chunk (before the first heap) and of
//!   the last (after the last heap) are not losses.
//! * [`placement`] holds the engines' placement rules (digitiser → fgpu, F-engine → xbgpu).
//! * [`memory`]: where chunk bytes live (hugepages, CUDA-registered when a GPU exists).

pub mod placement;

use crate::mem::{ChunkMem, MemPolicy};
use crate::spead::PacketView;

/// Where a packet's payload goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Chunk sequence number (timestamp / chunk span).
    pub chunk_id: u64,
    /// Heap slot inside the chunk.
    pub slot: usize,
}

/// Why a packet was not placed (the ICD's receive counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Reject {
    /// Not a SPEAD packet of our flavour (see the codec's reasons).
    Malformed = 0,
    /// Wrong heap size or missing items: descriptors and other metadata heaps.
    MetadataHeap,
    /// Timestamp not a multiple of the heap's timestamp step.
    BadTimestamp,
    /// Stream id (feng_id, digitiser pol) out of range.
    BadId,
    /// Older than the oldest chunk in the window.
    TooOld,
    /// Payload bytes already received for this heap.
    Duplicate,
    /// Payload outside the heap's slot.
    BadOffset,
}

impl Reject {
    pub const ALL: [Reject; 7] = [
        Reject::Malformed,
        Reject::MetadataHeap,
        Reject::BadTimestamp,
        Reject::BadId,
        Reject::TooOld,
        Reject::Duplicate,
        Reject::BadOffset,
    ];

    /// Counter name suffix as in katgpucbf's metrics (`input_<name>_total`).
    pub fn name(self) -> &'static str {
        match self {
            Reject::Malformed => "malformed_packets",
            Reject::MetadataHeap => "metadata_heaps",
            Reject::BadTimestamp => "bad_timestamp_heaps",
            Reject::BadId => "bad_id_heaps",
            Reject::TooOld => "too_old_heaps",
            Reject::Duplicate => "duplicate_packets",
            Reject::BadOffset => "bad_offset_packets",
        }
    }
}

/// An engine's rule for where heaps go.
pub trait Placement: Send {
    /// Bytes per heap slot.
    fn slot_bytes(&self) -> usize;
    /// Slots per chunk.
    fn n_slots(&self) -> usize;
    /// Place a packet (its heap's slot); the payload goes at `payload_offset` in the slot.
    fn place(&self, pkt: &PacketView<'_>) -> Result<Place, Reject>;
    /// Rows per chunk: the distinct heap timestamps a chunk holds, in time order.
    fn rows(&self) -> usize;
    /// The row (timestamp index inside the chunk) of a slot.
    fn row(&self, slot: usize) -> usize;
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
    pub chunk_id: u64,
    pub slot_bytes: usize,
    pub data: ChunkMem,
    /// Payload bytes received per slot; a slot is present when it equals `slot_bytes`.
    pub received: Vec<u32>,
    /// Payload byte ranges [start, end) received per slot (duplicate and overlap
    /// detection; capacity is kept on reuse).
    offsets: Vec<Vec<(u32, u32)>>,
}

impl Chunk {
    /// A zeroed chunk in memory of the process-wide [`MemPolicy::shared`] (hugepages if
    /// reserved, CUDA-registered if a GPU is present).
    pub fn new(n_slots: usize, slot_bytes: usize) -> Self {
        Self::with_policy(n_slots, slot_bytes, MemPolicy::shared())
    }

    pub fn with_policy(n_slots: usize, slot_bytes: usize, policy: &MemPolicy) -> Self {
        let len = n_slots.saturating_mul(slot_bytes);
        let data = ChunkMem::alloc(len, policy).unwrap_or_else(|e| {
            // Out of memory: the same outcome as a Vec that cannot grow.
            tracing::error!("chunk allocation: {e}");
            std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(len.max(1), 4096)
                    .unwrap_or(std::alloc::Layout::new::<u8>()),
            )
        });
        Chunk {
            chunk_id: 0,
            slot_bytes,
            data,
            received: vec![0; n_slots],
            offsets: vec![Vec::new(); n_slots],
        }
    }

    pub fn n_slots(&self) -> usize {
        self.received.len()
    }

    pub fn present(&self, slot: usize) -> bool {
        self.received[slot] as usize == self.slot_bytes
    }

    pub fn n_present(&self) -> usize {
        (0..self.n_slots()).filter(|&s| self.present(s)).count()
    }

    pub fn slot(&self, slot: usize) -> &[u8] {
        &self.data[slot * self.slot_bytes..(slot + 1) * self.slot_bytes]
    }

    fn reset(&mut self, chunk_id: u64) {
        self.chunk_id = chunk_id;
        self.received.iter_mut().for_each(|r| *r = 0);
        self.offsets.iter_mut().for_each(Vec::clear);
    }
}

/// Receive counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkStats {
    pub packets: u64,
    pub bytes: u64,
    /// Heaps completed (all payload bytes placed).
    pub heaps: u64,
    pub chunks: u64,
    pub rejects: [u64; Reject::ALL.len()],
    /// Heaps missing inside the received span (see [`SpanMissing`]).
    pub missing_heaps: u64,
    /// Heaps partly received in emitted chunks.
    pub incomplete_heaps: u64,
}

impl ChunkStats {
    pub fn rejected(&self, r: Reject) -> u64 {
        self.rejects[r as usize]
    }
}

/// Fills chunks from packets. `max_active` chunks may be open at once (katgpucbf uses 2
/// for fgpu): a packet for a newer chunk pushes the oldest out.
pub struct ChunkAssembler<P: Placement> {
    placement: P,
    max_active: usize,
    /// Open chunks, oldest first, consecutive ids.
    active: std::collections::VecDeque<Chunk>,
    /// Recycled chunk memory.
    free: Vec<Chunk>,
    /// Emitted-chunk boundary: ids below this are too old.
    next_id: Option<u64>,
    span: SpanMissing,
    /// Scratch per row of an emitted chunk: missing heaps, anything received.
    row_missing: Vec<u64>,
    row_any: Vec<bool>,
    /// Chunks allocated so far (the first one is logged).
    allocated: usize,
    pub stats: ChunkStats,
}

impl<P: Placement> ChunkAssembler<P> {
    pub fn new(placement: P, max_active: usize) -> Self {
        ChunkAssembler {
            placement,
            max_active: max_active.max(1),
            active: Default::default(),
            free: Vec::new(),
            next_id: None,
            span: SpanMissing::new(1),
            row_missing: Vec::new(),
            row_any: Vec::new(),
            allocated: 0,
            stats: ChunkStats::default(),
        }
    }

    pub fn placement(&self) -> &P {
        &self.placement
    }

    /// Chunk buffers held for reuse.
    pub fn free_chunks(&self) -> usize {
        self.free.len()
    }

    /// Returns a chunk's memory for reuse (avoids allocation on the hot path).
    pub fn recycle(&mut self, c: Chunk) {
        if c.slot_bytes == self.placement.slot_bytes() && c.n_slots() == self.placement.n_slots() {
            self.free.push(c);
        }
    }

    fn take_chunk(&mut self, id: u64) -> Chunk {
        let mut c = self.free.pop().unwrap_or_else(|| {
            let c = Chunk::new(self.placement.n_slots(), self.placement.slot_bytes());
            if self.allocated == 0 {
                tracing::info!(
                    bytes = c.data.len(),
                    backing = ?c.data.backing(),
                    cuda_pinned = c.data.cuda_pinned(),
                    note = c.data.pin_note.as_ref().map(ToString::to_string).unwrap_or_default(),
                    "chunk memory"
                );
            }
            self.allocated += 1;
            c
        });
        c.reset(id);
        c
    }

    fn emit_front(&mut self, out: &mut Vec<Chunk>) {
        if let Some(c) = self.active.pop_front() {
            let rows = self.placement.rows();
            self.row_missing.clear();
            self.row_missing.resize(rows, 0);
            self.row_any.clear();
            self.row_any.resize(rows, false);
            for s in 0..c.n_slots() {
                let r = self.placement.row(s).min(rows.saturating_sub(1));
                if c.received[s] == 0 {
                    self.row_missing[r] += 1;
                } else {
                    self.row_any[r] = true;
                    if !c.present(s) {
                        self.stats.incomplete_heaps += 1;
                    }
                }
            }
            for r in 0..rows {
                self.span.row(&self.row_missing[r..r + 1], self.row_any[r]);
            }
            self.stats.missing_heaps = self.span.missing[0];
            self.next_id = Some(c.chunk_id + 1);
            if c.received.iter().all(|&r| r == 0) {
                // Nothing arrived for it: not emitted (its heaps count as missing once a
                // later heap arrives).
                self.free.push(c);
            } else {
                self.stats.chunks += 1;
                out.push(c);
            }
        }
    }

    /// Places one packet; chunks pushed out of the window are appended to `out`.
    pub fn push(&mut self, buf: &[u8], out: &mut Vec<Chunk>) -> Result<(), Reject> {
        let r = self.push_inner(buf, out);
        if let Err(e) = r {
            self.stats.rejects[e as usize] += 1;
        }
        r
    }

    fn push_inner(&mut self, buf: &[u8], out: &mut Vec<Chunk>) -> Result<(), Reject> {
        let pkt = PacketView::parse(buf).map_err(|_| Reject::Malformed)?;
        let place = self.placement.place(&pkt)?;
        if place.slot >= self.placement.n_slots() {
            return Err(Reject::BadId);
        }
        let slot_bytes = self.placement.slot_bytes() as u64;
        let (a, len) = (pkt.payload_offset, pkt.payload_length);
        if a.checked_add(len).is_none_or(|b| b > slot_bytes) {
            return Err(Reject::BadOffset);
        }
        if self.next_id.is_some_and(|n| place.chunk_id < n) {
            return Err(Reject::TooOld);
        }
        // Open chunks up to this one, pushing the oldest out of the window.
        if self.active.is_empty() {
            let c = self.take_chunk(place.chunk_id);
            self.active.push_back(c);
        }
        let front = self.active.front().map_or(place.chunk_id, |c| c.chunk_id);
        if place.chunk_id < front {
            return Err(Reject::TooOld);
        }
        while self
            .active
            .back()
            .is_some_and(|c| c.chunk_id < place.chunk_id)
        {
            let back_id = self.active.back().map_or(0, |c| c.chunk_id);
            // A big jump: emit everything, restart the window at the new chunk.
            if place.chunk_id - back_id > self.max_active as u64 {
                while !self.active.is_empty() {
                    self.emit_front(out);
                }
                let c = self.take_chunk(place.chunk_id);
                self.active.push_back(c);
                break;
            }
            if self.active.len() >= self.max_active {
                self.emit_front(out);
            }
            let c = self.take_chunk(back_id + 1);
            self.active.push_back(c);
        }
        let front = self.active.front().map_or(0, |c| c.chunk_id);
        let c = &mut self.active[(place.chunk_id - front) as usize];
        let offs = &mut c.offsets[place.slot];
        // Bytes already received (the same packet again, or one overlapping others): a heap
        // is present only when each of its bytes came once. Both ends fit u32 (≤ slot_bytes).
        let (start, end) = (a as u32, (a + len) as u32);
        if c.received[place.slot] as u64 + len > slot_bytes
            || offs.iter().any(|&(s, e)| start < e && s < end)
        {
            return Err(Reject::Duplicate);
        }
        if len > 0 {
            offs.push((start, end));
        }
        let got = &mut c.received[place.slot];
        let base = place.slot * slot_bytes as usize + a as usize;
        c.data[base..base + len as usize].copy_from_slice(pkt.payload);
        *got += len as u32;
        self.stats.packets += 1;
        self.stats.bytes += len;
        if *got as u64 == slot_bytes {
            self.stats.heaps += 1;
        }
        Ok(())
    }

    /// End of stream: emits every open chunk, oldest first.
    pub fn flush(&mut self, out: &mut Vec<Chunk>) {
        while !self.active.is_empty() {
            self.emit_front(out);
        }
    }
}

/// Depths of the chunk queues around the receive thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkQueues {
    /// Received chunks waiting for the engine.
    pub ready: usize,
    /// Chunk buffers returned by the engine, waiting for reuse.
    pub free: usize,
}

/// Called by the receive thread after each batch of packets with the counters so far and
/// the queue depths (live metrics); runs on the receive thread, so it must be cheap.
pub type RecvMonitor = Box<dyn FnMut(&ChunkStats, ChunkQueues) + Send>;
