//! The PeerDirect sender down to the verbs calls, with a fake provider whose context
//! records every posted work request and hands out queued completions.

use super::*;
use crate::net::send::fake_verbs::Fake;
use ibverbs_sys::IBV_SEND_SIGNALED;
use std::net::Ipv4Addr;

fn config(depth: usize) -> PeerDirectConfig {
    PeerDirectConfig {
        src_mac: [2, 0, 0, 0, 0, 9],
        src: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 7148),
        dests: vec![
            SocketAddrV4::new(Ipv4Addr::new(239, 10, 0, 0), 7148),
            SocketAddrV4::new(Ipv4Addr::new(239, 10, 0, 1), 7148),
        ],
        ttl: 4,
        packet_payload: 1024,
        immediate_ids: vec![ids::TIMESTAMP, ids::FENG_ID, ids::FREQUENCY],
        payload_id: ids::FENG_RAW,
        // Two heaps of 2500 bytes: 1024 + 1024 + 452 each.
        heaps: vec![
            HeapPlan {
                dst: 0,
                offset: 0,
                len: 2500,
            },
            HeapPlan {
                dst: 1,
                offset: 2500,
                len: 2500,
            },
        ],
        send_queue_depth: depth,
        cnt_start: 5,
        cnt_step: 64,
        rate: None,
    }
}

const ITEM_BYTES: u64 = 5000;
const DEV: u64 = 0x7f00_0000_0000;

fn items(n: usize) -> Vec<(u64, u32)> {
    (0..n as u64).map(|i| (DEV + i * 8192, 0x99)).collect()
}

#[test]
fn headers_match_the_staged_path_byte_for_byte() {
    let mut fake = Fake::new();
    let o = fake.ptr();
    // SAFETY: fake QP/CQ objects; nothing is posted in this test.
    let mut s =
        unsafe { PeerDirectSender::from_raw(o, o, config(64), &items(2), |_, _| Ok(7)) }.unwrap();
    assert_eq!(s.packets_per_item(), 6);
    let item = s.acquire(Duration::ZERO).unwrap();
    let payload: Vec<u8> = (0..ITEM_BYTES).map(|i| (i * 7 % 251) as u8).collect();
    let values = [1u64 << 40, 3, 0, 1 << 40, 3, 512];
    // Nothing polled: the fake post records the chain.
    s.send(item, &values, Duration::ZERO).unwrap();
    // The same heaps through HeapBuilder, as HeapSender builds them.
    let spead = PeerDirectSender::spead_header_len(3);
    let mut k = 0;
    for (h, plan) in s.cfg.heaps.clone().iter().enumerate() {
        let body = &payload[plan.offset as usize..(plan.offset + plan.len) as usize];
        let mut b = crate::spead::HeapBuilder::new(5 + 64 * h as u64);
        for (j, &id) in s.cfg.immediate_ids.iter().enumerate() {
            b = b.immediate(id, values[3 * h + j]);
        }
        let b = b.addressed(ids::FENG_RAW, body);
        for p in b.packets(spead + 1024, true).unwrap() {
            let hdr = s.header(item, k);
            assert_eq!(&hdr[42..], &p.header[..], "packet {k}");
            // The whole frame parses as IPv4/UDP to the heap's destination, with a valid
            // IPv4 header checksum and lengths that cover exactly this payload.
            let mut frame = hdr.to_vec();
            for seg in &p.payload {
                frame.extend_from_slice(seg);
            }
            assert_eq!(crate::net::frame::ipv4_checksum(&frame[14..34]), 0);
            let (dst, udp) = crate::net::frame::fast_udp_ipv4(&frame).unwrap();
            assert_eq!(dst, s.cfg.dests[plan.dst]);
            let v = crate::spead::PacketView::parse(udp).unwrap();
            assert_eq!(v.heap_cnt, 5 + 64 * h as u64);
            assert_eq!(v.immediate(ids::FREQUENCY), Some(values[3 * h + 2]));
            k += 1;
        }
    }
    assert_eq!(k, 6);
    let posted = fake.take_posted().remove(0);
    assert_eq!(posted.len(), 6);
    // Payload entries point into the item's device range, in order, covering it exactly.
    let mut next = DEV;
    for (j, (id, sges, flags)) in posted.iter().enumerate() {
        let (hs, ps) = (sges[0], sges[1]);
        assert_eq!(*id, wr_id(item, j as u32));
        assert_eq!((hs.lkey, ps.lkey), (7, 0x99));
        assert_eq!(hs.length as usize, 42 + spead);
        assert_eq!(ps.addr, next);
        next += ps.length as u64;
        assert_eq!(flags & IBV_SEND_SIGNALED != 0, j == 5);
    }
    assert_eq!(next, DEV + ITEM_BYTES);
}

#[test]
fn items_recycle_on_completion_and_the_queue_budget_holds() {
    let mut fake = Fake::new();
    let o = fake.ptr();
    // Room for two items' packets (6 each) in the send queue, three items.
    // SAFETY: fake QP/CQ objects that outlive the sender.
    let mut s =
        unsafe { PeerDirectSender::from_raw(o, o, config(12), &items(3), |_, _| Ok(1)) }.unwrap();
    let v = [0u64; 6];
    let a = s.acquire(Duration::ZERO).unwrap();
    // Not acquired, wrong value count: errors, nothing posted.
    assert!(s.send(a + 1, &v, Duration::ZERO).is_err());
    assert!(s.send(a, &v[..5], Duration::ZERO).is_err());
    s.send(a, &v, Duration::ZERO).unwrap();
    let b = s.acquire(Duration::ZERO).unwrap();
    s.send(b, &v, Duration::ZERO).unwrap();
    let c = s.acquire(Duration::ZERO).unwrap();
    assert_eq!(s.in_flight(), 2);
    // The queue holds 12 requests, 12 are outstanding: the third item waits, then times out.
    let e = s.send(c, &v, Duration::from_millis(2)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    // No item is free until a completion comes.
    assert_eq!(
        s.acquire(Duration::from_millis(2)).unwrap_err().kind(),
        io::ErrorKind::TimedOut
    );
    // An unsignalled packet's completion frees nothing (counted); the last packet of item
    // `a` frees it (with an error status: counted, recycled all the same).
    fake.complete(IbvWc {
        wr_id: wr_id(b, 0),
        ..Default::default()
    });
    fake.complete(IbvWc {
        wr_id: wr_id(a, 5),
        status: 5,
        ..Default::default()
    });
    assert_eq!(s.poll().unwrap(), 1);
    assert_eq!(s.stats.stray_completions, 1);
    assert_eq!(s.stats.wc_errors, 1);
    assert_eq!(s.in_flight(), 1);
    // Room again: the third item goes out, and the freed item is handed out again.
    s.send(c, &v, Duration::ZERO).unwrap();
    assert_eq!(s.acquire(Duration::ZERO).unwrap(), a);
    // The last packets of b and c complete: everything is back.
    for i in [b, c] {
        fake.complete(IbvWc {
            wr_id: wr_id(i, 5),
            ..Default::default()
        });
    }
    s.flush(Duration::from_millis(50)).unwrap();
    assert_eq!(s.in_flight(), 0);
    assert_eq!(s.stats.items, 3);
    assert_eq!(s.stats.packets, 18);
    assert_eq!(s.stats.heaps, 6);
}

#[test]
fn inconsistent_layouts_are_refused() {
    let mut fake = Fake::new();
    let o = fake.ptr();
    let mut cfg = config(4);
    // SAFETY: fake objects; construction fails before any verbs call.
    let e = unsafe { PeerDirectSender::from_raw(o, o, cfg.clone(), &items(1), |_, _| Ok(1)) };
    assert!(e.is_err(), "6 packets per item cannot fit a 4-deep queue");
    cfg.send_queue_depth = 64;
    cfg.heaps[1].dst = 7;
    let e = unsafe { PeerDirectSender::from_raw(o, o, cfg.clone(), &items(1), |_, _| Ok(1)) };
    assert!(e.is_err());
    cfg.heaps[1].dst = 1;
    let e = unsafe { PeerDirectSender::from_raw(o, o, cfg, &[], |_, _| Ok(1)) };
    assert!(e.is_err());
}

/// The heap counter of a posted packet, read back from its header.
fn posted_cnt(s: &PeerDirectSender, item: u32, k: usize) -> u64 {
    // The first item pointer after the SPEAD header: the heap counter.
    let h = &s.header(item, k)[42 + HEADER_BYTES..];
    let p = ItemPointer::from_raw(u64::from_be_bytes(h[..8].try_into().unwrap()));
    assert_eq!(p.id, ids::HEAP_CNT);
    p.value
}

#[test]
fn a_subset_of_heaps_takes_the_next_counters_and_frees_its_item() {
    let mut fake = Fake::new();
    let o = fake.ptr();
    // 12 requests in the queue; 3 items of two heaps (3 packets each).
    // SAFETY: fake QP/CQ objects that outlive the sender.
    let mut s =
        unsafe { PeerDirectSender::from_raw(o, o, config(12), &items(3), |_, _| Ok(1)) }.unwrap();
    let v = [0u64; 6];
    // Heap 1 only: its three packets, the last signalled, counter 5.
    let a = s.acquire(Duration::ZERO).unwrap();
    s.send_heaps(a, &v, |h| h == 1, Duration::ZERO).unwrap();
    let posted = fake.take_posted();
    assert_eq!(posted.len(), 1);
    let ids: Vec<u64> = posted[0].iter().map(|p| p.0).collect();
    assert_eq!(ids, [wr_id(a, 3), wr_id(a, 4), wr_id(a, 5)]);
    let flags: Vec<bool> = posted[0]
        .iter()
        .map(|p| p.2 & IBV_SEND_SIGNALED != 0)
        .collect();
    assert_eq!(flags, [false, false, true]);
    assert_eq!(posted[0][0].1[1].addr, DEV + a as u64 * 8192 + 2500);
    assert_eq!(posted_cnt(&s, a, 3), 5);
    // No heap: nothing posted, nothing taken, the item free at once.
    let b = s.acquire(Duration::ZERO).unwrap();
    s.send_heaps(b, &v, |_| false, Duration::ZERO).unwrap();
    assert!(fake.take_posted().is_empty());
    assert_eq!(s.in_flight(), 1);
    assert_eq!(s.acquire(Duration::ZERO).unwrap(), b);
    // Then the whole item b: both heaps, the next two counters, one chain of six.
    s.send(b, &v, Duration::ZERO).unwrap();
    let posted = fake.take_posted();
    assert_eq!(posted[0].len(), 6);
    assert_eq!(
        (posted_cnt(&s, b, 0), posted_cnt(&s, b, 3)),
        (5 + 64, 5 + 128)
    );
    // 3 + 6 outstanding of 12: another whole item waits; heap 0 alone (3) fits.
    let c = s.acquire(Duration::ZERO).unwrap();
    let e = s.send(c, &v, Duration::from_millis(2)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    s.send_heaps(c, &v, |h| h == 0, Duration::ZERO).unwrap();
    let posted = fake.take_posted();
    assert_eq!(posted[0].len(), 3);
    assert!(posted[0][2].2 & IBV_SEND_SIGNALED != 0);
    assert!(posted[0][2].0 == wr_id(c, 2));
    assert_eq!(posted_cnt(&s, c, 0), 5 + 192);
    // Item a comes back when its subset's last packet completes (the queue gets its 3
    // requests back: a whole item fits again once b's complete too).
    fake.complete(IbvWc {
        wr_id: wr_id(a, 5),
        ..Default::default()
    });
    assert_eq!(s.poll().unwrap(), 1);
    for (i, k) in [(b, 5), (c, 2)] {
        fake.complete(IbvWc {
            wr_id: wr_id(i, k),
            ..Default::default()
        });
    }
    s.flush(Duration::from_millis(50)).unwrap();
    assert_eq!(s.stats.stray_completions, 0);
    let a = s.acquire(Duration::ZERO).unwrap();
    s.send(a, &v, Duration::ZERO).unwrap();
    let b = s.acquire(Duration::ZERO).unwrap();
    s.send(b, &v, Duration::ZERO).unwrap();
    assert_eq!(fake.take_posted().len(), 2, "12 requests free again");
    assert_eq!(s.stats.items, 5);
    assert_eq!(s.stats.heaps, 1 + 2 + 1 + 2 + 2);
    assert_eq!(s.stats.packets, 3 + 6 + 3 + 6 + 6);
    assert_eq!(s.stats.bytes, 2500 * 8);
}
