//! The pcap readers (the engines' mapped file source and the pcap-file based reader of
//! the tools): any file gives datagrams, counted skips, or a clear error; never a panic.
//! Both readers agree on the datagrams of a file they both accept.
#![no_main]

use gpucbf::net::recv::pcap::{MappedPcap, PcapSource};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = gpucbf_fuzz::scratch_file("pcap", data);
    let mut mapped = Vec::new();
    let mapped_ok = match MappedPcap::open(&path) {
        Ok(mut m) => loop {
            match m.next_payload(|dst, p| (dst, p.to_vec())) {
                Ok(Some(d)) => mapped.push(d),
                Ok(None) => break true,
                Err(_) => break false,
            }
        },
        Err(_) => false,
    };
    let mut read = Vec::new();
    let read_ok = match PcapSource::open(&path) {
        Ok(mut s) => loop {
            match s.next_datagram() {
                Ok(Some(d)) => read.push((d.dst, d.payload)),
                Ok(None) => break true,
                Err(_) => break false,
            }
        },
        Err(_) => false,
    };
    if mapped_ok && read_ok {
        assert_eq!(mapped, read, "the two readers disagree");
    }
});
