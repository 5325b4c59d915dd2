//! Glue between the engine's [`Channelizer`] seam and the F-engine compute backends.

use num_complex::Complex32;

use super::config::{FgpuArgs, WidebandSpec, WindowFunction};
use super::engine::Channelizer;
use crate::fengine::{
    Block, CpuBackend, Dither, FBackend, FConfig, Narrowband, NarrowbandMode, PolBlock, Samples,
    Window,
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

/// A [`Channelizer`] over an [`FBackend`]: one block per batch, constant gains, no delay.
pub struct BackendChannelizer<B: FBackend + Send> {
    backend: B,
    spectra: usize,
    bits: u32,
    sbs: u64,
    window: usize,
    gains: Vec<Complex32>,
    fine: Vec<f64>,
    phase: Vec<f64>,
}

impl<B: FBackend + Send> BackendChannelizer<B> {
    pub fn new(backend: B, bits: u32, gain: f32) -> Self {
        let cfg = backend.config().clone();
        let spectra = cfg.spectra_per_heap;
        BackendChannelizer {
            window: cfg.input_samples_needed(spectra),
            sbs: cfg.samples_between_spectra() as u64,
            gains: vec![Complex32::new(gain, 0.0); cfg.channels],
            fine: vec![0.0; spectra],
            phase: vec![0.0; spectra],
            backend,
            spectra,
            bits,
        }
    }
}

impl<B: FBackend + Send> Channelizer for BackendChannelizer<B> {
    fn window_samples(&self) -> usize {
        self.window
    }

    fn process(
        &mut self,
        batch_ts: u64,
        input: [&[i16]; 2],
        out: &mut [u8],
    ) -> Result<[u64; 2], String> {
        let pol = |p: usize| PolBlock {
            samples: Samples::Decoded {
                data: input[p],
                bits: self.bits,
            },
            timestamp: batch_ts,
            offset: 0,
            fine_delay: &self.fine,
            phase: &self.phase,
            gains: &self.gains,
        };
        let block = Block {
            spectra: self.spectra,
            first_spectrum: batch_ts / self.sbs,
            out_first: 0,
            pols: [pol(0), pol(1)],
        };
        let stats = self
            .backend
            .process(&block, out)
            .map_err(|e| e.to_string())?;
        Ok(stats.saturated)
    }
}

/// Builds the channeliser of one output on the requested backend.
pub fn make_channelizer(
    spec: &WidebandSpec,
    args: &FgpuArgs,
    dither_seed: u64,
) -> anyhow::Result<Box<dyn Channelizer>> {
    if !args.gain.is_finite() {
        anyhow::bail!("--gain must be finite");
    }
    let cfg = fconfig(spec, args, dither_seed);
    let use_gpu = match args.backend.as_str() {
        "cpu" => false,
        "gpu" => true,
        "auto" => false,
        other => anyhow::bail!("--backend {other}: expected auto, cpu or gpu"),
    };
    if use_gpu {
        anyhow::bail!("the GPU F-engine backend is not built yet: use --backend cpu");
    }
    let backend = CpuBackend::new(cfg).map_err(|e| anyhow::anyhow!("output {}: {e}", spec.name))?;
    Ok(Box::new(BackendChannelizer::new(
        backend,
        args.dig_sample_bits,
        args.gain as f32,
    )))
}
