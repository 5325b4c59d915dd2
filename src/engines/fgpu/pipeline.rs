//! One F-engine output ([`Pipeline`]): its place on the timeline, batch by batch through
//! its [`Channelizer`], and its heaps (ICD §4.2) to its destinations. Batches touched by
//! missing input, before the first sample or with a delay model that does not evaluate are
//! not sent (counted in [`OutputStats`]).

use std::time::Instant;

use serde::Serialize;
use tracing::warn;

use super::channelizer::{Channelizer, ChannelizerError};
#[cfg(feature = "ibverbs")]
use super::direct::ItemTarget;
use super::spec::WidebandSpec;
use super::store::SampleStore;
use crate::compute::fengine::InputStats;
use crate::engines::common::send_worker::{HeapPart, OutBuf, QueuedSender};
use crate::net::send::heap::HeapSender;
use crate::spead::{ids, Descriptor};

/// Why an output stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The channeliser failed on a batch it had taken.
    #[error(transparent)]
    Channelizer(#[from] ChannelizerError),
    /// Sending a heap failed.
    #[error(transparent)]
    Send(#[from] std::io::Error),
    /// A pipelined channeliser needs packed input that the store does not keep.
    #[error("the sample store keeps no packed input")]
    NoPackedInput,
    /// A batch in flight never completed at the end of the input.
    #[error("a batch in flight did not complete")]
    Incomplete,
}

/// Per-output counters (katgpucbf's `fgpu_output_*`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct OutputStats {
    /// Stream name.
    pub name: String,
    /// Batches sent.
    pub batches: u64,
    /// Heaps sent (one per destination per batch).
    pub heaps: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Heaps not sent because their input was incomplete (lost digitiser heaps).
    pub skipped_heaps: u64,
    /// Heaps not sent because a spectrum's input window would start before the first
    /// available sample (the stream's first, or timestamp 0): a positive delay at the
    /// start of the stream. katgpucbf skips those spectra the same way.
    pub before_input_heaps: u64,
    /// Heaps not sent because the delay model did not evaluate for their batch (see
    /// [`Channelizer::input_range`]).
    pub delay_error_heaps: u64,
    /// Output values that saturated, per input.
    pub clipped_samples: [u64; 2],
    /// Timestamp of the first batch sent.
    pub first_timestamp: Option<u64>,
    /// Timestamp of the latest batch sent.
    pub last_timestamp: Option<u64>,
}

/// Where an output's heaps go: sent by the engine's thread, queued for the send thread, or
/// posted to the NIC from the output items the batches are written into.
pub enum OutputSender {
    /// Sent inline, from the engine's thread.
    Inline(HeapSender),
    /// Queued for the engine's send thread (`--send-affinity`).
    Queued(QueuedSender),
    /// Written into registered output items and sent from there (`--send-ibv`: host items;
    /// `--use-peerdirect`: device items).
    #[cfg(feature = "ibverbs")]
    Direct(Box<super::direct::DirectSender>),
}

#[cfg(feature = "ibverbs")]
impl From<super::direct::DirectSender> for OutputSender {
    fn from(s: super::direct::DirectSender) -> Self {
        OutputSender::Direct(Box::new(s))
    }
}

impl From<HeapSender> for OutputSender {
    fn from(s: HeapSender) -> Self {
        OutputSender::Inline(s)
    }
}

impl From<QueuedSender> for OutputSender {
    fn from(s: QueuedSender) -> Self {
        OutputSender::Queued(s)
    }
}

/// One output stream: its channeliser, its sender and its place on the timeline.
pub struct Pipeline {
    /// The output.
    pub spec: WidebandSpec,
    chan: Box<dyn Channelizer>,
    sender: OutputSender,
    feng_id: u64,
    next_ts: Option<u64>,
    /// The store's timeline restarts seen ([`SampleStore::restarts`]).
    restarts: u64,
    /// The first input sample of the stream (set with the first batch): batches whose
    /// input would start before it are skipped.
    first_sample: u64,
    /// Whether a batch skipped for input before `first_sample` has been logged.
    logged_before_input: bool,
    /// Whether a batch dropped because its delay model did not evaluate has been logged.
    logged_delay_error: bool,
    out: Vec<u8>,
    /// Bytes of a batch's output.
    out_len: usize,
    /// Per pol: where a batch's packed input across chunks is joined.
    join: [Vec<u8>; 2],
    /// Counters.
    pub stats: OutputStats,
    /// Digitiser statistics reported by completed batches, not yet taken.
    dig: Option<[InputStats; 2]>,
    /// Time spent per stage (on the main thread).
    stages: PipeStages,
}

crate::stage_set! {
    /// A pipeline's stages on the main thread (`fgpu_thread_stage_seconds_total`).
    struct PipeStages("main") {
        /// Slicing (or joining) the packed input and queueing the batch on the GPU.
        submit = "submit",
        /// Taking the oldest batch in flight when the GPU's queue is full: waiting for it
        /// (and copying it out where the channeliser does not lend its output).
        wait_gpu = "wait_gpu",
        /// Taking batches that had already finished.
        complete = "complete",
        /// Handing a batch to the send thread (waiting while its queue is full).
        send_queue = "send_queue",
        /// Getting an output buffer (allocating one when the send thread has none back).
        buffer = "buffer",
    }
}

impl Pipeline {
    /// The output `spec` of F-engine `feng_id`, channelised by `chan` and sent through
    /// `sender`; `bytes_per_value` is 2 for 8-bit output, 1 for 4-bit.
    pub fn new(
        spec: WidebandSpec,
        chan: Box<dyn Channelizer>,
        sender: impl Into<OutputSender>,
        feng_id: u64,
        bytes_per_value: usize,
    ) -> Self {
        let out_len = spec.channels * spec.spectra_per_heap() * 2 * bytes_per_value;
        let out = vec![0u8; out_len];
        let stats = OutputStats {
            name: spec.name.clone(),
            ..Default::default()
        };
        Pipeline {
            spec,
            chan,
            sender: sender.into(),
            feng_id,
            next_ts: None,
            restarts: 0,
            first_sample: 0,
            logged_before_input: false,
            logged_delay_error: false,
            out,
            out_len,
            join: [Vec::new(), Vec::new()],
            stats,
            dig: None,
            stages: PipeStages::new(),
        }
    }

    /// True if this output takes packed input (a pipelined channeliser).
    pub fn takes_packed(&self) -> bool {
        self.chan.pipelined()
    }

    /// Digitiser statistics its completed batches measured since the last call.
    pub fn take_dig_stats(&mut self) -> Option<[InputStats; 2]> {
        self.dig.take()
    }

    /// Sends the batch at `ts` (in `buf`, which comes back to `self.out` when sent inline)
    /// to its destinations and counts it.
    fn send_batch(&mut self, ts: u64, clipped: [u64; 2], buf: OutBuf) -> Result<(), PipelineError> {
        self.stats.clipped_samples[0] += clipped[0];
        self.stats.clipped_samples[1] += clipped[1];
        let n_dst = self.spec.dst.len();
        let cps = self.spec.channels_per_substream();
        let len = buf.bytes()?.len();
        let per_dst = len / n_dst;
        let bytes = len as u64;
        let items = |d: usize| {
            [
                (ids::TIMESTAMP, ts),
                (ids::FENG_ID, self.feng_id),
                (ids::FREQUENCY, (d * cps) as u64),
            ]
        };
        match &mut self.sender {
            OutputSender::Inline(sender) => {
                let all = buf.bytes()?;
                let r = (0..n_dst).try_for_each(|d| {
                    let payload = &all[d * per_dst..(d + 1) * per_dst];
                    sender.send_heap(d, &items(d), ids::FENG_RAW, payload)
                });
                if let OutBuf::Owned(v) = buf {
                    self.out = v;
                }
                r?;
            }
            OutputSender::Queued(q) => {
                let heaps = (0..n_dst)
                    .map(|d| HeapPart {
                        dst: d,
                        items: items(d).to_vec(),
                        payload: d * per_dst..(d + 1) * per_dst,
                    })
                    .collect();
                let t = Instant::now();
                let r = q.send(ids::FENG_RAW, heaps, buf);
                self.stages.send_queue.since(t);
                r?;
            }
            #[cfg(feature = "ibverbs")]
            OutputSender::Direct(_) => {
                return Err(std::io::Error::other(
                    "an output sent from its items was given a staged batch",
                )
                .into())
            }
        }
        self.count_batch(ts, bytes);
        Ok(())
    }

    /// Counts a batch sent.
    fn count_batch(&mut self, ts: u64, bytes: u64) {
        self.stats.batches += 1;
        self.stats.heaps += self.spec.dst.len() as u64;
        self.stats.bytes += bytes;
        self.stats.first_timestamp.get_or_insert(ts);
        self.stats.last_timestamp = Some(ts);
    }

    /// [`Self::complete_one`] for an output sent from its items: the oldest batch is
    /// written into a free item and posted; the item is given back if none is done.
    #[cfg(feature = "ibverbs")]
    fn complete_direct(&mut self, wait: bool) -> Result<bool, PipelineError> {
        let OutputSender::Direct(d) = &mut self.sender else {
            return Ok(false);
        };
        let (item, target) = d.acquire()?;
        let t = Instant::now();
        let c = match target {
            ItemTarget::Host(out) => self.chan.complete(out, wait),
            // SAFETY: the item is acquired (free of the NIC, and written only here) and lies
            // in the sender's device memory, which lives as long as the sender.
            ItemTarget::Device { addr, len } => unsafe {
                self.chan.complete_to_device(addr, len, wait)
            },
        };
        match wait {
            true => self.stages.wait_gpu.since(t),
            false => self.stages.complete.since(t),
        };
        let c = match c {
            Ok(Some(c)) => c,
            other => {
                d.release(item);
                return Ok(other?.is_some());
            }
        };
        d.send(item, c.batch_ts)?;
        self.add_dig_stats(c.input);
        self.stats.clipped_samples[0] += c.clipped[0];
        self.stats.clipped_samples[1] += c.clipped[1];
        self.count_batch(c.batch_ts, self.out_len as u64);
        Ok(true)
    }

    /// [`Self::run_ready`]'s unpipelined batch for an output sent from its items: made
    /// straight into a free item and posted.
    #[cfg(feature = "ibverbs")]
    fn process_direct(&mut self, ts: u64, input: [&[i16]; 2]) -> Result<(), PipelineError> {
        let OutputSender::Direct(d) = &mut self.sender else {
            return Ok(());
        };
        let (item, target) = d.acquire()?;
        let ItemTarget::Host(out) = target else {
            // Device items go with a pipelined channeliser only (run.rs checks).
            d.release(item);
            return Err(ChannelizerError::HostOutput.into());
        };
        let clipped = match self.chan.process(ts, input, out) {
            Ok(c) => c,
            Err(e) => {
                d.release(item);
                return Err(e.into());
            }
        };
        d.send(item, ts)?;
        self.stats.clipped_samples[0] += clipped[0];
        self.stats.clipped_samples[1] += clipped[1];
        self.count_batch(ts, self.out_len as u64);
        Ok(())
    }

    /// True if the output is sent from its items.
    #[cfg(feature = "ibverbs")]
    fn direct(&self) -> bool {
        matches!(self.sender, OutputSender::Direct(_))
    }

    /// A buffer for the next batch's output: the one held (the inline buffer, or the spare
    /// kept when a completion was not ready), else one from the send thread.
    fn take_buffer(&mut self) -> Vec<u8> {
        match &self.sender {
            OutputSender::Queued(q) if self.out.len() != self.out_len => {
                self.stages.buffer.time(|| q.buffer(self.out_len))
            }
            _ => std::mem::take(&mut self.out),
        }
    }

    /// Sends the oldest in-flight batch if it is done (`wait`: waiting for it); false if
    /// none was sent.
    fn complete_one(&mut self, wait: bool) -> Result<bool, PipelineError> {
        #[cfg(feature = "ibverbs")]
        if self.direct() {
            return self.complete_direct(wait);
        }
        let (c, buf) = if self.chan.lends_output() {
            // Sent from where the channeliser left it: no copy.
            let t = Instant::now();
            let c = self.chan.complete_lent(wait);
            self.time_completion(wait, t);
            match c? {
                Some((c, lent)) => (c, OutBuf::Lent(lent)),
                None => return Ok(false),
            }
        } else {
            let mut buf = self.take_buffer();
            let t = Instant::now();
            let c = self.chan.complete(&mut buf, wait);
            self.time_completion(wait, t);
            match c {
                Ok(Some(c)) => (c, OutBuf::Owned(buf)),
                other => {
                    self.out = buf;
                    return Ok(other?.is_some());
                }
            }
        };
        self.add_dig_stats(c.input);
        self.send_batch(c.batch_ts, c.clipped, buf)?;
        Ok(true)
    }

    fn time_completion(&self, wait: bool, t: Instant) {
        match wait {
            true => self.stages.wait_gpu.since(t),
            false => self.stages.complete.since(t),
        };
    }

    /// Adds a completed batch's digitiser statistics to those not yet taken.
    fn add_dig_stats(&mut self, input: Option<[InputStats; 2]>) {
        if let Some(st) = input {
            let acc = self.dig.get_or_insert(st.map(|s| InputStats {
                sum_sq: 0,
                samples: 0,
                clipped: 0,
                bits: s.bits,
            }));
            for p in 0..2 {
                acc[p].sum_sq += st[p].sum_sq;
                acc[p].samples += st[p].samples;
                acc[p].clipped += st[p].clipped;
            }
        }
    }

    /// Timestamp of the next batch to process (once known).
    pub fn next_batch(&self) -> Option<u64> {
        self.next_ts
    }

    /// Earliest sample this pipeline still needs; `None` when its next batch has no input
    /// range (it keeps whatever the store holds until that batch is settled).
    pub fn needed_from(&self) -> Option<u64> {
        let r = self.chan.input_range(self.next_ts?).ok()??;
        Some(r[0].0.min(r[1].0))
    }

    /// Counts (and logs, the first time) the batch at `ts`, not made because its delay
    /// model did not evaluate.
    fn drop_delay_error(&mut self, ts: u64, error: &ChannelizerError) {
        self.stats.delay_error_heaps += self.spec.dst.len() as u64;
        if !self.logged_delay_error {
            self.logged_delay_error = true;
            warn!(
                output = %self.spec.name,
                batch_timestamp = ts,
                %error,
                "the delay model does not evaluate for this batch: such batches are not sent \
                 (counted in delay_error_heaps; logged once)"
            );
        }
    }

    /// Counts (and logs, the first time) the batch at `ts`, not made because its input
    /// would start before the first available sample.
    fn skip_before_input(&mut self, ts: u64, ranges: Option<[(u64, u64); 2]>) {
        self.stats.before_input_heaps += self.spec.dst.len() as u64;
        if !self.logged_before_input {
            self.logged_before_input = true;
            let needed = ranges.map(|r| r[0].0.min(r[1].0));
            warn!(
                output = %self.spec.name,
                batch_timestamp = ts,
                needed_from = ?needed,
                first_sample = self.first_sample,
                "the delay makes this batch need input from before the first available sample: \
                 such batches are not sent (counted in before_input_heaps; logged once)"
            );
        }
    }

    /// Processes every batch whose input is in the store.
    pub fn run_ready(&mut self, store: &SampleStore) -> Result<(), PipelineError> {
        let step = self.spec.batch_step();
        let n_dst = self.spec.dst.len() as u64;
        // Batches are made inside the received span only: none from the unfilled head of the
        // first chunk, and a batch reaching past the latest heap waits for more input.
        let Some((first, received_end)) = store.received_span() else {
            return Ok(());
        };
        if self.restarts != store.restarts {
            // The input timeline restarted: the output grid starts again from the new
            // timeline (in O(1), however far the input moved).
            self.restarts = store.restarts;
            self.next_ts = None;
        }
        if self.next_ts.is_none() {
            // The output grid starts at the first aligned batch at or after the first
            // sample; those of its batches whose input would start before that sample
            // (a positive delay) are skipped below, one by one, and counted.
            let from = store.base_ts.max(first);
            self.first_sample = from;
            self.next_ts = Some(from.div_ceil(step) * step);
        }
        let end = received_end.min(store.end_ts());
        loop {
            let ts = self.next_ts.unwrap_or(0);
            let ranges = match self.chan.input_range(ts) {
                Ok(Some(r)) if r.iter().all(|r| r.0 >= self.first_sample) => r,
                other => {
                    if ts >= end {
                        // Not past the input received (a delay model growing without
                        // bound, or one that never evaluates, would otherwise keep this
                        // loop going).
                        while self.complete_one(false)? {}
                        return Ok(());
                    }
                    self.next_ts = Some(ts + step);
                    match other {
                        Err(e) => self.drop_delay_error(ts, &e),
                        Ok(r) => self.skip_before_input(ts, r),
                    }
                    continue;
                }
            };
            if ranges.iter().any(|r| r.1 > end) {
                // Send whatever has finished meanwhile.
                while self.complete_one(false)? {}
                return Ok(());
            }
            self.next_ts = Some(ts + step);
            let ok = (0..2).all(|p| store.all_present(p, ranges[p].0, ranges[p].1));
            if !ok {
                self.stats.skipped_heaps += n_dst;
                continue;
            }
            let len = [0, 1].map(|p| (ranges[p].1 - ranges[p].0) as usize);
            if self.chan.pipelined() {
                // Packed input straight to the channeliser; wait for the oldest batch only
                // when as many as it holds are in flight.
                while self.chan.in_flight() >= self.chan.depth() {
                    if !self.complete_one(true)? {
                        break;
                    }
                }
                let t = Instant::now();
                let align = self.chan.packed_align();
                let [j0, j1] = &mut self.join;
                let (d0, s0) = store
                    .packed_slice(0, ranges[0].0, len[0], align, j0)
                    .ok_or(PipelineError::NoPackedInput)?;
                let (d1, s1) = store
                    .packed_slice(1, ranges[1].0, len[1], align, j1)
                    .ok_or(PipelineError::NoPackedInput)?;
                let r = self.chan.submit_packed(ts, [d0, d1], [s0, s1]);
                self.stages.submit.since(t);
                r?;
                continue;
            }
            let input = [
                store.slice(0, ranges[0].0, len[0]),
                store.slice(1, ranges[1].0, len[1]),
            ];
            #[cfg(feature = "ibverbs")]
            if self.direct() {
                self.process_direct(ts, input)?;
                continue;
            }
            let mut buf = self.take_buffer();
            let clipped = match self.chan.process(ts, input, &mut buf) {
                Ok(c) => c,
                Err(e) => {
                    self.out = buf;
                    return Err(e.into());
                }
            };
            self.send_batch(ts, clipped, OutBuf::Owned(buf))?;
        }
    }

    /// Waits until no batch in flight still reads its packed input from host memory (the
    /// store's chunks): after this the chunks released so far may be reused.
    pub fn fence_input(&mut self) -> Result<(), PipelineError> {
        Ok(self.chan.fence_input()?)
    }

    /// Sends every batch still in flight, then flushes the sender.
    pub fn finish(&mut self) -> Result<(), PipelineError> {
        while self.chan.in_flight() > 0 {
            if !self.complete_one(true)? {
                return Err(PipelineError::Incomplete);
            }
        }
        match &mut self.sender {
            OutputSender::Inline(s) => s.flush()?,
            OutputSender::Queued(q) => q.flush()?,
            #[cfg(feature = "ibverbs")]
            OutputSender::Direct(d) => d.flush()?,
        }
        Ok(())
    }
}

/// True if `e` (one link of an error's chain) is a failed compute call: the channeliser's
/// error, bare or as the pipeline's.
pub fn is_compute_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<ChannelizerError>().is_some()
        || matches!(
            e.downcast_ref::<PipelineError>(),
            Some(PipelineError::Channelizer(_))
        )
}

/// Descriptors of an F-engine output stream.
pub fn descriptors(cps: usize, spectra_per_heap: usize, sample_bits: u32) -> Vec<Descriptor> {
    let u48 = [('u', 48)];
    let raw = if sample_bits == 4 {
        Descriptor::with_format(
            ids::FENG_RAW,
            "feng_raw",
            "Channelised complex data (4-bit, real in the high nibble).",
            &[cps as u64, spectra_per_heap as u64, 2],
            &[('i', 4), ('i', 4)],
        )
    } else {
        Descriptor::with_dtype(
            ids::FENG_RAW,
            "feng_raw",
            "Channelised complex data.",
            &[cps as u64, spectra_per_heap as u64, 2, 2],
            "|i1",
        )
    };
    vec![
        Descriptor::with_format(ids::TIMESTAMP, "timestamp", "Timestamp provided by the MeerKAT digitisers and scaled to the digitiser sampling rate.", &[], &u48),
        Descriptor::with_format(ids::FENG_ID, "feng_id", "Uniquely identifies the F-engine source for the data.", &[], &u48),
        Descriptor::with_format(ids::FREQUENCY, "frequency", "Identifies the first channel in the band of frequencies in the SPEAD heap.", &[], &u48),
        raw,
    ]
}
