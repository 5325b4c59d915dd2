//! SPEAD codec: byte-exact layout, round trips through the assembler in any packet order,
//! counted drops, descriptors, and arbitrary bytes (no panic).

use gpucbf::spead::{ids, Assembler, Descriptor, DropReason, HeapBuilder, ItemValue, PacketView};
use proptest::prelude::*;

fn encode(h: &HeapBuilder, max: usize, repeat: bool) -> Vec<Vec<u8>> {
    h.packets(max, repeat)
        .unwrap()
        .iter()
        .map(|p| p.to_bytes())
        .collect()
}

fn assemble_all(packets: &[Vec<u8>], max_partial: usize) -> (Vec<gpucbf::spead::Heap>, Assembler) {
    let mut a = Assembler::new(max_partial);
    let mut out = Vec::new();
    for p in packets {
        let _ = a.push(p, &mut out);
    }
    (out, a)
}

#[test]
fn empty_heap_matches_spead2_layout() {
    // spead2's own test vector: an empty heap carries a NULL item and one padding byte.
    let pk = encode(&HeapBuilder::new(0x123456), 1500, false);
    let mut expect = vec![0x53, 0x04, 0x02, 0x06, 0, 0, 0, 5];
    for (id, imm, v) in [
        (1u64, 1u64, 0x123456u64),
        (2, 1, 1),
        (3, 1, 0),
        (4, 1, 1),
        (0, 0, 0),
    ] {
        expect.extend_from_slice(&((imm << 63) | (id << 48) | v).to_be_bytes());
    }
    expect.push(0);
    assert_eq!(pk, vec![expect]);
}

#[test]
fn digitiser_heap_is_one_5192_byte_packet() {
    let payload = vec![0xA5u8; 5120];
    let h = HeapBuilder::new(2)
        .immediate(ids::TIMESTAMP, 4096 * 7)
        .immediate(ids::DIGITISER_ID, 1)
        .immediate(ids::DIGITISER_STATUS, 0)
        .addressed(ids::ADC_SAMPLES, &payload);
    let pk = encode(&h, 8872, true);
    assert_eq!(pk.len(), 1);
    assert_eq!(pk[0].len(), 5192);
    let v = PacketView::parse(&pk[0]).unwrap();
    assert_eq!(v.heap_cnt, 2);
    assert_eq!(v.heap_size, Some(5120));
    assert_eq!(v.immediate(ids::TIMESTAMP), Some(4096 * 7));
    assert_eq!(v.n_pointers(), 8);
}

#[test]
fn repeat_pointers_put_every_item_in_every_packet() {
    let payload: Vec<u8> = (0..20000u32).map(|i| i as u8).collect();
    let h = HeapBuilder::new(7)
        .immediate(ids::TIMESTAMP, 99)
        .immediate(ids::FENG_ID, 3)
        .addressed(ids::FENG_RAW, &payload);
    let pk = encode(&h, 8192 + 64, true);
    assert_eq!(pk.len(), 3);
    for p in &pk {
        let v = PacketView::parse(p).unwrap();
        assert_eq!(v.immediate(ids::TIMESTAMP), Some(99));
        assert_eq!(v.immediate(ids::FENG_ID), Some(3));
        assert!(p.len() <= 8192 + 64);
    }
}

#[test]
fn malformed_packets_are_counted_by_reason() {
    let mut a = Assembler::new(4);
    let mut out = Vec::new();
    let good = encode(
        &HeapBuilder::new(5)
            .immediate(ids::TIMESTAMP, 1)
            .addressed_owned(ids::ADC_SAMPLES, vec![1; 100]),
        1500,
        true,
    )
    .remove(0);
    assert_eq!(a.push(&good[..4], &mut out), Err(DropReason::TooShort));
    let mut bad = good.clone();
    bad[0] = 0x54;
    assert_eq!(a.push(&bad, &mut out), Err(DropReason::BadMagic));
    let mut bad = good.clone();
    bad[1] = 3;
    assert_eq!(a.push(&bad, &mut out), Err(DropReason::BadVersion));
    let mut bad = good.clone();
    bad[3] = 5;
    assert_eq!(a.push(&bad, &mut out), Err(DropReason::UnsupportedFlavour));
    assert_eq!(
        a.push(&good[..good.len() - 1], &mut out),
        Err(DropReason::PayloadLengthMismatch)
    );
    let mut bad = good.clone();
    bad[7] = 200;
    assert_eq!(a.push(&bad, &mut out), Err(DropReason::TruncatedPointers));
    assert!(a.push(&good, &mut out).is_ok());
    assert_eq!(a.push(&good, &mut out), Err(DropReason::Duplicate));
    assert_eq!(out.len(), 1);
    for r in [
        DropReason::TooShort,
        DropReason::BadMagic,
        DropReason::BadVersion,
        DropReason::UnsupportedFlavour,
        DropReason::PayloadLengthMismatch,
        DropReason::TruncatedPointers,
        DropReason::Duplicate,
    ] {
        assert_eq!(a.stats.dropped(r), 1, "{r}");
    }
    assert_eq!(a.stats.total_dropped(), 7);
}

#[test]
fn eviction_counts_incomplete_heaps() {
    let big = vec![3u8; 10000];
    let mut packets = Vec::new();
    for cnt in 0..3u64 {
        let h = HeapBuilder::new(cnt).addressed(ids::FENG_RAW, &big);
        let mut p = encode(&h, 1500, true);
        p.pop(); // lose the last packet of each heap
        packets.extend(p);
    }
    let (heaps, mut a) = assemble_all(&packets, 2);
    assert!(heaps.is_empty());
    assert_eq!(a.stats.incomplete_heaps_evicted, 1);
    let mut out = Vec::new();
    a.flush(&mut out);
    assert_eq!(a.stats.incomplete_heaps_flushed, 2);
    assert!(out.is_empty());
}

#[test]
fn stop_heap_and_descriptors() {
    let d = Descriptor::with_dtype(
        ids::XENG_RAW,
        "xeng_raw",
        "Integrated baseline correlation products.",
        &[16, 40, 2],
        "<i4",
    );
    let h = HeapBuilder::new(1)
        .descriptor(&d)
        .descriptor(&Descriptor::with_format(
            ids::TIMESTAMP,
            "timestamp",
            "t",
            &[],
            &[('u', 48)],
        ));
    let (heaps, _) = assemble_all(&encode(&h, 8872, false), 4);
    let ds: Vec<Descriptor> = heaps[0]
        .descriptors()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ds[0], d);
    assert_eq!(ds[1].format, vec![('u', 48)]);
    assert_eq!(ds[1].shape, Vec::<Option<u64>>::new());
    let (heaps, a) = assemble_all(&encode(&HeapBuilder::new(9).stop(), 1500, false), 4);
    assert!(heaps[0].is_stop());
    assert_eq!(a.stats.stop_heaps, 1);
}

#[derive(Debug, Clone)]
enum It {
    Imm(u16, u64),
    Addr(u16, Vec<u8>),
}

fn item_strategy() -> impl Strategy<Value = It> {
    prop_oneof![
        (0x1000u16..0x7fff, any::<u64>()).prop_map(|(i, v)| It::Imm(i, v & 0xFFFF_FFFF_FFFF)),
        (
            0x1000u16..0x7fff,
            prop::collection::vec(any::<u8>(), 1..3000)
        )
            .prop_map(|(i, v)| It::Addr(i, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any heap, any packet size, any packet order: the assembler returns the same items.
    #[test]
    fn round_trip_any_order(
        cnt in 0u64..(1 << 48),
        items in prop::collection::vec(item_strategy(), 0..6),
        max in 96usize..9000,
        repeat in any::<bool>(),
        seed in any::<u64>(),
    ) {
        // Unique IDs so lookups are unambiguous.
        let mut seen = std::collections::HashSet::new();
        let items: Vec<It> = items.into_iter().filter(|it| seen.insert(match it { It::Imm(i, _) | It::Addr(i, _) => *i })).collect();
        let mut h = HeapBuilder::new(cnt);
        for it in &items {
            h = match it {
                It::Imm(i, v) => h.immediate(*i, *v),
                It::Addr(i, d) => h.addressed(*i, d),
            };
        }
        let needed = 8 + 8 * (4 + items.len() + 1) + 1;
        let max = if repeat { max.max(needed) } else { max };
        let mut pk = encode(&h, max, repeat);
        // Deterministic shuffle.
        let mut s = seed;
        for i in (1..pk.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            pk.swap(i, (s >> 33) as usize % (i + 1));
        }
        let (heaps, a) = assemble_all(&pk, 4);
        prop_assert_eq!(heaps.len(), 1);
        prop_assert_eq!(a.stats.total_dropped(), 0);
        let heap = &heaps[0];
        prop_assert_eq!(heap.cnt, cnt);
        for it in &items {
            match it {
                It::Imm(i, v) => prop_assert_eq!(heap.item(*i), Some(ItemValue::Immediate(*v))),
                It::Addr(i, d) => prop_assert_eq!(heap.item(*i), Some(ItemValue::Bytes(&d[..]))),
            }
        }
    }

    /// Arbitrary bytes never panic the parser or the assembler.
    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..2000)) {
        let _ = PacketView::parse(&data);
        let mut a = Assembler::new(2).with_keep_incomplete(true);
        let mut out = Vec::new();
        let _ = a.push(&data, &mut out);
        a.flush(&mut out);
        for h in &out {
            let _ = h.items();
            let _ = h.descriptors();
        }
    }

    /// Valid packets with random corruption (header included) never panic, and whatever is
    /// assembled has addressed items inside the heap.
    #[test]
    fn corrupted_packets_never_panic(
        payload in prop::collection::vec(any::<u8>(), 1..5000),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let h = HeapBuilder::new(4).immediate(ids::TIMESTAMP, 8).addressed(ids::FENG_RAW, &payload);
        let pk = encode(&h, 1024, true);
        let mut a = Assembler::new(3).with_keep_incomplete(true);
        let mut out = Vec::new();
        for mut p in pk {
            for (idx, v) in &flips {
                let i = idx.index(p.len());
                p[i] ^= v;
            }
            let _ = a.push(&p, &mut out);
        }
        a.flush(&mut out);
        for h in &out {
            for (_, v) in h.items() {
                if let ItemValue::Bytes(b) = v { prop_assert!(b.len() as u64 <= h.size); }
            }
            let _ = h.descriptors();
        }
    }

    /// Arbitrary bytes as a descriptor never panic.
    #[test]
    fn arbitrary_descriptor_bytes(data in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = Descriptor::decode(&data);
    }
}
