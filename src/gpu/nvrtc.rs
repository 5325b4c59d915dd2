//! Kernel compilation with NVRTC (CUDA C++ to PTX at run time, constants as `-D` defines).
//! NVRTC is loaded on first use; without it every call fails cleanly, no panic.

use cudarc::nvrtc::Ptx;

use super::GpuError;

/// True if NVRTC can be loaded (for compiling kernels without a GPU).
pub fn nvrtc_available() -> bool {
    // SAFETY: only attempts to dlopen libnvrtc.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
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
/// given `-D` defines. Fails cleanly (no panic) when NVRTC is not installed; a rejected
/// kernel's error keeps NVRTC's log ([`GpuError::log`]).
pub fn compile_ptx(
    name: &str,
    src: &str,
    defines: &[(&str, String)],
    arch: &'static str,
) -> Result<Ptx, GpuError> {
    if !nvrtc_available() {
        return Err(GpuError::NvrtcMissing);
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
    cudarc::nvrtc::compile_ptx_with_opts(src, opts).map_err(|source| GpuError::Compile {
        name: name.to_string(),
        arch,
        source,
    })
}
