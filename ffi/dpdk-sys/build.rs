//! Generates DPDK bindings against the system's libdpdk (pkg-config) and compiles the
//! static-inline wrappers (rte_eth_rx_burst, rte_pktmbuf_free, ...) into a small C shim.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build.rs");
    let lib = pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
        .expect("libdpdk not found by pkg-config: apt-get install libdpdk-dev pkg-config");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let includes: Vec<String> = lib
        .include_paths
        .iter()
        .map(|p| format!("-I{}", p.display()))
        .collect();
    let static_fns = out.join("static_fns");
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_args(&includes)
        .clang_args(["-include", "rte_config.h", "-march=corei7"])
        .allowlist_function("rte_.*")
        .allowlist_type("rte_.*")
        .allowlist_var("RTE_.*")
        // The three fixes for DPDK 22.11 (deps.md §4): no Debug derive, and packed
        // protocol headers that would otherwise contain #[repr(align)] types.
        .derive_debug(false)
        .opaque_type("rte_l2tpv2_.*")
        .opaque_type("rte_gtp_.*")
        .wrap_static_fns(true)
        .wrap_static_fns_path(&static_fns)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen failed on DPDK headers");
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings");
    let mut build = cc::Build::new();
    build
        .file(static_fns.with_extension("c"))
        .include(env!("CARGO_MANIFEST_DIR"))
        .flag("-include")
        .flag("rte_config.h")
        .flag("-march=corei7")
        .flag("-Wno-deprecated-declarations")
        .warnings(false);
    for p in &lib.include_paths {
        build.include(p);
    }
    build.compile("dpdk_static_fns");
}
