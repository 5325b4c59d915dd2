//! The SPEAD packet decoder: any bytes give a packet view or a drop reason, never a panic;
//! what it parses re-reads the same, and any item's descriptor decodes or fails cleanly.
#![no_main]

use gpucbf::spead::{Descriptor, ItemPointer, PacketView};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = PacketView::parse(data) {
        assert!(p.payload.len() as u64 == p.payload_length);
        let n = p.all_pointers().count();
        assert_eq!(n, p.n_pointers());
        for it in p.items() {
            assert_eq!(ItemPointer::from_raw(it.to_raw()), it);
            let _ = p.immediate(it.id);
        }
    }
    let _ = Descriptor::decode(data);
});
