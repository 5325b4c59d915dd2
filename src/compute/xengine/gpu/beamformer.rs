//! The `mma.sync` beamformer (`kernels/xengine/beamform.cu`): launch plans ([`BeamPlan`]),
//! tuning knobs ([`BeamTuning`]), NVRTC defines, beam tables on the device and the [`GpuX`]
//! methods that plan, compile and queue it (or hand over to the wgmma beamformer of
//! [`super::beam_wg`] where that applies).

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::beam_wg::BeamKernel;
use super::correlator::correlate_defines;
use super::{BeamLaunch, DevTables, GpuX};
use crate::compute::xengine::beam::{batch_dither_seed, BeamTables};
use crate::compute::xengine::{check_batches, BeamSet, BeamStats, XError, XShape};

/// Beamformer kernel source.
pub const BEAMFORM_SRC: &str = crate::kernel_source!(
    ["xengine/xshape.cuh", "xengine/beam_common.cuh"],
    "xengine" / "beamform.cu"
);

/// Default cap on beams per beamformer block (8 tiles of 16 beams of one pol).
pub(super) const DEFAULT_BATCH_BEAMS: usize = 128;
/// Beams per beamformer tile (two half-tiles of one pol each).
const BEAM_TILE: usize = 16;
/// Beams per beamformer half-tile (one m16 fragment: 8 beams of one pol).
const BEAM_HALF: usize = 8;

/// Beamformer launch plan: beam tiles per block `btb` (1..=8), spectra per tile `ts`, raw
/// cp.async stages `nr` and the dynamic shared memory (two int8 weight planes of 32 rows per
/// tile, `nr` raw stages, two transposed stages, the tile's beam table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BeamPlan {
    /// Beam tiles (16 beams of one pol) per thread block.
    pub btb: usize,
    /// Spectra per tile (32, 64 or 128; `btb · ts / 32 ≤ 8` warps multiply).
    pub ts: usize,
    /// Raw input stages (2..=6).
    pub nr: usize,
    /// Dynamic shared memory, bytes.
    pub smem: usize,
    /// Diagnostic only (`BPROBE`, wrong results): 1 = no MMAs or epilogue, 2 = no weights,
    /// 3 = no epilogue.
    pub probe: u32,
    /// Launch bounds: blocks per SM the registers are capped for (2: 128 registers; 1: up to
    /// 255, one block per SM when more than 128 are used).
    pub min_blocks: u32,
    /// m16 fragments (half-tiles of 8 beams of one pol) per warp, 1 or 2 (`MW`): a tile takes
    /// `2 / mw · ts / 32` warps.
    pub mw: usize,
    /// Warps per block, 4, 8 or 16 (`WARPS`).
    pub warps: usize,
}

impl BeamPlan {
    /// The plan (btb, ts, nr) for `shape` with two m16 fragments per warp and 8 warps, or
    /// `None` if the combination is invalid.
    pub fn with(shape: &XShape, btb: usize, ts: usize, nr: usize) -> Option<Self> {
        Self::with_layout(shape, btb, ts, nr, 2, 8)
    }

    /// The plan (btb, ts, nr) with `mw` m16 fragments per warp and `warps` warps per block, or
    /// `None` if the combination is invalid.
    pub fn with_layout(
        shape: &XShape,
        btb: usize,
        ts: usize,
        nr: usize,
        mw: usize,
        warps: usize,
    ) -> Option<Self> {
        if !(1..=8).contains(&btb)
            || ![32, 64, 128].contains(&ts)
            || ![1, 2].contains(&mw)
            || ![4, 8, 16].contains(&warps)
            || btb * ts / 32 * 2 / mw > warps
        {
            return None;
        }
        if !(2..=6).contains(&nr) {
            return None;
        }
        let nap = shape.n_ants.div_ceil(32) * 32;
        let ws = 2 * nap + 16;
        let sbytes = shape.sample_bits as usize / 2;
        let smem = 2 * btb * 32 * ws + nr * 32 * (sbytes * ts + 16) + 2 * ts * 4 * 32 + btb * 128;
        Some(Self {
            btb,
            ts,
            nr,
            smem,
            probe: 0,
            min_blocks: (16 / warps) as u32,
            mw,
            warps,
        })
    }

    /// Plan for `shape` with at most `max_tiles` tiles per block and `smem_limit` bytes of
    /// shared memory per block: most tiles first, then the most warps multiplying (`btb · ts /
    /// 32`: with few beams a longer spectra tile spreads the MMAs over more warps), then 3 raw
    /// stages (2 in flight; 2 or 4 were no better on the H100, 6 worse), else the most that
    /// fit; `None` if even one tile does not fit.
    pub fn new(shape: &XShape, max_tiles: usize, smem_limit: usize) -> Option<Self> {
        Self::new_layout(shape, max_tiles, smem_limit, 2, 8)
    }

    /// [`BeamPlan::new`] with `mw` m16 fragments per warp and `warps` warps per block.
    pub fn new_layout(
        shape: &XShape,
        max_tiles: usize,
        smem_limit: usize,
        mw: usize,
        warps: usize,
    ) -> Option<Self> {
        (1..=max_tiles.clamp(1, 8)).rev().find_map(|btb| {
            [128, 64, 32]
                .into_iter()
                .flat_map(|ts| (2..=6).map(move |nr| (ts, nr)))
                .filter_map(|(ts, nr)| Self::with_layout(shape, btb, ts, nr, mw, warps))
                .filter(|p| p.smem <= smem_limit)
                .max_by_key(|p| (p.ts, p.nr == 3, p.nr))
        })
    }
}

/// Beamformer tuning knobs for benchmarks: fixed spectra per tile / raw stages (0 = planned),
/// a persistent grid (about two blocks per SM walking the items) or one block per item, and
/// the diagnostic probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BeamTuning {
    /// Spectra per tile (0: planned).
    pub ts: usize,
    /// Raw stages of the `mma.sync` kernel, ring slots of the wgmma kernel (0: planned).
    pub nr: usize,
    /// Persistent grid.
    pub persistent: bool,
    /// `BeamPlan::probe` / `BeamWgPlan::probe` (4 and 5: wgmma kernel only).
    pub probe: u32,
    /// `BeamPlan::min_blocks` (0: planned, 16 warps per SM: 4 with 4 warps, 2 with 8, 1 with
    /// 16).
    pub min_blocks: u32,
    /// `BeamPlan::mw` (0: planned: 1 for one beam tile per block, else 2).
    pub mw: usize,
    /// `BeamPlan::warps` (0: planned: 4 for one beam tile per block, else 8; 8 where a block
    /// of 4 warps would not fit four to an SM).
    pub warps: usize,
    /// Which kernel (the others apply to `mma.sync` only).
    pub kernel: BeamKernel,
    /// wgmma kernel: work stealing (`Some(true)`, where an item is one stage) or static item
    /// ranges (`Some(false)`) whatever the plan's choice (`None`).
    pub wg_steal: Option<bool>,
    /// wgmma kernel: the fewest items left in a tail that a thief takes (0: planned).
    pub wg_steal_min: usize,
    /// wgmma kernel: the parameter cache on or off (`None`: planned).
    pub wg_pcache: Option<bool>,
    /// wgmma kernel: the channel interleave (0: planned, 1: none, else at most that).
    pub wg_cperm: usize,
}

impl Default for BeamTuning {
    fn default() -> Self {
        Self {
            ts: 0,
            nr: 0,
            persistent: true,
            probe: 0,
            min_blocks: 0,
            mw: 0,
            warps: 0,
            kernel: BeamKernel::Auto,
            wg_steal: None,
            wg_steal_min: 0,
            wg_pcache: None,
            wg_cperm: 0,
        }
    }
}

/// NVRTC defines for the beamformer kernel of `shape` with `n_beams` beams and plan `plan`.
pub fn beamform_defines(
    shape: &XShape,
    n_beams: usize,
    plan: &BeamPlan,
) -> Vec<(&'static str, String)> {
    let mut d = correlate_defines(shape);
    d.push(("N_BEAMS", n_beams.to_string()));
    d.push(("BTB", plan.btb.to_string()));
    d.push(("TS", plan.ts.to_string()));
    d.push(("NR", plan.nr.to_string()));
    d.push(("BPROBE", plan.probe.to_string()));
    d.push(("MINB", plan.min_blocks.to_string()));
    d.push(("MW", plan.mw.to_string()));
    d.push(("WARPS", plan.warps.to_string()));
    d
}

/// The beamformer's (m16 fragments per warp, warps per block) in order of preference for
/// `tiles` beam tiles per block (H100, 80 antennas, `gpucbf bench xbgpu-beam`): one tile (up
/// to 16 beams) in blocks of 4 warps with one fragment each, four blocks per SM (61.4 % of copy
/// bandwidth at 16 beams, against 59.0 % for 8 warps of one fragment and 52.7 % for 8 warps of
/// two); more tiles in blocks of 8 warps with two fragments each (33.6 % at 64 beams, against
/// 29-30 % for one fragment per warp with 8 or 16 warps and 29.3 % for 4 warps of two).
fn default_beam_layouts(tiles: usize) -> &'static [(usize, usize)] {
    if tiles <= 1 {
        &[(1, 4), (1, 8), (2, 8)]
    } else {
        &[(2, 8), (1, 8)]
    }
}

/// Beam order sorted by pol and groups (start, count ≤ batch, pol) of one pol each.
fn beam_groups(pol: &[i32], batch: usize) -> (Vec<i32>, Vec<i32>) {
    let mut order: Vec<i32> = (0..pol.len() as i32).collect();
    order.sort_by_key(|&b| pol[b as usize]);
    let mut groups = Vec::new();
    let mut i = 0;
    while i < order.len() {
        let p = pol[order[i] as usize];
        let mut n = 0;
        while i + n < order.len() && n < batch && pol[order[i + n] as usize] == p {
            n += 1;
        }
        groups.extend([i as i32, n as i32, p]);
        i += n;
    }
    (order, groups)
}

impl GpuX {
    /// Cap on beams per beamformer block (a tuning knob: 1..=128, used in tiles of 16 beams of
    /// one pol; default 128). Smaller caps re-read the input once per group of tiles.
    pub fn set_beam_batch(&mut self, batch_beams: usize) -> Result<(), XError> {
        if !(1..=128).contains(&batch_beams) {
            return Err(XError::Shape(format!(
                "beam batch {batch_beams}, must be 1..=128"
            )));
        }
        self.batch_beams = batch_beams;
        Ok(())
    }

    /// Beamformer tuning knobs (benchmarks; see [`BeamTuning`]).
    pub fn set_beam_tuning(&mut self, tuning: BeamTuning) -> Result<(), XError> {
        if (tuning.ts != 0 && ![32, 64, 128].contains(&tuning.ts))
            || (tuning.nr != 0 && !(2..=6).contains(&tuning.nr))
            || tuning.probe > 5
            || (tuning.probe >= 4 && tuning.kernel == BeamKernel::Mma)
            || tuning.min_blocks > 4
            || tuning.mw > 2
            || ![0, 4, 8, 16].contains(&tuning.warps)
            || tuning.wg_steal_min > 64
        {
            return Err(XError::Shape(format!("beam tuning {tuning:?}")));
        }
        self.beam_tuning = tuning;
        Ok(())
    }

    /// Launch plan for `n_tiles` beam tiles under the current cap and the device's shared memory.
    pub(crate) fn beam_plan(&self, n_tiles: usize) -> Result<BeamPlan, XError> {
        let cap = self.batch_beams.div_ceil(BEAM_TILE).min(n_tiles);
        let tu = self.beam_tuning;
        let layouts: Vec<(usize, usize)> = match (tu.mw, tu.warps) {
            (0, 0) => default_beam_layouts(cap).to_vec(),
            (0, w) => vec![(default_beam_layouts(cap)[0].0, w)],
            (m, 0) => vec![(m, 8)],
            (m, w) => vec![(m, w)],
        };
        // the first layout whose plan covers the whole cap with 16 warps per SM (two blocks of
        // 8, four of 4) in shared memory; else the first of 8 warps with all the shared memory a
        // block may have
        let shared = |&(mw, warps): &(usize, usize)| {
            let per_sm = 16 / warps;
            BeamPlan::new_layout(
                &self.shape,
                cap,
                (self.smem_per_sm / per_sm).saturating_sub(1024),
                mw,
                warps,
            )
            .filter(|p| p.btb == cap)
        };
        let (mw, warps) = *layouts
            .iter()
            .find(|l| shared(l).is_some())
            .unwrap_or_else(|| layouts.iter().find(|l| l.1 == 8).unwrap_or(&layouts[0]));
        shared(&(mw, warps))
            .or_else(|| BeamPlan::new_layout(&self.shape, cap, self.smem_optin, mw, warps))
            .and_then(|p| {
            if tu.ts == 0 && tu.nr == 0 {
                return Some(p);
            }
            let ts = if tu.ts == 0 { p.ts } else { tu.ts };
            let nr = if tu.nr == 0 { p.nr } else { tu.nr };
            BeamPlan::with_layout(&self.shape, p.btb, ts, nr, mw, warps)
                .filter(|q| q.smem <= self.smem_optin)
        })
        .map(|p| BeamPlan {
            probe: tu.probe,
            min_blocks: if tu.min_blocks == 0 {
                p.min_blocks
            } else {
                tu.min_blocks
            },
            ..p
        })
        .ok_or_else(|| {
            XError::Shape(format!(
                "beamformer: {} antennas, {cap} beam tiles, {mw} fragments per warp, {warps} warps: no plan fits in {} bytes of shared memory",
                self.shape.n_ants, self.smem_optin
            ))
        })
    }

    fn beam_fn(&mut self, n_beams: usize, plan: BeamPlan) -> Result<CudaFunction, XError> {
        let key = (n_beams, plan);
        if let Some(f) = self.beam_fns.get(&key) {
            return Ok(f.clone());
        }
        let ptx = crate::gpu::compile_ptx(
            "beamform.cu",
            BEAMFORM_SRC,
            &beamform_defines(&self.shape, n_beams, &plan),
            self.arch,
        )?;
        let m = self.ctx.load_module(ptx)?;
        let f = m.load_function("beamform")?;
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            plan.smem as i32,
        )?;
        self.beam_fns.insert(key, f.clone());
        Ok(f)
    }

    /// Registers per thread and local (spill) bytes per thread of the beamformer kernel for
    /// `n_beams` beams and `plan` (benchmark diagnostics).
    pub(crate) fn beam_fn_resources(
        &mut self,
        n_beams: usize,
        plan: BeamPlan,
    ) -> Result<(i32, i32), XError> {
        let f = self.beam_fn(n_beams, plan)?;
        Ok((f.num_regs()?, f.local_size_bytes()?))
    }

    /// The beamformer kernel that runs for tables `t` with `n_beams` beams, its configuration and
    /// resources (registers, local bytes per thread), as one line for benchmarks.
    pub(crate) fn beam_describe(
        &mut self,
        t: &DevTables,
        n_beams: usize,
    ) -> Result<String, XError> {
        if let Some(wg) = self.beam_wg_choice(t)? {
            let (f, p) = self.beam_wg_fn(n_beams, wg)?;
            return Ok(format!(
                "wgmma slots=2x({}+{}) groups={} kch={} nr={} cperm={}{} {} ({} regs, {} B local)",
                p.nb0,
                p.nb1,
                p.groups,
                p.kch,
                p.nr,
                p.cperm,
                if p.pcache { " pcache" } else { "" },
                if p.steal { "steal" } else { "static" },
                f.num_regs()?,
                f.local_size_bytes()?
            ));
        }
        let plan = self.beam_plan(t.n_tiles)?;
        let (regs, local) = self.beam_fn_resources(n_beams, plan)?;
        Ok(format!(
            "mma.sync ts={} nr={} btb={} mw={} warps={} {} minb={} ({regs} regs, {local} B local)",
            plan.ts,
            plan.nr,
            plan.btb,
            plan.mw,
            plan.warps,
            if self.beam_tuning.persistent {
                "persistent"
            } else {
                "grid=items"
            },
            plan.min_blocks
        ))
    }

    /// Uploads prepared beam tables.
    pub(crate) fn upload_tables(&self, t: &BeamTables) -> Result<DevTables, XError> {
        let (order, groups) = beam_groups(&t.pol, BEAM_HALF);
        let n_groups = groups.len() / 3;
        let na = t.delay.len() / t.pol.len().max(1);
        // per-beam weight scale: the largest coefficient magnitude (the channel phase keeps it)
        let wscale: Vec<f32> = t
            .coef
            .chunks(2 * na.max(1))
            .map(|c| c.chunks(2).map(|w| w[0].hypot(w[1])).fold(0f32, f32::max))
            .collect();
        Ok(DevTables {
            coef: self.stream.clone_htod(&t.coef)?,
            delay: self.stream.clone_htod(&t.delay)?,
            wscale: self.stream.clone_htod(&wscale)?,
            order: self.stream.clone_htod(&order)?,
            groups: self.stream.clone_htod(&groups)?,
            n_groups: n_groups as i32,
            n_tiles: n_groups.div_ceil(2),
            wg: self.wg_tables(&t.pol)?,
        })
    }

    /// Queues the beamformer over the batches of `l` (one launch).
    pub(crate) fn beamform_device(
        &mut self,
        t: &DevTables,
        n_beams: usize,
        l: BeamLaunch<'_>,
    ) -> Result<(), XError> {
        let nb = l.n_batches;
        let (na, bb) = (self.shape.n_ants, self.shape.batch_bytes());
        if nb == 0
            || l.input.len() < nb * bb
            || l.present.len() < nb * na
            || l.dseeds.len() < nb
            || l.out.len() < nb * self.shape.beam_output_len(n_beams)
            || l.saturated.len() < nb * n_beams
            || t.n_tiles == 0
        {
            return Err(XError::Shape(format!(
                "beamformer launch: {nb} batches, {n_beams} beams, buffers too small"
            )));
        }
        if let Some(wg) = self.beam_wg_choice(t)? {
            return self.beamform_device_wg(t, wg, n_beams, l);
        }
        let plan = self.beam_plan(t.n_tiles)?;
        let f = self.beam_fn(n_beams, plan)?;
        let items = t.n_tiles.div_ceil(plan.btb) * self.shape.n_channels * nb;
        // persistent grid: as many blocks as fit at once (at most four per SM), each walking a
        // contiguous range of items
        let per_sm = (self.smem_per_sm / (plan.smem + 1024)).clamp(1, 4);
        // and as the registers allow (65536 per SM, allocated per warp in units of 256)
        let regs = f.num_regs()?.max(1) as usize;
        let per_sm = per_sm.min((65536 / (regs.div_ceil(8) * 8 * 32 * plan.warps)).max(1));
        let per_sm = per_sm.min(64 / plan.warps);
        let blocks = if self.beam_tuning.persistent {
            items.min(per_sm * self.n_sms.max(1))
        } else {
            items
        };
        if items > i32::MAX as usize
            || nb * self.shape.beam_output_len(n_beams) > isize::MAX as usize
        {
            return Err(XError::Shape(format!("beamformer launch: {items} items")));
        }
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (32 * plan.warps as u32, 1, 1),
            shared_mem_bytes: plan.smem as u32,
        };
        let d = i32::from(l.dither);
        let nbi = nb as i32;
        let mut b = self.stream.launch_builder(&f);
        b.arg(l.input)
            .arg(l.out)
            .arg(&t.coef)
            .arg(&t.delay)
            .arg(&t.wscale)
            .arg(&t.order)
            .arg(&t.groups)
            .arg(&t.n_groups)
            .arg(l.present)
            .arg(&nbi)
            .arg(l.saturated)
            .arg(&d)
            .arg(l.dseeds);
        // SAFETY: matches `beamform` in kernels/xengine/beamform.cu (int8 out, float2 coef = 2 f32,
        // int3 groups = 3 i32, u8 present, u32 dseeds); buffer sizes checked above for
        // `nb` batches; the plan's shared memory was allowed on the function above.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Forms all beams of `beams` from `n` consecutive batches in one launch: `chunk` holds the
    /// batches back to back, `present_ants` is `[batch][antenna]` (absent antennas are read as
    /// zeros), batch k is keyed for dither as `first_batch_index + k`, and `out` receives
    /// `[batch][beam][channel][spectrum][re/im]`. Returns the statistics of each batch.
    pub fn beamform_chunk(
        &mut self,
        chunk: &[i8],
        present_ants: &[bool],
        beams: &BeamSet,
        first_batch_index: u64,
        out: &mut [i8],
    ) -> Result<Vec<BeamStats>, XError> {
        let n = self.shape.check_input(chunk)?;
        let idx: Vec<u64> = (0..n as u64)
            .map(|k| first_batch_index.wrapping_add(k))
            .collect();
        self.beamform_launch(chunk, present_ants, beams, &idx, out)
    }

    /// [`crate::compute::xengine::XBackend::beamform_batches`] in one launch.
    pub(super) fn beamform_launch(
        &mut self,
        chunk: &[i8],
        present_ants: &[bool],
        beams: &BeamSet,
        batch_indices: &[u64],
        out: &mut [i8],
    ) -> Result<Vec<BeamStats>, XError> {
        check_batches(
            &self.shape,
            chunk,
            present_ants,
            beams,
            batch_indices,
            out.len(),
        )?;
        let (dout, sat) = self.beamform_on_device(chunk, present_ants, beams, batch_indices)?;
        self.stream.memcpy_dtoh(&dout, out)?;
        self.beam_stats(present_ants, beams.beams.len(), &sat)
    }

    /// [`crate::compute::xengine::XBackend::beamform_batches_to_device`]: one launch, then
    /// each batch's beams copied on the device to their destinations (`dsts`
    /// `[batch][beam]`; one copy per run of beams that lie back to back).
    ///
    /// # Safety
    /// Every `dsts[i]..dsts[i] + beam_output_len(1)` must be device memory of this context
    /// that nothing else reads or writes until this returns.
    pub(super) unsafe fn beamform_launch_to_device(
        &mut self,
        chunk: &[i8],
        present_ants: &[bool],
        beams: &BeamSet,
        batch_indices: &[u64],
        dsts: &[u64],
    ) -> Result<Vec<BeamStats>, XError> {
        use cudarc::driver::DevicePtr;
        let nb = beams.beams.len();
        let each = self.shape.beam_output_len(1);
        let len = batch_indices.len() * self.shape.beam_output_len(nb);
        check_batches(&self.shape, chunk, present_ants, beams, batch_indices, len)?;
        if dsts.len() != batch_indices.len() * nb {
            return Err(XError::Size {
                what: "beamformer device destinations (batches x beams)",
                expected: batch_indices.len() * nb,
                got: dsts.len(),
            });
        }
        let (dout, sat) = self.beamform_on_device(chunk, present_ants, beams, batch_indices)?;
        self.ctx.bind_to_thread()?;
        {
            // On the compute stream, after the launch (the buffer's only writer).
            let (src, _record) = dout.device_ptr(&self.stream);
            let mut i = 0;
            while i < dsts.len() {
                // a run of beams back to back at their destination
                let mut j = i + 1;
                while j < dsts.len() && dsts[j] == dsts[j - 1] + each as u64 {
                    j += 1;
                }
                // SAFETY: `dout` holds dsts.len() × each bytes; the destinations are the
                // caller's device ranges.
                unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        dsts[i],
                        src + (i * each) as u64,
                        (j - i) * each,
                        self.stream.cu_stream(),
                    )?
                };
                i = j;
            }
        }
        // The beams are complete (stats synchronise the stream) before the NIC may read them.
        self.beam_stats(present_ants, nb, &sat)
    }

    /// One launch over the batches of `chunk` into a fresh device output
    /// (`[batch][beam][channel][spectrum][re/im]`) and saturation counts (`[batch][beam]`).
    fn beamform_on_device(
        &mut self,
        chunk: &[i8],
        present_ants: &[bool],
        beams: &BeamSet,
        batch_indices: &[u64],
    ) -> Result<(CudaSlice<i8>, CudaSlice<u64>), XError> {
        let n = batch_indices.len();
        let na = self.shape.n_ants;
        let nb = beams.beams.len();
        // coefficients of every antenna; absence is applied per batch by the loads
        let t = beams.tables(&self.shape, &vec![true; na])?;
        let dt = self.upload_tables(&t)?;
        let mask: Vec<u8> = present_ants.iter().map(|&p| u8::from(p)).collect();
        let seeds: Vec<u32> = batch_indices
            .iter()
            .map(|&k| batch_dither_seed(beams.seed, k))
            .collect();
        let dmask = self.stream.clone_htod(&mask)?;
        let dseeds = self.stream.clone_htod(&seeds)?;
        let inp = self.upload_input(chunk)?;
        let mut dout = self
            .stream
            .alloc_zeros::<i8>(n * self.shape.beam_output_len(nb))?;
        let mut sat = self.stream.alloc_zeros::<u64>(n * nb)?;
        let r = self.beamform_device(
            &dt,
            nb,
            BeamLaunch {
                input: &inp,
                n_batches: n,
                present: &dmask,
                dseeds: &dseeds,
                dither: beams.dither,
                out: &mut dout,
                saturated: &mut sat,
            },
        );
        self.input = Some(inp);
        r?;
        Ok((dout, sat))
    }

    /// Each batch's statistics, from the saturation counts on the device (waits for the
    /// stream: every copy queued before is done when this returns).
    fn beam_stats(
        &mut self,
        present_ants: &[bool],
        nb: usize,
        sat: &CudaSlice<u64>,
    ) -> Result<Vec<BeamStats>, XError> {
        let na = self.shape.n_ants;
        let saturated = self.stream.clone_dtoh(sat)?;
        self.stream.synchronize()?;
        Ok(present_ants
            .chunks(na)
            .zip(saturated.chunks(nb.max(1)))
            .map(|(p, s)| BeamStats {
                beam_ants: p.iter().filter(|&&x| x).count(),
                saturated: s.to_vec(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::beam_groups;

    #[test]
    fn beam_groups_are_pol_uniform_and_cover_every_beam_once() {
        let pol = [1, 0, 0, 1, 1, 0, 1, 1, 1, 0];
        for batch in [1, 2, 3, 16] {
            let (order, groups) = beam_groups(&pol, batch);
            let mut seen = vec![0; pol.len()];
            for g in groups.chunks(3) {
                let (start, n, p) = (g[0] as usize, g[1] as usize, g[2]);
                assert!(n >= 1 && n <= batch);
                for &b in &order[start..start + n] {
                    assert_eq!(pol[b as usize], p);
                    seen[b as usize] += 1;
                }
            }
            assert!(seen.iter().all(|&k| k == 1), "batch {batch}: {seen:?}");
        }
    }
}
