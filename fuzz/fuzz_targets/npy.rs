//! The .npy reader (`gpucbf image --vis`, `gpucbf nufft`): any file gives an array whose
//! element count matches its shape, or a clear error; never a panic.
#![no_main]

use gpucbf::npy::read_npy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = gpucbf_fuzz::scratch_file("npy", data);
    if let Ok(a) = read_npy(&path) {
        assert_eq!(a.shape.iter().product::<usize>(), a.data.len());
    }
});
