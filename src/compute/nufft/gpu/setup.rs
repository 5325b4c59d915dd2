//! Launch geometry, NVRTC defines and small device-buffer helpers of the GPU NUFFT backend
//! ([`super`]; its PTX is cached per process by `gpu::compile_ptx_cached`).

use std::sync::Arc;

use cudarc::cufft;
use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use num_complex::Complex;

use crate::compute::nufft::{NufftError, Real};

/// Kernel source (embedded so binaries need no kernel files at run time).
pub const NUFFT_SRC: &str = crate::kernel_source!("nufft/nufft_spread.cu");

/// Shared memory the spreading kernel aims to stay under (several blocks per SM).
const SHARED_TARGET: usize = 64 * 1024;
/// Hard cap (below the A100's 163 KiB opt-in; the H100 has 227 KiB).
pub const SHARED_MAX: usize = 160 * 1024;

/// Launch geometry of the spreading kernel (see `kernels/nufft/nufft_spread.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpreadConfig {
    /// Bin (tile interior) size per axis in fine-grid cells (unused axes 1).
    pub bin: [usize; 3],
    /// Groups (tiles) per block.
    pub groups: usize,
    /// Threads per group (each owns ⌈ns^dim / group_threads⌉ residue classes).
    pub group_threads: usize,
    /// Points whose kernel values are staged in shared memory at once, per group.
    pub batch: usize,
    /// Most points per subproblem (a denser bin becomes several subproblems).
    pub sub: usize,
}

impl SpreadConfig {
    /// Heuristic geometry for `dim`, kernel width `ns`, `real_bytes` (4 or 8); `bin` and
    /// `batch` override the defaults (16² in 2-D, 8³ in 3-D; 64 points).
    pub fn choose(
        dim: usize,
        ns: usize,
        real_bytes: usize,
        bin: Option<usize>,
        batch: Option<usize>,
    ) -> Self {
        let nclass = ns.pow(dim as u32);
        let cpt = nclass.div_ceil(512);
        let gt = nclass.div_ceil(cpt);
        let b = bin.unwrap_or(if dim == 2 { 16 } else { 8 }).max(1);
        let mut c = SpreadConfig {
            bin: if dim == 2 { [b, b, 1] } else { [b, b, b] },
            groups: (256 / gt).max(1),
            group_threads: gt,
            batch: batch.unwrap_or(64).max(1),
            sub: 1024,
        };
        let sh = |c: &SpreadConfig| c.shared_bytes(dim, ns, real_bytes, 20);
        while sh(&c) > SHARED_TARGET && c.groups > 1 {
            c.groups -= 1;
        }
        while sh(&c) > SHARED_TARGET && c.batch > 32 && batch.is_none() {
            c.batch /= 2;
        }
        while sh(&c) > SHARED_MAX && c.bin[0] > 2 {
            for d in 0..dim {
                c.bin[d] /= 2;
            }
        }
        while sh(&c) > SHARED_MAX && c.batch > 8 {
            c.batch /= 2;
        }
        c
    }

    /// Threads per block.
    pub fn block_threads(&self) -> usize {
        self.groups * self.group_threads
    }

    /// Dynamic shared memory of the spreading kernel in bytes (the kernel's layout: every
    /// section 16-byte aligned).
    pub fn shared_bytes(&self, dim: usize, ns: usize, real_bytes: usize, ncoef: usize) -> usize {
        let a16 = |n: usize| n.div_ceil(16) * 16;
        let tile: usize = (0..dim).map(|d| self.bin[d] + ns).product();
        let gp = self.groups * self.batch;
        a16(ncoef * ns * real_bytes)
            + a16(self.groups * tile * 2 * real_bytes)
            + a16(gp * dim * ns * real_bytes)
            + a16(gp * 2 * real_bytes)
            + a16(gp * 16)
            + if dim == 3 { a16(gp * 8) } else { 0 }
    }
}

/// NVRTC defines for `nufft_spread.cu`.
pub fn nufft_defines(
    dim: usize,
    ns: usize,
    ncoef: usize,
    f64: bool,
    cfg: &SpreadConfig,
) -> Vec<(&'static str, String)> {
    vec![
        ("REAL", if f64 { "double" } else { "float" }.to_string()),
        ("REAL_IS_DOUBLE", u8::from(f64).to_string()),
        ("DIM", dim.to_string()),
        ("NS", ns.to_string()),
        ("NCOEF", ncoef.to_string()),
        ("B0", cfg.bin[0].to_string()),
        ("B1", cfg.bin[1].to_string()),
        ("B2", cfg.bin[2].to_string()),
        ("G", cfg.groups.to_string()),
        ("GT", cfg.group_threads.to_string()),
        ("NP", cfg.batch.to_string()),
        ("SUB", cfg.sub.to_string()),
    ]
}

/// Views complex values as interleaved `re, im` reals.
pub(super) fn reals<T: Real>(v: &[Complex<T>]) -> &[T] {
    // SAFETY: `Complex<T>` is `#[repr(C)] { re: T, im: T }`: `n` values are `2n` contiguous
    // `T`s with the same alignment; the borrow is carried over.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const T, 2 * v.len()) }
}

pub(super) fn reals_mut<T: Real>(v: &mut [Complex<T>]) -> &mut [T] {
    // SAFETY: as in `reals`, with the unique borrow carried over.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut T, 2 * v.len()) }
}

/// cuFFT's complex-to-complex type of the precision: C2C for `f32`, Z2Z for `f64`.
pub(super) fn fft_type<T: Real>() -> cufft::sys::cufftType {
    if size_of::<T>() == 8 {
        cufft::sys::cufftType::CUFFT_Z2Z
    } else {
        cufft::sys::cufftType::CUFFT_C2C
    }
}

/// In-place complex FFT (`dir` = +1 or −1) of the interleaved grid at `ptr`.
///
/// # Safety
/// `handle` is a plan of type [`fft_type::<T>()`] whose shape fits the grid at `ptr`.
pub(super) unsafe fn exec_fft_inplace<T: Real>(
    handle: cufft::sys::cufftHandle,
    ptr: cudarc::driver::sys::CUdeviceptr,
    dir: i32,
) -> Result<(), cufft::result::CufftError> {
    // SAFETY: as the caller promises; in-place C2C/Z2Z is supported by cuFFT.
    unsafe {
        if size_of::<T>() == 8 {
            cufft::result::exec_z2z(handle, ptr as *mut _, ptr as *mut _, dir)
        } else {
            cufft::result::exec_c2c(handle, ptr as *mut _, ptr as *mut _, dir)
        }
    }
}

pub(super) fn grid_1d(n: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            (n.div_ceil(threads as usize)).clamp(1, 1 << 20) as u32,
            1,
            1,
        ),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Grows `buf` to at least `len` elements (contents are not kept).
pub(super) fn ensure<T: Real>(
    stream: &Arc<CudaStream>,
    buf: &mut CudaSlice<T>,
    len: usize,
) -> Result<(), NufftError> {
    if buf.len() < len {
        *buf = stream.alloc_zeros::<T>(len)?;
    }
    Ok(())
}

pub(super) fn ensure_i32(
    stream: &Arc<CudaStream>,
    buf: &mut CudaSlice<i32>,
    len: usize,
) -> Result<(), NufftError> {
    if buf.len() < len {
        *buf = stream.alloc_zeros::<i32>(len)?;
    }
    Ok(())
}
