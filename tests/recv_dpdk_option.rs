//! `--recv-dpdk` on a binary built without the `dpdk` feature is a clear error, and bad
//! endpoint lists are errors too (no panic).

use std::net::Ipv4Addr;

use gpucbf::fgpu::engine::open_source;

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
