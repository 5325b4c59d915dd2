//! SPEAD item descriptors, encoded as spead2 does for the 64-48 flavour: a descriptor is a
//! complete one-packet heap (heap counter 1) carried as the value of item 0x0005. Shape
//! dimensions take 1 + 6 bytes (flag, size), format fields 1 + 2 bytes (code, bits).

use super::assemble::{Heap, ItemValue};
use super::encode::HeapBuilder;
use super::packet::{DropReason, PacketView};
use super::{ids, HEAP_ADDRESS_BYTES, ITEM_POINTER_BYTES};

const SHAPE_FIELD: usize = 1 + HEAP_ADDRESS_BYTES;
const FORMAT_LEN_BYTES: usize = ITEM_POINTER_BYTES - HEAP_ADDRESS_BYTES;

/// Why a descriptor could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    /// The descriptor's bytes are not a SPEAD packet of our flavour.
    #[error("descriptor packet: {0}")]
    Packet(DropReason),
    /// The descriptor heap is not carried whole by one packet.
    #[error("descriptor spans more than one packet")]
    SpansPackets,
    /// No descriptor ID item (0x0014).
    #[error("descriptor has no ID item")]
    NoId,
    /// The name or description is not UTF-8.
    #[error("descriptor text is not UTF-8")]
    TextNotUtf8,
    /// The shape item is not a whole number of (flag, size) fields.
    #[error("descriptor shape has {0} bytes, not a multiple of {SHAPE_FIELD}")]
    Shape(usize),
    /// The format item ends inside a (code, bits) field.
    #[error("descriptor format has a partial field")]
    Format,
    /// The NumPy header (0x0015) is not UTF-8.
    #[error("numpy header is not UTF-8")]
    NumpyNotUtf8,
    /// The NumPy header dict has no `descr` or `shape`, or they do not parse.
    #[error("{0}")]
    NumpyHeader(NumpyHeaderError),
    /// The heap's descriptor item (0x0005) is an immediate, not the encoded descriptor.
    #[error("descriptor item is not an addressed item")]
    NotAddressed,
}

/// What is wrong with a NumPy header dict literal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NumpyHeaderError {
    /// No `'descr'` key.
    #[error("numpy header has no descr")]
    NoDescr,
    /// `'descr'` is not followed by a quoted string.
    #[error("bad descr")]
    BadDescr,
    /// No `'shape'` key.
    #[error("numpy header has no shape")]
    NoShape,
    /// `'shape'` is not followed by a parenthesised tuple.
    #[error("bad shape")]
    BadShape,
    /// A dimension of the shape tuple is not a number (or -1 / None).
    #[error("bad shape dimension {0:?}")]
    BadDimension(String),
}

impl From<NumpyHeaderError> for DescriptorError {
    fn from(e: NumpyHeaderError) -> Self {
        DescriptorError::NumpyHeader(e)
    }
}

/// As its message: `gpucbf inspect` reports a malformed descriptor as `{"error": "..."}`.
impl serde::Serialize for DescriptorError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What a stream says about one of its items (spead2's `Descriptor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// The item ID described.
    pub id: u16,
    /// Item name (as katgpucbf names it, e.g. `timestamp`).
    pub name: String,
    /// Human-readable description.
    pub description: String,
    /// Dimensions; `None` is a variable-length dimension.
    pub shape: Vec<Option<u64>>,
    /// SPEAD format: (type code, bits), e.g. `[('u', 48)]`. Empty when `dtype` is set.
    pub format: Vec<(char, u32)>,
    /// NumPy dtype string such as `<i4` or `|i1` (sent as a NumPy header).
    pub dtype: Option<String>,
}

impl Descriptor {
    /// A descriptor with a SPEAD format.
    pub fn with_format(
        id: u16,
        name: &str,
        description: &str,
        shape: &[u64],
        format: &[(char, u32)],
    ) -> Self {
        Descriptor {
            id,
            name: name.into(),
            description: description.into(),
            shape: shape.iter().map(|&s| Some(s)).collect(),
            format: format.to_vec(),
            dtype: None,
        }
    }

    /// A descriptor with a NumPy dtype (C order).
    pub fn with_dtype(id: u16, name: &str, description: &str, shape: &[u64], dtype: &str) -> Self {
        Descriptor {
            id,
            name: name.into(),
            description: description.into(),
            shape: shape.iter().map(|&s| Some(s)).collect(),
            format: Vec::new(),
            dtype: Some(dtype.into()),
        }
    }

    fn shape_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.shape.len() * SHAPE_FIELD);
        for d in &self.shape {
            let (flag, size) = match d {
                Some(s) => (0u8, *s),
                None => (1u8, 0),
            };
            v.push(flag);
            v.extend_from_slice(&size.to_be_bytes()[8 - HEAP_ADDRESS_BYTES..]);
        }
        v
    }

    fn format_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        if self.dtype.is_none() {
            for &(code, bits) in &self.format {
                v.push(code as u8);
                v.extend_from_slice(&(bits as u64).to_be_bytes()[8 - FORMAT_LEN_BYTES..]);
            }
        }
        v
    }

    fn numpy_header(&self) -> Option<String> {
        let dtype = self.dtype.as_ref()?;
        let dims: Vec<String> = self
            .shape
            .iter()
            .map(|d| d.map_or("-1".into(), |s| s.to_string()))
            .collect();
        let shape = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.join(", ")),
        };
        Some(format!(
            "{{'descr': '{dtype}', 'fortran_order': False, 'shape': {shape}}}"
        ))
    }

    /// The descriptor as the bytes of a one-packet SPEAD heap.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = HeapBuilder::new(1)
            .immediate(ids::DESCRIPTOR_ID, self.id as u64)
            .addressed_owned(ids::DESCRIPTOR_NAME, self.name.as_bytes().to_vec())
            .addressed_owned(
                ids::DESCRIPTOR_DESCRIPTION,
                self.description.as_bytes().to_vec(),
            )
            .addressed_owned(ids::DESCRIPTOR_FORMAT, self.format_bytes())
            .addressed_owned(ids::DESCRIPTOR_SHAPE, self.shape_bytes());
        if let Some(h) = self.numpy_header() {
            b = b.addressed_owned(ids::DESCRIPTOR_DTYPE, h.into_bytes());
        }
        let packets = b
            .packets(usize::MAX & !7, true)
            .expect("unbounded packet size always fits");
        packets[0].to_bytes()
    }

    /// Parses a descriptor from the value of a 0x0005 item.
    pub fn decode(bytes: &[u8]) -> Result<Descriptor, DescriptorError> {
        let pkt = PacketView::parse(bytes).map_err(DescriptorError::Packet)?;
        let size = pkt.heap_size.unwrap_or(pkt.payload_length);
        if pkt.payload_offset != 0 || pkt.payload_length != size {
            return Err(DescriptorError::SpansPackets);
        }
        let heap = Heap {
            cnt: pkt.heap_cnt,
            size,
            pointers: pkt.items().collect(),
            payload: pkt.payload.to_vec(),
            complete: true,
            received: size,
        };
        let bytes_of = |id: u16| -> Vec<u8> {
            match heap.item(id) {
                Some(ItemValue::Bytes(b)) => b.to_vec(),
                _ => Vec::new(),
            }
        };
        let id = heap
            .u64_item(ids::DESCRIPTOR_ID)
            .ok_or(DescriptorError::NoId)? as u16;
        let text =
            |id: u16| String::from_utf8(bytes_of(id)).map_err(|_| DescriptorError::TextNotUtf8);
        let name = text(ids::DESCRIPTOR_NAME)?;
        let description = text(ids::DESCRIPTOR_DESCRIPTION)?;
        let raw_shape = bytes_of(ids::DESCRIPTOR_SHAPE);
        if raw_shape.len() % SHAPE_FIELD != 0 {
            return Err(DescriptorError::Shape(raw_shape.len()));
        }
        let mut shape: Vec<Option<u64>> = raw_shape
            .chunks_exact(SHAPE_FIELD)
            .map(|c| {
                if c[0] & 1 != 0 {
                    None
                } else {
                    Some(c[1..].iter().fold(0u64, |a, &x| (a << 8) | x as u64))
                }
            })
            .collect();
        let raw_format = bytes_of(ids::DESCRIPTOR_FORMAT);
        if raw_format.len() % (1 + FORMAT_LEN_BYTES) != 0 {
            return Err(DescriptorError::Format);
        }
        let format = raw_format
            .chunks_exact(1 + FORMAT_LEN_BYTES)
            .map(|c| {
                (
                    c[0] as char,
                    c[1..].iter().fold(0u32, |a, &x| (a << 8) | x as u32),
                )
            })
            .collect();
        let mut dtype = None;
        if let Some(ItemValue::Bytes(h)) = heap.item(ids::DESCRIPTOR_DTYPE) {
            let h = std::str::from_utf8(h).map_err(|_| DescriptorError::NumpyNotUtf8)?;
            let (d, s) = parse_numpy_header(h)?;
            dtype = Some(d);
            shape = s;
        }
        Ok(Descriptor {
            id,
            name,
            description,
            shape,
            format,
            dtype,
        })
    }
}

impl HeapBuilder<'_> {
    /// Adds a descriptor item (0x0005) carrying `d` encoded as a SPEAD packet.
    pub fn descriptor(self, d: &Descriptor) -> Self {
        self.addressed_owned(ids::DESCRIPTOR, d.encode())
    }
}

impl Heap {
    /// Descriptors carried by this heap; malformed ones are returned as errors.
    pub fn descriptors(&self) -> Vec<Result<Descriptor, DescriptorError>> {
        (0..self.pointers.len())
            .filter(|&i| self.pointers[i].id == ids::DESCRIPTOR)
            .map(|i| match self.value_of(i) {
                Some(ItemValue::Bytes(b)) => Descriptor::decode(b),
                _ => Err(DescriptorError::NotAddressed),
            })
            .collect()
    }
}

/// Extracts `descr` and `shape` from a NumPy header dict literal.
fn parse_numpy_header(h: &str) -> Result<(String, Vec<Option<u64>>), NumpyHeaderError> {
    use NumpyHeaderError::*;
    let descr_at = h.find("'descr'").ok_or(NoDescr)?;
    let rest = &h[descr_at + 7..];
    let q1 = rest.find('\'').ok_or(BadDescr)?;
    let q2 = rest[q1 + 1..].find('\'').ok_or(BadDescr)?;
    let descr = rest[q1 + 1..q1 + 1 + q2].to_string();
    let shape_at = h.find("'shape'").ok_or(NoShape)?;
    let rest = &h[shape_at..];
    let p1 = rest.find('(').ok_or(BadShape)?;
    let p2 = rest.find(')').ok_or(BadShape)?;
    if p2 < p1 {
        return Err(BadShape);
    }
    let shape = rest[p1 + 1..p2]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            if s == "-1" || s == "None" {
                Ok(None)
            } else {
                s.parse::<u64>()
                    .map(Some)
                    .map_err(|_| BadDimension(s.to_string()))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((descr, shape))
}
