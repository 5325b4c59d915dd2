//! Zero-copy SPEAD packet parsing. Never panics: malformed input yields a [`DropReason`].

use super::{
    ids, ADDRESS_MASK, HEADER_BYTES, HEAP_ADDRESS_BITS, ITEM_POINTER_BYTES, MAGIC, VERSION,
};

/// Why a packet (or heap) was dropped. Each reason is counted separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum DropReason {
    /// Fewer than 8 bytes.
    TooShort = 0,
    /// First byte is not 0x53.
    BadMagic,
    /// Version byte is not 4.
    BadVersion,
    /// Not the 64-48 flavour (item pointer width 2, address width 6).
    UnsupportedFlavour,
    /// Header announces more item pointers than the packet holds.
    TruncatedPointers,
    /// No heap counter item.
    MissingHeapCnt,
    /// No payload offset or payload length item.
    MissingPayloadFields,
    /// Payload length item disagrees with the bytes after the pointers.
    PayloadLengthMismatch,
    /// Payload offset + length exceeds the heap size.
    PayloadBeyondHeap,
    /// A packet of a heap disagrees with earlier packets on the heap size.
    InconsistentHeapSize,
    /// Same payload bytes already received (duplicate packet).
    Duplicate,
    /// Packet overlaps received bytes without being an exact duplicate.
    OverlappingPayload,
    /// Heap size larger than the assembler accepts.
    HeapTooLarge,
    /// An addressed item points outside the heap or before the previous one.
    BadItemAddress,
}

impl DropReason {
    /// Every reason, in counter order (`DropReason as usize` indexes the drop counters).
    pub const ALL: [DropReason; 14] = [
        DropReason::TooShort,
        DropReason::BadMagic,
        DropReason::BadVersion,
        DropReason::UnsupportedFlavour,
        DropReason::TruncatedPointers,
        DropReason::MissingHeapCnt,
        DropReason::MissingPayloadFields,
        DropReason::PayloadLengthMismatch,
        DropReason::PayloadBeyondHeap,
        DropReason::InconsistentHeapSize,
        DropReason::Duplicate,
        DropReason::OverlappingPayload,
        DropReason::HeapTooLarge,
        DropReason::BadItemAddress,
    ];

    /// Stable snake-case name (metric label).
    pub fn name(self) -> &'static str {
        match self {
            DropReason::TooShort => "too_short",
            DropReason::BadMagic => "bad_magic",
            DropReason::BadVersion => "bad_version",
            DropReason::UnsupportedFlavour => "unsupported_flavour",
            DropReason::TruncatedPointers => "truncated_pointers",
            DropReason::MissingHeapCnt => "missing_heap_cnt",
            DropReason::MissingPayloadFields => "missing_payload_fields",
            DropReason::PayloadLengthMismatch => "payload_length_mismatch",
            DropReason::PayloadBeyondHeap => "payload_beyond_heap",
            DropReason::InconsistentHeapSize => "inconsistent_heap_size",
            DropReason::Duplicate => "duplicate",
            DropReason::OverlappingPayload => "overlapping_payload",
            DropReason::HeapTooLarge => "heap_too_large",
            DropReason::BadItemAddress => "bad_item_address",
        }
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One decoded 64-bit item pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ItemPointer {
    /// Item ID (15 bits).
    pub id: u16,
    /// True for an immediate value, false for an address into the heap payload.
    pub immediate: bool,
    /// Immediate value or heap address (48 bits).
    pub value: u64,
}

impl ItemPointer {
    /// Decodes a raw item pointer (in host order, as read big-endian from a packet).
    #[inline]
    pub fn from_raw(raw: u64) -> Self {
        ItemPointer {
            immediate: raw >> 63 != 0,
            id: ((raw >> HEAP_ADDRESS_BITS) & 0x7FFF) as u16,
            value: raw & ADDRESS_MASK,
        }
    }

    /// The raw 64-bit pointer (immediate flag, 15-bit ID, 48-bit value), in host order (it
    /// goes on the wire big-endian).
    #[inline]
    pub fn to_raw(self) -> u64 {
        ((self.immediate as u64) << 63)
            | (((self.id & 0x7FFF) as u64) << HEAP_ADDRESS_BITS)
            | (self.value & ADDRESS_MASK)
    }

    /// An immediate item: `value` (low 48 bits) carried in the pointer.
    pub fn immediate(id: u16, value: u64) -> Self {
        ItemPointer {
            id,
            immediate: true,
            value: value & ADDRESS_MASK,
        }
    }

    /// An addressed item at `offset` in the heap payload.
    pub fn address(id: u16, offset: u64) -> Self {
        ItemPointer {
            id,
            immediate: false,
            value: offset & ADDRESS_MASK,
        }
    }
}

/// A parsed packet borrowing its bytes.
#[derive(Debug, Clone, Copy)]
pub struct PacketView<'a> {
    /// Heap counter.
    pub heap_cnt: u64,
    /// Total heap payload size; `None` if the packet does not say.
    pub heap_size: Option<u64>,
    /// Offset of this packet's payload in the heap.
    pub payload_offset: u64,
    /// Length of this packet's payload.
    pub payload_length: u64,
    /// Raw bytes of all item pointers (8 bytes each), standard ones included.
    pointers: &'a [u8],
    /// This packet's payload.
    pub payload: &'a [u8],
}

#[inline]
fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

impl<'a> PacketView<'a> {
    /// Parses one packet. The payload is exactly `payload_length` bytes; trailing bytes
    /// beyond it (e.g. Ethernet padding) are ignored, a shortfall is an error.
    pub fn parse(buf: &'a [u8]) -> Result<Self, DropReason> {
        if buf.len() < HEADER_BYTES {
            return Err(DropReason::TooShort);
        }
        if buf[0] != MAGIC {
            return Err(DropReason::BadMagic);
        }
        if buf[1] != VERSION {
            return Err(DropReason::BadVersion);
        }
        if buf[2] as usize != ITEM_POINTER_BYTES - super::HEAP_ADDRESS_BYTES
            || buf[3] as usize != super::HEAP_ADDRESS_BYTES
        {
            return Err(DropReason::UnsupportedFlavour);
        }
        let n_items = u16::from_be_bytes([buf[6], buf[7]]) as usize;
        let ptr_end = HEADER_BYTES + n_items * ITEM_POINTER_BYTES;
        if buf.len() < ptr_end {
            return Err(DropReason::TruncatedPointers);
        }
        let pointers = &buf[HEADER_BYTES..ptr_end];
        let mut heap_cnt = None;
        let mut heap_size = None;
        let mut payload_offset = None;
        let mut payload_length = None;
        for chunk in pointers.chunks_exact(ITEM_POINTER_BYTES) {
            let p = ItemPointer::from_raw(be_u64(chunk));
            if !p.immediate {
                continue;
            }
            match p.id {
                ids::HEAP_CNT => heap_cnt = Some(p.value),
                ids::HEAP_SIZE => heap_size = Some(p.value),
                ids::HEAP_OFFSET => payload_offset = Some(p.value),
                ids::PAYLOAD_LENGTH => payload_length = Some(p.value),
                _ => {}
            }
        }
        let heap_cnt = heap_cnt.ok_or(DropReason::MissingHeapCnt)?;
        let (payload_offset, payload_length) = match (payload_offset, payload_length) {
            (Some(o), Some(l)) => (o, l),
            _ => return Err(DropReason::MissingPayloadFields),
        };
        let rest = &buf[ptr_end..];
        if (rest.len() as u64) < payload_length {
            return Err(DropReason::PayloadLengthMismatch);
        }
        if let Some(size) = heap_size {
            if payload_offset
                .checked_add(payload_length)
                .is_none_or(|end| end > size)
            {
                return Err(DropReason::PayloadBeyondHeap);
            }
        }
        Ok(PacketView {
            heap_cnt,
            heap_size,
            payload_offset,
            payload_length,
            pointers,
            payload: &rest[..payload_length as usize],
        })
    }

    /// All item pointers, standard ones included.
    pub fn all_pointers(&self) -> impl Iterator<Item = ItemPointer> + 'a {
        self.pointers
            .chunks_exact(ITEM_POINTER_BYTES)
            .map(|c| ItemPointer::from_raw(be_u64(c)))
    }

    /// Item pointers other than the four standard packet fields.
    pub fn items(&self) -> impl Iterator<Item = ItemPointer> + 'a {
        self.all_pointers().filter(|p| {
            !(p.immediate
                && matches!(
                    p.id,
                    ids::HEAP_CNT | ids::HEAP_SIZE | ids::HEAP_OFFSET | ids::PAYLOAD_LENGTH
                ))
        })
    }

    /// Value of the first immediate item with this ID in this packet.
    pub fn immediate(&self, id: u16) -> Option<u64> {
        self.all_pointers()
            .find(|p| p.immediate && p.id == id)
            .map(|p| p.value)
    }

    /// Number of item pointers in the packet.
    pub fn n_pointers(&self) -> usize {
        self.pointers.len() / ITEM_POINTER_BYTES
    }
}
