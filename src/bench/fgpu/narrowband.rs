//! `gpucbf bench fgpu`, narrowband part: GPU narrowband F-engine throughput with the data
//! resident on the GPU (32768 channels, 16 PFB taps, default DDC filter, 10-bit input,
//! 8-bit output) for decimation 8 and 16, discard and no-discard, each as a fraction of the
//! bound measured in the same run: min(device copy bandwidth / bytes moved per input sample,
//! measured FMA rate / DDC FMAs per input sample). End to end from pinned host memory
//! through the three-stream
//! [`GpuPipeline`](crate::compute::fengine::gpu::pipeline::GpuPipeline) (chunks of 2^26
//! samples per pol) against the measured pinned host→device bandwidth, next to the
//! single-stream figure.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::measure::{bandwidths, gerr, pinned_from, pipelined, time_gpu};
use super::IN_BITS;
use crate::compute::fengine::gpu::narrowband::{ddc_taps_per_phase, GpuNarrowband};
use crate::compute::fengine::gpu::staged::StagedCompute;
use crate::compute::fengine::sample_noise;
use crate::compute::fengine::{
    Block, Dither, FBackend, FConfig, FError, Narrowband, NarrowbandMode, PolBlock, Samples,
};
use crate::gpu::GpuError;
use crate::spead::bitpack;
use num_complex::Complex32;
use serde::Serialize;

/// One narrowband line: a decimation and mode, resident, end to end and the DDC alone.
#[derive(Debug, Clone, Serialize)]
pub struct NarrowbandLine {
    /// Decimation factor.
    pub decimation: usize,
    /// No-discard mode (else discard).
    pub no_discard: bool,
    /// Subsampling factor of the PFB input.
    pub subsampling: f64,
    /// DDC filter taps.
    pub ddc_taps: usize,
    /// Spectra per resident block.
    pub spectra: usize,
    /// Resident throughput, input samples per second (both pols).
    pub resident_samples_per_s: f64,
    /// Its bound: the lesser of the memory and FMA bounds.
    pub bound_samples_per_s: f64,
    /// Copy bandwidth / bytes moved per input sample.
    pub memory_bound_samples_per_s: f64,
    /// FMA rate / DDC FMAs per input sample.
    pub fma_bound_samples_per_s: f64,
    /// Bytes moved per input sample.
    pub bytes_per_sample: f64,
    /// DDC FMAs per input sample.
    pub fmas_per_sample: f64,
    /// Resident / bound.
    pub resident_fraction: f64,
    /// End to end through the pipeline, steady state.
    pub pipelined_samples_per_s: f64,
    /// End-to-end bound: host→device bandwidth / input bytes per sample.
    pub end_to_end_bound_samples_per_s: f64,
    /// Pipelined / end-to-end bound.
    pub pipelined_fraction: f64,
    /// The pipeline's uploads with nothing else running.
    pub uploads_alone_samples_per_s: f64,
    /// Pipelined / uploads alone.
    pub pipelined_fraction_of_alone: f64,
    /// Spectra per pipeline chunk.
    pub chunk_spectra: usize,
    /// Upload, compute, download on one stream.
    pub single_stream_samples_per_s: f64,
    /// Single stream / end-to-end bound.
    pub single_stream_fraction: f64,
    /// The DDC kernel alone.
    pub ddc_samples_per_s: f64,
    /// Its bound (its own bytes at the copy bandwidth, or the FMA bound).
    pub ddc_bound_samples_per_s: f64,
    /// DDC / its bound.
    pub ddc_fraction: f64,
    /// DDC tuning: work-group size.
    pub ddc_wgs: u32,
    /// DDC tuning: unroll.
    pub ddc_unroll: u32,
    /// Seconds the DDC tuning took.
    pub ddc_tuning_s: f64,
    /// Microseconds per block of each stage: DDC, FIR, FFT, post-processing.
    pub stage_us: [f64; 4],
}

/// Report of `gpucbf bench fgpu-narrowband` (and the narrowband part of `fgpu`).
#[derive(Debug, Clone, Serialize)]
pub struct NarrowbandReport {
    /// Device copy bandwidth (read + write), bytes per second.
    pub copy_bytes_per_s: f64,
    /// f32 FMAs per second.
    pub fma_per_s: f64,
    /// Pinned host→device bandwidth, bytes per second.
    pub h2d_bytes_per_s: f64,
    /// Channels.
    pub channels: usize,
    /// Input sample width.
    pub in_bits: u32,
    /// One per decimation and mode.
    pub lines: Vec<NarrowbandLine>,
}

/// FMA throughput kernel source (bench only).
pub const FMA_PEAK_SRC: &str = crate::kernel_source!("probe/fma_peak.cu");

const CHANNELS: usize = 32768;
/// Input samples per pol per block (≈ 2^27).
const SAMPLES_PER_POL: usize = 1 << 27;
const REPS: usize = 10;
/// Input samples per pol per pipeline chunk.
const CHUNK_SAMPLES: usize = 1 << 26;

fn fma_rate(stream: &Arc<CudaStream>, arch: &'static str) -> Result<f64, FError> {
    let ptx =
        crate::gpu::compile_ptx("fma_peak.cu", FMA_PEAK_SRC, &[], arch).map_err(FError::Gpu)?;
    let f = stream
        .context()
        .load_module(ptx)
        .map_err(gerr)?
        .load_function("fma_peak")
        .map_err(gerr)?;
    let (blocks, threads, iters) = (4096u32, 256u32, 4096i32);
    let mut out: CudaSlice<f32> = stream
        .alloc_zeros((blocks * threads) as usize)
        .map_err(gerr)?;
    let (a, b) = (0.999_99f32, 1e-6f32);
    let t = time_gpu(stream, 5, || {
        let mut l = stream.launch_builder(&f);
        l.arg(&mut out).arg(&iters).arg(&a).arg(&b);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: matches `fma_peak(float*, int, float, float)`; out holds one float per thread.
        unsafe { l.launch(cfg) }.map_err(gerr)?;
        Ok(())
    })?;
    Ok(blocks as f64 * threads as f64 * iters as f64 * 16.0 / t)
}

fn nb_config(decimation: usize, no_discard: bool, adc: f64) -> FConfig {
    let sbs = 2 * CHANNELS * decimation;
    let m = SAMPLES_PER_POL / sbs;
    let mut cfg = FConfig::wideband(CHANNELS, 256.min(m));
    cfg.dither = Dither::Uniform;
    cfg.narrowband = Some(Narrowband {
        decimation,
        centre_frequency: 300e6,
        adc_rate: adc,
        ddc_taps: None,
        weight_pass: 0.005,
        mode: if no_discard {
            NarrowbandMode::NoDiscard {
                pass_bandwidth: 0.8 * 0.5 * adc / decimation as f64,
            }
        } else {
            NarrowbandMode::Discard
        },
    });
    cfg
}

/// Runs the narrowband benchmark and prints one line (plus a stage line) per mode.
pub fn bench_gpu_narrowband() -> Result<NarrowbandReport, FError> {
    if !crate::gpu::gpu_available() {
        return Err(FError::Gpu(GpuError::Unsupported(
            "bench fgpu needs a CUDA device".into(),
        )));
    }
    let adc = 1712e6;
    let mut bounds: Option<(f64, f64, f64)> = None;
    let mut lines = Vec::new();
    for (decimation, no_discard) in [(8usize, false), (16, false), (8, true), (16, true)] {
        let cfg = nb_config(decimation, no_discard, adc);
        let sbs = cfg.samples_between_spectra();
        let m = SAMPLES_PER_POL / sbs;
        let needed = cfg.input_samples_needed(m);
        let packed: Vec<Vec<u8>> = (0..2u64)
            .map(|p| {
                let s = sample_noise(needed, 0x5eed_0000 + p);
                let mut b = vec![0u8; bitpack::packed_len(needed, IN_BITS)];
                bitpack::pack(&s, IN_BITS, &mut b);
                b
            })
            .collect();
        let fine = vec![0.1; m];
        let phase = vec![0.3; m];
        let gains = vec![Complex32::new(0.05, 0.0); CHANNELS];
        let pol = |p: usize| PolBlock {
            samples: Samples::Packed {
                data: &packed[p],
                bits: IN_BITS,
                len: needed,
            },
            timestamp: 123_456_789,
            offset: 0,
            fine_delay: &fine,
            phase: &phase,
            gains: &gains,
        };
        let block = Block {
            spectra: m,
            first_spectrum: 0,
            out_first: 0,
            pols: [pol(0), pol(1)],
        };
        let mut out = vec![0u8; cfg.output_len(m)];
        let tune_start = std::time::Instant::now();
        let mut be = GpuNarrowband::new(cfg.clone())?;
        let tuning = be.ddc_tuning(IN_BITS)?;
        let tune_secs = tune_start.elapsed().as_secs_f64();
        let stream = be.stream().clone();
        let (copy, fma, h2d) = match bounds {
            Some(b) => b,
            None => {
                let arch = crate::gpu::nvrtc_arch(
                    stream
                        .context()
                        .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                        .map_err(gerr)?,
                    stream
                        .context()
                        .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                        .map_err(gerr)?,
                )?;
                let bw = bandwidths(&stream)?;
                let b = (bw.copy, fma_rate(&stream, arch)?, bw.h2d);
                println!(
                    "bench fgpu narrowband: device copy {:.0} GB/s (read+write), f32 FMA {:.1} TFMA/s, pinned host->device {:.1} GB/s; \
                     {CHANNELS} channels, 16 taps, {IN_BITS}-bit in, 8-bit out, dither on; input samples/s count both pols; \
                     end-to-end bound = host->device / {:.2} B",
                    b.0 / 1e9,
                    b.1 / 1e12,
                    b.2 / 1e9,
                    IN_BITS as f64 / 8.0
                );
                bounds = Some(b);
                b
            }
        };
        be.process(&block, &mut out)?;
        let t_res = time_gpu(&stream, REPS, || be.compute(m, 0))?;
        let t_ddc = time_gpu(&stream, REPS, || be.launch_ddc(m))?;
        let t_fir = time_gpu(&stream, REPS, || be.launch_fir(m))?;
        let t_fft = time_gpu(&stream, REPS, || be.launch_fft(m))?;
        let t_post = time_gpu(&stream, REPS, || be.launch_post(m, 0))?;
        let pins = [
            pinned_from(&stream, &packed[0])?,
            pinned_from(&stream, &packed[1])?,
        ];
        // SAFETY: fully overwritten by the device before it is read.
        let mut pout = unsafe { stream.context().alloc_pinned::<u8>(out.len()) }.map_err(gerr)?;
        let t_e2e = time_gpu(&stream, 3, || {
            be.upload_pinned([&pins[0], &pins[1]])?;
            be.compute(m, 0)?;
            be.download_pinned(&mut pout)
        })?;
        drop((pins, pout, be));
        // Pipelined: chunks of CHUNK_SAMPLES per pol (whole heaps of the output).
        let mut pcfg = cfg.clone();
        let c = (CHUNK_SAMPLES / sbs).max(4 * cfg.taps);
        pcfg.spectra_per_heap = pcfg.spectra_per_heap.min(c);
        let c = c.next_multiple_of(pcfg.spectra_per_heap);
        // Steady state (the fill and drain of the pipeline left out; see PipeRates).
        let rates = pipelined(&pcfg, 1, c, &packed, &gains)?;
        let (e2e_pipe, copies_alone) = (rates.steady, rates.alone);
        let s = cfg.subsampling() as f64;
        let w = ddc_taps_per_phase(&cfg) as f64;
        let extra = (m + cfg.taps - 1) as f64 / m as f64; // DDC outputs per PFB input used
        let post_read = if no_discard { 8.0 } else { 4.0 };
        // Bytes per input sample: packed input, DDC write, FIR read + write, FFT read + write,
        // post-processing read, 8-bit output.
        let ddc_bytes = IN_BITS as f64 / 8.0 + 8.0 * extra / s;
        let bytes =
            ddc_bytes + (8.0 * extra + 8.0 + 16.0 + post_read) / s + 1.0 / decimation as f64;
        let fmas = 2.0 * w; // per input sample in the DDC (W·S complex taps per S samples)
        let samples = (2 * m * sbs) as f64;
        let res = samples / t_res;
        let (mem_bound, cmp_bound) = (copy / bytes, fma / fmas);
        let bound = mem_bound.min(cmp_bound);
        let ddc_rate = samples / t_ddc;
        let ddc_bound = (copy / ddc_bytes).min(cmp_bound);
        println!(
            "narrowband D={decimation:>2} {} S={:>2} ddc_taps={} spectra {m}: resident {:6.1} GS/s ({:4.1}% of {:.0} GS/s = min(memory {:.0} at {bytes:.2} B/sample, FMA {:.0} at {fmas:.0} FMA/sample))",
            if no_discard { "no-discard" } else { "discard   " },
            s,
            cfg.ddc_taps(),
            res / 1e9,
            100.0 * res / bound,
            bound / 1e9,
            mem_bound / 1e9,
            cmp_bound / 1e9,
        );
        let e2e_bound = h2d / (IN_BITS as f64 / 8.0);
        println!(
            "    end-to-end from pinned host memory: pipelined {:6.1} GS/s ({:4.1}% of {:.1} GS/s; {:4.1}% of the same uploads alone, {:.1} GS/s; chunks of {c} spectra), single-stream {:6.1} GS/s ({:4.1}%)",
            e2e_pipe / 1e9,
            100.0 * e2e_pipe / e2e_bound,
            e2e_bound / 1e9,
            100.0 * e2e_pipe / copies_alone,
            copies_alone / 1e9,
            samples / t_e2e / 1e9,
            100.0 * samples / t_e2e / e2e_bound,
        );
        println!(
            "    DDC alone {:6.1} GS/s ({:4.1}% of its bound {:.0} GS/s; tuning wgs {} unroll {}, chosen in {:.1} s); \
             stages: DDC {:.0} us, FIR {:.0} us, FFT {:.0} us, postproc {:.0} us",
            ddc_rate / 1e9,
            100.0 * ddc_rate / ddc_bound,
            ddc_bound / 1e9,
            tuning.wgs,
            tuning.unroll,
            tune_secs,
            t_ddc * 1e6,
            t_fir * 1e6,
            t_fft * 1e6,
            t_post * 1e6
        );
        lines.push(NarrowbandLine {
            decimation,
            no_discard,
            subsampling: s,
            ddc_taps: cfg.ddc_taps(),
            spectra: m,
            resident_samples_per_s: res,
            bound_samples_per_s: bound,
            memory_bound_samples_per_s: mem_bound,
            fma_bound_samples_per_s: cmp_bound,
            bytes_per_sample: bytes,
            fmas_per_sample: fmas,
            resident_fraction: res / bound,
            pipelined_samples_per_s: e2e_pipe,
            end_to_end_bound_samples_per_s: e2e_bound,
            pipelined_fraction: e2e_pipe / e2e_bound,
            uploads_alone_samples_per_s: copies_alone,
            pipelined_fraction_of_alone: e2e_pipe / copies_alone,
            chunk_spectra: c,
            single_stream_samples_per_s: samples / t_e2e,
            single_stream_fraction: samples / t_e2e / e2e_bound,
            ddc_samples_per_s: ddc_rate,
            ddc_bound_samples_per_s: ddc_bound,
            ddc_fraction: ddc_rate / ddc_bound,
            ddc_wgs: tuning.wgs,
            ddc_unroll: tuning.unroll,
            ddc_tuning_s: tune_secs,
            stage_us: [t_ddc * 1e6, t_fir * 1e6, t_fft * 1e6, t_post * 1e6],
        });
    }
    let (copy, fma, h2d) = bounds.unwrap_or_default();
    Ok(NarrowbandReport {
        copy_bytes_per_s: copy,
        fma_per_s: fma,
        h2d_bytes_per_s: h2d,
        channels: CHANNELS,
        in_bits: IN_BITS,
        lines,
    })
}
