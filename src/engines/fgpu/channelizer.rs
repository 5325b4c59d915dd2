//! The seam between the F-engine and its compute: [`Channelizer`] (one output's batches,
//! decoded or packed input, in flight or not), what a finished batch reports
//! ([`Completed`]) and why a batch cannot be made ([`ChannelizerError`]).

use crate::compute::fengine::{FError, InputStats};
use crate::mem::Lent;

/// Why a channeliser cannot make a batch.
#[derive(Debug, thiserror::Error)]
pub enum ChannelizerError {
    /// The compute backend refused the batch (or its delay model does not evaluate).
    #[error(transparent)]
    Compute(#[from] FError),
    /// The output's controls were poisoned by a panic elsewhere.
    #[error("control lock poisoned")]
    LockPoisoned,
    /// The batch's input would start before timestamp 0 (a positive delay).
    #[error("the batch at {0} needs input from before timestamp 0 (delay): it cannot be made")]
    BeforeInput(u64),
    /// No delay segment covers a block of the batch.
    #[error("no delay segment")]
    NoDelaySegment,
    /// A block's input would start before the batch's input range.
    #[error("input offset before the batch's input range")]
    OffsetBeforeRange,
    /// As many batches as the channeliser holds are already in flight.
    #[error("{0} batches already in flight: complete one first")]
    Full(usize),
    /// A batch was to complete that was never computed.
    #[error("no computed batch")]
    NoComputedBatch,
    /// The output buffer does not have the batch's size.
    #[error("output of {out} bytes for {batch}")]
    OutputLength {
        /// Bytes of the buffer given.
        out: usize,
        /// Bytes of the batch.
        batch: usize,
    },
    /// The compute call failed because a test asked it to (`--debug-fail-compute-after`),
    /// standing for a GPU call that fails.
    #[error("the compute call for the batch at {batch_ts} failed (fault injected by --debug-fail-compute-after {after})")]
    Injected {
        /// The batch's timestamp.
        batch_ts: u64,
        /// Batches computed before the fault.
        after: u64,
    },
    /// Packed input given to a channeliser that takes decoded samples.
    #[error("this channeliser takes decoded input (process)")]
    DecodedOnly,
    /// A batch was to be completed into device memory by a channeliser whose batches are in
    /// host memory.
    #[error("this channeliser's batches are not in device memory")]
    HostOutput,
}

/// A channeliser backend for one output: the compute behind the engine.
pub trait Channelizer: Send {
    /// Input samples [start, end) each polarisation needs for the batch at `batch_ts`
    /// (PFB footprint and coarse delay included); `None` when some spectrum's window would
    /// start before timestamp 0 (a positive delay near the start of the timeline): the
    /// batch cannot be made, and the engine skips it ([`OutputStats::before_input_heaps`](super::OutputStats::before_input_heaps)).
    /// `Err` when the batch's controls do not evaluate (a delay model that gives no finite
    /// delay there): the batch cannot be made either, and the engine drops it
    /// ([`OutputStats::delay_error_heaps`](super::OutputStats::delay_error_heaps)) and goes on with the next one.
    fn input_range(&self, batch_ts: u64) -> Result<Option<[(u64, u64); 2]>, ChannelizerError>;
    /// Channelises one batch. `input[p]` holds pol `p`'s samples over `input_range`.
    /// Writes the batch as (channel, spectrum, pol, re/im) bytes into `out` and returns the
    /// clipped output values per pol.
    fn process(
        &mut self,
        batch_ts: u64,
        input: [&[i16]; 2],
        out: &mut [u8],
    ) -> Result<[u64; 2], ChannelizerError>;

    /// True if batches go through [`Self::submit_packed`] and [`Self::complete`] (packed
    /// input, several batches in flight) instead of [`Self::process`].
    fn pipelined(&self) -> bool {
        false
    }

    /// Batches that may be in flight at once.
    fn depth(&self) -> usize {
        1
    }

    /// What [`Self::submit_packed`]'s input must start on: a multiple of this many samples
    /// (a multiple of 8, so on a byte boundary) into the store.
    fn packed_align(&self) -> usize {
        8
    }

    /// Batches submitted and not yet completed.
    fn in_flight(&self) -> usize {
        0
    }

    /// Queues the batch at `batch_ts`: `input[p]` holds pol p's packed samples (the
    /// digitiser's width) over `input_range`, starting `skip[p]` samples before the range.
    /// Input in page-locked (CUDA-registered) host memory may be read by the device after
    /// this returns: the caller keeps it unchanged until [`Self::fence_input`]; other input
    /// is copied before this returns.
    fn submit_packed(
        &mut self,
        _batch_ts: u64,
        _input: [&[u8]; 2],
        _skip: [usize; 2],
    ) -> Result<(), ChannelizerError> {
        Err(ChannelizerError::DecodedOnly)
    }

    /// Waits until no submitted batch still reads input from host memory.
    fn fence_input(&mut self) -> Result<(), ChannelizerError> {
        Ok(())
    }

    /// The oldest submitted batch, written to `out` as [`Self::process`] writes it, once it
    /// is done (`wait`: wait for it); `None` while it is not, or when none is in flight.
    fn complete(
        &mut self,
        _out: &mut [u8],
        _wait: bool,
    ) -> Result<Option<Completed>, ChannelizerError> {
        Ok(None)
    }

    /// True if [`Self::complete_lent`] lends outputs (then the engine sends from them).
    fn lends_output(&self) -> bool {
        false
    }

    /// [`Self::complete`] without the copy: the batch's bytes stay where the channeliser
    /// put them, lent until dropped.
    fn complete_lent(
        &mut self,
        _wait: bool,
    ) -> Result<Option<(Completed, Lent)>, ChannelizerError> {
        Ok(None)
    }

    /// Keeps the batches submitted from now on in device memory (`on`) for
    /// [`Self::complete_to_device`], or brings them to the host again. False, with nothing
    /// changed, where the channeliser cannot (it computes on the CPU, or batches are in
    /// flight).
    fn set_device_output(&mut self, _on: bool) -> bool {
        false
    }

    /// [`Self::complete`] for batches kept in device memory: the oldest one, once done
    /// (`wait`: wait for it), is copied to the `len` bytes of device memory at `dst` (the
    /// copy finished when this returns).
    ///
    /// # Safety
    /// `dst..dst + len` must be device memory of the channeliser's context (or whatever
    /// memory a test channeliser writes) that nothing else reads or writes until this
    /// returns.
    unsafe fn complete_to_device(
        &mut self,
        _dst: u64,
        _len: usize,
        _wait: bool,
    ) -> Result<Option<Completed>, ChannelizerError> {
        Err(ChannelizerError::HostOutput)
    }
}

/// A batch finished by a pipelined channeliser.
#[derive(Debug, Clone, Copy)]
pub struct Completed {
    /// Timestamp of the batch.
    pub batch_ts: u64,
    /// Clipped output values per pol.
    pub clipped: [u64; 2],
    /// Digitiser statistics over the batch's input (wideband GPU), if measured.
    pub input: Option<[InputStats; 2]>,
}
