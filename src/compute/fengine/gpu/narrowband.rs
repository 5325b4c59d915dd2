//! GPU implementation of [`FBackend`] for narrowband outputs (dsp.md §8): `kernels/fengine/ddc.cu`
//! (decode + mixer + low-pass FIR + subsampling, tuned by [`super::ddc_tune`]),
//! `kernels/fengine/pfb_fir_complex.cu` (complex-input PFB FIR), a batched cuFFT C2C of length N and
//! `kernels/fengine/postproc_nb.cu` (band-half swap, outer-half discard or none, delay/phase/gain,
//! dither, quantisation). Kernels are compiled with NVRTC per configuration.
//!
//! The coarse delay is an input offset (a multiple of S) and each block's DDC runs from each
//! pol's offset, so the PFB always starts at DDC output 0. Narrowband outputs have no
//! digitiser statistics (like katgpucbf).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cudarc::cufft::sys::{cufftType, float2};
use cudarc::cufft::{CudaFft, FftDirection};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, HostSlice, LaunchConfig, PinnedHostSlice,
    PushKernelArg,
};
#[cfg(test)]
use num_complex::Complex32;

use super::block::{ensure, upload_pinned_pols, DeviceBlock, HostParams};
use super::ddc_tune::{
    autotune, candidates, launch_ddc, load_ddc, valid_tuning, DdcLaunch, DdcTuning,
};
use super::staged::{StagedCompute, WorkBuffers};
use crate::compute::fengine::cpu::ddc::{ddc_weights, Ddc, MixerFrequency};
use crate::compute::fengine::cpu::validate_block;
use crate::compute::fengine::design::weights::pfb_weights;
use crate::compute::fengine::FBackend;
use crate::compute::fengine::{Block, BlockStats, Dither, FConfig, FError, Samples};

/// Complex PFB FIR kernel source.
pub const PFB_FIR_COMPLEX_SRC: &str = crate::kernel_source!("fengine/pfb_fir_complex.cu");
/// Narrowband post-processing kernel source.
pub const POSTPROC_NB_SRC: &str =
    crate::kernel_source!(["fengine/quant.cuh"], "fengine" / "postproc_nb.cu");

const FIR_THREADS: u32 = 128;
const FIR_RUN: usize = 64;
const POST_TILE: usize = 32;
/// Bytes after each pol's staged input (the DDC decoder reads whole runs of ≤ 64 bytes).
pub(crate) const IN_PAD: usize = 128;
/// Largest DDC taps per phase (W = ceil(taps/S)) the kernel unrolls.
pub(crate) const MAX_DDC_TAPS_PER_PHASE: usize = 64;
/// Largest PFB tap count the complex FIR unrolls.
pub(crate) const MAX_GPU_TAPS: usize = 64;

/// NVRTC defines for `pfb_fir_complex`.
pub(crate) fn fir_complex_defines(cfg: &FConfig) -> Vec<(&'static str, String)> {
    vec![
        ("N", cfg.pfb_channels().to_string()),
        ("TAPS", cfg.taps.to_string()),
    ]
}

/// NVRTC defines for `postproc_nb`.
pub(crate) fn postproc_nb_defines(cfg: &FConfig) -> Vec<(&'static str, String)> {
    vec![
        ("N", cfg.pfb_channels().to_string()),
        ("C", cfg.channels.to_string()),
        (
            "QMAX",
            if cfg.out_bits == 4 { "7" } else { "127" }.to_string(),
        ),
        ("FOUR_BIT", u32::from(cfg.out_bits == 4).to_string()),
    ]
}

/// DDC taps per phase W = ceil(ddc_taps / S).
pub(crate) fn ddc_taps_per_phase(cfg: &FConfig) -> usize {
    cfg.ddc_taps().div_ceil(cfg.subsampling())
}

/// How the DDC kernel's work-group shape is chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum DdcTuningChoice {
    /// Autotune on first use of each input format; results cached in this file (none: no
    /// cache).
    Auto(Option<PathBuf>),
    /// Use this tuning (must fit the kernel's shared memory).
    Fixed(DdcTuning),
}

/// How one pol's input sits in the device input buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Staged {
    /// 0 for int16, else the packed width (the DDC kernel variant).
    in_bits: u32,
    /// Staged index of the first window sample.
    first: usize,
    /// Staged samples present.
    nvalid: usize,
    /// Mixer phase of DDC output 0.
    bias: u64,
    bytes: usize,
}

/// GPU F-engine backend for narrowband configurations.
pub struct GpuNarrowband {
    cfg: FConfig,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: &'static str,
    s: usize,
    w: usize,
    tuning: DdcTuningChoice,
    ddc_fns: HashMap<u32, (CudaFunction, DdcTuning)>,
    fir_fn: CudaFunction,
    post_fn: CudaFunction,
    plans: HashMap<usize, CudaFft>,
    mixer: MixerFrequency,
    z: CudaSlice<f32>,
    weights: CudaSlice<f32>,
    input: CudaSlice<u8>,
    in_stride: usize,
    ddc_out: CudaSlice<float2>,
    ddc_stride: usize,
    fir_out: CudaSlice<float2>,
    fft_out: CudaSlice<float2>,
    out: CudaSlice<u8>,
    gains: CudaSlice<f32>,
    delay: CudaSlice<f32>,
    keys: CudaSlice<u64>,
    sat: CudaSlice<u64>,
    staged: [Staged; 2],
    params: HostParams,
}

impl GpuNarrowband {
    /// Opens device 0; the DDC kernel is autotuned with the default cache file.
    pub fn new(cfg: FConfig) -> Result<Self, FError> {
        Self::with_tuning(
            cfg,
            DdcTuningChoice::Auto(super::ddc_tune::default_cache_path()),
        )
    }

    /// Checks what the GPU kernels need beyond [`FConfig::validate`] (no GPU needed).
    pub fn check_config(cfg: &FConfig) -> Result<(), FError> {
        cfg.validate()?;
        if cfg.narrowband.is_none() {
            return Err(FError::BadParameter {
                what: "narrowband",
                why: "GpuNarrowband serves narrowband outputs only (use GpuBackend)".into(),
            });
        }
        let w = ddc_taps_per_phase(cfg);
        if w > MAX_DDC_TAPS_PER_PHASE || candidates(cfg.subsampling(), w).is_empty() {
            return Err(FError::BadParameter {
                what: "ddc_taps",
                why: format!(
                    "{} DDC taps at subsampling {} ({w} per phase) are too many for the GPU DDC kernel",
                    cfg.ddc_taps(),
                    cfg.subsampling()
                ),
            });
        }
        if cfg.taps > MAX_GPU_TAPS {
            return Err(FError::BadTaps(cfg.taps));
        }
        if cfg.pfb_channels() > i32::MAX as usize / 4 {
            return Err(FError::BadParameter {
                what: "channels",
                why: format!("{} is too large for the GPU kernels", cfg.channels),
            });
        }
        Ok(())
    }

    /// Opens device 0 with the given DDC tuning choice. Fails cleanly without a GPU.
    pub fn with_tuning(cfg: FConfig, tuning: DdcTuningChoice) -> Result<Self, FError> {
        Self::check_config(&cfg)?;
        let (s, w) = (cfg.subsampling(), ddc_taps_per_phase(&cfg));
        if let DdcTuningChoice::Fixed(t) = tuning {
            if !valid_tuning(s, w, t) {
                return Err(FError::BadParameter {
                    what: "ddc tuning",
                    why: format!("{t:?} is not a valid DDC kernel shape for S {s}, W {w}"),
                });
            }
        }
        let nb = cfg.narrowband.expect("checked above");
        let h = ddc_weights(&nb, s, cfg.ddc_taps())?;
        let mixer = MixerFrequency::from_hz(nb.centre_frequency, nb.adc_rate)?;
        let ddc = Ddc::new(&h, s, mixer);
        let (zr, zi) = ddc.premixed();
        let mut zh = vec![0f32; 2 * w * s];
        for k in 0..zr.len() {
            zh[2 * k] = zr[k];
            zh[2 * k + 1] = zi[k];
        }
        let ctx = crate::gpu::open_device(0)?;
        let arch = crate::gpu::device_arch(&ctx)?;
        let load = |name: &str, src: &str, defines: &[(&str, String)]| {
            let ptx = crate::gpu::compile_ptx(&format!("{name}.cu"), src, defines, arch)?;
            ctx.load_module(ptx)?
                .load_function(name)
                .map_err(FError::from)
        };
        let fir_fn = load(
            "pfb_fir_complex",
            PFB_FIR_COMPLEX_SRC,
            &fir_complex_defines(&cfg),
        )?;
        let post_fn = load("postproc_nb", POSTPROC_NB_SRC, &postproc_nb_defines(&cfg))?;
        // A stream of our own (not the legacy default stream, which would serialise with
        // the pipeline's copy streams; see `GpuBackend::with_unzip`).
        let stream = ctx.new_stream()?;
        let wts = pfb_weights(cfg.pfb_step(), cfg.taps, cfg.w_cutoff, cfg.window)?;
        let weights = stream.clone_htod(&wts)?;
        let z = stream.clone_htod(&zh)?;
        let zero = Staged {
            in_bits: 0,
            first: 0,
            nvalid: 0,
            bias: 0,
            bytes: 0,
        };
        Ok(GpuNarrowband {
            s,
            w,
            tuning,
            arch,
            ddc_fns: HashMap::new(),
            fir_fn,
            post_fn,
            plans: HashMap::new(),
            mixer,
            z,
            weights,
            input: stream.alloc_zeros(16)?,
            in_stride: 0,
            ddc_out: stream.alloc_zeros(1)?,
            ddc_stride: 0,
            fir_out: stream.alloc_zeros(1)?,
            fft_out: stream.alloc_zeros(1)?,
            out: stream.alloc_zeros(4)?,
            gains: stream.alloc_zeros(4 * cfg.channels)?,
            delay: stream.alloc_zeros(4)?,
            keys: stream.alloc_zeros(2)?,
            sat: stream.alloc_zeros(2)?,
            staged: [zero; 2],
            params: HostParams::new(cfg.channels),
            cfg,
            ctx,
            stream,
        })
    }

    /// The stream all work is queued on (the backend's own).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The CUDA context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Exchanges the device buffers the kernels work on (input, output, parameters,
    /// saturation counters) with those of `b` (the pipeline's slots).
    pub(crate) fn swap_block(&mut self, b: &mut DeviceBlock) {
        std::mem::swap(&mut self.input, &mut b.input);
        std::mem::swap(&mut self.in_stride, &mut b.in_stride);
        std::mem::swap(&mut self.out, &mut b.out);
        std::mem::swap(&mut self.gains, &mut b.gains);
        std::mem::swap(&mut self.delay, &mut b.delay);
        std::mem::swap(&mut self.keys, &mut b.keys);
        std::mem::swap(&mut self.sat, &mut b.sat);
    }

    /// Describes the input in place for the next [`StagedCompute::compute`]: both pols hold
    /// `bytes` of packed `bits`-wide samples from the first window sample on (ADC timestamp
    /// `t0`), `nvalid` of them valid.
    pub(crate) fn stage_packed(&mut self, bits: u32, bytes: usize, nvalid: usize, t0: u64) {
        self.stage_packed_pols(bits, bytes, [0, 0], nvalid, [t0, t0]);
    }

    /// [`Self::stage_packed`] with pol p's first window sample at staged index `first[p]`
    /// (ADC timestamp `t0[p]`), `needed` samples from there valid.
    pub(crate) fn stage_packed_pols(
        &mut self,
        bits: u32,
        bytes: usize,
        first: [usize; 2],
        needed: usize,
        t0: [u64; 2],
    ) {
        self.staged = [0, 1].map(|p| Staged {
            in_bits: bits,
            first: first[p],
            nvalid: first[p] + needed,
            bias: self.mixer.phase(t0[p]),
            bytes,
        });
    }

    /// The DDC tuning in use for input format `in_bits` (tuning it now if needed).
    pub fn ddc_tuning(&mut self, in_bits: u32) -> Result<DdcTuning, FError> {
        Ok(self.ddc_fn(in_bits)?.1)
    }

    /// The autotuner's cache key for input format `in_bits` on this GPU.
    pub fn tuning_key(&self, in_bits: u32) -> Result<String, FError> {
        let name = self.ctx.name()?;
        Ok(super::ddc_tune::cache_key(
            &name, self.arch, self.s, self.w, in_bits,
        ))
    }

    fn ddc_fn(&mut self, in_bits: u32) -> Result<(CudaFunction, DdcTuning), FError> {
        if let Some(f) = self.ddc_fns.get(&in_bits) {
            return Ok(f.clone());
        }
        let t = match &self.tuning {
            DdcTuningChoice::Fixed(t) => *t,
            DdcTuningChoice::Auto(cache) => autotune(
                &self.stream,
                self.arch,
                self.s,
                self.w,
                in_bits,
                cache.as_deref(),
            )?,
        };
        let f = load_ddc(&self.ctx, self.arch, self.s, self.w, in_bits, t)?;
        self.ddc_fns.insert(in_bits, (f.clone(), t));
        Ok((f, t))
    }

    /// DDC outputs per pol for `m` spectra.
    fn ddc_len(&self, m: usize) -> usize {
        (m + self.cfg.taps - 1) * self.cfg.pfb_channels()
    }

    /// Copies each pol's needed input (from the byte holding its first sample) to the device.
    fn stage_input(&mut self, block: &Block) -> Result<(), FError> {
        let needed = self.cfg.input_samples_needed(block.spectra);
        let mut parts: [(&[u8], Staged); 2] = [(&[], self.staged[0]); 2];
        for (p, pol) in block.pols.iter().enumerate() {
            let t0 = pol.timestamp.wrapping_add(pol.offset as u64);
            let bias = self.mixer.phase(t0);
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
                    let st = Staged {
                        in_bits: bits,
                        first,
                        nvalid: first + needed,
                        bias,
                        bytes,
                    };
                    (d, st)
                }
                Samples::Decoded { data, .. } => {
                    let d = &data[pol.offset..pol.offset + needed];
                    // SAFETY: i16 has no padding and u8 has alignment 1; the device reads the
                    // bytes back as little-endian int16 (all CUDA hosts are little-endian).
                    let d =
                        unsafe { std::slice::from_raw_parts(d.as_ptr().cast::<u8>(), 2 * d.len()) };
                    let st = Staged {
                        in_bits: 0,
                        first: 0,
                        nvalid: needed,
                        bias,
                        bytes: d.len(),
                    };
                    (d, st)
                }
            };
        }
        let stride = parts[0].1.bytes.max(parts[1].1.bytes).next_multiple_of(4) + IN_PAD;
        ensure(&self.stream, &mut self.input, 2 * stride)?;
        self.in_stride = stride;
        for (p, (d, st)) in parts.iter().enumerate() {
            let mut dst = self.input.slice_mut(p * stride..p * stride + d.len());
            self.stream.memcpy_htod(*d, &mut dst)?;
            self.staged[p] = *st;
        }
        Ok(())
    }

    /// Uploads gains, per-spectrum delay/phase and dither keys (the wideband layout).
    fn stage_params(&mut self, block: &Block) -> Result<(), FError> {
        let dev = (&mut self.delay, &mut self.keys, &mut self.gains);
        self.params.upload(&self.cfg, block, &self.stream, dev)
    }

    /// Queues the DDC of both pols' staged input (one launch when they share a format).
    pub(crate) fn launch_ddc(&mut self, m: usize) -> Result<(), FError> {
        let len = self.ddc_len(m);
        self.ddc_stride = len.next_multiple_of(64);
        ensure(&self.stream, &mut self.ddc_out, 2 * self.ddc_stride)?;
        let st = self.staged;
        let groups: &[(usize, u32)] = if st[0].in_bits == st[1].in_bits {
            &[(0, 2)]
        } else {
            &[(0, 1), (1, 1)]
        };
        for &(pol0, npol) in groups {
            let (f, t) = self.ddc_fn(st[pol0].in_bits)?;
            launch_ddc(
                &self.stream,
                &f,
                t,
                DdcLaunch {
                    input: &self.input,
                    in_stride: self.in_stride as i64,
                    pol0: pol0 as i32,
                    npol,
                    first: [st[0].first as i64, st[1].first as i64],
                    nvalid: [st[0].nvalid as i64, st[1].nvalid as i64],
                    z: &self.z,
                    out: &mut self.ddc_out,
                    out_stride: self.ddc_stride as i64,
                    n_out: len as i64,
                    bias: [st[0].bias, st[1].bias],
                    scale: self.mixer.0.wrapping_mul(self.s as u64),
                },
            )?;
        }
        Ok(())
    }

    /// Queues the complex PFB FIR of `m` spectra (buffers sized by [`StagedCompute::compute`]).
    pub(crate) fn launch_fir(&mut self, m: usize) -> Result<(), FError> {
        let n = self.cfg.pfb_channels();
        let cfg = LaunchConfig {
            grid_dim: (
                n.div_ceil(FIR_THREADS as usize) as u32,
                m.div_ceil(FIR_RUN) as u32,
                2,
            ),
            block_dim: (FIR_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (stride, mi, run) = (self.ddc_stride as i64, m as i32, FIR_RUN as i32);
        let mut b = self.stream.launch_builder(&self.fir_fn);
        b.arg(&self.ddc_out)
            .arg(&stride)
            .arg(&self.weights)
            .arg(&mut self.fir_out)
            .arg(&mi)
            .arg(&run);
        // SAFETY: argument types and order match `pfb_fir_complex`; each pol's DDC output
        // holds (m + taps − 1)·N values at p·ddc_stride, the weights taps·N floats and
        // fir_out m·2·N values.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Queues the batched length-N FFT of `m` spectra (both pols).
    pub(crate) fn launch_fft(&mut self, m: usize) -> Result<(), FError> {
        let n = self.cfg.pfb_channels();
        let batch = m * 2;
        if !self.plans.contains_key(&batch) {
            let ni = n as i32;
            let plan = CudaFft::plan_many(
                &[ni],
                None,
                1,
                ni,
                None,
                1,
                ni,
                cufftType::CUFFT_C2C,
                batch as i32,
                self.stream.clone(),
            )?;
            self.plans.insert(batch, plan);
        }
        let plan = &self.plans[&batch];
        plan.exec_c2c(&mut self.fir_out, &mut self.fft_out, FftDirection::Forward)
            .map_err(FError::from)
    }

    /// Queues the post-processing of `m` spectra into device output spectra
    /// out_first..out_first + m.
    pub(crate) fn launch_post(&mut self, m: usize, out_first: usize) -> Result<(), FError> {
        let cfg = LaunchConfig {
            grid_dim: (
                self.cfg.channels.div_ceil(POST_TILE) as u32,
                m.div_ceil(POST_TILE) as u32,
                1,
            ),
            block_dim: (POST_TILE as u32, 8, 1),
            shared_mem_bytes: 0,
        };
        let (mi, of, sph) = (m as i32, out_first as i64, self.cfg.spectra_per_heap as i32);
        let dither = i32::from(self.cfg.dither == Dither::Uniform);
        let mut b = self.stream.launch_builder(&self.post_fn);
        b.arg(&self.fft_out)
            .arg(&mut self.out)
            .arg(&self.gains)
            .arg(&self.delay)
            .arg(&self.keys)
            .arg(&mi)
            .arg(&of)
            .arg(&sph)
            .arg(&dither)
            .arg(&mut self.sat);
        // SAFETY: argument types and order match `postproc_nb`; fft_out holds m·2·N values,
        // the device output covers spectra out_first..out_first + m (ensured by the caller),
        // gains hold 2·C complex values, delay and keys 2·m entries.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// The DDC output of the last block (tests): per pol, (m + taps − 1)·N values.
    #[cfg(test)]
    pub(crate) fn ddc_output(&self, m: usize) -> Result<[Vec<Complex32>; 2], FError> {
        let len = self.ddc_len(m);
        let mut r = [vec![], vec![]];
        for (p, v) in r.iter_mut().enumerate() {
            let mut h = vec![float2 { x: 0.0, y: 0.0 }; len];
            let o = p * self.ddc_stride;
            self.stream
                .memcpy_dtoh(&self.ddc_out.slice(o..o + len), &mut h)?;
            *v = h.iter().map(|c| Complex32::new(c.x, c.y)).collect();
        }
        Ok(r)
    }

    /// Bench: copies both pols' input from pinned host buffers to the staged positions.
    pub(crate) fn upload_pinned(&mut self, src: [&PinnedHostSlice<u8>; 2]) -> Result<(), FError> {
        let room = self.staged.map(|s| s.bytes);
        upload_pinned_pols(&self.stream, &mut self.input, self.in_stride, room, src)
    }

    /// Bench: copies the device output to a pinned host buffer (queued, not synchronised).
    pub(crate) fn download_pinned(&self, dst: &mut PinnedHostSlice<u8>) -> Result<(), FError> {
        let len = HostSlice::len(dst).min(self.out.len());
        self.stream
            .memcpy_dtoh(&self.out.slice(..len), dst)
            .map_err(FError::from)
    }

    /// Stages `block` and its parameters without computing (bench).
    pub(crate) fn stage(&mut self, block: &Block, out_len: usize) -> Result<(), FError> {
        self.stage_input(block)?;
        self.stage_params(block)?;
        ensure(&self.stream, &mut self.out, out_len)
    }
}

/// DDC, FIR, FFT and post-processing; the counters are the saturation counts.
impl StagedCompute for GpuNarrowband {
    fn fits(&self, m: usize) -> bool {
        m.div_ceil(POST_TILE) <= 65535 && m.div_ceil(FIR_RUN) <= 65535 && 2 * m <= i32::MAX as usize
    }

    fn work_buffers(&mut self) -> WorkBuffers<'_> {
        let n = self.cfg.pfb_channels();
        (&self.stream, &mut self.fir_out, &mut self.fft_out, n)
    }

    fn reset_counters(&mut self) -> Result<(), FError> {
        self.stream
            .memset_zeros(&mut self.sat)
            .map_err(FError::from)
    }

    fn launch_stages(&mut self, m: usize, out_first: usize) -> Result<(), FError> {
        self.launch_ddc(m)?;
        self.launch_fir(m)?;
        self.launch_fft(m)?;
        self.launch_post(m, out_first)
    }
}

impl FBackend for GpuNarrowband {
    fn config(&self) -> &FConfig {
        &self.cfg
    }

    fn process(&mut self, block: &Block, out: &mut [u8]) -> Result<BlockStats, FError> {
        let n_out = validate_block(&self.cfg, block, out)?;
        let m = block.spectra;
        self.stage(block, out.len())?;
        if block.out_first != 0 || m != n_out {
            // Only part of `out` is written: keep the rest as the caller had it.
            let mut d = self.out.slice_mut(..out.len());
            self.stream.memcpy_htod(&*out, &mut d)?;
        }
        self.compute(m, block.out_first)?;
        self.stream.memcpy_dtoh(&self.out.slice(..out.len()), out)?;
        let mut sat = [0u64; 2];
        self.stream.memcpy_dtoh(&self.sat, &mut sat)?;
        Ok(BlockStats {
            saturated: sat,
            input: None,
        })
    }
}
