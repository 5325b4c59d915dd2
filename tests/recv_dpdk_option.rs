//! `--recv-dpdk` / `--recv-ibv` on a binary built without their feature are clear errors, and bad
//! endpoint lists are errors too (no panic).

use std::net::Ipv4Addr;

use gpucbf::engines::common::recv::open_source;

#[cfg(not(feature = "dpdk"))]
#[test]
fn recv_dpdk_without_feature_is_a_clear_error() {
    let e = open_source("all", Ipv4Addr::UNSPECIFIED, Some("--no-huge --no-pci"))
        .err()
        .expect("must fail without DPDK");
    let m = e.to_string();
    assert!(m.contains("built without DPDK"), "{m}");
}

#[test]
fn recv_dpdk_with_bad_endpoints_is_an_error() {
    let e = open_source("not-an-endpoint", Ipv4Addr::UNSPECIFIED, Some("--no-huge"))
        .err()
        .expect("bad endpoints must fail");
    assert!(e.to_string().contains("not endpoints"), "{e}");
}

use gpucbf::engines::common::recv::{open_source_with, open_sources, RecvOptions};

fn ibv(src: &str, interface: Ipv4Addr) -> String {
    ibv_threads(src, interface, 1)
}

/// `--recv-ibv` with `threads` receive threads (one queue pair each).
fn ibv_threads(src: &str, interface: Ipv4Addr, threads: usize) -> String {
    let opts = RecvOptions {
        interface: Some(interface),
        join: &[],
        dpdk: None,
        ibv: true,
        buffer: 0,
        hold: None,
    };
    let r = if threads == 1 {
        open_source_with(src, &opts).map(|_| ())
    } else {
        open_sources(src, &opts, threads).map(|_| ())
    };
    match r {
        Ok(()) => "opened".into(),
        Err(e) => e.to_string(),
    }
}

/// Several `--recv-affinity` cores with `--recv-ibv` open one queue pair per thread (here
/// failing as one does: no RDMA device, or no ibverbs in the build), with the endpoints
/// dealt among them: fewer endpoints than threads is refused by name.
#[test]
fn recv_ibv_takes_one_queue_per_thread() {
    let m = ibv_threads("239.10.0.1+3:7148", Ipv4Addr::UNSPECIFIED, 2);
    if m == "opened" {
        eprintln!("SKIP: this host has an RDMA device");
        return;
    }
    assert!(!m.contains("one receive thread"), "{m}");
    assert!(m.starts_with("--recv-ibv: "), "{m}");
    let m = ibv_threads("239.10.0.1+1:7148", Ipv4Addr::UNSPECIFIED, 3);
    assert!(m.contains("give at most 2 cores"), "{m}");
}

#[cfg(not(feature = "ibverbs"))]
#[test]
fn recv_ibv_without_feature_is_a_clear_error() {
    let m = ibv("239.10.0.1:7148", Ipv4Addr::UNSPECIFIED);
    assert!(m.contains("built without ibverbs"), "{m}");
}

#[cfg(feature = "ibverbs")]
#[test]
fn recv_ibv_without_rdma_hardware_says_so() {
    for iface in [Ipv4Addr::UNSPECIFIED, Ipv4Addr::LOCALHOST] {
        let m = ibv("239.10.0.1+1:7148", iface);
        if m == "opened" {
            eprintln!("SKIP: this host has an RDMA device");
            return;
        }
        assert!(m.starts_with("--recv-ibv: "), "{m}");
        assert!(
            m.contains("no RDMA device") || m.contains("could not load libibverbs"),
            "{m}"
        );
    }
}

#[test]
fn recv_ibv_needs_endpoints_and_excludes_dpdk() {
    let m = ibv("all", Ipv4Addr::UNSPECIFIED);
    assert!(m.contains("not endpoints"), "{m}");
    let both = RecvOptions {
        interface: None,
        join: &[],
        dpdk: Some("--no-huge"),
        ibv: true,
        buffer: 0,
        hold: None,
    };
    let e = open_source_with("239.10.0.1:7148", &both).err().unwrap();
    assert!(e.to_string().contains("alternatives"), "{e}");
}
