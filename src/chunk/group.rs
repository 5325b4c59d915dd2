//! A receive stream group: several receive threads (one per stream: a share of the
//! endpoints, one pinned core each) placing packets into one window of chunks
//! ([`ChunkGroup`]), as spead2's chunk stream group does for katgpucbf.
//!
//! The window itself is a [`ChunkAssembler`] behind a mutex (the slow path: opening and
//! emitting chunks, every rejection, the far-timestamp vote, the notes). Its open chunks are
//! published in a ring of [`RingSlot`]s so that a packet for an open chunk is written
//! without the mutex (the fast path): the writer announces itself in its own stream state
//! (`inside`, once per receive batch, on a cache line no other stream writes), checks that
//! the slot still holds its chunk, and writes the payload under a lock of the heap (striped,
//! one cache line per stripe), so two streams may even deliver the same heap. Payloads are
//! copied with streaming stores ([`crate::mem::copy_stream`]), fenced when the stream
//! leaves (at the end of its batch, or before it takes the slow path). The slow path closes
//! every slot and waits for every stream to leave before the window changes, so no chunk is
//! emitted or reused while a stream writes into it, and every byte written is visible.
//!
//! A chunk is emitted when every stream has moved past it: a stream that needs a new chunk
//! while the window is full waits (a few tens of milliseconds at most) for the others to
//! reach the oldest chunk; a stream that does not move in that time is taken as stalled and
//! no longer waited for until it delivers again. The chunks and counters equal those of one
//! [`ChunkAssembler`] fed the same packets, as long as no stream lags a full window behind.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::presence::ByteRanges;
use super::{Chunk, ChunkAssembler, ChunkStats, Placement, Reject, WindowPolicy};
use crate::spead::PacketView;

/// No chunk in a ring slot.
const CLOSED: u64 = u64::MAX;
/// Heap locks (striped by a hash of chunk and slot).
const STRIPES: usize = 512;

/// A heap lock alone on its cache lines (streams writing neighbouring heaps do not share
/// a line).
#[derive(Default)]
#[repr(align(128))]
struct Stripe(Mutex<()>);

/// Where the fast path writes a chunk: raw views of an open chunk's buffers, valid while
/// the ring slot holds the chunk (the chunk itself stays in the assembler's window, its
/// buffers do not move).
#[derive(Clone, Copy)]
struct ChunkView {
    data: *mut u8,
    received: *mut u32,
    offsets: *mut ByteRanges,
}

/// One published chunk of the window (read by every stream, written only by the slow
/// path: alone on its cache lines).
#[repr(align(128))]
struct RingSlot {
    /// The chunk id published here, or [`CLOSED`].
    id: AtomicU64,
    /// The chunk's buffers (written only while every slot is closed and no stream is
    /// inside).
    view: UnsafeCell<ChunkView>,
}

/// The window and what the slow path keeps, behind the mutex.
struct Window<P: Placement> {
    asm: ChunkAssembler<P>,
    /// Each stream's fast-path packet count when the far-packet vote was last checked.
    near_seen: Vec<u64>,
    /// Emitted chunks on their way to the consumer (sent under the mutex, so in order).
    out: Vec<Chunk>,
    tx: crossbeam_channel::Sender<Chunk>,
}

/// Per-stream state shared with the other streams (one cache line pair each: a stream
/// writes its own often).
#[derive(Default)]
#[repr(align(128))]
struct StreamState {
    /// 1 + the newest chunk id this stream has delivered a packet for (0: none yet).
    head: AtomicU64,
    /// 1 + the chunk id of the stream's latest packet (0: none yet).
    last: AtomicU64,
    /// Fast-path packets placed (a packet near the window: the far vote restarts).
    near: AtomicU64,
    /// Taken as stalled by a stream that waited for it; cleared when it delivers again.
    stalled: AtomicBool,
    /// The stream may be writing into published chunks (set before it reads a ring slot,
    /// cleared, after a fence, when it leaves).
    inside: AtomicBool,
}

/// Counters a stream keeps itself on the fast path, added to the window's now and then.
#[derive(Debug, Default, Clone)]
pub struct StreamCounts {
    packets: u64,
    bytes: u64,
    heaps: u64,
    malformed: u64,
    duplicate: u64,
    near: u64,
    /// 1 + the newest chunk id delivered.
    head: u64,
    /// 1 + the chunk id of the latest packet.
    last: u64,
    /// Announced inside (the stream's `inside` flag is set).
    inside: bool,
}

/// Several receive streams placing into one window of chunks (see the module docs).
pub struct ChunkGroup<P: Placement> {
    placement: P,
    n_slots: usize,
    slot_bytes: u64,
    ring: Box<[RingSlot]>,
    locks: Box<[Stripe]>,
    /// The window's stream source once locked ([`CLOSED`] before).
    source: AtomicU64,
    streams: Box<[StreamState]>,
    window: Mutex<Window<P>>,
    stall: Duration,
    /// The consumer is gone: streams stop.
    gone: AtomicBool,
    /// Nanoseconds spent waiting for the consumer to take emitted chunks, not yet taken
    /// by [`Self::take_waits`].
    wait_consumer_ns: AtomicU64,
    /// Nanoseconds spent waiting for lagging streams before pushing the oldest chunk out,
    /// not yet taken.
    wait_streams_ns: AtomicU64,
}

// SAFETY: the raw views in the ring are only dereferenced by a stream announced `inside`
// that read the slot publishing the chunk after announcing (see `try_fast`); the slow path
// changes a view only after closing every slot and waiting for every stream to leave.
unsafe impl<P: Placement + Sync> Sync for ChunkGroup<P> {}
// SAFETY: as above; the views point into chunks owned by the group's own window.
unsafe impl<P: Placement + Send> Send for ChunkGroup<P> {}

/// What [`ChunkGroup::sync`] reports.
#[derive(Debug)]
pub struct Synced {
    /// The window's counters so far (every stream's synced fast-path counts included).
    pub stats: ChunkStats,
    /// Chunk buffers held for reuse.
    pub free_chunks: usize,
    /// The chunk allocation failure that stopped placing packets, if one happened.
    pub alloc_error: Option<std::io::Error>,
}

/// What the fast path did with a packet.
enum Fast {
    /// Placed, or counted (malformed, duplicate).
    Done,
    /// The slow path must take it.
    Slow,
}

impl<P: Placement + Clone> ChunkGroup<P> {
    /// A group of `streams` streams placing with `placement` into a window following
    /// `policy`, emitting chunks in order to `tx`; a stream that does not move for `stall`
    /// is no longer waited for.
    pub fn new(
        placement: P,
        policy: WindowPolicy,
        streams: usize,
        stall: Duration,
        tx: crossbeam_channel::Sender<Chunk>,
    ) -> Self {
        let asm = ChunkAssembler::with_policy(placement.clone(), policy);
        // Open chunks are consecutive ids, so id % len never collides within the window.
        let len = asm.policy().max_active;
        let ring = (0..len)
            .map(|_| RingSlot {
                id: AtomicU64::new(CLOSED),
                view: UnsafeCell::new(ChunkView {
                    data: std::ptr::null_mut(),
                    received: std::ptr::null_mut(),
                    offsets: std::ptr::null_mut(),
                }),
            })
            .collect();
        let streams = streams.max(1);
        ChunkGroup {
            n_slots: placement.n_slots(),
            slot_bytes: placement.slot_bytes() as u64,
            placement,
            ring,
            locks: (0..STRIPES).map(|_| Stripe::default()).collect(),
            source: AtomicU64::new(CLOSED),
            streams: (0..streams).map(|_| StreamState::default()).collect(),
            window: Mutex::new(Window {
                asm,
                near_seen: vec![0; streams],
                out: Vec::new(),
                tx,
            }),
            stall,
            gone: AtomicBool::new(false),
            wait_consumer_ns: AtomicU64::new(0),
            wait_streams_ns: AtomicU64::new(0),
        }
    }

    /// Time the streams spent waiting since the last call, summed over the streams: for
    /// the consumer to take emitted chunks, and for lagging streams to reach the oldest
    /// chunk.
    pub fn take_waits(&self) -> (Duration, Duration) {
        let take = |a: &AtomicU64| Duration::from_nanos(a.swap(0, Ordering::Relaxed));
        (take(&self.wait_consumer_ns), take(&self.wait_streams_ns))
    }

    /// Streams in the group.
    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Places one packet of stream `stream`; false once the consumer is gone. The stream
    /// leaves after the packet (a fence per packet): a receive thread places its batches
    /// through [`Self::batch`] instead.
    pub fn push(&self, stream: usize, c: &mut StreamCounts, buf: &[u8]) -> bool {
        let live = self.push_inside(stream, c, buf);
        self.leave(stream, c);
        live
    }

    /// A batch of stream `stream`'s packets: the stream stays inside between them and
    /// leaves (one fence) when the batch is dropped. Nothing may block while a batch lives
    /// (the slow path of another stream waits for this one to leave).
    pub fn batch<'a>(&'a self, stream: usize, c: &'a mut StreamCounts) -> StreamBatch<'a, P> {
        StreamBatch {
            group: self,
            stream,
            c,
        }
    }

    /// Places one packet, staying inside.
    fn push_inside(&self, stream: usize, c: &mut StreamCounts, buf: &[u8]) -> bool {
        if let Fast::Slow = self.try_fast(stream, c, buf) {
            self.leave(stream, c);
            self.slow(stream, c, buf);
        }
        !self.gone.load(Ordering::Relaxed)
    }

    /// The stream leaves the published chunks: its streaming stores fenced, then its
    /// `inside` flag cleared.
    fn leave(&self, stream: usize, c: &mut StreamCounts) {
        if c.inside {
            crate::mem::stream_fence();
            self.streams[stream].inside.store(false, Ordering::Release);
            c.inside = false;
        }
    }

    /// Sends the window's emitted chunks to the consumer (under the mutex: in order).
    fn send(&self, w: &mut Window<P>) {
        for c in w.out.drain(..) {
            let sent = match w.tx.try_send(c) {
                Ok(()) => Ok(()),
                Err(crossbeam_channel::TrySendError::Full(c)) => {
                    // The consumer is behind: every receive thread waits here (the
                    // window's mutex is held), so the sockets take up the slack.
                    let t = Instant::now();
                    let r = w.tx.send(c).map_err(|_| ());
                    add_ns(&self.wait_consumer_ns, t);
                    r
                }
                Err(crossbeam_channel::TrySendError::Disconnected(_)) => Err(()),
            };
            if sent.is_err() {
                self.gone.store(true, Ordering::Relaxed);
            }
        }
    }

    /// The fast path: a clean packet for a published chunk, written without the mutex.
    fn try_fast(&self, stream: usize, c: &mut StreamCounts, buf: &[u8]) -> Fast {
        let Ok(pkt) = PacketView::parse(buf) else {
            c.malformed += 1;
            return Fast::Done;
        };
        let Ok(place) = self.placement.place(&pkt) else {
            return Fast::Slow;
        };
        let (a, len) = (pkt.payload_offset, pkt.payload_length);
        if place.slot >= self.n_slots || a.checked_add(len).is_none_or(|b| b > self.slot_bytes) {
            return Fast::Slow;
        }
        if place
            .source
            .is_some_and(|s| self.source.load(Ordering::Relaxed) != s)
        {
            return Fast::Slow;
        }
        let ring = &self.ring[(place.chunk_id % self.ring.len() as u64) as usize];
        if !c.inside {
            // Announced before the slot is read (both sequentially consistent: the slow
            // path closes the slots, then waits for streams inside).
            self.streams[stream].inside.store(true, Ordering::SeqCst);
            c.inside = true;
        }
        if ring.id.load(Ordering::SeqCst) != place.chunk_id {
            return Fast::Slow;
        }
        // SAFETY: inside, and the slot publishes this chunk: the slow path does not change
        // the view or emit the chunk until we leave.
        let view = unsafe { *ring.view.get() };
        let heap = (place.chunk_id as usize)
            .wrapping_mul(self.n_slots)
            .wrapping_add(place.slot) as u64;
        // Fibonacci hashing: heaps written at the same time (pols, neighbours) spread.
        let stripe = (heap.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 55) as usize % STRIPES;
        let guard = self.locks[stripe]
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // SAFETY: slot < n_slots, the chunk's vectors have n_slots entries; the heap lock
        // makes this writer the only one of this heap.
        let (got, offs) = unsafe {
            (
                &mut *view.received.add(place.slot),
                &mut *view.offsets.add(place.slot),
            )
        };
        let (start, end) = (a as u32, (a + len) as u32);
        let placed = if *got as u64 + len > self.slot_bytes || offs.overlaps(start, end) {
            c.duplicate += 1;
            false
        } else {
            offs.insert(start, end);
            let base = place.slot * self.slot_bytes as usize + a as usize;
            // SAFETY: base + len ≤ n_slots × slot_bytes (checked above); other writers
            // write other heaps or wait for this heap's lock; fenced when the stream leaves.
            unsafe { crate::mem::copy_stream(view.data.add(base), pkt.payload) };
            *got += len as u32;
            if *got as u64 == self.slot_bytes {
                c.heaps += 1;
            }
            true
        };
        drop(guard);
        if placed {
            c.packets += 1;
            c.bytes += len;
        }
        c.near += 1;
        self.streams[stream].near.store(c.near, Ordering::Relaxed);
        self.moved(stream, c, place.chunk_id);
        Fast::Done
    }

    /// Notes that `stream` delivered a packet for chunk `id`.
    fn moved(&self, stream: usize, c: &mut StreamCounts, id: u64) {
        if id.saturating_add(1) != c.last {
            c.last = id.saturating_add(1);
            self.streams[stream].last.store(c.last, Ordering::Relaxed);
        }
        if id.saturating_add(1) > c.head {
            c.head = id.saturating_add(1);
            let s = &self.streams[stream];
            s.head.store(c.head, Ordering::Release);
            s.stalled.store(false, Ordering::Relaxed);
        }
    }

    /// The slow path: the packet goes through the window itself, under the mutex, with the
    /// published chunks closed.
    fn slow(&self, stream: usize, c: &mut StreamCounts, buf: &[u8]) {
        let id = PacketView::parse(buf)
            .ok()
            .and_then(|p| self.placement.place(&p).ok())
            .map(|p| p.chunk_id);
        if let Some(id) = id {
            self.moved(stream, c, id);
        }
        let mut w = self.lock_for(stream, id);
        // A packet near the window placed on a fast path since the last slow one ends a
        // run of far packets.
        let mut near = false;
        for (seen, s) in w.near_seen.iter_mut().zip(self.streams.iter()) {
            let n = s.near.load(Ordering::Relaxed);
            near |= n != *seen;
            *seen = n;
        }
        if near {
            w.asm.reset_vote();
        }
        if let Some(id) = id {
            if self.lags(stream, id, &w.asm) {
                // One stream behind the others (its socket holds a backlog): its packets
                // are too old, they do not drag the window back.
                w.asm.reject_too_old(id);
                return;
            }
        }
        self.close_all();
        let w = &mut *w;
        let _ = w.asm.push(buf, &mut w.out);
        // Its copy visible before another stream emits the chunk.
        crate::mem::stream_fence();
        self.publish(&mut w.asm);
        self.send(w);
    }

    /// The window's mutex for a packet of chunk `id` from `stream`: when placing it would
    /// push the oldest chunk out while another (not stalled) stream has not yet moved past
    /// it, waits for that stream (up to the stall time, then takes it as stalled).
    fn lock_for(&self, stream: usize, id: Option<u64>) -> std::sync::MutexGuard<'_, Window<P>> {
        let start = Instant::now();
        loop {
            let w = self.window.lock().unwrap_or_else(|e| e.into_inner());
            let Some(id) = id else { return w };
            let Some((front, back)) = w.asm.bounds() else {
                return w;
            };
            let open = back - front + 1;
            if id <= back || (open as usize) < w.asm.policy().max_active {
                return w;
            }
            let lagging: Vec<usize> = (0..self.streams.len())
                .filter(|&s| s != stream)
                .filter(|&s| {
                    let st = &self.streams[s];
                    !st.stalled.load(Ordering::Relaxed)
                        && st.head.load(Ordering::Acquire) <= front + 1
                })
                .collect();
            if lagging.is_empty() {
                return w;
            }
            if start.elapsed() >= self.stall {
                for s in lagging {
                    self.streams[s].stalled.store(true, Ordering::Relaxed);
                    tracing::warn!(
                        stream = s,
                        chunk = front,
                        waited_ms = self.stall.as_millis() as u64,
                        "a receive stream did not reach the oldest chunk: not waited for \
                         until it delivers again"
                    );
                }
                return w;
            }
            drop(w);
            let t = Instant::now();
            std::thread::sleep(Duration::from_micros(20));
            add_ns(&self.wait_streams_ns, t);
        }
    }

    /// True if a packet of `stream` for chunk `id` is far behind the window while another
    /// (not stalled) stream's latest packet is near it: the stream lags, the stream as a
    /// whole did not move back.
    fn lags(&self, stream: usize, id: u64, asm: &ChunkAssembler<P>) -> bool {
        let Some((lo, hi)) = asm.bounds() else {
            return false;
        };
        let tol = asm.policy().jump_chunks;
        if id.saturating_add(tol) >= lo {
            return false;
        }
        let near =
            |last: u64| last > 0 && last - 1 + tol >= lo && last - 1 <= hi.saturating_add(tol);
        self.streams.iter().enumerate().any(|(s, st)| {
            s != stream
                && !st.stalled.load(Ordering::Relaxed)
                && near(st.last.load(Ordering::Relaxed))
        })
    }

    /// Closes every ring slot and waits until no stream is inside (a stream inside sees a
    /// closed slot at its next packet and leaves, or leaves at the end of its batch).
    fn close_all(&self) {
        for r in self.ring.iter() {
            r.id.store(CLOSED, Ordering::SeqCst);
        }
        for s in self.streams.iter() {
            while s.inside.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        }
    }

    /// Publishes the window's open chunks in the ring (every slot closed, no writer).
    fn publish(&self, asm: &mut ChunkAssembler<P>) {
        let len = self.ring.len() as u64;
        for c in asm.active_mut() {
            let r = &self.ring[(c.chunk_id % len) as usize];
            let view = ChunkView {
                data: c.data.as_mut_ptr(),
                received: c.received.as_mut_ptr(),
                offsets: c.offsets.as_mut_ptr(),
            };
            // SAFETY: the slot is closed and has no writer (close_all), so nobody reads it.
            unsafe { *r.view.get() = view };
            r.id.store(c.chunk_id, Ordering::SeqCst);
        }
        self.source
            .store(asm.source().unwrap_or(CLOSED), Ordering::Relaxed);
    }

    /// Allocates chunk buffers until the window holds `n` for reuse
    /// ([`ChunkAssembler::prefill`]).
    pub fn prefill(&self, n: usize) {
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        w.asm.prefill(n);
    }

    /// Adds a stream's fast-path counters to the window's (and zeroes them), returns the
    /// totals so far with the window's free chunk buffers and any allocation failure, all
    /// under one lock; chunks returned by the consumer go back to the window for reuse.
    pub fn sync(&self, c: &mut StreamCounts, recycle: &mut dyn Iterator<Item = Chunk>) -> Synced {
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        for chunk in recycle {
            w.asm.recycle(chunk);
        }
        let s = &mut w.asm.stats;
        s.packets += std::mem::take(&mut c.packets);
        s.bytes += std::mem::take(&mut c.bytes);
        s.heaps += std::mem::take(&mut c.heaps);
        s.rejects[Reject::Malformed as usize] += std::mem::take(&mut c.malformed);
        s.rejects[Reject::Duplicate as usize] += std::mem::take(&mut c.duplicate);
        Synced {
            stats: s.clone(),
            free_chunks: w.asm.free_chunks(),
            alloc_error: w.asm.take_alloc_error(),
        }
    }

    /// Chunk buffers held for reuse.
    pub fn free_chunks(&self) -> usize {
        let w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        w.asm.free_chunks()
    }

    /// End of every stream: emits the open chunks, oldest first, and returns the counters
    /// (every stream's counters must have been added with [`ChunkGroup::sync`]).
    pub fn flush(&self) -> ChunkStats {
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        self.close_all();
        let w = &mut *w;
        w.asm.flush(&mut w.out);
        self.send(w);
        w.asm.stats.clone()
    }
}

/// A stream's batch of packets ([`ChunkGroup::batch`]): the stream leaves when it is
/// dropped.
pub struct StreamBatch<'a, P: Placement + Clone> {
    group: &'a ChunkGroup<P>,
    stream: usize,
    c: &'a mut StreamCounts,
}

impl<P: Placement + Clone> StreamBatch<'_, P> {
    /// Places one packet; false once the consumer is gone.
    pub fn push(&mut self, buf: &[u8]) -> bool {
        self.group.push_inside(self.stream, self.c, buf)
    }
}

impl<P: Placement + Clone> Drop for StreamBatch<'_, P> {
    fn drop(&mut self) {
        self.group.leave(self.stream, self.c);
    }
}

/// Adds the time since `t` to the nanosecond counter `a`.
fn add_ns(a: &AtomicU64, t: Instant) {
    a.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
}
