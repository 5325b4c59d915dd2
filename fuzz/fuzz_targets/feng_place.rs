//! xbgpu's receive: F-engine heaps placed into chunks (`FengPlacement` in the chunk
//! window). The first input byte picks antennas, heap shape, batches per chunk and whether
//! the `frequency` item is checked.
#![no_main]

use gpucbf::chunk::placement::FengPlacement;
use gpucbf::chunk::WindowPolicy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    // The seeds: 4 antennas, 4 channels × 4 spectra of 8-bit complex pairs (64-byte heaps),
    // 256 samples between spectra, 2 batches per chunk, frequency 0 checked.
    let p = FengPlacement {
        n_ants: [1, 2, 4, 6][(mode & 3) as usize],
        channels_per_substream: 4,
        spectra_per_heap: 4 << ((mode >> 2) & 1),
        sample_bits: [8, 4][((mode >> 3) & 1) as usize],
        samples_between_spectra: 256,
        batches_per_chunk: 1 + ((mode >> 4) & 3) as usize,
        frequency: if mode & 0x40 == 0 { Some(0) } else { None },
    };
    let policy = WindowPolicy {
        jump_confirm: 1 + (mode >> 7) as u32 * 3,
        ..WindowPolicy::new(2, 4)
    };
    gpucbf_fuzz::place::run(p, policy, data);
});
