//! Glue between the engine's [`Channelizer`] seam and the F-engine compute backends.

use super::channelizer::{Channelizer, ChannelizerError, Completed};
use super::config::FgpuConfig;
use super::control::{OutputControl, SharedControl};
use super::spec::{WidebandSpec, WindowFunction};
use crate::compute::fengine::{
    input_span, Block, CpuBackend, DelaySegment, Dither, FBackend, FConfig, FError, GpuBackend,
    GpuNarrowband, InputStats, Narrowband, NarrowbandMode, PipelineBackend, Pipelined, PolBlock,
    Samples, Window,
};
use crate::mem::Lent;
use std::collections::VecDeque;

/// The compute configuration of one output.
pub fn fconfig(spec: &WidebandSpec, cfg: &FgpuConfig) -> FConfig {
    FConfig {
        channels: spec.channels,
        taps: spec.taps,
        w_cutoff: spec.w_cutoff,
        window: match spec.window_function {
            WindowFunction::Hann => Window::Hann,
            WindowFunction::Rect => Window::Rect,
        },
        out_bits: cfg.send_sample_bits,
        dither: if spec.dither {
            Dither::Uniform
        } else {
            Dither::None
        },
        dither_seed: cfg.dither_seed,
        feng_id: cfg.feng_id,
        n_ants: cfg.array_size,
        spectra_per_heap: spec.spectra_per_heap(),
        narrowband: spec.narrowband.map(|nb| Narrowband {
            decimation: nb.decimation,
            centre_frequency: nb.centre_frequency,
            adc_rate: cfg.adc_sample_rate,
            ddc_taps: nb.ddc_taps,
            weight_pass: nb.weight_pass,
            mode: match nb.pass_bandwidth {
                Some(pass_bandwidth) => NarrowbandMode::NoDiscard { pass_bandwidth },
                None => NarrowbandMode::Discard,
            },
        }),
    }
}

/// The controls one batch is channelised with. [`Channelizer::input_range`] copies them
/// (and marks the batch as taken in the shared control) and [`Channelizer::process`] uses the
/// same copy, so a katcp request landing between the two cannot make them disagree.
struct Prepared {
    batch_ts: u64,
    gains: [Vec<num_complex::Complex32>; 2],
    segs: [Vec<DelaySegment>; 2],
    /// Input per pol; `None` when a spectrum's window would start before timestamp 0.
    ranges: Option<[(u64, u64); 2]>,
}

/// A batch computed at submission: output, clipped values, digitiser statistics.
type Computed = (Vec<u8>, [u64; 2], Option<[InputStats; 2]>);

/// A [`Channelizer`] over an [`FBackend`]: gains and delay models from a shared
/// [`OutputControl`], each spectrum with the delay model in force at its own timestamp;
/// blocks are cut where either polarisation's coarse delay or delay model changes. Batches
/// go block by block through [`FBackend::process`] (decoded input), or, when the backend
/// holds batches in flight ([`FBackend::depth`] > 0), as packed input through
/// [`FBackend::submit`] / [`FBackend::complete`]; [`Self::with_packed_input`] makes a
/// backend without that depth take packed input too (computed at submission).
pub struct BackendChannelizer<B: FBackend + Send> {
    backend: B,
    spectra: usize,
    bits: u32,
    sbs: u64,
    /// Coarse-delay resolution (1 wideband, S narrowband).
    unit: u64,
    wideband: bool,
    cfg: FConfig,
    /// The output's gains and delay models (shared with katcp).
    pub control: SharedControl,
    prepared: std::sync::Mutex<Option<Prepared>>,
    /// Packed input (submit/complete) for a backend without depth.
    packed: bool,
    /// Timestamps of the batches submitted and not completed.
    queued: VecDeque<u64>,
    /// Batches computed at submission (backends without depth).
    done: VecDeque<Computed>,
    /// Batches taken so far, for the injected fault.
    taken: u64,
}

impl<B: FBackend + Send> BackendChannelizer<B> {
    /// A channeliser over `backend` for `bits`-bit digitiser samples, controlled by
    /// `control`.
    pub fn new(backend: B, bits: u32, control: SharedControl) -> Self {
        let cfg = backend.config().clone();
        BackendChannelizer {
            spectra: cfg.spectra_per_heap,
            sbs: cfg.samples_between_spectra() as u64,
            unit: cfg.subsampling() as u64,
            wideband: cfg.narrowband.is_none(),
            cfg,
            backend,
            bits,
            control,
            prepared: std::sync::Mutex::new(None),
            packed: false,
            queued: VecDeque::new(),
            done: VecDeque::new(),
            taken: 0,
        }
    }

    /// Counts a batch taken for computing; fails it as a failed GPU call would where the
    /// controls' [`DebugBreak::fail_compute_after`](super::control::DebugBreak) says so.
    fn take_batch(&mut self, batch_ts: u64) -> Result<(), ChannelizerError> {
        let after = self
            .control
            .lock()
            .ok()
            .and_then(|c| c.debug.fail_compute_after);
        if let Some(after) = after.filter(|&a| self.taken >= a) {
            return Err(ChannelizerError::Injected { batch_ts, after });
        }
        self.taken += 1;
        Ok(())
    }

    /// Takes packed input through submit/complete even if the backend has no depth (then
    /// each batch is computed when it is submitted).
    pub fn with_packed_input(mut self, on: bool) -> Self {
        self.packed = on;
        self
    }

    /// The controls prepared for `batch_ts` by [`Channelizer::input_range`], or new ones.
    fn take_prepared(&mut self, batch_ts: u64) -> Result<Prepared, ChannelizerError> {
        let cached = self
            .prepared
            .get_mut()
            .ok()
            .and_then(Option::take)
            .filter(|p| p.batch_ts == batch_ts);
        match cached {
            Some(p) => Ok(p),
            None => self.prepare(batch_ts),
        }
    }

    /// The blocks of the batch at `batch_ts`: pol p's `samples` hold its input range from
    /// `skip[p]` samples on.
    fn blocks<'a>(
        &self,
        prep: &'a Prepared,
        batch_ts: u64,
        samples: [Samples<'a>; 2],
        skip: [usize; 2],
    ) -> Result<Vec<Block<'a>>, ChannelizerError> {
        let segs = &prep.segs;
        let ranges = prep.ranges.ok_or(ChannelizerError::BeforeInput(batch_ts))?;
        // Cut points: where either pol's coarse delay or delay model changes.
        let mut cuts: Vec<usize> = segs.iter().flatten().map(|s| s.first).collect();
        cuts.push(self.spectra);
        cuts.sort_unstable();
        cuts.dedup();
        let mut blocks = Vec::with_capacity(cuts.len());
        for w in cuts.windows(2) {
            let (a, b) = (w[0], w[1]);
            let mut pols = Vec::with_capacity(2);
            for p in 0..2 {
                let seg = segs[p]
                    .iter()
                    .rev()
                    .find(|s| s.first <= a)
                    .ok_or(ChannelizerError::NoDelaySegment)?;
                let k = a - seg.first;
                // The window of spectrum a, from the segment's input start.
                let offset = seg
                    .input_offset(ranges[p].0)
                    .map(|o| o + k * self.sbs as usize)
                    .ok_or(ChannelizerError::OffsetBeforeRange)?;
                pols.push(PolBlock {
                    samples: samples[p],
                    timestamp: ranges[p].0.wrapping_sub(skip[p] as u64),
                    offset: offset + skip[p],
                    fine_delay: &seg.fine_delay[k..k + (b - a)],
                    phase: &seg.phase[k..k + (b - a)],
                    gains: &prep.gains[p],
                });
            }
            blocks.push(Block {
                spectra: b - a,
                first_spectrum: batch_ts / self.sbs + a as u64,
                out_first: a,
                pols: [pols[0], pols[1]],
            });
        }
        Ok(blocks)
    }

    /// Delay segments of input `pol` over the batch at `batch_ts`: each spectrum evaluates
    /// the model in force at its own timestamp, so a model starting inside the batch takes
    /// over at the first spectrum whose timestamp is at or after its start.
    pub(super) fn segments(
        &self,
        ctl: &OutputControl,
        pol: usize,
        batch_ts: u64,
    ) -> Result<Vec<DelaySegment>, FError> {
        let mut out = Vec::new();
        let mut s = 0usize;
        while s < self.spectra {
            let t = batch_ts + s as u64 * self.sbs;
            let end = match ctl.next_start_after(pol, t) {
                // ns > t, so the run is at least one spectrum long.
                Some(ns) => ((ns - batch_ts).div_ceil(self.sbs) as usize).min(self.spectra),
                None => self.spectra,
            };
            let segs =
                ctl.model_at(pol, t)
                    .segments(t, end - s, self.sbs, self.unit, self.wideband)?;
            out.extend(segs.into_iter().map(|mut seg| {
                seg.first += s;
                seg
            }));
            s = end;
        }
        Ok(out)
    }

    /// Copies the controls for the batch at `batch_ts` and works out its input ranges.
    fn prepare(&self, batch_ts: u64) -> Result<Prepared, ChannelizerError> {
        let ctl = {
            let mut c = self
                .control
                .lock()
                .map_err(|_| ChannelizerError::LockPoisoned)?;
            c.mark_taken(batch_ts);
            c.applied()
        };
        let segs = [
            self.segments(&ctl, 0, batch_ts)?,
            self.segments(&ctl, 1, batch_ts)?,
        ];
        // The decision shared by every backend: a batch any of whose windows would start
        // before timestamp 0 has no input range (it is skipped and counted, never clamped).
        let window = |n: usize| self.cfg.input_samples_needed(n);
        let ranges = match [input_span(&segs[0], window), input_span(&segs[1], window)] {
            [Some(a), Some(b)] => Some([a, b]),
            _ => None,
        };
        Ok(Prepared {
            batch_ts,
            gains: ctl.gains,
            segs,
            ranges,
        })
    }
}

impl<B: FBackend + Send> Channelizer for BackendChannelizer<B> {
    fn input_range(&self, batch_ts: u64) -> Result<Option<[(u64, u64); 2]>, ChannelizerError> {
        // A model that does not evaluate is the batch's error: the engine drops the batch
        // (counted) and goes on.
        let p = self.prepare(batch_ts)?;
        let r = p.ranges;
        if let Ok(mut slot) = self.prepared.lock() {
            *slot = Some(p);
        }
        Ok(r)
    }

    fn process(
        &mut self,
        batch_ts: u64,
        input: [&[i16]; 2],
        out: &mut [u8],
    ) -> Result<[u64; 2], ChannelizerError> {
        self.take_batch(batch_ts)?;
        let prep = self.take_prepared(batch_ts)?;
        let samples = input.map(|data| Samples::Decoded {
            data,
            bits: self.bits,
        });
        let blocks = self.blocks(&prep, batch_ts, samples, [0, 0])?;
        let mut sat = [0u64; 2];
        for block in &blocks {
            let st = self.backend.process(block, out)?;
            sat[0] += st.saturated[0];
            sat[1] += st.saturated[1];
        }
        Ok(sat)
    }

    fn pipelined(&self) -> bool {
        self.packed || self.backend.depth() > 0
    }

    fn depth(&self) -> usize {
        self.backend.depth().max(1)
    }

    fn packed_align(&self) -> usize {
        // Offsets into the input stay multiples of the subsampling (narrowband).
        let u = self.unit as usize;
        let mut a = 8usize;
        while !a.is_multiple_of(u) {
            a += 8;
        }
        a
    }

    fn in_flight(&self) -> usize {
        self.queued.len()
    }

    fn submit_packed(
        &mut self,
        batch_ts: u64,
        input: [&[u8]; 2],
        skip: [usize; 2],
    ) -> Result<(), ChannelizerError> {
        if self.queued.len() >= self.depth() {
            return Err(ChannelizerError::Full(self.queued.len()));
        }
        self.take_batch(batch_ts)?;
        let prep = self.take_prepared(batch_ts)?;
        let bits = self.bits;
        let samples = input.map(|data| Samples::Packed {
            data,
            bits,
            len: data.len() * 8 / bits as usize,
        });
        let blocks = self.blocks(&prep, batch_ts, samples, skip)?;
        let out_len = self.cfg.output_len(self.spectra);
        if self.backend.depth() > 0 {
            self.backend.submit(&blocks, out_len)?;
        } else {
            let mut out = vec![0u8; out_len];
            let mut sat = [0u64; 2];
            let mut input: Option<[InputStats; 2]> = None;
            for block in &blocks {
                let st = self.backend.process(block, &mut out)?;
                sat[0] += st.saturated[0];
                sat[1] += st.saturated[1];
                match (&mut input, st.input) {
                    (None, i) => input = i,
                    (Some(acc), Some(i)) => {
                        for p in 0..2 {
                            acc[p].merge(&i[p]);
                        }
                    }
                    (Some(_), None) => {}
                }
            }
            self.done.push_back((out, sat, input));
        }
        self.queued.push_back(batch_ts);
        Ok(())
    }

    fn fence_input(&mut self) -> Result<(), ChannelizerError> {
        Ok(self.backend.fence_input()?)
    }

    fn complete(
        &mut self,
        out: &mut [u8],
        wait: bool,
    ) -> Result<Option<Completed>, ChannelizerError> {
        let Some(&batch_ts) = self.queued.front() else {
            return Ok(None);
        };
        let (clipped, input) = if self.backend.depth() > 0 {
            match self.backend.complete(out, wait)? {
                Some(st) => (st.saturated, st.input),
                None => return Ok(None),
            }
        } else {
            let (data, sat, input) = self
                .done
                .pop_front()
                .ok_or(ChannelizerError::NoComputedBatch)?;
            if data.len() != out.len() {
                return Err(ChannelizerError::OutputLength {
                    out: out.len(),
                    batch: data.len(),
                });
            }
            out.copy_from_slice(&data);
            (sat, input)
        };
        self.queued.pop_front();
        Ok(Some(Completed {
            batch_ts,
            clipped,
            input,
        }))
    }

    fn lends_output(&self) -> bool {
        self.backend.depth() > 0 && self.backend.lends_output()
    }

    fn complete_lent(&mut self, wait: bool) -> Result<Option<(Completed, Lent)>, ChannelizerError> {
        let Some(&batch_ts) = self.queued.front() else {
            return Ok(None);
        };
        if !self.lends_output() {
            return Ok(None);
        }
        let Some((st, bytes)) = self.backend.complete_lent(wait)? else {
            return Ok(None);
        };
        self.queued.pop_front();
        let done = Completed {
            batch_ts,
            clipped: st.saturated,
            input: st.input,
        };
        Ok(Some((done, bytes)))
    }

    fn set_device_output(&mut self, on: bool) -> bool {
        self.backend.depth() > 0 && self.queued.is_empty() && self.backend.set_device_output(on)
    }

    unsafe fn complete_to_device(
        &mut self,
        dst: u64,
        len: usize,
        wait: bool,
    ) -> Result<Option<Completed>, ChannelizerError> {
        let Some(&batch_ts) = self.queued.front() else {
            return Ok(None);
        };
        if self.backend.depth() == 0 {
            return Err(ChannelizerError::HostOutput);
        }
        // SAFETY: the caller's guarantee about dst, passed on.
        let Some(st) = (unsafe { self.backend.complete_to_device(dst, len, wait) })? else {
            return Ok(None);
        };
        self.queued.pop_front();
        Ok(Some(Completed {
            batch_ts,
            clipped: st.saturated,
            input: st.input,
        }))
    }
}

/// Builds the channeliser of one output on the configured backend.
pub fn make_channelizer(
    spec: &WidebandSpec,
    cfg: &FgpuConfig,
    control: SharedControl,
) -> Result<Box<dyn Channelizer>, OutputError> {
    let fcfg = fconfig(spec, cfg);
    let bits = cfg.dig_sample_bits;
    let err = |error| OutputError {
        output: spec.name.clone(),
        error,
    };
    if cfg.use_gpu {
        // Packed input straight to the GPU, several batches in flight.
        let be = if fcfg.narrowband.is_some() {
            PipelineBackend::Narrowband(GpuNarrowband::new(fcfg).map_err(err)?)
        } else {
            PipelineBackend::Wideband(GpuBackend::new(fcfg).map_err(err)?)
        };
        let backend = Pipelined::new(be).map_err(err)?;
        return Ok(Box::new(BackendChannelizer::new(backend, bits, control)));
    }
    let backend = CpuBackend::new(fcfg).map_err(err)?;
    Ok(Box::new(BackendChannelizer::new(backend, bits, control)))
}

/// An output whose compute backend could not be built.
#[derive(Debug, thiserror::Error)]
#[error("output {output}: {error}")]
pub struct OutputError {
    /// The output's name.
    pub output: String,
    /// Why its backend could not be built (a kernel that does not compile, a shape the
    /// backend does not take); the message carries it whole.
    pub error: FError,
}
