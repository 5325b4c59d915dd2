//! The ibverbs sink down to the verbs calls, with the fake provider: the frames are the
//! staged (pcap) path's, slots come back only on completion, and nothing leaks.

use super::*;
use crate::net::send::fake_verbs::{Fake, Request};
use crate::net::send::pcap::PcapSink;

const SRC: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 8, 0, 1), 7148);
const GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 10, 3, 4), 7148);
const PEER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 8, 0, 2), 7150);
const PEER_MAC: [u8; 6] = [0x0c, 0x42, 0xa1, 1, 2, 3];

fn config(slots: usize) -> IbvSinkConfig {
    IbvSinkConfig {
        src_mac: [2, 0, 0, 0, 0, 9],
        src: SRC,
        ttl: 4,
        slots,
        slot_bytes: 1536,
        neighbours: HashMap::from([(*PEER.ip(), PEER_MAC)]),
        arp: None,
        arp_refresh: Duration::ZERO,
        timeout: Duration::from_millis(5),
    }
}

fn sink(fake: &mut Fake, slots: usize) -> IbvSink {
    let o = fake.ptr();
    // SAFETY: the fake QP/CQ outlive the sink; the "registration" is a constant lkey.
    unsafe { IbvSink::from_raw(o, o, config(slots), |_, _| Ok(0x77)) }.unwrap()
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| ((k * 31 + i * 7) % 251) as u8).collect()
}

/// Every frame of a pcap file.
fn read_frames(path: &Path) -> Vec<Vec<u8>> {
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

fn signalled(chain: &[Request]) -> Vec<u64> {
    chain
        .iter()
        .filter(|r| r.2 & IBV_SEND_SIGNALED != 0)
        .map(|r| r.0)
        .collect()
}

fn done(fake: &Fake, wr_id: u64) {
    fake.complete(IbvWc {
        wr_id,
        ..Default::default()
    });
}

#[test]
fn frames_carry_the_pcap_paths_datagrams() {
    let mut fake = Fake::new();
    let mut s = sink(&mut fake, 16);
    let dir = std::env::temp_dir().join(format!("gpucbf-ibv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("staged.pcap");
    let mut pcap = PcapSink::create(&path, SRC, 4).unwrap();
    let bodies: Vec<Vec<u8>> = (0..5).map(|i| payload(i, 100 + 300 * i)).collect();
    let dsts = [GROUP, PEER, GROUP, PEER, GROUP];
    // Two parts per packet (header and payload), as HeapSender sends them.
    let packets: Vec<(SocketAddrV4, Vec<&[u8]>)> = bodies
        .iter()
        .zip(dsts)
        .map(|(b, d)| (d, vec![&b[..8], &b[8..]]))
        .collect();
    let batch: Vec<(SocketAddrV4, &[&[u8]])> = packets.iter().map(|(d, p)| (*d, &p[..])).collect();
    s.send_batch(&batch).unwrap();
    pcap.send_batch(&batch).unwrap();
    pcap.flush().unwrap();
    drop(pcap);

    // One post, the last request signalled; each request one scatter entry over its slot.
    let posted = fake.take_posted();
    assert_eq!(posted.len(), 1);
    assert_eq!(
        signalled(&posted[0]),
        vec![3, 4],
        "the last and every quarter ring"
    );
    let staged = read_frames(&path);
    assert_eq!(staged.len(), 5);
    for (k, (id, sges, _)) in posted[0].iter().enumerate() {
        assert_eq!((*id, sges.len(), sges[0].lkey), (k as u64, 1, 0x77));
        let frame = s.frame(k as u64).unwrap();
        assert_eq!(sges[0].addr, frame.as_ptr() as u64);
        assert_eq!(sges[0].length as usize, frame.len());
        // Same destination and datagram as the staged frame; valid IPv4 header.
        let (dst, udp) = crate::net::frame::fast_udp_ipv4(frame).unwrap();
        let (sdst, sudp) = crate::net::frame::fast_udp_ipv4(&staged[k]).unwrap();
        assert_eq!((dst, udp), (sdst, sudp), "packet {k}");
        assert_eq!(udp, &bodies[k][..]);
        assert_eq!(crate::net::frame::ipv4_checksum(&frame[14..34]), 0);
        assert_eq!(frame[22], 4, "TTL");
        assert_eq!(&frame[6..12], &[2, 0, 0, 0, 0, 9]);
        let want_mac = if dst == PEER {
            PEER_MAC
        } else {
            [0x01, 0x00, 0x5e, 10, 3, 4]
        };
        assert_eq!(&frame[..6], &want_mac);
        assert_eq!(&frame[26..30], &staged[k][26..30], "source address");
    }
    assert_eq!(s.stats.packets, 5);
    assert_eq!(
        s.stats.bytes,
        bodies.iter().map(|b| b.len() as u64).sum::<u64>()
    );
    done(&fake, 4);
    s.flush().unwrap();
    assert_eq!(s.in_flight(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn slots_come_back_only_on_completion() {
    let mut fake = Fake::new();
    let mut s = sink(&mut fake, 8);
    let body = payload(0, 64);
    for _ in 0..8 {
        s.send(GROUP, &[&body]).unwrap();
    }
    assert_eq!(s.in_flight(), 8);
    // Ring full, nothing completed: the next packet waits, then fails; nothing posted.
    let e = s.send(GROUP, &[&body]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    let posted = fake.take_posted();
    assert_eq!(posted.len(), 8);
    let slot0 = posted[0][0].1[0].addr;
    // Request 3's completion frees slots 0..=3 (in-order completion); a completion for a
    // request never posted changes nothing.
    done(&fake, 3);
    done(&fake, 99);
    let other = payload(1, 64);
    for _ in 0..4 {
        s.send(PEER, &[&other]).unwrap();
    }
    let again = fake.take_posted();
    assert_eq!(again.len(), 4);
    for (k, chain) in again.iter().enumerate() {
        assert_eq!(chain[0].0, 8 + k as u64);
        assert_eq!(
            chain[0].1[0].addr,
            slot0 + (k * 1536) as u64,
            "slot {k} reused"
        );
    }
    // The packets still in flight kept their bytes.
    for seq in 4..8 {
        let (_, udp) = crate::net::frame::fast_udp_ipv4(s.frame(seq).unwrap()).unwrap();
        assert_eq!(udp, &body[..]);
    }
    assert!(s.frame(3).is_none());
    // Full again; an error completion still frees (counted).
    assert!(s.send(GROUP, &[&body]).is_err());
    fake.complete(IbvWc {
        wr_id: 11,
        status: 5,
        ..Default::default()
    });
    s.flush().unwrap();
    assert_eq!(
        (s.stats.wc_errors, s.stats.packets, s.in_flight()),
        (1, 12, 0)
    );
}

#[test]
fn ten_thousand_packets_leave_nothing_behind() {
    let mut fake = Fake::new();
    let mut s = sink(&mut fake, 64);
    let bodies: Vec<Vec<u8>> = (0..7).map(|i| payload(i, 200 + 100 * i)).collect();
    let mut sent = 0u64;
    let mut bytes = 0u64;
    let mut max_in_flight = 0;
    while sent < 10_000 {
        let n = (10_000 - sent).min(7) as usize;
        let batch: Vec<(SocketAddrV4, Vec<&[u8]>)> =
            (0..n).map(|i| (GROUP, vec![&bodies[i][..]])).collect();
        let batch: Vec<(SocketAddrV4, &[&[u8]])> =
            batch.iter().map(|(d, p)| (*d, &p[..])).collect();
        s.send_batch(&batch).unwrap();
        sent += n as u64;
        bytes += bodies[..n].iter().map(|b| b.len() as u64).sum::<u64>();
        max_in_flight = max_in_flight.max(s.in_flight());
        // The NIC completes every signalled request posted so far.
        for chain in fake.take_posted() {
            for id in signalled(&chain) {
                done(&fake, id);
            }
        }
    }
    s.flush().unwrap();
    assert_eq!(s.in_flight(), 0);
    assert!(max_in_flight <= 64, "{max_in_flight}");
    assert_eq!((s.stats.packets, s.stats.bytes), (10_000, bytes));
    assert_eq!(s.stats.wc_errors, 0);
}

#[test]
fn bad_packets_and_failed_posts_are_errors_not_losses() {
    let mut fake = Fake::new();
    let mut s = sink(&mut fake, 16);
    let big = payload(0, 1536);
    let e = s.send(GROUP, &[&big]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let small = payload(1, 32);
    let parts: [&[u8]; 1] = [&small];
    let unknown = SocketAddrV4::new(Ipv4Addr::new(10, 8, 0, 77), 7148);
    let e = s.send(unknown, &[&small]).unwrap_err();
    assert!(e.to_string().contains("10.8.0.77"), "{e}");
    assert!(fake.take_posted().is_empty());
    assert_eq!(s.stats.packets, 0);
    // In a batch, the packets before a bad one still go out, then the error.
    let batch: Vec<(SocketAddrV4, &[&[u8]])> =
        vec![(GROUP, &parts), (GROUP, &parts), (unknown, &parts)];
    assert!(s.send_batch(&batch).is_err());
    assert_eq!(fake.take_posted()[0].len(), 2);
    // The provider takes 1 request of a chain of 3 and fails: one counted, the error
    // reported, the other two slots free again.
    fake.fail_next_post(12, 1);
    let batch: Vec<(SocketAddrV4, &[&[u8]])> = vec![(GROUP, &parts); 3];
    let e = s.send_batch(&batch).unwrap_err();
    assert!(e.to_string().contains("ibv_post_send failed"), "{e}");
    assert_eq!(s.stats.packets, 3);
    assert_eq!(s.in_flight(), 3);
    s.send(GROUP, &[&small]).unwrap();
    let posted = fake.take_posted();
    assert_eq!(
        posted.last().unwrap()[0].0,
        3,
        "the next packet takes the freed number"
    );
    done(&fake, 3);
    s.flush().unwrap();
    // Too small a ring is refused.
    let mut cfg = config(1);
    let o = fake.ptr();
    // SAFETY: refused before any verbs call.
    assert!(unsafe { IbvSink::from_raw(o, o, cfg.clone(), |_, _| Ok(1)) }.is_err());
    cfg.slots = 4;
    cfg.slot_bytes = 40;
    assert!(unsafe { IbvSink::from_raw(o, o, cfg, |_, _| Ok(1)) }.is_err());
}

#[test]
fn neighbours_come_from_the_arp_table() {
    let path = std::env::temp_dir().join(format!("gpucbf-arp-{}", std::process::id()));
    std::fs::write(
        &path,
        "IP address       HW type     Flags       HW address            Mask     Device\n\
         10.8.0.2         0x1         0x2         0c:42:a1:01:02:03     *        ens1f0\n\
         10.8.0.3         0x1         0x0         00:00:00:00:00:00     *        ens1f0\n\
         10.9.0.2         0x1         0x2         0c:42:a1:09:09:09     *        ens2f0\n\
         bad line\n",
    )
    .unwrap();
    let n = arp_neighbours(&path, "ens1f0");
    assert_eq!(n, HashMap::from([(*PEER.ip(), PEER_MAC)]));

    // A destination the table learns later is found on the next read (not before the
    // refresh interval has passed).
    let mut fake = Fake::new();
    let o = fake.ptr();
    let mut cfg = config(8);
    cfg.neighbours.clear();
    cfg.arp = Some((path.clone(), "ens2f0".into()));
    cfg.arp_refresh = Duration::from_millis(50);
    // SAFETY: the fake QP/CQ outlive the sink.
    let mut s = unsafe { IbvSink::from_raw(o, o, cfg, |_, _| Ok(1)) }.unwrap();
    let later = SocketAddrV4::new(Ipv4Addr::new(10, 9, 0, 7), 7148);
    assert!(s.send(later, &[b"x"]).is_err());
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(
        "10.9.0.7         0x1         0x2         0c:42:a1:07:07:07     *        ens2f0\n",
    );
    std::fs::write(&path, text).unwrap();
    assert!(
        s.send(later, &[b"x"]).is_err(),
        "read again within the interval"
    );
    std::thread::sleep(Duration::from_millis(60));
    s.send(later, &[b"x"]).unwrap();
    assert_eq!(&s.frame(0).unwrap()[..6], &[0x0c, 0x42, 0xa1, 7, 7, 7]);
    std::fs::remove_file(&path).unwrap();
    assert!(arp_neighbours(Path::new("/nonexistent/arp"), "lo").is_empty());
}

#[test]
fn open_without_a_nic_says_why() {
    let e = IbvSink::open(Ipv4Addr::UNSPECIFIED, 4, 1 << 20)
        .err()
        .unwrap();
    assert!(e.to_string().contains("not 0.0.0.0"), "{e}");
    let e = IbvSink::open(Ipv4Addr::LOCALHOST, 4, 1 << 20)
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("no RDMA device behind interface lo"),
        "{e}"
    );
}
