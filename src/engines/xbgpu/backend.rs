//! The XB-engine's compute seams, [`Correlator`] and [`Beamformer`], and their
//! implementations over an X-engine backend ([`Corr`], [`Beams`]; CPU reference or GPU, from
//! [`make_backend`]).

use std::sync::{Arc, Mutex};

use crate::compute::xengine::{BeamSet, CpuX, GpuX, XBackend, XError, XShape};

/// Why a correlation or beamforming call failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The X-engine backend refused the call.
    #[error(transparent)]
    Compute(#[from] XError),
    /// The beam set was poisoned by a panic elsewhere.
    #[error("beam set lock poisoned")]
    LockPoisoned,
    /// A chunk whose data, presence flags and outputs do not divide into its batches.
    #[error("beamformer chunk: {batches} batches, {bytes} bytes, {flags} presence flags, {outputs} outputs")]
    ChunkShape {
        /// Batches in the chunk.
        batches: usize,
        /// Bytes of data.
        bytes: usize,
        /// Presence flags.
        flags: usize,
        /// Outputs given.
        outputs: usize,
    },
    /// Outputs that are not one per beam per batch.
    #[error("beamformer chunk: {outputs} outputs for {batches} batches of {beams} beams")]
    ChunkOutputs {
        /// Outputs given.
        outputs: usize,
        /// Batches in the chunk.
        batches: usize,
        /// Beams.
        beams: usize,
    },
}

/// Why an output stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The correlator or beamformer failed.
    #[error(transparent)]
    Compute(#[from] BackendError),
    /// Sending a heap failed.
    #[error(transparent)]
    Send(#[from] std::io::Error),
}

/// The GPU X-engine backend could not be built (the message carries the backend's error
/// whole).
#[derive(Debug, thiserror::Error)]
#[error("GPU backend: {0}")]
pub struct GpuBackendError(pub XError);

/// Correlation backend: accumulates batches, then dumps.
pub trait Correlator: Send {
    /// Adds one batch: (antenna, channel, spectrum, pol, re/im) int8.
    fn accumulate(&mut self, batch: &[i8]) -> Result<(), BackendError>;
    /// Writes the accumulation as (channel, baseline, product, re/im) int32, saturated to
    /// ±(2^31−1), with MISSING on every baseline touching an absent antenna; resets the
    /// accumulator. Returns the number of saturated visibilities.
    fn dump(&mut self, present: &[bool], out: &mut [i32]) -> Result<u64, BackendError>;
    /// Waits until no copy queued by [`Correlator::accumulate`] still reads its input (a
    /// GPU copying registered host memory asynchronously); the input may be reused after.
    /// The default has nothing to wait for.
    fn fence_input(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
}

/// Beamformer backend: all beams of one batch, or of several batches at once.
pub trait Beamformer: Send {
    /// Forms every beam from one batch (absent antennas already zeroed). `out[b]` receives
    /// beam b as (channel, spectrum, re/im) int8. Returns saturated values per beam.
    fn beamform(
        &mut self,
        batch_ts: u64,
        batch: &[i8],
        present: &[bool],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<u64>, BackendError>;

    /// Forms every beam of `ts.len()` batches (timestamps `ts`) held back to back in `data`,
    /// `present` being `[batch][antenna]`: `out[k · beams + b]` receives beam b of batch k.
    /// Returns saturated values per beam, per batch. The default calls
    /// [`Beamformer::beamform`] per batch.
    fn beamform_chunk(
        &mut self,
        ts: &[u64],
        data: &[i8],
        present: &[bool],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<Vec<u64>>, BackendError> {
        let n = ts.len();
        if n == 0
            || !data.len().is_multiple_of(n)
            || !present.len().is_multiple_of(n)
            || !out.len().is_multiple_of(n)
        {
            return Err(BackendError::ChunkShape {
                batches: n,
                bytes: data.len(),
                flags: present.len(),
                outputs: out.len(),
            });
        }
        let (bb, na, nb) = (data.len() / n, present.len() / n, out.len() / n);
        out.chunks_mut(nb)
            .enumerate()
            .map(|(k, o)| {
                self.beamform(
                    ts[k],
                    &data[k * bb..(k + 1) * bb],
                    &present[k * na..(k + 1) * na],
                    o,
                )
            })
            .collect()
    }

    /// Waits until no copy queued by a beamformer call still reads its input; the input may
    /// be reused after. The default has nothing to wait for.
    fn fence_input(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
}

/// The engine's [`Correlator`] over an X-engine backend.
pub struct Corr(pub Box<dyn XBackend + Send>);

impl Correlator for Corr {
    fn accumulate(&mut self, batch: &[i8]) -> Result<(), BackendError> {
        Ok(self.0.accumulate(batch)?)
    }

    fn dump(&mut self, present: &[bool], out: &mut [i32]) -> Result<u64, BackendError> {
        Ok(self.0.dump(present, out)?)
    }

    fn fence_input(&mut self) -> Result<(), BackendError> {
        Ok(self.0.fence_input()?)
    }
}

/// The engine's [`Beamformer`] over an X-engine back end: the beam set is read (it changes
/// through katcp) once per call, batches are keyed for dither by timestamp / `batch_step`, and
/// a chunk of batches goes to the back end in one [`XBackend::beamform_batches`] call (one
/// launch on the GPU).
pub struct Beams {
    backend: Box<dyn XBackend + Send>,
    set: Arc<Mutex<BeamSet>>,
    batch_step: u64,
    flat: Vec<i8>,
}

impl Beams {
    /// Beams of `set` on `backend`, batches `batch_step` ADC samples apart.
    pub fn new(
        backend: Box<dyn XBackend + Send>,
        set: Arc<Mutex<BeamSet>>,
        batch_step: u64,
    ) -> Self {
        Beams {
            backend,
            set,
            batch_step: batch_step.max(1),
            flat: Vec::new(),
        }
    }

    fn beam_set(&self) -> Result<BeamSet, BackendError> {
        Ok(self
            .set
            .lock()
            .map_err(|_| BackendError::LockPoisoned)?
            .clone())
    }
}

impl Beamformer for Beams {
    fn beamform_chunk(
        &mut self,
        ts: &[u64],
        data: &[i8],
        present: &[bool],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<Vec<u64>>, BackendError> {
        let set = self.beam_set()?;
        let per = self.backend.shape().beam_output_len(set.beams.len());
        let nb = set.beams.len();
        if out.len() != ts.len() * nb {
            return Err(BackendError::ChunkOutputs {
                outputs: out.len(),
                batches: ts.len(),
                beams: nb,
            });
        }
        self.flat.resize(ts.len() * per, 0);
        let idx: Vec<u64> = ts.iter().map(|&t| t / self.batch_step).collect();
        let stats = self
            .backend
            .beamform_batches(data, present, &set, &idx, &mut self.flat)?;
        let each = per / nb.max(1);
        for (o, f) in out.iter_mut().zip(self.flat.chunks(each)) {
            o.clear();
            o.extend_from_slice(f);
        }
        Ok(stats.into_iter().map(|s| s.saturated).collect())
    }

    fn beamform(
        &mut self,
        batch_ts: u64,
        batch: &[i8],
        present: &[bool],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<u64>, BackendError> {
        let set = self.beam_set()?;
        self.flat
            .resize(self.backend.shape().beam_output_len(set.beams.len()), 0);
        let stats = self.backend.beamform(
            batch,
            present,
            &set,
            batch_ts / self.batch_step,
            &mut self.flat,
        )?;
        let per = self.flat.len() / out.len().max(1);
        for (b, o) in out.iter_mut().enumerate() {
            o.copy_from_slice(&self.flat[b * per..(b + 1) * per]);
        }
        Ok(stats.saturated)
    }

    fn fence_input(&mut self) -> Result<(), BackendError> {
        Ok(self.backend.fence_input()?)
    }
}

/// The X-engine backend of `shape`: the GPU one (`use_gpu`) or the CPU reference.
pub fn make_backend(
    use_gpu: bool,
    shape: XShape,
) -> Result<Box<dyn XBackend + Send>, GpuBackendError> {
    Ok(if use_gpu {
        Box::new(GpuX::new(shape).map_err(GpuBackendError)?)
    } else {
        Box::new(CpuX::new(shape))
    })
}
