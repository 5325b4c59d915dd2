//! The window of open chunks: packets placed into consecutive chunks, the oldest emitted
//! when a newer one pushes it out, with the receive counters ([`ChunkAssembler`]).

use super::presence::{Chunk, SpanMissing};
use super::{Place, Placement, Reject};
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
    /// Times the window moved to a far position because the stream really moved there
    /// ([`WindowPolicy::jump_confirm`] consecutive packets agreed).
    pub window_moves: u64,
    /// What was rejected and why, each kind of problem described once (a set-up mismatch,
    /// a foreign stream, packets far outside the window): for the log and the summary.
    pub notes: Vec<String>,
}

impl ChunkStats {
    /// Packets rejected for reason `r`.
    pub fn rejected(&self, r: Reject) -> u64 {
        self.rejects[r as usize]
    }
}

/// How the window follows the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowPolicy {
    /// Chunks open at once (at least 1; katgpucbf uses 2 for fgpu): a packet for a newer
    /// chunk pushes the oldest out.
    pub max_active: usize,
    /// A packet more than this many chunks ahead of the newest open chunk, or behind the
    /// oldest, is far: it is dropped and counted as a bad timestamp, unless the stream
    /// really moved there (see `jump_confirm`). A corrupt or hostile timestamp cannot drag
    /// the window away from a live stream.
    pub jump_chunks: u64,
    /// Consecutive far packets, agreeing on where the stream went (within `max_active`
    /// chunks of each other) and covering at least two heaps, that move the window there.
    /// A packet near the window in between restarts the count.
    pub jump_confirm: u32,
}

impl WindowPolicy {
    /// Default [`WindowPolicy::jump_confirm`].
    pub const JUMP_CONFIRM: u32 = 16;

    /// `max_active` open chunks; far means more than `jump_chunks` chunks outside.
    pub fn new(max_active: usize, jump_chunks: u64) -> Self {
        WindowPolicy {
            max_active: max_active.max(1),
            jump_chunks,
            jump_confirm: Self::JUMP_CONFIRM,
        }
    }

    /// The policy for a tolerance of `tol_ticks` ADC ticks (`--recv-reorder-tol`) with
    /// chunks of `chunk_ticks` ticks: far is more than ceil(tol / chunk) chunks outside.
    pub fn from_ticks(max_active: usize, tol_ticks: u64, chunk_ticks: u64) -> Self {
        Self::new(max_active, tol_ticks.div_ceil(chunk_ticks.max(1)).max(1))
    }
}

/// Far packets agreeing on a new stream position so far.
#[derive(Debug, Clone, Copy)]
struct JumpVote {
    /// Chunk of the latest far packet.
    chunk_id: u64,
    /// Heap (chunk, slot) of the first far packet.
    first_heap: (u64, usize),
    /// Consecutive agreeing packets.
    packets: u32,
    /// True once a packet of another heap than the first agreed.
    heaps: bool,
}

/// Which problems have been described in [`ChunkStats::notes`] (each once).
#[derive(Debug, Default)]
struct Noted {
    far: bool,
    too_old: bool,
    size: bool,
    foreign: bool,
}

/// Fills chunks from packets, within the window of a [`WindowPolicy`].
pub struct ChunkAssembler<P: Placement> {
    placement: P,
    policy: WindowPolicy,
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
    /// Far packets agreeing on a new position, if the latest packet was far.
    vote: Option<JumpVote>,
    /// The stream source (see [`super::Place::source`]) of the first packet placed.
    source: Option<u64>,
    noted: Noted,
    /// Why a chunk could not be allocated (the packet that needed it was not placed).
    alloc_error: Option<std::io::Error>,
    /// Counters so far.
    pub stats: ChunkStats,
}

impl<P: Placement> ChunkAssembler<P> {
    /// Chunks a far packet may be outside the window by default: 64.
    pub const JUMP_CHUNKS: u64 = 64;

    /// A window of at most `max_active` (at least 1) open chunks placed by `placement`;
    /// far is more than [`Self::JUMP_CHUNKS`] chunks outside it.
    pub fn new(placement: P, max_active: usize) -> Self {
        Self::with_policy(placement, WindowPolicy::new(max_active, Self::JUMP_CHUNKS))
    }

    /// A window following `policy`, placed by `placement`.
    pub fn with_policy(placement: P, policy: WindowPolicy) -> Self {
        ChunkAssembler {
            placement,
            policy: WindowPolicy {
                max_active: policy.max_active.max(1),
                jump_confirm: policy.jump_confirm.max(1),
                ..policy
            },
            active: Default::default(),
            free: Vec::new(),
            next_id: None,
            span: SpanMissing::new(1),
            row_missing: Vec::new(),
            row_any: Vec::new(),
            allocated: 0,
            vote: None,
            source: None,
            noted: Noted::default(),
            alloc_error: None,
            stats: ChunkStats::default(),
        }
    }

    /// The window policy.
    pub fn policy(&self) -> WindowPolicy {
        self.policy
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

    /// Allocates chunk buffers until `n` are held for reuse, so that a real-time stream
    /// does not stop to allocate (and register) chunk memory while packets arrive. An
    /// allocation failure stops the filling and is kept for
    /// [`ChunkAssembler::take_alloc_error`].
    pub fn prefill(&mut self, n: usize) {
        while self.free.len() < n {
            match self.alloc_chunk() {
                Some(c) => self.free.push(c),
                None => break,
            }
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
                // The payload copies' streaming stores reach memory before anyone else
                // reads the chunk.
                crate::mem::stream_fence();
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
        let place = match self.placement.place(&pkt) {
            Ok(p) => p,
            Err(Reject::MetadataHeap) => {
                self.note_wrong_size(&pkt);
                return Err(Reject::MetadataHeap);
            }
            Err(e) => return Err(e),
        };
        if place.slot >= self.placement.n_slots() {
            return Err(Reject::BadId);
        }
        let slot_bytes = self.placement.slot_bytes() as u64;
        let (a, len) = (pkt.payload_offset, pkt.payload_length);
        if a.checked_add(len).is_none_or(|b| b > slot_bytes) {
            return Err(Reject::BadOffset);
        }
        if let Some(src) = place.source {
            match self.source {
                None => self.source = Some(src),
                Some(s) if s != src => {
                    self.note_foreign(s, src);
                    return Err(Reject::BadId);
                }
                Some(_) => {}
            }
        }
        self.follow(place, out)?;
        if self.next_id.is_some_and(|n| place.chunk_id < n) {
            self.note_too_old(place.chunk_id);
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
            self.note_too_old(place.chunk_id);
            return Err(Reject::TooOld);
        }
        let max_active = self.policy.max_active;
        while self
            .active
            .back()
            .is_some_and(|c| c.chunk_id < place.chunk_id)
        {
            let back_id = self.active.back().map_or(0, |c| c.chunk_id);
            // A big jump (within the tolerance): emit everything, restart the window at the
            // new chunk.
            if place.chunk_id - back_id > max_active as u64 {
                while !self.active.is_empty() {
                    self.emit_front(out);
                }
                let Some(c) = self.take_chunk(place.chunk_id) else {
                    return Ok(());
                };
                self.active.push_back(c);
                break;
            }
            if self.active.len() >= max_active {
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
        if c.received[place.slot] as u64 + len > slot_bytes || offs.overlaps(start, end) {
            return Err(Reject::Duplicate);
        }
        offs.insert(start, end);
        let got = &mut c.received[place.slot];
        let base = place.slot * slot_bytes as usize + a as usize;
        let dst = &mut c.data[base..base + len as usize];
        // SAFETY: `dst` is `len` bytes of the chunk, distinct from the packet; the stores
        // are fenced before the chunk leaves (emit_front).
        unsafe { crate::mem::copy_stream(dst.as_mut_ptr(), pkt.payload) };
        *got += len as u32;
        self.stats.packets += 1;
        self.stats.bytes += len;
        if *got as u64 == slot_bytes {
            self.stats.heaps += 1;
        }
        Ok(())
    }

    /// The open chunks, oldest first (a receive stream group writes into them).
    pub(super) fn active_mut(&mut self) -> impl Iterator<Item = &mut Chunk> {
        self.active.iter_mut()
    }

    /// Forgets the far packets counted so far: a packet near the window was placed
    /// elsewhere (by a receive stream group's fast path).
    pub(super) fn reset_vote(&mut self) {
        self.vote = None;
    }

    /// The stream source the window locked onto, if any (see [`Place::source`]).
    pub(super) fn source(&self) -> Option<u64> {
        self.source
    }

    /// The oldest and newest chunk ids the window holds or expects next; `None` before the
    /// first packet.
    pub(super) fn bounds(&self) -> Option<(u64, u64)> {
        match (self.active.front(), self.active.back()) {
            (Some(f), Some(b)) => Some((f.chunk_id, b.chunk_id)),
            _ => self.next_id.map(|n| (n, n)),
        }
    }

    /// Decides whether a packet for `place` may move the window: a packet near it may (as
    /// always); a far one is dropped as a bad timestamp until enough consecutive far packets
    /// agree that the stream moved, and then the window moves there (every open chunk is
    /// emitted, and the window restarts at the packet's chunk).
    fn follow(&mut self, place: Place, out: &mut Vec<Chunk>) -> Result<(), Reject> {
        let Some((lo, hi)) = self.bounds() else {
            return Ok(());
        };
        let id = place.chunk_id;
        let tol = self.policy.jump_chunks;
        if id <= hi.saturating_add(tol) && id.saturating_add(tol) >= lo {
            // Near the window: the stream is where the window is.
            self.vote = None;
            return Ok(());
        }
        let heap = (id, place.slot);
        let near = self.policy.max_active as u64;
        let v = match self.vote {
            Some(v) if v.chunk_id.abs_diff(id) <= near => JumpVote {
                chunk_id: id,
                packets: v.packets + 1,
                heaps: v.heaps || v.first_heap != heap,
                ..v
            },
            _ => JumpVote {
                chunk_id: id,
                first_heap: heap,
                packets: 1,
                heaps: false,
            },
        };
        if v.packets < self.policy.jump_confirm || !v.heaps {
            self.vote = Some(v);
            if !self.noted.far {
                self.noted.far = true;
                let msg = format!(
                    "packets far outside the receive window (chunk {id}; window chunks \
                     {lo}..={hi}; tolerance {tol} chunks) are dropped as bad timestamps unless \
                     {} consecutive ones agree that the stream moved",
                    self.policy.jump_confirm
                );
                tracing::warn!("{msg}");
                self.stats.notes.push(msg);
            }
            return Err(Reject::BadTimestamp);
        }
        self.vote = None;
        tracing::warn!(
            from_chunks = ?(lo..=hi),
            to_chunk = id,
            agreeing_packets = v.packets,
            "the stream moved: the receive window follows it (open chunks emitted)"
        );
        while !self.active.is_empty() {
            self.emit_front(out);
        }
        self.next_id = None;
        self.stats.window_moves += 1;
        Ok(())
    }

    /// Counts a packet for chunk `chunk_id` as too old without placing it: a receive stream
    /// group's stream that lags behind the others (its packets must not move the window).
    pub(super) fn reject_too_old(&mut self, chunk_id: u64) {
        self.stats.rejects[Reject::TooOld as usize] += 1;
        self.note_too_old(chunk_id);
    }

    /// Describes (once) packets dropped as too old.
    fn note_too_old(&mut self, chunk_id: u64) {
        if self.noted.too_old {
            return;
        }
        self.noted.too_old = true;
        let msg = format!(
            "late packets are dropped as too old (first: chunk {chunk_id}, window from chunk \
             {}); counted as too_old_heaps, logged once",
            self.bounds().map_or(0, |b| b.0)
        );
        tracing::warn!("{msg}");
        self.stats.notes.push(msg);
    }

    /// Describes (once) data heaps of the wrong size: a set-up mismatch between sender and
    /// receiver, not descriptors (those carry no timestamp).
    fn note_wrong_size(&mut self, pkt: &PacketView<'_>) {
        if self.noted.size || pkt.immediate(crate::spead::ids::TIMESTAMP).is_none() {
            return;
        }
        let Some(size) = pkt.heap_size else { return };
        if size == self.placement.slot_bytes() as u64 {
            return;
        }
        self.noted.size = true;
        let msg = format!(
            "data heaps of {size} bytes where {} are expected are dropped (counted as \
             metadata_heaps): the sender's set-up does not match this engine's ({})",
            self.placement.slot_bytes(),
            self.placement.size_hint()
        );
        tracing::warn!("{msg}");
        self.stats.notes.push(msg);
    }

    /// Describes (once) packets of another stream than the first one received.
    fn note_foreign(&mut self, expected: u64, got: u64) {
        if self.noted.foreign {
            return;
        }
        self.noted.foreign = true;
        let msg = format!(
            "packets of {} are dropped (counted as bad id): this engine locked onto {} with \
             the first packet it placed",
            self.placement.describe_source(got),
            self.placement.describe_source(expected)
        );
        tracing::warn!("{msg}");
        self.stats.notes.push(msg);
    }

    /// End of stream: emits every open chunk, oldest first.
    pub fn flush(&mut self, out: &mut Vec<Chunk>) {
        while !self.active.is_empty() {
            self.emit_front(out);
        }
    }
}
