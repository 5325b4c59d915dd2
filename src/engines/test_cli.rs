//! What the engines' tests share: the command-line wrappers they parse engine options with,
//! and scratch paths unique to this process.

use std::path::{Path, PathBuf};

use clap::Parser;

/// `gpucbf fgpu`'s options.
#[derive(Parser)]
pub(crate) struct F {
    #[command(flatten)]
    pub(crate) a: super::fgpu::FgpuArgs,
}

/// `gpucbf xbgpu`'s options.
#[derive(Parser)]
pub(crate) struct X {
    #[command(flatten)]
    pub(crate) a: super::xbgpu::XbgpuArgs,
}

/// `gpucbf dsim`'s options.
#[derive(Parser)]
pub(crate) struct D {
    #[command(flatten)]
    pub(crate) a: super::dsim::DsimArgs,
}

/// A scratch path `name` of the test group `group`, unique to this process.
pub(crate) fn tmp(group: &str, name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gpucbf-{group}-{}-{name}", std::process::id()))
}

/// Writes 256 heaps per pol of dsim's digitiser streams (a tone and noise, dither seed 1,
/// to 127.0.0.1:7148 and :7149) to the pcap file `path`.
pub(crate) fn dsim_capture(path: &Path) {
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
        &path.to_string_lossy(),
        "127.0.0.1:7148",
        "127.0.0.1:7149",
    ])
    .unwrap()
    .a;
    super::dsim::run(&d.validate().unwrap()).unwrap();
}
