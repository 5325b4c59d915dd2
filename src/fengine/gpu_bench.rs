//! `gpucbf bench fgpu`: wideband GPU F-engine throughput (data resident on the GPU and
//! end-to-end from pinned host memory) next to the device-copy and pinned host↔device
//! bandwidths measured in the same run.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, PinnedHostSlice};

use super::gpu::GpuBackend;
use super::{Block, FBackend, FConfig, FError, PolBlock, Samples};
use crate::bitpack;
use num_complex::Complex32;

fn gerr<E: std::fmt::Debug>(e: E) -> FError {
    FError::Gpu(format!("{e:?}"))
}

/// Input sample width and taps of the benchmark (MeerKAT digitiser, katgpucbf default).
const IN_BITS: u32 = 10;
const TAPS: usize = 16;
/// Real input samples per pol per block (≈ 2^26).
const SAMPLES_PER_POL: usize = 1 << 26;
const REPS: usize = 20;

/// Seconds per call of `f` over `reps` calls, timed with CUDA events on `stream`.
fn time_gpu(
    stream: &Arc<CudaStream>,
    reps: usize,
    f: impl FnMut() -> Result<(), FError>,
) -> Result<f64, FError> {
    crate::gpu::time_on_stream(stream, reps, f, gerr)
}

/// Deterministic pseudo-noise samples within `bits` (xorshift, roughly ±200).
fn noise(n: usize, seed: u64) -> Vec<i16> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) % 401) as i16 - 200
        })
        .collect()
}

fn pinned_from(stream: &Arc<CudaStream>, data: &[u8]) -> Result<PinnedHostSlice<u8>, FError> {
    // SAFETY: the memory is fully written below before any use.
    let mut p = unsafe { stream.context().alloc_pinned::<u8>(data.len()) }.map_err(gerr)?;
    p.as_mut_slice().map_err(gerr)?.copy_from_slice(data);
    Ok(p)
}

/// Device-to-device copy bandwidth (bytes read + written per second) and pinned
/// host→device / device→host bandwidths.
fn bandwidths(stream: &Arc<CudaStream>) -> Result<(f64, f64, f64), FError> {
    let len = 1usize << 30;
    let a: CudaSlice<u8> = stream.alloc_zeros(len).map_err(gerr)?;
    let mut b: CudaSlice<u8> = stream.alloc_zeros(len).map_err(gerr)?;
    let t = time_gpu(stream, 10, || stream.memcpy_dtod(&a, &mut b).map_err(gerr))?;
    let copy = 2.0 * len as f64 / t;
    drop(b);
    let hlen = 1usize << 28;
    let mut h = pinned_from(stream, &vec![1u8; hlen])?;
    let mut dev: CudaSlice<u8> = stream.alloc_zeros(hlen).map_err(gerr)?;
    let t = time_gpu(stream, 10, || {
        stream.memcpy_htod(&h, &mut dev).map_err(gerr)
    })?;
    let h2d = hlen as f64 / t;
    let t = time_gpu(stream, 10, || {
        stream.memcpy_dtoh(&dev, &mut h).map_err(gerr)
    })?;
    let d2h = hlen as f64 / t;
    Ok((copy, h2d, d2h))
}

/// Runs the benchmark and prints one line per (channels, unzip).
pub fn bench_gpu() -> Result<(), FError> {
    if !crate::gpu::gpu_available() {
        return Err(FError::Gpu("bench fgpu needs a CUDA device".into()));
    }
    let mut first = true;
    let mut bw = (0.0, 0.0, 0.0);
    for channels in [1024usize, 4096, 32768] {
        let step = 2 * channels;
        let m = SAMPLES_PER_POL / step;
        let sph = 256.min(m);
        let mut cfg = FConfig::wideband(channels, sph);
        cfg.taps = TAPS;
        let needed = cfg.input_samples_needed(m);
        let packed: Vec<Vec<u8>> = (0..2u64)
            .map(|p| {
                let s = noise(needed, 0x1234_5678 + p);
                let mut b = vec![0u8; bitpack::packed_len(needed, IN_BITS)];
                bitpack::pack(&s, IN_BITS, &mut b);
                b
            })
            .collect();
        let fine = vec![0.1; m];
        let phase = vec![0.3; m];
        let gains = vec![Complex32::new(0.02, 0.0); channels];
        let pol = |p: usize| PolBlock {
            samples: Samples::Packed {
                data: &packed[p],
                bits: IN_BITS,
                len: needed,
            },
            timestamp: 0,
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
        for unzip in [1usize, 2, 4] {
            let mut be = GpuBackend::with_unzip(cfg.clone(), unzip)?;
            let stream = be.stream().clone();
            if first {
                bw = bandwidths(&stream)?;
                println!(
                    "bench fgpu: device copy {:.0} GB/s (read+write), pinned host->device {:.1} GB/s, device->host {:.1} GB/s",
                    bw.0 / 1e9,
                    bw.1 / 1e9,
                    bw.2 / 1e9
                );
                println!(
                    "wideband, {TAPS} taps, {IN_BITS}-bit in, 8-bit out, dither on; input samples/s count both pols; \
                     resident bound = copy bandwidth / bytes moved per sample, end-to-end bound = host->device / {:.2} B",
                    IN_BITS as f64 / 8.0
                );
                first = false;
            }
            be.process(&block, &mut out)?;
            let samples = (2 * m * step) as f64;
            let t_res = time_gpu(&stream, REPS, || be.compute(m, 0))?;
            let t_fir = time_gpu(&stream, REPS, || be.launch_fir(m))?;
            let t_fft = time_gpu(&stream, REPS, || be.launch_fft(m))?;
            let t_post = time_gpu(&stream, REPS, || be.launch_post(m, 0))?;
            let pins = [
                pinned_from(&stream, &packed[0])?,
                pinned_from(&stream, &packed[1])?,
            ];
            // SAFETY: fully overwritten by the device before it is read.
            let mut pout =
                unsafe { stream.context().alloc_pinned::<u8>(out.len()) }.map_err(gerr)?;
            let t_e2e = time_gpu(&stream, REPS / 2, || {
                be.upload_pinned([&pins[0], &pins[1]])?;
                be.compute(m, 0)?;
                be.download_pinned(&mut pout)
            })?;
            // Bytes per input sample: packed input, FIR out (f32 complex per 2 samples),
            // FFT read + write, post-processing read, output (1 byte per sample).
            let bytes = IN_BITS as f64 / 8.0 + 4.0 + 8.0 + 4.0 + 1.0;
            let res = samples / t_res;
            let e2e = samples / t_e2e;
            let res_bound = bw.0 / bytes;
            let e2e_bound = bw.1 / (IN_BITS as f64 / 8.0);
            println!(
                "channels {channels:>6} unzip {unzip} spectra {m:>6}: resident {:7.1} GS/s ({:4.1}% of {:.0} GS/s at {bytes:.2} B/sample), \
                 end-to-end {:6.1} GS/s ({:4.1}% of {:.0} GS/s)",
                res / 1e9,
                100.0 * res / res_bound,
                res_bound / 1e9,
                e2e / 1e9,
                100.0 * e2e / e2e_bound,
                e2e_bound / 1e9
            );
            // Stages: bytes each moves per sample and the bandwidth it reaches.
            let gbs = |b: f64, t: f64| b * samples / t / 1e9;
            let serial = 1.0 / ((IN_BITS as f64 / 8.0) / bw.1 + 1.0 / bw.2 + 1.0 / res);
            println!(
                "    stages: FIR {:.0} us ({:.0} GB/s), FFT {:.0} us ({:.0} GB/s), postproc {:.0} us ({:.0} GB/s); \
                 serial copy-compute-copy bound {:.1} GS/s",
                t_fir * 1e6,
                gbs(IN_BITS as f64 / 8.0 + 4.0, t_fir),
                t_fft * 1e6,
                gbs(8.0, t_fft),
                t_post * 1e6,
                gbs(5.0, t_post),
                serial / 1e9
            );
        }
    }
    Ok(())
}
