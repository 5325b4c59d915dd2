//! GPU implementation of [`FBackend`] (wideband): `kernels/pfb_fir.cu` (decode + PFB FIR,
//! writing the unzipped sub-FFT inputs), a batched cuFFT C2C of length N/n, and
//! `kernels/postproc.cu` (last radix-n pass, real-FFT fix-up, delay/phase/gain, dither,
//! quantisation). Kernels are compiled with NVRTC per configuration (constants as `-D`).
//!
//! The results match [`super::CpuBackend`] to float rounding: the dither hash and the
//! quantisation are the same; values that land within float rounding of a rounding
//! boundary may differ by one LSB.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cufft::sys::{cufftType, float2};
use cudarc::cufft::{CudaFft, FftDirection};
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, HostSlice, LaunchConfig,
    PinnedHostSlice, PushKernelArg, ValidAsZeroBits,
};
#[cfg(test)]
use num_complex::Complex32;

use super::backend::{validate_block, FBackend};
use super::postproc::dither_key;
use super::stats::InputStats;
use super::weights::pfb_weights;
use super::{Block, BlockStats, Dither, FConfig, FError, Samples};

/// PFB FIR kernel source (embedded so binaries need no kernel files at run time).
pub const PFB_FIR_SRC: &str = include_str!("../../kernels/pfb_fir.cu");
/// Post-processing kernel source.
pub const POSTPROC_SRC: &str = include_str!("../../kernels/postproc.cu");

const FIR_THREADS: u32 = 128;
/// Spectra per FIR thread run (the TAPS − 1 rows before each run are read twice).
const FIR_RUN: usize = 128;
const POST_TILE: usize = 32;
/// Bytes after each pol's input in the device buffer (the decoder reads 8 bytes ahead).
const IN_PAD: usize = 16;

fn gerr<E: std::fmt::Debug>(e: E) -> FError {
    FError::Gpu(format!("{e:?}"))
}

/// NVRTC defines for `pfb_fir` (`in_bits` 0 = int16 input, else packed width).
pub fn fir_defines(cfg: &FConfig, unzip: usize, in_bits: u32) -> Vec<(&'static str, String)> {
    vec![
        ("N", cfg.pfb_channels().to_string()),
        ("TAPS", cfg.taps.to_string()),
        ("UNZIP", unzip.to_string()),
        ("IN_BITS", in_bits.to_string()),
    ]
}

/// NVRTC defines for `postproc`.
pub fn postproc_defines(cfg: &FConfig, unzip: usize) -> Vec<(&'static str, String)> {
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

/// Unzip factor used by [`GpuBackend::new`]: cuFFT lengths of at most 4096 (one pass).
pub fn default_unzip(channels: usize) -> usize {
    match channels {
        0..=4096 => 1,
        4097..=8192 => 2,
        _ => 4,
    }
}

fn arch_for(major: i32, minor: i32) -> Result<&'static str, FError> {
    Ok(match (major, minor) {
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 9) => "compute_89",
        (9, 0) => "compute_90",
        (m, _) if m >= 8 => "compute_80",
        (m, _) if m >= 6 => "compute_60",
        _ => {
            return Err(FError::Gpu(format!(
                "compute capability {major}.{minor} is too old (need 6.0 or newer)"
            )))
        }
    })
}

/// Grows `buf` to at least `len` elements (contents are not kept).
fn ensure<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    buf: &mut CudaSlice<T>,
    len: usize,
) -> Result<(), FError> {
    if buf.len() < len {
        *buf = stream.alloc_zeros::<T>(len).map_err(gerr)?;
    }
    Ok(())
}

/// How one pol's input sits in the device input buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Staged {
    /// 0 for int16, else the packed width (the FIR kernel variant).
    in_bits: u32,
    /// Digitiser width, for the clip count.
    stat_bits: u32,
    /// Index of the first window sample within the staged bytes.
    first: usize,
    bytes: usize,
}

/// GPU F-engine backend (wideband; narrowband is refused at construction).
pub struct GpuBackend {
    cfg: FConfig,
    unzip: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: &'static str,
    fir_fns: HashMap<u32, CudaFunction>,
    post_fn: CudaFunction,
    plans: HashMap<usize, CudaFft>,
    weights: CudaSlice<f32>,
    input: CudaSlice<u8>,
    in_stride: usize,
    fir_out: CudaSlice<float2>,
    fft_out: CudaSlice<float2>,
    out: CudaSlice<u8>,
    gains: CudaSlice<f32>,
    delay: CudaSlice<f32>,
    keys: CudaSlice<u64>,
    in_stats: CudaSlice<u64>,
    sat: CudaSlice<u64>,
    staged: [Staged; 2],
    h_gains: Vec<f32>,
    h_delay: Vec<f32>,
    h_keys: Vec<u64>,
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
            return Err(FError::Gpu(
                "narrowband outputs are not implemented on the GPU backend yet: use --backend cpu"
                    .into(),
            ));
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
        if !crate::gpu::gpu_available() {
            return Err(FError::Gpu("no usable CUDA device".into()));
        }
        let ctx = CudaContext::new(0).map_err(gerr)?;
        let attr = |a| ctx.attribute(a).map_err(gerr);
        let arch = arch_for(
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        )?;
        let ptx = crate::gpu::compile_ptx(
            "postproc.cu",
            POSTPROC_SRC,
            &postproc_defines(&cfg, unzip),
            arch,
        )
        .map_err(FError::Gpu)?;
        let post_fn = ctx
            .load_module(ptx)
            .map_err(gerr)?
            .load_function("postproc")
            .map_err(gerr)?;
        let stream = ctx.default_stream();
        let w = pfb_weights(cfg.pfb_step(), cfg.taps, cfg.w_cutoff, cfg.window)?;
        let weights = stream.clone_htod(&w).map_err(gerr)?;
        let zero = Staged {
            in_bits: 0,
            stat_bits: 16,
            first: 0,
            bytes: 0,
        };
        Ok(GpuBackend {
            unzip,
            arch,
            fir_fns: HashMap::new(),
            post_fn,
            plans: HashMap::new(),
            weights,
            input: stream.alloc_zeros(16).map_err(gerr)?,
            in_stride: 0,
            fir_out: stream.alloc_zeros(1).map_err(gerr)?,
            fft_out: stream.alloc_zeros(1).map_err(gerr)?,
            out: stream.alloc_zeros(4).map_err(gerr)?,
            gains: stream.alloc_zeros(4 * cfg.channels).map_err(gerr)?,
            delay: stream.alloc_zeros(4).map_err(gerr)?,
            keys: stream.alloc_zeros(2).map_err(gerr)?,
            in_stats: stream.alloc_zeros(4).map_err(gerr)?,
            sat: stream.alloc_zeros(2).map_err(gerr)?,
            staged: [zero; 2],
            h_gains: vec![0.0; 4 * cfg.channels],
            h_delay: vec![],
            h_keys: vec![],
            cfg,
            ctx,
            stream,
        })
    }

    pub fn unzip(&self) -> usize {
        self.unzip
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn fir_fn(&mut self, in_bits: u32) -> Result<CudaFunction, FError> {
        if let Some(f) = self.fir_fns.get(&in_bits) {
            return Ok(f.clone());
        }
        let defines = fir_defines(&self.cfg, self.unzip, in_bits);
        let ptx = crate::gpu::compile_ptx("pfb_fir.cu", PFB_FIR_SRC, &defines, self.arch)
            .map_err(FError::Gpu)?;
        let f = self
            .ctx
            .load_module(ptx)
            .map_err(gerr)?
            .load_function("pfb_fir")
            .map_err(gerr)?;
        self.fir_fns.insert(in_bits, f.clone());
        Ok(f)
    }

    /// Copies each pol's needed input (from the byte holding its first sample) to the device.
    fn stage_input(&mut self, block: &Block) -> Result<(), FError> {
        let needed = self.cfg.input_samples_needed(block.spectra);
        let mut parts: [(&[u8], Staged); 2] = [(&[], self.staged[0]); 2];
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
        ensure(&self.stream, &mut self.input, 2 * stride)?;
        self.in_stride = stride;
        for (p, (d, s)) in parts.iter().enumerate() {
            let mut dst = self.input.slice_mut(p * stride..p * stride + d.len());
            self.stream.memcpy_htod(*d, &mut dst).map_err(gerr)?;
            self.staged[p] = *s;
        }
        Ok(())
    }

    /// Uploads gains, per-spectrum delay/phase and dither keys.
    fn stage_params(&mut self, block: &Block) -> Result<(), FError> {
        let (m, c) = (block.spectra, self.cfg.channels);
        let n = self.cfg.pfb_channels() as f64 * self.cfg.internal_decimation();
        let dither = self.cfg.dither == Dither::Uniform;
        self.h_delay.clear();
        self.h_keys.clear();
        for s in 0..m {
            for (p, pol) in block.pols.iter().enumerate() {
                let ph = (pol.phase[s] / std::f64::consts::PI).rem_euclid(2.0);
                self.h_delay
                    .extend([(-pol.fine_delay[s] / n) as f32, ph as f32]);
                let spectrum = block.first_spectrum.wrapping_add(s as u64);
                self.h_keys.push(if dither {
                    dither_key(self.cfg.dither_seed, self.cfg.feng_id, p, spectrum)
                } else {
                    0
                });
            }
        }
        for (p, pol) in block.pols.iter().enumerate() {
            for (i, g) in pol.gains.iter().enumerate() {
                self.h_gains[2 * (p * c + i)] = g.re;
                self.h_gains[2 * (p * c + i) + 1] = g.im;
            }
        }
        ensure(&self.stream, &mut self.delay, self.h_delay.len())?;
        ensure(&self.stream, &mut self.keys, self.h_keys.len())?;
        let mut d = self.delay.slice_mut(..self.h_delay.len());
        self.stream
            .memcpy_htod(&self.h_delay, &mut d)
            .map_err(gerr)?;
        let mut k = self.keys.slice_mut(..self.h_keys.len());
        self.stream
            .memcpy_htod(&self.h_keys, &mut k)
            .map_err(gerr)?;
        self.stream
            .memcpy_htod(&self.h_gains, &mut self.gains)
            .map_err(gerr)?;
        Ok(())
    }

    /// Queues FIR, FFT and post-processing of `m` staged spectra into the device output
    /// (which must hold spectra out_first..out_first + m). Counters are reset first.
    pub(crate) fn compute(&mut self, m: usize, out_first: usize) -> Result<(), FError> {
        let n = self.cfg.pfb_channels();
        let batch = m * 2 * self.unzip;
        if m.div_ceil(POST_TILE) > 65535 || batch > i32::MAX as usize {
            return Err(FError::BadParameter {
                what: "spectra",
                why: format!("{m} spectra per block is too many for the GPU backend"),
            });
        }
        ensure(&self.stream, &mut self.fir_out, m * 2 * n)?;
        ensure(&self.stream, &mut self.fft_out, m * 2 * n)?;
        self.stream.memset_zeros(&mut self.in_stats).map_err(gerr)?;
        self.stream.memset_zeros(&mut self.sat).map_err(gerr)?;
        self.launch_fir(m)?;
        self.launch_fft(m)?;
        self.launch_post(m, out_first)
    }

    /// Queues the FIR of `m` staged spectra (buffers sized by [`Self::compute`]).
    pub(crate) fn launch_fir(&mut self, m: usize) -> Result<(), FError> {
        let n = self.cfg.pfb_channels();
        // FIR: one launch for both pols when they share a format, else one each.
        let st = self.staged;
        let groups: &[(usize, u32)] =
            if st[0].in_bits == st[1].in_bits && st[0].stat_bits == st[1].stat_bits {
                &[(0, 2)]
            } else {
                &[(0, 1), (1, 1)]
            };
        for &(pol0, npol) in groups {
            let f = self.fir_fn(st[pol0].in_bits)?;
            let cfg = LaunchConfig {
                grid_dim: (
                    n.div_ceil(FIR_THREADS as usize) as u32,
                    m.div_ceil(FIR_RUN) as u32,
                    npol,
                ),
                block_dim: (FIR_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let stride = self.in_stride as i64;
            let (pol0_i, f0, f1) = (pol0 as i32, st[0].first as i32, st[1].first as i32);
            let (mi, run, sb) = (m as i32, FIR_RUN as i32, st[pol0].stat_bits as i32);
            let mut b = self.stream.launch_builder(&f);
            b.arg(&self.input)
                .arg(&stride)
                .arg(&pol0_i)
                .arg(&f0)
                .arg(&f1)
                .arg(&self.weights)
                .arg(&mut self.fir_out)
                .arg(&mi)
                .arg(&run)
                .arg(&sb)
                .arg(&mut self.in_stats);
            // SAFETY: argument types and order match `pfb_fir`; each pol's staged input holds
            // first + (m + taps − 1)·2N samples plus IN_PAD bytes, the weights hold taps·2N
            // floats and fir_out holds m·2N complex values.
            unsafe { b.launch(cfg) }.map_err(gerr)?;
        }
        Ok(())
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
            )
            .map_err(gerr)?;
            self.plans.insert(batch, plan);
        }
        let plan = &self.plans[&batch];
        plan.exec_c2c(&mut self.fir_out, &mut self.fft_out, FftDirection::Forward)
            .map_err(gerr)?;
        Ok(())
    }

    /// Queues the post-processing of `m` spectra into device output spectra
    /// out_first..out_first + m.
    pub(crate) fn launch_post(&mut self, m: usize, out_first: usize) -> Result<(), FError> {
        let n = self.cfg.pfb_channels();
        let cfg = LaunchConfig {
            grid_dim: (
                (n / 2 + 1).div_ceil(POST_TILE) as u32,
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
        // SAFETY: argument types and order match `postproc`; fft_out holds m·2N values, the
        // device output covers spectra out_first..out_first + m (ensured by the caller),
        // gains hold 2·C, delay and keys 2·m entries.
        unsafe { b.launch(cfg) }.map_err(gerr)?;
        Ok(())
    }

    /// Copies the counters back (synchronises the stream).
    fn read_stats(&self, m: usize) -> Result<BlockStats, FError> {
        let mut st = [0u64; 4];
        let mut sat = [0u64; 2];
        self.stream
            .memcpy_dtoh(&self.in_stats, &mut st)
            .map_err(gerr)?;
        self.stream.memcpy_dtoh(&self.sat, &mut sat).map_err(gerr)?;
        let samples = (m * self.cfg.pfb_step()) as u64;
        let input = [0, 1].map(|p| InputStats {
            sum_sq: st[p],
            samples,
            clipped: st[2 + p],
            bits: self.staged[p].stat_bits,
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
            .memcpy_dtoh(&self.fir_out.slice(..len), &mut v)
            .map_err(gerr)?;
        Ok(v.iter().map(|c| Complex32::new(c.x, c.y)).collect())
    }

    /// Bench: copies both pols' input from pinned host buffers to the staged positions.
    pub(crate) fn upload_pinned(&mut self, src: [&PinnedHostSlice<u8>; 2]) -> Result<(), FError> {
        for (p, h) in src.iter().enumerate() {
            let len = HostSlice::len(*h);
            if len > self.staged[p].bytes {
                return Err(FError::BadLength {
                    what: "pinned input",
                    expected: self.staged[p].bytes,
                    got: len,
                });
            }
            let o = p * self.in_stride;
            let mut dst = self.input.slice_mut(o..o + len);
            self.stream.memcpy_htod(*h, &mut dst).map_err(gerr)?;
        }
        Ok(())
    }

    /// Bench: copies the device output to a pinned host buffer (queued, not synchronised).
    pub(crate) fn download_pinned(&self, dst: &mut PinnedHostSlice<u8>) -> Result<(), FError> {
        let len = HostSlice::len(dst).min(self.out.len());
        self.stream
            .memcpy_dtoh(&self.out.slice(..len), dst)
            .map_err(gerr)
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
        ensure(&self.stream, &mut self.out, out.len())?;
        if block.out_first != 0 || m != n_out {
            // Only part of `out` is written: keep the rest as the caller had it.
            let mut d = self.out.slice_mut(..out.len());
            self.stream.memcpy_htod(&*out, &mut d).map_err(gerr)?;
        }
        self.compute(m, block.out_first)?;
        self.stream
            .memcpy_dtoh(&self.out.slice(..out.len()), out)
            .map_err(gerr)?;
        self.read_stats(m)
    }
}
