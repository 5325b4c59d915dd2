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

/// Directories NVRTC should search for CUDA headers: `$GPUCBF_CUDA_INCLUDE` (colon list),
/// `$CUDA_HOME/include`, `/usr/local/cuda/include`, each with its `cccl/` subdirectory.
pub fn cuda_include_dirs() -> Vec<String> {
    let mut cands: Vec<std::path::PathBuf> = Vec::new();
    if let Ok(v) = std::env::var("GPUCBF_CUDA_INCLUDE") {
        cands.extend(v.split(':').filter(|s| !s.is_empty()).map(Into::into));
    }
    if let Ok(h) = std::env::var("CUDA_HOME") {
        cands.push(std::path::Path::new(&h).join("include"));
    }
    cands.push("/usr/local/cuda/include".into());
    let mut out = Vec::new();
    for c in cands {
        if c.is_dir() {
            let cccl = c.join("cccl");
            out.push(c.to_string_lossy().into_owned());
            if cccl.is_dir() {
                out.push(cccl.to_string_lossy().into_owned());
            }
        }
    }
    out.dedup();
    out
}

/// Compiles CUDA C++ `src` to PTX with NVRTC for `arch` (e.g. `"compute_90"`), with the
/// given `-D` defines. Fails cleanly (no panic) when NVRTC is not installed.
pub fn compile_ptx(
    name: &str,
    src: &str,
    defines: &[(&str, String)],
    arch: &'static str,
) -> Result<cudarc::nvrtc::Ptx, String> {
    if !nvrtc_available() {
        return Err("NVRTC (libnvrtc.so.13) is not available: install the CUDA 13 toolkit or the nvidia-cuda-nvrtc wheel and put its lib dir on LD_LIBRARY_PATH".into());
    }
    let mut options: Vec<String> = defines.iter().map(|(k, v)| format!("-D{k}={v}")).collect();
    options.push("-std=c++17".into());
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        include_paths: cuda_include_dirs(),
        options,
        name: Some(name.to_string()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(src, opts)
        .map_err(|e| format!("NVRTC failed to compile {name} for {arch}: {e:?}"))
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

/// Seconds per call of `f` over `reps` calls (after one warm-up call), timed with CUDA
/// events on `stream`; `err` maps driver errors into the caller's error type.
pub fn time_on_stream<E>(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    reps: usize,
    mut f: impl FnMut() -> Result<(), E>,
    err: impl Fn(cudarc::driver::DriverError) -> E,
) -> Result<f64, E> {
    use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
    f()?;
    let start = stream.record_event(Some(CU_EVENT_DEFAULT)).map_err(&err)?;
    for _ in 0..reps {
        f()?;
    }
    let end = stream.record_event(Some(CU_EVENT_DEFAULT)).map_err(&err)?;
    let ms = start.elapsed_ms(&end).map_err(&err)?;
    Ok(ms as f64 * 1e-3 / reps.max(1) as f64)
}
