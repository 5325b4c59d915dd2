//! Chunks: fixed spans of timestamps for all streams of an engine, filled straight from
//! packets by a placement function, with a presence map per heap.
//!
//! * [`Placement`] maps a packet to (chunk id, slot, byte offset) or a named rejection.
//! * [`ChunkAssembler`] keeps a window of active chunks, copies payloads into place, counts
//!   late, too-early, malformed and duplicate packets, and emits chunks in order when the
//!   window moves past them (or at the end of the stream); chunks that received nothing
//!   are counted as missing heaps and not emitted.
//! * [`placement`] holds the engines' placement rules (digitiser → fgpu, F-engine → xbgpu).
//! * [`memory`]: where chunk bytes live (hugepages, CUDA-registered when a GPU exists).

pub mod memory;
pub mod placement;

pub use memory::{Backing, ChunkMem, MemPolicy};

use crate::net::source::{PacketSource, Poll};
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
}

/// A chunk of heaps: `n_slots × slot_bytes` bytes plus per-slot received bytes.
#[derive(Debug)]
pub struct Chunk {
    pub chunk_id: u64,
    pub slot_bytes: usize,
    pub data: ChunkMem,
    /// Payload bytes received per slot; a slot is present when it equals `slot_bytes`.
    pub received: Vec<u32>,
    /// Payload offsets received per slot (duplicate detection; capacity is kept on reuse).
    offsets: Vec<Vec<u32>>,
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
    /// Heaps missing from emitted chunks.
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
            allocated: 0,
            stats: ChunkStats::default(),
        }
    }

    pub fn placement(&self) -> &P {
        &self.placement
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
                    note = c.data.pin_note.as_deref().unwrap_or(""),
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
            for s in 0..c.n_slots() {
                if c.received[s] == 0 {
                    self.stats.missing_heaps += 1;
                } else if !c.present(s) {
                    self.stats.incomplete_heaps += 1;
                }
            }
            self.next_id = Some(c.chunk_id + 1);
            if c.received.iter().all(|&r| r == 0) {
                // Nothing arrived for it: counted as missing, not emitted.
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
        if offs.contains(&(a as u32)) || c.received[place.slot] as u64 + len > slot_bytes {
            return Err(Reject::Duplicate);
        }
        offs.push(a as u32);
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

/// Runs the receive thread: packets → chunks → `tx`, until end of input or shutdown.
pub fn spawn_receiver<P: Placement + 'static>(
    mut src: Box<dyn PacketSource>,
    placement: P,
    tx: crossbeam_channel::Sender<Chunk>,
    recycle: crossbeam_channel::Receiver<Chunk>,
) -> std::thread::JoinHandle<anyhow::Result<ChunkStats>> {
    std::thread::Builder::new()
        .name("recv".into())
        .spawn(move || {
            let mut asm = ChunkAssembler::new(placement, 2);
            let mut out = Vec::new();
            loop {
                while let Ok(c) = recycle.try_recv() {
                    asm.recycle(c);
                }
                let poll = src.recv_batch(&mut |p| {
                    let _ = asm.push(p, &mut out);
                })?;
                for c in out.drain(..) {
                    if tx.send(c).is_err() {
                        return Ok(asm.stats);
                    }
                }
                if poll == Poll::End || crate::shutdown::requested() {
                    break;
                }
            }
            asm.flush(&mut out);
            for c in out.drain(..) {
                let _ = tx.send(c);
            }
            Ok(asm.stats)
        })
        .expect("spawn receive thread")
}
