//! `gpucbf bench xbgpu-beam`: beamformer throughput (80 antennas, 512 channels, 16 and 64 beams,
//! 8- and 4-bit input, a chunk of batches resident on the device) as a fraction of the device
//! copy bandwidth measured in the same run; limit probes, kernel variants and a per-block
//! timeline. `GPUCBF_BENCH_BEAM_SWEEP=1` runs only the wgmma interleave / stealing sweep.

use cudarc::driver::{CudaSlice, CudaStream};
use serde::Serialize;

use super::{gerr, random_input, time_gpu};
use crate::compute::xengine::{Beam, BeamKernel, BeamSet, BeamTuning, GpuX, XError, XShape};
use crate::gpu::GpuError;

/// One beamformer line: a configuration timed over a chunk.
#[derive(Debug, Clone, Serialize)]
pub struct BeamLine {
    /// Input sample width.
    pub bits: u32,
    /// Antennas.
    pub n_ants: usize,
    /// Beams (alternating pol).
    pub beams: usize,
    /// Whether the quantiser dithers.
    pub dither: bool,
    /// Quantiser gain.
    pub gain: f64,
    /// The kernel, its configuration and resources, as printed.
    pub kernel: String,
    /// Batches per launch.
    pub chunk: usize,
    /// Megabytes read and written per batch.
    pub mb_per_batch: f64,
    /// Milliseconds per launch (chunk).
    pub ms_per_chunk: f64,
    /// Milliseconds per batch.
    pub ms_per_batch: f64,
    /// Gigabytes per second moved.
    pub gb_per_s: f64,
    /// `gb_per_s` as a fraction of the device copy bandwidth.
    pub copy_fraction: f64,
    /// The limit probe, if the line is one (wrong results, timing only).
    pub probe: Option<&'static str>,
}

/// A headline figure: the default configuration's fraction of the copy bandwidth.
#[derive(Debug, Clone, Serialize)]
pub struct BeamHeadline {
    /// Input sample width.
    pub bits: u32,
    /// Beams.
    pub beams: usize,
    /// Fraction of the copy bandwidth.
    pub copy_fraction: f64,
}

/// Report of `gpucbf bench xbgpu-beam`.
#[derive(Debug, Clone, Serialize)]
pub struct BeamReport {
    /// The bound: device copy bandwidth (read + write), gigabytes per second.
    pub copy_gb_per_s: f64,
    /// Every beamformer line, in the order printed.
    pub lines: Vec<BeamLine>,
    /// The configurations that could not run, as printed.
    pub not_run: Vec<String>,
    /// The summary line: the default configuration at 8 and 4 bits, 16 and 64 beams.
    pub summary: Vec<BeamHeadline>,
    /// The target fraction of the copy bandwidth.
    pub target_fraction: f64,
}

impl BeamReport {
    /// Records a line; returns its fraction of the copy bandwidth.
    fn add(&mut self, l: BeamLine) -> f64 {
        let f = l.copy_fraction;
        self.lines.push(l);
        f
    }

    /// Records a measurement that may fail without ending the benchmark: its line, or
    /// `label: not run (error)`, printed.
    fn add_or_note(&mut self, r: Result<BeamLine, XError>, label: impl FnOnce() -> String) {
        match r {
            Ok(l) => {
                self.add(l);
            }
            Err(e) => {
                let t = format!("{}: not run ({e})", label());
                println!("{t}");
                self.not_run.push(t);
            }
        }
    }
}

/// Device-to-device copy bandwidth (read + write bytes per second).
fn bench_copy(stream: &std::sync::Arc<CudaStream>) -> Result<f64, XError> {
    let n = 512usize << 20;
    let src: CudaSlice<u8> = stream.alloc_zeros(n).map_err(gerr)?;
    let mut dst: CudaSlice<u8> = stream.alloc_zeros(n).map_err(gerr)?;
    let t = time_gpu(stream, 10, || {
        stream.memcpy_dtod(&src, &mut dst).map_err(gerr)
    })?;
    let bw = 2.0 * n as f64 / t;
    println!("device copy: {:.1} GB/s (read + write)", bw / 1e9);
    Ok(bw)
}

/// A beamformer measurement setup: 80 antennas, 512 channels, 256 spectra per batch,
/// `bits`-bit input, one chunk of `n_batches` batches resident on the device.
struct BeamBench {
    g: GpuX,
    shape: XShape,
    input: CudaSlice<i8>,
    present: CudaSlice<u8>,
    dseeds: CudaSlice<u32>,
    n_batches: usize,
    copy_bw: f64,
    /// Beam quantiser gain (`Beam::quant_gain`).
    gain: f64,
}

/// 8-bit beam gain of the headline lines: the random input (uniform int8, σ ≈ 74) summed over
/// 80 antennas gives outputs of σ ≈ 16 LSB, no clipping (an observatory's operating point).
const BEAM_GAIN: f64 = 0.025;
/// 8-bit beam gain of the clipping line: σ ≈ 66 LSB, about 5.5 % of the values clipped to ±127
/// (every warp takes the saturation path).
const BEAM_GAIN_CLIP: f64 = 0.1;

impl BeamBench {
    fn new(bits: u32, n_batches: usize, copy_bw: f64) -> Result<Self, XError> {
        let n_ants = 80;
        let shape = XShape::new(n_ants, 512, 256)?.with_sample_bits(bits)?;
        let g = GpuX::new(shape)?;
        let stream = g.stream().clone();
        let mut host = random_input(shape.batch_bytes() * n_batches);
        if bits == 4 {
            // keep the nibbles in [-7, 7]
            host.iter_mut().for_each(|v| *v &= 0x77);
        }
        let input = stream.clone_htod(&host).map_err(gerr)?;
        let present = stream
            .clone_htod(&vec![1u8; n_ants * n_batches])
            .map_err(gerr)?;
        let seeds: Vec<u32> = (0..n_batches as u64)
            .map(|k| crate::compute::xengine::batch_dither_seed(7, k))
            .collect();
        let dseeds = stream.clone_htod(&seeds).map_err(gerr)?;
        Ok(Self {
            g,
            shape,
            input,
            present,
            dseeds,
            n_batches,
            copy_bw,
            gain: if bits == 8 { BEAM_GAIN } else { 1.6 },
        })
    }

    /// One measurement with `n_beams` beams of alternating pol: one launch over the whole
    /// chunk; prints bytes moved per batch, time per batch and the fraction of the copy
    /// bandwidth, and returns that fraction.
    fn run(
        &mut self,
        n_beams: usize,
        dither: bool,
        tuning: BeamTuning,
    ) -> Result<BeamLine, XError> {
        let shape = self.shape;
        let n_ants = shape.n_ants;
        let bits = shape.sample_bits;
        self.g.set_beam_tuning(tuning)?;
        let beams = BeamSet {
            beams: (0..n_beams)
                .map(|b| Beam {
                    pol: b % 2,
                    quant_gain: self.gain,
                    weights: vec![1.0; n_ants],
                    delays: (0..n_ants).map(|a| a as f64 * 1e-9).collect(),
                    phases: vec![0.3; n_ants],
                })
                .collect(),
            channel_offset: 0,
            n_channels_total: 4096,
            bandwidth: 856e6,
            dither: true,
            seed: 7,
        };
        let t = beams.tables(&shape, &vec![true; n_ants])?;
        let dt = self.g.upload_tables(&t)?;
        let kernel = self.g.beam_describe(&dt, n_beams)?;
        let stream = self.g.stream().clone();
        let nb = self.n_batches;
        let mut out: CudaSlice<i8> = stream
            .alloc_zeros(shape.beam_output_len(n_beams) * nb)
            .map_err(gerr)?;
        // (probe 5 writes 8 words per block past the counters)
        let tl_words = if tuning.probe == 5 { 10 * 1024 } else { 0 };
        let mut sat: CudaSlice<u64> = stream.alloc_zeros(n_beams * nb + tl_words).map_err(gerr)?;
        let (g, input, present, dseeds) = (&mut self.g, &self.input, &self.present, &self.dseeds);
        let secs = time_gpu(&stream, 20, || {
            g.beamform_device(
                &dt,
                n_beams,
                crate::compute::xengine::gpu::BeamLaunch {
                    input,
                    n_batches: nb,
                    present,
                    dseeds,
                    dither,
                    out: &mut out,
                    saturated: &mut sat,
                },
            )
        })?;
        let bytes = (shape.batch_bytes() + shape.beam_output_len(n_beams)) as f64;
        let per_batch = secs / nb as f64;
        let bw = bytes / per_batch;
        let frac = bw / self.copy_bw;
        let probe = match tuning.probe {
            1 => Some("no MMA, no epilogue"),
            2 => Some("no weights"),
            3 => Some("MMAs, no epilogue"),
            4 => Some("no MMA"),
            5 => Some("timeline"),
            _ => None,
        };
        let what = probe.map(|p| format!(" [probe: {p}]")).unwrap_or_default();
        println!(
            "beamformer {bits}-bit n_ants={n_ants} beams={n_beams:2} dither={} gain={} {kernel} chunk={nb:2}: {:.2} MB in+out per batch, {:.4} ms/chunk, {:.4} ms/batch, {:.1} GB/s = {:.1} % of copy bandwidth{what}",
            u8::from(dither),
            self.gain,
            bytes / 1e6,
            secs * 1e3,
            per_batch * 1e3,
            bw / 1e9,
            100.0 * frac,
        );
        if tuning.probe == 5 {
            let words = stream.clone_dtoh(&sat).map_err(gerr)?;
            print_timeline(&words[n_beams * nb..]);
        }
        Ok(BeamLine {
            bits,
            n_ants,
            beams: n_beams,
            dither,
            gain: self.gain,
            kernel,
            chunk: nb,
            mb_per_batch: bytes / 1e6,
            ms_per_chunk: secs * 1e3,
            ms_per_batch: per_batch * 1e3,
            gb_per_s: bw / 1e9,
            copy_fraction: frac,
            probe,
        })
    }
}

/// The per-block timeline of a `BW_PROBE` 5 launch (the last of the timed ones): blocks by
/// total cycles, the phases' cycles per item and warpgroup, mean over all blocks and for the
/// fastest and slowest fifth.
fn print_timeline(words: &[u64]) {
    const PHASES: [&str; 6] = [
        "weights",
        "stage wait",
        "MMA",
        "sums wait",
        "epilogue",
        "copy-out",
    ];
    // (cycles, SM, items, phases, weight builds, cycles of the waits at weight changes and of
    // the builds)
    type Block = (u64, u64, u64, [u64; 6], u64, [u64; 2]);
    let mut blocks: Vec<Block> = words
        .chunks_exact(10)
        .filter(|w| w[1] & 0xffff_ffff > 0)
        .map(|w| {
            let mut ph = [0u64; 6];
            ph.copy_from_slice(&w[2..8]);
            (
                w[0] & ((1 << 48) - 1),
                w[0] >> 48,
                w[1] & 0xffff_ffff,
                ph,
                w[1] >> 32,
                [w[8], w[9]],
            )
        })
        .collect();
    if blocks.is_empty() {
        println!("  timeline: no blocks");
        return;
    }
    blocks.sort_by_key(|b| b.0);
    let n = blocks.len();
    let show = |name: &str, bs: &[Block]| {
        let items: u64 = bs.iter().map(|b| b.2).sum();
        let tot: u64 = bs.iter().map(|b| b.0).sum();
        let builds: u64 = bs.iter().map(|b| b.4).sum();
        let mut line = format!(
            "  {name:8} {:3} blocks, {:5.1} items and {:4.1} weight builds a block, {:7.0} cycles/item:",
            bs.len(),
            items as f64 / bs.len() as f64,
            builds as f64 / bs.len() as f64,
            tot as f64 / items as f64
        );
        for (j, p) in PHASES.iter().enumerate() {
            let c: u64 = bs.iter().map(|b| b.3[j]).sum();
            // (summed over the 4 warpgroups)
            line += &format!(" {p} {:.0}", c as f64 / 4.0 / items as f64);
        }
        // (each build: summed over the 4 warpgroups)
        let waits: u64 = bs.iter().map(|b| b.5[0]).sum();
        let bc: u64 = bs.iter().map(|b| b.5[1]).sum();
        let nb = (4 * builds).max(1) as f64;
        line += &format!(
            "; a build {:.0} cycles (waits {:.0})",
            bc as f64 / nb,
            waits as f64 / nb
        );
        println!("{line}");
    };
    println!(
        "  timeline: block cycles min {} median {} max {}; slowest SMs {:?}; fastest SMs {:?}",
        blocks[0].0,
        blocks[n / 2].0,
        blocks[n - 1].0,
        blocks[n.saturating_sub(8)..]
            .iter()
            .map(|b| b.1)
            .collect::<Vec<_>>(),
        blocks[..8.min(n)].iter().map(|b| b.1).collect::<Vec<_>>()
    );
    show("all", &blocks);
    show("fastest", &blocks[..n.div_ceil(5)]);
    show("slowest", &blocks[n - n.div_ceil(5)..]);
}

/// Chunk size of the beamformer benchmark's headline lines (batches per launch, as the engine's
/// `--heaps-per-fengine-per-chunk`).
const BENCH_CHUNK: usize = 16;

/// Device copy bandwidth, then the beamformer with the default configuration (16 and 64 beams,
/// 8- and 4-bit input, over a chunk of 16 batches), the limit probes, one batch per launch and
/// the other configurations, each as a fraction of the copy bandwidth; last a summary line.
pub(super) fn bench_beams(stream: &std::sync::Arc<CudaStream>) -> Result<BeamReport, XError> {
    let copy = bench_copy(stream)?;
    let mut r = BeamReport {
        copy_gb_per_s: copy / 1e9,
        lines: Vec::new(),
        not_run: Vec::new(),
        summary: Vec::new(),
        target_fraction: 0.8,
    };
    let def = BeamTuning::default();
    let mut b8 = BeamBench::new(8, BENCH_CHUNK, copy)?;
    if std::env::var_os("GPUCBF_BENCH_BEAM_SWEEP").is_some() {
        // (development: only the wgmma kernel: the channel interleave, stealing or not)
        for nb in [64, 16] {
            for (cp, steal) in [
                (0, Some(false)),
                (0, Some(true)),
                (1, Some(false)),
                (1, Some(true)),
                (0, Some(false)),
                (0, Some(true)),
                (8, Some(false)),
            ] {
                let tu = BeamTuning {
                    wg_cperm: cp,
                    wg_steal: steal,
                    ..def
                };
                r.add_or_note(b8.run(nb, true, tu), || {
                    format!("beamformer beams={nb} {tu:?}")
                });
            }
        }
        return Ok(r);
    }
    let mut b4 = BeamBench::new(4, BENCH_CHUNK, copy)?;
    println!("beamformer, default configuration (BeamTuning::default()), chunk of {BENCH_CHUNK} batches:");
    let mut head = Vec::new();
    for (bits, b) in [(8, &mut b8), (4, &mut b4)] {
        for nb in [16, 64] {
            head.push((bits, nb, r.add(b.run(nb, true, def)?)));
        }
    }
    println!(
        "beamformer with clipping (gain {BEAM_GAIN_CLIP}: outputs of σ ≈ 66 LSB, ~5.5 % clipped):"
    );
    b8.gain = BEAM_GAIN_CLIP;
    for nb in [16, 64] {
        r.add(b8.run(nb, true, def)?);
    }
    b8.gain = BEAM_GAIN;
    println!("beamformer limit probes of the default kernel (wrong results, timing only):");
    for nb in [16, 64] {
        for probe in [1, 2, 3, 4, 5] {
            if probe >= 4 && !b8.g.wgmma_supported() {
                continue;
            }
            r.add(b8.run(nb, true, BeamTuning { probe, ..def })?);
        }
    }
    // the mma.sync kernel (the default where wgmma does not apply), its probes and variants
    let mma = BeamTuning {
        kernel: BeamKernel::Mma,
        ..def
    };
    println!("beamformer, mma.sync kernel:");
    for nb in [16, 64] {
        r.add(b8.run(nb, true, mma)?);
    }
    println!("beamformer limit probes of the mma.sync kernel (wrong results, timing only):");
    for nb in [16, 64] {
        for probe in [1, 3] {
            r.add(b8.run(nb, true, BeamTuning { probe, ..mma })?);
        }
    }
    println!("beamformer variants (same run):");
    // the wgmma kernel's work stealing against static item ranges (the plan's choice with a
    // channel interleave: static), the interleave off (the plan then steals at 24 slots a
    // sub-group and more), the default's timeline
    let (steal, fixed) = (
        BeamTuning {
            wg_steal: Some(true),
            ..def
        },
        BeamTuning {
            wg_steal: Some(false),
            ..def
        },
    );
    for nb in [16, 64] {
        r.add(b8.run(nb, true, steal)?);
        r.add(b8.run(nb, true, fixed)?);
        r.add(b8.run(nb, true, steal)?);
        r.add(b8.run(nb, true, fixed)?);
        if b8.g.wgmma_supported() {
            r.add(b8.run(nb, true, BeamTuning { wg_cperm: 1, ..def })?);
            r.add(b8.run(nb, true, BeamTuning { probe: 5, ..def })?);
            // ring slots, the parameter cache
            for nr in [2, 3, 4] {
                r.add_or_note(b8.run(nb, true, BeamTuning { nr, ..def }), || {
                    format!("beamformer beams={nb} wgmma nr={nr}")
                });
            }
            for pc in [false, true] {
                let tu = BeamTuning {
                    wg_pcache: Some(pc),
                    ..def
                };
                r.add_or_note(b8.run(nb, true, tu), || {
                    format!("beamformer beams={nb} wgmma pcache={pc}")
                });
            }
        }
    }
    {
        let mut b1 = BeamBench::new(8, 1, copy)?;
        for nb in [16, 64] {
            r.add(b1.run(nb, true, def)?);
        }
    }
    for nb in [16, 64] {
        r.add(b8.run(nb, false, def)?);
        // (fragments per warp, warps per block, spectra per tile, raw stages, min blocks)
        let variants: &[(usize, usize, usize, usize, u32)] = if nb == 16 {
            &[
                (1, 4, 64, 2, 0),
                (1, 4, 64, 4, 0),
                (1, 8, 128, 3, 0),
                (2, 8, 128, 3, 0),
            ]
        } else {
            &[
                (2, 8, 64, 2, 0),
                (2, 8, 64, 4, 0),
                (1, 8, 32, 3, 0),
                (1, 16, 64, 3, 0),
                (2, 4, 32, 3, 0),
            ]
        };
        for &(mw, warps, ts, nr, min_blocks) in variants {
            let tu = BeamTuning {
                ts,
                nr,
                mw,
                warps,
                min_blocks,
                ..mma
            };
            r.add_or_note(b8.run(nb, true, tu), || {
                format!(
                    "beamformer beams={nb} mw={mw} warps={warps} ts={ts} nr={nr} minb={min_blocks}"
                )
            });
        }
    }
    drop((b8, b4));
    let line: Vec<String> = head
        .iter()
        .map(|(bits, nb, f)| format!("{bits}-bit {nb} beams {:.1} %", 100.0 * f))
        .collect();
    println!(
        "beamformer summary (default configuration, fraction of copy bandwidth {:.0} GB/s, target 80 %): {}",
        copy / 1e9,
        line.join(", ")
    );
    r.summary = head
        .into_iter()
        .map(|(bits, beams, copy_fraction)| BeamHeadline {
            bits,
            beams,
            copy_fraction,
        })
        .collect();
    Ok(r)
}

/// Only the beamformer part of [`super::bench_gpu`] (`gpucbf bench xbgpu-beam`).
pub fn bench_gpu_beams() -> Result<BeamReport, XError> {
    if !crate::gpu::gpu_available() {
        return Err(XError::Gpu(GpuError::NoDevice));
    }
    let probe = GpuX::new(XShape::new(1, 1, 16)?)?;
    bench_beams(probe.stream())
}
