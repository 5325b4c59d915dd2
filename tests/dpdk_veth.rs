//! DPDK receive from a live interface: a veth pair in two network namespaces that the test
//! creates (link-local 169.254.199.0/24, nothing leaves the machine). A UDP sender in one
//! namespace sends digitiser heaps; DpdkSource with net_af_packet in the other receives
//! them; the chunks equal those from a pcap file of the same heaps. Skips (with a printed
//! reason) without the rights to create namespaces. Own test binary: EAL once per process.
#![cfg(feature = "dpdk")]

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::process::Command;

use common::{scratch_dir, send_digitiser_heaps, HEAP_BYTES};
use gpucbf::chunk::placement::DigitiserPlacement;
use gpucbf::chunk::{Chunk, ChunkAssembler};
use gpucbf::net::recv::dpdk::DpdkSource;
use gpucbf::net::recv::pcap::PcapFileSource;
use gpucbf::net::recv::{PacketSource, Poll};
use gpucbf::net::send::heap::HeapSender;
use gpucbf::net::send::pcap::PcapSink;
use gpucbf::net::send::udp::UdpSink;
use gpucbf::net::PacketSink;

const HEAPS: u64 = 200;

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

struct Netns(Vec<String>);

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

fn enter(ns: &str) {
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
    // SAFETY: setns on this thread with a valid namespace fd.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {ns}: {}", std::io::Error::last_os_error());
}

fn send_all(sink: Box<dyn PacketSink>, dst: SocketAddrV4, stray: SocketAddrV4, rate: Option<f64>) {
    let mut s = HeapSender::new(sink, vec![dst, dst, stray], 2, 2, 8192, rate);
    send_digitiser_heaps(&mut s, 0..HEAPS, 3, None, |h, pol| {
        (0..HEAP_BYTES as u64)
            .map(|i| (i * 11 + h * 7 + pol) as u8)
            .collect()
    });
}

fn drain(src: &mut dyn PacketSource, expect: usize) -> Vec<Chunk> {
    let mut a = ChunkAssembler::new(DigitiserPlacement::new(4096, 10, 16 * 4096).unwrap(), 2);
    let mut out = Vec::new();
    let mut n = 0;
    let t0 = std::time::Instant::now();
    while n < expect && t0.elapsed().as_secs() < 20 {
        match src.recv_batch(&mut |p| {
            let _ = a.push(p, &mut out);
        }) {
            Ok(Poll::Packets(k)) => n += k,
            Ok(Poll::Idle) => {}
            Ok(Poll::End) => break,
            Err(e) => panic!("{e}"),
        }
    }
    a.flush(&mut out);
    out
}

#[test]
fn dpdk_af_packet_on_veth_matches_pcap() {
    let id = std::process::id() % 100000;
    let (na, nb) = (format!("gpucbf-dpa-{id}"), format!("gpucbf-dpb-{id}"));
    let (va, vb) = (format!("gva{id}"), format!("gvb{id}"));
    if let Err(e) = ip(&["netns", "add", &na]) {
        eprintln!("SKIP: cannot create network namespaces here ({e})");
        return;
    }
    let _guard = Netns(vec![na.clone(), nb.clone()]);
    let setup = [
        vec!["netns", "add", &nb],
        vec!["link", "add", &va, "type", "veth", "peer", "name", &vb],
        vec!["link", "set", &va, "netns", &na],
        vec!["link", "set", &vb, "netns", &nb],
        vec!["-n", &na, "addr", "add", "169.254.199.1/24", "dev", &va],
        vec!["-n", &nb, "addr", "add", "169.254.199.2/24", "dev", &vb],
        vec!["-n", &na, "link", "set", &va, "mtu", "6000"],
        vec!["-n", &nb, "link", "set", &vb, "mtu", "6000"],
        vec!["-n", &na, "link", "set", &va, "up"],
        vec!["-n", &nb, "link", "set", &vb, "up"],
        vec![
            "-n",
            &nb,
            "neigh",
            "replace",
            "169.254.199.1",
            "lladdr",
            "02:00:a9:fe:c7:01",
            "dev",
            &vb,
            "nud",
            "permanent",
        ],
        vec![
            "-n",
            &na,
            "link",
            "set",
            &va,
            "address",
            "02:00:a9:fe:c7:01",
        ],
    ];
    for a in &setup {
        if let Err(e) = ip(a) {
            eprintln!("SKIP: veth set-up failed ({e})");
            return;
        }
    }
    let dst = SocketAddrV4::new(Ipv4Addr::new(169, 254, 199, 1), 7148);
    let stray = SocketAddrV4::new(Ipv4Addr::new(169, 254, 199, 1), 7149);

    let dir = scratch_dir("dpdk-veth");
    let pcap = dir.join("ref.pcap");
    send_all(
        Box::new(
            PcapSink::create(
                &pcap,
                SocketAddrV4::new(Ipv4Addr::new(169, 254, 199, 2), 7148),
                4,
            )
            .unwrap(),
        ),
        dst,
        stray,
        None,
    );
    let mut file_src = PcapFileSource::open(&pcap, vec![dst]).unwrap();
    let from_file = drain(&mut file_src, usize::MAX);
    std::fs::remove_dir_all(&dir).ok();

    // The EAL opens the af_packet socket on this thread, inside namespace A.
    enter(&na);
    let eal = format!("--no-huge --no-pci -m 512 -l 0 --vdev net_af_packet0,iface={va},framesz=8192,blocksz=8192,framecnt=1024");
    let mut src = DpdkSource::new(&eal, vec![dst]).expect("DPDK on the veth");
    let nb2 = nb.clone();
    let sender = std::thread::spawn(move || {
        enter(&nb2);
        std::thread::sleep(std::time::Duration::from_millis(300));
        send_all(
            Box::new(UdpSink::new(Ipv4Addr::UNSPECIFIED, 1, 4 << 20).unwrap()),
            dst,
            stray,
            Some(20e6),
        );
    });
    let from_dpdk = drain(&mut src, 2 * HEAPS as usize);
    sender.join().unwrap();
    let st = src.stats.clone();
    drop(src);

    assert_eq!(st.frames.datagrams, 2 * HEAPS, "{st:?}");
    // The stray heap h follows heap h on the wire; the last may come after we stop.
    assert!(st.frames.filtered >= HEAPS - 1, "{st:?}");
    assert_eq!(from_file.len(), (HEAPS / 16) as usize + 1);
    assert_eq!(from_dpdk.len(), from_file.len());
    for (d, f) in from_dpdk.iter().zip(&from_file) {
        assert_eq!(d.chunk_id, f.chunk_id);
        assert_eq!(d.received, f.received, "presence of chunk {}", d.chunk_id);
        assert!(d.data == f.data, "chunk {} differs", d.chunk_id);
    }
}
