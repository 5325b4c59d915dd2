//! fgpu's receive: digitiser heaps placed into chunks (`DigitiserPlacement` in the chunk
//! window). The first input byte picks the sample width, heap size, chunk size and window.
#![no_main]

use gpucbf::chunk::placement::DigitiserPlacement;
use gpucbf::chunk::WindowPolicy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    // 10-bit (the ICD's) or 8/12/16-bit samples; 64 to 512 samples per heap (the seeds use
    // 64 10-bit samples: 80-byte heaps) and 1 to 4 heaps per chunk.
    let bits = [10, 8, 12, 16][(mode & 3) as usize];
    let heap_samples = 64u64 << ((mode >> 2) & 3);
    let chunk = heap_samples * (1 + ((mode >> 4) & 3) as u64);
    let Ok(mut p) = DigitiserPlacement::new(heap_samples, bits, chunk) else {
        return;
    };
    if mode & 0x40 != 0 {
        p.timestamp_mask = !0xff;
    }
    let policy = WindowPolicy {
        jump_confirm: 1 + (mode >> 7) as u32 * 3,
        ..WindowPolicy::new(2, 4)
    };
    gpucbf_fuzz::place::run(p, policy, data);
});
