//! Placement rules of the engines (ICD §5).

use super::{Place, Placement, Reject};
use crate::spead::{ids, PacketView};

/// Why a placement's geometry is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// A chunk must hold a whole, positive number of heaps.
    #[error(
        "chunk samples {chunk_samples} must be a positive multiple of heap samples {heap_samples}"
    )]
    ChunkNotWholeHeaps {
        /// Samples per chunk asked for.
        chunk_samples: u64,
        /// Samples per heap.
        heap_samples: u64,
    },
    /// A heap's packed samples must fill whole bytes.
    #[error("heap samples × bits must be whole bytes")]
    HeapNotWholeBytes,
}

/// Digitiser heaps into F-engine input chunks: `chunk_samples` samples per polarisation,
/// polarisation the major axis, each pol's heaps contiguous (so a chunk holds one packed
/// sample stream per pol).
#[derive(Debug, Clone)]
pub struct DigitiserPlacement {
    /// Digitiser samples per heap.
    pub heap_samples: u64,
    /// Bits per packed sample.
    pub bits: u32,
    /// Samples per polarisation per chunk (a multiple of `heap_samples`).
    pub chunk_samples: u64,
    /// ANDed into timestamps first (`--mask-timestamp`); all ones by default.
    pub timestamp_mask: u64,
}

impl DigitiserPlacement {
    /// The placement of `heap_samples`-sample heaps of `bits`-bit samples into chunks of
    /// `chunk_samples` samples per polarisation; the timestamp mask is all ones.
    pub fn new(heap_samples: u64, bits: u32, chunk_samples: u64) -> Result<Self, PlacementError> {
        if heap_samples == 0 || chunk_samples == 0 || !chunk_samples.is_multiple_of(heap_samples) {
            return Err(PlacementError::ChunkNotWholeHeaps {
                chunk_samples,
                heap_samples,
            });
        }
        if !(heap_samples * bits as u64).is_multiple_of(8) {
            return Err(PlacementError::HeapNotWholeBytes);
        }
        Ok(DigitiserPlacement {
            heap_samples,
            bits,
            chunk_samples,
            timestamp_mask: u64::MAX,
        })
    }

    /// Heaps of one polarisation per chunk.
    pub fn heaps_per_pol(&self) -> usize {
        (self.chunk_samples / self.heap_samples) as usize
    }

    /// Slot of (pol, heap index within the chunk).
    pub fn slot(&self, pol: usize, heap: usize) -> usize {
        pol * self.heaps_per_pol() + heap
    }
}

impl Placement for DigitiserPlacement {
    fn slot_bytes(&self) -> usize {
        (self.heap_samples * self.bits as u64 / 8) as usize
    }

    fn n_slots(&self) -> usize {
        2 * self.heaps_per_pol()
    }

    fn place(&self, pkt: &PacketView<'_>) -> Result<Place, Reject> {
        if pkt.heap_size != Some(self.slot_bytes() as u64) {
            return Err(Reject::MetadataHeap);
        }
        let ts = pkt.immediate(ids::TIMESTAMP).ok_or(Reject::MetadataHeap)? & self.timestamp_mask;
        let id = pkt
            .immediate(ids::DIGITISER_ID)
            .ok_or(Reject::MetadataHeap)?;
        if !ts.is_multiple_of(self.heap_samples) {
            return Err(Reject::BadTimestamp);
        }
        let pol = (id & 1) as usize;
        let heap = ((ts % self.chunk_samples) / self.heap_samples) as usize;
        Ok(Place {
            chunk_id: ts / self.chunk_samples,
            slot: self.slot(pol, heap),
            source: Some(id >> 1),
        })
    }

    fn size_hint(&self) -> &'static str {
        "--dig-sample-bits and the digitiser's samples per heap, --recv-packet-samples"
    }

    fn describe_source(&self, source: u64) -> String {
        format!("digitiser ids {} and {}", source << 1, (source << 1) | 1)
    }

    fn rows(&self) -> usize {
        self.heaps_per_pol()
    }

    fn row(&self, slot: usize) -> usize {
        slot % self.heaps_per_pol()
    }
}

/// F-engine heaps into X-engine input chunks: `batches_per_chunk` batches × `n_ants`
/// antennas, each slot one heap of (channels, spectra, pol, re/im) samples.
#[derive(Debug, Clone)]
pub struct FengPlacement {
    /// Antennas (F-engines) feeding this X-engine.
    pub n_ants: usize,
    /// Channels per F-engine heap.
    pub channels_per_substream: usize,
    /// Spectra per F-engine heap.
    pub spectra_per_heap: usize,
    /// Bits per real or imaginary sample (8 in the ICD).
    pub sample_bits: u32,
    /// ADC samples from one spectrum to the next (the timestamp step per spectrum).
    pub samples_between_spectra: u64,
    /// Batches (heap timestamps) per chunk.
    pub batches_per_chunk: usize,
    /// The first channel this engine receives (`--channel-offset-value`): heaps whose
    /// `frequency` item names another channel are rejected ([`Reject::BadFrequency`]);
    /// `None` does not check (katgpucbf does not read the item).
    pub frequency: Option<u64>,
}

impl FengPlacement {
    /// ADC samples between consecutive batches.
    pub fn batch_step(&self) -> u64 {
        self.spectra_per_heap as u64 * self.samples_between_spectra
    }
}

impl Placement for FengPlacement {
    fn slot_bytes(&self) -> usize {
        self.channels_per_substream * self.spectra_per_heap * 4 * self.sample_bits as usize / 8
    }

    fn n_slots(&self) -> usize {
        self.batches_per_chunk * self.n_ants
    }

    fn place(&self, pkt: &PacketView<'_>) -> Result<Place, Reject> {
        if pkt.heap_size != Some(self.slot_bytes() as u64) {
            return Err(Reject::MetadataHeap);
        }
        let ts = pkt.immediate(ids::TIMESTAMP).ok_or(Reject::MetadataHeap)?;
        let feng = pkt.immediate(ids::FENG_ID).ok_or(Reject::MetadataHeap)?;
        let step = self.batch_step();
        if step == 0 || !ts.is_multiple_of(step) {
            return Err(Reject::BadTimestamp);
        }
        if feng >= self.n_ants as u64 {
            return Err(Reject::BadId);
        }
        if let (Some(want), Some(got)) = (self.frequency, pkt.immediate(ids::FREQUENCY)) {
            if want != got {
                return Err(Reject::BadFrequency);
            }
        }
        let batch = ts / step;
        let bpc = self.batches_per_chunk as u64;
        if bpc == 0 {
            // No slots at all (a chunk of zero batches): nothing can be placed.
            return Err(Reject::BadId);
        }
        Ok(Place {
            chunk_id: batch / bpc,
            slot: (batch % bpc) as usize * self.n_ants + feng as usize,
            source: None,
        })
    }

    fn size_hint(&self) -> &'static str {
        "the F-engines' channels, jones_per_batch and output bits against --channels, \
         --channels-per-substream, --jones-per-batch and --sample-bits here"
    }

    fn rows(&self) -> usize {
        self.batches_per_chunk
    }

    fn row(&self, slot: usize) -> usize {
        slot / self.n_ants.max(1)
    }
}
