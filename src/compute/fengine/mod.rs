//! F-engine compute stages (channelisation), following `reference/dsp.md` (katgpucbf
//! conventions): packed-sample decode, PFB FIR, real/complex FFT, delay/phase/gain
//! post-processing, dither, quantisation with saturation counting, narrowband digital
//! down-conversion, and digitiser input statistics.
//!
//! The numbers are computed by an [`FBackend`]; [`CpuBackend`] is the multi-threaded CPU
//! reference. A block of work is described by a [`Block`]: for each polarisation the input
//! samples (packed or decoded), the index of the first sample used (the coarse delay is an
//! input offset), the per-spectrum fine delay and phase and the per-channel gains.
//!
//! Output layout is `(heap, channel, spectrum-in-heap, pol, re/im)`, int8 in [−127, 127]
//! (or one byte per complex value with 4-bit output, real in the high nibble).
//!
//! Differences from katgpucbf that are deliberate and do not change the maths:
//! * Dither is a counter-based hash keyed by (seed, feng_id, pol, absolute spectrum) through
//!   splitmix64 and by channel through one multiply-xorshift round, instead of curand XORWOW
//!   state: uniform in (−½, ½) and symmetric like katgpucbf's (2²² levels rather than 2³²,
//!   made from float bits without an int→float conversion), independent of thread and block
//!   boundaries, but not bit-identical.
//! * The DDC filter comes from our own Parks–McClellan implementation ([`remez`]) with
//!   scipy's band set-up; it is equiripple on the same bands but not bit-identical to scipy.
//! * The CPU FFT is a direct real (wideband) or complex (narrowband) FFT; katgpucbf's
//!   unzipped-FFT split (dsp.md §5) is a GPU memory-pass optimisation with the same result.
//! * The narrowband coarse delay may be any multiple of S (the GPU needs chunk alignment).

pub(crate) mod cpu;
pub(crate) mod design;
pub(crate) mod gpu;

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

pub use cpu::ddc::{ddc_weights, ddc_weights_discard, ddc_weights_no_discard, MixerFrequency};
pub use cpu::decode::{decode, decode_f32};
pub use cpu::postproc::{dither_value, quantise};
pub use cpu::stats::InputStats;
pub use cpu::CpuBackend;
pub use design::delay::{input_span, DelaySegment, LinearDelayModel};
pub use design::remez::{remez, Band};
pub use design::weights::{pfb_weights, Window};
pub use gpu::batches::Pipelined;
pub use gpu::block::BlockParams;
pub use gpu::ddc_tune::{DdcTuning, DDC_SRC};
pub use gpu::narrowband::{DdcTuningChoice, GpuNarrowband, PFB_FIR_COMPLEX_SRC, POSTPROC_NB_SRC};
pub use gpu::pipeline::{GpuPipeline, PipelineBackend, PipelineShape};
pub use gpu::wideband::{GpuBackend, Tuning, PFB_FIR_SRC, POSTPROC_SRC};

use num_complex::Complex32;

/// A finished batch's counters and its output, lent ([`FBackend::complete_lent`]).
pub type LentBatch = (BlockStats, crate::mem::Lent);

/// Computes F-engine output blocks. Implementations: [`CpuBackend`] (reference); a GPU
/// backend plugs in beside it.
pub trait FBackend {
    /// The configuration the backend was built for.
    fn config(&self) -> &FConfig;

    /// Channelises `block` into `out`, laid out as (heap, channel, spectrum-in-heap, pol,
    /// re/im) for `out.len() / (channels·2·bytes_per_value)` spectra; the block fills
    /// spectra [block.out_first, block.out_first + block.spectra).
    fn process(&mut self, block: &Block, out: &mut [u8]) -> Result<BlockStats, FError>;

    /// Batches this backend can hold in flight through [`Self::submit`] and
    /// [`Self::complete`] (0: none, [`Self::process`] only).
    fn depth(&self) -> usize {
        0
    }

    /// Queues one batch: `blocks` cover output spectra 0.. of an `out_len`-byte output in
    /// order (cut where a coarse delay changes) and all read the same packed input slices.
    /// Input in page-locked (CUDA-registered) host memory may be uploaded after this
    /// returns: the caller keeps it unchanged until [`Self::fence_input`].
    /// At most [`Self::depth`] batches may be queued and not completed.
    fn submit(&mut self, _blocks: &[Block], _out_len: usize) -> Result<(), FError> {
        Err(FError::BadParameter {
            what: "submit",
            why: "this backend computes block by block (process) only".into(),
        })
    }

    /// Waits until no queued batch still reads its input from host memory ([`Self::submit`]
    /// may leave page-locked input to be read by the device after it returns).
    fn fence_input(&mut self) -> Result<(), FError> {
        Ok(())
    }

    /// The oldest queued batch, written to `out`, with its counters; `wait`: wait for it
    /// (else `None` while it is still being computed). `None` when nothing is queued.
    fn complete(&mut self, _out: &mut [u8], _wait: bool) -> Result<Option<BlockStats>, FError> {
        Ok(None)
    }

    /// True if [`Self::complete_lent`] lends outputs.
    fn lends_output(&self) -> bool {
        false
    }

    /// [`Self::complete`] without the copy: the oldest queued batch's output stays where
    /// the backend downloaded it and is lent until the returned bytes are dropped.
    fn complete_lent(&mut self, _wait: bool) -> Result<Option<LentBatch>, FError> {
        Ok(None)
    }

    /// Keeps the outputs of batches submitted from now on in device memory (`on`), for
    /// [`Self::complete_to_device`] (no device-to-host copy), or downloads them again.
    /// False, and nothing changed, where the backend cannot (no device, or batches queued).
    fn set_device_output(&mut self, _on: bool) -> bool {
        false
    }

    /// [`Self::complete`] for a backend keeping its outputs on the device
    /// ([`Self::set_device_output`]): the oldest queued batch is copied device to device to
    /// `dst`, the copy finished when this returns.
    ///
    /// # Safety
    /// `dst..dst + len` must be device memory of the backend's context that nothing else
    /// reads or writes until this returns.
    unsafe fn complete_to_device(
        &mut self,
        _dst: u64,
        _len: usize,
        _wait: bool,
    ) -> Result<Option<BlockStats>, FError> {
        Err(FError::BadParameter {
            what: "complete_to_device",
            why: "this backend's outputs are not in device memory".into(),
        })
    }
}

/// Largest supported channel count (katgpucbf's largest mode is 32768).
pub const MAX_CHANNELS: usize = 1 << 22;
/// Largest supported PFB tap count.
pub const MAX_TAPS: usize = 256;
/// Largest supported narrowband decimation.
pub const MAX_DECIMATION: usize = 1 << 12;
/// Largest supported DDC FIR length.
pub const MAX_DDC_TAPS: usize = 1 << 16;

/// Errors from the F-engine compute stages. Bad configuration or input never panics.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FError {
    /// The channel count is not a power of two or is too small.
    #[error("channels must be a power of two and at least {min}, got {got}")]
    BadChannels {
        /// The channel count given.
        got: usize,
        /// The smallest supported.
        min: usize,
    },
    /// The PFB tap count is zero (or beyond what a backend unrolls).
    #[error("taps must be at least 1, got {0}")]
    BadTaps(usize),
    /// The digitiser sample width is not 2..=16 bits.
    #[error("unsupported input sample width {0} bits (supported: 2..=16)")]
    BadInputBits(u32),
    /// The output sample width is not 4 or 8 bits.
    #[error("unsupported output sample width {0} bits (supported: 4, 8)")]
    BadOutputBits(u32),
    /// A parameter is NaN or infinite.
    #[error("{what} must be finite, got {value}")]
    NotFinite {
        /// Which parameter.
        what: &'static str,
        /// Its value.
        value: f64,
    },
    /// A per-spectrum or per-channel slice is too short.
    #[error("{what}: expected length {expected}, got {got}")]
    BadLength {
        /// Which slice.
        what: &'static str,
        /// The length needed.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A pol's samples end before the block's last window does.
    #[error("input too short for pol {pol}: need samples up to {needed}, have {have}")]
    InputTooShort {
        /// The polarisation.
        pol: usize,
        /// Samples (or bytes) the block reads up to.
        needed: usize,
        /// Samples (or bytes) there are.
        have: usize,
    },
    /// A parameter is out of its range.
    #[error("invalid parameter {what}: {why}")]
    BadParameter {
        /// Which parameter.
        what: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// The Parks–McClellan (DDC filter) design failed: bad bands or no convergence.
    #[error("filter design failed: {0}")]
    FilterDesign(String),
    /// The output buffer is not a whole number of heaps, or too short for the block.
    #[error("output buffer: expected {expected} bytes, got {got}")]
    BadOutputLength {
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// The GPU, a CUDA library or NVRTC failed, or the GPU backend cannot run the
    /// configuration.
    #[error("GPU backend: {0}")]
    Gpu(#[from] crate::gpu::GpuError),
}

crate::gpu::impl_from_cuda_errors!(FError);

/// Whether and how uniform dither is added before quantisation (dsp.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dither {
    /// No dither: values are rounded as they are.
    None,
    /// Uniform dither in (−½, ½) LSB, keyed by (seed, feng_id, pol, spectrum, channel).
    Uniform,
}

/// Narrowband channel-selection mode (dsp.md §8).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NarrowbandMode {
    /// Subsampling S = D, complex PFB with 2·channels, outer half discarded.
    Discard,
    /// VLBI style: S = 2D, complex PFB with `channels`, nothing discarded; the DDC filter
    /// pass band is `pass_bandwidth` Hz.
    NoDiscard {
        /// DDC filter pass band, Hz.
        pass_bandwidth: f64,
    },
}

/// Narrowband (DDC) parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Narrowband {
    /// Overall decimation D relative to the wideband (Nyquist) bandwidth.
    pub decimation: usize,
    /// Centre of the band, in baseband Hz (0 ..= adc_rate/2).
    pub centre_frequency: f64,
    /// ADC sample rate in Hz.
    pub adc_rate: f64,
    /// DDC FIR length; `None` gives the default 16·S.
    pub ddc_taps: Option<usize>,
    /// Remez pass-band weight (default 0.005).
    pub weight_pass: f64,
    /// Discard (S = D) or VLBI no-discard (S = 2D) channel selection.
    pub mode: NarrowbandMode,
}

/// One output pipeline's static configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct FConfig {
    /// Output channels C.
    pub channels: usize,
    /// PFB taps T.
    pub taps: usize,
    /// Scale of the PFB prototype filter's sinc ([`pfb_weights`]; 1 by default).
    pub w_cutoff: f64,
    /// Window of the PFB prototype filter.
    pub window: Window,
    /// 8 or 4.
    pub out_bits: u32,
    /// Dither before quantisation.
    pub dither: Dither,
    /// Dither seed (the same on every engine of an array).
    pub dither_seed: u64,
    /// This engine's index in the array (keys the dither).
    pub feng_id: u64,
    /// Engines in the array (`feng_id` must be below it).
    pub n_ants: u64,
    /// Output spectra per heap (layout only).
    pub spectra_per_heap: usize,
    /// `None` for wideband.
    pub narrowband: Option<Narrowband>,
}

impl FConfig {
    /// Wideband defaults: 16 taps, w_cutoff 1, Hann, 8-bit, dither on.
    pub fn wideband(channels: usize, spectra_per_heap: usize) -> Self {
        FConfig {
            channels,
            taps: 16,
            w_cutoff: 1.0,
            window: Window::Hann,
            out_bits: 8,
            dither: Dither::Uniform,
            dither_seed: 0,
            feng_id: 0,
            n_ants: 1,
            spectra_per_heap,
            narrowband: None,
        }
    }

    /// PFB channels N (2C for narrowband discard, else C).
    pub fn pfb_channels(&self) -> usize {
        match self.narrowband {
            Some(Narrowband {
                mode: NarrowbandMode::Discard,
                ..
            }) => 2 * self.channels,
            _ => self.channels,
        }
    }

    /// DDC subsampling factor S (1 for wideband).
    pub fn subsampling(&self) -> usize {
        match self.narrowband {
            None => 1,
            Some(nb) => match nb.mode {
                NarrowbandMode::Discard => nb.decimation,
                NarrowbandMode::NoDiscard { .. } => 2 * nb.decimation,
            },
        }
    }

    /// DDC FIR length (0 for wideband).
    pub fn ddc_taps(&self) -> usize {
        match self.narrowband {
            None => 0,
            Some(nb) => nb.ddc_taps.unwrap_or(16 * self.subsampling()),
        }
    }

    /// Samples consumed by the PFB per spectrum, in the PFB's input units (real ADC samples
    /// for wideband, complex post-DDC samples for narrowband).
    pub fn pfb_step(&self) -> usize {
        match self.narrowband {
            None => 2 * self.channels,
            Some(_) => self.pfb_channels(),
        }
    }

    /// ADC samples between consecutive spectra (2C for wideband, 2C·D narrowband).
    pub fn samples_between_spectra(&self) -> usize {
        self.pfb_step() * self.subsampling()
    }

    /// ADC samples that `spectra` consecutive output spectra need, starting at the first
    /// sample of the first window.
    pub fn input_samples_needed(&self, spectra: usize) -> usize {
        if spectra == 0 {
            return 0;
        }
        let pfb_in = (spectra + self.taps - 1) * self.pfb_step();
        match self.narrowband {
            None => pfb_in,
            Some(_) => (pfb_in - 1) * self.subsampling() + self.ddc_taps(),
        }
    }

    /// Bytes per output complex value (2 for 8-bit, 1 for 4-bit).
    pub fn out_bytes_per_value(&self) -> usize {
        if self.out_bits == 4 {
            1
        } else {
            2
        }
    }

    /// Output buffer size for `spectra` spectra (both pols).
    pub fn output_len(&self, spectra: usize) -> usize {
        self.channels * spectra * 2 * self.out_bytes_per_value()
    }

    /// Internal decimation dividing the fine delay for narrowband (dsp.md §6): D/2 for
    /// discard, D for no-discard, 1 for wideband.
    pub fn internal_decimation(&self) -> f64 {
        match self.narrowband {
            None => 1.0,
            Some(nb) => match nb.mode {
                NarrowbandMode::Discard => nb.decimation as f64 / 2.0,
                NarrowbandMode::NoDiscard { .. } => nb.decimation as f64,
            },
        }
    }

    /// Checks everything that does not depend on the input.
    pub fn validate(&self) -> Result<(), FError> {
        let c = self.channels;
        if !c.is_power_of_two() || c < 2 {
            return Err(FError::BadChannels { got: c, min: 2 });
        }
        if c > MAX_CHANNELS {
            return Err(FError::BadParameter {
                what: "channels",
                why: format!("{c} exceeds the supported maximum {MAX_CHANNELS}"),
            });
        }
        if self.taps == 0 || self.taps > MAX_TAPS {
            return Err(FError::BadTaps(self.taps));
        }
        if self.out_bits != 8 && self.out_bits != 4 {
            return Err(FError::BadOutputBits(self.out_bits));
        }
        if !self.w_cutoff.is_finite() || self.w_cutoff < 0.0 {
            return Err(FError::BadParameter {
                what: "w_cutoff",
                why: format!("{} is not a finite non-negative number", self.w_cutoff),
            });
        }
        if self.spectra_per_heap == 0 {
            return Err(FError::BadParameter {
                what: "spectra_per_heap",
                why: "must be positive".into(),
            });
        }
        if self.n_ants == 0 || self.feng_id >= self.n_ants {
            return Err(FError::BadParameter {
                what: "feng_id",
                why: format!("feng_id {} not below n_ants {}", self.feng_id, self.n_ants),
            });
        }
        if let Some(nb) = self.narrowband {
            if nb.decimation == 0 || nb.decimation > MAX_DECIMATION {
                return Err(FError::BadParameter {
                    what: "decimation",
                    why: format!("must be in 1..={MAX_DECIMATION}"),
                });
            }
            if nb.mode == NarrowbandMode::Discard && nb.decimation % 2 != 0 {
                return Err(FError::BadParameter {
                    what: "decimation",
                    why: format!("{} must be even in discard mode", nb.decimation),
                });
            }
            if c < 4 {
                return Err(FError::BadChannels { got: c, min: 4 });
            }
            for (what, v) in [
                ("centre_frequency", nb.centre_frequency),
                ("adc_rate", nb.adc_rate),
                ("weight_pass", nb.weight_pass),
            ] {
                if !v.is_finite() {
                    return Err(FError::NotFinite { what, value: v });
                }
            }
            if nb.adc_rate <= 0.0 || nb.weight_pass <= 0.0 {
                return Err(FError::BadParameter {
                    what: "adc_rate/weight_pass",
                    why: "must be positive".into(),
                });
            }
            let t = self.ddc_taps();
            if !(3..=MAX_DDC_TAPS).contains(&t) {
                return Err(FError::BadTaps(t));
            }
        }
        Ok(())
    }
}

/// Input samples of one polarisation.
#[derive(Debug, Clone, Copy)]
pub enum Samples<'a> {
    /// Digitiser format: two's complement, big-endian, MSB first, `bits` per sample.
    /// `len` samples are available (the buffer may hold trailing padding).
    Packed {
        /// The packed bytes.
        data: &'a [u8],
        /// Bits per sample.
        bits: u32,
        /// Samples available.
        len: usize,
    },
    /// Already decoded samples; `bits` is the digitiser width (for statistics).
    Decoded {
        /// The samples.
        data: &'a [i16],
        /// Digitiser width, bits.
        bits: u32,
    },
}

impl Samples<'_> {
    /// Samples available.
    pub fn len(&self) -> usize {
        match self {
            Samples::Packed { len, .. } => *len,
            Samples::Decoded { data, .. } => data.len(),
        }
    }

    /// True if there are no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Digitiser width, bits.
    pub fn bits(&self) -> u32 {
        match self {
            Samples::Packed { bits, .. } | Samples::Decoded { bits, .. } => *bits,
        }
    }
}

/// Per-polarisation inputs for one block.
#[derive(Debug, Clone, Copy)]
pub struct PolBlock<'a> {
    /// The pol's input samples.
    pub samples: Samples<'a>,
    /// ADC timestamp of `samples[0]` (for the narrowband mixer phase).
    pub timestamp: u64,
    /// Index of the first sample of the first spectrum's window (coarse delay applied:
    /// output timestamp − coarse delay − `timestamp`). Narrowband: a multiple of S.
    pub offset: usize,
    /// Fine delay per spectrum, ADC samples (|fine| ≤ ½ wideband, ≤ S/2 narrowband).
    pub fine_delay: &'a [f64],
    /// Phase per spectrum, radians (wideband: including the π/2·(coarse mod 4) term).
    pub phase: &'a [f64],
    /// Complex gain per output channel.
    pub gains: &'a [Complex32],
}

/// One block of output spectra with a constant coarse delay per pol.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    /// Output spectra of the block.
    pub spectra: usize,
    /// Absolute index of the first output spectrum (output timestamp / samples between
    /// spectra); keys the dither so results do not depend on block boundaries.
    pub first_spectrum: u64,
    /// Position of the first spectrum within the output buffer, in spectra.
    pub out_first: usize,
    /// The two polarisations' inputs.
    pub pols: [PolBlock<'a>; 2],
}

/// Counters produced by one block.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BlockStats {
    /// Complex outputs that saturated (re or im beyond ±qmax before rounding), per pol.
    pub saturated: [u64; 2],
    /// Digitiser statistics per pol (wideband only, like katgpucbf).
    pub input: Option<[InputStats; 2]>,
}

/// Deterministic pseudo-noise samples within `bits` (xorshift, roughly ±200).
pub(crate) fn sample_noise(n: usize, seed: u64) -> Vec<i16> {
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
