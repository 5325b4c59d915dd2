//! Tuning of the DDC kernel (`kernels/fengine/ddc.cu`): the work-group size (`WGS`) and outputs per
//! thread (`UNROLL`) are NVRTC defines. [`autotune`] times every candidate that fits in
//! shared memory on a synthetic input and keeps the fastest; results are cached per GPU name,
//! architecture and kernel configuration in a small text file under
//! `$XDG_CACHE_HOME/gpucbf/` (or `~/.cache/gpucbf/`). The cache is best effort: a missing,
//! unreadable or unwritable file only means tuning again.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

use crate::compute::fengine::FError;
use crate::gpu::GpuError;

/// DDC kernel source.
pub const DDC_SRC: &str = crate::kernel_source!("fengine/ddc.cu");

/// Work-group size and outputs per thread of the DDC kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdcTuning {
    /// Threads per work group (`WGS`).
    pub wgs: u32,
    /// Outputs per thread (`UNROLL`).
    pub unroll: u32,
}

/// Shared memory the kernel's static arrays take (mirrors the layout in `ddc.cu`).
pub(crate) fn ddc_smem_bytes(s: usize, w: usize, t: DdcTuning) -> usize {
    let u = t.unroll as usize;
    let group = t.wgs as usize * u;
    let nn = group + w - 1;
    let padn = |n: usize| if u.is_multiple_of(2) { n + n / u } else { n };
    let row = padn(nn - 1) + 1;
    s * row * 4 + w * s * 8
}

const SMEM_LIMIT: usize = 48 * 1024;

/// Candidates tried by the tuner that fit the shared-memory limit (may be empty when the
/// filter is too long for the kernel).
pub(crate) fn candidates(s: usize, w: usize) -> Vec<DdcTuning> {
    let mut v = vec![];
    for wgs in [32u32, 64, 128, 256] {
        for unroll in [4u32, 8, 16] {
            let t = DdcTuning { wgs, unroll };
            if ddc_smem_bytes(s, w, t) <= SMEM_LIMIT {
                v.push(t);
            }
        }
    }
    // Large subsampling factors: fewer outputs per thread are the last resort.
    for unroll in [2u32, 1] {
        let t = DdcTuning { wgs: 32, unroll };
        if v.is_empty() && ddc_smem_bytes(s, w, t) <= SMEM_LIMIT {
            v.push(t);
        }
    }
    v
}

/// Whether `t` is a shape the kernel accepts for (s, w): a whole number of warps up to 1024
/// threads, 1..=16 outputs per thread, within the shared-memory limit.
pub(crate) fn valid_tuning(s: usize, w: usize, t: DdcTuning) -> bool {
    t.wgs >= 32
        && t.wgs <= 1024
        && t.wgs.is_multiple_of(32)
        && (1..=16).contains(&t.unroll)
        && ddc_smem_bytes(s, w, t) <= SMEM_LIMIT
}

/// NVRTC defines of the DDC kernel: subsampling `s`, `w` taps per phase, `in_bits` (0 for
/// little-endian int16, else the packed width).
pub(crate) fn ddc_defines(
    s: usize,
    w: usize,
    in_bits: u32,
    t: DdcTuning,
) -> Vec<(&'static str, String)> {
    vec![
        ("S", s.to_string()),
        ("W", w.to_string()),
        ("IN_BITS", in_bits.to_string()),
        ("WGS", t.wgs.to_string()),
        ("UNROLL", t.unroll.to_string()),
    ]
}

/// `$XDG_CACHE_HOME/gpucbf/ddc-tuning.txt`, else `$HOME/.cache/gpucbf/ddc-tuning.txt`.
pub(crate) fn default_cache_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    Some(base.join("gpucbf").join("ddc-tuning.txt"))
}

/// Cache key: GPU name, architecture and the kernel's shape (`v1`: the kernel revision).
pub(crate) fn cache_key(gpu: &str, arch: &str, s: usize, w: usize, in_bits: u32) -> String {
    let gpu: String = gpu
        .chars()
        .map(|c| if c == '\t' || c == '\n' { ' ' } else { c })
        .collect();
    format!("ddc-v1|{gpu}|{arch}|S={s}|W={w}|bits={in_bits}")
}

/// The last cached tuning for `key` (lines `key\twgs\tunroll`); malformed lines are skipped.
pub(crate) fn cache_lookup(path: &Path, key: &str) -> Option<DdcTuning> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let (k, a, b) = (f.next()?, f.next()?, f.next()?);
            if k != key || f.next().is_some() {
                return None;
            }
            Some(DdcTuning {
                wgs: a.parse().ok()?,
                unroll: b.parse().ok()?,
            })
        })
        .next_back()
}

/// Appends `key → t` to the cache file, creating its directory.
pub(crate) fn cache_store(path: &Path, key: &str, t: DdcTuning) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    // One write per line so that concurrent tuners append whole lines.
    f.write_all(format!("{key}\t{}\t{}\n", t.wgs, t.unroll).as_bytes())
}

/// Compiles and loads the DDC kernel for one tuning.
pub(crate) fn load_ddc(
    ctx: &Arc<CudaContext>,
    arch: &'static str,
    s: usize,
    w: usize,
    in_bits: u32,
    t: DdcTuning,
) -> Result<CudaFunction, FError> {
    let ptx = crate::gpu::compile_ptx("ddc.cu", DDC_SRC, &ddc_defines(s, w, in_bits, t), arch)?;
    ctx.load_module(ptx)?
        .load_function("ddc")
        .map_err(FError::from)
}

/// Arguments of one DDC launch (both pols share the weights and the phase step).
pub(crate) struct DdcLaunch<'a> {
    pub input: &'a cudarc::driver::CudaSlice<u8>,
    pub in_stride: i64,
    pub pol0: i32,
    pub npol: u32,
    pub first: [i64; 2],
    pub nvalid: [i64; 2],
    pub z: &'a cudarc::driver::CudaSlice<f32>,
    pub out: &'a mut cudarc::driver::CudaSlice<cudarc::cufft::sys::float2>,
    pub out_stride: i64,
    pub n_out: i64,
    pub bias: [u64; 2],
    pub scale: u64,
}

/// Queues one DDC launch of `f` (compiled with tuning `t`) on `stream`.
pub(crate) fn launch_ddc(
    stream: &Arc<CudaStream>,
    f: &CudaFunction,
    t: DdcTuning,
    a: DdcLaunch,
) -> Result<(), FError> {
    let group = (t.wgs * t.unroll) as i64;
    let blocks = (a.n_out + group - 1) / group;
    if blocks > i32::MAX as i64 || a.n_out <= 0 {
        return Err(FError::BadParameter {
            what: "spectra",
            why: format!("{} DDC outputs per block is out of range", a.n_out),
        });
    }
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, a.npol, 1),
        block_dim: (t.wgs, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = stream.launch_builder(f);
    b.arg(a.input)
        .arg(&a.in_stride)
        .arg(&a.pol0)
        .arg(&a.first[0])
        .arg(&a.first[1])
        .arg(&a.nvalid[0])
        .arg(&a.nvalid[1])
        .arg(a.z)
        .arg(a.out)
        .arg(&a.out_stride)
        .arg(&a.n_out)
        .arg(&a.bias[0])
        .arg(&a.bias[1])
        .arg(&a.scale);
    // SAFETY: argument types and order match `ddc` in kernels/fengine/ddc.cu. The caller guarantees
    // that each launched pol's input holds nvalid samples from byte p·in_stride plus ≥ 64
    // padding bytes, z holds 2·W·S floats and out holds n_out values at p·out_stride.
    unsafe { b.launch(cfg) }?;
    Ok(())
}

/// Picks the fastest candidate for (s, w, in_bits) on the GPU of `stream`: cached result if
/// `cache` has one for this GPU, else times every candidate (5 launches each on 2^21
/// outputs of one pol of synthetic input) and stores the winner.
pub(crate) fn autotune(
    stream: &Arc<CudaStream>,
    arch: &'static str,
    s: usize,
    w: usize,
    in_bits: u32,
    cache: Option<&Path>,
) -> Result<DdcTuning, FError> {
    let ctx = stream.context().clone();
    let name = ctx.name()?;
    let key = cache_key(&name, arch, s, w, in_bits);
    if let Some(t) = cache.and_then(|p| cache_lookup(p, &key)) {
        if valid_tuning(s, w, t) {
            return Ok(t);
        }
    }
    let cands = candidates(s, w);
    if cands.is_empty() {
        return Err(FError::BadParameter {
            what: "ddc_taps",
            why: format!("{w} taps per phase at subsampling {s} do not fit the GPU DDC kernel"),
        });
    }
    let n_out: usize = 1 << 21;
    let n_in = n_out * s + w * s;
    let bits = if in_bits == 0 { 16 } else { in_bits as usize };
    let bytes = (n_in * bits).div_ceil(8).next_multiple_of(4) + 128;
    // Pseudo-random bytes: any bit pattern is a valid packed sample stream.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let host: Vec<u8> = (0..bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let input = stream.clone_htod(&host)?;
    let z = stream.clone_htod(&vec![0.01f32; 2 * w * s])?;
    let mut out = stream.alloc_zeros(n_out)?;
    let mut best: Option<(f64, DdcTuning)> = None;
    for t in cands {
        let Ok(f) = load_ddc(&ctx, arch, s, w, in_bits, t) else {
            continue;
        };
        if f.max_threads_per_block()? < t.wgs as i32 {
            continue; // too many registers for this work-group size
        }
        let mut run = || {
            launch_ddc(
                stream,
                &f,
                t,
                DdcLaunch {
                    input: &input,
                    in_stride: 0,
                    pol0: 0,
                    npol: 1,
                    first: [0, 0],
                    nvalid: [n_in as i64; 2],
                    z: &z,
                    out: &mut out,
                    out_stride: 0,
                    n_out: n_out as i64,
                    bias: [0, 0],
                    scale: 0x1234_5678_9abc_def1,
                },
            )
        };
        let Ok(secs) = crate::gpu::time_on_stream(stream, 5, &mut run, FError::from) else {
            continue;
        };
        if best.is_none_or(|(b, _)| secs < b) {
            best = Some((secs, t));
        }
    }
    let Some((_, t)) = best else {
        return Err(FError::Gpu(GpuError::Failed(
            "no DDC kernel configuration could be compiled and launched".into(),
        )));
    };
    if let Some(p) = cache {
        // Best effort: an unwritable cache only costs tuning again next time.
        let _ = cache_store(p, &key, t);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_fit_shared_memory() {
        for (s, w) in [(8usize, 16usize), (16, 16), (32, 16), (5, 11), (128, 16)] {
            let c = candidates(s, w);
            assert!(!c.is_empty(), "S {s} W {w}");
            for t in c {
                assert!(ddc_smem_bytes(s, w, t) <= SMEM_LIMIT);
            }
        }
        // S = 8, W = 16, 64 × 8: rows of 512 + 15 samples padded by one per 8.
        let t = DdcTuning { wgs: 64, unroll: 8 };
        assert_eq!(
            ddc_smem_bytes(8, 16, t),
            8 * (526 + 526 / 8 + 1) * 4 + 16 * 8 * 8
        );
        assert!(candidates(4096, 64).is_empty());
    }

    #[test]
    fn cache_round_trip_and_bad_paths() {
        let dir = std::env::temp_dir().join(format!("gpucbf-ddc-tune-{}", std::process::id()));
        let path = dir.join("sub").join("ddc-tuning.txt");
        let _ = std::fs::remove_dir_all(&dir);
        let k1 = cache_key("NVIDIA H100\t80GB", "compute_90", 8, 16, 10);
        let k2 = cache_key("NVIDIA H100", "compute_90", 16, 16, 10);
        assert!(!k1.contains('\t'));
        assert_eq!(cache_lookup(&path, &k1), None);
        let a = DdcTuning { wgs: 64, unroll: 8 };
        let b = DdcTuning {
            wgs: 128,
            unroll: 4,
        };
        cache_store(&path, &k1, a).unwrap();
        cache_store(&path, &k2, b).unwrap();
        assert_eq!(cache_lookup(&path, &k1), Some(a));
        assert_eq!(cache_lookup(&path, &k2), Some(b));
        // A later entry for the same key wins; junk lines are ignored.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(format!("garbage\n{k1}\tx\t8\n{k1}\t32\t16\n").as_bytes())
            .unwrap();
        assert_eq!(
            cache_lookup(&path, &k1),
            Some(DdcTuning {
                wgs: 32,
                unroll: 16
            })
        );
        // Unwritable location (a path below a regular file): an error, never a panic.
        let under_file = path.join("nested.txt");
        assert!(cache_store(&under_file, &k1, a).is_err());
        assert_eq!(cache_lookup(&under_file, &k1), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
