//! Kernel compilation with NVRTC (CUDA C++ to PTX at run time, constants as `-D` defines).
//! NVRTC is loaded on first use; without it every call fails cleanly, no panic.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

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

/// [`compile_ptx`] once per process for each (kernel source, name, defines, arch): later
/// calls get the PTX compiled first. For kernels compiled again and again with the same
/// constants (a plan per call); `src` is `'static` (the embedded kernel sources), so its
/// address names it.
pub fn compile_ptx_cached(
    name: &str,
    src: &'static str,
    defines: &[(&str, String)],
    arch: &'static str,
) -> Result<Ptx, GpuError> {
    type Key = (usize, usize, String, &'static str, String);
    static CACHE: OnceLock<Mutex<HashMap<Key, Ptx>>> = OnceLock::new();
    let key = (
        src.as_ptr() as usize,
        src.len(),
        name.to_string(),
        arch,
        format!("{defines:?}"),
    );
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(p.clone());
    }
    let ptx = compile_ptx(name, src, defines, arch)?;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, ptx.clone());
    Ok(ptx)
}
