//! SPEAD-64-48 codec (the flavour katgpucbf and spead2 use), sans-IO: bytes in, heaps out.
//!
//! * [`packet`]: zero-copy packet parsing with named drop reasons.
//! * [`encode`]: heap → packets (repeat pointers or not), descriptor and stop heaps.
//! * [`assemble`]: packets in any order → complete heaps, with counters.
//! * [`descriptor`]: item descriptors (name, description, shape, format / numpy dtype).

pub mod assemble;
pub mod bitpack;
pub mod descriptor;
pub mod encode;
pub mod icd;
pub mod packet;

pub use assemble::{Assembler, AssemblerStats, Heap, ItemValue};
pub use descriptor::{Descriptor, DescriptorError};
pub use encode::{
    data_header_len, data_payload_per_packet, patch_data_header, write_data_header, HeapBuilder,
    PacketParts, PacketSizeError,
};
pub use packet::{DropReason, ItemPointer, PacketView};

/// First byte of every SPEAD packet.
pub const MAGIC: u8 = 0x53;
/// SPEAD protocol version.
pub const VERSION: u8 = 4;
/// Item pointer width in bytes (64-bit pointers).
pub const ITEM_POINTER_BYTES: usize = 8;
/// Heap address width in bytes (48-bit addresses).
pub const HEAP_ADDRESS_BYTES: usize = 6;
/// Number of bits in a heap address / immediate value.
pub const HEAP_ADDRESS_BITS: u32 = 48;
/// Mask for a 48-bit value.
pub const ADDRESS_MASK: u64 = (1 << HEAP_ADDRESS_BITS) - 1;
/// Packet header length in bytes.
pub const HEADER_BYTES: usize = 8;

/// Standard item IDs.
pub mod ids {
    /// Padding item (no meaning).
    pub const NULL: u16 = 0x0000;
    /// Heap counter.
    pub const HEAP_CNT: u16 = 0x0001;
    /// Heap size in bytes.
    pub const HEAP_SIZE: u16 = 0x0002;
    /// Offset of this packet's payload in the heap.
    pub const HEAP_OFFSET: u16 = 0x0003;
    /// Length of this packet's payload.
    pub const PAYLOAD_LENGTH: u16 = 0x0004;
    /// A descriptor (an encoded one-packet heap).
    pub const DESCRIPTOR: u16 = 0x0005;
    /// Stream control (start, stop, descriptor reissue).
    pub const STREAM_CTRL: u16 = 0x0006;
    /// Descriptor: item name.
    pub const DESCRIPTOR_NAME: u16 = 0x0010;
    /// Descriptor: description.
    pub const DESCRIPTOR_DESCRIPTION: u16 = 0x0011;
    /// Descriptor: shape.
    pub const DESCRIPTOR_SHAPE: u16 = 0x0012;
    /// Descriptor: format.
    pub const DESCRIPTOR_FORMAT: u16 = 0x0013;
    /// Descriptor: the ID described.
    pub const DESCRIPTOR_ID: u16 = 0x0014;
    /// Descriptor: NumPy header (dtype and shape).
    pub const DESCRIPTOR_DTYPE: u16 = 0x0015;

    // Application items (katgpucbf ICD §3).
    /// ADC sample count of the heap's first sample.
    pub const TIMESTAMP: u16 = 0x1600;
    /// Digitiser ID (the polarisation in the low bit).
    pub const DIGITISER_ID: u16 = 0x3101;
    /// Digitiser status (saturation flag and count).
    pub const DIGITISER_STATUS: u16 = 0x3102;
    /// Digitiser samples (packed).
    pub const ADC_SAMPLES: u16 = 0x3300;
    /// F-engine (antenna) ID.
    pub const FENG_ID: u16 = 0x4101;
    /// First channel of the heap.
    pub const FREQUENCY: u16 = 0x4103;
    /// F-engine channelised data.
    pub const FENG_RAW: u16 = 0x4300;
    /// X-engine correlation products.
    pub const XENG_RAW: u16 = 0x1800;
    /// Beamformer output.
    pub const BF_RAW: u16 = 0x5000;
    /// Antennas included in a beam.
    pub const BEAM_ANTS: u16 = 0x5004;
}

/// Stream-control values carried by item 0x0006.
pub const CTRL_STREAM_START: u64 = 0;
/// Stream control: the descriptors are sent again.
pub const CTRL_DESCRIPTOR_REISSUE: u64 = 1;
/// Stream control: end of stream.
pub const CTRL_STREAM_STOP: u64 = 2;
/// Stream control: the descriptors changed.
pub const CTRL_DESCRIPTOR_UPDATE: u64 = 3;

/// `digitiser_status` bit 1: saturation flag; bits 47..32: saturation count.
pub const DIGITISER_STATUS_SATURATION_FLAG_BIT: u32 = 1;
/// Shift of the saturation count in `digitiser_status`.
pub const DIGITISER_STATUS_SATURATION_COUNT_SHIFT: u32 = 32;

/// Builds the `digitiser_status` immediate from a heap's saturation count.
pub fn digitiser_status(saturated: u64) -> u64 {
    let count = saturated.min(0xFFFF);
    let flag = if saturated > 0 {
        1 << DIGITISER_STATUS_SATURATION_FLAG_BIT
    } else {
        0
    };
    (count << DIGITISER_STATUS_SATURATION_COUNT_SHIFT) | flag
}

/// The 8-byte packet header for `n_items` item pointers.
pub fn packet_header(n_items: u16) -> [u8; HEADER_BYTES] {
    let n = n_items.to_be_bytes();
    [
        MAGIC,
        VERSION,
        (ITEM_POINTER_BYTES - HEAP_ADDRESS_BYTES) as u8,
        HEAP_ADDRESS_BYTES as u8,
        0,
        0,
        n[0],
        n[1],
    ]
}
