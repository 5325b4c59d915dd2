//! The same digitiser pcap through the file source and through DPDK's net_pcap vdev gives
//! byte-identical chunks and presence maps. Own test binary: the EAL initialises once per
//! process.
#![cfg(feature = "dpdk")]

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};

use common::{scratch_dir, send_digitiser_heaps, HEAP_BYTES};
use gpucbf::chunk::placement::DigitiserPlacement;
use gpucbf::chunk::{Chunk, ChunkAssembler};
use gpucbf::net::recv::dpdk::DpdkSource;
use gpucbf::net::recv::pcap::PcapFileSource;
use gpucbf::net::recv::{PacketSource, Poll};
use gpucbf::net::send::heap::HeapSender;
use gpucbf::net::send::pcap::PcapSink;

/// Digitiser heaps for two pols on two destinations, one heap missing; plus heaps to a third
/// destination that the endpoint filter must drop.
fn write_feed(path: &std::path::Path, dests: &[SocketAddrV4], stray: SocketAddrV4) {
    let sink = PcapSink::create(
        path,
        SocketAddrV4::new(Ipv4Addr::new(169, 254, 0, 9), 7148),
        4,
    )
    .unwrap();
    let mut all = dests.to_vec();
    all.push(stray);
    let mut s = HeapSender::new(Box::new(sink), all, 3, 3, 8192, None);
    send_digitiser_heaps(&mut s, 0..60, 3, Some((9, 1)), |h, pol| {
        (0..HEAP_BYTES as u64)
            .map(|i| (i * 7 + h * 3 + pol) as u8)
            .collect()
    });
}

fn drain(src: &mut dyn PacketSource) -> (Vec<Chunk>, usize) {
    let mut a = ChunkAssembler::new(DigitiserPlacement::new(4096, 10, 8 * 4096).unwrap(), 2);
    let mut out = Vec::new();
    let mut n = 0;
    let t0 = std::time::Instant::now();
    loop {
        match src.recv_batch(&mut |p| {
            let _ = a.push(p, &mut out);
        }) {
            Ok(Poll::Packets(k)) => n += k,
            Ok(Poll::Idle) => assert!(t0.elapsed().as_secs() < 60, "source never ended"),
            Ok(Poll::End) => break,
            Err(e) => panic!("{e}"),
        }
    }
    a.flush(&mut out);
    (out, n)
}

#[test]
fn pcap_file_and_dpdk_net_pcap_give_identical_chunks() {
    let dir = scratch_dir("dpdk-eq");
    let pcap = dir.join("dig.pcap");
    let dests = vec![
        SocketAddrV4::new(Ipv4Addr::new(239, 102, 0, 1), 7148),
        SocketAddrV4::new(Ipv4Addr::new(239, 102, 0, 2), 7148),
    ];
    let stray = SocketAddrV4::new(Ipv4Addr::new(239, 102, 0, 3), 7148);
    write_feed(&pcap, &dests, stray);

    let mut file_src = PcapFileSource::open(&pcap, dests.clone()).unwrap();
    let (from_file, n_file) = drain(&mut file_src);
    assert_eq!(n_file, 119);
    assert_eq!(file_src.filtered, 60);

    let eal = format!(
        "--no-huge --no-pci -m 512 -l 0 --vdev net_pcap0,rx_pcap={}",
        pcap.display()
    );
    let mut dpdk = match DpdkSource::new(&eal, dests.clone()) {
        Ok(s) => s,
        Err(e) if std::env::var_os("GPUCBF_REQUIRE_DPDK").is_none() => {
            eprintln!("SKIP: DPDK EAL/port could not start here: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let (from_dpdk, n_dpdk) = drain(&mut dpdk);
    let st = dpdk.port_stats().clone();
    drop(dpdk);
    std::fs::remove_dir_all(&dir).ok();

    assert_eq!(n_dpdk, n_file);
    assert_eq!(st.frames.frames, 179);
    assert_eq!(st.frames.filtered, 60);
    assert_eq!(st.port_ipackets, 179);
    assert_eq!(from_file.len(), 8);
    assert_eq!(from_dpdk.len(), from_file.len());
    for (d, f) in from_dpdk.iter().zip(&from_file) {
        assert_eq!(d.chunk_id, f.chunk_id);
        assert_eq!(d.received, f.received, "presence of chunk {}", d.chunk_id);
        assert!(d.data == f.data, "chunk {} differs", d.chunk_id);
    }
    assert_eq!(from_file[1].n_present(), 15);
}
