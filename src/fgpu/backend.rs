//! Glue between the engine's [`Channelizer`] seam and the F-engine compute backends.

use super::config::{FgpuArgs, WidebandSpec, WindowFunction};
use super::control::{OutputControl, SharedControl};
use super::engine::Channelizer;
use crate::fengine::{
    Block, CpuBackend, DelaySegment, Dither, FBackend, FConfig, GpuBackend, GpuNarrowband,
    Narrowband, NarrowbandMode, PolBlock, Samples, Window,
};

/// The compute configuration of one output.
pub fn fconfig(spec: &WidebandSpec, args: &FgpuArgs, dither_seed: u64) -> FConfig {
    FConfig {
        channels: spec.channels,
        taps: spec.taps,
        w_cutoff: spec.w_cutoff,
        window: match spec.window_function {
            WindowFunction::Hann => Window::Hann,
            WindowFunction::Rect => Window::Rect,
        },
        out_bits: args.send_sample_bits,
        dither: if spec.dither {
            Dither::Uniform
        } else {
            Dither::None
        },
        dither_seed,
        feng_id: args.feng_id,
        n_ants: args.array_size,
        spectra_per_heap: spec.spectra_per_heap(),
        narrowband: spec.narrowband.map(|nb| Narrowband {
            decimation: nb.decimation,
            centre_frequency: nb.centre_frequency,
            adc_rate: args.adc_sample_rate,
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
    ranges: [(u64, u64); 2],
}

/// A [`Channelizer`] over an [`FBackend`]: gains and delay models from a shared
/// [`OutputControl`], each spectrum with the delay model in force at its own timestamp;
/// blocks are cut where either polarisation's coarse delay or delay model changes.
pub struct BackendChannelizer<B: FBackend + Send> {
    backend: B,
    spectra: usize,
    bits: u32,
    sbs: u64,
    /// Coarse-delay resolution (1 wideband, S narrowband).
    unit: u64,
    wideband: bool,
    cfg: crate::fengine::FConfig,
    pub control: SharedControl,
    prepared: std::sync::Mutex<Option<Prepared>>,
}

impl<B: FBackend + Send> BackendChannelizer<B> {
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
        }
    }

    /// Delay segments of input `pol` over the batch at `batch_ts`: each spectrum evaluates
    /// the model in force at its own timestamp, so a model starting inside the batch takes
    /// over at the first spectrum whose timestamp is at or after its start.
    fn segments(
        &self,
        ctl: &OutputControl,
        pol: usize,
        batch_ts: u64,
    ) -> Result<Vec<DelaySegment>, String> {
        let mut out = Vec::new();
        let mut s = 0usize;
        while s < self.spectra {
            let t = batch_ts + s as u64 * self.sbs;
            let end = match ctl.next_start_after(pol, t) {
                // ns > t, so the run is at least one spectrum long.
                Some(ns) => ((ns - batch_ts).div_ceil(self.sbs) as usize).min(self.spectra),
                None => self.spectra,
            };
            let segs = ctl
                .model_at(pol, t)
                .segments(t, end - s, self.sbs, self.unit, self.wideband)
                .map_err(|e| e.to_string())?;
            out.extend(segs.into_iter().map(|mut seg| {
                seg.first += s;
                seg
            }));
            s = end;
        }
        Ok(out)
    }

    /// Copies the controls for the batch at `batch_ts` and works out its input ranges.
    fn prepare(&self, batch_ts: u64) -> Result<Prepared, String> {
        let ctl = {
            let mut c = self.control.lock().map_err(|_| "control lock poisoned")?;
            c.mark_taken(batch_ts);
            c.clone()
        };
        let segs = [
            self.segments(&ctl, 0, batch_ts)?,
            self.segments(&ctl, 1, batch_ts)?,
        ];
        let mut ranges = [(batch_ts, u64::MAX); 2];
        for (r, pol_segs) in ranges.iter_mut().zip(&segs) {
            let mut lo = u64::MAX;
            let mut hi = 0u64;
            for s in pol_segs {
                let start = (s.timestamp as i128 - s.coarse as i128).max(0) as u64;
                lo = lo.min(start);
                hi = hi.max(start + self.cfg.input_samples_needed(s.len()) as u64);
            }
            if !pol_segs.is_empty() {
                *r = (lo, hi);
            }
        }
        Ok(Prepared {
            batch_ts,
            gains: ctl.gains,
            segs,
            ranges,
        })
    }
}

impl<B: FBackend + Send> Channelizer for BackendChannelizer<B> {
    fn input_range(&self, batch_ts: u64) -> [(u64, u64); 2] {
        match self.prepare(batch_ts) {
            Ok(p) => {
                let r = p.ranges;
                if let Ok(mut slot) = self.prepared.lock() {
                    *slot = Some(p);
                }
                r
            }
            Err(_) => [(batch_ts, u64::MAX); 2],
        }
    }

    fn process(
        &mut self,
        batch_ts: u64,
        input: [&[i16]; 2],
        out: &mut [u8],
    ) -> Result<[u64; 2], String> {
        let cached = self
            .prepared
            .get_mut()
            .ok()
            .and_then(Option::take)
            .filter(|p| p.batch_ts == batch_ts);
        let prep = match cached {
            Some(p) => p,
            None => self.prepare(batch_ts)?,
        };
        let (segs, ranges) = (&prep.segs, prep.ranges);
        // Cut points: where either pol's coarse delay or delay model changes.
        let mut cuts: Vec<usize> = segs.iter().flatten().map(|s| s.first).collect();
        cuts.push(self.spectra);
        cuts.sort_unstable();
        cuts.dedup();
        let mut sat = [0u64; 2];
        for w in cuts.windows(2) {
            let (a, b) = (w[0], w[1]);
            let mut pols = Vec::with_capacity(2);
            for p in 0..2 {
                let seg = segs[p]
                    .iter()
                    .rev()
                    .find(|s| s.first <= a)
                    .ok_or("no delay segment")?;
                let k = a - seg.first;
                let t_a = batch_ts + a as u64 * self.sbs;
                let in_start = t_a as i128 - seg.coarse as i128 - ranges[p].0 as i128;
                let offset = usize::try_from(in_start).map_err(|_| "negative input offset")?;
                pols.push(PolBlock {
                    samples: Samples::Decoded {
                        data: input[p],
                        bits: self.bits,
                    },
                    timestamp: ranges[p].0,
                    offset,
                    fine_delay: &seg.fine_delay[k..k + (b - a)],
                    phase: &seg.phase[k..k + (b - a)],
                    gains: &prep.gains[p],
                });
            }
            let block = Block {
                spectra: b - a,
                first_spectrum: batch_ts / self.sbs + a as u64,
                out_first: a,
                pols: [pols[0], pols[1]],
            };
            let st = self
                .backend
                .process(&block, out)
                .map_err(|e| e.to_string())?;
            sat[0] += st.saturated[0];
            sat[1] += st.saturated[1];
        }
        Ok(sat)
    }
}

/// Builds the channeliser of one output on the requested backend.
pub fn make_channelizer(
    spec: &WidebandSpec,
    args: &FgpuArgs,
    dither_seed: u64,
    control: SharedControl,
) -> anyhow::Result<Box<dyn Channelizer>> {
    if !args.gain.is_finite() {
        anyhow::bail!("--gain must be finite");
    }
    let cfg = fconfig(spec, args, dither_seed);
    let use_gpu = crate::cli_util::use_gpu(&args.backend, true)?;
    let bits = args.dig_sample_bits;
    if use_gpu && cfg.narrowband.is_some() {
        let backend =
            GpuNarrowband::new(cfg).map_err(|e| anyhow::anyhow!("output {}: {e}", spec.name))?;
        return Ok(Box::new(BackendChannelizer::new(backend, bits, control)));
    }
    if use_gpu {
        let backend =
            GpuBackend::new(cfg).map_err(|e| anyhow::anyhow!("output {}: {e}", spec.name))?;
        return Ok(Box::new(BackendChannelizer::new(backend, bits, control)));
    }
    let backend = CpuBackend::new(cfg).map_err(|e| anyhow::anyhow!("output {}: {e}", spec.name))?;
    Ok(Box::new(BackendChannelizer::new(backend, bits, control)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fgpu::parse_wideband;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: FgpuArgs,
    }

    fn ctl() -> SharedControl {
        std::sync::Arc::new(std::sync::Mutex::new(OutputControl::new(1024, 1.0)))
    }

    fn args(backend: &str) -> FgpuArgs {
        Cli::try_parse_from([
            "fgpu",
            "--adc-sample-rate",
            "1712e6",
            "--sync-time",
            "0",
            "--backend",
            backend,
            "x.pcap",
        ])
        .unwrap()
        .args
    }

    /// `--backend gpu` builds the GPU channeliser where there is a GPU and is a clear error
    /// where there is none; `cpu` and `auto` always work; other names are refused.
    #[test]
    fn backend_selection() {
        let spec = parse_wideband("name=wb,channels=1024,dst=127.0.0.1:7148").unwrap();
        assert!(make_channelizer(&spec, &args("cpu"), 1, ctl()).is_ok());
        assert!(make_channelizer(&spec, &args("auto"), 1, ctl()).is_ok());
        let gpu = make_channelizer(&spec, &args("gpu"), 1, ctl());
        if crate::gpu::gpu_available() {
            assert!(gpu.is_ok(), "{:?}", gpu.err());
        } else {
            let e = gpu
                .err()
                .expect("--backend gpu without a GPU must fail")
                .to_string();
            assert!(e.contains("no usable CUDA device"), "{e}");
        }
        let e = make_channelizer(&spec, &args("tpu"), 1, ctl())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("expected auto, cpu or gpu"), "{e}");
    }

    /// `fgpu --backend gpu --narrowband ...`: the GPU channeliser (GpuNarrowband) gives the
    /// CPU channeliser's batch on the same input (≥ 99.9 % of values within 1 LSB), for
    /// discard and no-discard outputs.
    #[test]
    fn narrowband_gpu_channelizer_matches_cpu() {
        if !crate::gpu::gpu_test_guard("narrowband_gpu_channelizer_matches_cpu") {
            return;
        }
        for extra in ["", ",pass_bandwidth=40e6"] {
            let spec = crate::fgpu::config::parse_narrowband(&format!(
                "name=nb,channels=256,centre_frequency=300e6,decimation=8,jones_per_batch=8192,dst=127.0.0.1:7148{extra}"
            ))
            .unwrap();
            let ctl = || std::sync::Arc::new(std::sync::Mutex::new(OutputControl::new(256, 0.5)));
            let mut cpu = make_channelizer(&spec, &args("cpu"), 7, ctl()).unwrap();
            let mut gpu = make_channelizer(&spec, &args("gpu"), 7, ctl()).unwrap();
            let batch_ts = 1u64 << 36;
            let ranges = cpu.input_range(batch_ts);
            assert_eq!(ranges, gpu.input_range(batch_ts));
            let mut x = 0x1234_5678_9abc_def1u64;
            let input: Vec<Vec<i16>> = ranges
                .iter()
                .map(|&(lo, hi)| {
                    (lo..hi)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            ((x >> 40) % 301) as i16 - 150
                        })
                        .collect()
                })
                .collect();
            let len = 256 * spec.spectra_per_heap() * 4;
            let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
            let sa = cpu
                .process(batch_ts, [&input[0], &input[1]], &mut a)
                .unwrap();
            let sb = gpu
                .process(batch_ts, [&input[0], &input[1]], &mut b)
                .unwrap();
            let close = a
                .iter()
                .zip(&b)
                .filter(|(p, q)| (**p as i8 as i32 - **q as i8 as i32).abs() <= 1)
                .count();
            assert!(close as f64 >= 0.999 * len as f64, "{extra}: {close}/{len}");
            assert!(a.iter().any(|&v| v != 0), "{extra}: all-zero output");
            for p in 0..2 {
                assert!(
                    sa[p].abs_diff(sb[p]) <= 2 + len as u64 / 1000,
                    "{sa:?} {sb:?}"
                );
            }
        }
    }
}
