//! The XB-engine's compute seams, [`Correlator`] and [`Beamformer`], and their
//! implementations over an X-engine backend ([`Corr`], [`Beams`]; CPU reference or GPU, from
//! [`make_backend`]).

use std::sync::{Arc, Mutex};

use crate::compute::xengine::{BeamSet, BeamStats, CpuX, GpuX, XBackend, XError, XShape};

/// Why a correlation or beamforming call failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The X-engine backend refused the call.
    #[error(transparent)]
    Compute(#[from] XError),
    /// The beam set was poisoned by a panic elsewhere.
    #[error("beam set lock poisoned")]
    LockPoisoned,
    /// The compute call failed because a test asked it to (`--debug-fail-compute-after`),
    /// standing for a GPU call that fails.
    #[error(
        "the correlator's compute call failed (fault injected by --debug-fail-compute-after {0})"
    )]
    Injected(u64),
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
    /// True if [`Correlator::dump_to_device`] works (the accumulator is on a GPU).
    fn dumps_to_device(&self) -> bool {
        false
    }
    /// [`Correlator::dump`] into `len` bytes of device memory at `dst` (the int32
    /// visibilities' little-endian bytes, written when this returns). The default refuses.
    ///
    /// # Safety
    /// `dst..dst + len` must be device memory of the correlator's context (or whatever
    /// memory a test correlator writes) that nothing else reads or writes until this returns.
    unsafe fn dump_to_device(
        &mut self,
        _present: &[bool],
        _dst: u64,
        _len: usize,
    ) -> Result<u64, BackendError> {
        Err(XError::Shape("this correlator dumps to host memory only".into()).into())
    }
    /// Waits until no copy queued by [`Correlator::accumulate`] still reads its input (a
    /// GPU copying registered host memory asynchronously); the input may be reused after.
    /// The default has nothing to wait for.
    fn fence_input(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
}

/// A correlator whose compute call fails after `after` batches (`xbgpu
/// --debug-fail-compute-after`), as a GPU call that fails would.
pub struct FailAfter {
    /// The correlator that computes until then.
    pub inner: Box<dyn Correlator>,
    /// Batches accumulated before the fault.
    pub after: u64,
    /// Batches accumulated so far.
    pub taken: u64,
}

impl Correlator for FailAfter {
    fn accumulate(&mut self, batch: &[i8]) -> Result<(), BackendError> {
        if self.taken >= self.after {
            return Err(BackendError::Injected(self.after));
        }
        self.taken += 1;
        self.inner.accumulate(batch)
    }

    fn dump(&mut self, present: &[bool], out: &mut [i32]) -> Result<u64, BackendError> {
        self.inner.dump(present, out)
    }

    fn dumps_to_device(&self) -> bool {
        self.inner.dumps_to_device()
    }

    unsafe fn dump_to_device(
        &mut self,
        present: &[bool],
        dst: u64,
        len: usize,
    ) -> Result<u64, BackendError> {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.inner.dump_to_device(present, dst, len) }
    }

    fn fence_input(&mut self) -> Result<(), BackendError> {
        self.inner.fence_input()
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

    /// True if [`Beamformer::beamform_chunk_to_device`] works (the beams are formed on a
    /// GPU).
    fn forms_to_device(&self) -> bool {
        false
    }

    /// [`Beamformer::beamform_chunk`] into device memory: beam b of batch k (`beam_bytes`,
    /// (channel, spectrum, re/im) int8) is written to `dsts[k · beams + b]`, and the writes
    /// have finished when this returns. The default refuses.
    ///
    /// # Safety
    /// Every `dsts[i]..dsts[i] + beam_bytes` must be device memory of the beamformer's
    /// context (or whatever memory a test beamformer writes) that nothing else reads or
    /// writes until this returns.
    unsafe fn beamform_chunk_to_device(
        &mut self,
        _ts: &[u64],
        _data: &[i8],
        _present: &[bool],
        _dsts: &[u64],
        _beam_bytes: usize,
    ) -> Result<Vec<Vec<u64>>, BackendError> {
        Err(XError::Shape("this beamformer forms its beams in host memory only".into()).into())
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

    fn dumps_to_device(&self) -> bool {
        self.0.dumps_to_device()
    }

    unsafe fn dump_to_device(
        &mut self,
        present: &[bool],
        dst: u64,
        len: usize,
    ) -> Result<u64, BackendError> {
        // SAFETY: the caller's guarantee, passed on.
        Ok(unsafe { self.0.dump_to_device(present, dst, len) }?)
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
    /// Per beam: dithered (`--beam ... dither=`); `None`: the set's own flag for all.
    dither: Option<Vec<bool>>,
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
            dither: None,
        }
    }

    /// Dithers beam b iff `flags[b]` (katgpucbf's per-beam `dither=`): where the flags
    /// differ, the dithered and the undithered beams are formed in two back-end calls, each
    /// beam keyed for dither by its index in its group; where they agree (or their count is
    /// not the set's), one call with the set's beams, dithered as the flags say.
    pub fn with_dither(mut self, flags: Vec<bool>) -> Self {
        self.dither = Some(flags);
        self
    }

    /// The beams grouped by dither: (dithered, beam indices, the group's set). One group of
    /// every beam unless the per-beam flags differ.
    fn groups(&self, set: &BeamSet) -> Vec<(Vec<usize>, BeamSet)> {
        let nb = set.beams.len();
        let all = |dither: bool| {
            vec![(
                (0..nb).collect(),
                BeamSet {
                    dither,
                    ..set.clone()
                },
            )]
        };
        let Some(d) = self.dither.as_ref().filter(|d| d.len() == nb && nb > 0) else {
            return all(set.dither);
        };
        if d.iter().all(|&x| x == d[0]) {
            return all(d[0]);
        }
        [true, false]
            .into_iter()
            .map(|flag| {
                let idx: Vec<usize> = (0..nb).filter(|&b| d[b] == flag).collect();
                let sub = BeamSet {
                    beams: idx.iter().map(|&b| set.beams[b].clone()).collect(),
                    dither: flag,
                    ..set.clone()
                };
                (idx, sub)
            })
            .collect()
    }

    /// Forms the beams of batches `idx` (dither keys) back to back in `data` by dither group
    /// ([`Beams::groups`]) into `out` (`[batch][beam]`); saturation `[batch][beam]`.
    fn form_groups(
        &mut self,
        groups: Vec<(Vec<usize>, BeamSet)>,
        data: &[i8],
        present: &[bool],
        idx: &[u64],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<Vec<u64>>, BackendError> {
        let nb: usize = groups.iter().map(|g| g.0.len()).sum();
        if out.len() != idx.len() * nb {
            return Err(BackendError::ChunkOutputs {
                outputs: out.len(),
                batches: idx.len(),
                beams: nb,
            });
        }
        let mut saturated = vec![vec![0u64; nb]; idx.len()];
        for (beams, sub) in groups {
            let ng = beams.len();
            let per = self.backend.shape().beam_output_len(ng);
            self.flat.resize(idx.len() * per, 0);
            let stats = self
                .backend
                .beamform_batches(data, present, &sub, idx, &mut self.flat)?;
            let each = per / ng.max(1);
            for k in 0..idx.len().min(stats.len()) {
                for (j, &b) in beams.iter().enumerate() {
                    let at = (k * ng + j) * each;
                    let o = &mut out[k * nb + b];
                    o.clear();
                    o.extend_from_slice(&self.flat[at..at + each]);
                }
            }
            scatter_saturated(&mut saturated, &stats, &beams);
        }
        Ok(saturated)
    }

    /// The dither keys of the batches at timestamps `ts` (their batch indices).
    fn batch_indices(&self, ts: &[u64]) -> Vec<u64> {
        ts.iter().map(|&t| t / self.batch_step).collect()
    }

    fn beam_set(&self) -> Result<BeamSet, BackendError> {
        Ok(self
            .set
            .lock()
            .map_err(|_| BackendError::LockPoisoned)?
            .clone())
    }
}

/// Puts each batch's saturation counts of a dither group (`stats[k].saturated[j]`, beam
/// `beams[j]`) at their beams' places in `saturated` (`[batch][beam]`).
fn scatter_saturated(saturated: &mut [Vec<u64>], stats: &[BeamStats], beams: &[usize]) {
    for (sat, st) in saturated.iter_mut().zip(stats) {
        for (j, &b) in beams.iter().enumerate() {
            sat[b] = st.saturated.get(j).copied().unwrap_or(0);
        }
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
        let mut groups = self.groups(&set);
        if groups.len() > 1 {
            let idx = self.batch_indices(ts);
            return self.form_groups(groups, data, present, &idx, out);
        }
        let set = groups.pop().map_or(set, |g| g.1);
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
        let idx = self.batch_indices(ts);
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
        let mut groups = self.groups(&set);
        if groups.len() > 1 {
            let idx = [batch_ts / self.batch_step];
            let mut sat = self.form_groups(groups, batch, present, &idx, out)?;
            return Ok(sat.pop().unwrap_or_default());
        }
        let set = groups.pop().map_or(set, |g| g.1);
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

    fn forms_to_device(&self) -> bool {
        self.backend.beamforms_to_device()
    }

    unsafe fn beamform_chunk_to_device(
        &mut self,
        ts: &[u64],
        data: &[i8],
        present: &[bool],
        dsts: &[u64],
        beam_bytes: usize,
    ) -> Result<Vec<Vec<u64>>, BackendError> {
        let set = self.beam_set()?;
        let nb = set.beams.len();
        if dsts.len() != ts.len() * nb || beam_bytes != self.backend.shape().beam_output_len(1) {
            return Err(BackendError::ChunkOutputs {
                outputs: dsts.len(),
                batches: ts.len(),
                beams: nb,
            });
        }
        let idx = self.batch_indices(ts);
        let mut saturated = vec![vec![0u64; nb]; ts.len()];
        let mut sub = Vec::with_capacity(dsts.len());
        // By dither group (one of every beam unless the per-beam flags differ), each beam
        // written to its own destination.
        for (beams, group) in self.groups(&set) {
            sub.clear();
            for k in 0..ts.len() {
                sub.extend(beams.iter().map(|&b| dsts[k * nb + b]));
            }
            // SAFETY: the caller's guarantee, passed on (a subset of its destinations).
            let stats = unsafe {
                self.backend
                    .beamform_batches_to_device(data, present, &group, &idx, &sub)
            }?;
            scatter_saturated(&mut saturated, &stats, &beams);
        }
        Ok(saturated)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::xengine::Beam;

    /// Two identical beams (same pol, weights, gain) on the CPU reference, over 3 batches
    /// of pseudo-random samples; `dither` the set's flag.
    fn setup(dither: bool) -> (XShape, Arc<Mutex<BeamSet>>, Vec<i8>) {
        let shape = XShape::new(2, 4, 16).unwrap();
        let beam = Beam {
            pol: 0,
            quant_gain: 0.37,
            weights: vec![1.0, 0.7],
            delays: vec![0.0, 1e-10],
            phases: vec![0.0, 0.4],
        };
        let set = BeamSet {
            beams: vec![beam.clone(), beam],
            channel_offset: 0,
            n_channels_total: 4,
            bandwidth: 856e6,
            dither,
            seed: 5,
        };
        let mut x = 1u64;
        let data = (0..3 * shape.batch_bytes())
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (((x >> 33) % 255) as i16 - 127) as i8
            })
            .collect();
        (shape, Arc::new(Mutex::new(set)), data)
    }

    /// Beam outputs `[batch][beam]` of `bf` over the 3 batches, chunked and batch by batch.
    fn form(bf: &mut Beams, shape: XShape, data: &[i8]) -> (Vec<Vec<i8>>, Vec<Vec<i8>>) {
        let ts = [0, 64, 128];
        let present = vec![true; 6];
        let mut chunk = vec![Vec::new(); 6];
        bf.beamform_chunk(&ts, data, &present, &mut chunk).unwrap();
        let bb = shape.batch_bytes();
        let mut single = Vec::new();
        for (k, &t) in ts.iter().enumerate() {
            let mut out = vec![vec![0; shape.beam_output_len(1)]; 2];
            bf.beamform(t, &data[k * bb..(k + 1) * bb], &present[..2], &mut out)
                .unwrap();
            single.extend(out);
        }
        (chunk, single)
    }

    /// `dither=none` on one beam: its output is exactly the undithered quantisation, while
    /// the other beam (identical but for dither) differs from it.
    #[test]
    fn per_beam_dither_leaves_the_other_beams_dithered() {
        let (shape, plain, data) = setup(false);
        let backend = || Box::new(CpuX::new(shape)) as Box<dyn XBackend + Send>;
        let (want, want1) = form(&mut Beams::new(backend(), plain, 64), shape, &data);
        assert_eq!(want, want1);
        let (_, set, _) = setup(true);
        let mut mixed = Beams::new(backend(), set, 64).with_dither(vec![true, false]);
        let (chunk, single) = form(&mut mixed, shape, &data);
        assert_eq!(chunk, single, "chunked and batch-by-batch agree");
        for k in 0..3 {
            assert!(want[2 * k + 1].iter().any(|&v| v != 0));
            assert_eq!(
                chunk[2 * k + 1],
                want[2 * k + 1],
                "batch {k}: beam 1 undithered"
            );
        }
        let differ = (0..3).filter(|k| chunk[2 * k] != want[2 * k]).count();
        assert_eq!(differ, 3, "beam 0 is dithered in every batch");
        // Flags that agree: one call, as the set without flags.
        let (_, set, _) = setup(true);
        let mut none = Beams::new(backend(), set, 64).with_dither(vec![false, false]);
        assert_eq!(form(&mut none, shape, &data).0, want);
    }
}
