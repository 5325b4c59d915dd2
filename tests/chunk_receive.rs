//! Chunk assembly from digitiser and F-engine packets: placement, presence, and exact
//! counters for loss, reorder, duplicates, late and malformed packets.

mod common;

use common::{raw_feng, small_feng_placement};
use gpucbf::chunk::placement::{DigitiserPlacement, FengPlacement};
use gpucbf::chunk::Placement;
use gpucbf::chunk::{Chunk, ChunkAssembler, Reject};
use gpucbf::spead::{ids, HeapBuilder};
use proptest::prelude::*;

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
    common::push_all(a, pkts)
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
        frequency: None,
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

/// Packets of one heap that overlap earlier ones without repeating them are rejected as
/// duplicates (their bytes were already received), so a heap is present only when every
/// byte of it arrived; an empty packet does not shadow a later one at its offset.
#[test]
fn overlapping_packets_do_not_make_a_heap_present() {
    let pl = small_feng_placement(2);
    let slot = 128u64;
    assert_eq!(pl.slot_bytes(), slot as usize);
    let mut a = ChunkAssembler::new(pl, 2);
    let mut out = Vec::new();
    let bytes: Vec<u8> = (0..slot).map(|i| i as u8 ^ 0x5a).collect();
    let part = |cnt, off: u64, len: u64, feng| {
        raw_feng(
            cnt,
            slot,
            off,
            0,
            feng,
            &bytes[off as usize..(off + len) as usize],
        )
    };
    // feng 0: [0, 64), then [32, 96) overlaps it: with both, 128 bytes would be counted
    // though [96, 128) never came.
    a.push(&part(1, 0, 64, 0), &mut out).unwrap();
    assert_eq!(
        a.push(&part(1, 32, 64, 0), &mut out),
        Err(Reject::Duplicate)
    );
    // feng 1: an empty packet at offset 0, then the whole heap from offset 0.
    a.push(&part(2, 0, 0, 1), &mut out).unwrap();
    a.push(&part(2, 0, slot, 1), &mut out).unwrap();
    a.flush(&mut out);
    assert_eq!(out.len(), 1);
    assert!(!out[0].present(0), "feng 0 lacks [64, 128)");
    assert_eq!(out[0].received[0], 64);
    assert!(out[0].present(1));
    assert_eq!(out[0].slot(1), &bytes[..]);
    assert_eq!(a.stats.rejected(Reject::Duplicate), 1);
    assert_eq!((a.stats.packets, a.stats.heaps), (3, 1));
    // The rest of feng 0's heap completes it, with the right bytes.
    let mut a = ChunkAssembler::new(small_feng_placement(2), 2);
    let mut out = Vec::new();
    for (off, len) in [(0, 64), (32, 64), (64, 64), (64, 64)] {
        let _ = a.push(&part(1, off, len, 0), &mut out);
    }
    a.flush(&mut out);
    assert!(out[0].present(0));
    assert_eq!(out[0].slot(0), &bytes[..]);
    assert_eq!(a.stats.rejected(Reject::Duplicate), 2);
}

/// A placement with no batches per chunk (a bad configuration) rejects every F-engine
/// heap, counted, instead of dividing by zero on the receive thread.
#[test]
fn feng_placement_without_batches_rejects_instead_of_panicking() {
    let mut pl = small_feng_placement(2);
    pl.batches_per_chunk = 0;
    let step = pl.batch_step();
    let mut a = ChunkAssembler::new(pl, 2);
    let mut out = Vec::new();
    let p = raw_feng(1, 128, 0, 3 * step, 1, &[7; 128]);
    assert_eq!(a.push(&p, &mut out), Err(Reject::BadId));
    a.flush(&mut out);
    assert!(out.is_empty());
    assert_eq!((a.stats.packets, a.stats.rejected(Reject::BadId)), (0, 1));
}

/// How a fuzz case damages one packet.
#[derive(Debug, Clone)]
enum Damage {
    None,
    /// Cut to this fraction (per mille) of its length.
    Truncate(u16),
    /// XOR bytes at these positions (per mille of the length) with these values.
    Flip(Vec<(u16, u8)>),
    /// Replace item pointer k (mod the count in the header) with a random value.
    Pointer(u8, u64),
    /// Set the header's item count.
    Count(u16),
}

fn damage_strategy() -> impl Strategy<Value = Damage> {
    prop_oneof![
        Just(Damage::None),
        (0u16..1000).prop_map(Damage::Truncate),
        prop::collection::vec((0u16..1000, 1u8..=255), 1..6).prop_map(Damage::Flip),
        (any::<u8>(), any::<u64>()).prop_map(|(k, v)| Damage::Pointer(k, v)),
        any::<u16>().prop_map(Damage::Count),
    ]
}

fn damaged(mut p: Vec<u8>, d: &Damage) -> Vec<u8> {
    let at = |per_mille: u16, len: usize| len * per_mille as usize / 1000;
    match d {
        Damage::None => {}
        Damage::Truncate(f) => p.truncate(at(*f, p.len())),
        Damage::Flip(flips) => {
            for &(pos, v) in flips {
                let i = at(pos, p.len());
                p[i] ^= v;
            }
        }
        Damage::Pointer(k, v) => {
            let n = u16::from_be_bytes([p[6], p[7]]) as usize;
            let i = 8 + 8 * (*k as usize % n.max(1));
            if i + 8 <= p.len() {
                p[i..i + 8].copy_from_slice(&v.to_be_bytes());
            }
        }
        Damage::Count(n) => p[6..8].copy_from_slice(&n.to_be_bytes()),
    }
    p
}

/// Every pushed packet is either placed or counted under one reject reason, and what the
/// chunks hold stays inside their slots.
fn check_counts<P: gpucbf::chunk::Placement>(a: &ChunkAssembler<P>, pushed: u64, out: &[Chunk]) {
    let s = &a.stats;
    assert_eq!(s.packets + s.rejects.iter().sum::<u64>(), pushed, "{s:?}");
    for c in out {
        assert!(c.received.iter().all(|&r| r as usize <= c.slot_bytes));
    }
    assert!(s.heaps <= s.packets);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Digitiser and F-engine streams with packets truncated, corrupted (header, pointers,
    /// payload), given wrong item counts or replaced by random bytes, in any order: no
    /// panic, and every packet is placed or counted as a reject.
    #[test]
    fn damaged_packets_are_counted_never_panic(
        cases in prop::collection::vec(
            (0usize..64, damage_strategy(), prop::option::weighted(0.1, prop::collection::vec(any::<u8>(), 0..200))),
            1..80,
        ),
    ) {
        // Valid packets to start from: 16 digitiser heaps (both pols), and 8 batches × 2
        // antennas of F-engine heaps in two packets each.
        let dig: Vec<Vec<u8>> = (0..32u64).map(|k| dig_packet((k / 2) * HS, k % 2, k as u8)).collect();
        let pl = small_feng_placement(2);
        let step = pl.batch_step();
        let feng: Vec<Vec<u8>> = (0..32u64)
            .map(|k| {
                let (heap, half) = (k / 2, k % 2);
                let payload = vec![heap as u8; 64];
                raw_feng(heap, 128, 64 * half, (heap / 2) * step, heap % 2, &payload)
            })
            .collect();
        let mut da = asm();
        let mut fa = ChunkAssembler::new(pl, 2);
        let (mut dout, mut fout) = (Vec::new(), Vec::new());
        for (i, d, raw) in &cases {
            let (dp, fp) = match raw {
                Some(bytes) => (bytes.clone(), bytes.clone()),
                None => (damaged(dig[i % 32].clone(), d), damaged(feng[i % 32].clone(), d)),
            };
            let _ = da.push(&dp, &mut dout);
            let _ = fa.push(&fp, &mut fout);
        }
        da.flush(&mut dout);
        fa.flush(&mut fout);
        check_counts(&da, cases.len() as u64, &dout);
        check_counts(&fa, cases.len() as u64, &fout);
    }
}
