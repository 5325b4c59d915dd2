//! `gpucbf bench fgpu-vkgdr`: chunk memory in GPU memory mapped for the CPU (`--use-vkgdr`)
//! against pinned host chunks, end to end. Writer threads place digitiser payloads into a
//! ring of chunks as the receive threads do (streaming stores, whole 5120-byte payloads in
//! order, a fence before a chunk is handed on), and the engine's own GPU channeliser
//! ([`Pipelined`], fgpu's path: a device-to-device copy from mapped memory, a DMA upload
//! from pinned memory) takes each full chunk. Per memory, two lines: the writers alone (the
//! rate that memory takes the placement's stores at: its bound) and end to end; then the
//! ratios vkgdr / pinned, all from the same run.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use num_complex::Complex32;
use serde::Serialize;

use super::IN_BITS;
use crate::compute::fengine::gpu::wideband::GpuBackend;
use crate::compute::fengine::{sample_noise, Block, FBackend, FConfig, PipelineBackend, Pipelined};
use crate::mem::vkgdr::Vkgdr;
use crate::mem::{Backing, ChunkMem, MemPolicy};
use crate::net::affinity::PinGuard;
use crate::spead::bitpack;
use crate::telemetry::cpu::thread_cpu_seconds;

/// Wideband channels of the channeliser (MeerKAT L-band 4k).
const CHANNELS: usize = 4096;
/// PFB taps (the other fgpu benchmarks' 16).
const TAPS: usize = 16;
/// Samples per digitiser heap (one packet).
const HEAP_SAMPLES: usize = 4096;
/// Payload bytes per packet: 4096 10-bit samples.
const PAYLOAD: usize = HEAP_SAMPLES * IN_BITS as usize / 8;
/// Distinct payloads the writers copy from (an L2-sized receive batch).
const SOURCE_PACKETS: usize = 64;

/// Options of `gpucbf bench fgpu-vkgdr`.
#[derive(Debug, Clone, Args)]
pub struct VkgdrArgs {
    /// Samples per polarisation per chunk (fgpu's `--recv-chunk-samples`); a multiple of
    /// 4096.
    #[arg(long, default_value_t = 1 << 25)]
    pub chunk_samples: usize,
    /// Chunks in the ring.
    #[arg(long, default_value_t = 4)]
    pub chunks: usize,
    /// Chunks timed per line, after one untimed pass over the ring.
    #[arg(long, default_value_t = 48)]
    pub iters: usize,
    /// Cores of the writer threads, one thread per core (none given: two unpinned
    /// threads).
    #[arg(long, value_delimiter = ',')]
    pub cores: Vec<usize>,
}

/// One line: a memory, with or without the GPU consuming the chunks.
#[derive(Debug, Clone, Serialize)]
pub struct VkgdrLine {
    /// `pinned` or `vkgdr`.
    pub memory: String,
    /// True when the GPU channeliser took every chunk; false for the writers alone.
    pub gpu: bool,
    /// Chunks timed.
    pub chunks: usize,
    /// Both pols' samples placed (and, with the GPU, channelised) per wall second.
    pub samples_per_s: f64,
    /// Payload bytes written per wall second.
    pub write_bytes_per_s: f64,
    /// The writers' thread CPU nanoseconds per packet.
    pub cpu_ns_per_packet: f64,
}

/// `gpucbf bench fgpu-vkgdr`'s report.
#[derive(Debug, Clone, Serialize)]
pub struct VkgdrReport {
    /// Samples per pol per chunk.
    pub chunk_samples: usize,
    /// Output spectra channelised per chunk.
    pub spectra_per_chunk: usize,
    /// Writer threads.
    pub writers: usize,
    /// The lines, pinned first.
    pub lines: Vec<VkgdrLine>,
    /// End to end, vkgdr over pinned.
    pub end_to_end_ratio: Option<f64>,
    /// Writers alone, vkgdr over pinned.
    pub write_ratio: Option<f64>,
    /// Writer CPU per packet end to end, vkgdr over pinned.
    pub cpu_per_packet_ratio: Option<f64>,
    /// Why the vkgdr lines are missing.
    pub vkgdr_unavailable: Option<String>,
}

/// What one line measured.
struct Measured {
    chunks: usize,
    wall: f64,
    cpu: f64,
    packets: u64,
}

/// The channeliser and the per-chunk inputs besides the samples.
struct Consumer {
    be: Pipelined,
    inputs: Inputs,
}

/// What a block needs besides the samples.
struct Inputs {
    cfg: FConfig,
    spectra: usize,
    fine: Vec<f64>,
    phase: Vec<f64>,
    gains: Vec<Complex32>,
}

impl Inputs {
    fn block<'a>(&'a self, chunk: &'a [u8], pol_bytes: usize) -> Block<'a> {
        let (p0, p1) = chunk[..2 * pol_bytes].split_at(pol_bytes);
        super::packed_block(
            &self.cfg,
            self.spectra,
            [p0, p1],
            &self.fine,
            &self.phase,
            &self.gains,
        )
    }
}

/// The payloads the writers copy: digitiser noise packed to `IN_BITS` (the wideband lines'
/// input), `SOURCE_PACKETS` distinct packets.
fn source() -> Vec<u8> {
    let samples = sample_noise(SOURCE_PACKETS * HEAP_SAMPLES, 0x1234_5678);
    let mut b = vec![0u8; bitpack::packed_len(samples.len(), IN_BITS)];
    bitpack::pack(&samples, IN_BITS, &mut b);
    b
}

/// The writer threads' cores: one thread per `--cores` entry, else two unpinned.
fn writer_cores(args: &VkgdrArgs) -> Vec<Option<usize>> {
    if args.cores.is_empty() {
        vec![None, None]
    } else {
        args.cores.iter().map(|&c| Some(c)).collect()
    }
}

/// Writes every packet of both pols of the chunk at `base` with streaming stores, then
/// fences: what a receive thread does to a chunk before handing it on.
///
/// # Safety
/// `base` must point to `2 * pol_bytes` writable bytes no one else uses meanwhile.
unsafe fn fill(base: *mut u8, pol_bytes: usize, src: &[u8]) -> u64 {
    let per_pol = pol_bytes / PAYLOAD;
    for p in 0..2 {
        for h in 0..per_pol {
            let s = &src[(h % SOURCE_PACKETS) * PAYLOAD..][..PAYLOAD];
            // SAFETY: within the chunk (h < per_pol), by the caller's contract.
            unsafe { crate::mem::copy_stream(base.add(p * pol_bytes + h * PAYLOAD), s) };
        }
    }
    crate::mem::stream_fence();
    (2 * per_pol) as u64
}

/// One line: the writers fill the ring's chunks round and round; the consumer takes each
/// full chunk (into the channeliser when given) and hands it back. One untimed pass over
/// the ring first.
fn line(
    ring: &[ChunkMem],
    (pol_bytes, src): (usize, &[u8]),
    args: &VkgdrArgs,
    mut gpu: Option<&mut Consumer>,
) -> anyhow::Result<Measured> {
    let writers = writer_cores(args);
    let warm = ring.len();
    let total = warm + args.iters.max(1);
    let ptrs: Vec<usize> = ring.iter().map(|c| c.as_ptr() as usize).collect();
    let (free_tx, free_rx) = crossbeam_channel::bounded::<usize>(ring.len());
    let (full_tx, full_rx) = crossbeam_channel::bounded::<usize>(ring.len());
    for i in 0..ring.len() {
        free_tx.send(i)?;
    }
    std::thread::scope(|s| -> anyhow::Result<Measured> {
        let mut handles = Vec::new();
        for core in &writers {
            let (free_rx, full_tx, ptrs) = (free_rx.clone(), full_tx.clone(), &ptrs);
            let core = *core;
            handles.push(s.spawn(move || -> anyhow::Result<(f64, u64)> {
                let _pin = PinGuard::new(core)?;
                let (mut cpu, mut packets) = (0.0, 0u64);
                while let Ok(i) = free_rx.recv() {
                    let c0 = thread_cpu_seconds();
                    // SAFETY: chunk i is this writer's until it sends i on: the channels
                    // pass each index to one side at a time; the chunk is 2 * pol_bytes.
                    packets += unsafe { fill(ptrs[i] as *mut u8, pol_bytes, src) };
                    cpu += thread_cpu_seconds() - c0;
                    if full_tx.send(i).is_err() {
                        break;
                    }
                }
                Ok((cpu, packets))
            }));
        }
        drop((full_tx, free_rx));
        let mut t0 = Instant::now();
        let mut queued = VecDeque::new();
        let mut consume = || -> anyhow::Result<()> {
            for k in 0..total {
                let i = full_rx.recv().context("the writers stopped")?;
                if k == warm {
                    t0 = Instant::now();
                }
                if let Some(c) = gpu.as_deref_mut() {
                    if queued.len() >= c.be.depth() {
                        // Lent, as the engine's send path takes it, and given back at once.
                        drop(c.be.complete_lent(true)?);
                        queued.pop_front();
                    }
                    let out_len = c.inputs.cfg.output_len(c.inputs.spectra);
                    let block = c.inputs.block(&ring[i], pol_bytes);
                    c.be.submit(std::slice::from_ref(&block), out_len)?;
                    c.be.fence_input()?;
                    queued.push_back(i);
                }
                free_tx.send(i)?;
            }
            if let Some(c) = gpu.as_deref_mut() {
                while c.be.complete_lent(true)?.is_some() {}
            }
            Ok(())
        };
        let r = consume();
        let wall = t0.elapsed().as_secs_f64();
        drop(free_tx);
        // The writers finish the chunk in hand, then see the closed channels.
        while full_rx.recv().is_ok() {}
        let (mut cpu, mut packets) = (0.0, 0);
        for h in handles {
            let (c, p) = h
                .join()
                .map_err(|_| anyhow::anyhow!("a writer panicked"))??;
            cpu += c;
            packets += p;
        }
        r?;
        Ok(Measured {
            chunks: total - warm,
            wall,
            cpu,
            packets,
        })
    })
}

/// Runs the benchmark: per memory (pinned, then vkgdr), the writers alone and end to end.
pub fn run(args: &VkgdrArgs) -> anyhow::Result<VkgdrReport> {
    anyhow::ensure!(
        crate::gpu::gpu_available(),
        "bench fgpu-vkgdr needs a CUDA device"
    );
    anyhow::ensure!(
        args.chunk_samples > 0 && args.chunk_samples.is_multiple_of(HEAP_SAMPLES),
        "--chunk-samples must be a positive multiple of {HEAP_SAMPLES}"
    );
    anyhow::ensure!(args.chunks >= 2, "--chunks must be at least 2");
    let mut cfg = FConfig::wideband(CHANNELS, 256);
    cfg.taps = TAPS;
    let spectra = (args.chunk_samples / cfg.pfb_step()).saturating_sub(TAPS - 1) / 256 * 256;
    anyhow::ensure!(
        spectra > 0,
        "--chunk-samples {} is too short for one heap of 256 spectra",
        args.chunk_samples
    );
    let pol_bytes = args.chunk_samples / HEAP_SAMPLES * PAYLOAD;
    let ctx = cudarc::driver::CudaContext::new(0).context("CUDA device 0")?;
    let (vk, vkgdr_unavailable) = match Vkgdr::open(&ctx) {
        Ok(v) => (Some(Arc::new(v)), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let writers = writer_cores(args).len();
    let src = source();
    println!(
        "bench fgpu-vkgdr: {} chunks of {} samples per pol (2 pols, 10-bit, {:.1} MiB), {writers} writer threads, \
         wideband {CHANNELS} channels {TAPS} taps, {spectra} spectra per chunk; samples/s count both pols",
        args.chunks,
        args.chunk_samples,
        (2 * pol_bytes) as f64 / (1 << 20) as f64
    );
    let mut lines = Vec::new();
    let mut memories = vec![(
        "pinned",
        MemPolicy {
            hugepages: true,
            cuda: Some(ctx.clone()),
            vkgdr: None,
        },
    )];
    match &vk {
        Some(v) => {
            println!("vkgdr: {} (memory type {:?})", v.name, v.memory);
            memories.push((
                "vkgdr",
                MemPolicy {
                    hugepages: false,
                    cuda: None,
                    vkgdr: Some(v.clone()),
                },
            ));
        }
        None => println!(
            "vkgdr: unavailable ({}); pinned lines only",
            vkgdr_unavailable.as_deref().unwrap_or("")
        ),
    }
    for (name, policy) in memories {
        let ring = (0..args.chunks)
            .map(|_| ChunkMem::alloc(2 * pol_bytes, &policy))
            .collect::<Result<Vec<_>, _>>()?;
        let want = if name == "vkgdr" {
            ring.iter().all(|c| c.backing() == Backing::GpuMapped)
        } else {
            ring.iter().all(|c| c.cuda_pinned())
        };
        anyhow::ensure!(want, "{name}: a chunk did not get the memory asked for");
        let mut consumer = Consumer {
            be: Pipelined::new(PipelineBackend::Wideband(GpuBackend::new(cfg.clone())?))?,
            inputs: Inputs {
                cfg: cfg.clone(),
                spectra,
                fine: vec![0.1; spectra],
                phase: vec![0.3; spectra],
                gains: vec![Complex32::new(0.02, 0.0); CHANNELS],
            },
        };
        for gpu in [false, true] {
            let m = line(&ring, (pol_bytes, &src), args, gpu.then_some(&mut consumer))?;
            let samples = (m.chunks * 2 * args.chunk_samples) as f64 / m.wall;
            let l = VkgdrLine {
                memory: name.to_string(),
                gpu,
                chunks: m.chunks,
                samples_per_s: samples,
                write_bytes_per_s: (m.chunks * 2 * pol_bytes) as f64 / m.wall,
                cpu_ns_per_packet: m.cpu * 1e9 / m.packets.max(1) as f64,
            };
            println!(
                "{name:>6} {:<11}: {:6.2} GS/s, writes {:5.1} GB/s, writers {:5.0} ns CPU per packet",
                if gpu { "end to end" } else { "writers" },
                l.samples_per_s / 1e9,
                l.write_bytes_per_s / 1e9,
                l.cpu_ns_per_packet
            );
            lines.push(l);
        }
    }
    let find = |mem: &str, gpu: bool| {
        lines
            .iter()
            .find(|l| l.memory == mem && l.gpu == gpu)
            .cloned()
    };
    let ratio = |f: fn(&VkgdrLine) -> f64, gpu: bool| {
        Some(f(&find("vkgdr", gpu)?) / f(&find("pinned", gpu)?))
    };
    let report = VkgdrReport {
        chunk_samples: args.chunk_samples,
        spectra_per_chunk: spectra,
        writers,
        end_to_end_ratio: ratio(|l| l.samples_per_s, true),
        write_ratio: ratio(|l| l.samples_per_s, false),
        cpu_per_packet_ratio: ratio(|l| l.cpu_ns_per_packet, true),
        lines,
        vkgdr_unavailable,
    };
    if let (Some(e), Some(w), Some(c)) = (
        report.end_to_end_ratio,
        report.write_ratio,
        report.cpu_per_packet_ratio,
    ) {
        println!(
            "vkgdr / pinned: end to end {e:.3}, writers alone {w:.3}, writer CPU per packet {c:.3}"
        );
    }
    Ok(report)
}
