//! Across the engines: `fgpu` and `xbgpu` take the same shared options
//! ([`super::common::EngineArgs`]), with the same defaults.

use clap::Parser;

use super::common::cli::Interfaces;
use super::common::{Backend, EngineArgs};
use super::test_cli::{F, X};

/// `fgpu` and `xbgpu` both take the options of [`EngineArgs`], with their defaults.
#[test]
fn engine_args_carry_the_shared_options() {
    let common = ["--adc-sample-rate", "1712e6", "--sync-time", "0"];
    let shared = [
        "--send-ttl",
        "7",
        "--recv-ibv",
        "--send-pcap",
        "o.pcap",
        "--backend",
        "cpu",
        "--prometheus-port",
        "9100",
        "--prometheus-host",
        "127.0.0.3",
        "--recv-interface",
        "10.0.0.1",
        "--send-affinity",
        "-1",
        "--send-buffer",
        "4194304",
    ];
    let xb = [
        "--array-size",
        "4",
        "--channels",
        "1024",
        "--channels-per-substream",
        "256",
        "--samples-between-spectra",
        "2048",
    ];
    let f = F::try_parse_from(
        ["fgpu"]
            .iter()
            .chain(&common)
            .chain(&shared)
            .chain(&["x.pcap"]),
    )
    .unwrap()
    .a;
    let x = X::try_parse_from(
        ["xbgpu"]
            .iter()
            .chain(&common)
            .chain(&xb)
            .chain(&shared)
            .chain(&["x.pcap"]),
    )
    .unwrap()
    .a;
    let want = EngineArgs {
        recv_interface: Interfaces(vec![std::net::Ipv4Addr::new(10, 0, 0, 1)]),
        recv_dpdk: None,
        recv_ibv: true,
        use_peerdirect: false,
        use_vkgdr: false,
        send_interface: Interfaces::any(),
        send_ibv: false,
        send_comp_vector: 0,
        recv_comp_vector: "0".into(),
        monitor_log: None,
        send_ttl: 7,
        send_packet_payload: 8192,
        send_pcap: Some(std::path::PathBuf::from("o.pcap")),
        recv_reorder_tol: 1 << 29,
        recv_affinity: None,
        recv_buffer: 128 << 20,
        recv_hold_us: 100,
        recv_chunks: 2,
        recv_prealloc: 0,
        send_affinity: "-1".into(),
        send_buffer: 4 << 20,
        backend: Backend::Cpu,
        prometheus_port: Some(9100),
        prometheus_host: Some(std::net::Ipv4Addr::new(127, 0, 0, 3)),
    };
    assert_eq!(f.io, want);
    assert_eq!(x.io, want);
    assert_eq!((f.src.as_str(), x.src.as_str()), ("x.pcap", "x.pcap"));
}

/// `--send-affinity` takes -1 (one unpinned send thread), a core or a list of cores (one
/// send thread each); anything else, and `--send-buffer 0`, is refused by name.
#[test]
fn send_affinity_takes_a_core_list_and_refuses_bad_values() {
    let cores = |extra: &[&str]| {
        let base = ["fgpu", "--adc-sample-rate", "1712e6", "--sync-time", "0"];
        F::try_parse_from(base.iter().chain(extra).chain(&["x.pcap"]))
            .unwrap()
            .a
            .io
            .send_cores()
    };
    assert_eq!(cores(&[]).unwrap(), vec![None]);
    assert_eq!(cores(&["--send-affinity", "-1"]).unwrap(), vec![None]);
    assert_eq!(cores(&["--send-affinity", "0"]).unwrap(), vec![Some(0)]);
    assert_eq!(
        cores(&["--send-affinity", "0,0"]).unwrap(),
        vec![Some(0), Some(0)]
    );
    for bad in ["x", "-2", "", "0,", "100000"] {
        let e = cores(&["--send-affinity", bad]).unwrap_err().to_string();
        assert!(e.contains("--send-affinity"), "{bad}: {e}");
    }
    let e = cores(&["--send-buffer", "0"]).unwrap_err().to_string();
    assert!(e.contains("--send-buffer"), "{e}");
}
