//! `--use-vkgdr` on the engines: the option parses on fgpu and xbgpu, and on the CPU
//! backend (chunks stay in host memory, one log line says why) the engines send exactly
//! what they send without it.

use std::path::{Path, PathBuf};

use clap::Parser;

use super::test_cli::pcap_payloads as payloads;
use super::test_cli::{F, X};
use crate::engines::fgpu::FgpuArgs;
use crate::engines::xbgpu::XbgpuArgs;

fn tmp(name: &str) -> PathBuf {
    super::test_cli::tmp("vkgdr", name)
}

/// An engine's command line: `engine`, the options every run here shares, `own`, `extra`,
/// then the source.
fn line<'a>(engine: &'a str, own: &[&'a str], extra: &[&'a str], src: &'a str) -> Vec<&'a str> {
    let mut a = vec![
        engine,
        "--adc-sample-rate",
        "1712e6",
        "--sync-time",
        "0",
        "--array-size",
        "1",
        "--backend",
        "cpu",
    ];
    a.extend_from_slice(own);
    a.extend_from_slice(extra);
    a.push(src);
    a
}

fn fgpu(extra: &[&str], src: &Path, out: &Path) -> FgpuArgs {
    let (src, out) = (src.to_string_lossy(), out.to_string_lossy());
    let own = [
        "--wideband",
        "name=wb,channels=256,dst=127.0.0.1:7150,jones_per_batch=65536",
        "--dither-seed",
        "3",
        "--recv-chunk-samples",
        "262144",
        "--send-pcap",
        &out,
    ];
    F::try_parse_from(line("fgpu", &own, extra, &src))
        .unwrap()
        .a
}

fn xbgpu(extra: &[&str], src: &Path, out: &Path) -> XbgpuArgs {
    let (src, out) = (src.to_string_lossy(), out.to_string_lossy());
    let own = [
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
        "name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=1",
        "--send-pcap",
        &out,
    ];
    X::try_parse_from(line("xbgpu", &own, extra, &src))
        .unwrap()
        .a
}

/// `--use-vkgdr` parses on both engines (off by default).
#[test]
fn use_vkgdr_parses_on_fgpu_and_xbgpu() {
    let (i, o) = (Path::new("in.pcap"), Path::new("out.pcap"));
    assert!(fgpu(&["--use-vkgdr"], i, o).io.use_vkgdr);
    assert!(!fgpu(&[], i, o).io.use_vkgdr);
    assert!(xbgpu(&["--use-vkgdr"], i, o).io.use_vkgdr);
    assert!(!xbgpu(&[], i, o).io.use_vkgdr);
}

/// dsim → fgpu → xbgpu on the CPU backend, each engine with and without `--use-vkgdr`:
/// the same heaps, byte for byte.
#[test]
fn cpu_backend_with_use_vkgdr_sends_the_same() {
    let dig = tmp("dsim.pcap");
    super::test_cli::dsim_capture(&dig);
    let mut f_out = Vec::new();
    for (k, extra) in [&[][..], &["--use-vkgdr"][..]].iter().enumerate() {
        let out = tmp(&format!("fgpu{k}.pcap"));
        let cfg = fgpu(extra, &dig, &out).validate().unwrap();
        let s = crate::engines::fgpu::run(&cfg).unwrap();
        assert!(s.outputs[0].heaps >= 6, "{s:?}");
        f_out.push((out.clone(), payloads(&out)));
    }
    assert!(!f_out[0].1.is_empty());
    assert!(
        f_out[0].1 == f_out[1].1,
        "fgpu output differs with --use-vkgdr"
    );
    let mut x_out = Vec::new();
    for (k, extra) in [&[][..], &["--use-vkgdr"][..]].iter().enumerate() {
        let out = tmp(&format!("xbgpu{k}.pcap"));
        let cfg = xbgpu(extra, &f_out[0].0, &out).validate().unwrap();
        let s = crate::engines::xbgpu::run(&cfg).unwrap();
        assert!(s.input_heaps >= 5, "{s:?}");
        x_out.push(payloads(&out));
        std::fs::remove_file(&out).ok();
    }
    assert!(!x_out[0].is_empty());
    assert!(
        x_out[0] == x_out[1],
        "xbgpu output differs with --use-vkgdr"
    );
    std::fs::remove_file(&dig).ok();
    for (p, _) in &f_out {
        std::fs::remove_file(p).ok();
    }
}
