//! The window of open chunks: packets placed into consecutive chunks, the oldest emitted
//! when a newer one pushes it out, with the receive counters ([`ChunkAssembler`]).

use super::presence::{Chunk, SpanMissing};
use super::{Placement, Reject};
use crate::spead::PacketView;

/// Receive counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkStats {
    /// Packets placed.
    pub packets: u64,
    /// Payload bytes placed.
    pub bytes: u64,
    /// Heaps completed (all payload bytes placed).
    pub heaps: u64,
    /// Chunks emitted (chunks that received nothing are not).
    pub chunks: u64,
    /// Packets rejected, per [`Reject`] (indexed by `Reject as usize`).
    pub rejects: [u64; Reject::ALL.len()],
    /// Heaps missing inside the received span (see [`SpanMissing`]).
    pub missing_heaps: u64,
    /// Heaps partly received in emitted chunks.
    pub incomplete_heaps: u64,
}

impl ChunkStats {
    /// Packets rejected for reason `r`.
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
    /// Why a chunk could not be allocated (the packet that needed it was not placed).
    alloc_error: Option<std::io::Error>,
    /// Counters so far.
    pub stats: ChunkStats,
}

impl<P: Placement> ChunkAssembler<P> {
    /// A window of at most `max_active` (at least 1) open chunks placed by `placement`.
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
            alloc_error: None,
            stats: ChunkStats::default(),
        }
    }

    /// The placement rule.
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

    /// The allocation failure that stopped placing packets, if one happened: the receiver
    /// stops and reports it (chunk memory is not aborted on).
    pub fn take_alloc_error(&mut self) -> Option<std::io::Error> {
        self.alloc_error.take()
    }

    fn take_chunk(&mut self, id: u64) -> Option<Chunk> {
        let mut c = match self.free.pop() {
            Some(c) => c,
            None => self.alloc_chunk()?,
        };
        c.reset(id);
        Some(c)
    }

    /// A new chunk, or `None` with the error kept for [`ChunkAssembler::take_alloc_error`].
    fn alloc_chunk(&mut self) -> Option<Chunk> {
        let c = Chunk::try_new(self.placement.n_slots(), self.placement.slot_bytes())
            .map_err(|e| self.alloc_error = Some(e))
            .ok()?;
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
        Some(c)
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
            let Some(c) = self.take_chunk(place.chunk_id) else {
                return Ok(());
            };
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
                let Some(c) = self.take_chunk(place.chunk_id) else {
                    return Ok(());
                };
                self.active.push_back(c);
                break;
            }
            if self.active.len() >= self.max_active {
                self.emit_front(out);
            }
            let Some(c) = self.take_chunk(back_id + 1) else {
                return Ok(());
            };
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
