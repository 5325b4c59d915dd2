//! Hopper beamformer path: `kernels/xengine/beamform_wgmma.cu` (`beamform_wg`, warpgroup MMA, sm_90a),
//! the default on compute capability 9.x for 8-bit input and up to 256 antennas
//! ([`BeamKernel::Auto`]). The same beams, weights, dither and quantiser as the `mma.sync`
//! kernel (`kernels/xengine/beam_common.cuh` holds the shared arithmetic), but the input goes into the
//! tensor cores as it arrives: tensor copies (TMA) bring 32-spectrum × antenna boxes of the raw
//! samples into a ring, and each consumer warpgroup builds its A operand (64 spectra × the
//! antennas' re/im of one pol) in registers with one 8-byte load and a byte permute per
//! register, against weight planes held in shared memory (wgmma m64nNk32, N = the beams of one
//! pol, Re and Im rows). No transpose pass, no per-fragment loads: the instruction count per
//! output is the epilogue's.

use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg,
};

use super::correlator::correlate_defines;
use super::wgmma::{input_tensor_map, WGMMA_ARCH};
use super::{BeamLaunch, DevTables, GpuX};
use crate::compute::xengine::{XError, XShape};
use crate::gpu::GpuError;

/// Source of the Hopper beamformer (the shared shape, sm_90 and beamformer headers in front).
pub const BEAMFORM_WGMMA_SRC: &str = crate::kernel_source!(
    [
        "xengine/xshape.cuh",
        "common/sm90.cuh",
        "xengine/beam_common.cuh"
    ],
    "xengine" / "beamform_wgmma.cu"
);

/// Which beamformer kernel runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BeamKernel {
    /// The wgmma kernel where it applies (compute capability 9.x, 8-bit input, at most 256
    /// antennas), else `mma.sync`.
    #[default]
    Auto,
    /// The `mma.sync` kernel (`kernels/xengine/beamform.cu`), any sm_80+ GPU, 8- or 4-bit input.
    Mma,
    /// The wgmma kernel; an error where it does not apply.
    Wgmma,
}

/// Most antennas of the wgmma beamformer (one tensor-copy box of rows per stage, weights of
/// every antenna resident).
pub const BEAM_WG_MAX_ANTS: usize = 256;
/// Threads per block of `beamform_wg` (`BW_THREADS`: four consumer warpgroups).
const BEAM_WG_THREADS: u32 = 512;
/// Most beam slots per sub-group (two 16-bit weight planes: two accumulators per output, in
/// 128 threads of a warpgroup).
const MAX_SLOTS: usize = 32;
/// Shared memory kept for the kernel's static arrays (mbarriers, the group's beam table, the
/// per-batch flags and seeds: `ptxas -v` reports at most 2048 bytes).
const STATIC_SMEM: usize = 2048;

/// Launch plan of the wgmma beamformer for one beam set: beam slots per sub-group of each pol
/// (`nb0`, `nb1`: whole wgmma N shapes; a group is two sub-groups, each taken by two of the
/// block's four consumer warpgroups), groups, antennas per stage, ring slots and dynamic shared
/// memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BeamWgPlan {
    /// Beam slots of pol 0 per sub-group.
    pub nb0: usize,
    /// Beam slots of pol 1 per sub-group.
    pub nb1: usize,
    /// Beam groups (one pass over the input each).
    pub groups: usize,
    /// Antennas per stage (a multiple of 16).
    pub kch: usize,
    /// Ring slots.
    pub nr: usize,
    /// Channel interleave (`CPERM` P, a divisor of the channels C, 1 = none): block k's j-th
    /// channel of its P is channel j C / P + k, so that the blocks read neighbouring channels at
    /// the same time (set at launch from the SM count: P ≈ C / SMs).
    pub cperm: usize,
    /// Parameter cache (`PCACHE`, one group only): the group's delays, coefficients and scales
    /// in shared memory, so that a weight build makes no global loads.
    pub pcache: bool,
    /// Dynamic shared memory, bytes.
    pub smem: usize,
    /// Work stealing (`STEAL`: items of one stage only): the second half of each block's items
    /// may be taken from the end by blocks whose own are done (at launch: only where there is
    /// no channel interleave).
    pub steal: bool,
    /// The fewest items left in a tail that a thief takes (`STEAL_MIN`; a thief rebuilds its
    /// weights for the victim's channel).
    pub steal_min: usize,
    /// Diagnostic only (`BW_PROBE`, wrong results): 1 = no wgmma and no epilogue, 2 = weights
    /// built once, 3 = no epilogue, 4 = no wgmma (the mma.sync kernel's probes 1–3 alike), 5 =
    /// timeline (right beams; each block writes 10 words past the saturation counters: SM << 48 |
    /// cycles, items, then the cycles of its weights, stage waits, MMA phase, sums wait,
    /// epilogue, copy-out, summed over its warpgroups).
    pub probe: u32,
}

/// Bytes of a weight plane of wgmma N = `wn` for `nap` (padded) antennas: rows of K = 2 nap
/// bytes as whole 128-byte blocks, except a last block of one or two k32 steps (32 or 64
/// bytes), rounded up to 1024 bytes (the kernel's `WPL`).
fn weight_plane(nap: usize, wn: usize) -> usize {
    let steps = nap / 16;
    let row = match steps % 4 {
        1 | 2 => steps / 4 * 128 + 32 * (steps % 4),
        _ => steps.div_ceil(4) * 128,
    };
    (wn * row).div_ceil(1024) * 1024
}

/// Bytes of the weights: per sub-group and pol a plane of 4 nb rows (Re / Im of the hi and lo
/// planes) for `nap` (padded) antennas (the kernel's `W_BYTES`).
fn weights_bytes(nap: usize, nb0: usize, nb1: usize) -> usize {
    2 * (weight_plane(nap, 4 * nb0) + weight_plane(nap, 4 * nb1))
}

/// Bytes of the parameter cache (the kernel's `PC_BYTES`): per (slot, padded antenna) of the
/// group a coefficient and a delay, per slot its beam and two scales.
fn pcache_bytes(nap: usize, nb0: usize, nb1: usize) -> usize {
    let nsg = 2 * (nb0 + nb1);
    nsg * nap * 12 + nsg * 12
}

/// Dynamic shared memory of the kernel (its `SMEM_BYTES`): alignment slack, `nr` ring slots of
/// `kch` antennas, the weights, the output staging (four warpgroups x a 160-byte row per slot
/// of a sub-group) and, with `pcache`, the parameter cache.
fn smem_bytes(nap: usize, nb0: usize, nb1: usize, kch: usize, nr: usize, pcache: bool) -> usize {
    let pc = if pcache {
        pcache_bytes(nap, nb0, nb1)
    } else {
        0
    };
    1024 + nr * 512 * kch + weights_bytes(nap, nb0, nb1) + 4 * 160 * (nb0 + nb1) + pc
}

/// The channel interleave for `c` channels over `g` blocks: the divisor of `c` nearest (by
/// ratio) to the channels a block takes, within a factor of 2 of it; 1 where that is under
/// 1.5 or no divisor is that near.
pub(crate) fn cperm_for(c: usize, g: usize) -> usize {
    let t = c as f64 / g.max(1) as f64;
    if t < 1.5 {
        return 1;
    }
    (2..=c)
        .filter(|&p| c.is_multiple_of(p) && p as f64 <= 2.0 * t && p as f64 >= t / 2.0)
        .min_by(|&a, &b| {
            let d = |p: usize| (p as f64 / t).ln().abs();
            d(a).total_cmp(&d(b))
        })
        .unwrap_or(1)
}

/// The largest divisor of `c` up to `p` (a tuning's interleave).
fn cperm_fit(c: usize, p: usize) -> usize {
    (1..=p.min(c).max(1))
        .rev()
        .find(|&q| c.is_multiple_of(q))
        .unwrap_or(1)
}

/// Slots for `n` beams of one pol: 0, or a multiple of 4 up to 16 and of 8 above (the wgmma
/// N = 4 slots, Re / Im rows of the hi and lo planes, must be a valid shape).
fn slots_for(n: usize) -> usize {
    match n {
        0 => 0,
        1..=16 => n.div_ceil(4) * 4,
        _ => n.div_ceil(8) * 8,
    }
}

impl BeamWgPlan {
    /// The plan for `shape` and beams of pols `pol` within `smem_limit` bytes of shared memory,
    /// or `None` where the kernel does not apply (input not 8-bit, more than
    /// [`BEAM_WG_MAX_ANTS`] antennas, no beams, or nothing fits).
    pub fn new(shape: &XShape, pol: &[i32], smem_limit: usize) -> Option<Self> {
        if shape.sample_bits != 8 || shape.n_ants > BEAM_WG_MAX_ANTS || pol.is_empty() {
            return None;
        }
        let p1 = pol.iter().filter(|&&p| p != 0).count();
        let p0 = pol.len() - p1;
        let nap = shape.n_ants.div_ceil(16) * 16;
        // fewest groups whose sub-groups fit the accumulators, then the widest stages and the
        // deepest ring (up to 4) that fit the shared memory
        (pol.len().div_ceil(64)..=pol.len()).find_map(|groups| {
            let sub = |p: usize| slots_for(p.div_ceil(groups).div_ceil(2));
            let (nb0, nb1) = (sub(p0), sub(p1));
            if nb0 + nb1 > MAX_SLOTS {
                return None;
            }
            // stages that divide the antennas first (a shorter last stage puts wgmma in a
            // divergent path, and ptxas then serialises them all)
            let even = [128, 112, 96, 80, 64, 48, 32]
                .into_iter()
                .filter(|&k| nap.is_multiple_of(k));
            let kchs = even.chain([nap.min(128), 64, 48, 32, 16]);
            // ring slots: the measured best first (H100, 80 antennas, 2026-11-22: 16 beams 3
            // slots 86.3 %, 2 or 4 85.5 %; 64 beams 2 slots 78.0 %, 3 76.1 %, 4 76.0 %: the
            // longer items of many beams need fewer stages in flight)
            let rings: [usize; 3] = if nb0 + nb1 >= 24 {
                [2, 3, 4]
            } else {
                [3, 4, 2]
            };
            // the parameter cache where it fits (one group), else none
            kchs.filter(|&k| k <= nap)
                .flat_map(|kch| rings.into_iter().map(move |nr| (kch, nr)))
                .flat_map(|(kch, nr)| [(kch, nr, groups == 1), (kch, nr, false)])
                .map(|(kch, nr, pc)| (kch, nr, pc, smem_bytes(nap, nb0, nb1, kch, nr, pc)))
                .find(|&(_, _, _, smem)| smem + STATIC_SMEM <= smem_limit)
                .map(|(kch, nr, pcache, smem)| Self {
                    nb0,
                    nb1,
                    groups,
                    kch,
                    nr,
                    pcache,
                    cperm: 1,
                    smem,
                    // (measured at 80 antennas, H100, same runs: 64 beams 78.3 % stealing
                    // against 69.5 % static; 16 beams 86.2-86.9 % against 87.7-89.5 %)
                    steal: kch >= nap && nb0 + nb1 >= 24,
                    steal_min: 3,
                    probe: 0,
                })
        })
    }

    /// Beam index per slot, `[group][sub-group][pol 0 slots, pol 1 slots]`, -1 for an empty
    /// slot: the k-th beam of pol p (in beam order) goes to group k / (2 nb_p), sub-group
    /// (k / nb_p) % 2.
    pub fn slot_table(&self, pol: &[i32]) -> Vec<i32> {
        let ns = self.nb0 + self.nb1;
        let mut t = vec![-1i32; self.groups * 2 * ns];
        let (mut k0, mut k1) = (0, 0);
        for (b, &p) in pol.iter().enumerate() {
            let (k, base, nb) = if p == 0 {
                (&mut k0, 0, self.nb0)
            } else {
                (&mut k1, self.nb0, self.nb1)
            };
            t[(*k / nb) * ns + base + *k % nb] = b as i32;
            *k += 1;
        }
        t
    }

    /// NVRTC defines for `shape` with `n_beams` beams.
    pub fn defines(&self, shape: &XShape, n_beams: usize) -> Vec<(&'static str, String)> {
        let mut d = correlate_defines(shape);
        d.push(("N_BEAMS", n_beams.to_string()));
        d.push(("NB0", self.nb0.to_string()));
        d.push(("NB1", self.nb1.to_string()));
        d.push(("N_BG", self.groups.to_string()));
        d.push(("KCH", self.kch.to_string()));
        d.push(("NR", self.nr.to_string()));
        d.push(("PCACHE", u8::from(self.pcache).to_string()));
        d.push(("CPERM", self.cperm.to_string()));
        d.push(("STEAL", u8::from(self.steal).to_string()));
        d.push(("STEAL_MIN", self.steal_min.to_string()));
        d
    }
}

/// Compiles `beamform_wg` for `shape`, `n_beams` beams and `plan`, and allows its shared memory.
pub(super) fn build(
    ctx: &Arc<CudaContext>,
    shape: &XShape,
    n_beams: usize,
    plan: &BeamWgPlan,
) -> Result<CudaFunction, XError> {
    let mut defines = plan.defines(shape, n_beams);
    if plan.probe != 0 {
        defines.push(("BW_PROBE", plan.probe.to_string()));
    }
    let ptx = crate::gpu::compile_ptx(
        "beamform_wgmma.cu",
        BEAMFORM_WGMMA_SRC,
        &defines,
        WGMMA_ARCH,
    )?;
    let f = ctx.load_module(ptx)?.load_function("beamform_wg")?;
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        plan.smem as i32,
    )?;
    Ok(f)
}

/// The wgmma plan of uploaded tables and its slot table on the device.
pub(crate) struct WgTables {
    pub(crate) plan: BeamWgPlan,
    pub(super) slots: CudaSlice<i32>,
}

impl GpuX {
    /// The wgmma plan and slot table for beams of pols `pol`, where the device and shape allow
    /// the wgmma beamformer.
    pub(super) fn wg_tables(&self, pol: &[i32]) -> Result<Option<WgTables>, XError> {
        if !self.wgmma_supported() {
            return Ok(None);
        }
        let Some(plan) = BeamWgPlan::new(&self.shape, pol, self.smem_optin) else {
            return Ok(None);
        };
        let slots = self.stream.clone_htod(&plan.slot_table(pol))?;
        Ok(Some(WgTables { plan, slots }))
    }

    /// The wgmma tables to use for `t` under the current [`BeamKernel`] choice (`None`: the
    /// `mma.sync` kernel).
    pub(crate) fn beam_wg_choice<'t>(
        &self,
        t: &'t DevTables,
    ) -> Result<Option<&'t WgTables>, XError> {
        match self.beam_tuning.kernel {
            BeamKernel::Mma => Ok(None),
            BeamKernel::Auto => Ok(t.wg.as_ref()),
            BeamKernel::Wgmma => t.wg.as_ref().map(Some).ok_or_else(|| {
                XError::Gpu(GpuError::Unsupported(format!(
                    "the wgmma beamformer needs compute capability 9.x, 8-bit input and at most {BEAM_WG_MAX_ANTS} antennas (this GPU {}.x, {}-bit, {} antennas)",
                    self.cc_major, self.shape.sample_bits, self.shape.n_ants
                )))
            }),
        }
    }

    /// The compiled kernel for `n_beams` beams and the plan of `wg` with the current tuning's
    /// probe, and that plan.
    pub(super) fn beam_wg_fn(
        &mut self,
        n_beams: usize,
        wg: &WgTables,
    ) -> Result<(CudaFunction, BeamWgPlan), XError> {
        let cperm = match self.beam_tuning.wg_cperm {
            0 => cperm_for(self.shape.n_channels, self.n_sms),
            p => cperm_fit(self.shape.n_channels, p),
        };
        let mut plan = BeamWgPlan {
            probe: self.beam_tuning.probe,
            // (the plan's stealing only without a channel interleave: with one the static
            // ranges ran better, H100, 80 antennas, 512 channels, 2026-11-23: 64 beams 82.5-83.2
            // % static against 80.7-81.2 % stealing, 16 beams 92.9-94.1 against 92.1-92.2 %;
            // without, stealing 82.1 % against 71.2 % at 64 beams)
            steal: match self.beam_tuning.wg_steal {
                None => wg.plan.steal && cperm == 1,
                Some(s) => s && wg.plan.kch >= self.shape.n_ants.div_ceil(16) * 16,
            },
            cperm,
            ..wg.plan
        };
        if self.beam_tuning.wg_steal_min != 0 {
            plan.steal_min = self.beam_tuning.wg_steal_min;
        }

        let (nr, pcache) = (self.beam_tuning.nr, self.beam_tuning.wg_pcache);
        if (nr != 0 && nr != plan.nr) || pcache.is_some_and(|p| p != plan.pcache) {
            // (ring slots or the parameter cache of the tuning)
            if nr != 0 {
                plan.nr = nr;
            }
            if let Some(p) = pcache {
                if p && plan.groups > 1 {
                    return Err(XError::Shape(format!(
                        "beam tuning: the parameter cache needs one beam group ({} here)",
                        plan.groups
                    )));
                }
                plan.pcache = p;
            }
            let nap = self.shape.n_ants.div_ceil(16) * 16;
            plan.smem = smem_bytes(nap, plan.nb0, plan.nb1, plan.kch, plan.nr, plan.pcache);
            if plan.smem + STATIC_SMEM > self.smem_optin {
                return Err(XError::Shape(format!(
                    "beam tuning: {} ring slots and parameter cache {} need {} bytes of shared memory",
                    plan.nr,
                    plan.pcache,
                    plan.smem + STATIC_SMEM
                )));
            }
        }
        if let Some(f) = self.beam_wg_fns.get(&(n_beams, plan)) {
            return Ok((f.clone(), plan));
        }
        let f = build(&self.ctx, &self.shape, n_beams, &plan)?;
        self.beam_wg_fns.insert((n_beams, plan), f.clone());
        Ok((f, plan))
    }

    /// Queues the wgmma beamformer (buffer sizes checked by the caller): a persistent grid of
    /// one block per SM walking (channel, group, batch, 128 spectra) items.
    pub(super) fn beamform_device_wg(
        &mut self,
        t: &DevTables,
        wg: &WgTables,
        n_beams: usize,
        l: BeamLaunch<'_>,
    ) -> Result<(), XError> {
        let (f, plan) = self.beam_wg_fn(n_beams, wg)?;
        let nb = l.n_batches;
        let items =
            self.shape.n_channels * plan.groups * nb * self.shape.spectra_per_batch.div_ceil(128);
        if items > i32::MAX as usize {
            return Err(XError::Shape(format!("beamformer launch: {items} items")));
        }
        let (ptr, _sync) = l.input.device_ptr(&self.stream);
        let tm = input_tensor_map(ptr, &self.shape, nb, plan.kch as u32)?;
        let cfg = LaunchConfig {
            grid_dim: (items.min(self.n_sms.max(1)) as u32, 1, 1),
            block_dim: (BEAM_WG_THREADS, 1, 1),
            shared_mem_bytes: plan.smem as u32,
        };
        let d = i32::from(l.dither);
        let nbi = nb as i32;
        let mut b = self.stream.launch_builder(&f);
        b.arg(&tm)
            .arg(l.out)
            .arg(&t.coef)
            .arg(&t.delay)
            .arg(&t.wscale)
            .arg(&wg.slots)
            .arg(l.present)
            .arg(&nbi)
            .arg(l.saturated)
            .arg(&d)
            .arg(l.dseeds)
            .arg(&mut self.beam_work);
        // SAFETY: matches `beamform_wg` in kernels/xengine/beamform_wgmma.cu (tensor map by value, int8
        // out, float2 coef = 2 f32, i32 slots of groups × 2 × (nb0 + nb1) entries, u8 present, u32
        // dseeds, u32 work of one word per block: n_sms words, the grid at most n_sms); the map
        // covers exactly nb batches of `input` and the caller checked every buffer for nb
        // batches and n_beams beams; the plan's shared memory was allowed in `build`.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_fit_and_slot_tables_place_every_beam_once() {
        let shape = XShape::new(80, 16, 256).unwrap();
        for n in [1usize, 2, 3, 16, 17, 19, 33, 64, 65, 100, 200] {
            for split in [0usize, 1, 3] {
                let pol: Vec<i32> = (0..n)
                    .map(|b| i32::from(split != 0 && b % split != 0))
                    .collect();
                let p = BeamWgPlan::new(&shape, &pol, 227 << 10).unwrap();
                assert!(
                    p.nb0 + p.nb1 <= MAX_SLOTS && p.smem + STATIC_SMEM <= 227 << 10,
                    "{p:?}"
                );
                for nb in [p.nb0, p.nb1] {
                    assert!(nb % 4 == 0 && (nb <= 16 || nb % 8 == 0), "{p:?}");
                }
                let t = p.slot_table(&pol);
                let ns = p.nb0 + p.nb1;
                assert_eq!(t.len(), p.groups * 2 * ns);
                let mut seen = vec![0; n];
                for (i, &b) in t.iter().enumerate() {
                    if b >= 0 {
                        let b = b as usize;
                        seen[b] += 1;
                        let is_pol1 = i % ns >= p.nb0;
                        assert_eq!(i32::from(is_pol1), pol[b], "{p:?} slot {i}");
                    }
                }
                assert!(seen.iter().all(|&k| k == 1), "{n} beams {split}: {seen:?}");
            }
        }
        // 64 beams of alternating pol, 80 antennas: one group of two sub-groups of 16 + 16, all
        // antennas per stage
        let pol: Vec<i32> = (0..64).map(|b| b % 2).collect();
        let p = BeamWgPlan::new(&shape, &pol, 227 << 10).unwrap();
        assert_eq!((p.nb0, p.nb1, p.groups, p.kch, p.nr), (16, 16, 1, 80, 2));
        assert!(p.pcache, "{p:?}");
        // 2 slots of 80 antennas, 40 KB of weights, 20 KB of staging, the 61 KB cache
        assert_eq!(
            p.smem,
            1024 + 2 * 40960 + 40960 + 20480 + 64 * 80 * 12 + 64 * 12
        );
        // the channel interleave: about the channels a block takes, every channel once
        assert_eq!(cperm_for(512, 132), 4);
        assert_eq!(cperm_for(512, 400), 1);
        assert_eq!(cperm_for(4096, 132), 32);
        assert_eq!(cperm_for(1000, 132), 8);
        assert_eq!(cperm_for(523, 132), 1); // (prime)
        for c in 1..600 {
            for g in [1, 7, 66, 132] {
                let p = cperm_for(c, g);
                assert!(p >= 1 && c.is_multiple_of(p), "{c} {g}: {p}");
            }
            assert!(c.is_multiple_of(cperm_fit(c, 5)));
        }
        assert_eq!(cperm_fit(512, usize::MAX), 512); // (no search from usize::MAX down)
        assert_eq!(cperm_fit(512, 6), 4);
        // 144 antennas: stages of 48 (three per item, none shorter), not 128 + 16
        let s144 = XShape::new(144, 16, 256).unwrap();
        assert_eq!(BeamWgPlan::new(&s144, &pol, 227 << 10).unwrap().kch, 48);
        // not for 4-bit input or more than 256 antennas
        let s4 = shape.with_sample_bits(4).unwrap();
        assert!(BeamWgPlan::new(&s4, &pol, 227 << 10).is_none());
        let big = XShape::new(300, 4, 256).unwrap();
        assert!(BeamWgPlan::new(&big, &pol, 227 << 10).is_none());
    }
}
