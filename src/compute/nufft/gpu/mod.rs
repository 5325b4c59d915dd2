//! The CUDA backend: `kernels/nufft/nufft_spread.cu` (bin sort, output-driven spreading,
//! interpolation, deconvolution), cuFFT C2C/Z2Z in place on the fine grid.
//!
//! Type 1: zero grid → spread → FFT → extract the modes times `1/φ̂`.
//! Type 2: zero grid → place the modes times `1/φ̂` → FFT → interpolate.
//! Same kernel (the host-fitted ES panel polynomials), fine grid, folding and deconvolution
//! weights as [`super::CpuPlan`], so both backends agree to rounding. Kernels are compiled
//! with NVRTC per (precision, dimension, width, launch geometry) and cached per process.
//!
//! The plan keeps its points, strengths and output on the device; the trait methods copy
//! from and to host slices around the `*_resident` methods the benchmark times.

pub(crate) mod setup;

use std::sync::Arc;

use cudarc::cufft::CudaFft;
use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use num_complex::Complex;

use super::kernel::{Kernel, KernelParams};
use super::plan::{check_coords, PlanShape};
use super::{NufftBackend, NufftError, NufftType, Options, Real};
use crate::gpu::GpuError;
use setup::{ensure, ensure_i32, exec_fft_inplace, fft_type, grid_1d, reals, reals_mut};
pub use setup::{nufft_defines, SpreadConfig, NUFFT_SRC, SHARED_MAX};

/// Kernels of one compiled configuration.
struct Funcs {
    bin_count: CudaFunction,
    scan: CudaFunction,
    scatter: CudaFunction,
    subprob: CudaFunction,
    spread: CudaFunction,
    interp: CudaFunction,
    extract: CudaFunction,
    fill: CudaFunction,
}

/// Per-point device buffers (capacity grows, never shrinks).
struct Points<T> {
    m: usize,
    /// Input coordinates (original order), one buffer per axis (unused axes: 1 element).
    x: [CudaSlice<T>; 3],
    /// Coordinates in bin order.
    xs: [CudaSlice<T>; 3],
    perm: CudaSlice<i32>,
    bin: CudaSlice<i32>,
    rank: CudaSlice<i32>,
    counts: CudaSlice<i32>,
    start: CudaSlice<i32>,
    sub_start: CudaSlice<i32>,
    sub_bin: CudaSlice<i32>,
    sub_first: CudaSlice<i32>,
    sub_len: CudaSlice<i32>,
    nsub: usize,
    sorted: bool,
}

/// GPU NUFFT plan.
pub struct GpuPlan<T: Real> {
    shape: PlanShape,
    ncoef: usize,
    cfg: SpreadConfig,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: &'static str,
    funcs: Funcs,
    fft: CudaFft,
    coef: CudaSlice<T>,
    weights: [CudaSlice<T>; 3],
    grid: CudaSlice<T>,
    pts: Points<T>,
    /// Strengths (type 1) or modes (type 2), interleaved complex.
    input: CudaSlice<T>,
    /// Modes (type 1) or values at the points (type 2), interleaved complex.
    output: CudaSlice<T>,
}

impl<T: Real> GpuPlan<T> {
    /// Plans a transform with `modes.len()` ∈ {2, 3} dimensions on device 0.
    pub fn new(ty: NufftType, modes: &[usize], opts: &Options) -> Result<Self, NufftError> {
        Self::with_config(ty, modes, opts, None, None)
    }

    /// As [`GpuPlan::new`], with the spreading bin size and batch forced (tuning).
    pub fn with_config(
        ty: NufftType,
        modes: &[usize],
        opts: &Options,
        bin: Option<usize>,
        batch: Option<usize>,
    ) -> Result<Self, NufftError> {
        let shape = PlanShape::new::<T>(ty, modes, opts)?;
        let i32_max = i32::MAX as usize;
        if shape.grid_len > i32_max || shape.num_modes() > i32_max {
            return Err(NufftError::GridTooLarge(shape.nf[0]));
        }
        let ctx = crate::gpu::open_device(0)?;
        let (dim, nf) = (shape.dim, shape.nf);
        let kernel = Kernel::<T>::new(&shape.params, opts.eps);
        let coef_host = kernel.coef_flat();
        let ncoef = coef_host.len() / shape.params.ns;
        let cfg = SpreadConfig::choose(dim, shape.params.ns, size_of::<T>(), bin, batch);
        let stream = ctx.default_stream();
        let arch = crate::gpu::device_arch(&ctx)?;
        let funcs = Self::load(&ctx, arch, &shape, ncoef, &cfg)?;
        let ft = fft_type::<T>();
        let fft = if dim == 2 {
            CudaFft::plan_2d(nf[0] as i32, nf[1] as i32, ft, stream.clone())
        } else {
            CudaFft::plan_3d(nf[0] as i32, nf[1] as i32, nf[2] as i32, ft, stream.clone())
        }?;
        let [w0, w1, w2] = shape.weights::<T>();
        let up = |v: &[T]| stream.clone_htod(v).map_err(NufftError::from);
        let weights = [up(&w0)?, up(&w1)?, up(&w2)?];
        let one = || stream.alloc_zeros::<T>(1).map_err(NufftError::from);
        let one_i = || stream.alloc_zeros::<i32>(1).map_err(NufftError::from);
        let pts = Points {
            m: 0,
            x: [one()?, one()?, one()?],
            xs: [one()?, one()?, one()?],
            perm: one_i()?,
            bin: one_i()?,
            rank: one_i()?,
            counts: one_i()?,
            start: one_i()?,
            sub_start: one_i()?,
            sub_bin: one_i()?,
            sub_first: one_i()?,
            sub_len: one_i()?,
            nsub: 0,
            sorted: false,
        };
        Ok(GpuPlan {
            ncoef,
            cfg,
            coef: stream.clone_htod(&coef_host)?,
            weights,
            grid: stream.alloc_zeros::<T>(2 * shape.grid_len)?,
            shape,
            pts,
            input: one()?,
            output: one()?,
            funcs,
            fft,
            arch,
            ctx,
            stream,
        })
    }

    fn load(
        ctx: &Arc<CudaContext>,
        arch: &'static str,
        shape: &PlanShape,
        ncoef: usize,
        cfg: &SpreadConfig,
    ) -> Result<Funcs, NufftError> {
        let (dim, ns, real_bytes) = (shape.dim, shape.params.ns, size_of::<T>());
        let defines = nufft_defines(dim, ns, ncoef, real_bytes == 8, cfg);
        let ptx = crate::gpu::compile_ptx_cached("nufft_spread.cu", NUFFT_SRC, &defines, arch)?;
        let module = ctx.load_module(ptx)?;
        let f = |name: &str| module.load_function(name).map_err(NufftError::from);
        let spread = f("nufft_spread")?;
        let shared = cfg.shared_bytes(dim, ns, real_bytes, ncoef);
        spread
            .set_attribute(
                CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shared as i32,
            )
            .map_err(|e| {
                NufftError::Gpu(GpuError::Failed(format!(
                    "spreading needs {shared} bytes of shared memory per block: {e:?}"
                )))
            })?;
        Ok(Funcs {
            bin_count: f("nufft_bin_count")?,
            scan: f("nufft_scan")?,
            scatter: f("nufft_scatter")?,
            subprob: f("nufft_subprob")?,
            spread,
            interp: f("nufft_interp")?,
            extract: f("nufft_extract")?,
            fill: f("nufft_fill")?,
        })
    }

    /// Recompiles the spreading kernel for another bin size and batch (tuning); the points
    /// must be sorted again ([`GpuPlan::sort_resident`]) before the next spread.
    pub fn set_spread_config(
        &mut self,
        bin: Option<usize>,
        batch: Option<usize>,
    ) -> Result<(), NufftError> {
        let (dim, ns) = (self.shape.dim, self.shape.params.ns);
        let cfg = SpreadConfig::choose(dim, ns, size_of::<T>(), bin, batch);
        self.funcs = Self::load(&self.ctx, self.arch, &self.shape, self.ncoef, &cfg)?;
        self.cfg = cfg;
        self.pts.sorted = false;
        Ok(())
    }

    /// The CUDA stream every operation of the plan is queued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The CUDA context of the plan.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Kernel parameters chosen for the tolerance.
    pub fn kernel_params(&self) -> KernelParams {
        self.shape.params
    }

    /// Fine grid size per axis (unused axes 1).
    pub fn fine_grid(&self) -> [usize; 3] {
        self.shape.nf
    }

    /// Spreading launch geometry.
    pub fn spread_config(&self) -> SpreadConfig {
        self.cfg
    }

    /// Subproblems of the current points.
    pub fn subproblems(&self) -> usize {
        self.pts.nsub
    }

    /// NVRTC target of the loaded kernels.
    pub fn arch(&self) -> &'static str {
        self.arch
    }

    fn nbins(&self) -> [usize; 3] {
        let mut nb = [1usize; 3];
        for (d, n) in nb.iter_mut().enumerate().take(self.shape.dim) {
            *n = self.shape.nf[d].div_ceil(self.cfg.bin[d]);
        }
        nb
    }

    /// Copies coordinates to the device (original order); [`GpuPlan::sort_resident`] then
    /// sorts them.
    pub fn upload_points(&mut self, coords: &[&[T]]) -> Result<(), NufftError> {
        let m = check_coords(coords, self.shape.dim)?;
        if m > i32::MAX as usize {
            return Err(NufftError::Gpu(GpuError::Unsupported(format!(
                "{m} points: the GPU backend takes at most 2^31 - 1 per plan"
            ))));
        }
        let s = self.stream.clone();
        for (d, c) in coords.iter().enumerate() {
            ensure(&s, &mut self.pts.x[d], m.max(1))?;
            ensure(&s, &mut self.pts.xs[d], m.max(1))?;
            if m > 0 {
                s.memcpy_htod(*c, &mut self.pts.x[d].slice_mut(0..m))?;
            }
        }
        for b in [&mut self.pts.perm, &mut self.pts.bin, &mut self.pts.rank] {
            ensure_i32(&s, b, m.max(1))?;
        }
        self.pts.m = m;
        self.pts.sorted = false;
        Ok(())
    }

    /// Bins and sorts the uploaded points on the device (counting sort, scan, scatter,
    /// subproblem list); reads back only the number of subproblems.
    pub fn sort_resident(&mut self) -> Result<(), NufftError> {
        let s = self.stream.clone();
        let m = self.pts.m;
        let nb3 = self.nbins();
        let nb: usize = nb3.iter().product();
        if nb > i32::MAX as usize {
            return Err(NufftError::GridTooLarge(self.shape.nf[0]));
        }
        let p = &mut self.pts;
        ensure_i32(&s, &mut p.counts, nb)?;
        ensure_i32(&s, &mut p.start, nb + 1)?;
        ensure_i32(&s, &mut p.sub_start, nb + 1)?;
        s.memset_zeros(&mut p.counts.slice_mut(0..nb))?;
        let (mi, nbi) = (m as i32, nb as i32);
        let nf = self.shape.nf.map(|v| v as i32);
        let nbv = nb3.map(|v| v as i32);
        if m > 0 {
            let mut b = s.launch_builder(&self.funcs.bin_count);
            b.arg(&p.x[0]).arg(&p.x[1]).arg(&p.x[2]).arg(&mi);
            b.arg(&nf[0]).arg(&nf[1]).arg(&nf[2]);
            b.arg(&nbv[0]).arg(&nbv[1]).arg(&nbv[2]);
            b.arg(&mut p.bin).arg(&mut p.rank).arg(&mut p.counts);
            // SAFETY: argument list matches `nufft_bin_count`; x[d] hold m values for the
            // used axes (axis 2 unused in 2-D), bin and rank m, counts nb.
            unsafe { b.launch(grid_1d(m, 256)) }?;
        }
        let mut b = s.launch_builder(&self.funcs.scan);
        b.arg(&p.counts)
            .arg(&nbi)
            .arg(&mut p.start)
            .arg(&mut p.sub_start);
        let one_block = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1024, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: matches `nufft_scan`; counts hold nb values, start and sub_start nb + 1.
        unsafe { b.launch(one_block) }?;
        if m > 0 {
            let mut b = s.launch_builder(&self.funcs.scatter);
            b.arg(&p.x[0]).arg(&p.x[1]).arg(&p.x[2]).arg(&mi);
            b.arg(&p.bin).arg(&p.rank).arg(&p.start).arg(&mut p.perm);
            let [xs0, xs1, xs2] = &mut p.xs;
            b.arg(xs0).arg(xs1).arg(xs2);
            // SAFETY: matches `nufft_scatter`; every position start[bin] + rank < m.
            unsafe { b.launch(grid_1d(m, 256)) }?;
        }
        let mut nsub = [0i32];
        s.memcpy_dtoh(&p.sub_start.slice(nb..nb + 1), &mut nsub)?;
        let nsub = nsub[0].max(0) as usize;
        for b in [&mut p.sub_bin, &mut p.sub_first, &mut p.sub_len] {
            ensure_i32(&s, b, nsub.max(1))?;
        }
        if nsub > 0 {
            let nsi = nsub as i32;
            let mut b = s.launch_builder(&self.funcs.subprob);
            b.arg(&p.counts)
                .arg(&p.start)
                .arg(&p.sub_start)
                .arg(&nbi)
                .arg(&nsi);
            b.arg(&mut p.sub_bin)
                .arg(&mut p.sub_first)
                .arg(&mut p.sub_len);
            // SAFETY: matches `nufft_subprob`; the subproblem arrays hold nsub entries.
            unsafe { b.launch(grid_1d(nsub, 256)) }?;
        }
        p.nsub = nsub;
        p.sorted = true;
        Ok(())
    }

    /// Copies type-1 strengths or type-2 modes to the device.
    pub fn upload_input(&mut self, input: &[Complex<T>]) -> Result<(), NufftError> {
        self.check_sorted()?;
        self.shape.check_input(input.len(), self.pts.m)?;
        let n_in = input.len();
        let s = self.stream.clone();
        ensure(&s, &mut self.input, 2 * n_in.max(1))?;
        if n_in > 0 {
            s.memcpy_htod(reals(input), &mut self.input.slice_mut(0..2 * n_in))?;
        }
        Ok(())
    }

    fn check_sorted(&self) -> Result<(), NufftError> {
        if !self.pts.sorted {
            return Err(NufftError::NoPoints);
        }
        Ok(())
    }

    /// Zeroes the fine grid.
    pub fn zero_grid(&mut self) -> Result<(), NufftError> {
        self.stream
            .memset_zeros(&mut self.grid)
            .map_err(NufftError::from)
    }

    /// Type 1 only: spreads the resident strengths onto the (zeroed) fine grid.
    pub fn spread_resident(&mut self) -> Result<(), NufftError> {
        let p = &self.pts;
        if p.nsub == 0 {
            return Ok(());
        }
        let c = &self.cfg;
        let blocks = p.nsub.div_ceil(c.groups);
        let (dim, ns) = (self.shape.dim, self.shape.params.ns);
        let shared = c.shared_bytes(dim, ns, size_of::<T>(), self.ncoef);
        let lc = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (c.block_threads() as u32, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        let nb = self.nbins();
        let (nsub, nb1, nb2) = (p.nsub as i32, nb[1] as i32, nb[2] as i32);
        let nf = self.shape.nf.map(|v| v as i32);
        let mut b = self.stream.launch_builder(&self.funcs.spread);
        b.arg(&p.xs[0])
            .arg(&p.xs[1])
            .arg(&p.xs[2])
            .arg(&p.perm)
            .arg(&self.input);
        b.arg(&p.sub_bin)
            .arg(&p.sub_first)
            .arg(&p.sub_len)
            .arg(&nsub);
        b.arg(&self.coef).arg(&mut self.grid);
        b.arg(&nf[0]).arg(&nf[1]).arg(&nf[2]).arg(&nb1).arg(&nb2);
        // SAFETY: matches `nufft_spread`; the subproblems index sorted positions < m, perm
        // maps them to strengths < m (input holds 2m reals), tiles wrap into the grid.
        unsafe { b.launch(lc) }.map(drop).map_err(NufftError::from)
    }

    /// Type 2 only: interpolates the fine grid at the resident points into the output.
    pub fn interp_resident(&mut self) -> Result<(), NufftError> {
        let m = self.pts.m;
        ensure(&self.stream.clone(), &mut self.output, 2 * m.max(1))?;
        if m == 0 {
            return Ok(());
        }
        let p = &self.pts;
        let mi = m as i32;
        let nf = self.shape.nf.map(|v| v as i32);
        let mut b = self.stream.launch_builder(&self.funcs.interp);
        b.arg(&p.xs[0])
            .arg(&p.xs[1])
            .arg(&p.xs[2])
            .arg(&p.perm)
            .arg(&mi);
        b.arg(&self.coef).arg(&self.grid);
        b.arg(&nf[0]).arg(&nf[1]).arg(&nf[2]).arg(&mut self.output);
        // SAFETY: matches `nufft_interp`; output holds 2m reals, perm is a permutation of
        // 0..m, the footprints wrap into the grid.
        unsafe { b.launch(grid_1d(m, 128)) }
            .map(drop)
            .map_err(NufftError::from)
    }

    /// In-place FFT of the fine grid (`+i` for isign ≥ 0).
    pub fn fft_resident(&mut self) -> Result<(), NufftError> {
        let dir = if self.shape.positive { 1 } else { -1 };
        let handle = self.fft.handle();
        let (ptr, _sync) = self.grid.device_ptr_mut(&self.stream);
        // SAFETY: the plan was made by `fft_type::<T>()` for this grid's shape on this
        // stream, and `ptr` is the grid's device address.
        unsafe { exec_fft_inplace::<T>(handle, ptr, dir) }.map_err(NufftError::from)
    }

    /// Type 1: modes × `1/φ̂` from the grid into the resident output; type 2: resident
    /// modes × `1/φ̂` into the (zeroed) grid.
    pub fn deconv_resident(&mut self) -> Result<(), NufftError> {
        let n = self.shape.num_modes();
        let n3 = self.shape.modes3.map(|v| v as i32);
        let nf = self.shape.nf.map(|v| v as i32);
        let [w0, w1, w2] = &self.weights;
        // Both kernels take (source, destination, weights, modes, fine grid).
        let (func, src, dst) = match self.shape.ty {
            NufftType::Type1 => {
                ensure(&self.stream, &mut self.output, 2 * n)?;
                (&self.funcs.extract, &self.grid, &mut self.output)
            }
            NufftType::Type2 => (&self.funcs.fill, &self.input, &mut self.grid),
        };
        let mut b = self.stream.launch_builder(func);
        b.arg(src).arg(dst).arg(w0).arg(w1).arg(w2);
        b.arg(&n3[0]).arg(&n3[1]).arg(&n3[2]);
        b.arg(&nf[0]).arg(&nf[1]).arg(&nf[2]);
        // SAFETY: matches `nufft_extract` and `nufft_fill`; the mode side (output, or input
        // checked on upload) holds 2n reals, the grid 2·Π nf, weights n_d each.
        unsafe { b.launch(grid_1d(n, 256)) }
            .map(drop)
            .map_err(NufftError::from)
    }

    /// The whole transform on resident data: type 1 zero → spread → FFT → extract; type 2
    /// zero → fill → FFT → interpolate.
    pub fn execute_resident(&mut self) -> Result<(), NufftError> {
        self.check_sorted()?;
        self.zero_grid()?;
        match self.shape.ty {
            NufftType::Type1 => {
                self.spread_resident()?;
                self.fft_resident()?;
                self.deconv_resident()
            }
            NufftType::Type2 => {
                self.deconv_resident()?;
                self.fft_resident()?;
                self.interp_resident()
            }
        }
    }

    /// Copies the resident output to the host.
    pub fn download_output(&mut self, output: &mut [Complex<T>]) -> Result<(), NufftError> {
        self.shape.check_output(output.len(), self.pts.m)?;
        let n_out = output.len();
        if n_out > 0 {
            self.stream
                .memcpy_dtoh(&self.output.slice(0..2 * n_out), reals_mut(output))?;
        }
        Ok(())
    }
}

impl<T: Real> NufftBackend<T> for GpuPlan<T> {
    fn backend_name(&self) -> &'static str {
        "gpu"
    }

    fn nufft_type(&self) -> NufftType {
        self.shape.ty
    }

    fn modes(&self) -> &[usize] {
        &self.shape.modes
    }

    fn set_points(&mut self, coords: &[&[T]]) -> Result<(), NufftError> {
        self.upload_points(coords)?;
        self.sort_resident()
    }

    fn num_points(&self) -> usize {
        self.pts.m
    }

    fn execute(
        &mut self,
        input: &[Complex<T>],
        output: &mut [Complex<T>],
    ) -> Result<(), NufftError> {
        if self.pts.sorted {
            self.shape.check_output(output.len(), self.pts.m)?;
        }
        self.upload_input(input)?;
        self.execute_resident()?;
        self.download_output(output)
    }
}
