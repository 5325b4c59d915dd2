//! GPU discovery. cudarc panics when the CUDA libraries are absent, so everything here
//! probes first and reports absence as `None`.

/// True if the CUDA driver library can be loaded and at least one device exists.
pub fn gpu_available() -> bool {
    // SAFETY: is_culib_present only attempts to dlopen the driver library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return false;
    }
    std::panic::catch_unwind(|| cudarc::driver::CudaContext::device_count().unwrap_or(0) > 0)
        .unwrap_or(false)
}

/// True if NVRTC can be loaded (for compiling kernels without a GPU).
pub fn nvrtc_available() -> bool {
    // SAFETY: only attempts to dlopen libnvrtc.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

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
