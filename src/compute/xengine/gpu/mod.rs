//! GPU back end ([`GpuX`]): the device, its buffers and the [`XBackend`] entry points. The
//! kernels, each compiled with NVRTC per shape (constants as `-D` defines), have a file each:
//! [`correlator`] (`kernels/xengine/correlate.cu`: tensor cores, int64 accumulation,
//! saturating reduce), [`wgmma`] (Hopper: `kernels/xengine/correlate_wgmma.cu` in place of
//! the `mma.sync` correlation), [`beamformer`] (`kernels/xengine/beamform.cu`) and
//! [`beam_wg`] (Hopper: `kernels/xengine/beamform_wgmma.cu`).

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream};

use super::{BeamSet, BeamStats, XBackend, XError, XShape};
use crate::gpu::GpuError;

pub(crate) mod beam_wg;
pub(crate) mod beamformer;
pub(crate) mod correlator;
pub(crate) mod wgmma;
pub use beam_wg::{BeamKernel, BeamWgPlan, BEAMFORM_WGMMA_SRC, BEAM_WG_MAX_ANTS};
use beamformer::DEFAULT_BATCH_BEAMS;
pub use beamformer::{beamform_defines, BeamPlan, BeamTuning, BEAMFORM_SRC};
use correlator::build_correlator;
pub use correlator::{correlate_defines, CorrVariant, CORRELATE_SRC};
pub use wgmma::{
    correlate_wgmma_defines, sparse_tile, sparse_tiles, CorrKernel, WgmmaVariant,
    AUTO_SPARSE_ON_SM90, AUTO_WS_ON_SM90, CORRELATE_WGMMA_SRC, CORRELATOR_ENV, WGMMA_ARCH,
};

/// Beam tables resident on the device.
pub(crate) struct DevTables {
    coef: CudaSlice<f32>,
    delay: CudaSlice<f32>,
    wscale: CudaSlice<f32>,
    order: CudaSlice<i32>,
    groups: CudaSlice<i32>,
    /// Half-tiles (8 beams of one pol each).
    n_groups: i32,
    /// Beam tiles (two half-tiles each).
    pub(crate) n_tiles: usize,
    /// The wgmma beamformer's plan and slots where it applies.
    wg: Option<beam_wg::WgTables>,
}

/// One beamformer launch over `n_batches` consecutive batches of `input`: `present` is u8
/// `[batch][antenna]` (0: read as zeros), `dseeds` one dither seed per batch ([`batch_dither_seed`]
/// of its batch index), `out` int8 `[batch][beam][channel][spectrum][re/im]`, `saturated` u64
/// `[batch][beam]` (added to).
///
/// [`batch_dither_seed`]: super::batch_dither_seed
pub(crate) struct BeamLaunch<'a> {
    pub(crate) input: &'a CudaSlice<i8>,
    pub(crate) n_batches: usize,
    pub(crate) present: &'a CudaSlice<u8>,
    pub(crate) dseeds: &'a CudaSlice<u32>,
    pub(crate) dither: bool,
    pub(crate) out: &'a mut CudaSlice<i8>,
    pub(crate) saturated: &'a mut CudaSlice<u64>,
}

/// GPU implementation of [`XBackend`].
pub struct GpuX {
    shape: XShape,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: &'static str,
    n_sms: usize,
    correlate: CudaFunction,
    reduce: CudaFunction,
    variant: CorrVariant,
    cc_major: i32,
    /// The wgmma correlator when it is the one in use (Hopper).
    wgmma: Option<wgmma::Wgmma>,
    beam_fns: HashMap<(usize, BeamPlan), CudaFunction>,
    beam_wg_fns: HashMap<(usize, BeamWgPlan), CudaFunction>,
    smem_optin: usize,
    smem_per_sm: usize,
    batch_beams: usize,
    beam_tuning: BeamTuning,
    acc: CudaSlice<i64>,
    out: CudaSlice<i32>,
    present: CudaSlice<u8>,
    saturated: CudaSlice<u64>,
    /// The device copy of the input: as long as the longest input so far.
    input: Option<CudaSlice<i8>>,
    /// Recorded after the latest copy from CUDA-registered host memory (which the driver
    /// reads by DMA after the call that queued it returned); `host_read_pending` until
    /// [`XBackend::fence_input`] has waited for it.
    host_read: Option<CudaEvent>,
    host_read_pending: bool,
    /// Input copies straight from registered host memory, and copies from pageable memory
    /// (staged by the driver).
    uploads: Uploads,
    /// The wgmma beamformer's work-stealing words (one per SM; each launch leaves every word
    /// with nothing left, as zeros do).
    beam_work: CudaSlice<u32>,
}

impl GpuX {
    /// Opens device 0 and compiles the correlator for `shape`. Fails cleanly without a GPU.
    pub fn new(shape: XShape) -> Result<Self, XError> {
        let ctx = crate::gpu::open_device(0)?;
        let (major, minor) = crate::gpu::compute_capability(&ctx)?;
        let n_sms =
            ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as usize;
        let smem_optin = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
            as usize;
        let smem_per_sm = ctx.attribute(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
        )? as usize;
        let arch = crate::gpu::nvrtc_arch(major, minor)?;
        let variant = CorrVariant::default();
        let (correlate, reduce) = build_correlator(&ctx, &shape, arch, variant)?;
        let wgmma = match wgmma::default_kernel(major, shape.sample_bits, shape.spectra_per_batch)?
        {
            Some(v) => Some(wgmma::build(&ctx, &shape, v, smem_optin)?),
            None => None,
        };
        let stream = ctx.default_stream();
        let acc = stream.alloc_zeros::<i64>(shape.output_len())?;
        let out = stream.alloc_zeros::<i32>(shape.output_len())?;
        let present = stream.alloc_zeros::<u8>(shape.n_baselines())?;
        let saturated = stream.alloc_zeros::<u64>(1)?;
        let beam_work = stream.alloc_zeros::<u32>(n_sms.max(1))?;
        Ok(Self {
            shape,
            ctx,
            stream,
            arch,
            n_sms,
            correlate,
            reduce,
            variant,
            cc_major: major,
            wgmma,
            beam_fns: HashMap::new(),
            beam_wg_fns: HashMap::new(),
            smem_optin,
            smem_per_sm,
            batch_beams: DEFAULT_BATCH_BEAMS,
            beam_tuning: BeamTuning::default(),
            acc,
            out,
            present,
            saturated,
            input: None,
            host_read: None,
            host_read_pending: false,
            uploads: Uploads::default(),
            beam_work,
        })
    }

    /// The CUDA stream all work is queued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The CUDA context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Number of streaming multiprocessors.
    pub fn n_sms(&self) -> usize {
        self.n_sms
    }

    /// How the inputs reached the device so far.
    pub fn uploads(&self) -> Uploads {
        self.uploads
    }

    /// Copies `input` to the device input buffer (grown when too short; only its first
    /// `input.len()` bytes are written). From CUDA-registered host memory (chunk memory) the
    /// copy is queued and reads the host bytes by DMA later, until [`XBackend::fence_input`];
    /// from pageable memory the driver stages the bytes before this returns.
    fn upload_input(&mut self, input: &[i8]) -> Result<CudaSlice<i8>, XError> {
        let mut buf = match self.input.take() {
            Some(b) if b.len() >= input.len() => b,
            _ => self.stream.alloc_zeros::<i8>(input.len())?,
        };
        // GPU-mapped chunk memory (`--use-vkgdr`): a copy on the device, no upload.
        let mapped = crate::mem::vkgdr::copy_mapped_to_device(
            &self.stream,
            as_u8(input),
            &mut buf.slice_mut(..input.len()),
        )?;
        let registered = mapped || host_registered(&self.ctx, input)?;
        if !mapped {
            self.stream
                .memcpy_htod(input, &mut buf.slice_mut(..input.len()))?;
        }
        if registered {
            match &self.host_read {
                Some(e) => e.record(&self.stream)?,
                None => self.host_read = Some(self.stream.record_event(None)?),
            }
            self.host_read_pending = true;
            self.uploads.direct += 1;
        } else {
            self.uploads.staged += 1;
        }
        Ok(buf)
    }
}

/// Samples as bytes.
fn as_u8(b: &[i8]) -> &[u8] {
    // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast(), b.len()) }
}

/// How a [`GpuX`]'s inputs reached the device: calls that copied straight from
/// CUDA-registered host memory, and calls that copied from pageable memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Uploads {
    /// Asynchronous copies by DMA from registered memory (or on the device from
    /// GPU-mapped chunk memory, `--use-vkgdr`).
    pub direct: u64,
    /// Copies from pageable memory (the driver stages them through its own pinned buffer).
    pub staged: u64,
}

/// True if `bytes` lie in host memory registered with CUDA (page-locked): its first and last
/// byte are. A slice lies inside one allocation, and chunk memory is registered whole.
fn host_registered(ctx: &CudaContext, bytes: &[i8]) -> Result<bool, XError> {
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return Ok(false);
    };
    ctx.bind_to_thread()?;
    let known = |p: &i8| {
        let mut flags = 0u32;
        // SAFETY: asks the driver about an address of a live slice; writes only `flags`.
        let r = unsafe { sys::cuMemHostGetFlags(&mut flags, p as *const i8 as *mut _) };
        r == sys::CUresult::CUDA_SUCCESS
    };
    Ok(known(first) && known(last))
}

impl XBackend for GpuX {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn shape(&self) -> XShape {
        self.shape
    }

    fn accumulate(&mut self, input: &[i8]) -> Result<(), XError> {
        let n_batches = self.shape.check_input(input)?;
        let buf = self.upload_input(input)?;
        let r = self.accumulate_device(&buf, n_batches);
        self.input = Some(buf);
        r
    }

    fn fence_input(&mut self) -> Result<(), XError> {
        if self.host_read_pending {
            if let Some(e) = &self.host_read {
                e.synchronize()?;
            }
            self.host_read_pending = false;
        }
        Ok(())
    }

    fn dump(&mut self, present_ants: &[bool], out: &mut [i32]) -> Result<u64, XError> {
        self.shape.check_present(present_ants)?;
        if out.len() != self.shape.output_len() {
            return Err(XError::Size {
                what: "correlator output",
                expected: self.shape.output_len(),
                got: out.len(),
            });
        }
        self.launch_reduce(present_ants)?;
        self.stream.memcpy_dtoh(&self.out, out)?;
        let mut sat = [0u64];
        self.stream.memcpy_dtoh(&self.saturated, &mut sat)?;
        self.stream.synchronize()?;
        Ok(sat[0])
    }

    fn dumps_to_device(&self) -> bool {
        true
    }

    unsafe fn dump_to_device(
        &mut self,
        present_ants: &[bool],
        dst: u64,
        len: usize,
    ) -> Result<u64, XError> {
        use cudarc::driver::DevicePtr;
        self.shape.check_present(present_ants)?;
        let bytes = self.shape.output_len() * std::mem::size_of::<i32>();
        if len != bytes {
            return Err(XError::Size {
                what: "correlator output in device memory (bytes)",
                expected: bytes,
                got: len,
            });
        }
        self.launch_reduce(present_ants)?;
        self.ctx.bind_to_thread()?;
        {
            // On the compute stream, after the reduce (the buffer's last writer); the GPU is
            // little-endian, so the int32 buffer's bytes are the heap's payload.
            let (src, _record) = self.out.device_ptr(&self.stream);
            // SAFETY: `out` holds `bytes` bytes; dst is the caller's device range.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(dst, src, len, self.stream.cu_stream())?
            };
        }
        let mut sat = [0u64];
        self.stream.memcpy_dtoh(&self.saturated, &mut sat)?;
        // The item is complete before the NIC may read it.
        self.stream.synchronize()?;
        Ok(sat[0])
    }

    fn beamform(
        &mut self,
        batch: &[i8],
        present_ants: &[bool],
        beams: &BeamSet,
        batch_index: u64,
        out: &mut [i8],
    ) -> Result<BeamStats, XError> {
        // the same path as a chunk of one batch (its checks cover the buffer sizes, the
        // presence length and the beam set)
        let mut st = self.beamform_launch(batch, present_ants, beams, &[batch_index], out)?;
        st.pop().ok_or_else(|| {
            XError::Gpu(GpuError::Failed("beamformer returned no statistics".into()))
        })
    }

    fn beamform_batches(
        &mut self,
        batches: &[i8],
        present_ants: &[bool],
        beams: &BeamSet,
        batch_indices: &[u64],
        out: &mut [i8],
    ) -> Result<Vec<BeamStats>, XError> {
        self.beamform_launch(batches, present_ants, beams, batch_indices, out)
    }

    fn beamforms_to_device(&self) -> bool {
        true
    }

    unsafe fn beamform_batches_to_device(
        &mut self,
        batches: &[i8],
        present_ants: &[bool],
        beams: &BeamSet,
        batch_indices: &[u64],
        dsts: &[u64],
    ) -> Result<Vec<BeamStats>, XError> {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.beamform_launch_to_device(batches, present_ants, beams, batch_indices, dsts) }
    }
}
