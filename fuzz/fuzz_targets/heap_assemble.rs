//! Heap assembly as `gpucbf pcap-info` / `spead-dump` / the imager run it (1 to 64 heaps
//! under assembly, incomplete heaps kept or not: the input's first byte): any packet
//! stream gives heaps and counted drops, the heaps under assembly stay within their byte
//! budget, and every heap's items and descriptors read without a panic.
#![no_main]

use gpucbf::spead::Assembler;
use gpucbf_fuzz::records;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    // Heaps up to 16 MiB, 64 MiB under assembly at once (the tools' 1 GiB and 2 GiB would
    // pass libFuzzer's memory limit; that budget has a unit test).
    let mut asm = Assembler::new([1, 2, 4, 64][(mode & 3) as usize])
        .with_keep_incomplete(mode & 8 != 0)
        .with_max_heap_size(1 << 24)
        .with_max_partial_bytes(1 << 26);
    let mut out = Vec::new();
    let mut pushed = 0u64;
    for pkt in records(data) {
        let _ = asm.push(pkt, &mut out);
        assert!(asm.partial_bytes() <= 1 << 26);
        pushed += 1;
    }
    asm.flush(&mut out);
    assert!(asm.n_partial() == 0);
    for h in &out {
        assert!(h.received <= h.size.max(h.payload.len() as u64));
        for (id, v) in h.items() {
            let _ = (id, v.as_u64());
        }
        let _ = h.descriptors();
        let _ = h.is_stop();
    }
    assert!(asm.stats.total_dropped() <= pushed);
});
