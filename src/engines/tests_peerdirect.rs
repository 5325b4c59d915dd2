//! `--use-peerdirect` on fgpu where GPU-memory items cannot be had (this machine: no RDMA
//! NIC, maybe no GPU; or packets to a pcap file): the engine starts, logs the fallback once,
//! and sends exactly what it sends without the option, to a pcap file and over UDP.

use std::path::Path;

use clap::Parser;

use super::test_cli::{backends, logged, pcap_payloads, peerdirect_lines, UdpCapture, F};
use crate::engines::fgpu::FgpuArgs;

fn tmp(name: &str) -> std::path::PathBuf {
    super::test_cli::tmp("peerdirect", name)
}

/// fgpu's command line on `backend` from `src` with `out` options and `extra`.
fn fgpu(backend: &str, dst: &str, out: &[&str], extra: &[&str], src: &Path) -> FgpuArgs {
    let wb = format!("name=wb,channels=256,dst={dst},jones_per_batch=65536");
    let mut a = vec![
        "fgpu",
        "--adc-sample-rate",
        "1712e6",
        "--sync-time",
        "0",
        "--array-size",
        "1",
        "--backend",
        backend,
        "--wideband",
        &wb,
        "--dither-seed",
        "3",
        "--recv-chunk-samples",
        "262144",
        "--katcp-port",
        "0",
    ];
    a.extend_from_slice(out);
    a.extend_from_slice(extra);
    let src = src.to_string_lossy();
    a.push(&src);
    F::try_parse_from(a).unwrap().a
}

/// Runs the engine with `args`, returning what it logged on this thread.
fn run_logged(args: FgpuArgs) -> String {
    let cfg = args.validate().unwrap();
    let (s, log) = logged(|| crate::engines::fgpu::run(&cfg));
    let s = s.unwrap();
    assert!(s.outputs[0].heaps >= 6, "{s:?}");
    log
}

/// The UDP payloads of a capture, in order.
fn payloads(path: &Path) -> Vec<Vec<u8>> {
    pcap_payloads(path).into_iter().map(|(_, p)| p).collect()
}

/// To a pcap file: `--use-peerdirect` falls back (one line, naming --send-pcap) and the
/// capture is byte-identical to the one without it.
#[test]
fn use_peerdirect_to_pcap_falls_back_and_sends_the_same() {
    let dig = tmp("dsim.pcap");
    super::test_cli::dsim_capture(&dig);
    for backend in backends() {
        let mut caps = Vec::new();
        for (k, extra) in [&[][..], &["--use-peerdirect"][..]].iter().enumerate() {
            let out = tmp(&format!("f-{backend}-{k}.pcap"));
            let o = out.to_string_lossy().to_string();
            let log = run_logged(fgpu(
                backend,
                "127.0.0.1:7150",
                &["--send-pcap", &o],
                extra,
                &dig,
            ));
            if k == 0 {
                assert_eq!(peerdirect_lines(&log), 0, "{log}");
            } else {
                assert_eq!(peerdirect_lines(&log), 1, "{backend}: {log}");
                assert!(
                    log.contains("--send-pcap writes the packets to a file"),
                    "{log}"
                );
                assert!(log.contains("falling back to staging"), "{log}");
            }
            caps.push(payloads(&out));
            std::fs::remove_file(&out).ok();
        }
        assert!(caps[0].len() > 6, "{backend}");
        assert!(
            caps[0] == caps[1],
            "{backend}: the output differs with --use-peerdirect"
        );
    }
    std::fs::remove_file(&dig).ok();
}

/// Over UDP from the loopback interface (no RDMA NIC behind it): `--use-peerdirect` looks
/// for the NIC (with the GPU backend) or knows the CPU backend rules GPU items out, logs one
/// fallback line, and the datagrams are those of the run without it.
#[test]
fn use_peerdirect_over_udp_without_a_nic_falls_back_and_sends_the_same() {
    let dig = tmp("dsim-udp.pcap");
    super::test_cli::dsim_capture(&dig);
    // A reader keeps the socket drained while the engine sends.
    let cap = UdpCapture::new();
    let dst = cap.dst.clone();
    for backend in backends() {
        let mut runs = Vec::new();
        for extra in [&[][..], &["--use-peerdirect"][..]] {
            let out = [
                "--send-interface",
                "127.0.0.1",
                "--send-rate-factor",
                "0.02",
            ];
            let log = run_logged(fgpu(backend, &dst, &out, extra, &dig));
            assert_eq!(peerdirect_lines(&log), extra.len(), "{backend}: {log}");
            if !extra.is_empty() {
                assert!(log.contains("falling back to staging"), "{log}");
                if backend == "cpu" {
                    assert!(log.contains("the CPU backend computes"), "{log}");
                }
            }
            runs.push(cap.drain());
        }
        // Datagrams the engine sent (a stray lost one would show as a count mismatch).
        assert!(runs[0].len() > 6, "{backend}: {}", runs[0].len());
        assert_eq!(runs[0].len(), runs[1].len(), "{backend}");
        assert!(
            runs[0] == runs[1],
            "{backend}: datagrams differ with --use-peerdirect"
        );
    }
    drop(cap);
    std::fs::remove_file(&dig).ok();
}
