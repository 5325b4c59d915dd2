//! Test guards: a GPU or NVRTC test runs where the device or library is present, skips with a
//! printed notice where it is not, and fails where CI or the GPU machine says it must run
//! (`GPUCBF_REQUIRE_GPU=1`, `GPUCBF_REQUIRE_NVRTC=1`).

use super::{gpu_available, nvrtc_available};

/// For tests: whether GPU tests must run (`GPUCBF_REQUIRE_GPU=1`) or may skip.
/// Returns true if the GPU test should run; prints a notice and returns false to skip;
/// panics if a GPU is required but absent.
pub fn gpu_test_guard(test: &str) -> bool {
    if gpu_available() {
        return true;
    }
    if std::env::var("GPUCBF_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("{test}: GPUCBF_REQUIRE_GPU=1 but no usable GPU was found");
    }
    eprintln!("SKIPPED {test}: no GPU present");
    false
}

/// For kernel-compilation tests: true if NVRTC is present; otherwise prints a notice and
/// returns false, or panics when `GPUCBF_REQUIRE_NVRTC=1` (CI installs NVRTC and sets it).
pub fn nvrtc_test_guard(test: &str) -> bool {
    if nvrtc_available() {
        return true;
    }
    if std::env::var("GPUCBF_REQUIRE_NVRTC").as_deref() == Ok("1") {
        panic!(
            "{test}: GPUCBF_REQUIRE_NVRTC=1 but libnvrtc could not be loaded (LD_LIBRARY_PATH?)"
        );
    }
    eprintln!("SKIPPED {test}: NVRTC not available");
    false
}
