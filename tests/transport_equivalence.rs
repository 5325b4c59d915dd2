//! The same digitiser packets through the pcap file source and through UDP loopback give
//! byte-identical chunks and presence maps.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};

use common::{scratch_dir, send_digitiser_heaps, HEAP_BYTES};
use gpucbf::chunk::placement::DigitiserPlacement;
use gpucbf::chunk::{Chunk, ChunkAssembler};
use gpucbf::net::heapsend::HeapSender;
use gpucbf::net::pcap::PcapSink;
use gpucbf::net::source::{PacketSource, PcapFileSource, Poll, UdpRecvSource};
use gpucbf::net::udp::UdpSink;
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
    let mut a = ChunkAssembler::new(DigitiserPlacement::new(4096, 10, 8 * 4096).unwrap(), 2);
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
    out
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
