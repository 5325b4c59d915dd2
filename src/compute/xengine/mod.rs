//! X-engine compute core: correlator (int8 in, int64 accumulation, saturating int32 dump with
//! MISSING markers) and single-pol beamformer, each with a CPU reference ([`CpuX`]) and a GPU
//! implementation ([`GpuX`], tensor cores through `kernels/xengine/correlate.cu`, `kernels/xengine/beamform.cu`).
//!
//! Input layout (one batch = the heaps of all F-engines for one timestamp), int8:
//! `[antenna][channel][spectrum][pol][re/im]`, i.e. each antenna's `feng_raw`
//! (channel, spectrum, pol, re/im) one after the other. Several batches are contiguous.
//! Values must lie in [−127, 127] (the ICD guarantees −128 is never sent; the GPU's complex
//! trick negates imaginary parts, so −128 would not be exact there). With 4-bit input
//! ([`XShape::with_sample_bits`]) each complex value is one byte, real in the high nibble
//! (two's complement nibbles, as fgpu `--send-sample-bits 4` writes them): `[antenna][channel]
//! [spectrum][pol]`; [`unpack4`] gives the 8-bit layout.
//!
//! Correlator output (ICD §4.3), int32 `[channel][baseline][product][re/im]` with baseline
//! `a2(a2+1)/2 + a1` (a1 ≤ a2) and product `p1 + 2·p2`, value `Σ x[a1,p1]·conj(x[a2,p2])`.

mod beam;
pub(crate) mod cpu;
pub(crate) mod gpu;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

pub use beam::{batch_dither_seed, beam_dither, Beam, BeamSet, BeamStats, BeamTables};
pub use cpu::CpuX;
pub use gpu::{
    beamform_defines, correlate_defines, BeamKernel, BeamPlan, BeamTuning, BeamWgPlan, CorrVariant,
    GpuX, Uploads, BEAMFORM_SRC, BEAMFORM_WGMMA_SRC, BEAM_WG_MAX_ANTS, CORRELATE_SRC,
};
pub use gpu::{
    correlate_wgmma_defines, sparse_tile, sparse_tiles, CorrKernel, WgmmaVariant,
    AUTO_SPARSE_ON_SM90, AUTO_WS_ON_SM90, CORRELATE_WGMMA_SRC, CORRELATOR_ENV, WGMMA_ARCH,
};

pub use crate::spead::icd::{baseline_index, MISSING};
/// Largest antenna count supported.
pub const MAX_ANTS: usize = 1024;

/// Errors of the X-engine compute core.
#[derive(Debug, thiserror::Error)]
pub enum XError {
    /// A shape parameter is out of range.
    #[error("invalid shape: {0}")]
    Shape(String),
    /// A buffer has the wrong length.
    #[error("{what}: expected {expected} elements, got {got}")]
    Size {
        /// Which buffer.
        what: &'static str,
        /// Required length.
        expected: usize,
        /// Given length.
        got: usize,
    },
    /// A beam parameter is invalid (NaN, wrong length, bad pol).
    #[error("invalid beam configuration: {0}")]
    Beam(String),
    /// The GPU or NVRTC failed.
    #[error("GPU: {0}")]
    Gpu(#[from] crate::gpu::GpuError),
}

crate::gpu::impl_from_cuda_errors!(XError);

/// Problem shape of one X-engine (one substream of channels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XShape {
    /// Number of antennas (F-engines), 1..=[`MAX_ANTS`].
    pub n_ants: usize,
    /// Channels handled by this engine (channels per substream).
    pub n_channels: usize,
    /// Spectra per heap (per batch); a multiple of 16.
    pub spectra_per_batch: usize,
    /// Input bits per real value: 8 (int8 re, im) or 4 (one byte per complex value).
    pub sample_bits: u32,
}

impl XShape {
    /// Validated shape.
    pub fn new(n_ants: usize, n_channels: usize, spectra_per_batch: usize) -> Result<Self, XError> {
        if n_ants == 0 || n_ants > MAX_ANTS {
            return Err(XError::Shape(format!(
                "n_ants = {n_ants}, must be 1..={MAX_ANTS}"
            )));
        }
        if n_channels == 0 || n_channels > 65535 {
            return Err(XError::Shape(format!(
                "n_channels = {n_channels}, must be 1..=65535"
            )));
        }
        if spectra_per_batch == 0
            || !spectra_per_batch.is_multiple_of(16)
            || spectra_per_batch > 1 << 20
        {
            return Err(XError::Shape(format!(
                "spectra_per_batch = {spectra_per_batch}, must be a positive multiple of 16 (≤ 2^20)"
            )));
        }
        let s = Self {
            n_ants,
            n_channels,
            spectra_per_batch,
            sample_bits: 8,
        };
        if s.output_len() >= 1 << 31 {
            return Err(XError::Shape("output larger than 2^31 elements".into()));
        }
        Ok(s)
    }

    /// The same shape with `bits`-bit input (8, or 4: one byte per complex value, real in the
    /// high nibble).
    pub fn with_sample_bits(mut self, bits: u32) -> Result<Self, XError> {
        if bits != 8 && bits != 4 {
            return Err(XError::Shape(format!(
                "sample_bits = {bits}, must be 8 or 4"
            )));
        }
        self.sample_bits = bits;
        Ok(self)
    }

    /// The same shape with 8-bit input (what [`unpack4`] produces).
    pub fn unpacked(&self) -> Self {
        Self {
            sample_bits: 8,
            ..*self
        }
    }

    /// Number of baselines including autocorrelations.
    pub fn n_baselines(&self) -> usize {
        crate::spead::icd::n_baselines(self.n_ants)
    }

    /// Bytes of one batch (all antennas).
    pub fn batch_bytes(&self) -> usize {
        self.n_ants * self.n_channels * self.spectra_per_batch * self.sample_bits as usize / 2
    }

    /// Number of int32 values in a correlator dump (`channels × baselines × 4 × 2`).
    pub fn output_len(&self) -> usize {
        self.n_channels * self.n_baselines() * 8
    }

    /// Number of int8 values of a beamformer output for `n_beams` beams.
    pub fn beam_output_len(&self, n_beams: usize) -> usize {
        n_beams * self.n_channels * self.spectra_per_batch * 2
    }

    /// Checks a multi-batch input buffer; returns the number of batches.
    pub fn check_input(&self, input: &[i8]) -> Result<usize, XError> {
        let bb = self.batch_bytes();
        if input.is_empty() || !input.len().is_multiple_of(bb) {
            return Err(XError::Size {
                what: "correlator input (a whole number of batches)",
                expected: bb * (input.len() / bb).max(1),
                got: input.len(),
            });
        }
        Ok(input.len() / bb)
    }

    pub(crate) fn check_present(&self, present: &[bool]) -> Result<(), XError> {
        if present.len() != self.n_ants {
            return Err(XError::Size {
                what: "present_ants",
                expected: self.n_ants,
                got: present.len(),
            });
        }
        Ok(())
    }
}

/// 4-bit input (one byte per complex value, real in the high nibble) to the 8-bit layout
/// (re, im bytes), sign-extending each nibble.
pub fn unpack4(packed: &[i8]) -> Vec<i8> {
    let mut out = Vec::with_capacity(2 * packed.len());
    for &b in packed {
        out.push(b >> 4);
        out.push(b.wrapping_shl(4) >> 4);
    }
    out
}

/// Offset (in int32 elements) of the real part of product (p1, p2) of baseline `bl` in channel `c`.
pub fn output_offset(shape: &XShape, c: usize, bl: usize, p1: usize, p2: usize) -> usize {
    ((c * shape.n_baselines() + bl) * 4 + p1 + 2 * p2) * 2
}

/// One byte per baseline: 1 when both antennas are present.
pub fn present_baselines(present_ants: &[bool]) -> Vec<u8> {
    let n = present_ants.len();
    let mut out = Vec::with_capacity(n * (n + 1) / 2);
    for a2 in 0..n {
        for a1 in 0..=a2 {
            out.push(u8::from(present_ants[a1] && present_ants[a2]));
        }
    }
    out
}

/// The numeric back end of an X-engine: correlator accumulation and dumps, and beamforming.
pub trait XBackend {
    /// Short name ("cpu", "gpu").
    fn name(&self) -> &'static str;
    /// The shape this back end was built for.
    fn shape(&self) -> XShape;
    /// Adds the correlation of one or more whole batches to the 64-bit accumulator (several
    /// consecutive batches in one call: one copy and one launch on the GPU). The GPU may
    /// still be copying `input` when this returns if it is CUDA-registered host memory: see
    /// [`XBackend::fence_input`].
    fn accumulate(&mut self, input: &[i8]) -> Result<(), XError>;
    /// Waits until no copy queued by an earlier call still reads that call's host input, so
    /// the input memory may be reused or freed. A back end that copies CUDA-registered host
    /// memory asynchronously (the GPU) must be fenced before that memory changes; the default
    /// (every copy done when the call returns) has nothing to wait for.
    fn fence_input(&mut self) -> Result<(), XError> {
        Ok(())
    }
    /// Saturates the accumulator to int32 into `out` (length [`XShape::output_len`]), writes
    /// [`MISSING`] for baselines touching an antenna with `present_ants[a] == false`, resets the
    /// accumulator, and returns the number of saturated products (present baselines only).
    fn dump(&mut self, present_ants: &[bool], out: &mut [i32]) -> Result<u64, XError>;
    /// True if [`XBackend::dump_to_device`] works: the accumulator lives on a GPU.
    fn dumps_to_device(&self) -> bool {
        false
    }
    /// [`XBackend::dump`] into device memory: the dump, as the little-endian bytes of the
    /// int32 visibilities (`len` = 4 × [`XShape::output_len`]), is written to `dst` on the
    /// device and the write has finished when this returns (the saturation count comes back
    /// to the host). The default refuses: the accumulator is in host memory.
    ///
    /// # Safety
    /// `dst..dst + len` must be device memory of the back end's context that nothing else
    /// reads or writes until this returns.
    unsafe fn dump_to_device(
        &mut self,
        _present_ants: &[bool],
        _dst: u64,
        _len: usize,
    ) -> Result<u64, XError> {
        Err(XError::Shape(format!(
            "the {} back end dumps to host memory only",
            self.name()
        )))
    }
    /// Forms all beams of `beams` from one batch; `out` is int8 `[beam][channel][spectrum][re/im]`.
    /// Absent antennas are zeroed. `batch_index` keys the dither.
    fn beamform(
        &mut self,
        batch: &[i8],
        present_ants: &[bool],
        beams: &BeamSet,
        batch_index: u64,
        out: &mut [i8],
    ) -> Result<BeamStats, XError>;
    /// True if [`XBackend::beamform_batches_to_device`] works (the beamformer is on a GPU).
    fn beamforms_to_device(&self) -> bool {
        false
    }
    /// [`XBackend::beamform_batches`] into device memory: beam b of batch k
    /// ([`XShape::beam_output_len`]`(1)` bytes) is written to `dsts[k · beams + b]` on the
    /// device, and the writes have finished when this returns (the statistics come back to
    /// the host). The default refuses: the beams are formed in host memory.
    ///
    /// # Safety
    /// Every `dsts[i]..dsts[i] + beam_output_len(1)` must be device memory of the back
    /// end's context that nothing else reads or writes until this returns.
    unsafe fn beamform_batches_to_device(
        &mut self,
        _batches: &[i8],
        _present_ants: &[bool],
        _beams: &BeamSet,
        _batch_indices: &[u64],
        _dsts: &[u64],
    ) -> Result<Vec<BeamStats>, XError> {
        Err(XError::Shape(format!(
            "the {} back end forms beams in host memory only",
            self.name()
        )))
    }
    /// Forms all beams of `batch_indices.len()` batches held back to back in `batches`:
    /// `present_ants` is `[batch][antenna]`, batch k is keyed for dither by `batch_indices[k]`
    /// and `out` is int8 `[batch][beam][channel][spectrum][re/im]`. Returns each batch's
    /// statistics. The default runs [`XBackend::beamform`] per batch (the same answers); the
    /// GPU does the whole set in one launch.
    fn beamform_batches(
        &mut self,
        batches: &[i8],
        present_ants: &[bool],
        beams: &BeamSet,
        batch_indices: &[u64],
        out: &mut [i8],
    ) -> Result<Vec<BeamStats>, XError> {
        let shape = self.shape();
        let n = check_batches(
            &shape,
            batches,
            present_ants,
            beams,
            batch_indices,
            out.len(),
        )?;
        let (bb, na, per) = (
            shape.batch_bytes(),
            shape.n_ants,
            shape.beam_output_len(beams.beams.len()),
        );
        (0..n)
            .map(|k| {
                self.beamform(
                    &batches[k * bb..(k + 1) * bb],
                    &present_ants[k * na..(k + 1) * na],
                    beams,
                    batch_indices[k],
                    &mut out[k * per..(k + 1) * per],
                )
            })
            .collect()
    }
}

/// Checks the buffers of [`XBackend::beamform_batches`] (`out_len`: the output's length);
/// returns the number of batches.
pub(crate) fn check_batches(
    shape: &XShape,
    batches: &[i8],
    present_ants: &[bool],
    beams: &BeamSet,
    batch_indices: &[u64],
    out_len: usize,
) -> Result<usize, XError> {
    let n = batch_indices.len();
    for (what, expected, got) in [
        (
            "beamformer input (batches)",
            n * shape.batch_bytes(),
            batches.len(),
        ),
        (
            "beamformer present_ants (batches x antennas)",
            n * shape.n_ants,
            present_ants.len(),
        ),
        (
            "beamformer output",
            n * shape.beam_output_len(beams.beams.len()),
            out_len,
        ),
    ] {
        if expected != got || n == 0 {
            return Err(XError::Size {
                what,
                expected,
                got,
            });
        }
    }
    Ok(n)
}
