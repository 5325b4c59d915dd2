//! `gpucbf bench xbgpu`: correlator TOPS (8 real operations per complex multiply-add over the
//! a1 ≤ a2 triangle, 4 pol products) for several array sizes, an int8 GEMM through cuBLASLt on
//! the same GPU for comparison, and beamformer throughput against measured device copy bandwidth.
//!
//! Measured 2026-11-22 on an NVIDIA H100 SXM (driver 580.159), `gpucbf bench xbgpu`, same run:
//! mma.sync 238 / 433 / 489 / 521 TOPS and wgmma (`kernels/xengine/correlate_wgmma.cu`, 64 spectra per
//! stage, 3 operand buffers) 229 / 418 / 472 / 500 TOPS for 64 / 256 / 576 / 1024 antennas;
//! cuBLASLt int8 GEMM 1422 TOPS (ratios 0.37 and 0.35 at 1024). wgmma limit probes at 576
//! antennas: no wgmma 728, no global loads 1193 TOPS; variants (2-stage register prefetch,
//! 32-spectrum stages, cp.async rings of 2–8 stages, 128B swizzle) 387–502 TOPS; 65536 samples
//! per launch 529 TOPS. See `src/xengine/gpu/wgmma.rs` for what limits it.
//!
//! Warp-specialised wgmma kernel (2026-11-22, H100, `gpucbf bench xbgpu-corr`: every correlator
//! kernel, the limit probes and cuBLASLt without the beamformer): mma.sync 238 / 436 / 496 / 524,
//! wgmma 228 / 421 / 476 / 503, wgmma-ws 243 / 452 / 504 / 534, wgmma-ws in 2-CTA multicast
//! clusters 77 / 222 / 273 / 296 TOPS at 64 / 256 / 576 / 1024 antennas; cuBLASLt 1386 TOPS.
//! Probes at 576 antennas: ws bulk copies alone 923, copies + rearrangement 619, rearrangement +
//! wgmma 878; old kernel's cp.async ring without wgmma 450. Details in `src/xengine/gpu/wgmma.rs`.
//!
//! Sparse-operand kernel `correlate_sp` (2026-11-22, H100, `gpucbf bench xbgpu-corr`, cuBLASLt
//! 1378 TOPS): 329 / 762 / 919 / 958 TOPS at 64 / 256 / 576 / 1024 antennas (mma.sync 238 / 433
//! / 489 / 522, wgmma-ws 243 / 448 / 500 / 518 in the same run); probes at 576: no wgmma 1305,
//! no copies 953; 65536 samples per launch 851. Details in `src/xengine/gpu/wgmma.rs`.
//!
//! Measured 2026-11-22 on an NVIDIA H200 (driver 580.159, CUDA 13, PTX JIT from NVRTC
//! compute_90), `gpucbf bench xbgpu`, 8192 samples per launch, 256 spectra per batch:
//! correlator (direct, 4 stages) 244 / 437 / 491 / 518 TOPS for 64 / 256 / 576 / 1024 antennas
//! (the earlier ready-buffer kernel 218 / 385 / 423 / 453 in the same run); cuBLASLt int8 GEMM
//! 8192³ 1457–1565 TOPS (ratio 0.33–0.36). Limit probes at 576 antennas (wrong results, timing
//! only): without conj_perm 589, without MMAs 716, MMAs alone 631 TOPS — the MMA issue of this
//! tiling (8 warps/SM, 203 registers) and the per-warp fragment assembly each cost about as much
//! as the whole budget of a 1000-TOPS kernel, so going further needs wgmma.
//! Device copy 4200 GB/s; beamformer (80 antennas, 512 channels, int8 tensor cores, hi/lo
//! weight planes) 0.045 ms = 24 % of copy bandwidth for 16 beams (0.040 ms, 27 % without
//! dither), 0.080 ms = 17.5 % for 64 beams (0.067 ms without dither); the earlier fp32 kernel:
//! 0.104 ms (10.5 %) and 0.224 ms (6.2 %).
//!
//! Beamformer on the H100 (2026-11-22, `gpucbf bench xbgpu-beam`, copy 2990 GB/s), persistent
//! kernel with 16-byte lane stores and the 32-bit dither hash: 16 beams 0.0444 ms = 34.7 %,
//! 64 beams 0.0718 ms = 27.3 % (before: 33.6 % / 24.6 %). The probes locate the time: loads +
//! transposes + weights alone (BPROBE 1) 0.023 / 0.031 ms (68 % / 64 %); without the weight
//! build (BPROBE 2) 0.040 / 0.056 ms, i.e. per-channel weights (sincospif) cost ~4 / ~15 µs
//! (hardware sincos after exact reduction: ~2 / ~10 µs, measured in a later run) and the MMA +
//! epilogue part adds ~20 / ~40 µs that does not overlap the loads. 16 beams of alternating pol
//! fill two half-empty tiles; skipping the empty m16 fragments did not help (spills) and was
//! dropped. No tiling (ts 32/64, 2–6 stages, persistent or one block per item) reaches 40 %:
//! the next step is overlapping weights/epilogue with the stream (warp specialisation or
//! double-buffered weights) rather than the memory path. 4-bit input: 22.7 % / 18.4 % (half
//! the bytes, the same compute); 4-bit correlator 361 / 398 TOPS at 256 / 576 antennas.
//!
//! Beamformer over a chunk (H100, 2026-11-22, `gpucbf bench xbgpu-beam`, copy 2987 GB/s): one
//! launch over all batches of a chunk (per-batch presence, dither seed and saturation; weights
//! built once per channel for the chunk), half-tiles of 8 beams of one pol (16 beams of
//! alternating pol fill one tile instead of two half-empty ones) and 128-spectra tiles when
//! that lets more warps multiply. Chunk of 16 batches: 16 beams (ts 128) 0.0299 ms/batch =
//! 51.6 % (ts 128 with 2 raw stages 53.7 %, ts 64 39.9 %), 64 beams (ts 64) 0.0638 ms/batch =
//! 30.8 % (2 raw stages 33.7 %, 6 stages 25.4 %); one batch per launch 36.9 % / 23.8 %, 32 batches
//! 52.0 % / 31.5 %; without dither 52.3 % / 33.1 %; 4-bit 34.0 % / 22.6 %. Probes (same run):
//! loads + transposes + weights alone (BPROBE 1) 94.9 % / 99.6 % (the latter writes no output
//! but counts its bytes); no weight build (BPROBE 2) = the full kernel (the weights are now
//! free); MMAs without the epilogue (BPROBE 3) 85.7 % / 70.0 % with 78 / 75 registers and no
//! spills, against 128 registers and 40 bytes of local memory (spills) for the full kernel. So
//! the stream and the hi/lo MMAs fit the budget at 16 beams and nearly at 64; the epilogue
//! (combine, dither hash, quantise, store), or the registers it costs at the 128 cap of two
//! blocks per SM, takes the rest. Next: hand the accumulators to the warps that do not multiply
//! (shared memory) for the epilogue, or combine hi and lo early to halve the live registers.
//!
//! Beamformer epilogue and warp layouts (H100, 2026-11-22, `gpucbf bench xbgpu-beam`, copy
//! 2986 GB/s, chunk of 16 batches, 80 antennas, 512 channels, 256 spectra). The epilogue
//! converts int to float once per value and no more (the dither uniforms are built as float
//! bits, the quantiser rounds by adding 1.5·2^23 and keeps the low byte); the B rows are split
//! by pol (one 8-byte load per fragment, no byte selects; 128-byte rows, swizzled, no padding);
//! a warp holds one or two m16 fragments (`BeamPlan::mw`) in blocks of 4, 8 or 16 warps
//! (`BeamPlan::warps`). Default configuration: 16 beams in blocks of 4 warps of one fragment,
//! four blocks per SM, 61.4 % of copy bandwidth (8 warps of one fragment 59.0 %, of two 52.7 %;
//! before this change 50.6 %); 64 beams in 8 warps of two fragments, 33.6 % (one fragment per
//! warp, 8 or 16 warps, 29-30 %; 4 warps of two 29.3 %; before 31.0 %); 4-bit 35.5 % / 22.6 %.
//! Probes: loads + transposes alone 94.7 % / 98.9 %, MMAs without the epilogue 79.9 % / 63.3 %;
//! without dither 64.5 % / 37.5 %; one batch per launch 45.5 % / 25.4 %; 2 or 4 raw stages
//! within the noise or worse. What limits: at 64 beams the hi/lo MMAs are 10.7 G int8
//! operations per batch, 20 µs at the 520 TOPS the mma.sync correlator reaches, i.e. 84 % of
//! the 24.6 µs an 80 % beamformer may take, so 80 % needs wgmma (or fewer MMAs); at 16 beams
//! the stream, the MMAs and the epilogue each fit but run one after the other between the
//! per-stage barriers (instruction and latency bound: none of tile size, stages, registers,
//! block size or grid moved it by more than a few points). Next: warp-specialised blocks
//! (copy/transposing warps apart from MMA + epilogue warps, mbarriers instead of block
//! barriers) and, at 64 beams, wgmma.
//!
//! Hopper beamformer `beamform_wg` (H100, 2026-11-22, `gpucbf bench xbgpu-beam`, copy 2986 GB/s,
//! chunk of 16 batches, 80 antennas, 512 channels, 256 spectra; see `src/xengine/gpu/beam_wg.rs`):
//! the input boxes straight from the copy engine are the A operand (no transpose), weights are
//! 128B-swizzled planes (the unswizzled layout ran 16 beams at 73.9 %), four consumer warpgroups.
//! **16 beams 78.7–82.1 %, 64 beams 54.7 %** of copy bandwidth (mma.sync kernel in the same run
//! 61.1 % / 34.6 %). Probes (BW_PROBE) at 64 beams: no wgmma and no epilogue 132.8 % (no output
//! written), wgmma without the epilogue 103.3 %, epilogue without wgmma 87.3 % (with two consumer
//! warpgroups 66.7 %: latency-bound at two warps per scheduler, ncu 1.87 IPC); at 16 beams 106.5
//! / 100.2 / 93.0 %. So at 64 beams the epilogue (about 40 PTX instructions per complex output:
//! the 16-bit combine, the dither hash, quantiser, saturation count; ncu counted ~65 per output
//! for the whole two-warpgroup kernel) and the wgmma phase do not overlap;
//! staggering the two sub-groups by half an item (named barrier) measured 52.5 % and was dropped.
//! Next: the epilogue's instruction count (cheaper dither shared between outputs, integer clamp),
//! or a second accumulator set so that the next item's wgmma run under the epilogue.
//!
//! Hopper beamformer, second round (H100, 2026-11-22, `gpucbf bench xbgpu` / `xbgpu-beam`, copy
//! 2982–2990 GB/s, same shape): the hi and lo weight planes are one wgmma operand (N = 4 slots: Re
//! / Im rows of the hi plane, then of the lo plane), so a k32 step issues one wgmma per pol instead
//! of two (the MMAs-without-epilogue probe at 64 beams went from 101 % to 114–118 %); the per-batch
//! presence flags and dither seeds are read into shared memory once per block; the epilogue skips
//! the clamp (a warp whose values all stay within ±127 needs none; where one passes 127 the warp
//! computes its outputs again, stores them clamped and counts the saturation exactly) and hashes
//! once per spectrum pair (four 8-bit dither uniforms; the host's `beam_dither`, also in the
//! mma.sync kernel): about 29 instead of 42 instructions per complex output (SASS). **16 beams
//! 75.5–82.3 %, 64 beams 55.2–59.7 %** over seven runs on several machines (without dither 79.2 /
//! 60.6 %; the same binary varies by ±3 points at 16 beams from run to run). Same-run A/B at 64
//! beams: clamped fast path 54.4 % against 56.4 %, a hash per output 52.3 %; at 16 beams issuing
//! each refill from the last warp to release a slot (no thread waits on the others) 72.5 % against
//! 80.9 % with thread 0 waiting, two beam groups of 32 beams 40–43 %. Tried and dropped: pols as a
//! double buffer (P: pol 1's wgmma under pol 0's epilogue, Q: the next item's pol 0 under pol 1's)
//! 72.0 / 43.7 %: one wgmma group in flight per warpgroup serialised the tensor work (its MMAs-only
//! probe fell to 87 %). ncu on the 64-beam kernel: ALU pipe 67 % of peak, issue slots 64 %, stalls
//! mostly `wait` / `math_pipe_throttle` / `not_selected`; the probes (epilogue only 87–89 %, MMAs
//! only 114–118 %) add up instead of overlapping, so 64 beams needs the epilogue to run under the
//! wgmma of the same warpgroup with more than one group in flight (registers: 64 accumulators per
//! thread at the 128 cap), or fewer instructions still. Arrays over 128 antennas: stages that
//! divide the antennas (144: three of 48, not 128 + 16) and the stages of an item unrolled, so that
//! no wgmma sits in a divergent path (ptxas serialised every wgmma of those shapes before: C7520).
//!
//! Hopper beamformer, third round (H100, 2026-11-22, `gpucbf bench xbgpu-beam`, copy 2984–2988
//! GB/s, same shape). The headline gain is now 0.025 (outputs of σ ≈ 16 LSB; the old 0.1 gave σ ≈
//! 66 LSB with about 5.5 % of the values clipped, so every warp took the saturation path; that case
//! is still printed as "with clipping"). Outputs staged in shared memory (a 160-byte row per beam
//! slot and warpgroup, conflict-free) and written as 16-byte coalesced rows (no per-output address,
//! predicate or branch); absent antennas zeroed in the ring slot on a rare path (no per-load
//! presence selects); descriptors from a per-block base; the dither uniform as one byte permute
//! (1 + u 2^-15) and an FMA; the first k32 step of an item writes its accumulators without reading
//! them (so nothing between items holds them: ptxas had serialised the 64-beam kernel's wgmma,
//! C7520, once more code sat between items; `nvrtc_compiles_all_kernels` now runs ptxas on the
//! NVRTC output and fails on C7520). Per item and warp about 160 instead of 209 instructions in the
//! MMA phase and 194 instead of 242 per pol in the epilogue (SASS). **16 beams 84.4–88.5 %, 64
//! beams 66.9–68.9 %** (final run 87.2 / 68.9 %; with clipping 75.7 / 58.6 %; without dither 88.9
//! / 76.1 %). Probes at 64 beams: nothing 91.4 %, MMAs without epilogue 89.1 %, epilogue without
//! MMAs 89.0 %, weights built once 71.7 %: each half alone runs near the memory bound, together
//! they do not overlap. Tried and dropped (same-run A/B): work stealing (blocks claim items of
//! their range with an atomic counter, a block whose range is used up takes items of the range with
//! the most left) 67.4 % against 70.0 % at 64 beams, 84.7 / 84.6 % at 16, although it evened out
//! the SMs' busy cycles (that version spilled 24 bytes; the one ncu measured evened out had its
//! wgmma serialised by ptxas, C7520, so stealing is not settled); a pingpong of the two warpgroup pairs at the tensor cores (named barriers)
//! 67.4 % against 68.4 %; both pols' epilogues interleaved 68.4 %; three A register sets (two k32
//! steps in flight) 68.3 %. ncu (64 beams, static ranges): SM busy cycles min 610k, mean 632k, max
//! 803k of 824k elapsed: the slowest SMs set the launch time. Next: stealing in a code shape that
//! neither spills nor serialises (the claims out of the consumers' registers), or find what the
//! late SMs wait on.
//!
//! Hopper beamformer, fourth round (H100, 2026-11-22, `gpucbf bench xbgpu-beam`, same shape).
//! A timeline probe (`BW_PROBE` 5: per block its cycles and the phases' cycles per item, printed
//! after the probe's line) showed the static ranges' tail: at 64 beams most blocks took 783k–
//! 800k cycles, a few TPCs (SMs 41/56/57/70/71/84/85/98, the same in every run) up to 955k.
//! **Work stealing** now: the second half of each block's range is a tail (a 32-bit word of
//! front and end in global memory); the owner claims it from the front, a block whose own items
//! are done takes items from the end of the tail with the most left (a warp-0 scan), one atomic
//! per item, each issued an item ahead so that nobody waits on it, and the item of each ring
//! slot goes to the consumers through shared memory. Blocks then end within 861k–890k; 64 beams
//! 78.1 % against 68.7–68.8 % static in the same run. At 16 beams stealing lost (85.5–86.4 %
//! against 88.2–88.8 % static), so the plan steals for 24 slots a sub-group and more. Also: weight
//! builds with their loads overlapped (+1.5 points at 64 beams), weight rows without K padding
//! (the last block 32 or 64 bytes wide with that swizzle: 40 instead of 64 KB at 64 beams), and
//! the ring depth measured (64 beams 2 slots 77.9 %, 3 76.2 %, 4 75.9 %; 16 beams 3 slots 88.4 %,
//! 2 86.5 %, 4 87.4 %). **16 beams 88.2–88.8 %, 64 beams 77.4–78.1 %** (clipping 82.9 / 71.2 %,
//! no dither 89.6 / 84.4 %). Probes at 64 beams: nothing 90.6 %, no weight builds 81.7 %, MMAs
//! without epilogue 82.3 %, epilogue without MMAs 89.1 %. Tried and dropped (same-run A/B): the
//! weights' delays and coefficients cached in shared memory (no global loads in a build) 78.0–78.4
//! against 78.3–78.4 %; two staging buffers (one warpgroup barrier less per item) 78.2–78.3 %
//! against 78.0–78.4 %; thieves taking only tails with at least 1, 2, 3, 4 or 6 items left: all
//! 78.5–78.7 %. The timeline (probe-perturbed, 7029 cycles an item, 5.5 weight builds a block):
//! weights 1001 (a build stalls all 16 warps ~20k cycles between two barriers), stage wait and
//! claims 1550, MMA 1591, sums wait 514, epilogue 1753, copy-out 571. Next: weight builds that do
//! not stop the block (a second weight buffer, filled ahead: the next items are known from the
//! ring), fewer epilogue instructions (the dither costs 6 points: 84.4 % without).
//! Then the claims' atomics: for an add at a warp-uniform address ptxas emitted a
//! warp-aggregated atomic whose result it shuffled at once, so warp 0 waited out every claim's
//! round trip (also from inline PTX); the lane index added to the address (0: lane 0 claims)
//! keeps it one ATOMG whose result waits in `pend` until the next claim. **64 beams 79.6–80.3 %**
//! (static 68.9–69.1 % in the same run; clipping 73.7 %, no dither 85.8 %; ring 2 / 3 / 4 slots
//! 79.8 / 77.5 / 77.7 %), 16 beams 88.3 % static (stealing 88.2–88.8 % against 89.2–89.8 %: still
//! static); no weight builds 83.5 %; timeline 6878 cycles an item, blocks within 842k–874k.
//!
//! Fifth round (H100, 2026-11-23, same shape). The timeline probe now adds each warpgroup's
//! phase cycles into its own shared words (its 64-bit shared atomics had cost 15 points: 64-66 %
//! probed against 80-81 % plain; now 77.5 %) and times the weight builds and the barrier waits
//! around them: a build at 64 beams is ~3.8k cycles issue-bound work (the ~20k of the fourth
//! round was the probe's own cost), the barriers around it wait ~0-2k. **Parameter cache**
//! (`PCACHE`, plan default where it fits, one beam group): the group's delays, coefficients and
//! scales in shared memory (61 KB at 64 beams), so that a build makes no global loads: +0.4 to
//! +1.7 points at 64 beams in the same runs (80.9-81.5 % against 79.4-81.2 %); the builds'
//! global loads (without it) now in two rounds, not ten round trips in a row. Tried and
//! dropped (same-run A/B): a second weight buffer built ahead of the channel change with
//! mbarriers instead of the two block barriers, 77.6-79.4 % against 80.1-80.8 % at 64 beams
//! (the block barriers at a build keep the warpgroups aligned, which the two-slot ring needs);
//! the next stage's copies issued as soon as every warp has released its slot (polled after the
//! MMAs), 77.0-78.0 % against 79.4-81.1 % (the MMA phase grew by 500 cycles); evict-first L2
//! hints on the input's copies and streaming output stores: no change. Weight words gathered
//! with PRMTs: a build 3.8k -> 3.2k cycles. **Channel interleave** (`CPERM` P, a divisor of the
//! channels near the channels a block takes, 4 for 512 channels on 132 SMs): block k's j-th
//! channel is j C / P + k, so that at any time the blocks read neighbouring channels, i.e.
//! neighbouring kilobytes of each antenna's row of the input ([batch][antenna][channel]
//! [spectrum]), not ones 4 KB apart. The memory-only probe 91.2-91.6 % -> 93.6-94.1 %; 16 beams
//! 86.2-88.9 % -> 92.9-94.4 %; 64 beams static ranges 70.6-71.2 % -> 82.5-83.2 % (the slow TPCs
//! of the fourth round were this: their channels' reads), above stealing with the interleave
//! (80.2-81.2 %) and without it (81.1-82.1 %): the plan now steals only where there is no
//! interleave. With it the 64-beam kernel is compute-bound (timeline: stage wait 392 of 5257
//! cycles an item, MMA 1811, epilogue 1812; MMAs alone 93.7 %, epilogue alone 93.7 %, no dither
//! 89.7 %). Tried and dropped: the sub-groups' warpgroup pairs taking turns at the tensor cores
//! (named barriers: one pair's MMAs while the other's epilogue), 79.3-79.4 % against 82.0-82.9
//! % (ring of 3 or 4 without the parameter cache: 77.5-78.1 %); 3 ring slots without the
//! parameter cache 82.1 % (the same as 2 with it).
//! `GPUCBF_BENCH_BEAM_SWEEP=1` runs only the wgmma interleave / stealing sweep.

use std::ffi::c_void;

use cudarc::cublaslt::{result as lt, sys as ltsys};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use crate::compute::xengine::{
    Beam, BeamKernel, BeamSet, BeamTuning, CorrVariant, GpuX, WgmmaVariant, XError, XShape,
};
use crate::gpu::GpuError;

/// A correlator kernel to time: mma.sync with its variant, or wgmma (Hopper).
#[derive(Clone, Copy, Debug)]
enum Kern {
    Mma(CorrVariant),
    Wgmma(WgmmaVariant),
}

fn gerr<E: std::fmt::Debug>(e: E) -> XError {
    XError::Gpu(GpuError::Failed(format!("{e:?}")))
}

/// Random int8 in [−127, 127], generated as a 4 MiB block and tiled (content does not matter
/// for timing, only that it is not all zero).
fn random_input(n: usize) -> Vec<i8> {
    let block: Vec<i8> = (0..(4u64 << 20).min(n as u64))
        .map(|i| {
            (crate::compute::xengine::beam_dither(1, 0, 0, i as usize, 0, 1 << 23, 1).0 * 254.0)
                .round() as i8
        })
        .collect();
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        let k = (n - v.len()).min(block.len());
        v.extend_from_slice(&block[..k]);
    }
    v
}

/// Times `reps` runs of `f` on `stream` with CUDA events; returns seconds per run.
fn time_gpu(
    stream: &std::sync::Arc<CudaStream>,
    reps: usize,
    f: impl FnMut() -> Result<(), XError>,
) -> Result<f64, XError> {
    crate::gpu::time_on_stream(stream, reps, f, gerr)
}

/// One correlator measurement: returns TOPS.
fn bench_correlator(n_ants: usize, samples: usize, kern: Kern, bits: u32) -> Result<f64, XError> {
    let spectra = 256;
    let n_channels = (16384 / n_ants).max(1);
    let shape = XShape::new(n_ants, n_channels, spectra)?.with_sample_bits(bits)?;
    let n_batches = samples / spectra;
    let mut g = GpuX::new(shape)?;
    let label = match kern {
        Kern::Mma(v) => {
            g.set_correlator_variant(v)?;
            format!(
                "mma.sync {}{}",
                if v.direct { "direct" } else { "ready" },
                v.stages
            )
        }
        Kern::Wgmma(v) if v.sparse => {
            g.set_wgmma_variant(v)?;
            format!(
                "wgmma-sp cwg={} raw={}{}",
                v.ready_bufs,
                v.raw_bufs,
                if v.probe > 0 { " PROBE" } else { "" }
            )
        }
        Kern::Wgmma(v) if v.ws => {
            g.set_wgmma_variant(v)?;
            format!(
                "wgmma-ws{} bufs={} raw={}{}",
                if v.cluster { "-cl2" } else { "" },
                v.ready_bufs,
                v.raw_bufs,
                if v.probe > 0 { " PROBE" } else { "" }
            )
        }
        Kern::Wgmma(v) => {
            g.set_wgmma_variant(v)?;
            format!(
                "wgmma ST={} bufs={} raw={} pref={}{}{}",
                v.stage_times,
                v.ready_bufs,
                v.raw_bufs,
                v.reg_stages,
                if v.swizzle { " swz" } else { "" },
                if v.probe > 0 { " PROBE" } else { "" }
            )
        }
    };
    let host = random_input(n_batches * shape.batch_bytes());
    let input = g.stream().clone_htod(&host).map_err(gerr)?;
    let stream = g.stream().clone();
    let t = time_gpu(&stream, 5, || g.accumulate_device(&input, n_batches))?;
    let cmacs = (shape.n_baselines() * 4 * n_channels * samples) as f64;
    let tops = 8.0 * cmacs / t / 1e12;
    let mut out = vec![0i32; shape.output_len()];
    let present = vec![true; n_ants];
    let t0 = std::time::Instant::now();
    crate::compute::xengine::XBackend::dump(&mut g, &present, &mut out)?;
    let dump_s = t0.elapsed().as_secs_f64();
    println!(
        "correlator n_ants={n_ants:5} channels={n_channels:4} samples/launch={samples} {label:22}: {:8.3} ms/launch, {tops:7.1} TOPS (dump incl. D2H {:.1} ms)",
        t * 1e3,
        dump_s * 1e3
    );
    Ok(tops)
}

/// Plain int8 GEMM m=n=k through cuBLASLt (A transposed, the layout cuBLASLt's int8 path wants).
fn bench_gemm(stream: &std::sync::Arc<CudaStream>, mnk: usize) -> Result<f64, XError> {
    // SAFETY: probing only dlopens the library.
    if !unsafe { ltsys::is_culib_present() } {
        return Err(XError::Gpu(GpuError::Unsupported(
            "cuBLASLt (libcublasLt.so) not found".into(),
        )));
    }
    let (m, n, k) = (mnk, mnk, mnk);
    let a = stream.clone_htod(&random_input(m * k)).map_err(gerr)?;
    let b = stream.clone_htod(&random_input(k * n)).map_err(gerr)?;
    let mut c: CudaSlice<i32> = stream.alloc_zeros(m * n).map_err(gerr)?;
    let ws_size = 32usize << 20;
    let mut ws: CudaSlice<u8> = stream.alloc_zeros(ws_size).map_err(gerr)?;
    let handle = lt::create_handle().map_err(gerr)?;
    let desc = lt::create_matmul_desc(
        ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32I,
        ltsys::cudaDataType_t::CUDA_R_32I,
    )
    .map_err(gerr)?;
    let trans: i32 = 1;
    // SAFETY: attribute buffers are valid for the given sizes; layouts describe the buffers above.
    unsafe {
        lt::set_matmul_desc_attribute(
            desc,
            ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
            &trans as *const i32 as *const c_void,
            4,
        )
        .map_err(gerr)?;
    }
    let la = lt::create_matrix_layout(
        ltsys::cudaDataType_t::CUDA_R_8I,
        k as u64,
        m as u64,
        k as i64,
    )
    .map_err(gerr)?;
    let lb = lt::create_matrix_layout(
        ltsys::cudaDataType_t::CUDA_R_8I,
        k as u64,
        n as u64,
        k as i64,
    )
    .map_err(gerr)?;
    let lc = lt::create_matrix_layout(
        ltsys::cudaDataType_t::CUDA_R_32I,
        m as u64,
        n as u64,
        m as i64,
    )
    .map_err(gerr)?;
    let pref = lt::create_matmul_pref().map_err(gerr)?;
    // SAFETY: as above.
    let heur = unsafe {
        lt::set_matmul_pref_attribute(
            pref,
            ltsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &ws_size as *const usize as *const c_void,
            std::mem::size_of::<usize>(),
        )
        .map_err(gerr)?;
        lt::get_matmul_algo_heuristic(handle, desc, la, lb, lc, lc, pref).map_err(gerr)?
    };
    let alpha: i32 = 1;
    let beta: i32 = 0;
    let cu_stream = stream.cu_stream() as ltsys::cudaStream_t;
    let t = time_gpu(stream, 10, || {
        let (pa, _ra) = a.device_ptr(stream);
        let (pb, _rb) = b.device_ptr(stream);
        let (pc, _rc) = c.device_ptr_mut(stream);
        let (pw, _rw) = ws.device_ptr_mut(stream);
        // SAFETY: pointers come from live allocations of the sizes the layouts describe.
        unsafe {
            lt::matmul(
                handle,
                desc,
                &alpha as *const i32 as *const c_void,
                &beta as *const i32 as *const c_void,
                pa as *const c_void,
                la,
                pb as *const c_void,
                lb,
                pc as *const c_void,
                lc,
                pc as *mut c_void,
                lc,
                &heur.algo,
                pw as *mut c_void,
                ws_size,
                cu_stream,
            )
            .map_err(gerr)
        }
    })?;
    let tops = 2.0 * (m * n * k) as f64 / t / 1e12;
    println!(
        "cuBLASLt int8 GEMM m=n=k={mnk} (s8 in, s32 out): {:8.3} ms, {tops:7.1} TOPS",
        t * 1e3
    );
    Ok(tops)
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
    fn run(&mut self, n_beams: usize, dither: bool, tuning: BeamTuning) -> Result<f64, XError> {
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
        let what = match tuning.probe {
            1 => " [probe: no MMA, no epilogue]",
            2 => " [probe: no weights]",
            3 => " [probe: MMAs, no epilogue]",
            4 => " [probe: no MMA]",
            5 => " [probe: timeline]",
            _ => "",
        };
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
        Ok(frac)
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
fn bench_beams(stream: &std::sync::Arc<CudaStream>) -> Result<(), XError> {
    let copy = bench_copy(stream)?;
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
                if let Err(e) = b8.run(nb, true, tu) {
                    println!("beamformer beams={nb} {tu:?}: not run ({e})");
                }
            }
        }
        return Ok(());
    }
    let mut b4 = BeamBench::new(4, BENCH_CHUNK, copy)?;
    println!("beamformer, default configuration (BeamTuning::default()), chunk of {BENCH_CHUNK} batches:");
    let mut head = Vec::new();
    for (bits, b) in [(8, &mut b8), (4, &mut b4)] {
        for nb in [16, 64] {
            head.push((bits, nb, b.run(nb, true, def)?));
        }
    }
    println!(
        "beamformer with clipping (gain {BEAM_GAIN_CLIP}: outputs of σ ≈ 66 LSB, ~5.5 % clipped):"
    );
    b8.gain = BEAM_GAIN_CLIP;
    for nb in [16, 64] {
        b8.run(nb, true, def)?;
    }
    b8.gain = BEAM_GAIN;
    println!("beamformer limit probes of the default kernel (wrong results, timing only):");
    for nb in [16, 64] {
        for probe in [1, 2, 3, 4, 5] {
            if probe >= 4 && !b8.g.wgmma_supported() {
                continue;
            }
            b8.run(nb, true, BeamTuning { probe, ..def })?;
        }
    }
    // the mma.sync kernel (the default where wgmma does not apply), its probes and variants
    let mma = BeamTuning {
        kernel: BeamKernel::Mma,
        ..def
    };
    println!("beamformer, mma.sync kernel:");
    for nb in [16, 64] {
        b8.run(nb, true, mma)?;
    }
    println!("beamformer limit probes of the mma.sync kernel (wrong results, timing only):");
    for nb in [16, 64] {
        for probe in [1, 3] {
            b8.run(nb, true, BeamTuning { probe, ..mma })?;
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
        b8.run(nb, true, steal)?;
        b8.run(nb, true, fixed)?;
        b8.run(nb, true, steal)?;
        b8.run(nb, true, fixed)?;
        if b8.g.wgmma_supported() {
            b8.run(nb, true, BeamTuning { wg_cperm: 1, ..def })?;
            b8.run(nb, true, BeamTuning { probe: 5, ..def })?;
            // ring slots, the parameter cache
            for nr in [2, 3, 4] {
                if let Err(e) = b8.run(nb, true, BeamTuning { nr, ..def }) {
                    println!("beamformer beams={nb} wgmma nr={nr}: not run ({e})");
                }
            }
            for pc in [false, true] {
                let tu = BeamTuning {
                    wg_pcache: Some(pc),
                    ..def
                };
                if let Err(e) = b8.run(nb, true, tu) {
                    println!("beamformer beams={nb} wgmma pcache={pc}: not run ({e})");
                }
            }
        }
    }
    {
        let mut b1 = BeamBench::new(8, 1, copy)?;
        for nb in [16, 64] {
            b1.run(nb, true, def)?;
        }
    }
    for nb in [16, 64] {
        b8.run(nb, false, def)?;
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
            if let Err(e) = b8.run(nb, true, tu) {
                println!(
                    "beamformer beams={nb} mw={mw} warps={warps} ts={ts} nr={nr} minb={min_blocks}: not run ({e})"
                );
            }
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
    Ok(())
}

/// Only the beamformer part of [`bench_gpu`] (`gpucbf bench xbgpu-beam`).
pub fn bench_gpu_beams() -> Result<(), XError> {
    if !crate::gpu::gpu_available() {
        return Err(XError::Gpu(GpuError::NoDevice));
    }
    let probe = GpuX::new(XShape::new(1, 1, 16)?)?;
    bench_beams(probe.stream())
}

/// Runs the X-engine benchmarks on GPU 0 and prints the results (see module docs).
pub fn bench_gpu(ants: &[usize], samples_per_launch: usize) -> Result<(), XError> {
    let stream = bench_gpu_corr(ants, samples_per_launch)?;
    let samples = samples_per_launch.div_ceil(256).max(1) * 256;
    bench_beams(&stream)?;
    for n in [256, 576] {
        print!("4-bit input: ");
        bench_correlator(n, samples, Kern::Mma(CorrVariant::default()), 4)?;
    }
    Ok(())
}

/// The correlator part of [`bench_gpu`] (`gpucbf bench xbgpu-corr`): every kernel per antenna
/// count, the limit probes, the cuBLASLt GEMM and the ratios; returns the stream of a probe
/// engine for further benchmarks.
pub fn bench_gpu_corr(
    ants: &[usize],
    samples_per_launch: usize,
) -> Result<std::sync::Arc<CudaStream>, XError> {
    if !crate::gpu::gpu_available() {
        return Err(XError::Gpu(GpuError::NoDevice));
    }
    let samples = samples_per_launch.div_ceil(256).max(1) * 256;
    let wgmma = GpuX::new(XShape::new(1, 1, 16)?)?.wgmma_supported();
    let ws = WgmmaVariant::warp_specialized(2, 4);
    let wsc = WgmmaVariant::warp_specialized_cluster(2, 4);
    let sp = WgmmaVariant::sparse(4, 5);
    // per antenna count: (mma.sync, wgmma, wgmma-ws, wgmma-sp) TOPS
    let mut tops = Vec::new();
    for &n in ants {
        let m = bench_correlator(n, samples, Kern::Mma(CorrVariant::default()), 8)?;
        let (w, x, c) = if wgmma {
            (
                bench_correlator(n, samples, Kern::Wgmma(WgmmaVariant::default()), 8)?,
                bench_correlator(n, samples, Kern::Wgmma(ws), 8)?,
                bench_correlator(n, samples, Kern::Wgmma(sp), 8)?,
            )
        } else {
            (0.0, 0.0, 0.0)
        };
        tops.push((n, m, w, x, c));
    }
    if wgmma {
        let wv = |stage_times, ready_bufs, raw_bufs, reg_stages, probe| WgmmaVariant {
            stage_times,
            ready_bufs,
            raw_bufs,
            reg_stages,
            swizzle: false,
            probe,
            ws: false,
            cluster: false,
            sparse: false,
        };
        // Limit probes (wrong results, timing only): without the wgmma the loads and the
        // operand rearrangement alone (register loads, and a 4-stage cp.async ring); without
        // the global loads the wgmma, the rearrangement and the barriers alone. Warp-specialised
        // kernel: without wgmma (bulk copies + transform), without bulk copies (transform +
        // wgmma), bulk copies alone (the L2 -> SM rate of this access pattern, as TOPS).
        for (v, what) in [
            (wv(64, 3, 0, 1, 1), "no wgmma"),
            (wv(64, 3, 0, 1, 2), "no loads"),
            (WgmmaVariant { probe: 1, ..ws }, "ws no wgmma"),
            (WgmmaVariant { probe: 2, ..ws }, "ws no copies"),
            (WgmmaVariant { probe: 3, ..ws }, "ws copies only"),
            (WgmmaVariant { probe: 1, ..sp }, "sp no wgmma"),
            (WgmmaVariant { probe: 2, ..sp }, "sp no copies"),
        ] {
            print!("probe {what:17}: ");
            bench_correlator(576, samples, Kern::Wgmma(v), 8)?;
        }
        // tuning alternatives (ring slots), the 2-CTA cluster form of ws
        for (cwg, nr) in [(4, 3), (4, 4), (2, 3)] {
            bench_correlator(576, samples, Kern::Wgmma(WgmmaVariant::sparse(cwg, nr)), 8)?;
        }
        bench_correlator(576, samples, Kern::Wgmma(wsc), 8)?;
        for v in [ws, sp] {
            print!("long launch: ");
            bench_correlator(576, 65536, Kern::Wgmma(v), 8)?;
        }
    } else {
        println!("wgmma correlator: not compute capability 9.x, not measured");
    }
    // Limit probes (wrong results, timing only): what the direct kernel costs without its
    // conj_perm ALU work, without MMAs, and with MMAs alone.
    let n = 576;
    for (probe, what) in [(1, "no conj_perm"), (2, "no MMA"), (3, "MMA only")] {
        print!("probe {what:17}: ");
        bench_correlator(
            n,
            samples,
            Kern::Mma(CorrVariant {
                probe,
                ..CorrVariant::default()
            }),
            8,
        )?;
    }
    let probe = GpuX::new(XShape::new(1, 1, 16)?)?;
    let stream = probe.stream().clone();
    match bench_gemm(&stream, 8192) {
        Ok(gemm) => {
            for (n, m, w, x, c) in &tops {
                print!(
                    "n_ants={n:5}: mma.sync {m:7.1} TOPS = {:.2} of cuBLASLt",
                    m / gemm
                );
                if wgmma {
                    print!(
                        ", wgmma {w:7.1} = {:.2}, wgmma-ws {x:7.1} = {:.2}, wgmma-sp {c:7.1} = {:.2} of cuBLASLt ({:.2}x mma.sync)",
                        w / gemm,
                        x / gemm,
                        c / gemm,
                        x.max(*c) / m
                    );
                }
                println!();
            }
            let best = tops
                .iter()
                .map(|t| t.1.max(t.2).max(t.3).max(t.4))
                .fold(0f64, f64::max);
            println!(
                "best correlator / cuBLASLt int8 GEMM = {best:.1} / {gemm:.1} = {:.2}",
                best / gemm
            );
        }
        Err(e) => println!("cuBLASLt int8 GEMM unavailable: {e}"),
    }
    Ok(stream)
}
