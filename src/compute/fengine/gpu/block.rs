//! One block's device buffers and parameters, shared by the wideband and narrowband GPU
//! backends and the pipelines built on them: the staged input and how it sits in the buffer
//! ([`DeviceBlock`]), the per-spectrum and per-channel parameters ([`BlockParams`]) and their
//! host staging and upload ([`HostParams`]).

use std::sync::Arc;

use cudarc::driver::{
    CudaSlice, CudaStream, DeviceRepr, HostSlice, PinnedHostSlice, ValidAsZeroBits,
};
use num_complex::Complex32;

use crate::compute::fengine::cpu::postproc::dither_key;
use crate::compute::fengine::{Block, Dither, FConfig, FError};

/// Bytes after each pol's input in the device buffer (the decoder reads 8 bytes ahead).
pub(super) const IN_PAD: usize = 16;

/// Grows `buf` to at least `len` elements (contents are not kept).
pub(crate) fn ensure<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    buf: &mut CudaSlice<T>,
    len: usize,
) -> Result<(), FError> {
    if buf.len() < len {
        *buf = stream.alloc_zeros::<T>(len)?;
    }
    Ok(())
}

/// Queues the upload of staged (delay, keys, gains) host parameters into the device buffers,
/// growing the per-spectrum ones as needed.
pub(crate) fn upload_params(
    stream: &Arc<CudaStream>,
    host: (&[f32], &[u64], &[f32]),
    dev: (
        &mut CudaSlice<f32>,
        &mut CudaSlice<u64>,
        &mut CudaSlice<f32>,
    ),
) -> Result<(), FError> {
    let ((h_delay, h_keys, h_gains), (delay, keys, gains)) = (host, dev);
    ensure(stream, delay, h_delay.len())?;
    ensure(stream, keys, h_keys.len())?;
    let mut d = delay.slice_mut(..h_delay.len());
    stream.memcpy_htod(h_delay, &mut d)?;
    let mut k = keys.slice_mut(..h_keys.len());
    stream.memcpy_htod(h_keys, &mut k)?;
    stream.memcpy_htod(h_gains, gains)?;
    Ok(())
}

/// Host staging of one block's post-processing parameters (both GPU backends): delay and
/// dither keys per (spectrum, pol), gains per (pol, channel), in the kernels' layout.
pub(crate) struct HostParams {
    delay: Vec<f32>,
    keys: Vec<u64>,
    gains: Vec<f32>,
}

impl HostParams {
    pub(crate) fn new(channels: usize) -> Self {
        HostParams {
            delay: vec![],
            keys: vec![],
            gains: vec![0.0; 4 * channels],
        }
    }

    /// Fills the staging from `block` (validated) and queues its upload into the device
    /// buffers `dev` = (delay, keys, gains).
    pub(crate) fn upload(
        &mut self,
        cfg: &FConfig,
        block: &Block,
        stream: &Arc<CudaStream>,
        dev: (
            &mut CudaSlice<f32>,
            &mut CudaSlice<u64>,
            &mut CudaSlice<f32>,
        ),
    ) -> Result<(), FError> {
        let m = block.spectra;
        self.delay.resize(4 * m, 0.0);
        self.keys.resize(2 * m, 0);
        BlockParams::of(block).fill(cfg, &mut self.delay, &mut self.keys, &mut self.gains);
        upload_params(stream, (&self.delay, &self.keys, &self.gains), dev)
    }
}

/// Bench: queues the copies of both pols' input from pinned host buffers into `input` (pol
/// p at p·`stride` bytes, at most `room[p]` bytes each).
pub(crate) fn upload_pinned_pols(
    stream: &Arc<CudaStream>,
    input: &mut CudaSlice<u8>,
    stride: usize,
    room: [usize; 2],
    src: [&PinnedHostSlice<u8>; 2],
) -> Result<(), FError> {
    for (p, h) in src.iter().enumerate() {
        let len = HostSlice::len(*h);
        if len > room[p] {
            return Err(FError::BadLength {
                what: "pinned input",
                expected: room[p],
                got: len,
            });
        }
        let mut dst = input.slice_mut(p * stride..p * stride + len);
        stream.memcpy_htod(*h, &mut dst)?;
    }
    Ok(())
}

/// How one pol's input sits in the device input buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Staged {
    /// 0 for int16, else the packed width (the FIR kernel variant).
    pub(super) in_bits: u32,
    /// Digitiser width, for the clip count.
    pub(super) stat_bits: u32,
    /// Index of the first window sample within the staged bytes.
    pub(super) first: usize,
    /// Staged bytes of the pol.
    pub(super) bytes: usize,
}

/// The device buffers of one block: staged input, per-block parameters, output and
/// counters. [`super::wideband::GpuBackend`] computes on the one it holds; the pipeline
/// ([`super::pipeline`]) keeps several and swaps each in for its compute.
pub(crate) struct DeviceBlock {
    pub(crate) input: CudaSlice<u8>,
    /// Bytes from one pol's input to the next.
    pub(crate) in_stride: usize,
    pub(super) staged: [Staged; 2],
    pub(crate) out: CudaSlice<u8>,
    pub(crate) gains: CudaSlice<f32>,
    pub(crate) delay: CudaSlice<f32>,
    pub(crate) keys: CudaSlice<u64>,
    pub(crate) in_stats: CudaSlice<u64>,
    pub(crate) sat: CudaSlice<u64>,
}

impl DeviceBlock {
    /// Minimal buffers (grown on use) for `channels` output channels.
    pub(crate) fn new(stream: &Arc<CudaStream>, channels: usize) -> Result<Self, FError> {
        let zero = Staged {
            in_bits: 0,
            stat_bits: 16,
            first: 0,
            bytes: 0,
        };
        Ok(DeviceBlock {
            input: stream.alloc_zeros(16)?,
            in_stride: 0,
            staged: [zero; 2],
            out: stream.alloc_zeros(4)?,
            gains: stream.alloc_zeros(4 * channels)?,
            delay: stream.alloc_zeros(4)?,
            keys: stream.alloc_zeros(2)?,
            in_stats: stream.alloc_zeros(4)?,
            sat: stream.alloc_zeros(2)?,
        })
    }

    /// Sizes the input for packed `bits`-wide samples, `bytes` per pol with the window
    /// starting at the first byte, and the other buffers for `spectra` spectra of `cfg`.
    /// `input` = (bits, bytes, pad): at least `pad` bytes follow each pol's input (the
    /// narrowband DDC reads further ahead than the FIR).
    pub(crate) fn shape_packed_pad(
        &mut self,
        stream: &Arc<CudaStream>,
        cfg: &FConfig,
        input: (u32, usize, usize),
        spectra: usize,
    ) -> Result<(), FError> {
        let (bits, bytes, pad) = input;
        let stride = bytes.next_multiple_of(4) + pad.max(IN_PAD);
        ensure(stream, &mut self.input, 2 * stride)?;
        self.in_stride = stride;
        self.staged = [Staged {
            in_bits: bits,
            stat_bits: bits,
            first: 0,
            bytes,
        }; 2];
        ensure(stream, &mut self.out, cfg.output_len(spectra))?;
        ensure(stream, &mut self.delay, 4 * spectra)?;
        ensure(stream, &mut self.keys, 2 * spectra)?;
        Ok(())
    }
}

/// The per-spectrum and per-channel parameters of one block of spectra.
#[derive(Debug, Clone, Copy)]
pub struct BlockParams<'a> {
    /// Absolute index of the first spectrum (keys the dither).
    pub first_spectrum: u64,
    /// Spectra of the block.
    pub spectra: usize,
    /// Per pol: fine delay and phase per spectrum (as in [`crate::compute::fengine::PolBlock`]).
    pub fine_delay: [&'a [f64]; 2],
    /// See `fine_delay`.
    pub phase: [&'a [f64]; 2],
    /// Per pol: complex gain per channel.
    pub gains: [&'a [Complex32]; 2],
}

impl<'a> BlockParams<'a> {
    /// The parameters of `block`.
    pub fn of(block: &Block<'a>) -> Self {
        let [a, b] = &block.pols;
        BlockParams {
            first_spectrum: block.first_spectrum,
            spectra: block.spectra,
            fine_delay: [a.fine_delay, b.fine_delay],
            phase: [a.phase, b.phase],
            gains: [a.gains, b.gains],
        }
    }

    /// Checks the lengths against `cfg`.
    pub fn validate(&self, cfg: &FConfig) -> Result<(), FError> {
        for p in 0..2 {
            for (what, len, want) in [
                ("fine_delay", self.fine_delay[p].len(), self.spectra),
                ("phase", self.phase[p].len(), self.spectra),
                ("gains", self.gains[p].len(), cfg.channels),
            ] {
                if len < want {
                    return Err(FError::BadLength {
                        what,
                        expected: want,
                        got: len,
                    });
                }
            }
        }
        Ok(())
    }

    /// Writes the parameters in the layout the post-processing kernel reads: `delay` per
    /// (spectrum, pol) (−fine/(N·divisor), phase/π mod 2), dither `keys` per (spectrum,
    /// pol), `gains` per (pol, channel) as (re, im). Lengths must have been validated.
    pub(crate) fn fill(
        &self,
        cfg: &FConfig,
        delay: &mut [f32],
        keys: &mut [u64],
        gains: &mut [f32],
    ) {
        let c = cfg.channels;
        let n = cfg.pfb_channels() as f64 * cfg.internal_decimation();
        let dither = cfg.dither == Dither::Uniform;
        for s in 0..self.spectra {
            for p in 0..2 {
                let ph = (self.phase[p][s] / std::f64::consts::PI).rem_euclid(2.0);
                delay[4 * s + 2 * p] = (-self.fine_delay[p][s] / n) as f32;
                delay[4 * s + 2 * p + 1] = ph as f32;
                let spectrum = self.first_spectrum.wrapping_add(s as u64);
                keys[2 * s + p] = if dither {
                    dither_key(cfg.dither_seed, cfg.feng_id, p, spectrum)
                } else {
                    0
                };
            }
        }
        for p in 0..2 {
            for (i, g) in self.gains[p][..c].iter().enumerate() {
                gains[2 * (p * c + i)] = g.re;
                gains[2 * (p * c + i) + 1] = g.im;
            }
        }
    }
}
