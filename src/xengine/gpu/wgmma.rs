//! Hopper correlator path: `kernels/correlate_wgmma.cu` (warpgroup MMA, sm_90a), compiled with
//! NVRTC for `compute_90a`. The accumulator and the `reduce` kernel are shared with the
//! `mma.sync` path, so dumps are identical (both are bit-exact against the CPU reference).
//!
//! Not the default: measured on an H100 SXM (`gpucbf bench xbgpu`, 2026-11-22) it runs at
//! 229 / 418 / 472 / 500 TOPS for 64 / 256 / 576 / 1024 antennas against mma.sync's
//! 238 / 433 / 489 / 521 in the same run (cuBLASLt int8 GEMM 1422). Its limit probes at 576
//! antennas: without the wgmma (loads and operand rearrangement only) 728 TOPS, without the
//! global loads (wgmma, rearrangement, barriers) 1193 TOPS; the two phases barely overlap, and
//! neither a deeper register prefetch, a cp.async ring (2–8 stages), 32-spectrum stages nor the
//! 128-byte swizzled layout moved the total. A 64 × 64 antenna tile per SM reads 32 KB from L2
//! per 64 spectra, so the load side alone caps this tiling near 730 TOPS on the H100; going
//! further needs operand sharing between SMs (thread-block clusters with multicast) and/or A
//! from registers (wgmma RS) to relieve shared memory. `GPUCBF_CORRELATOR=wgmma` or
//! [`GpuX::set_correlator_kernel`] selects it.

use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::{correlate_defines, gerr, GpuX, THREADS};
use crate::xengine::{XError, XShape};

/// Hopper correlator kernel source.
pub const CORRELATE_WGMMA_SRC: &str = include_str!("../../../kernels/correlate_wgmma.cu");
/// NVRTC architecture of the wgmma kernel (arch-specific PTX: runs on sm_90 only).
pub const WGMMA_ARCH: &str = "compute_90a";
/// Environment variable forcing the correlator kernel: `mma` (mma.sync) or `wgmma`.
pub const CORRELATOR_ENV: &str = "GPUCBF_CORRELATOR";

/// Which correlator kernel a [`GpuX`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CorrKernel {
    /// `kernels/correlate.cu`: int8 `mma.sync` m16n8k32 (sm_80 and newer).
    MmaSync,
    /// `kernels/correlate_wgmma.cu`: int8 `wgmma.mma_async` m64n256k32 (sm_90a, Hopper only).
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
    /// Diagnostic only, wrong results (`PROBE`): 0 = normal, 1 = no wgmma, 2 = no global loads.
    pub probe: u32,
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
        }
    }
}

impl WgmmaVariant {
    /// Dynamic shared memory of the kernel: per operand buffer A (128 rows) and B (256 rows) of
    /// 2 · `stage_times` bytes; per raw stage 128 antenna rows of 4 · `stage_times` bytes; 1024
    /// bytes of alignment slack.
    pub fn smem(&self) -> usize {
        (self.ready_bufs * 768 + self.raw_bufs * 512) * self.stage_times + 1024
    }

    fn check(&self, smem_limit: usize) -> Result<(), XError> {
        if ![32, 64].contains(&self.stage_times)
            || ![2, 3].contains(&self.ready_bufs)
            || !(self.raw_bufs == 0 || (2..=8).contains(&self.raw_bufs))
            || !(1..=2).contains(&self.reg_stages)
            || self.probe > 2
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
    d.push(("NREADY", variant.ready_bufs.to_string()));
    d.push(("NRAW", variant.raw_bufs.to_string()));
    d.push(("PREF", variant.reg_stages.to_string()));
    d.push(("SWZ", u8::from(variant.swizzle).to_string()));
    d.push(("PROBE", variant.probe.to_string()));
    d
}

/// The compiled wgmma correlator.
pub(super) struct Wgmma {
    f: CudaFunction,
    variant: WgmmaVariant,
}

/// Kernel choice for a device of compute capability `major`: the faster one as measured
/// (mma.sync, see the module docs) unless `GPUCBF_CORRELATOR=wgmma` (an error off 9.x).
pub(super) fn default_kernel(major: i32) -> Result<CorrKernel, XError> {
    match std::env::var(CORRELATOR_ENV).as_deref() {
        Ok("wgmma") if major == 9 => Ok(CorrKernel::Wgmma),
        Ok("wgmma") => Err(XError::Gpu(format!(
            "{CORRELATOR_ENV}=wgmma needs compute capability 9.x (this device: {major}.x)"
        ))),
        Ok("mma") | Ok("") | Err(_) => Ok(CorrKernel::MmaSync),
        Ok(other) => Err(XError::Gpu(format!(
            "{CORRELATOR_ENV}={other}: expected `mma` or `wgmma`"
        ))),
    }
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
        return Err(XError::Gpu(format!(
            "the wgmma correlator takes 8-bit input only (--sample-bits {}): use the mma.sync kernel",
            shape.sample_bits
        )));
    }
    let ptx = crate::gpu::compile_ptx(
        "correlate_wgmma.cu",
        CORRELATE_WGMMA_SRC,
        &correlate_wgmma_defines(shape, variant),
        WGMMA_ARCH,
    )
    .map_err(XError::Gpu)?;
    let module = ctx.load_module(ptx).map_err(gerr)?;
    let f = module.load_function("correlate_wgmma").map_err(gerr)?;
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        variant.smem() as i32,
    )
    .map_err(gerr)?;
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
            return Err(XError::Gpu(format!(
                "the wgmma correlator needs compute capability 9.x (this device: {}.x)",
                self.cc_major
            )));
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
            return Err(XError::Gpu("wgmma correlator not built".into()));
        };
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: w.variant.smem() as u32,
        };
        let nb = n_batches as i32;
        let kpb = kpb as i32;
        let mut b = self.stream.launch_builder(&w.f);
        b.arg(input).arg(&mut self.acc).arg(&nb).arg(&kpb);
        // SAFETY: argument types and order match `correlate_wgmma` in
        // kernels/correlate_wgmma.cu; the caller checked that the input holds n_batches whole
        // batches; acc has output_len elements; the shared memory was allowed in `build`.
        unsafe { b.launch(cfg) }.map_err(gerr)?;
        Ok(())
    }
}

impl GpuX {
    /// Runs the `wgmma_probe` kernel (one m64n8k32 instruction): `a` int8 [64][32], `b` int8
    /// [8][32]; returns int32 [64][8] = a·bᵀ as read back through the accumulator layout the
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
            return Err(XError::Gpu(
                "wgmma probe needs compute capability 9.x".into(),
            ));
        }
        let ptx = crate::gpu::compile_ptx(
            "correlate_wgmma.cu",
            CORRELATE_WGMMA_SRC,
            &correlate_wgmma_defines(&self.shape, WgmmaVariant::default()),
            WGMMA_ARCH,
        )
        .map_err(XError::Gpu)?;
        let f = self
            .ctx
            .load_module(ptx)
            .map_err(gerr)?
            .load_function("wgmma_probe")
            .map_err(gerr)?;
        let da = self.stream.clone_htod(a).map_err(gerr)?;
        let db = self.stream.clone_htod(b).map_err(gerr)?;
        let mut dd = self.stream.alloc_zeros::<i32>(64 * 8).map_err(gerr)?;
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut lb = self.stream.launch_builder(&f);
        lb.arg(&da).arg(&db).arg(&mut dd);
        // SAFETY: matches `wgmma_probe` (int8 64×32, int8 8×32, int32 64×8); sizes above.
        unsafe { lb.launch(cfg) }.map_err(gerr)?;
        let out = self.stream.clone_dtoh(&dd).map_err(gerr)?;
        self.stream.synchronize().map_err(gerr)?;
        Ok(out)
    }
}
