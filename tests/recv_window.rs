//! The receive window against hostile and broken input: heaps cut into many tiny packets.

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

/// One raw SPEAD-64-48 packet of an F-engine heap of `heap_size` bytes: `payload` at
/// `offset`, timestamp `ts`, feng_id `feng`, frequency `freq` (`u64::MAX`: no frequency item).
fn raw_feng(cnt: u64, heap_size: u64, offset: u64, ts: u64, feng: u64, payload: &[u8]) -> Vec<u8> {
    raw_feng_freq(cnt, heap_size, offset, ts, feng, u64::MAX, payload)
}

fn raw_feng_freq(
    cnt: u64,
    heap_size: u64,
    offset: u64,
    ts: u64,
    feng: u64,
    freq: u64,
    payload: &[u8],
) -> Vec<u8> {
    let mut items = vec![
        (ids::HEAP_CNT, cnt),
        (ids::HEAP_SIZE, heap_size),
        (ids::HEAP_OFFSET, offset),
        (ids::PAYLOAD_LENGTH, payload.len() as u64),
        (ids::TIMESTAMP, ts),
        (ids::FENG_ID, feng),
    ];
    if freq != u64::MAX {
        items.push((ids::FREQUENCY, freq));
    }
    let mut p = vec![0x53, 4, 2, 6, 0, 0, 0, items.len() as u8];
    for (id, v) in items {
        p.extend_from_slice(&((1u64 << 63) | (u64::from(id) << 48) | v).to_be_bytes());
    }
    p.extend_from_slice(payload);
    p
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
