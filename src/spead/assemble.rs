//! Heap assembly: packets of any number of heaps, in any order, into complete heaps.
//!
//! Heaps are keyed by heap counter. At most `max_partial` heaps are under assembly at
//! once; when another one starts, the least recently touched partial heap is evicted and
//! counted as incomplete. Duplicates and overlaps are counted and ignored. The payload
//! memory of all partial heaps together is bounded too (`max_partial_bytes`): a capture of
//! heaps that claim to be huge, or of size-less heaps written at far offsets, evicts older
//! partial heaps rather than taking the machine's memory.

use std::collections::VecDeque;

use super::packet::{DropReason, ItemPointer, PacketView};
use super::{ids, CTRL_STREAM_STOP};

/// A received heap. `complete` is false only for heaps delivered by eviction or flush.
#[derive(Debug, Clone)]
pub struct Heap {
    /// Heap counter.
    pub cnt: u64,
    /// Heap size in bytes (from the packets; for heaps without a size, the bytes seen).
    pub size: u64,
    /// Application item pointers, de-duplicated, in order of first appearance.
    pub pointers: Vec<ItemPointer>,
    /// Payload bytes, at their heap offsets (zero where nothing arrived).
    pub payload: Vec<u8>,
    /// All payload bytes arrived.
    pub complete: bool,
    /// Payload bytes actually received.
    pub received: u64,
}

/// The value of one item of a heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemValue<'a> {
    /// An immediate item's value (48 bits).
    Immediate(u64),
    /// An addressed item's bytes.
    Bytes(&'a [u8]),
}

impl ItemValue<'_> {
    /// Integer value: an immediate, or an addressed item of at most 8 bytes read big-endian.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            ItemValue::Immediate(v) => Some(v),
            ItemValue::Bytes(b) if b.len() <= 8 => {
                Some(b.iter().fold(0u64, |acc, &x| (acc << 8) | x as u64))
            }
            ItemValue::Bytes(_) => None,
        }
    }
}

impl Heap {
    /// Byte range of an addressed item: from its address to the address of the next
    /// addressed item in pointer order (as spead2 does), or to the heap end.
    fn addressed_range(&self, idx: usize) -> Option<(usize, usize)> {
        let start = self.pointers[idx].value;
        let end = self.pointers[idx + 1..]
            .iter()
            .find(|q| !q.immediate)
            .map_or(self.size, |q| q.value);
        if start > end || end > self.payload.len() as u64 {
            return None;
        }
        Some((start as usize, end as usize))
    }

    /// Value of the first item with this ID.
    pub fn item(&self, id: u16) -> Option<ItemValue<'_>> {
        let i = self.pointers.iter().position(|p| p.id == id)?;
        self.value_of(i)
    }

    pub(super) fn value_of(&self, idx: usize) -> Option<ItemValue<'_>> {
        let p = self.pointers[idx];
        if p.immediate {
            Some(ItemValue::Immediate(p.value))
        } else {
            let (a, b) = self.addressed_range(idx)?;
            Some(ItemValue::Bytes(&self.payload[a..b]))
        }
    }

    /// All items, in pointer order (descriptor and NULL items included).
    pub fn items(&self) -> Vec<(u16, ItemValue<'_>)> {
        (0..self.pointers.len())
            .filter_map(|i| Some((self.pointers[i].id, self.value_of(i)?)))
            .collect()
    }

    /// Immediate (or short addressed) integer item.
    pub fn u64_item(&self, id: u16) -> Option<u64> {
        self.item(id)?.as_u64()
    }

    /// True for a stream-control stop heap.
    pub fn is_stop(&self) -> bool {
        self.pointers
            .iter()
            .any(|p| p.id == ids::STREAM_CTRL && p.immediate && p.value == CTRL_STREAM_STOP)
    }

    /// All addressed items lie inside the heap and in range.
    fn addresses_valid(&self) -> bool {
        self.pointers
            .iter()
            .filter(|p| !p.immediate)
            .all(|p| p.value <= self.size)
    }
}

/// Counters kept by an [`Assembler`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssemblerStats {
    /// Packets accepted.
    pub packets: u64,
    /// Heaps completed.
    pub heaps: u64,
    /// Payload bytes accepted.
    pub bytes: u64,
    /// Incomplete heaps pushed out to make room for newer ones.
    pub incomplete_heaps_evicted: u64,
    /// Incomplete heaps left at the end of the stream (flush).
    pub incomplete_heaps_flushed: u64,
    /// Stream-control stop heaps received.
    pub stop_heaps: u64,
    /// Packets dropped, per [`DropReason`] (indexed by `DropReason as usize`).
    pub drops: [u64; DropReason::ALL.len()],
}

impl AssemblerStats {
    /// Packets dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    /// Packets dropped for any reason.
    pub fn total_dropped(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Counts one packet dropped for `reason`.
    pub fn count(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }
}

struct Partial {
    heap: Heap,
    /// Pointers with their order key (payload offset of the packet, index in it): pointer
    /// order defines addressed item lengths, and packets may arrive in any order.
    keyed: Vec<((u64, usize), ItemPointer)>,
    /// Received byte ranges [start, end), sorted, merged.
    ranges: Vec<(u64, u64)>,
    last_used: u64,
}

impl Partial {
    fn into_heap(mut self) -> Heap {
        self.keyed.sort_by_key(|(k, _)| *k);
        self.heap.pointers = self.keyed.into_iter().map(|(_, p)| p).collect();
        self.heap
    }

    /// Checks [a, b) against what is already received: Ok(()) if new.
    fn check(&self, a: u64, b: u64) -> Result<(), DropReason> {
        for &(s, e) in &self.ranges {
            if a < e && s < b {
                return Err(if s <= a && b <= e {
                    DropReason::Duplicate
                } else {
                    DropReason::OverlappingPayload
                });
            }
        }
        Ok(())
    }

    fn insert(&mut self, a: u64, b: u64) {
        if a == b {
            return;
        }
        let i = self.ranges.partition_point(|r| r.0 < a);
        self.ranges.insert(i, (a, b));
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.ranges.len());
        for &(s, e) in &self.ranges {
            match merged.last_mut() {
                Some(last) if last.1 == s => last.1 = e,
                _ => merged.push((s, e)),
            }
        }
        self.ranges = merged;
    }
}

/// Packets in, heaps out.
pub struct Assembler {
    max_partial: usize,
    max_heap_size: u64,
    /// Payload bytes all partial heaps may hold together (at least one largest heap).
    max_partial_bytes: u64,
    /// Payload bytes the partial heaps hold now.
    partial_bytes: u64,
    keep_incomplete: bool,
    partial: Vec<Partial>,
    recent: VecDeque<u64>,
    clock: u64,
    /// Counters so far.
    pub stats: AssemblerStats,
}

impl Default for Assembler {
    fn default() -> Self {
        Assembler::new(4)
    }
}

impl Assembler {
    /// `max_partial` heaps may be under assembly at once (spead2's `max_heaps`).
    pub fn new(max_partial: usize) -> Self {
        Assembler {
            max_partial: max_partial.max(1),
            max_heap_size: 1 << 30,
            max_partial_bytes: 2 << 30,
            partial_bytes: 0,
            keep_incomplete: false,
            partial: Vec::new(),
            recent: VecDeque::new(),
            clock: 0,
            stats: AssemblerStats::default(),
        }
    }

    /// Largest heap accepted (bigger ones are dropped as `HeapTooLarge`).
    pub fn with_max_heap_size(mut self, bytes: u64) -> Self {
        self.max_heap_size = bytes;
        self.max_partial_bytes = self.max_partial_bytes.max(bytes);
        self
    }

    /// Payload bytes all heaps under assembly may hold together (default 2 GiB; never less
    /// than the largest heap): older partial heaps are evicted to stay within it.
    pub fn with_max_partial_bytes(mut self, bytes: u64) -> Self {
        self.max_partial_bytes = bytes.max(self.max_heap_size);
        self
    }

    /// Payload bytes the heaps under assembly hold now.
    pub fn partial_bytes(&self) -> u64 {
        self.partial_bytes
    }

    /// Evicts the least recently used partial heaps other than heap `keep` until `need`
    /// more bytes fit the budget.
    fn make_room(&mut self, need: u64, keep: Option<u64>, out: &mut Vec<Heap>) {
        while self.partial_bytes + need > self.max_partial_bytes {
            let oldest = self
                .partial
                .iter()
                .enumerate()
                .filter(|(_, p)| Some(p.heap.cnt) != keep)
                .min_by_key(|(_, p)| p.last_used)
                .map(|(i, _)| i);
            match oldest {
                Some(i) => self.evict(i, out, false),
                None => return,
            }
        }
    }

    /// Removes partial heap `idx`, releasing its bytes from the budget.
    fn take_partial(&mut self, idx: usize) -> Partial {
        let p = self.partial.swap_remove(idx);
        self.partial_bytes -= p.heap.payload.len() as u64;
        p
    }

    /// Deliver evicted/flushed incomplete heaps (flagged `complete = false`) instead of
    /// only counting them.
    pub fn with_keep_incomplete(mut self, keep: bool) -> Self {
        self.keep_incomplete = keep;
        self
    }

    fn remember_done(&mut self, cnt: u64) {
        if self.recent.len() >= 2 * self.max_partial + 8 {
            self.recent.pop_front();
        }
        self.recent.push_back(cnt);
    }

    fn finish(&mut self, mut heap: Heap, out: &mut Vec<Heap>) {
        if !heap.addresses_valid() {
            self.stats.count(DropReason::BadItemAddress);
            return;
        }
        heap.complete = true;
        self.stats.heaps += 1;
        if heap.is_stop() {
            self.stats.stop_heaps += 1;
        }
        self.remember_done(heap.cnt);
        out.push(heap);
    }

    fn evict(&mut self, idx: usize, out: &mut Vec<Heap>, flushed: bool) {
        let p = self.take_partial(idx);
        if flushed {
            self.stats.incomplete_heaps_flushed += 1;
        } else {
            self.stats.incomplete_heaps_evicted += 1;
        }
        if self.keep_incomplete {
            let mut h = p.into_heap();
            h.complete = false;
            if h.addresses_valid() {
                out.push(h);
            }
        }
    }

    /// Feeds one packet; completed (and, if asked, evicted) heaps are appended to `out`.
    /// Returns the drop reason if the packet was not used.
    pub fn push(&mut self, buf: &[u8], out: &mut Vec<Heap>) -> Result<(), DropReason> {
        let r = self.push_inner(buf, out);
        if let Err(reason) = r {
            self.stats.count(reason);
        }
        r
    }

    fn push_inner(&mut self, buf: &[u8], out: &mut Vec<Heap>) -> Result<(), DropReason> {
        let pkt = PacketView::parse(buf)?;
        if pkt.heap_size.unwrap_or(0) > self.max_heap_size
            || pkt.payload_offset + pkt.payload_length > self.max_heap_size
        {
            return Err(DropReason::HeapTooLarge);
        }
        self.clock += 1;
        let (a, b) = (pkt.payload_offset, pkt.payload_offset + pkt.payload_length);
        let idx = self.partial.iter().position(|p| p.heap.cnt == pkt.heap_cnt);

        let idx = match idx {
            Some(i) => {
                let p = &self.partial[i];
                if pkt.heap_size.is_some() && p.heap.size != pkt.heap_size.unwrap_or(0) {
                    return Err(DropReason::InconsistentHeapSize);
                }
                p.check(a, b)?;
                i
            }
            None => {
                if self.recent.contains(&pkt.heap_cnt) {
                    return Err(DropReason::Duplicate);
                }
                // Fast path: a whole heap in one packet.
                if let Some(size) = pkt.heap_size {
                    if a == 0 && b == size {
                        self.stats.packets += 1;
                        self.stats.bytes += pkt.payload_length;
                        let heap = Heap {
                            cnt: pkt.heap_cnt,
                            size,
                            pointers: dedup(pkt.items()),
                            payload: pkt.payload.to_vec(),
                            complete: true,
                            received: size,
                        };
                        self.finish(heap, out);
                        return Ok(());
                    }
                }
                if self.partial.len() >= self.max_partial {
                    let oldest = self
                        .partial
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, p)| p.last_used)
                        .map(|(i, _)| i)
                        .unwrap_or(0);
                    self.evict(oldest, out, false);
                }
                let size = pkt.heap_size.unwrap_or(0);
                self.make_room(size, None, out);
                self.partial_bytes += size;
                self.partial.push(Partial {
                    heap: Heap {
                        cnt: pkt.heap_cnt,
                        size,
                        pointers: Vec::new(),
                        payload: vec![0; size as usize],
                        complete: false,
                        received: 0,
                    },
                    keyed: Vec::new(),
                    ranges: Vec::new(),
                    last_used: 0,
                });
                self.partial.len() - 1
            }
        };

        self.stats.packets += 1;
        self.stats.bytes += pkt.payload_length;
        let clock = self.clock;
        let mut idx = idx;
        let len = self.partial[idx].heap.payload.len() as u64;
        if pkt.heap_size.is_none() && len < b {
            // A heap of unknown size grows to its furthest byte: within the budget.
            let cnt = self.partial[idx].heap.cnt;
            self.partial[idx].last_used = clock;
            self.make_room(b - len, Some(cnt), out);
            idx = self
                .partial
                .iter()
                .position(|p| p.heap.cnt == cnt)
                .unwrap_or(idx);
            self.partial_bytes += b - len;
        }
        let p = &mut self.partial[idx];
        p.last_used = clock;
        for (i, ptr) in pkt.items().enumerate() {
            let key = (a, i);
            match p.keyed.iter_mut().find(|(_, q)| *q == ptr) {
                Some(k) => k.0 = k.0.min(key),
                None => p.keyed.push((key, ptr)),
            }
        }
        if pkt.heap_size.is_none() && p.heap.payload.len() < b as usize {
            p.heap.payload.resize(b as usize, 0);
            p.heap.size = b;
        }
        p.heap.payload[a as usize..b as usize].copy_from_slice(pkt.payload);
        p.heap.received += b - a;
        p.insert(a, b);
        let done = pkt.heap_size.is_some() && p.heap.received == p.heap.size;
        if done {
            let p = self.take_partial(idx);
            self.finish(p.into_heap(), out);
        }
        Ok(())
    }

    /// Ends the stream: every partial heap is counted as incomplete (and delivered if
    /// `keep_incomplete`).
    pub fn flush(&mut self, out: &mut Vec<Heap>) {
        while !self.partial.is_empty() {
            self.evict(self.partial.len() - 1, out, true);
        }
    }

    /// Heaps currently under assembly.
    pub fn n_partial(&self) -> usize {
        self.partial.len()
    }
}

fn dedup(it: impl Iterator<Item = ItemPointer>) -> Vec<ItemPointer> {
    let mut v: Vec<ItemPointer> = Vec::new();
    for p in it {
        if !v.contains(&p) {
            v.push(p);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet of heap `cnt` with no heap size: `len` bytes at `offset`.
    fn sizeless(cnt: u64, offset: u64, len: usize) -> Vec<u8> {
        let ptrs = [
            ItemPointer::immediate(ids::HEAP_CNT, cnt),
            ItemPointer::immediate(ids::HEAP_OFFSET, offset),
            ItemPointer::immediate(ids::PAYLOAD_LENGTH, len as u64),
        ];
        let mut b = vec![0x53, 4, 2, 6, 0, 0, 0, ptrs.len() as u8];
        for p in ptrs {
            b.extend_from_slice(&p.to_raw().to_be_bytes());
        }
        b.extend(std::iter::repeat_n(7u8, len));
        b
    }

    /// Size-less heaps written at far offsets (each packet would grow its heap to 1 MiB)
    /// stay within the partial-heap budget: older ones are evicted and counted, not kept.
    #[test]
    fn partial_heaps_stay_within_the_byte_budget() {
        let mut a = Assembler::new(64)
            .with_max_heap_size(1 << 20)
            .with_max_partial_bytes(3 << 20);
        let mut out = Vec::new();
        for cnt in 1..=10 {
            a.push(&sizeless(cnt, (1 << 20) - 8, 8), &mut out).unwrap();
            assert!(a.partial_bytes() <= 3 << 20, "{}", a.partial_bytes());
        }
        assert_eq!(a.n_partial(), 3);
        assert_eq!(a.stats.incomplete_heaps_evicted, 7);
        // A heap growing past the budget evicts the others, never itself.
        a.push(&sizeless(5000, 0, 8), &mut out).unwrap();
        a.push(&sizeless(5000, (1 << 20) - 8, 8), &mut out).unwrap();
        assert!(a.partial_bytes() <= 3 << 20);
        a.flush(&mut out);
        assert_eq!(a.partial_bytes(), 0);
        // Heaps that claim a size count it whole: two of 1 MiB fit a budget of 2 MiB.
        let mut a = Assembler::new(64)
            .with_max_heap_size(1 << 20)
            .with_max_partial_bytes(2 << 20);
        for cnt in 1..=5u64 {
            let ptrs = [
                ItemPointer::immediate(ids::HEAP_CNT, cnt),
                ItemPointer::immediate(ids::HEAP_SIZE, 1 << 20),
                ItemPointer::immediate(ids::HEAP_OFFSET, 0),
                ItemPointer::immediate(ids::PAYLOAD_LENGTH, 8),
            ];
            let mut b = vec![0x53, 4, 2, 6, 0, 0, 0, 4];
            for p in ptrs {
                b.extend_from_slice(&p.to_raw().to_be_bytes());
            }
            b.extend([1u8; 8]);
            a.push(&b, &mut out).unwrap();
        }
        assert_eq!((a.n_partial(), a.partial_bytes()), (2, 2 << 20));
        assert_eq!(a.stats.incomplete_heaps_evicted, 3);
    }
}
