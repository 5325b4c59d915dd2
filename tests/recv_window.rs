//! The receive window against hostile and broken input: heaps cut into many tiny packets.

mod common;

use common::{push_all, raw_feng, raw_feng_freq};
use gpucbf::chunk::placement::FengPlacement;
use gpucbf::chunk::{ChunkAssembler, Placement, Reject};
use gpucbf::spead::ids;

/// One F-engine heap of 150 000 bytes in one-byte packets (a stride permutation, so
/// neither in order nor reversed), some sent twice and some overlapping: every byte placed
/// once, the duplicates and overlaps counted exactly, the heap complete with the right
/// bytes. The per-heap overlap check is O(log n); before it was a linear scan (O(n²)
/// over the heap).
#[test]
fn a_heap_of_150k_one_byte_packets_is_placed_and_checked() {
    let pl = FengPlacement {
        n_ants: 1,
        channels_per_substream: 75,
        spectra_per_heap: 500,
        sample_bits: 8,
        samples_between_spectra: 16,
        batches_per_chunk: 1,
        frequency: None,
    };
    let n = pl.slot_bytes() as u64;
    assert_eq!(n, 150_000);
    let bytes: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
    let pkt =
        |off: u64, len: u64| raw_feng(7, n, off, 0, 0, &bytes[off as usize..(off + len) as usize]);
    let mut a = ChunkAssembler::new(pl, 2);
    let mut out = Vec::new();
    let mut dups = 0;
    for k in 0..n {
        let off = k * 7919 % n; // 7919 is prime, coprime with 150 000
        a.push(&pkt(off, 1), &mut out).unwrap();
        if k % 1000 == 999 {
            // The same byte again, and a two-byte packet over received bytes.
            assert_eq!(a.push(&pkt(off, 1), &mut out), Err(Reject::Duplicate));
            let o2 = off.min(n - 2);
            let r = a.push(&pkt(o2, 2), &mut out);
            assert_eq!(r, Err(Reject::Duplicate), "bytes {o2}..{}", o2 + 2);
            dups += 2;
        }
    }
    // Even then odd offsets of a second heap: 75 000 separate ranges, then each odd byte
    // joins two of them.
    let mut b = ChunkAssembler::new(a.placement().clone(), 2);
    let mut out_b = Vec::new();
    for off in (0..n).step_by(2).chain((1..n).step_by(2)) {
        b.push(&pkt(off, 1), &mut out_b).unwrap();
    }
    assert_eq!(b.push(&pkt(n / 2, 1), &mut out_b), Err(Reject::Duplicate));
    for (asm, out) in [(&mut a, &mut out), (&mut b, &mut out_b)] {
        asm.flush(out);
        assert_eq!(out.len(), 1);
        assert!(out[0].present(0));
        assert_eq!(out[0].slot(0), &bytes[..]);
        assert_eq!((asm.stats.heaps, asm.stats.packets), (1, n));
    }
    assert_eq!(a.stats.rejected(Reject::Duplicate), dups);
    assert_eq!(b.stats.rejected(Reject::Duplicate), 1);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// [`ByteRanges`] answers overlap queries as a map of the received bytes would (an
    /// empty range overlaps when strictly inside received bytes), and holds the ranges
    /// merged: as many as maximal runs of received bytes.
    #[test]
    fn byte_ranges_agree_with_a_byte_map(
        ops in proptest::collection::vec((0u32..300, 0u32..12), 1..300),
    ) {
        let mut r = gpucbf::chunk::ByteRanges::default();
        let mut bytes = [false; 320];
        for (start, len) in ops {
            let (s, e) = (start as usize, (start + len) as usize);
            let want = if len > 0 {
                bytes[s..e].iter().any(|&b| b)
            } else {
                s > 0 && bytes[s - 1] && bytes[s]
            };
            proptest::prop_assert_eq!(r.overlaps(start, start + len), want, "[{}, {})", s, e);
            if !want {
                r.insert(start, start + len);
                bytes[s..e].iter_mut().for_each(|b| *b = true);
            }
        }
        let runs = (0..bytes.len()).filter(|&i| bytes[i] && (i == 0 || !bytes[i - 1])).count();
        proptest::prop_assert_eq!(r.len(), runs);
        r.clear();
        proptest::prop_assert!(r.is_empty() && !r.overlaps(0, 400));
    }
}

const HS: u64 = 4096;

/// One digitiser packet (a whole 10-bit heap) at `ts` from digitiser id `id`, payload `fill`.
fn dig(ts: u64, id: u64, fill: u8) -> Vec<u8> {
    let payload = vec![fill; 5120];
    let h = gpucbf::spead::HeapBuilder::new(2 + ts / HS * 4 + id * 2)
        .immediate(ids::TIMESTAMP, ts)
        .immediate(ids::DIGITISER_ID, id)
        .immediate(ids::DIGITISER_STATUS, 0)
        .addressed(ids::ADC_SAMPLES, &payload);
    h.packets(9000, true).unwrap()[0].to_bytes()
}

/// Digitiser heaps `heaps` of both pols (ids 6 and 7).
fn dig_feed(heaps: std::ops::Range<u64>) -> Vec<Vec<u8>> {
    heaps
        .flat_map(|h| (6..8).map(move |id| dig(h * HS, id, h as u8)))
        .collect()
}

/// Chunks of 8 heaps, 2 open, far beyond 4 chunks outside the window.
fn dig_asm() -> ChunkAssembler<gpucbf::chunk::placement::DigitiserPlacement> {
    let pl = gpucbf::chunk::placement::DigitiserPlacement::new(HS, 10, 8 * HS).unwrap();
    ChunkAssembler::with_policy(pl, gpucbf::chunk::WindowPolicy::new(2, 4))
}

/// Two packets per pol far in the future (2^44 and 2^44 + 2^26) inside a live stream are
/// dropped as bad timestamps, logged once, and the window stays with the stream: every
/// heap of the stream is placed (before, the window jumped to 2^44 and every later heap
/// of the stream was too old).
#[test]
fn far_future_packets_inside_a_stream_are_dropped_and_the_window_stays() {
    let mut pkts = dig_feed(0..40);
    let far: Vec<Vec<u8>> = [1u64 << 44, (1 << 44) + (1 << 26)]
        .iter()
        .flat_map(|&ts| (6..8).map(move |id| dig(ts, id, 0xee)))
        .collect();
    pkts.splice(41..41, far);
    let mut a = dig_asm();
    let chunks = push_all(&mut a, &pkts);
    assert_eq!(a.stats.heaps, 80);
    assert_eq!(a.stats.rejected(Reject::BadTimestamp), 4);
    assert_eq!(a.stats.rejected(Reject::TooOld), 0);
    assert_eq!(a.stats.window_moves, 0);
    assert_eq!(
        chunks.iter().map(|c| c.chunk_id).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert!(chunks.iter().all(|c| c.n_present() == 16));
    assert_eq!(a.stats.notes.len(), 1, "{:?}", a.stats.notes);
    assert!(a.stats.notes[0].contains("far outside the receive window"));
}

/// A lone packet at 2^46 before the stream starts: the window opens there, but the stream
/// really is elsewhere, so after 16 consecutive agreeing packets the window moves to it
/// (once, logged); the rest of the stream is placed (before, all of it was too old).
/// The same for a stream that jumps back in time (a digitiser resync), and for one that
/// jumps far ahead.
#[test]
fn the_window_moves_when_the_stream_really_moved() {
    let confirm = gpucbf::chunk::WindowPolicy::JUMP_CONFIRM as u64;
    let mut pkts = vec![dig(1 << 46, 6, 0xee)];
    pkts.extend(dig_feed(0..40));
    let mut a = dig_asm();
    let chunks = push_all(&mut a, &pkts);
    assert_eq!(a.stats.window_moves, 1);
    assert_eq!(a.stats.rejected(Reject::BadTimestamp), confirm - 1);
    // The lone packet is a whole heap too.
    assert_eq!(a.stats.heaps, 1 + 80 - (confirm - 1));
    assert_eq!(a.stats.rejected(Reject::TooOld), 0);
    let ids: Vec<u64> = chunks.iter().map(|c| c.chunk_id).collect();
    assert_eq!(ids, vec![1 << 46 >> 15, 0, 1, 2, 3, 4]);
    // Chunk 0 lost the packets that voted for the move (but the last of them).
    assert_eq!(chunks[1].n_present() as u64, 16 - (confirm - 1));

    // A stream at heap 1000.. that restarts at heap 0, and one that leaps 2^30 heaps.
    for restart in [0u64, (1 << 30) + 1000] {
        let mut pkts = dig_feed(1000..1040);
        pkts.extend(dig_feed(restart..restart + 40));
        let mut a = dig_asm();
        push_all(&mut a, &pkts);
        assert_eq!(a.stats.window_moves, 1, "restart at heap {restart}");
        assert_eq!(a.stats.heaps, 160 - (confirm - 1));
    }
}

/// Far packets interleaved one for one with a live stream never move the window, however
/// many there are and however well they agree among themselves.
#[test]
fn far_packets_interleaved_with_the_stream_never_move_the_window() {
    let mut pkts = Vec::new();
    for (k, p) in dig_feed(0..200).into_iter().enumerate() {
        pkts.push(p);
        pkts.push(dig((1 << 40) + k as u64 * HS, 6, 0xee));
    }
    let mut a = dig_asm();
    push_all(&mut a, &pkts);
    assert_eq!(a.stats.window_moves, 0);
    assert_eq!(a.stats.heaps, 400);
    assert_eq!(a.stats.rejected(Reject::BadTimestamp), 400);
}

/// Mismatched set-ups are said once, with what was expected: data heaps of another size
/// (`--dig-sample-bits 9` on 10-bit data) and another digitiser's packets (a foreign
/// stream), which are dropped as bad ids. Descriptor heaps (no timestamp) are not a
/// mismatch.
#[test]
fn mismatched_and_foreign_streams_are_counted_and_said_once() {
    let pl9 = gpucbf::chunk::placement::DigitiserPlacement::new(HS, 9, 8 * HS).unwrap();
    let mut a = ChunkAssembler::new(pl9, 2);
    let descriptor = gpucbf::spead::HeapBuilder::new(1)
        .addressed_owned(ids::ADC_SAMPLES, vec![0; 64])
        .packets(9000, true)
        .unwrap()[0]
        .to_bytes();
    let mut pkts = vec![descriptor];
    pkts.extend(dig_feed(0..4));
    let chunks = push_all(&mut a, &pkts);
    assert!(chunks.is_empty());
    assert_eq!(a.stats.rejected(Reject::MetadataHeap), 9);
    assert_eq!(a.stats.notes.len(), 1, "{:?}", a.stats.notes);
    let n = &a.stats.notes[0];
    assert!(
        n.contains("5120 bytes where 4608") && n.contains("--dig-sample-bits"),
        "{n}"
    );

    // Digitiser ids 6/7 (antenna 3) first, then ids 8/9 (antenna 4) mixed in.
    let mut pkts = dig_feed(0..8);
    for h in 8..16 {
        pkts.extend(dig_feed(h..h + 1));
        pkts.push(dig(h * HS, 8 + h % 2, 1));
    }
    let mut a = dig_asm();
    let chunks = push_all(&mut a, &pkts);
    assert_eq!(a.stats.heaps, 32);
    assert_eq!(a.stats.rejected(Reject::BadId), 8);
    assert!(chunks.iter().all(|c| c.n_present() == 16));
    assert_eq!(a.stats.notes.len(), 1, "{:?}", a.stats.notes);
    let n = &a.stats.notes[0];
    assert!(
        n.contains("digitiser ids 8 and 9") && n.contains("ids 6 and 7"),
        "{n}"
    );
}

/// An X-engine takes only heaps of its own first channel (the `frequency` item): another
/// substream's heaps are counted as bad frequency, not mixed in; heaps without the item
/// are taken (katgpucbf does not read the item).
#[test]
fn another_substreams_heaps_are_rejected_by_frequency() {
    let mut pl = common_feng();
    pl.frequency = Some(64);
    let n = pl.slot_bytes() as u64;
    let payload = vec![3u8; n as usize];
    let step = pl.batch_step();
    let mut a = ChunkAssembler::new(pl, 2);
    let mut out = Vec::new();
    for b in 0..4u64 {
        for (f, freq) in [(0, 64), (1, 128), (1, u64::MAX)] {
            let r = a.push(
                &raw_feng_freq(b, n, 0, b * step, f, freq, &payload),
                &mut out,
            );
            let want = if freq == 128 {
                Err(Reject::BadFrequency)
            } else {
                Ok(())
            };
            assert_eq!(r, want, "batch {b} feng {f} frequency {freq}");
        }
    }
    assert_eq!(a.stats.rejected(Reject::BadFrequency), 4);
    assert_eq!(a.stats.heaps, 8);
}

fn common_feng() -> FengPlacement {
    FengPlacement {
        n_ants: 2,
        channels_per_substream: 4,
        spectra_per_heap: 8,
        sample_bits: 8,
        samples_between_spectra: 16,
        batches_per_chunk: 2,
        frequency: None,
    }
}

/// Prefilled chunk buffers are used before any new one is allocated: after `prefill(3)`
/// the window holds 3 free buffers, and opening 2 chunks takes two of them.
#[test]
fn prefilled_chunks_are_used_before_allocating() {
    let pl = FengPlacement {
        n_ants: 1,
        channels_per_substream: 4,
        spectra_per_heap: 2,
        sample_bits: 8,
        samples_between_spectra: 16,
        batches_per_chunk: 1,
        frequency: None,
    };
    let n = pl.slot_bytes() as u64;
    let mut a = ChunkAssembler::new(pl, 2);
    a.prefill(3);
    assert_eq!(a.free_chunks(), 3);
    a.prefill(2);
    assert_eq!(a.free_chunks(), 3, "prefill tops up, never shrinks");
    let mut out = Vec::new();
    let step = 2 * 16; // one batch: spectra_per_heap × samples_between_spectra
    for b in 0..2u64 {
        a.push(
            &raw_feng(0, n, 0, b * step, 0, &vec![1u8; n as usize]),
            &mut out,
        )
        .unwrap();
    }
    assert_eq!(a.free_chunks(), 1);
}
