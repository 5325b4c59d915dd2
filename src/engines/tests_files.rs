//! The engines' files: captures cut short, inputs that are not files.

use std::path::{Path, PathBuf};

use clap::Parser;

use super::common::recv::open_source;
use crate::engines::dsim::DsimArgs;
use crate::engines::fgpu::FgpuArgs;
use crate::engines::xbgpu::XbgpuArgs;

#[derive(Parser)]
struct F {
    #[command(flatten)]
    a: FgpuArgs,
}

#[derive(Parser)]
struct X {
    #[command(flatten)]
    a: XbgpuArgs,
}

#[derive(Parser)]
struct D {
    #[command(flatten)]
    a: DsimArgs,
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gpucbf-files-{}-{name}", std::process::id()))
}

const C: usize = 256;
const JONES: usize = 65536;

/// `base` (flag, value pairs) without the flags `extra` gives, then `extra`, then `src`.
fn args<'a>(base: &[(&'a str, &'a str)], extra: &[&'a str], src: &'a str) -> Vec<&'a str> {
    let mut v: Vec<&str> = base
        .iter()
        .filter(|(k, _)| !extra.contains(k))
        .flat_map(|&(k, v)| [k, v])
        .filter(|s| !s.is_empty())
        .collect();
    v.extend_from_slice(extra);
    v.push(src);
    v
}

fn fgpu(extra: &[&str], src: &Path) -> FgpuArgs {
    let wb = format!("name=wb,channels={C},dst=127.0.0.1:7150,jones_per_batch={JONES}");
    let base = [
        ("fgpu", ""),
        ("--adc-sample-rate", "1712e6"),
        ("--sync-time", "0"),
        ("--array-size", "1"),
        ("--wideband", &wb),
        ("--backend", "cpu"),
        ("--dither-seed", "3"),
    ];
    let src = src.to_string_lossy();
    F::try_parse_from(args(&base, extra, &src)).unwrap().a
}

fn xbgpu(extra: &[&str], src: &Path) -> XbgpuArgs {
    let (c, sbs, jones) = (C.to_string(), (2 * C).to_string(), JONES.to_string());
    let base = [
        ("xbgpu", ""),
        ("--adc-sample-rate", "1712e6"),
        ("--sync-time", "0"),
        ("--array-size", "1"),
        ("--channels", &c),
        ("--channels-per-substream", &c),
        ("--samples-between-spectra", &sbs),
        ("--jones-per-batch", &jones),
        ("--heaps-per-fengine-per-chunk", "4"),
        ("--send-enabled", ""),
        (
            "--corrprod",
            "name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=1",
        ),
        ("--backend", "cpu"),
    ];
    let src = src.to_string_lossy();
    X::try_parse_from(args(&base, extra, &src)).unwrap().a
}

/// Drops the last `n` bytes of `path` (a record cut by a copy that stopped early).
fn cut_tail(path: &Path, n: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - n).unwrap();
}

/// A capture whose last record is cut: fgpu and xbgpu process the records before it and
/// finish normally (they exited 1 with no output at all).
#[test]
fn engines_process_a_capture_with_a_cut_last_record() {
    let (dig, feng, xout) = (
        tmp("cut-dsim.pcap"),
        tmp("cut-fgpu.pcap"),
        tmp("cut-x.pcap"),
    );
    let d = D::try_parse_from([
        "dsim",
        "--adc-sample-rate",
        "1712e6",
        "--heaps",
        "256",
        "--dither-seed",
        "1",
        "--signals",
        "cw(0.2, 300e6) + wgn(0.05, 1);",
        "--pcap",
        &dig.to_string_lossy(),
        "127.0.0.1:7148",
        "127.0.0.1:7149",
    ])
    .unwrap()
    .a;
    crate::engines::dsim::run(&d.validate().unwrap()).unwrap();
    cut_tail(&dig, 100);
    let feng_s = feng.to_string_lossy();
    let extra = ["--recv-chunk-samples", "262144", "--send-pcap", &feng_s];
    let cfg = fgpu(&extra, &dig).validate().unwrap();
    let f = crate::engines::fgpu::run(&cfg).expect("fgpu reads the good records");
    assert!(f.input_heaps[0] >= 254 && f.input_heaps[1] >= 254, "{f:?}");
    assert!(f.outputs[0].heaps >= 6, "{f:?}");
    cut_tail(&feng, 1000);
    let xout_s = xout.to_string_lossy();
    let cfg = xbgpu(&["--send-pcap", &xout_s], &feng).validate().unwrap();
    let x = crate::engines::xbgpu::run(&cfg).expect("xbgpu reads the good records");
    assert!(x.input_heaps >= 5, "{x:?}");
    for p in [&dig, &feng, &xout] {
        std::fs::remove_file(p).ok();
    }
}

/// A directory given as the input is named as such, not parsed as endpoints.
#[test]
fn a_directory_input_is_named() {
    let dir = std::env::temp_dir();
    let e = open_source(
        &dir.to_string_lossy(),
        std::net::Ipv4Addr::UNSPECIFIED,
        None,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains(&*dir.to_string_lossy()) && e.contains("not a regular file"),
        "{e}"
    );
}
