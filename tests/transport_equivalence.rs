//! The same digitiser packets through the pcap file source and through UDP loopback give
//! byte-identical chunks and presence maps.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};

use common::{scratch_dir, send_digitiser_heaps, HEAP_BYTES};
use gpucbf::chunk::placement::DigitiserPlacement;
use gpucbf::chunk::{Chunk, ChunkAssembler, ChunkStats, Reject};
use gpucbf::net::recv::pcap::PcapFileSource;
use gpucbf::net::recv::udp::{UdpRecvConfig, UdpRecvSource};
use gpucbf::net::recv::{PacketSource, Poll};
use gpucbf::net::send::heap::HeapSender;
use gpucbf::net::send::pcap::PcapSink;
use gpucbf::net::send::udp::UdpSink;
use gpucbf::net::PacketSink;

fn send_all(sink: Box<dyn PacketSink>, dests: Vec<SocketAddrV4>, rate: Option<f64>) {
    let mut s = HeapSender::new(sink, dests, 2, 2, 8192, rate);
    send_digitiser_heaps(&mut s, 0..40, 2, Some((7, 1)), |h, pol| {
        (0..HEAP_BYTES as u64)
            .map(|i| (i * 13 + h * 5 + pol) as u8)
            .collect()
    });
}

fn drain(src: &mut dyn PacketSource, expect_packets: usize) -> Vec<Chunk> {
    drain_stats(src, expect_packets).0
}

fn assembler() -> ChunkAssembler<DigitiserPlacement> {
    ChunkAssembler::new(DigitiserPlacement::new(4096, 10, 8 * 4096).unwrap(), 2)
}

fn drain_stats(src: &mut dyn PacketSource, expect_packets: usize) -> (Vec<Chunk>, ChunkStats) {
    let mut a = assembler();
    let mut out = Vec::new();
    let mut n = 0;
    let mut idle = 0;
    loop {
        match src.recv_batch(&mut |p| {
            let _ = a.push(p, &mut out);
        }) {
            Ok(Poll::Packets(k)) => n += k,
            Ok(Poll::Idle) => {
                idle += 1;
                if n >= expect_packets || idle > 30 {
                    break;
                }
            }
            Ok(Poll::End) => break,
            Err(e) => panic!("{e}"),
        }
    }
    a.flush(&mut out);
    (out, a.stats.clone())
}

#[test]
fn pcap_and_udp_loopback_give_identical_chunks() {
    let dir = scratch_dir("eq");
    let pcap = dir.join("d.pcap");
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dests = vec![
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
    ];
    let mut udp_src = UdpRecvSource::new(&dests[..1], Ipv4Addr::UNSPECIFIED, 8 << 20).unwrap();

    send_all(
        Box::new(PcapSink::create(&pcap, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148), 4).unwrap()),
        dests.clone(),
        None,
    );
    let sender = std::thread::spawn(move || {
        send_all(
            Box::new(UdpSink::new(Ipv4Addr::UNSPECIFIED, 1, 1 << 20).unwrap()),
            dests,
            Some(50e6),
        );
    });
    let from_udp = drain(&mut udp_src, 79);
    sender.join().unwrap();
    let mut file_src = PcapFileSource::open(&pcap, vec![]).unwrap();
    let from_file = drain(&mut file_src, 79);
    std::fs::remove_dir_all(&dir).ok();

    assert_eq!(from_file.len(), 5);
    assert_eq!(from_udp.len(), from_file.len());
    for (u, f) in from_udp.iter().zip(&from_file) {
        assert_eq!(u.chunk_id, f.chunk_id);
        assert_eq!(u.received, f.received);
        assert!(u.data == f.data, "chunk {} differs", u.chunk_id);
    }
    assert_eq!(from_file[0].n_present(), 15);
}

/// Digitiser packets (one per heap) for heaps 0..40 of both pols, heap (7, 1) missing, heap
/// (12, 0) duplicated, and three 30-byte fragments of packets (malformed datagrams, which GSO
/// sends as the short last segment of a run).
fn digitiser_packets() -> (Vec<Vec<u8>>, u64) {
    use gpucbf::spead::{ids, HeapBuilder};
    let mut v = Vec::new();
    let mut malformed = 0;
    for h in 0..40u64 {
        for pol in 0..2u64 {
            if (h, pol) == (7, 1) {
                continue;
            }
            let payload: Vec<u8> = (0..HEAP_BYTES as u64)
                .map(|i| (i * 7 + h * 3 + pol) as u8)
                .collect();
            let heap = HeapBuilder::new(1 + 2 * (h * 2 + pol))
                .immediate(ids::TIMESTAMP, h * 4096)
                .immediate(ids::DIGITISER_ID, pol)
                .immediate(ids::DIGITISER_STATUS, 0)
                .addressed(ids::ADC_SAMPLES, &payload);
            let pk = heap.packets(usize::MAX, true).unwrap();
            assert_eq!(pk.len(), 1);
            let bytes = pk[0].to_bytes();
            if (h, pol) == (12, 0) {
                v.push(bytes.clone());
            }
            v.push(bytes);
            // Inside a GSO run of 12 (batches of 32 packets), so each is the short last
            // segment of a coalesced buffer.
            if [17, 50, 75].contains(&v.len()) {
                v.push(v[v.len() - 1][..30].to_vec());
                malformed += 1;
            }
        }
    }
    (v, malformed)
}

fn send_packets(sink: &mut UdpSink, dst: SocketAddrV4, packets: &[Vec<u8>]) {
    for group in packets.chunks(32) {
        let parts: Vec<[&[u8]; 1]> = group.iter().map(|p| [&p[..]]).collect();
        let batch: Vec<(SocketAddrV4, &[&[u8]])> = parts.iter().map(|p| (dst, &p[..])).collect();
        sink.send_batch(&batch).unwrap();
    }
}

fn assert_same(a: &(Vec<Chunk>, ChunkStats), b: &(Vec<Chunk>, ChunkStats), what: &str) {
    assert_eq!(a.0.len(), b.0.len(), "{what}: chunk count");
    for (x, y) in a.0.iter().zip(&b.0) {
        assert_eq!(x.chunk_id, y.chunk_id, "{what}");
        assert_eq!(
            x.received, y.received,
            "{what}: presence of chunk {}",
            x.chunk_id
        );
        assert!(
            x.data == y.data,
            "{what}: data of chunk {} differs",
            x.chunk_id
        );
    }
    assert_eq!(a.1, b.1, "{what}: counters");
}

fn loopback_port() -> SocketAddrV4 {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
}

/// A GSO-sent burst received with UDP GRO (coalesced runs split in the source) gives the
/// same chunks, presence and counters as plain receive of the same burst and as the packets
/// handed straight to the assembler; the short malformed segments at the end of runs are
/// counted drops.
#[test]
fn gro_receive_of_gso_burst_matches_plain_receive() {
    let (packets, malformed) = digitiser_packets();
    let (gro_dst, plain_dst) = (loopback_port(), loopback_port());
    let mut gro = UdpRecvSource::new(&[gro_dst], Ipv4Addr::UNSPECIFIED, 8 << 20).unwrap();
    if !gro.gro() {
        println!("skipped: this kernel has no UDP GRO");
        return;
    }
    let mut plain = UdpRecvSource::with_config(
        &[plain_dst],
        Ipv4Addr::UNSPECIFIED,
        8 << 20,
        UdpRecvConfig {
            gro: false,
            slot_bytes: None,
            ..UdpRecvConfig::default()
        },
    )
    .unwrap();
    let mut sink = UdpSink::new(Ipv4Addr::UNSPECIFIED, 1, 8 << 20).unwrap();
    send_packets(&mut sink, gro_dst, &packets);
    send_packets(&mut sink, plain_dst, &packets);
    assert!(sink.gso(), "GSO refused on loopback");
    assert_eq!(sink.gso_refused, 0);
    assert!(sink.gso_sends >= 6, "{} GSO sends", sink.gso_sends);
    assert_eq!(sink.packets, 2 * packets.len() as u64);

    let from_gro = drain_stats(&mut gro, packets.len());
    let from_plain = drain_stats(&mut plain, packets.len());
    let mut reference = assembler();
    let mut out = Vec::new();
    for p in &packets {
        let _ = reference.push(p, &mut out);
    }
    reference.flush(&mut out);
    let reference = (out, reference.stats.clone());

    assert!(gro.stats.coalesced > 0, "{:?}", gro.stats);
    assert!(
        gro.stats.buffers < packets.len() as u64 / 4,
        "{:?}",
        gro.stats
    );
    assert_eq!(gro.stats.packets, packets.len() as u64);
    assert_eq!(plain.stats.coalesced, 0);
    assert_eq!(plain.stats.buffers, packets.len() as u64);
    assert_eq!(gro.stats.truncated + plain.stats.truncated, 0);
    assert_same(&from_gro, &reference, "GRO vs in-memory");
    assert_same(&from_plain, &reference, "plain vs in-memory");
    let st = &from_gro.1;
    assert_eq!(malformed, 3);
    assert_eq!(st.rejected(Reject::Malformed), malformed);
    assert_eq!(st.rejected(Reject::Duplicate), 1);
    assert_eq!(st.packets, 79);
    assert_eq!(st.missing_heaps, 1);
    assert_eq!(from_gro.0.len(), 5);
    assert_eq!(from_gro.0[0].n_present(), 15);
}

/// A datagram, or a coalesced run, larger than the receive slot is dropped and counted
/// (MSG_TRUNC), never written past the slot; the datagrams around it arrive intact.
#[test]
fn oversized_buffers_are_counted_and_dropped() {
    for gro in [true, false] {
        let dst = loopback_port();
        let mut src = UdpRecvSource::with_config(
            &[dst],
            Ipv4Addr::UNSPECIFIED,
            1 << 20,
            UdpRecvConfig {
                gro,
                slot_bytes: Some(2048),
                ..UdpRecvConfig::default()
            },
        )
        .unwrap();
        let mut sink = UdpSink::new(Ipv4Addr::UNSPECIFIED, 1, 1 << 20).unwrap();
        let small = vec![1u8; 500];
        let run: Vec<Vec<u8>> = (0..4).map(|k| vec![2 + k as u8; 1000]).collect();
        let big = vec![9u8; 3000];
        send_packets(&mut sink, dst, std::slice::from_ref(&small));
        // Four 1000-byte packets in one GSO send: 4000 bytes coalesced with GRO.
        send_packets(&mut sink, dst, &run);
        send_packets(&mut sink, dst, std::slice::from_ref(&big));
        send_packets(&mut sink, dst, std::slice::from_ref(&small));
        assert_eq!(sink.gso_sends, 1);
        let mut got: Vec<Vec<u8>> = Vec::new();
        for _ in 0..50 {
            match src.recv_batch(&mut |p| got.push(p.to_vec())).unwrap() {
                Poll::Idle if src.stats.buffers > 0 => break,
                _ => {}
            }
        }
        let st = &src.stats;
        if gro && src.gro() {
            // The run arrived as one buffer too big for the slot.
            assert_eq!(st.truncated, 2, "{st:?}");
            assert_eq!(got, vec![small.clone(), small.clone()]);
        } else {
            // Split by the kernel: each 1000-byte datagram fits.
            assert_eq!(st.truncated, 1, "{st:?}");
            let mut want = vec![small.clone()];
            want.extend(run.iter().cloned());
            want.push(small.clone());
            assert_eq!(got, want);
        }
        assert_eq!(st.packets, got.len() as u64);
    }
}

/// Where the kernel refuses GSO (here: SO_NO_CHECK, which UDP GSO does not allow), the sink
/// counts it once and sends the same packets plainly.
#[test]
fn refused_gso_falls_back_to_plain_sends() {
    use std::os::fd::AsRawFd;
    let dst = loopback_port();
    let mut src = UdpRecvSource::with_config(
        &[dst],
        Ipv4Addr::UNSPECIFIED,
        4 << 20,
        UdpRecvConfig {
            gro: false,
            slot_bytes: None,
            ..UdpRecvConfig::default()
        },
    )
    .unwrap();
    let mut sink = UdpSink::new(Ipv4Addr::UNSPECIFIED, 1, 1 << 20).unwrap();
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on an open socket with a c_int argument.
    let r = unsafe {
        libc::setsockopt(
            sink.socket().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    let packets: Vec<Vec<u8>> = (0..40).map(|k| vec![k as u8; 1200]).collect();
    send_packets(&mut sink, dst, &packets[..20]);
    send_packets(&mut sink, dst, &packets[20..]);
    assert_eq!(sink.gso_refused, 1);
    assert!(!sink.gso());
    assert_eq!(sink.gso_sends, 0);
    assert_eq!(sink.packets, 40);
    let mut got: Vec<Vec<u8>> = Vec::new();
    for _ in 0..50 {
        if let Poll::Idle = src.recv_batch(&mut |p| got.push(p.to_vec())).unwrap() {
            if !got.is_empty() {
                break;
            }
        }
    }
    assert_eq!(got, packets);
}
