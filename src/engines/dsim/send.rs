//! The dsim send loop ([`HeapStream`]): packet templates patched per heap, sendmmsg
//! batches, pacing at the digitiser rate, descriptors, a new signal swapped in at a heap
//! boundary, clean stop on SIGINT/SIGTERM.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tracing::info;

use super::control::SignalSwap;
use super::generate::Window;
use super::DsimConfig;
use crate::net::{Pacer, PacketSink};
use crate::spead::{self, ids, Descriptor, HeapBuilder};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::stages::SendStages;

/// Largest packet for descriptor heaps (katgpucbf's MAX_PACKET_SIZE).
pub const DESCRIPTOR_PACKET_SIZE: usize = 8872;
/// Item pointer positions in the data packet header (after the 8-byte header).
const PTR_HEAP_CNT: usize = 0;
const PTR_TIMESTAMP: usize = 4;
const PTR_STATUS: usize = 6;

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct DsimSummary {
    /// Streams (destinations).
    pub streams: usize,
    /// Heaps sent per stream.
    pub heaps_per_stream: u64,
    /// Data packets sent.
    pub packets: u64,
    /// Bytes of data packets sent.
    pub bytes: u64,
    /// Descriptor heaps sent (to every destination).
    pub descriptor_heaps: u64,
    /// Timestamp of the first heap.
    pub first_timestamp: u64,
    /// Bytes per data packet.
    pub packet_size: usize,
    /// Samples generated (all streams).
    pub generated_samples: u64,
    /// Seconds the generation took.
    pub generation_seconds: f64,
    /// Samples generated per second.
    pub generation_samples_per_second: f64,
    /// Seconds the sending took.
    pub send_seconds: f64,
    /// Seconds behind the real-time schedule at the end (live sending only).
    pub time_error_s: f64,
}

/// The descriptors of a digitiser stream.
pub fn descriptors(heap_samples: usize, bits: u32) -> Vec<Descriptor> {
    let u48 = [('u', 48)];
    vec![
        Descriptor::with_format(ids::TIMESTAMP, "timestamp", "Timestamp provided by the MeerKAT digitisers and scaled to the digitiser sampling rate.", &[], &u48),
        Descriptor::with_format(ids::DIGITISER_ID, "digitiser_id", "Digitiser serial number and polarisation (LSB).", &[], &u48),
        Descriptor::with_format(ids::DIGITISER_STATUS, "digitiser_status", "Digitiser status: bit 1 = saturation, bits 47..32 = saturation count.", &[], &u48),
        Descriptor::with_format(ids::ADC_SAMPLES, "adc_samples", "Digitiser raw ADC sample data.", &[heap_samples as u64], &[('i', bits)]),
    ]
}

/// The 72-byte data packet header for a heap of `heap_bytes`, to be patched per heap.
pub fn data_header_template(digitiser_id: u64, heap_bytes: usize) -> Vec<u8> {
    let payload = vec![0u8; heap_bytes];
    let heap = HeapBuilder::new(0)
        .immediate(ids::TIMESTAMP, 0)
        .immediate(ids::DIGITISER_ID, digitiser_id)
        .immediate(ids::DIGITISER_STATUS, 0)
        .addressed(ids::ADC_SAMPLES, &payload);
    let mut pk = heap.packets(usize::MAX, true).expect("fits");
    pk.swap_remove(0).header
}

#[inline]
fn patch_u48(header: &mut [u8], ptr: usize, value: u64) {
    let at = spead::HEADER_BYTES + ptr * spead::ITEM_POINTER_BYTES + 2;
    header[at..at + 6].copy_from_slice(&value.to_be_bytes()[2..]);
}

/// Why sending stopped.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The sink failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The descriptor heap did not split into packets.
    #[error("{0}")]
    Packets(String),
}

/// What the send loop did.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    /// Heaps per stream.
    pub heaps_per_stream: u64,
    /// Data packets.
    pub packets: u64,
    /// Descriptor heaps.
    pub descriptor_heaps: u64,
    /// Seconds of sending.
    pub seconds: f64,
    /// Seconds behind the schedule at the end (live sending; else 0).
    pub lag: f64,
}

/// The send loop's counters in the metrics registry.
pub struct SendMetrics {
    heaps: prometheus_client::metrics::counter::Counter,
    bytes: prometheus_client::metrics::counter::Counter,
    lag: prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl SendMetrics {
    /// Registers dsim's `output_heaps`, `output_bytes` and `time_error_s`.
    pub fn new(m: &Metrics) -> Self {
        SendMetrics {
            heaps: m.counter("output_heaps", "Heaps transmitted"),
            bytes: m.counter("output_bytes", "Payload bytes transmitted"),
            lag: m.gauge_f64("time_error_s", "Elapsed time minus expected time"),
        }
    }
}

/// Heaps sent per sendmmsg batch.
const BATCH: usize = 32;

/// The data heaps of some streams (all, or one send thread's share), from timestamp `ts0`
/// on, paced at their digitiser rate (× `--rate-factor`) when live, with descriptor heaps
/// every `--descriptor-interval`.
pub struct HeapStream<'a> {
    cfg: &'a DsimConfig,
    /// The streams sent (indices into the configuration's streams), in send order.
    streams: Vec<usize>,
    /// Their windows, in the order of `streams`.
    windows: Vec<Window>,
    /// Where the heap index reached is published (several send threads).
    progress: Option<Arc<AtomicU64>>,
    ts0: u64,
    window_heaps: usize,
    live: bool,
    templates: Vec<Vec<u8>>,
    heap_bytes: usize,
    packet_size: usize,
    pacer: Pacer,
    desc_heap: HeapBuilder<'static>,
    desc_cnt: u64,
    descriptor_heaps: u64,
}

impl<'a> HeapStream<'a> {
    /// The stream of `windows` (one per stream, `window_heaps` heaps each, replayed) from
    /// timestamp `ts0`; paced when `live`.
    pub fn new(
        cfg: &'a DsimConfig,
        windows: Vec<Window>,
        ts0: u64,
        window_heaps: usize,
        live: bool,
    ) -> Self {
        let all = (0..cfg.dests.len()).collect();
        Self::for_streams(cfg, all, windows, ts0, window_heaps, live)
    }

    /// [`Self::new`] for the streams `streams` only (`windows` in their order).
    pub fn for_streams(
        cfg: &'a DsimConfig,
        streams: Vec<usize>,
        windows: Vec<Window>,
        ts0: u64,
        window_heaps: usize,
        live: bool,
    ) -> Self {
        let n_streams = streams.len();
        let heap_bytes = windows[0].heap_bytes;
        let templates: Vec<Vec<u8>> = streams
            .iter()
            .map(|&s| data_header_template(cfg.first_id + s as u64, heap_bytes))
            .collect();
        let packet_size = templates[0].len() + heap_bytes;
        let rate = cfg.adc_rate * n_streams as f64 * cfg.bits as f64 / 8.0 * packet_size as f64
            / heap_bytes as f64
            * cfg.rate_factor;
        let mut desc_heap = HeapBuilder::new(1);
        for d in descriptors(cfg.heap_samples, cfg.bits) {
            desc_heap = desc_heap.descriptor(&d);
        }
        HeapStream {
            cfg,
            streams,
            windows,
            progress: None,
            ts0,
            window_heaps,
            live,
            templates,
            heap_bytes,
            packet_size,
            pacer: Pacer::new(if live { rate } else { 0.0 }),
            desc_heap,
            desc_cnt: 1,
            descriptor_heaps: 0,
        }
    }

    /// Publishes the heap index reached in `p` while sending.
    pub fn publish_progress(&mut self, p: Arc<AtomicU64>) {
        self.progress = Some(p);
    }

    /// Bytes per data packet.
    pub fn packet_size(&self) -> usize {
        self.packet_size
    }

    /// One descriptor heap to every destination.
    fn send_descriptors(&mut self, sink: &mut dyn PacketSink) -> Result<(), SendError> {
        let mut h = self.desc_heap.clone();
        h.cnt = self.desc_cnt;
        self.desc_cnt += 2;
        let packets = h
            .packets(DESCRIPTOR_PACKET_SIZE, false)
            .map_err(|e| SendError::Packets(e.to_string()))?;
        for &s in &self.streams {
            for d in &self.cfg.dests[s] {
                for p in &packets {
                    let mut parts: Vec<&[u8]> = vec![&p.header];
                    parts.extend(p.payload.iter().copied());
                    sink.send(*d, &parts)?;
                }
            }
        }
        self.descriptor_heaps += 1;
        Ok(())
    }

    /// Sends until `--heaps` are done or a stop is requested; a signal arriving on `swaps`
    /// takes over at the next heap boundary of all streams.
    pub fn send(
        &mut self,
        sink: &mut dyn PacketSink,
        swaps: &crossbeam_channel::Receiver<SignalSwap>,
        metrics: &SendMetrics,
    ) -> Result<Sent, SendError> {
        let cfg = self.cfg;
        let n_streams = self.streams.len() as u64;
        let hs = cfg.heap_samples as u64;
        if cfg.descriptor_interval > 0.0 {
            self.send_descriptors(sink)?;
        }
        let mut next_desc =
            Instant::now() + Duration::from_secs_f64(cfg.descriptor_interval.max(0.001));
        let header_len = self.templates[0].len();
        let mut headers = vec![vec![0u8; header_len]; BATCH];
        let mut pending: Option<SignalSwap> = None;
        let mut data_cnt = 2u64;
        let mut heap_k = 0u64;
        let mut packets = 0u64;
        let t_send = Instant::now();
        // dsim_thread_stage_seconds_total{thread="send"}, summed over the send threads.
        let stages = SendStages::new("send");
        let total = cfg.heaps.map(|n| n * n_streams);
        let mut slot = 0u64; // (heap index, stream) pairs in send order
        loop {
            if crate::control::shutdown::requested() {
                info!("stop requested");
                break;
            }
            if pending.is_none() {
                pending = swaps.try_recv().ok();
            }
            // A new signal takes effect at a heap boundary (its own, when several send
            // threads switch together), for all streams at once.
            let due = |pending: &Option<SignalSwap>, slot: u64| {
                slot.is_multiple_of(n_streams)
                    && pending
                        .as_ref()
                        .is_some_and(|p| p.at_heap.is_none_or(|a| slot / n_streams >= a))
            };
            if due(&pending, slot) {
                if let Some(sw) = pending.take() {
                    self.windows = sw.windows;
                    let _ = sw.reply.send(self.ts0 + slot / n_streams * hs);
                }
            }
            if let Some(p) = &self.progress {
                p.store(slot / n_streams, Ordering::Relaxed);
            }
            let t = Instant::now();
            let mut meta: Vec<(usize, usize, u64)> = Vec::with_capacity(BATCH);
            while meta.len() < BATCH {
                if total.is_some_and(|t| slot >= t) || (due(&pending, slot) && !meta.is_empty()) {
                    break;
                }
                let k = slot / n_streams;
                let s = (slot % n_streams) as usize;
                meta.push((s, (k % self.window_heaps as u64) as usize, k));
                slot += 1;
            }
            if meta.is_empty() {
                break;
            }
            for (i, &(s, w, k)) in meta.iter().enumerate() {
                let h = &mut headers[i];
                h.copy_from_slice(&self.templates[s]);
                patch_u48(h, PTR_HEAP_CNT, data_cnt);
                data_cnt += 2;
                patch_u48(h, PTR_TIMESTAMP, self.ts0 + k * hs);
                patch_u48(
                    h,
                    PTR_STATUS,
                    spead::digitiser_status(self.windows[s].saturated[w] as u64),
                );
            }
            let mut batch: Vec<(SocketAddrV4, [&[u8]; 2])> = Vec::with_capacity(BATCH);
            for (i, &(s, w, k)) in meta.iter().enumerate() {
                let dests = &cfg.dests[self.streams[s]];
                let dst = dests[(k % dests.len() as u64) as usize];
                batch.push((dst, [&headers[i][..], self.windows[s].heap(w)]));
                heap_k = heap_k.max(k + 1);
            }
            let t = stages.build.since(t);
            self.pacer.wait(batch.len() * self.packet_size);
            let t = stages.pace.since(t);
            let refs: Vec<(SocketAddrV4, &[&[u8]])> =
                batch.iter().map(|(d, p)| (*d, &p[..])).collect();
            sink.send_batch(&refs)?;
            stages.sink.since(t);
            packets += batch.len() as u64;
            metrics.heaps.inc_by(batch.len() as u64);
            metrics.bytes.inc_by((batch.len() * self.heap_bytes) as u64);
            if self.live {
                metrics.lag.set(self.pacer.lag_seconds());
            }
            if cfg.descriptor_interval > 0.0 && Instant::now() >= next_desc {
                self.send_descriptors(sink)?;
                next_desc += Duration::from_secs_f64(cfg.descriptor_interval);
            }
        }
        sink.flush()?;
        Ok(Sent {
            heaps_per_stream: heap_k,
            packets,
            descriptor_heaps: self.descriptor_heaps,
            seconds: t_send.elapsed().as_secs_f64(),
            lag: if self.live {
                self.pacer.lag_seconds()
            } else {
                0.0
            },
        })
    }
}
