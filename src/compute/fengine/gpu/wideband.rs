//! GPU implementation of [`FBackend`] (wideband): `kernels/fengine/pfb_fir.cu` (decode + PFB FIR,
//! writing the unzipped sub-FFT inputs), a batched cuFFT C2C of length N/n, and
//! `kernels/fengine/postproc.cu` (last radix-n pass, real-FFT fix-up, delay/phase/gain, dither,
//! quantisation). Kernels are compiled with NVRTC per configuration (constants as `-D`).
//!
//! The results match [`crate::compute::fengine::CpuBackend`] to float rounding: the dither
//! hash and the quantisation are the same; values that land within float rounding of a
//! rounding boundary may differ by one LSB.
//!
//! The backend runs on a stream of its own (not the legacy default stream), which puts its
//! context in cudarc's multi-stream mode: every device buffer tracks its last reader and
//! writer with events. [`super::pipeline::GpuPipeline`] builds on that to overlap
//! host→device copies, compute and device→host copies on three streams, and
//! [`super::batches::Pipelined`] to keep several engine batches in flight;
//! [`FBackend::process`] here stays a synchronous copy-compute-copy per block.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cufft::sys::{cufftType, float2};
use cudarc::cufft::{CudaFft, FftDirection};
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, HostSlice, LaunchConfig, PinnedHostSlice,
    PushKernelArg,
};
#[cfg(test)]
use num_complex::Complex32;

use super::block::{ensure, upload_pinned_pols, DeviceBlock, HostParams, Staged, IN_PAD};
use super::staged::{StagedCompute, WorkBuffers};
use crate::compute::fengine::cpu::stats::InputStats;
use crate::compute::fengine::cpu::validate_block;
use crate::compute::fengine::design::weights::pfb_weights;
use crate::compute::fengine::FBackend;
use crate::compute::fengine::{Block, BlockStats, Dither, FConfig, FError, Samples};
use crate::gpu::GpuError;

/// PFB FIR kernel source (embedded so binaries need no kernel files at run time).
pub const PFB_FIR_SRC: &str = crate::kernel_source!("fengine/pfb_fir.cu");
/// Post-processing kernel source (the shared dither/quantiser header in front).
pub const POSTPROC_SRC: &str =
    crate::kernel_source!(["fengine/quant.cuh"], "fengine" / "postproc.cu");

const POST_TILE: usize = 32;

/// NVRTC defines for `pfb_fir` (`in_bits` 0 = int16 input, else packed width).
pub(crate) fn fir_defines(
    cfg: &FConfig,
    unzip: usize,
    in_bits: u32,
) -> Vec<(&'static str, String)> {
    vec![
        ("N", cfg.pfb_channels().to_string()),
        ("TAPS", cfg.taps.to_string()),
        ("UNZIP", unzip.to_string()),
        ("IN_BITS", in_bits.to_string()),
    ]
}

/// NVRTC defines for `postproc`.
pub(crate) fn postproc_defines(cfg: &FConfig, unzip: usize) -> Vec<(&'static str, String)> {
    vec![
        ("N", cfg.pfb_channels().to_string()),
        ("UNZIP", unzip.to_string()),
        (
            "QMAX",
            if cfg.out_bits == 4 { "7" } else { "127" }.to_string(),
        ),
        ("FOUR_BIT", u32::from(cfg.out_bits == 4).to_string()),
    ]
}

/// Unzip factor used by [`GpuBackend::new`]: 1 up to 4096 channels (one cuFFT pass); 2 up
/// to 32768 (H100, 32k channels, `gpucbf bench fgpu`: FIR, FFT and post-processing take
/// 289, 406 and 312 us at unzip 2 against 289, 365 and 418 us at unzip 4, whose
/// post-processing needs ~124 registers); 4 above.
pub(crate) fn default_unzip(channels: usize) -> usize {
    match channels {
        0..=4096 => 1,
        4097..=32768 => 2,
        _ => 4,
    }
}

/// Launch parameters of the kernels ([`Tuning::for_unzip`] is what [`GpuBackend`] uses;
/// `gpucbf bench fgpu` sweeps them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// Threads per FIR block (a multiple of 32).
    pub fir_threads: u32,
    /// Spectra per FIR thread run (the TAPS − 1 rows before each run are read twice).
    pub fir_run: usize,
    /// Thread rows of the 32 × 32 post-processing tile (2, 4, 8, 16 or 32).
    pub post_rows: u32,
    /// Spectrum tiles (of 32) each post-processing block walks (its per-channel set-up is
    /// done once for all of them).
    pub post_tiles: usize,
    /// Post-processing loads one spectrum ahead (`POST_PREFETCH`).
    pub post_prefetch: bool,
    /// Post-processing blocks per SM that the register allocation must allow (0: no bound).
    pub post_min_blocks: u32,
    /// Bench diagnostic: FIR without the digitiser statistics (results then lack them).
    pub fir_stats: bool,
    /// FIR decoder that steps whole words between rows (`FIR_FAST`; false: the general one).
    pub fir_fast: bool,
    /// Post-processing rotation by `__sincosf` after exact reduction (`POST_FAST_SINCOS`;
    /// false: `sincospif`).
    pub post_fast_sincos: bool,
    /// FIR output stores with the streaming cache hint (`FIR_STCS`).
    pub fir_stcs: bool,
    /// FIR blocks per SM that the register allocation must allow (`__launch_bounds__`;
    /// 0: no bound).
    pub fir_min_blocks: u32,
    /// 0: runs of `fir_run` spectra. w > 0: the spectra are split evenly over as many FIR
    /// blocks as fit on the GPU w times at once (from the kernel's occupancy), so that the
    /// last wave is not a partial one; `fir_run` is then unused. H100 (`GPUCBF_BENCH_VARIANTS=1
    /// gpucbf bench fgpu`), FIR at 4k channels, unzip 1: 274 us with 2 waves against 278 us
    /// in runs of 128 spectra; 1k: 280 against 287 us; no worse than runs of 128 at any
    /// bench configuration but 32k unzip 4 (+2 us).
    pub fir_waves: u32,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            fir_threads: 128,
            fir_run: 128,
            post_rows: 4,
            fir_stats: true,
            fir_fast: true,
            post_fast_sincos: true,
            fir_stcs: false,
            fir_min_blocks: 0,
            fir_waves: 2,
            post_tiles: 4,
            post_prefetch: false,
            post_min_blocks: 0,
        }
    }
}

impl Tuning {
    /// What [`GpuBackend`] uses at unzip factor `unzip`: the defaults with post-processing
    /// launch bounds as tight as its registers allow without spilling (sm_90: 64 registers
    /// at unzip 1, 80 at 2; unzip 4 needs ~124). H100, 4k channels, unzip 1: 253 us with 8
    /// blocks/SM against 284 us without bounds; 32k channels, unzip 2: 311 us with 2-row
    /// tiles and 12 blocks/SM against 346 us with 4 rows and 6 blocks/SM, the same threads
    /// per SM (`GPUCBF_BENCH_VARIANTS=1 gpucbf bench fgpu`).
    pub fn for_unzip(unzip: usize) -> Tuning {
        let (post_rows, post_min_blocks) = match unzip {
            1 => (4, 8),
            2 => (2, 12),
            _ => (4, 0),
        };
        Tuning {
            post_rows,
            post_min_blocks,
            ..Tuning::default()
        }
    }
}

/// What a compiled FIR kernel depends on: input width, statistics, fast decoder, streaming
/// stores, (threads, min blocks) of its launch bounds.
type FirKey = (u32, bool, bool, bool, (u32, u32));

/// GPU F-engine backend (wideband; narrowband is refused at construction).
pub struct GpuBackend {
    cfg: FConfig,
    unzip: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: &'static str,
    /// Streaming multiprocessors of the device (FIR run balancing).
    sm_count: usize,
    tuning: Tuning,
    fir_fns: HashMap<FirKey, CudaFunction>,
    post_fns: HashMap<(u32, bool, bool, u32), CudaFunction>,
    plans: HashMap<usize, CudaFft>,
    weights: CudaSlice<f32>,
    fir_out: CudaSlice<float2>,
    fft_out: CudaSlice<float2>,
    blk: DeviceBlock,
    params: HostParams,
}

impl GpuBackend {
    /// Opens device 0 with the default unzip factor. Fails cleanly without a GPU.
    pub fn new(cfg: FConfig) -> Result<Self, FError> {
        let n = default_unzip(cfg.channels);
        Self::with_unzip(cfg, n)
    }

    /// Opens device 0 with unzip factor `unzip` ∈ {1, 2, 4}: cuFFT runs n batched
    /// transforms of length N/n per spectrum and the post-processing does the last pass.
    pub fn with_unzip(cfg: FConfig, unzip: usize) -> Result<Self, FError> {
        cfg.validate()?;
        if cfg.narrowband.is_some() {
            return Err(FError::Gpu(GpuError::Unsupported(
                "narrowband outputs are not implemented on the GPU backend yet: use --backend cpu"
                    .into(),
            )));
        }
        let n = cfg.pfb_channels();
        if ![1, 2, 4].contains(&unzip) || n / unzip < 2 {
            return Err(FError::BadParameter {
                what: "unzip",
                why: format!("{unzip} must be 1, 2 or 4 and at most channels/2 ({n} channels)"),
            });
        }
        if n > i32::MAX as usize / 4 {
            return Err(FError::BadParameter {
                what: "channels",
                why: format!("{n} is too large for the GPU kernels"),
            });
        }
        let ctx = crate::gpu::open_device(0)?;
        let attr = |a| ctx.attribute(a).map_err(FError::from);
        let arch = crate::gpu::device_arch(&ctx)?;
        // A stream of our own (not the legacy default stream, which would serialise with
        // the pipeline's copy streams). Creating it first puts the context in multi-stream
        // mode, so every buffer below tracks its last reader and writer with events and
        // uses on other streams wait for them.
        let stream = ctx.new_stream()?;
        let sm_count =
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize;
        let w = pfb_weights(cfg.pfb_step(), cfg.taps, cfg.w_cutoff, cfg.window)?;
        let weights = stream.clone_htod(&w)?;
        let mut be = GpuBackend {
            unzip,
            arch,
            sm_count,
            tuning: Tuning::for_unzip(unzip),
            fir_fns: HashMap::new(),
            post_fns: HashMap::new(),
            plans: HashMap::new(),
            weights,
            fir_out: stream.alloc_zeros(1)?,
            fft_out: stream.alloc_zeros(1)?,
            blk: DeviceBlock::new(&stream, cfg.channels)?,
            params: HostParams::new(cfg.channels),
            cfg,
            ctx,
            stream,
        };
        be.post_fn()?;
        Ok(be)
    }

    /// The launch parameters in use.
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Changes the launch parameters (kernels are compiled on first use).
    pub fn set_tuning(&mut self, t: Tuning) -> Result<(), FError> {
        if t.fir_threads == 0 || !t.fir_threads.is_multiple_of(32) || t.fir_threads > 1024 {
            return Err(FError::BadParameter {
                what: "fir_threads",
                why: format!("{} must be a multiple of 32 up to 1024", t.fir_threads),
            });
        }
        if ![2, 4, 8, 16, 32].contains(&t.post_rows) || t.fir_run == 0 || t.post_tiles == 0 {
            return Err(FError::BadParameter {
                what: "post_rows",
                why: format!(
                    "{} must be 2, 4, 8, 16 or 32 (fir_run {} and post_tiles {} must be positive)",
                    t.post_rows, t.fir_run, t.post_tiles
                ),
            });
        }
        if 32 * t.post_rows * t.post_min_blocks > 2048 {
            return Err(FError::BadParameter {
                what: "post_min_blocks",
                why: format!(
                    "{} blocks of {} threads do not fit on one SM",
                    t.post_min_blocks,
                    32 * t.post_rows
                ),
            });
        }
        if t.fir_waves > 64 {
            return Err(FError::BadParameter {
                what: "fir_waves",
                why: format!("{} must be at most 64", t.fir_waves),
            });
        }
        if t.fir_threads * t.fir_min_blocks > 2048 {
            return Err(FError::BadParameter {
                what: "fir_min_blocks",
                why: format!(
                    "{} blocks of {} threads do not fit on one SM",
                    t.fir_min_blocks, t.fir_threads
                ),
            });
        }
        self.tuning = t;
        self.post_fn()?;
        Ok(())
    }

    /// Describes the device block's input in place: both pols hold `bytes` of packed
    /// `bits`-wide samples, the first window sample of pol p at staged index `first[p]`.
    pub(crate) fn stage_in_place(&mut self, bits: u32, first: [usize; 2], bytes: usize) {
        self.blk.staged = first.map(|first| Staged {
            in_bits: bits,
            stat_bits: bits,
            first,
            bytes,
        });
    }

    /// Exchanges the device block the kernels work on with `b`.
    pub(crate) fn swap_block(&mut self, b: &mut DeviceBlock) {
        std::mem::swap(&mut self.blk, b);
    }

    fn post_fn(&mut self) -> Result<CudaFunction, FError> {
        let t = &self.tuning;
        let key = (
            t.post_rows,
            t.post_fast_sincos,
            t.post_prefetch,
            t.post_min_blocks,
        );
        if let Some(f) = self.post_fns.get(&key) {
            return Ok(f.clone());
        }
        let mut defines = postproc_defines(&self.cfg, self.unzip);
        defines.push(("ROWS", key.0.to_string()));
        defines.push(("POST_FAST_SINCOS", u32::from(key.1).to_string()));
        defines.push(("POST_PREFETCH", u32::from(key.2).to_string()));
        defines.push(("POST_MIN_BLOCKS", key.3.to_string()));
        let ptx = crate::gpu::compile_ptx("postproc.cu", POSTPROC_SRC, &defines, self.arch)?;
        let f = self.ctx.load_module(ptx)?.load_function("postproc")?;
        self.post_fns.insert(key, f.clone());
        Ok(f)
    }

    /// The unzip factor: cuFFT runs this many transforms of length N/unzip per spectrum.
    pub fn unzip(&self) -> usize {
        self.unzip
    }

    /// The stream all work is queued on (the backend's own).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The CUDA context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn fir_fn(&mut self, in_bits: u32) -> Result<CudaFunction, FError> {
        let t = &self.tuning;
        let bounds = if t.fir_min_blocks > 0 {
            (t.fir_threads, t.fir_min_blocks)
        } else {
            (0, 0)
        };
        let key = (in_bits, t.fir_stats, t.fir_fast, t.fir_stcs, bounds);
        if let Some(f) = self.fir_fns.get(&key) {
            return Ok(f.clone());
        }
        let mut defines = fir_defines(&self.cfg, self.unzip, in_bits);
        defines.push(("FIR_STATS", u32::from(key.1).to_string()));
        defines.push(("FIR_FAST", u32::from(key.2).to_string()));
        defines.push(("FIR_STCS", u32::from(key.3).to_string()));
        defines.push(("FIR_MAX_THREADS", bounds.0.to_string()));
        defines.push(("FIR_MIN_BLOCKS", bounds.1.to_string()));
        let ptx = crate::gpu::compile_ptx("pfb_fir.cu", PFB_FIR_SRC, &defines, self.arch)?;
        let f = self.ctx.load_module(ptx)?.load_function("pfb_fir")?;
        self.fir_fns.insert(key, f.clone());
        Ok(f)
    }

    /// Copies each pol's needed input (from the byte holding its first sample) to the device.
    fn stage_input(&mut self, block: &Block) -> Result<(), FError> {
        let needed = self.cfg.input_samples_needed(block.spectra);
        let mut parts: [(&[u8], Staged); 2] = [(&[], self.blk.staged[0]); 2];
        for (p, pol) in block.pols.iter().enumerate() {
            parts[p] = match pol.samples {
                Samples::Packed { data, bits, .. } => {
                    let start = pol.offset / 8 * 8;
                    let first = pol.offset - start;
                    let b0 = start * bits as usize / 8;
                    let bytes = ((first + needed) * bits as usize).div_ceil(8);
                    let Some(d) = data.get(b0..b0 + bytes) else {
                        return Err(FError::InputTooShort {
                            pol: p,
                            needed: b0 + bytes,
                            have: data.len(),
                        });
                    };
                    let s = Staged {
                        in_bits: bits,
                        stat_bits: bits,
                        first,
                        bytes,
                    };
                    (d, s)
                }
                Samples::Decoded { data, bits } => {
                    let d = &data[pol.offset..pol.offset + needed];
                    // SAFETY: i16 has no padding and u8 has alignment 1; the bytes are read
                    // back on the device as little-endian int16 (all CUDA hosts are
                    // little-endian).
                    let d =
                        unsafe { std::slice::from_raw_parts(d.as_ptr().cast::<u8>(), 2 * d.len()) };
                    let s = Staged {
                        in_bits: 0,
                        stat_bits: bits,
                        first: 0,
                        bytes: d.len(),
                    };
                    (d, s)
                }
            };
        }
        let stride = parts[0].1.bytes.max(parts[1].1.bytes).next_multiple_of(4) + IN_PAD;
        ensure(&self.stream, &mut self.blk.input, 2 * stride)?;
        self.blk.in_stride = stride;
        for (p, (d, s)) in parts.iter().enumerate() {
            let mut dst = self.blk.input.slice_mut(p * stride..p * stride + d.len());
            self.stream.memcpy_htod(*d, &mut dst)?;
            self.blk.staged[p] = *s;
        }
        Ok(())
    }

    /// Uploads gains, per-spectrum delay/phase and dither keys.
    fn stage_params(&mut self, block: &Block) -> Result<(), FError> {
        let b = &mut self.blk;
        let dev = (&mut b.delay, &mut b.keys, &mut b.gains);
        self.params.upload(&self.cfg, block, &self.stream, dev)
    }

    /// Queues the FIR of `m` staged spectra (buffers sized by [`StagedCompute::compute`]).
    pub(crate) fn launch_fir(&mut self, m: usize) -> Result<(), FError> {
        let n = self.cfg.pfb_channels();
        // FIR: one launch for both pols when they share a format, else one each.
        let st = self.blk.staged;
        let threads = self.tuning.fir_threads;
        let groups: &[(usize, u32)] =
            if st[0].in_bits == st[1].in_bits && st[0].stat_bits == st[1].stat_bits {
                &[(0, 2)]
            } else {
                &[(0, 1), (1, 1)]
            };
        for &(pol0, npol) in groups {
            let f = self.fir_fn(st[pol0].in_bits)?;
            let cols = n.div_ceil(threads as usize);
            let run = self.fir_run_for(&f, m, cols * npol as usize)?;
            let cfg = LaunchConfig {
                grid_dim: (cols as u32, m.div_ceil(run) as u32, npol),
                block_dim: (threads, 1, 1),
                shared_mem_bytes: 0,
            };
            let stride = self.blk.in_stride as i64;
            let (pol0_i, f0, f1) = (pol0 as i32, st[0].first as i32, st[1].first as i32);
            let (mi, run, sb) = (m as i32, run as i32, st[pol0].stat_bits as i32);
            let mut b = self.stream.launch_builder(&f);
            b.arg(&self.blk.input)
                .arg(&stride)
                .arg(&pol0_i)
                .arg(&f0)
                .arg(&f1)
                .arg(&self.weights)
                .arg(&mut self.fir_out)
                .arg(&mi)
                .arg(&run)
                .arg(&sb)
                .arg(&mut self.blk.in_stats);
            // SAFETY: argument types and order match `pfb_fir`; each pol's staged input holds
            // first + (m + taps − 1)·2N samples plus IN_PAD bytes, the weights hold taps·2N
            // floats and fir_out holds m·2N complex values.
            unsafe { b.launch(cfg) }?;
        }
        Ok(())
    }

    /// Spectra per FIR block for `m` spectra over `cols` blocks per run (see
    /// [`Tuning::fir_waves`]).
    fn fir_run_for(&self, f: &CudaFunction, m: usize, cols: usize) -> Result<usize, FError> {
        let waves = self.tuning.fir_waves as usize;
        if waves == 0 {
            return Ok(self.tuning.fir_run.max(1));
        }
        let per_sm =
            f.occupancy_max_active_blocks_per_multiprocessor(self.tuning.fir_threads, 0, None)?
                as usize;
        let resident = per_sm.max(1) * self.sm_count;
        let runs = (waves * resident / cols.max(1)).clamp(1, m.max(1));
        Ok(m.div_ceil(runs).max(1))
    }

    /// Queues the batched FFT of `m` spectra.
    pub(crate) fn launch_fft(&mut self, m: usize) -> Result<(), FError> {
        let l = self.cfg.pfb_channels() / self.unzip;
        let batch = m * 2 * self.unzip;
        if !self.plans.contains_key(&batch) {
            let li = l as i32;
            let plan = CudaFft::plan_many(
                &[li],
                None,
                1,
                li,
                None,
                1,
                li,
                cufftType::CUFFT_C2C,
                batch as i32,
                self.stream.clone(),
            )?;
            self.plans.insert(batch, plan);
        }
        let plan = &self.plans[&batch];
        plan.exec_c2c(&mut self.fir_out, &mut self.fft_out, FftDirection::Forward)?;
        Ok(())
    }

    /// Queues the post-processing of `m` spectra into device output spectra
    /// out_first..out_first + m.
    pub(crate) fn launch_post(&mut self, m: usize, out_first: usize) -> Result<(), FError> {
        let n = self.cfg.pfb_channels();
        let cfg = LaunchConfig {
            grid_dim: (
                (n / 2).div_ceil(POST_TILE) as u32,
                m.div_ceil(POST_TILE).div_ceil(self.tuning.post_tiles) as u32,
                1,
            ),
            block_dim: (POST_TILE as u32, self.tuning.post_rows, 1),
            shared_mem_bytes: 0,
        };
        if out_first + m > i32::MAX as usize {
            return Err(FError::BadParameter {
                what: "out_first",
                why: format!("spectra {out_first}+{m} exceed the kernel's 31-bit indices"),
            });
        }
        let (mi, of, sph) = (m as i32, out_first as i64, self.cfg.spectra_per_heap as i32);
        let dither = i32::from(self.cfg.dither == Dither::Uniform);
        let f = self.post_fn()?;
        let blk = &mut self.blk;
        let mut b = self.stream.launch_builder(&f);
        b.arg(&self.fft_out)
            .arg(&mut blk.out)
            .arg(&blk.gains)
            .arg(&blk.delay)
            .arg(&blk.keys)
            .arg(&mi)
            .arg(&of)
            .arg(&sph)
            .arg(&dither)
            .arg(&mut blk.sat);
        // SAFETY: argument types and order match `postproc`; fft_out holds m·2N values, the
        // device output covers spectra out_first..out_first + m (ensured by the caller),
        // gains hold 2·C, delay and keys 2·m entries (device allocations, so the kernel's
        // 16-byte loads of both pols' delay and keys are aligned).
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Copies the counters back (synchronises the stream).
    fn read_stats(&self, m: usize) -> Result<BlockStats, FError> {
        let mut st = [0u64; 4];
        let mut sat = [0u64; 2];
        self.stream.memcpy_dtoh(&self.blk.in_stats, &mut st)?;
        self.stream.memcpy_dtoh(&self.blk.sat, &mut sat)?;
        let samples = (m * self.cfg.pfb_step()) as u64;
        let input = [0, 1].map(|p| InputStats {
            sum_sq: st[p],
            samples,
            clipped: st[2 + p],
            bits: self.blk.staged[p].stat_bits,
        });
        Ok(BlockStats {
            saturated: sat,
            input: Some(input),
        })
    }

    /// The FIR output of the last block (tests): per (spectrum, pol) N complex values in
    /// unzipped order (sub-FFT r holds z[n·m' + r] at position m').
    #[cfg(test)]
    pub(crate) fn fir_output(&self, m: usize) -> Result<Vec<Complex32>, FError> {
        let len = m * 2 * self.cfg.pfb_channels();
        let mut v = vec![float2 { x: 0.0, y: 0.0 }; len];
        self.stream
            .memcpy_dtoh(&self.fir_out.slice(..len), &mut v)?;
        Ok(v.iter().map(|c| Complex32::new(c.x, c.y)).collect())
    }

    /// Bench: copies both pols' input from pinned host buffers to the staged positions.
    pub(crate) fn upload_pinned(&mut self, src: [&PinnedHostSlice<u8>; 2]) -> Result<(), FError> {
        let b = &mut self.blk;
        let room = b.staged.map(|s| s.bytes);
        upload_pinned_pols(&self.stream, &mut b.input, b.in_stride, room, src)
    }

    /// Bench: copies the device output to a pinned host buffer (queued, not synchronised).
    pub(crate) fn download_pinned(&self, dst: &mut PinnedHostSlice<u8>) -> Result<(), FError> {
        let len = HostSlice::len(dst).min(self.blk.out.len());
        self.stream
            .memcpy_dtoh(&self.blk.out.slice(..len), dst)
            .map_err(FError::from)
    }
}

/// FIR, FFT and post-processing; the counters are the digitiser statistics and the
/// saturation counts.
impl StagedCompute for GpuBackend {
    fn fits(&self, m: usize) -> bool {
        m.div_ceil(POST_TILE) <= 65535 && m * 2 * self.unzip <= i32::MAX as usize
    }

    fn work_buffers(&mut self) -> WorkBuffers<'_> {
        let n = self.cfg.pfb_channels();
        (&self.stream, &mut self.fir_out, &mut self.fft_out, n)
    }

    fn reset_counters(&mut self) -> Result<(), FError> {
        self.stream.memset_zeros(&mut self.blk.in_stats)?;
        self.stream
            .memset_zeros(&mut self.blk.sat)
            .map_err(FError::from)
    }

    fn launch_stages(&mut self, m: usize, out_first: usize) -> Result<(), FError> {
        self.launch_fir(m)?;
        self.launch_fft(m)?;
        self.launch_post(m, out_first)
    }
}

impl FBackend for GpuBackend {
    fn config(&self) -> &FConfig {
        &self.cfg
    }

    fn process(&mut self, block: &Block, out: &mut [u8]) -> Result<BlockStats, FError> {
        let n_out = validate_block(&self.cfg, block, out)?;
        let m = block.spectra;
        self.stage_input(block)?;
        self.stage_params(block)?;
        ensure(&self.stream, &mut self.blk.out, out.len())?;
        if block.out_first != 0 || m != n_out {
            // Only part of `out` is written: keep the rest as the caller had it.
            let mut d = self.blk.out.slice_mut(..out.len());
            self.stream.memcpy_htod(&*out, &mut d)?;
        }
        self.compute(m, block.out_first)?;
        self.stream
            .memcpy_dtoh(&self.blk.out.slice(..out.len()), out)?;
        self.read_stats(m)
    }
}
