//! `--use-peerdirect` on xbgpu where GPU-memory items cannot be had (this machine: no RDMA
//! NIC, maybe no GPU; the CPU backend; `--debug-permute-baselines`; packets to a pcap
//! file): the engine starts, logs the fallback once with the reason, and sends exactly what
//! it sends without the option, to a pcap file and over UDP.

use std::path::{Path, PathBuf};

use clap::Parser;

pub(super) use super::test_cli::pcap_payloads as payloads;
use super::test_cli::{backends, logged, peerdirect_lines, UdpCapture, F, X};
use crate::engines::xbgpu::XbgpuArgs;

pub(super) fn tmp(name: &str) -> PathBuf {
    super::test_cli::tmp("peerdirect-x", name)
}

/// dsim's capture through fgpu (CPU backend, 256 channels) into the pcap file `out`.
pub(super) fn feng_capture(out: &Path) {
    let dig = tmp("dsim.pcap");
    super::test_cli::dsim_capture(&dig);
    let o = out.to_string_lossy().to_string();
    let d = dig.to_string_lossy().to_string();
    let a = F::try_parse_from([
        "fgpu",
        "--adc-sample-rate",
        "1712e6",
        "--sync-time",
        "0",
        "--array-size",
        "1",
        "--backend",
        "cpu",
        "--wideband",
        "name=wb,channels=256,dst=127.0.0.1:7150,jones_per_batch=65536",
        "--dither-seed",
        "3",
        "--recv-chunk-samples",
        "262144",
        "--send-pcap",
        &o,
        &d,
    ])
    .unwrap()
    .a;
    let s = crate::engines::fgpu::run(&a.validate().unwrap()).unwrap();
    assert!(s.outputs[0].heaps >= 6, "{s:?}");
    std::fs::remove_file(&dig).ok();
}

/// xbgpu's command line on `backend` with its correlation output to `dst`, `out` options
/// and `extra`, from the F-engine capture `src`.
pub(super) fn xbgpu(
    backend: &str,
    dst: &str,
    out: &[&str],
    extra: &[&str],
    src: &Path,
) -> XbgpuArgs {
    let corrprod = format!("name=bc,dst={dst},heap_accumulation_threshold=1");
    let mut a = vec![
        "xbgpu",
        "--adc-sample-rate",
        "1712e6",
        "--sync-time",
        "0",
        "--array-size",
        "1",
        "--backend",
        backend,
        "--channels",
        "256",
        "--channels-per-substream",
        "256",
        "--samples-between-spectra",
        "512",
        "--jones-per-batch",
        "65536",
        "--heaps-per-fengine-per-chunk",
        "4",
        "--send-enabled",
        "--corrprod",
        &corrprod,
    ];
    a.extend_from_slice(out);
    a.extend_from_slice(extra);
    let src = src.to_string_lossy();
    a.push(&src);
    X::try_parse_from(a).unwrap().a
}

/// Runs the engine with `args`, returning what it logged on this thread.
fn run_logged(args: XbgpuArgs) -> String {
    let cfg = args.validate().unwrap();
    let (s, log) = logged(|| crate::engines::xbgpu::run(&cfg));
    let s = s.unwrap();
    assert!(s.corrprods[0].heaps >= 4, "{s:?}");
    log
}

/// To a pcap file: `--use-peerdirect` falls back (one line, naming --send-pcap) and the
/// capture is byte-identical to the one without it.
#[test]
fn xbgpu_use_peerdirect_to_pcap_falls_back_and_sends_the_same() {
    let f = tmp("f.pcap");
    feng_capture(&f);
    for backend in backends() {
        let mut caps = Vec::new();
        for (k, extra) in [&[][..], &["--use-peerdirect"][..]].iter().enumerate() {
            let out = tmp(&format!("x-{backend}-{k}.pcap"));
            let o = out.to_string_lossy().to_string();
            let log = run_logged(xbgpu(
                backend,
                "127.0.0.1:7160",
                &["--send-pcap", &o],
                extra,
                &f,
            ));
            if k == 0 {
                assert_eq!(peerdirect_lines(&log), 0, "{log}");
            } else {
                assert_eq!(peerdirect_lines(&log), 1, "{backend}: {log}");
                assert!(log.contains("xbgpu --use-peerdirect"), "{log}");
                assert!(
                    log.contains("--send-pcap writes the packets to a file"),
                    "{log}"
                );
                assert!(log.contains("falling back to staging"), "{log}");
            }
            caps.push(payloads(&out));
            std::fs::remove_file(&out).ok();
        }
        assert!(caps[0].len() > 4, "{backend}");
        assert!(
            caps[0] == caps[1],
            "{backend}: the output differs with --use-peerdirect"
        );
    }
    std::fs::remove_file(&f).ok();
}

/// Over UDP from the loopback interface (no RDMA NIC behind it): `--use-peerdirect` looks
/// for the NIC (GPU backend) or knows the CPU backend or `--debug-permute-baselines` rules
/// GPU items out, logs one fallback line with the reason, and the datagrams are those of the
/// run without it. Three set-ups: the dumps alone; the dumps with their baselines permuted;
/// and with a beam too (permuted, which keeps only the dumps staged), where the GPU backend
/// tries device items for the beams.
#[test]
fn xbgpu_use_peerdirect_over_udp_without_a_nic_falls_back_and_sends_the_same() {
    let f = tmp("f-udp.pcap");
    feng_capture(&f);
    // A reader keeps the socket drained while the engine sends.
    let cap = UdpCapture::new();
    let dst = cap.dst.clone();
    let out = ["--send-interface", "127.0.0.1"];
    let permute = ["--debug-permute-baselines", "0,0"];
    // Undithered: the dither seed is drawn per run.
    let beam = format!("name=b0,dst={dst},pol=0,dither=none");
    let beams = ["--beam", &beam, "--debug-permute-baselines", "0,0"];
    // (options, the reason every backend logs, beams sent)
    let cases: [(&[&str], Option<&str>, bool); 3] = [
        (&[], None, false),
        (&permute, Some("--debug-permute-baselines swaps"), false),
        (&beams, None, true),
    ];
    for backend in backends() {
        for &(base, reason, with_beams) in &cases {
            let mut runs = Vec::new();
            for pd in [false, true] {
                let mut extra = base.to_vec();
                if pd {
                    extra.push("--use-peerdirect");
                }
                let log = run_logged(xbgpu(backend, &dst, &out, &extra, &f));
                assert_eq!(peerdirect_lines(&log), usize::from(pd), "{backend}: {log}");
                if pd {
                    assert!(log.contains("falling back to staging"), "{log}");
                    if let Some(r) = reason {
                        assert!(log.contains(r), "{log}");
                    } else if backend == "cpu" {
                        assert!(log.contains("the CPU backend computes"), "{log}");
                    }
                }
                let mut got = cap.drain();
                if with_beams {
                    // The beams leave from their own send thread: their datagrams
                    // interleave with the dumps' as it happens, so the runs are compared
                    // sorted.
                    got.sort();
                }
                runs.push(got);
            }
            // Datagrams the engine sent (a stray lost one would show as a count mismatch);
            // with beams, one dump per batch and a beam heap per batch: more than the dumps
            // alone.
            let least = if with_beams { 8 } else { 4 };
            assert!(runs[0].len() > least, "{backend}: {}", runs[0].len());
            assert_eq!(runs[0].len(), runs[1].len(), "{backend}");
            assert!(
                runs[0] == runs[1],
                "{backend} {base:?}: datagrams differ with --use-peerdirect"
            );
        }
    }
    drop(cap);
    std::fs::remove_file(&f).ok();
}
