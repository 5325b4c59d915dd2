//! Raw DPDK bindings (bindgen against Debian's DPDK 22.11). `static inline` functions of
//! the headers are reachable through generated wrappers named `<name>__extern`.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all,
    improper_ctypes,
    unnecessary_transmutes
)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
