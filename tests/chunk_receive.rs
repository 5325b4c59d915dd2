//! Chunk assembly from digitiser and F-engine packets: placement, presence, and exact
//! counters for loss, reorder, duplicates, late and malformed packets.

mod common;

use common::small_feng_placement;
use gpucbf::chunk::placement::{DigitiserPlacement, FengPlacement};
use gpucbf::chunk::{Chunk, ChunkAssembler, Reject};
use gpucbf::spead::{ids, HeapBuilder};

const HS: u64 = 4096;

fn dig_packet(ts: u64, pol: u64, fill: u8) -> Vec<u8> {
    let payload = vec![fill; 5120];
    let h = HeapBuilder::new(2 + ts / HS * 4 + pol * 2)
        .immediate(ids::TIMESTAMP, ts)
        .immediate(ids::DIGITISER_ID, 6 + pol)
        .immediate(ids::DIGITISER_STATUS, 0)
        .addressed(ids::ADC_SAMPLES, &payload);
    h.packets(9000, true).unwrap()[0].to_bytes()
}

fn asm() -> ChunkAssembler<DigitiserPlacement> {
    ChunkAssembler::new(DigitiserPlacement::new(HS, 10, 8 * HS).unwrap(), 2)
}

fn feed(a: &mut ChunkAssembler<DigitiserPlacement>, pkts: &[Vec<u8>]) -> Vec<Chunk> {
    let mut out = Vec::new();
    for p in pkts {
        let _ = a.push(p, &mut out);
    }
    a.flush(&mut out);
    out
}

#[test]
fn in_order_stream_fills_every_slot() {
    let mut pkts = Vec::new();
    for h in 0..24u64 {
        for pol in 0..2 {
            pkts.push(dig_packet(h * HS, pol, (h * 2 + pol) as u8));
        }
    }
    let mut a = asm();
    let chunks = feed(&mut a, &pkts);
    assert_eq!(
        chunks.iter().map(|c| c.chunk_id).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    for c in &chunks {
        assert_eq!(c.n_present(), 16);
        for pol in 0..2 {
            for h in 0..8 {
                let global = c.chunk_id * 8 + h as u64;
                assert!(c
                    .slot(a.placement().slot(pol, h))
                    .iter()
                    .all(|&b| b == (global * 2 + pol as u64) as u8));
            }
        }
    }
    assert_eq!(a.stats.heaps, 48);
    assert_eq!(a.stats.missing_heaps, 0);
}

#[test]
fn loss_reorder_duplicates_late_and_malformed_are_counted_exactly() {
    let mut pkts = Vec::new();
    for h in 0..16u64 {
        for pol in 0..2 {
            if (h, pol) == (3, 1) || (h, pol) == (12, 0) {
                continue; // lost
            }
            pkts.push(dig_packet(h * HS, pol, 1));
        }
    }
    pkts.swap(4, 9); // reorder inside the window
    pkts.push(dig_packet(5 * HS, 0, 1)); // duplicate
    pkts.push(dig_packet(15 * HS, 1, 1)); // duplicate
    pkts.push(vec![0x53, 4, 2, 6, 0, 0, 0, 1]); // malformed
    pkts.push(dig_packet(5 * HS + 100, 0, 1)); // bad timestamp
    let small = HeapBuilder::new(99)
        .immediate(ids::TIMESTAMP, 0)
        .addressed_owned(ids::ADC_SAMPLES, vec![0; 100]);
    pkts.push(small.packets(9000, true).unwrap()[0].to_bytes()); // metadata (wrong size)
                                                                 // Move far ahead (chunk 3): chunks 0 and 1 leave the window; then a late packet.
    pkts.push(dig_packet(24 * HS, 0, 1));
    pkts.push(dig_packet(2 * HS, 0, 1));
    let mut a = asm();
    let chunks = feed(&mut a, &pkts);
    let s = &a.stats;
    assert_eq!(s.rejected(Reject::Duplicate), 2);
    assert_eq!(s.rejected(Reject::Malformed), 1);
    assert_eq!(s.rejected(Reject::BadTimestamp), 1);
    assert_eq!(s.rejected(Reject::MetadataHeap), 1);
    assert_eq!(s.rejected(Reject::TooOld), 1);
    assert_eq!(
        chunks.iter().map(|c| c.chunk_id).collect::<Vec<_>>(),
        vec![0, 1, 3]
    );
    let p = a.placement().clone();
    assert!(!chunks[0].present(p.slot(1, 3)));
    assert!(!chunks[1].present(p.slot(0, 4)));
    assert_eq!(chunks[0].n_present(), 15);
    assert_eq!(chunks[1].n_present(), 15);
    assert_eq!(chunks[2].n_present(), 1);
    // Inside the received span (heaps 0..=24): (3, pol 1), (12, pol 0), all of chunk 2 and
    // pol 1 of heap 24; chunk 3's rows after heap 24 are not losses.
    assert_eq!(s.missing_heaps, 1 + 1 + 16 + 1);
}

/// A stream that starts and ends mid-chunk: the unfilled head of the first chunk and tail of
/// the last are not missing; a gap inside the span is, even where a whole row is absent.
#[test]
fn missing_heaps_count_only_inside_the_received_span() {
    let mut pkts = Vec::new();
    for h in 5..21u64 {
        for pol in 0..2 {
            if h == 9 || (h, pol) == (17, 1) {
                continue;
            }
            pkts.push(dig_packet(h * HS, pol, 1));
        }
    }
    let mut a = asm();
    let chunks = feed(&mut a, &pkts);
    assert_eq!(
        chunks.iter().map(|c| c.chunk_id).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert_eq!(a.stats.heaps, 2 * 16 - 3);
    assert_eq!(a.stats.missing_heaps, 3);

    // F-engine heaps: batches 3..=6 of 4 antennas in chunks of 4 batches; antenna 2 absent
    // from batch 5; the trailing batch 7 and the leading batches 0..=2 are outside.
    let pl = small_feng_placement(4);
    let step = pl.batch_step();
    let mut a = ChunkAssembler::new(pl, 2);
    let mut out = Vec::new();
    let payload = vec![0u8; 4 * 8 * 4];
    for batch in 3..7u64 {
        for ant in 0..4u64 {
            if (batch, ant) == (5, 2) {
                continue;
            }
            let h = HeapBuilder::new(1 + ant + 4 * batch)
                .immediate(ids::TIMESTAMP, batch * step)
                .immediate(ids::FENG_ID, ant)
                .immediate(ids::FREQUENCY, 0)
                .addressed(ids::FENG_RAW, &payload);
            a.push(&h.packets(9000, true).unwrap()[0].to_bytes(), &mut out)
                .unwrap();
        }
    }
    a.flush(&mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(a.stats.heaps, 15);
    assert_eq!(a.stats.missing_heaps, 1);
}

#[test]
fn multi_packet_feng_heaps_interleaved_across_antennas() {
    let pl = FengPlacement {
        n_ants: 3,
        channels_per_substream: 16,
        spectra_per_heap: 256,
        sample_bits: 8,
        samples_between_spectra: 8192,
        batches_per_chunk: 2,
    };
    let step = pl.batch_step();
    let mut a = ChunkAssembler::new(pl, 2);
    let mut per_heap: Vec<Vec<Vec<u8>>> = Vec::new();
    for batch in 0..4u64 {
        for ant in 0..3u64 {
            let payload: Vec<u8> = (0..16 * 256 * 4)
                .map(|i| (i as u64 * 7 + batch * 3 + ant) as u8)
                .collect();
            let h = HeapBuilder::new(ant + 3 * batch)
                .immediate(ids::TIMESTAMP, batch * step)
                .immediate(ids::FENG_ID, ant)
                .immediate(ids::FREQUENCY, 0)
                .addressed(ids::FENG_RAW, &payload);
            per_heap.push(
                h.packets(2048 + 72, true)
                    .unwrap()
                    .iter()
                    .map(|p| p.to_bytes())
                    .collect(),
            );
        }
    }
    // Interleave packets of all antennas, drop one packet of (batch 1, ant 2).
    let mut out = Vec::new();
    let n_pk = per_heap[0].len();
    for k in 0..n_pk {
        for (i, h) in per_heap.iter().enumerate() {
            if i == 5 && k == 3 {
                continue;
            }
            a.push(&h[k], &mut out).unwrap();
        }
    }
    a.flush(&mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].n_present(), 5);
    assert!(!out[0].present(3 + 2));
    assert_eq!(out[1].n_present(), 6);
    assert_eq!(a.stats.incomplete_heaps, 1);
    let want: Vec<u8> = (0..16 * 256 * 4)
        .map(|i| (i as u64 * 7 + 3 * 3 + 1) as u8)
        .collect();
    assert_eq!(out[1].slot(3 + 1), &want[..]);
}
