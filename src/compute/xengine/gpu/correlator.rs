//! The `mma.sync` correlator (`kernels/xengine/correlate.cu`: int8 tensor cores, int64
//! accumulation) and the saturating `reduce` that both correlator paths dump through: kernel
//! variants, NVRTC defines, the launch grid and the [`GpuX`] methods that queue them.

use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::GpuX;
use crate::compute::xengine::{present_baselines, XError, XShape};

/// Correlator kernel source (embedded so binaries need no kernel files at run time).
pub const CORRELATE_SRC: &str = crate::kernel_source!(
    ["xengine/xshape.cuh", "xengine/corr_common.cuh"],
    "xengine" / "correlate.cu"
);

const TILE: usize = 64;
/// Spectra per pipeline stage (`STAGE_TIMES` in the kernel).
const STAGE_TIMES: usize = 64;
const KSTEPS_PER_STAGE: usize = STAGE_TIMES / 16;
/// Bytes of one raw correlator stage (2·TILE antenna rows of STAGE_TIMES spectra).
const RAW_STAGE_BYTES: usize = 2 * TILE * (STAGE_TIMES / 4) * 16;

/// Correlator kernel variant: `direct` builds the MMA fragments in registers straight from
/// `stages` raw cp.async buffers (stages − 1 in flight); otherwise 3 raw stages are rearranged
/// into two fragment-ready buffers once per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CorrVariant {
    /// Fragments from the raw stages.
    pub direct: bool,
    /// Raw stages (3..=6; 3 when not direct).
    pub stages: usize,
    /// Diagnostic only, wrong results (`PROBE` in the kernel, direct path): 0 = normal,
    /// 1 = no conj_perm, 2 = no MMAs, 3 = MMAs only.
    pub probe: u32,
}

impl Default for CorrVariant {
    fn default() -> Self {
        Self {
            direct: true,
            stages: 4,
            probe: 0,
        }
    }
}

impl CorrVariant {
    /// Dynamic shared memory for `sample_bits`-bit input (4-bit adds a ring of packed stages).
    fn smem(&self, sample_bits: u32) -> usize {
        if self.direct {
            if sample_bits == 4 {
                // two int8 stage buffers and a ring of packed stages
                2 * RAW_STAGE_BYTES + self.stages * RAW_STAGE_BYTES / 2
            } else {
                self.stages * RAW_STAGE_BYTES
            }
        } else {
            // 3 raw stages and two ready buffers of A-ready (TILE rows) and B-ready (2 × TILE)
            (3 * 2 * TILE + 2 * 3 * TILE) * (STAGE_TIMES / 4) * 16
        }
    }

    fn defines(&self) -> [(&'static str, String); 3] {
        [
            ("DIRECT", u8::from(self.direct).to_string()),
            ("N_STAGES", self.stages.to_string()),
            ("PROBE", self.probe.to_string()),
        ]
    }
}
/// Threads per block of the `mma.sync` correlator (and of the single-role wgmma kernel).
pub(super) const THREADS: u32 = 256;
/// At most 65536 samples (4096 k-steps of 16) per block keep the int32 tensor-core sums exact.
const MAX_KSTEPS_PER_BLOCK: usize = 4096;

/// NVRTC defines for the correlator kernel of `shape`.
pub fn correlate_defines(shape: &XShape) -> Vec<(&'static str, String)> {
    vec![
        ("N_ANTS", shape.n_ants.to_string()),
        ("N_CHANNELS", shape.n_channels.to_string()),
        ("SPECTRA", shape.spectra_per_batch.to_string()),
        ("STAGE_TIMES", STAGE_TIMES.to_string()),
        ("SAMPLE_BITS", shape.sample_bits.to_string()),
    ]
}

/// Compiles `correlate` and `reduce` for `shape` and allows the variant's shared memory.
pub(super) fn build_correlator(
    ctx: &Arc<CudaContext>,
    shape: &XShape,
    arch: &'static str,
    variant: CorrVariant,
) -> Result<(CudaFunction, CudaFunction), XError> {
    let mut defines = correlate_defines(shape);
    defines.extend(variant.defines());
    let ptx = crate::gpu::compile_ptx("correlate.cu", CORRELATE_SRC, &defines, arch)?;
    let module = ctx.load_module(ptx)?;
    let correlate = module.load_function("correlate")?;
    correlate.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        variant.smem(shape.sample_bits) as i32,
    )?;
    let reduce = module.load_function("reduce")?;
    Ok((correlate, reduce))
}

impl GpuX {
    /// Recompiles the `mma.sync` correlator as `variant` and selects it (a tuning knob for
    /// benchmarks; any pending accumulation is kept, the accumulator layout does not change).
    pub fn set_correlator_variant(&mut self, variant: CorrVariant) -> Result<(), XError> {
        if !(3..=6).contains(&variant.stages)
            || (!variant.direct
                && (variant.stages != 3 || variant.probe != 0 || self.shape.sample_bits != 8))
            || variant.probe > 3
        {
            return Err(XError::Shape(format!("correlator variant {variant:?}")));
        }
        let (c, r) = build_correlator(&self.ctx, &self.shape, self.arch, variant)?;
        self.correlate = c;
        self.reduce = r;
        self.variant = variant;
        self.wgmma = None;
        Ok(())
    }

    /// Grid for `n_batches`: (triangle tiles, channels, time splits) and k-steps per split.
    fn correlate_grid(&self, n_batches: usize) -> ((u32, u32, u32), usize) {
        let nt = self.shape.n_ants.div_ceil(TILE);
        let tiles = nt * (nt + 1) / 2;
        let ksteps = n_batches * self.shape.spectra_per_batch / 16;
        let xy = tiles * self.shape.n_channels;
        // about four waves of one block per SM, but never more than 65536 samples per block
        let want_z = (4 * self.n_sms).div_ceil(xy).max(1);
        let mut kpb = ksteps.div_ceil(want_z).clamp(1, MAX_KSTEPS_PER_BLOCK);
        kpb = (kpb.div_ceil(KSTEPS_PER_STAGE) * KSTEPS_PER_STAGE).min(MAX_KSTEPS_PER_BLOCK); // whole stages
        let z = ksteps.div_ceil(kpb);
        ((tiles as u32, self.shape.n_channels as u32, z as u32), kpb)
    }

    /// Queues the correlation of `n_batches` batches already on the device (no host copies).
    pub fn accumulate_device(
        &mut self,
        input: &CudaSlice<i8>,
        n_batches: usize,
    ) -> Result<(), XError> {
        let need = n_batches * self.shape.batch_bytes();
        if n_batches == 0 || input.len() < need {
            return Err(XError::Size {
                what: "device correlator input",
                expected: need,
                got: input.len(),
            });
        }
        if n_batches > i32::MAX as usize / self.shape.spectra_per_batch {
            return Err(XError::Shape(format!(
                "{n_batches} batches in one call: too many"
            )));
        }
        let (grid, kpb) = self.correlate_grid(n_batches);
        if grid.2 > 65535 {
            return Err(XError::Shape(format!(
                "{n_batches} batches: too many time splits"
            )));
        }
        if self.wgmma.is_some() {
            return self.launch_wgmma(input, n_batches, grid, kpb);
        }
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: self.variant.smem(self.shape.sample_bits) as u32,
        };
        let nb = n_batches as i32;
        let kpb = kpb as i32;
        let mut b = self.stream.launch_builder(&self.correlate);
        b.arg(input).arg(&mut self.acc).arg(&nb).arg(&kpb);
        // SAFETY: argument types and order match `correlate` in kernels/xengine/correlate.cu; the input
        // holds n_batches whole batches (checked above) and acc has output_len elements.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Queues the reduce into the device output buffer; returns nothing until
    /// [`crate::compute::xengine::XBackend::dump`].
    pub(super) fn launch_reduce(&mut self, present_ants: &[bool]) -> Result<(), XError> {
        let pb = present_baselines(present_ants);
        self.stream.memcpy_htod(&pb, &mut self.present)?;
        self.stream.memset_zeros(&mut self.saturated)?;
        let n = self.shape.output_len() / 2;
        let blocks = n.div_ceil(256).min(8 * self.n_sms.max(1) * 8) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks.max(1), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.reduce);
        b.arg(&mut self.acc)
            .arg(&mut self.out)
            .arg(&self.present)
            .arg(&mut self.saturated);
        // SAFETY: matches `reduce` in kernels/xengine/correlate.cu; buffer sizes fixed by the shape.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }
}
