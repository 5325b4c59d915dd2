//! Hopper correlator path: `kernels/xengine/correlate_wgmma.cu` (warpgroup MMA, sm_90a),
//! compiled with NVRTC for `compute_90a`. The accumulator and the `reduce` kernel are shared
//! with the `mma.sync` path, so dumps are identical (both are bit-exact against the CPU
//! reference).
//!
//! Three kernels: `correlate_wgmma` (every warp loads, rearranges and issues wgmma),
//! `correlate_ws` (warp-specialised: one warpgroup copies and rearranges, two issue wgmma;
//! [`AUTO_WS_ON_SM90`]) and `correlate_sp` (the raw antenna rows as the B operand of a 2:4
//! structured-sparse wgmma, tensor copies into a 5-slot ring; the default on 9.x for 8-bit
//! input when the spectra per batch are a multiple of 32, [`AUTO_SPARSE_ON_SM90`]): about
//! 1000 TOPS at 1024 antennas on an H100, 0.73 of cuBLASLt's int8 GEMM. Design and
//! measurements: `docs/correlator-hopper.md`.
//!
//! `GPUCBF_CORRELATOR=mma | wgmma | ws | sp` or [`GpuX::set_correlator_kernel`] /
//! [`GpuX::set_wgmma_variant`] select a kernel.

use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};

use super::correlator::{correlate_defines, THREADS};
use super::GpuX;
use crate::compute::xengine::{XError, XShape};
use crate::gpu::GpuError;

/// Hopper correlator kernel source.
pub const CORRELATE_WGMMA_SRC: &str = crate::kernel_source!(
    [
        "xengine/xshape.cuh",
        "common/sm90.cuh",
        "xengine/corr_common.cuh"
    ],
    "xengine" / "correlate_wgmma.cu"
);
/// NVRTC architecture of the wgmma kernel (arch-specific PTX: runs on sm_90 only).
pub const WGMMA_ARCH: &str = crate::gpu::SM90A;
/// Environment variable forcing the correlator kernel: `mma` (mma.sync) or `wgmma`.
pub const CORRELATOR_ENV: &str = "GPUCBF_CORRELATOR";

/// Which correlator kernel a [`GpuX`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CorrKernel {
    /// `kernels/xengine/correlate.cu`: int8 `mma.sync` m16n8k32 (sm_80 and newer).
    MmaSync,
    /// `kernels/xengine/correlate_wgmma.cu`: int8 `wgmma.mma_async` m64n256k32 (sm_90a, Hopper only).
    Wgmma,
}

/// Tuning of the wgmma kernel: spectra per pipeline stage (`ST`: 32 or 64), shared-memory
/// operand buffers (`NREADY`: 2 or 3; with 3 the tensor cores never wait for a barrier) and
/// the input path (`NRAW`: 0 = loads into registers one stage ahead, 2..=8 = a cp.async ring of
/// that many raw stages), and the operand layout (no swizzle, or 128-byte swizzle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WgmmaVariant {
    /// Spectra per stage.
    pub stage_times: usize,
    /// Operand buffers.
    pub ready_bufs: usize,
    /// Raw cp.async stages (0: register loads).
    pub raw_bufs: usize,
    /// Register loads (`raw_bufs` 0): stages loaded ahead of their use, 1 or 2 (`PREF`).
    pub reg_stages: usize,
    /// 128-byte swizzled operands (`SWZ`; needs `stage_times` 64).
    pub swizzle: bool,
    /// Diagnostic only, wrong results (`PROBE` / `WS_PROBE`): 0 = normal, 1 = no wgmma, 2 = no
    /// global loads; warp-specialised kernel also 3 = bulk copies only.
    pub probe: u32,
    /// The warp-specialised kernel `correlate_ws` (384 threads: a transform warpgroup fed by
    /// bulk copies, two wgmma-only warpgroups): `ready_bufs` operand buffers (`WS_NC`, 2 or
    /// 3), `raw_bufs` raw bulk-copy stages (`WS_NR`, 2..=6), `stage_times` 64, 128-byte
    /// swizzle, `reg_stages` 1.
    pub ws: bool,
    /// Warp-specialised kernel only: clusters of 2 CTAs (tiles (ti, tj), (ti + 1, tj)) that
    /// multicast the shared B rows into both (`WS_CL` = 2).
    pub cluster: bool,
    /// The sparse-operand kernel `correlate_sp` (the raw rows are the B operand, A is built in
    /// registers as a 2:4 sparse operand; tensor copies into a ring of `raw_bufs` slots,
    /// `SP_NR`; needs spectra per batch a multiple of 32). `ready_bufs` is its number of
    /// consumer warpgroups (`SP_CWG`): 4 (32 × 128 antenna tiles, 512 threads, slots of 40 KiB,
    /// 2..=5 of them) or 2 (16 × 256 tiles, 384 threads with a producer warpgroup, slots of
    /// 68 KiB, 2..=3).
    pub sparse: bool,
}

impl Default for WgmmaVariant {
    fn default() -> Self {
        Self {
            stage_times: 64,
            ready_bufs: 3,
            raw_bufs: 0,
            reg_stages: 1,
            swizzle: false,
            probe: 0,
            ws: false,
            cluster: false,
            sparse: false,
        }
    }
}

/// `correlate_sp` tile: (A rows = a1 antennas, B rows = a2 antennas at most) for `cwg`
/// consumer warpgroups.
pub fn sparse_tile(cwg: usize) -> (usize, usize) {
    if cwg == 4 {
        (32, 128)
    } else {
        (16, 256)
    }
}

impl WgmmaVariant {
    /// Dynamic shared memory of the kernel: per operand buffer A (128 rows) and B (256 rows) of
    /// 2 · `stage_times` bytes; per raw stage 128 antenna rows of 4 · `stage_times` bytes; 1024
    /// bytes of alignment slack.
    pub fn smem(&self) -> usize {
        if self.sparse {
            // a ring slot: two 32-spectrum boxes (128-byte rows) of the A rows and of the B rows
            let (a, n) = sparse_tile(self.ready_bufs);
            return self.raw_bufs * 2 * (a + n) * 128 + 1024;
        }
        (self.ready_bufs * 768 + self.raw_bufs * 512) * self.stage_times + 1024
    }

    /// The warp-specialised kernel with `ready_bufs` operand buffers and `raw_bufs` raw stages.
    pub fn warp_specialized(ready_bufs: usize, raw_bufs: usize) -> Self {
        Self {
            stage_times: 64,
            ready_bufs,
            raw_bufs,
            reg_stages: 1,
            swizzle: true,
            probe: 0,
            ws: true,
            cluster: false,
            sparse: false,
        }
    }

    /// The sparse-operand kernel with `cwg` consumer warpgroups (4 or 2) and `raw_bufs` ring
    /// slots.
    pub fn sparse(cwg: usize, raw_bufs: usize) -> Self {
        Self {
            stage_times: 64,
            ready_bufs: cwg,
            raw_bufs,
            reg_stages: 1,
            swizzle: true,
            probe: 0,
            ws: false,
            cluster: false,
            sparse: true,
        }
    }

    /// [`Self::warp_specialized`] in 2-CTA clusters sharing the B rows by multicast.
    pub fn warp_specialized_cluster(ready_bufs: usize, raw_bufs: usize) -> Self {
        Self {
            cluster: true,
            ..Self::warp_specialized(ready_bufs, raw_bufs)
        }
    }

    /// Threads per block.
    pub fn threads(&self) -> u32 {
        if self.sparse && self.ready_bufs == 4 {
            512
        } else if self.ws || self.sparse {
            384
        } else {
            THREADS
        }
    }

    fn check(&self, smem_limit: usize) -> Result<(), XError> {
        if self.sparse {
            let max_raw = if self.ready_bufs == 4 { 5 } else { 3 };
            if self.ws
                || self.cluster
                || ![2, 4].contains(&self.ready_bufs)
                || !(2..=max_raw).contains(&self.raw_bufs)
                || self.probe > 2
                || self.smem() > smem_limit
            {
                return Err(XError::Shape(format!(
                    "sparse wgmma variant {self:?}: needs ready_bufs (consumer warpgroups) 2 or 4, raw_bufs 2..=3 (2 warpgroups) or 2..=5 (4), probe <= 2 and {} bytes of shared memory (at most {smem_limit})",
                    self.smem()
                )));
            }
            return Ok(());
        }
        let ws_bad = self.ws
            && (self.stage_times != 64
                || !(2..=6).contains(&self.raw_bufs)
                || self.reg_stages != 1
                || !self.swizzle
                || self.probe > 3);
        if ws_bad || (self.cluster && !self.ws) {
            return Err(XError::Shape(format!(
                "warp-specialised wgmma variant {self:?}: needs stage_times 64, swizzle, reg_stages 1, raw_bufs 2..=6, probe <= 3"
            )));
        }
        if ![32, 64].contains(&self.stage_times)
            || ![2, 3].contains(&self.ready_bufs)
            || !(self.raw_bufs == 0 || (2..=8).contains(&self.raw_bufs))
            || !(1..=2).contains(&self.reg_stages)
            || (self.probe > 2 && !self.ws)
            || (self.swizzle && self.stage_times != 64)
            || self.smem() > smem_limit
        {
            return Err(XError::Shape(format!(
                "wgmma variant {self:?} ({} bytes of shared memory, at most {smem_limit})",
                self.smem()
            )));
        }
        Ok(())
    }
}

/// NVRTC defines of the wgmma correlator for `shape` and `variant`.
pub fn correlate_wgmma_defines(
    shape: &XShape,
    variant: WgmmaVariant,
) -> Vec<(&'static str, String)> {
    let mut d = correlate_defines(shape);
    d.retain(|(k, _)| *k != "STAGE_TIMES");
    d.push(("ST", variant.stage_times.to_string()));
    // (the sparse kernel shares the module: the other kernels get valid defaults)
    let (nready, nraw) = if variant.sparse {
        (3, 0)
    } else {
        (variant.ready_bufs, variant.raw_bufs)
    };
    d.push(("NREADY", nready.to_string()));
    d.push(("NRAW", nraw.to_string()));
    d.push(("PREF", variant.reg_stages.to_string()));
    d.push(("SWZ", u8::from(variant.swizzle).to_string()));
    if variant.sparse {
        // the module also holds the other kernels, compiled with their defaults
        d.push(("PROBE", "0".to_string()));
        d.push(("WS_PROBE", "0".to_string()));
        d.push(("SP_NR", variant.raw_bufs.to_string()));
        d.push(("SP_CWG", variant.ready_bufs.to_string()));
        d.push(("SP_PROBE", variant.probe.to_string()));
    } else if variant.ws {
        // the module also holds correlate_wgmma, compiled with its defaults
        d.push(("PROBE", "0".to_string()));
        d.push(("WS_NC", variant.ready_bufs.to_string()));
        d.push(("WS_NR", variant.raw_bufs.to_string()));
        d.push(("WS_PROBE", variant.probe.to_string()));
        d.push(("WS_CL", if variant.cluster { "2" } else { "1" }.to_string()));
    } else {
        d.push(("PROBE", variant.probe.to_string()));
    }
    d
}

/// The compiled wgmma correlator.
pub(super) struct Wgmma {
    f: CudaFunction,
    variant: WgmmaVariant,
}

/// Whether a Hopper device runs the warp-specialised wgmma kernel when `GPUCBF_CORRELATOR`
/// is unset (8-bit input): measured faster than mma.sync at 64, 256, 576 and 1024 antennas in
/// one run (module docs), by 2–4 %.
pub const AUTO_WS_ON_SM90: bool = true;

/// Whether a Hopper device runs the sparse-operand kernel `correlate_sp` when
/// `GPUCBF_CORRELATOR` is unset (8-bit input, spectra per batch a multiple of 32).
pub const AUTO_SPARSE_ON_SM90: bool = true;

/// The wgmma variant a device of compute capability `major` runs for `sample_bits`-bit input
/// with `spectra` spectra per batch (`None`: the mma.sync kernel): `GPUCBF_CORRELATOR=mma |
/// wgmma | ws | sp` forces one (wgmma, ws and sp are errors off 9.x; sp also needs spectra a
/// multiple of 32), unset picks the measured fastest.
pub(super) fn default_kernel(
    major: i32,
    sample_bits: u32,
    spectra: usize,
) -> Result<Option<WgmmaVariant>, XError> {
    let sparse_ok = spectra.is_multiple_of(32);
    let forced = match std::env::var(CORRELATOR_ENV).as_deref() {
        Ok("wgmma") => Some(WgmmaVariant::default()),
        Ok("ws") => Some(WgmmaVariant::warp_specialized(2, 4)),
        Ok("sp") => {
            if !sparse_ok {
                return Err(XError::Gpu(GpuError::Unsupported(format!(
                    "{CORRELATOR_ENV}=sp needs spectra per batch a multiple of 32 (this shape: {spectra})"
                ))));
            }
            Some(WgmmaVariant::sparse(4, 5))
        }
        Ok("mma") => return Ok(None),
        Ok("") | Err(_) => {
            if major != 9 || sample_bits != 8 {
                return Ok(None);
            }
            if AUTO_SPARSE_ON_SM90 && sparse_ok {
                return Ok(Some(WgmmaVariant::sparse(4, 5)));
            }
            return Ok(AUTO_WS_ON_SM90.then(|| WgmmaVariant::warp_specialized(2, 4)));
        }
        Ok(other) => {
            return Err(XError::Gpu(GpuError::Unsupported(format!(
                "{CORRELATOR_ENV}={other}: expected `mma`, `wgmma`, `ws` or `sp`"
            ))))
        }
    };
    if major != 9 {
        return Err(XError::Gpu(GpuError::Unsupported(format!(
            "{CORRELATOR_ENV}=wgmma/ws/sp needs compute capability 9.x (this device: {major}.x)"
        ))));
    }
    Ok(forced)
}

/// Compiles the wgmma correlator for `shape` and allows its shared memory.
pub(super) fn build(
    ctx: &Arc<CudaContext>,
    shape: &XShape,
    variant: WgmmaVariant,
    smem_limit: usize,
) -> Result<Wgmma, XError> {
    variant.check(smem_limit)?;
    if shape.sample_bits != 8 {
        return Err(XError::Gpu(GpuError::Unsupported(format!(
            "the wgmma correlator takes 8-bit input only (--sample-bits {}): use the mma.sync kernel",
            shape.sample_bits
        ))));
    }
    let ptx = crate::gpu::compile_ptx(
        "correlate_wgmma.cu",
        CORRELATE_WGMMA_SRC,
        &correlate_wgmma_defines(shape, variant),
        WGMMA_ARCH,
    )?;
    let module = ctx.load_module(ptx)?;
    if variant.sparse && !shape.spectra_per_batch.is_multiple_of(32) {
        return Err(XError::Shape(format!(
            "the sparse wgmma correlator needs spectra per batch a multiple of 32 (this shape: {})",
            shape.spectra_per_batch
        )));
    }
    let name = if variant.sparse {
        "correlate_sp"
    } else if variant.ws {
        "correlate_ws"
    } else {
        "correlate_wgmma"
    };
    let f = module.load_function(name)?;
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        variant.smem() as i32,
    )?;
    Ok(Wgmma { f, variant })
}

impl GpuX {
    /// The correlator kernel in use.
    pub fn correlator_kernel(&self) -> CorrKernel {
        if self.wgmma.is_some() {
            CorrKernel::Wgmma
        } else {
            CorrKernel::MmaSync
        }
    }

    /// The wgmma variant in use (`None`: the mma.sync kernel).
    pub fn wgmma_variant(&self) -> Option<WgmmaVariant> {
        self.wgmma.as_ref().map(|w| w.variant)
    }

    /// Whether this device can run the wgmma kernel (compute capability 9.x).
    pub fn wgmma_supported(&self) -> bool {
        self.cc_major == 9
    }

    /// Switches the correlator kernel (pending accumulation is kept: both kernels add into the
    /// same accumulator). `Wgmma` needs compute capability 9.x.
    pub fn set_correlator_kernel(&mut self, kernel: CorrKernel) -> Result<(), XError> {
        match kernel {
            CorrKernel::MmaSync => self.wgmma = None,
            CorrKernel::Wgmma => {
                let v = self.wgmma.as_ref().map(|w| w.variant).unwrap_or_default();
                self.set_wgmma_variant(v)?;
            }
        }
        Ok(())
    }

    /// Selects the wgmma kernel with tuning `variant` (compute capability 9.x only).
    pub fn set_wgmma_variant(&mut self, variant: WgmmaVariant) -> Result<(), XError> {
        if !self.wgmma_supported() {
            return Err(XError::Gpu(GpuError::Unsupported(format!(
                "the wgmma correlator needs compute capability 9.x (this device: {}.x)",
                self.cc_major
            ))));
        }
        self.wgmma = Some(build(&self.ctx, &self.shape, variant, self.smem_optin)?);
        Ok(())
    }

    /// Queues the wgmma correlator (`grid` and `kpb` from `correlate_grid`, whose time splits
    /// are whole 64-sample stages, so whole stages of either variant).
    pub(super) fn launch_wgmma(
        &mut self,
        input: &CudaSlice<i8>,
        n_batches: usize,
        grid: (u32, u32, u32),
        kpb: usize,
    ) -> Result<(), XError> {
        let Some(w) = self.wgmma.as_ref() else {
            return Err(XError::Gpu(GpuError::Failed(
                "wgmma correlator not built".into(),
            )));
        };
        let nb = n_batches as i32;
        let kpb = kpb as i32;
        if w.variant.sparse {
            // tensor maps over `input` for this launch (the guard records the read of `input`
            // on this stream, where the kernel is queued)
            let (ptr, _sync) = input.device_ptr(&self.stream);
            let tile = sparse_tile(w.variant.ready_bufs);
            let tm_a = input_tensor_map(ptr, &self.shape, n_batches, tile.0 as u32)?;
            let tm_b = input_tensor_map(ptr, &self.shape, n_batches, tile.1 as u32)?;
            let cfg = LaunchConfig {
                grid_dim: (sparse_tiles(self.shape.n_ants, tile) as u32, grid.1, grid.2),
                block_dim: (w.variant.threads(), 1, 1),
                shared_mem_bytes: w.variant.smem() as u32,
            };
            let mut b = self.stream.launch_builder(&w.f);
            b.arg(&tm_a)
                .arg(&tm_b)
                .arg(&mut self.acc)
                .arg(&nb)
                .arg(&kpb);
            // SAFETY: argument types and order match `correlate_sp` in
            // kernels/xengine/correlate_wgmma.cu (two 128-byte tensor maps by value, int64
            // accumulator, ints); the maps cover exactly n_batches whole batches of `input`
            // (checked by the caller); acc has output_len elements; the shared memory was
            // allowed in `build`; kpb is a whole number of 64-spectrum stages and the spectra
            // per batch a multiple of 32 (checked in `build`).
            unsafe { b.launch(cfg) }?;
            return Ok(());
        }
        let mut grid = grid;
        if w.variant.cluster {
            // pairs of tiles down each column of the triangle (the kernel's __cluster_dims__)
            let nt = self.shape.n_ants.div_ceil(64);
            grid.0 = 2 * (0..nt).map(|tj| tj / 2 + 1).sum::<usize>() as u32;
        }
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: (w.variant.threads(), 1, 1),
            shared_mem_bytes: w.variant.smem() as u32,
        };
        let mut b = self.stream.launch_builder(&w.f);
        b.arg(input).arg(&mut self.acc).arg(&nb).arg(&kpb);
        // SAFETY: argument types and order match `correlate_wgmma` in
        // kernels/xengine/correlate_wgmma.cu; the caller checked that the input holds n_batches whole
        // batches; acc has output_len elements; the shared memory was allowed in `build`.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }
}

/// A `CUtensorMap` as a kernel argument (`const __grid_constant__ TensorMap`, 128 bytes).
#[repr(C, align(128))]
#[derive(Clone, Copy)]
pub(super) struct TensorMapArg(sys::CUtensorMap);

// SAFETY: plain 128-byte data, copied by value into the kernel's parameter space, where the
// kernel's `TensorMap` (128 bytes, 64-byte aligned or more) reads it.
unsafe impl DeviceRepr for TensorMapArg {}

/// Tiles of `correlate_sp` for `n_ants` antennas and tile (a, n) ([`sparse_tile`]): per
/// a-antenna row block i, the antennas from a·i to the end in tiles of at most n (the
/// kernel's `sp_tile`).
pub fn sparse_tiles(n_ants: usize, (a, n): (usize, usize)) -> usize {
    (0..n_ants.div_ceil(a))
        .map(|i| (n_ants - a * i).div_ceil(n))
        .sum()
}

/// Tensor map over the correlator input `[batch][antenna][channel][spectrum × 4 bytes]` at
/// device address `ptr`: boxes of 32 spectra (128 bytes, 128-byte swizzle) × 1 channel × `rows`
/// antennas × 1 batch; out-of-range antennas and batches read as zeros.
pub(super) fn input_tensor_map(
    ptr: sys::CUdeviceptr,
    shape: &XShape,
    n_batches: usize,
    rows: u32,
) -> Result<TensorMapArg, XError> {
    let row = (shape.spectra_per_batch * 4) as u64;
    let dims = [
        row,
        shape.n_channels as u64,
        shape.n_ants as u64,
        n_batches as u64,
    ];
    let strides = [
        row,
        row * shape.n_channels as u64,
        row * (shape.n_channels * shape.n_ants) as u64,
    ];
    let boxd = [128u32, 1, rows, 1];
    let elem = [1u32; 4];
    let mut m = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: the pointers refer to local arrays of the lengths the rank (4) implies; the map
    // is written by the driver into `m`; `ptr` is a live device allocation of the input.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            m.as_mut_ptr(),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
            4,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxd.as_ptr(),
            elem.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(XError::Gpu(GpuError::Failed(format!(
            "cuTensorMapEncodeTiled for the correlator input ({dims:?}, box {boxd:?}): {r:?}"
        ))));
    }
    // SAFETY: initialised by the successful call above.
    Ok(TensorMapArg(unsafe { m.assume_init() }))
}

impl GpuX {
    /// Runs the `wgmma_probe` kernel (one m64n8k32 instruction): `a` int8 `[64][32]`, `b` int8
    /// `[8][32]`; returns int32 `[64][8]` = a·bᵀ as read back through the accumulator layout the
    /// correlator assumes. Pins the descriptor and fragment layouts on a new device.
    pub fn wgmma_probe(&self, a: &[i8], b: &[i8]) -> Result<Vec<i32>, XError> {
        if a.len() != 64 * 32 || b.len() != 8 * 32 {
            return Err(XError::Size {
                what: "wgmma probe operands",
                expected: 64 * 32 + 8 * 32,
                got: a.len() + b.len(),
            });
        }
        if !self.wgmma_supported() {
            return Err(XError::Gpu(GpuError::Unsupported(
                "wgmma probe needs compute capability 9.x".into(),
            )));
        }
        let ptx = crate::gpu::compile_ptx(
            "correlate_wgmma.cu",
            CORRELATE_WGMMA_SRC,
            &correlate_wgmma_defines(&self.shape, WgmmaVariant::default()),
            WGMMA_ARCH,
        )?;
        let f = self.ctx.load_module(ptx)?.load_function("wgmma_probe")?;
        let da = self.stream.clone_htod(a)?;
        let db = self.stream.clone_htod(b)?;
        let mut dd = self.stream.alloc_zeros::<i32>(64 * 8)?;
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut lb = self.stream.launch_builder(&f);
        lb.arg(&da).arg(&db).arg(&mut dd);
        // SAFETY: matches `wgmma_probe` (int8 64×32, int8 8×32, int32 64×8); sizes above.
        unsafe { lb.launch(cfg) }?;
        let out = self.stream.clone_dtoh(&dd)?;
        self.stream.synchronize()?;
        Ok(out)
    }
}
