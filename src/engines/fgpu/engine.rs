//! The F-engine: receive digitiser heaps into chunks (own thread), decode onto a common
//! timeline, channelise batch by batch through a [`Channelizer`] backend, send F-engine
//! heaps (ICD §4.2). Batches touched by missing input are not sent (counted).

use std::path::Path;

use serde::Serialize;
use tracing::{info, warn};

use super::config::WidebandSpec;
use super::store::SampleStore;
use crate::chunk::placement::DigitiserPlacement;
use crate::chunk::Chunk;
use crate::engines::common::recv::{open_source_with, RecvOptions};
use crate::engines::common::send::open_sink;
use crate::net::recv::PacketSource;
use crate::net::send::heap::HeapSender;
use crate::spead::{ids, Descriptor};

/// A channeliser backend for one output: the compute behind the engine.
pub trait Channelizer: Send {
    /// Input samples [start, end) each polarisation needs for the batch at `batch_ts`
    /// (PFB footprint and coarse delay included); `None` when some spectrum's window would
    /// start before timestamp 0 (a positive delay near the start of the timeline): the
    /// batch cannot be made, and the engine skips it ([`OutputStats::before_input_heaps`]).
    /// `Err` when the batch's controls do not evaluate (a delay model that gives no finite
    /// delay there): the batch cannot be made either, and the engine drops it
    /// ([`OutputStats::delay_error_heaps`]) and goes on with the next one.
    fn input_range(&self, batch_ts: u64) -> Result<Option<[(u64, u64); 2]>, String>;
    /// Channelises one batch. `input[p]` holds pol `p`'s samples over `input_range`.
    /// Writes the batch as (channel, spectrum, pol, re/im) bytes into `out` and returns the
    /// clipped output values per pol.
    fn process(
        &mut self,
        batch_ts: u64,
        input: [&[i16]; 2],
        out: &mut [u8],
    ) -> Result<[u64; 2], String>;

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
    fn submit_packed(
        &mut self,
        _batch_ts: u64,
        _input: [&[u8]; 2],
        _skip: [usize; 2],
    ) -> Result<(), String> {
        Err("this channeliser takes decoded input (process)".into())
    }

    /// The oldest submitted batch, written to `out` as [`Self::process`] writes it, once it
    /// is done (`wait`: wait for it); `None` while it is not, or when none is in flight.
    fn complete(&mut self, _out: &mut [u8], _wait: bool) -> Result<Option<Completed>, String> {
        Ok(None)
    }
}

/// A batch finished by a pipelined channeliser.
#[derive(Debug, Clone, Copy)]
pub struct Completed {
    pub batch_ts: u64,
    /// Clipped output values per pol.
    pub clipped: [u64; 2],
    /// Digitiser statistics over the batch's input (wideband GPU), if measured.
    pub input: Option<[crate::compute::fengine::InputStats; 2]>,
}

/// Per-output counters (katgpucbf's `fgpu_output_*`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct OutputStats {
    pub name: String,
    pub batches: u64,
    pub heaps: u64,
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
    pub clipped_samples: [u64; 2],
    pub first_timestamp: Option<u64>,
    pub last_timestamp: Option<u64>,
}

/// One output stream: its channeliser, its sender and its place on the timeline.
pub struct Pipeline {
    pub spec: WidebandSpec,
    chan: Box<dyn Channelizer>,
    sender: HeapSender,
    feng_id: u64,
    next_ts: Option<u64>,
    /// The first input sample of the stream (set with the first batch): batches whose
    /// input would start before it are skipped.
    first_sample: u64,
    /// Whether a batch skipped for input before `first_sample` has been logged.
    logged_before_input: bool,
    /// Whether a batch dropped because its delay model did not evaluate has been logged.
    logged_delay_error: bool,
    out: Vec<u8>,
    pub stats: OutputStats,
    /// Digitiser statistics reported by completed batches, not yet taken.
    dig: Option<[crate::compute::fengine::InputStats; 2]>,
}

impl Pipeline {
    pub fn new(
        spec: WidebandSpec,
        chan: Box<dyn Channelizer>,
        sender: HeapSender,
        feng_id: u64,
        bytes_per_value: usize,
    ) -> Self {
        let out = vec![0u8; spec.channels * spec.spectra_per_heap() * 2 * bytes_per_value];
        let stats = OutputStats {
            name: spec.name.clone(),
            ..Default::default()
        };
        Pipeline {
            spec,
            chan,
            sender,
            feng_id,
            next_ts: None,
            first_sample: 0,
            logged_before_input: false,
            logged_delay_error: false,
            out,
            stats,
            dig: None,
        }
    }

    /// True if this output takes packed input (a pipelined channeliser).
    pub fn takes_packed(&self) -> bool {
        self.chan.pipelined()
    }

    /// Digitiser statistics its completed batches measured since the last call.
    pub fn take_dig_stats(&mut self) -> Option<[crate::compute::fengine::InputStats; 2]> {
        self.dig.take()
    }

    /// Sends the batch at `ts` (in `self.out`) to its destinations and counts it.
    fn send_batch(&mut self, ts: u64, clipped: [u64; 2]) -> anyhow::Result<()> {
        self.stats.clipped_samples[0] += clipped[0];
        self.stats.clipped_samples[1] += clipped[1];
        let n_dst = self.spec.dst.len() as u64;
        let cps = self.spec.channels_per_substream();
        let per_dst = self.out.len() / self.spec.dst.len();
        for d in 0..self.spec.dst.len() {
            let items = [
                (ids::TIMESTAMP, ts),
                (ids::FENG_ID, self.feng_id),
                (ids::FREQUENCY, (d * cps) as u64),
            ];
            self.sender.send_heap(
                d,
                &items,
                ids::FENG_RAW,
                &self.out[d * per_dst..(d + 1) * per_dst],
            )?;
        }
        self.stats.batches += 1;
        self.stats.heaps += n_dst;
        self.stats.bytes += self.out.len() as u64;
        self.stats.first_timestamp.get_or_insert(ts);
        self.stats.last_timestamp = Some(ts);
        Ok(())
    }

    /// Sends the oldest in-flight batch if it is done (`wait`: waiting for it); false if
    /// none was sent.
    fn complete_one(&mut self, wait: bool) -> anyhow::Result<bool> {
        let Some(c) = self
            .chan
            .complete(&mut self.out, wait)
            .map_err(anyhow::Error::msg)?
        else {
            return Ok(false);
        };
        if let Some(st) = c.input {
            let acc = self
                .dig
                .get_or_insert(st.map(|s| crate::compute::fengine::InputStats {
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
        self.send_batch(c.batch_ts, c.clipped)?;
        Ok(true)
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
    fn drop_delay_error(&mut self, ts: u64, error: &str) {
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
    pub fn run_ready(&mut self, store: &SampleStore) -> anyhow::Result<()> {
        let step = self.spec.batch_step();
        let n_dst = self.spec.dst.len() as u64;
        // Batches are made inside the received span only: none from the unfilled head of the
        // first chunk, and a batch reaching past the latest heap waits for more input.
        let Some((first, received_end)) = store.received_span() else {
            return Ok(());
        };
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
                let mut input: [&[u8]; 2] = [&[], &[]];
                let mut skip = [0usize; 2];
                for p in 0..2 {
                    let align = self.chan.packed_align();
                    let (d, s) = store
                        .packed_slice(p, ranges[p].0, len[p], align)
                        .ok_or_else(|| anyhow::anyhow!("the sample store keeps no packed input"))?;
                    input[p] = d;
                    skip[p] = s;
                }
                self.chan
                    .submit_packed(ts, input, skip)
                    .map_err(anyhow::Error::msg)?;
                continue;
            }
            let input = [
                store.slice(0, ranges[0].0, len[0]),
                store.slice(1, ranges[1].0, len[1]),
            ];
            let clipped = self
                .chan
                .process(ts, input, &mut self.out)
                .map_err(anyhow::Error::msg)?;
            self.send_batch(ts, clipped)?;
        }
    }

    /// Sends every batch still in flight, then flushes the sender.
    pub fn finish(&mut self) -> anyhow::Result<()> {
        while self.chan.in_flight() > 0 {
            if !self.complete_one(true)? {
                anyhow::bail!("a batch in flight did not complete");
            }
        }
        self.sender.flush()?;
        Ok(())
    }
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

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct FgpuSummary {
    pub input_heaps: [u64; 2],
    pub input_missing_heaps: [u64; 2],
    pub input_clipped_samples: [u64; 2],
    pub input_rms_dbfs: [f64; 2],
    pub recv_rejected: std::collections::BTreeMap<String, u64>,
    pub outputs: Vec<OutputStats>,
}

/// Drives the engine until the input ends (pcap) or a stop is requested.
pub fn run_pipelines(
    src: Box<dyn PacketSource>,
    placement: DigitiserPlacement,
    pipelines: Vec<Pipeline>,
    bits: u32,
    hook: &mut dyn FnMut(&SampleStore, &[Pipeline]),
) -> anyhow::Result<FgpuSummary> {
    run_pipelines_monitored(src, placement, pipelines, bits, hook, Box::new(|_, _| {}))
}

/// [`run_pipelines`] with a receive-thread monitor (live receive metrics).
pub fn run_pipelines_monitored(
    src: Box<dyn PacketSource>,
    placement: DigitiserPlacement,
    mut pipelines: Vec<Pipeline>,
    bits: u32,
    hook: &mut dyn FnMut(&SampleStore, &[Pipeline]),
    monitor: crate::chunk::RecvMonitor,
) -> anyhow::Result<FgpuSummary> {
    let (tx, rx) = crossbeam_channel::bounded::<Chunk>(4);
    let (back_tx, back_rx) = crossbeam_channel::bounded::<Chunk>(8);
    let receiver = crate::engines::common::recv::spawn_receiver_monitored(
        src,
        placement.clone(),
        tx,
        back_rx,
        monitor,
    );
    // Pipelined (GPU) outputs take the packed samples as received; the store decodes only
    // for the others, or to count the digitiser statistics when no wideband output
    // measures them on the GPU.
    let packed = pipelines.iter().any(|p| p.takes_packed());
    let stats_from = pipelines
        .iter()
        .position(|p| p.takes_packed() && p.spec.narrowband.is_none());
    let decode = pipelines.iter().any(|p| !p.takes_packed()) || stats_from.is_none();
    let mut store = SampleStore::with_forms(placement.heap_samples, bits, decode, packed);
    let max_gap = 4 * placement.chunk_samples;
    for chunk in rx.iter() {
        store.append(&chunk, &placement, max_gap);
        let _ = back_tx.try_send(chunk);
        for p in pipelines.iter_mut() {
            p.run_ready(&store)?;
        }
        if let (false, Some(i)) = (decode, stats_from) {
            if let Some(st) = pipelines[i].take_dig_stats() {
                for (p, s) in st.iter().enumerate() {
                    store.add_dig_stats(p, s.sum_sq, s.clipped, s.samples);
                }
            }
        }
        if let Some(keep) = pipelines.iter().filter_map(|p| p.needed_from()).min() {
            store.trim_before(keep);
        }
        hook(&store, &pipelines);
    }
    let recv_stats = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receive thread panicked"))??;
    for p in pipelines.iter_mut() {
        p.finish()?;
    }
    if let (false, Some(i)) = (decode, stats_from) {
        if let Some(st) = pipelines[i].take_dig_stats() {
            for (p, s) in st.iter().enumerate() {
                store.add_dig_stats(p, s.sum_sq, s.clipped, s.samples);
            }
        }
    }
    let mut rejected = std::collections::BTreeMap::new();
    for r in crate::chunk::Reject::ALL {
        let n = recv_stats.rejected(r);
        if n > 0 {
            rejected.insert(r.name().to_string(), n);
        }
    }
    let s = &store.stats;
    let summary = FgpuSummary {
        input_heaps: s.heaps,
        input_missing_heaps: s.missing_heaps,
        input_clipped_samples: s.clipped_samples,
        input_rms_dbfs: [s.rms_dbfs(0, bits), s.rms_dbfs(1, bits)],
        recv_rejected: rejected,
        outputs: pipelines.iter().map(|p| p.stats.clone()).collect(),
    };
    if summary.outputs.iter().any(|o| o.skipped_heaps > 0) {
        warn!("some output heaps were skipped because their input was incomplete");
    }
    info!(?summary, "fgpu finished");
    Ok(summary)
}

/// `gpucbf fgpu`: builds the outputs from the command line and runs the engine.
pub fn run(args: &super::FgpuArgs) -> anyhow::Result<FgpuSummary> {
    crate::control::shutdown::install();
    if !(args.adc_sample_rate.is_finite() && args.adc_sample_rate > 0.0) {
        anyhow::bail!("--adc-sample-rate must be positive");
    }
    if !(2..=16).contains(&args.dig_sample_bits) {
        anyhow::bail!(
            "--dig-sample-bits {} is not supported (2..=16)",
            args.dig_sample_bits
        );
    }
    if args.send_sample_bits != 8 && args.send_sample_bits != 4 {
        anyhow::bail!("--send-sample-bits must be 8 or 4");
    }
    if args.array_size == 0 || args.feng_id >= args.array_size {
        anyhow::bail!("--feng-id must be below --array-size");
    }
    if !(args.send_rate_factor.is_finite() && args.send_rate_factor >= 0.0) {
        anyhow::bail!("--send-rate-factor must be ≥ 0");
    }
    let mut specs = Vec::new();
    for w in &args.wideband {
        specs.push(
            super::config::parse_wideband(w).map_err(|e| anyhow::anyhow!("--wideband {w}: {e}"))?,
        );
    }
    for n in &args.narrowband {
        specs.push(
            super::config::parse_narrowband(n)
                .map_err(|e| anyhow::anyhow!("--narrowband {n}: {e}"))?,
        );
    }
    if specs.is_empty() {
        anyhow::bail!("give at least one --wideband or --narrowband output");
    }
    let dither_seed = args.dither_seed.unwrap_or_else(rand::random);
    let sink = crate::net::SharedSink::new(open_sink(
        args.send_pcap.as_deref(),
        args.send_interface,
        args.send_ttl,
    )?);
    let bytes_per_value = if args.send_sample_bits == 4 { 1 } else { 2 };
    let mut pipelines = Vec::new();
    let mut controls = Vec::new();
    for spec in specs {
        let control = std::sync::Arc::new(std::sync::Mutex::new(
            super::control::OutputControl::new(spec.channels, args.gain as f32),
        ));
        let chan = super::backend::make_channelizer(&spec, args, dither_seed, control.clone())?;
        controls.push((spec.name.clone(), spec.channels, control));
        let cps = spec.channels_per_substream();
        let header = (8 + 8 * 8) as f64;
        let values_per_s = 2.0 * args.adc_sample_rate * spec.channels as f64
            / spec.samples_between_spectra() as f64;
        let rate = values_per_s
            * bytes_per_value as f64
            * (1.0 + header / args.send_packet_payload as f64)
            * args.send_rate_factor;
        let mut sender = HeapSender::new(
            Box::new(sink.clone()),
            spec.dst.clone(),
            args.feng_id,
            args.array_size,
            args.send_packet_payload,
            Some(rate),
        );
        sender.send_descriptors(
            &descriptors(cps, spec.spectra_per_heap(), args.send_sample_bits),
            8872,
        )?;
        info!(output = %spec.name, channels = spec.channels, destinations = spec.dst.len(), "output ready");
        pipelines.push(Pipeline::new(
            spec,
            chan,
            sender,
            args.feng_id,
            bytes_per_value,
        ));
    }
    let mut placement = DigitiserPlacement::new(
        args.recv_packet_samples,
        args.dig_sample_bits,
        args.recv_chunk_samples,
    )
    .map_err(anyhow::Error::msg)?;
    if let Some(m) = args.mask_timestamp {
        placement.timestamp_mask = m;
    }
    let is_file = Path::new(&args.src).is_file();
    let katcp_port = match args.katcp_port {
        Some(0) => None,
        Some(p) => Some(p),
        None if is_file => None,
        None => Some(7147),
    };
    let handles = controls
        .into_iter()
        .zip(&pipelines)
        .map(
            |((name, channels, control), p)| super::device::OutputHandle {
                name,
                channels,
                batch_step: p.spec.batch_step(),
                spectrum_step: p.spec.samples_between_spectra(),
                control,
            },
        )
        .collect();
    let device = std::sync::Arc::new(super::device::FgpuDevice::new(
        handles,
        args.adc_sample_rate,
        args.sync_time,
        args.gain,
        dither_seed,
    ));
    let _server = match katcp_port {
        Some(p) => match crate::control::Server::start((args.katcp_host, p).into(), device.clone())
        {
            Ok(s) => Some(s),
            Err(e) if args.katcp_port.is_none() => {
                warn!(port = p, error = %e, "katcp port unavailable; running without katcp (give --katcp-port)");
                None
            }
            Err(e) => return Err(anyhow::anyhow!("katcp port {p}: {e}")),
        },
        None => None,
    };
    let metrics = crate::telemetry::metrics::Metrics::new("fgpu");
    let m_in = metrics.counter_family("input_heaps", "Digitiser heaps received");
    let m_missing = metrics.counter_family("input_missing_heaps", "Digitiser heaps missing");
    let m_clip = metrics.counter_family("input_clipped_samples", "Digitiser samples that clipped");
    let m_samples = metrics.counter_family("input_samples", "Digitiser samples received");
    let m_bytes = metrics.counter_family("input_bytes", "Bytes of digitiser samples received");
    let recv_metrics = crate::telemetry::recv::RecvMetrics::new(
        &metrics,
        crate::telemetry::recv::RecvFlavour::Digitiser,
    );
    let m_out = metrics.counter_family("output_heaps", "Heaps transmitted");
    let m_obytes = metrics.counter_family("output_bytes", "Payload bytes transmitted");
    let m_osamples = metrics.counter_family("output_samples", "Complex samples transmitted");
    let m_skip = metrics.counter_family(
        "output_skipped_heaps",
        "Heaps not sent because their input was incomplete",
    );
    let m_early = metrics.counter_family(
        "output_before_input_heaps",
        "Heaps not sent because the delay made their input start before the first sample",
    );
    let m_delay_err = metrics.counter_family(
        "output_delay_error_heaps",
        "Heaps not sent because the delay model did not evaluate for their batch",
    );
    let m_oclip = metrics.counter_family("output_clipped_samples", "Output values that saturated");
    if let Some(p) = args.prometheus_port {
        let bound = metrics.serve((args.katcp_host, p).into())?;
        info!(%bound, "prometheus metrics at /metrics");
    }
    let mut seen_in = super::store::InputStats::default();
    let mut seen_out: Vec<OutputStats> = vec![OutputStats::default(); pipelines.len()];
    let dev = device.clone();
    let mut hook = move |store: &SampleStore, pipes: &[Pipeline]| {
        use crate::telemetry::metrics::labels;
        let s = &store.stats;
        for p in 0..2 {
            let pol = p.to_string();
            let l = labels(&[("pol", &pol)]);
            m_in.get_or_create(&l).inc_by(s.heaps[p] - seen_in.heaps[p]);
            m_missing
                .get_or_create(&l)
                .inc_by(s.missing_heaps[p] - seen_in.missing_heaps[p]);
            m_clip
                .get_or_create(&l)
                .inc_by(s.clipped_samples[p] - seen_in.clipped_samples[p]);
            let new_samples = s.samples[p] - seen_in.samples[p];
            m_samples.get_or_create(&l).inc_by(new_samples);
            m_bytes
                .get_or_create(&l)
                .inc_by(new_samples * store.bits as u64 / 8);
            dev.sensors.set(
                &format!("input{p}.dig-clip-cnt"),
                s.clipped_samples[p],
                crate::control::Status::Nominal,
            );
            let db = s.rms_dbfs(p, store.bits);
            let status = if (-33.0..=-7.0).contains(&db) {
                crate::control::Status::Nominal
            } else {
                crate::control::Status::Warn
            };
            dev.sensors.set(
                &format!("input{p}.dig-rms-dbfs"),
                format!("{db:.3}"),
                status,
            );
        }
        seen_in = s.clone();
        for (k, pl) in pipes.iter().enumerate() {
            let o = &pl.stats;
            let l = labels(&[("stream", &o.name)]);
            m_out.get_or_create(&l).inc_by(o.heaps - seen_out[k].heaps);
            m_obytes
                .get_or_create(&l)
                .inc_by(o.bytes - seen_out[k].bytes);
            let per_heap =
                (pl.spec.channels_per_substream() * pl.spec.spectra_per_heap() * 2) as u64;
            m_osamples
                .get_or_create(&l)
                .inc_by((o.heaps - seen_out[k].heaps) * per_heap);
            m_skip
                .get_or_create(&l)
                .inc_by(o.skipped_heaps - seen_out[k].skipped_heaps);
            m_early
                .get_or_create(&l)
                .inc_by(o.before_input_heaps - seen_out[k].before_input_heaps);
            m_delay_err
                .get_or_create(&l)
                .inc_by(o.delay_error_heaps - seen_out[k].delay_error_heaps);
            for p in 0..2 {
                let pol = p.to_string();
                m_oclip
                    .get_or_create(&labels(&[("stream", &o.name), ("pol", &pol)]))
                    .inc_by(o.clipped_samples[p] - seen_out[k].clipped_samples[p]);
                dev.sensors.set(
                    &format!("{}.input{p}.feng-clip-cnt", o.name),
                    o.clipped_samples[p],
                    crate::control::Status::Nominal,
                );
            }
            seen_out[k] = o.clone();
        }
    };
    let src = open_source_with(
        &args.src,
        &RecvOptions {
            interface: Some(args.recv_interface),
            dpdk: args.recv_dpdk.as_deref(),
            ibv: args.recv_ibv,
        },
    )?;
    let _transmit = crate::net::send::peerdirect::plan(args.use_peerdirect);
    run_pipelines_monitored(
        src,
        placement,
        pipelines,
        args.dig_sample_bits,
        &mut hook,
        recv_metrics.into_monitor(),
    )
}
