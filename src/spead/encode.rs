//! Heap → packets. Payload slices borrow the caller's buffers: nothing is copied until a
//! transport gathers the parts (sendmmsg iovecs, pcap writer).

use std::borrow::Cow;

use super::{ids, packet_header, ItemPointer, CTRL_STREAM_STOP, HEADER_BYTES, ITEM_POINTER_BYTES};

/// A heap whose item pointers do not fit the packet size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "max packet size {max_packet_size} cannot hold the {pointers} item pointers of heap {heap_cnt}"
)]
pub struct PacketSizeError {
    /// The packet size asked for, rounded down to a multiple of 8.
    pub max_packet_size: usize,
    /// Item pointers the heap carries (besides the four standard ones).
    pub pointers: usize,
    /// The heap's counter.
    pub heap_cnt: u64,
}

/// Number of standard pointers (heap cnt, heap size, heap offset, payload length).
pub const STANDARD_POINTERS: usize = 4;

#[derive(Debug, Clone)]
enum Value<'a> {
    Immediate(u64),
    Addressed(Cow<'a, [u8]>),
}

/// A heap under construction: items in the order they will appear.
#[derive(Debug, Clone)]
pub struct HeapBuilder<'a> {
    /// Heap counter.
    pub cnt: u64,
    items: Vec<(u16, Value<'a>)>,
}

/// One packet: header and item pointers (owned, small) and payload slices (borrowed).
#[derive(Debug, Clone)]
pub struct PacketParts<'a> {
    /// SPEAD header and item pointers.
    pub header: Vec<u8>,
    /// Payload slices, in order.
    pub payload: Vec<&'a [u8]>,
}

impl PacketParts<'_> {
    /// Bytes of the whole packet.
    pub fn len(&self) -> usize {
        self.header.len() + self.payload.iter().map(|p| p.len()).sum::<usize>()
    }

    /// True if the packet has no bytes (packets from [`HeapBuilder::packets`] always have a
    /// header).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The packet as one contiguous buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(&self.header);
        for p in &self.payload {
            v.extend_from_slice(p);
        }
        v
    }
}

impl<'a> HeapBuilder<'a> {
    /// An empty heap with counter `cnt`.
    pub fn new(cnt: u64) -> Self {
        HeapBuilder {
            cnt,
            items: Vec::new(),
        }
    }

    /// Adds an immediate item (low 48 bits of `value`, sent big-endian).
    pub fn immediate(mut self, id: u16, value: u64) -> Self {
        self.items.push((id, Value::Immediate(value)));
        self
    }

    /// Adds an addressed item whose bytes are borrowed.
    pub fn addressed(mut self, id: u16, data: &'a [u8]) -> Self {
        self.items.push((id, Value::Addressed(Cow::Borrowed(data))));
        self
    }

    /// Adds an addressed item that owns its bytes.
    pub fn addressed_owned(mut self, id: u16, data: Vec<u8>) -> Self {
        self.items.push((id, Value::Addressed(Cow::Owned(data))));
        self
    }

    /// Adds the stream-control "stop" item.
    pub fn stop(self) -> Self {
        self.immediate(ids::STREAM_CTRL, CTRL_STREAM_STOP)
    }

    /// Total payload bytes of the heap (as sent: an empty heap carries one padding byte).
    pub fn heap_size(&self) -> u64 {
        let n: u64 = self
            .items
            .iter()
            .map(|(_, v)| match v {
                Value::Addressed(d) => d.len() as u64,
                Value::Immediate(_) => 0,
            })
            .sum();
        n.max(1)
    }

    /// Splits the heap into packets of at most `max_packet_size` bytes (rounded down to a
    /// multiple of 8, as spead2 does). With `repeat_pointers`, every packet carries every
    /// item pointer (katgpucbf data heaps); otherwise pointers go in the first packets.
    /// Returns an error if the pointers cannot fit at all.
    pub fn packets(
        &self,
        max_packet_size: usize,
        repeat_pointers: bool,
    ) -> Result<Vec<PacketParts<'_>>, PacketSizeError> {
        let max_packet_size = max_packet_size & !7;
        // Lay out payload: addressed items back to back, in order.
        let mut pointers: Vec<ItemPointer> = Vec::with_capacity(self.items.len() + 1);
        let mut segments: Vec<&[u8]> = Vec::new();
        let mut offset = 0u64;
        for (id, v) in &self.items {
            match v {
                Value::Immediate(x) => pointers.push(ItemPointer::immediate(*id, *x)),
                Value::Addressed(d) => {
                    pointers.push(ItemPointer::address(*id, offset));
                    offset += d.len() as u64;
                    segments.push(d);
                }
            }
        }
        const PAD: &[u8] = &[0];
        if offset == 0 {
            pointers.push(ItemPointer::address(ids::NULL, 0));
            segments.push(PAD);
            offset = 1;
        }
        let heap_size = offset;
        let base = HEADER_BYTES + STANDARD_POINTERS * ITEM_POINTER_BYTES;
        let per_packet_ptrs = if repeat_pointers {
            pointers.len()
        } else {
            max_packet_size.saturating_sub(base) / ITEM_POINTER_BYTES
        };
        let min_needed = base
            + if repeat_pointers {
                pointers.len() * ITEM_POINTER_BYTES + 1
            } else {
                8
            };
        if max_packet_size < min_needed {
            return Err(PacketSizeError {
                max_packet_size,
                pointers: pointers.len(),
                heap_cnt: self.cnt,
            });
        }

        let mut out = Vec::new();
        let mut next_ptr = 0usize;
        let mut pos = 0u64;
        while pos < heap_size || next_ptr < pointers.len() {
            let these: &[ItemPointer] = if repeat_pointers {
                &pointers
            } else {
                let end = (next_ptr + per_packet_ptrs).min(pointers.len());
                let s = &pointers[next_ptr..end];
                next_ptr = end;
                s
            };
            if repeat_pointers {
                next_ptr = pointers.len();
            }
            let room = (max_packet_size - base - these.len() * ITEM_POINTER_BYTES) as u64;
            let len = room.min(heap_size - pos);
            let n_ptrs = STANDARD_POINTERS + these.len();
            let mut header = Vec::with_capacity(HEADER_BYTES + n_ptrs * ITEM_POINTER_BYTES);
            header.extend_from_slice(&packet_header(n_ptrs as u16));
            for p in [
                ItemPointer::immediate(ids::HEAP_CNT, self.cnt),
                ItemPointer::immediate(ids::HEAP_SIZE, heap_size),
                ItemPointer::immediate(ids::HEAP_OFFSET, pos),
                ItemPointer::immediate(ids::PAYLOAD_LENGTH, len),
            ]
            .iter()
            .chain(these)
            {
                header.extend_from_slice(&p.to_raw().to_be_bytes());
            }
            let payload = slice_range(&segments, pos, pos + len);
            out.push(PacketParts { header, payload });
            pos += len;
        }
        Ok(out)
    }
}

/// The sub-slices of the concatenation of `segments` covering bytes [start, end).
fn slice_range<'s>(segments: &[&'s [u8]], start: u64, end: u64) -> Vec<&'s [u8]> {
    let mut out = Vec::new();
    let mut seg_start = 0u64;
    for s in segments {
        let seg_end = seg_start + s.len() as u64;
        let a = start.max(seg_start);
        let b = end.min(seg_end);
        if a < b {
            out.push(&s[(a - seg_start) as usize..(b - seg_start) as usize]);
        }
        seg_start = seg_end;
        if seg_start >= end {
            break;
        }
    }
    out
}

/// Bytes of the SPEAD header of a data packet with `n_immediates` immediate items and one
/// addressed payload item, repeated in every packet (katgpucbf's data heaps): the 8-byte
/// header, the four standard pointers, the immediates and the payload's pointer.
pub fn data_header_len(n_immediates: usize) -> usize {
    HEADER_BYTES + ITEM_POINTER_BYTES * (STANDARD_POINTERS + n_immediates + 1)
}

/// Payload bytes of each data packet (but a heap's last) of such a heap, `packet_payload`
/// asked for: as [`HeapBuilder::packets`] does, the packet size is rounded down to a
/// multiple of 8. Zero where `packet_payload` is too small.
pub fn data_payload_per_packet(n_immediates: usize, packet_payload: usize) -> usize {
    let spead = data_header_len(n_immediates);
    ((spead + packet_payload) & !7).saturating_sub(spead)
}

/// Writes the SPEAD header of the data packet at `offset` (`len` payload bytes) of heap
/// `cnt` (`heap_size` bytes) into `h` (exactly [`data_header_len`] bytes): what
/// [`HeapBuilder::packets`] writes for a heap of `immediates` then one addressed item
/// `payload_id` at offset 0, with repeated pointers.
pub fn write_data_header(
    h: &mut [u8],
    cnt: u64,
    heap_size: u64,
    offset: u64,
    len: u64,
    immediates: impl ExactSizeIterator<Item = (u16, u64)>,
    payload_id: u16,
) {
    let n_ptrs = STANDARD_POINTERS + immediates.len() + 1;
    debug_assert_eq!(h.len(), HEADER_BYTES + n_ptrs * ITEM_POINTER_BYTES);
    h[..HEADER_BYTES].copy_from_slice(&packet_header(n_ptrs as u16));
    let standard = [
        ItemPointer::immediate(ids::HEAP_CNT, cnt),
        ItemPointer::immediate(ids::HEAP_SIZE, heap_size),
        ItemPointer::immediate(ids::HEAP_OFFSET, offset),
        ItemPointer::immediate(ids::PAYLOAD_LENGTH, len),
    ];
    let pointers = standard
        .into_iter()
        .chain(immediates.map(|(id, v)| ItemPointer::immediate(id, v)))
        .chain(std::iter::once(ItemPointer::address(payload_id, 0)));
    for (slot, p) in h[HEADER_BYTES..]
        .chunks_exact_mut(ITEM_POINTER_BYTES)
        .zip(pointers)
    {
        slot.copy_from_slice(&p.to_raw().to_be_bytes());
    }
}

/// Patches the heap offset and payload length of a header [`write_data_header`] wrote.
pub fn patch_data_header(h: &mut [u8], offset: u64, len: u64) {
    let at = HEADER_BYTES + 2 * ITEM_POINTER_BYTES;
    h[at..at + 8].copy_from_slice(
        &ItemPointer::immediate(ids::HEAP_OFFSET, offset)
            .to_raw()
            .to_be_bytes(),
    );
    h[at + 8..at + 16].copy_from_slice(
        &ItemPointer::immediate(ids::PAYLOAD_LENGTH, len)
            .to_raw()
            .to_be_bytes(),
    );
}
