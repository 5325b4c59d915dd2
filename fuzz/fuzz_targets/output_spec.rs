//! The key=value output specs (`--wideband`, `--narrowband`, `--corrprod`, `--beam`) and
//! endpoint lists (`ADDR[+N]:PORT,...`): any text gives a spec or a `ConfigError`, never a
//! panic; an accepted spec's derived sizes compute.
#![no_main]

use gpucbf::engines::common::cli::parse_kv;
use gpucbf::engines::fgpu::spec::{parse_narrowband, parse_wideband};
use gpucbf::engines::xbgpu::spec::{parse_beam, parse_corrprod};
use gpucbf::net::endpoint::parse_endpoints;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_kv(s, &["dst"]);
    for spec in [parse_wideband(s), parse_narrowband(s)]
        .into_iter()
        .flatten()
    {
        let _ = spec.spectra_per_heap();
        let _ = spec.samples_between_spectra();
        let _ = spec.batch_step();
        let _ = spec.channels_per_substream();
    }
    let _ = parse_corrprod(s);
    let _ = parse_beam(s);
    let _ = parse_endpoints(s);
});
