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
//! * [`ChunkGroup`] is the same window filled by several receive threads at once (a
//!   receive stream group, `group.rs`).
//! * [`Chunk`] holds a chunk's bytes and which of its heaps arrived (`presence.rs`);
//!   [`ChunkAssembler`] is the window (`window.rs`).
//!
//! Sans-IO: bytes in, chunks and counters out; no sockets, clocks or threads here. Chunk
//! bytes live in [`crate::mem::ChunkMem`] (hugepages, CUDA-registered when a GPU exists).

mod group;
pub mod placement;
mod presence;
mod window;

pub use group::{ChunkGroup, StreamBatch, StreamCounts, Synced};
pub use presence::{ByteRanges, Chunk, SpanMissing};
pub use window::{ChunkAssembler, ChunkStats, WindowPolicy};

use crate::spead::PacketView;

/// Where a packet's payload goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Chunk sequence number (timestamp / chunk span).
    pub chunk_id: u64,
    /// Heap slot inside the chunk.
    pub slot: usize,
    /// The stream the packet belongs to, where the placement can tell one engine's input
    /// from a foreign stream (the digitiser: `digitiser_id >> 1`, the antenna; its low bit
    /// is the polarisation): the window locks onto the first source placed and drops
    /// others as [`Reject::BadId`].
    pub source: Option<u64>,
}

/// Why a packet was not placed (the ICD's receive counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Reject {
    /// Not a SPEAD packet of our flavour (see the codec's reasons).
    Malformed = 0,
    /// Wrong heap size or missing items: descriptors and other metadata heaps.
    MetadataHeap,
    /// Timestamp not a multiple of the heap's timestamp step, or far outside the receive
    /// window (see [`WindowPolicy`]).
    BadTimestamp,
    /// Stream id (feng_id, digitiser pol) out of range.
    BadId,
    /// Older than the oldest chunk in the window.
    TooOld,
    /// Payload bytes already received for this heap.
    Duplicate,
    /// Payload outside the heap's slot.
    BadOffset,
    /// An F-engine heap whose `frequency` item is not the first channel this engine
    /// receives (another substream's heap).
    BadFrequency,
}

impl Reject {
    /// Every reason, in counter order (`Reject as usize` indexes [`ChunkStats::rejects`]).
    pub const ALL: [Reject; 8] = [
        Reject::Malformed,
        Reject::MetadataHeap,
        Reject::BadTimestamp,
        Reject::BadId,
        Reject::TooOld,
        Reject::Duplicate,
        Reject::BadOffset,
        Reject::BadFrequency,
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
            Reject::BadFrequency => "bad_frequency_heaps",
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
    /// Which settings fix the heap size, for the message about data heaps of another size.
    fn size_hint(&self) -> &'static str {
        "heap size"
    }
    /// A stream source (see [`Place::source`]) in words.
    fn describe_source(&self, source: u64) -> String {
        format!("source {source}")
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
