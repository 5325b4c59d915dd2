//! The dsim send loop: packet templates patched per heap, sendmmsg batches, pacing at the
//! digitiser rate, descriptors, clean stop on SIGINT/SIGTERM.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use serde::Serialize;
use tracing::{info, warn};

use super::control::{DsimDevice, GenContext, SignalSwap};
use super::generate::{generate, HeapFormat, Window};
use super::signal::Timebase;
use super::DsimConfig;
use crate::net::send::pcap::PcapSink;
use crate::net::send::udp::UdpSink;
use crate::net::{Pacer, PacketSink};
use crate::spead::{self, ids, Descriptor, HeapBuilder};

/// Largest packet for descriptor heaps (katgpucbf's MAX_PACKET_SIZE).
pub const DESCRIPTOR_PACKET_SIZE: usize = 8872;
/// Item pointer positions in the data packet header (after the 8-byte header).
const PTR_HEAP_CNT: usize = 0;
const PTR_TIMESTAMP: usize = 4;
const PTR_STATUS: usize = 6;

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct DsimSummary {
    pub streams: usize,
    pub heaps_per_stream: u64,
    pub packets: u64,
    pub bytes: u64,
    pub descriptor_heaps: u64,
    pub first_timestamp: u64,
    pub packet_size: usize,
    pub generated_samples: u64,
    pub generation_seconds: f64,
    pub generation_samples_per_second: f64,
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

fn make_sink(cfg: &DsimConfig) -> anyhow::Result<Box<dyn PacketSink>> {
    Ok(match &cfg.pcap {
        Some(path) => {
            let ip = if cfg.interface.is_unspecified() {
                std::net::Ipv4Addr::LOCALHOST
            } else {
                cfg.interface
            };
            Box::new(PcapSink::create(
                path,
                SocketAddrV4::new(ip, 7148),
                cfg.ttl as u8,
            )?)
        }
        None => Box::new(UdpSink::new(cfg.interface, cfg.ttl, 8 << 20)?),
    })
}

/// Generates and sends; returns when `--heaps` are done or on SIGINT/SIGTERM.
pub fn run(cfg: &DsimConfig) -> anyhow::Result<DsimSummary> {
    crate::control::shutdown::install();
    let n_streams = cfg.dests.len();
    let hs = cfg.heap_samples as u64;
    let heaps_per_period = cfg.period / hs;
    let tb = Timebase {
        adc_rate: cfg.adc_rate,
        period: cfg.period,
    };
    let mut sink = make_sink(cfg)?;
    let live = !sink.is_offline();

    // First timestamp: the next heap boundary after "now" on the sync-time clock.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    let sync_time = cfg.sync_time.unwrap_or(now);
    let elapsed = ((now - sync_time) * cfg.adc_rate).max(0.0);
    let ts0 = (elapsed / hs as f64).ceil() as u64 * hs;
    let first_heap = (ts0 / hs) % heaps_per_period;
    let window_heaps = cfg
        .heaps
        .map_or(heaps_per_period, |n| n.min(heaps_per_period)) as usize;

    let fmt = HeapFormat {
        bits: cfg.bits,
        heap_samples: cfg.heap_samples,
    };
    let t_gen = Instant::now();
    let mut windows: Vec<Window> = cfg
        .signals
        .iter()
        .enumerate()
        .map(|(s, sig)| {
            generate(
                sig,
                &tb,
                fmt,
                first_heap,
                window_heaps,
                cfg.dither_seed,
                s as u64,
            )
        })
        .collect();
    let gen_s = t_gen.elapsed().as_secs_f64();
    let generated = (window_heaps * n_streams) as u64 * hs;
    info!(
        samples = generated,
        seconds = gen_s,
        samples_per_second = generated as f64 / gen_s.max(1e-9),
        "signal generated"
    );
    for (s, sig) in cfg.signals.iter().enumerate() {
        info!(stream = s, dither = sig.dither, signal = ?sig.signal, "stream signal");
    }

    let (swap_tx, swap_rx) = crossbeam_channel::bounded::<SignalSwap>(1);
    let _server = match cfg.katcp {
        Some(addr) => {
            let ctx = GenContext {
                tb,
                fmt,
                first_heap,
                window_heaps,
                dither_seed: cfg.dither_seed,
                n_streams,
            };
            let dev = DsimDevice::new(ctx, swap_tx, &cfg.signals_text, sync_time);
            Some(crate::control::Server::start(
                addr.into(),
                std::sync::Arc::new(dev),
            )?)
        }
        None => None,
    };
    let mut pending: Option<SignalSwap> = None;
    let metrics = crate::telemetry::metrics::Metrics::new("dsim");
    let m_heaps = metrics.counter("output_heaps", "Heaps transmitted");
    let m_bytes = metrics.counter("output_bytes", "Payload bytes transmitted");
    let m_lag = metrics.gauge_f64("time_error_s", "Elapsed time minus expected time");
    if let Some(addr) = cfg.prometheus {
        let bound = metrics.serve(addr.into())?;
        info!(%bound, "prometheus metrics at /metrics");
    }
    let heap_bytes = windows[0].heap_bytes;
    let templates: Vec<Vec<u8>> = (0..n_streams)
        .map(|s| data_header_template(cfg.first_id + s as u64, heap_bytes))
        .collect();
    let header_len = templates[0].len();
    let packet_size = header_len + heap_bytes;
    let rate = cfg.adc_rate * n_streams as f64 * cfg.bits as f64 / 8.0 * packet_size as f64
        / heap_bytes as f64
        * cfg.rate_factor;
    let mut pacer = Pacer::new(if live { rate } else { 0.0 });

    let desc_heap = {
        let mut b = HeapBuilder::new(1);
        for d in descriptors(cfg.heap_samples, cfg.bits) {
            b = b.descriptor(&d);
        }
        b
    };
    let mut desc_cnt = 1u64;
    let mut descriptor_heaps = 0u64;
    let mut send_descriptors = |sink: &mut dyn PacketSink, cnt: &mut u64| -> anyhow::Result<()> {
        let mut h = desc_heap.clone();
        h.cnt = *cnt;
        *cnt += 2;
        let packets = h
            .packets(DESCRIPTOR_PACKET_SIZE, false)
            .map_err(anyhow::Error::msg)?;
        for dests in &cfg.dests {
            for d in dests {
                for p in &packets {
                    let mut parts: Vec<&[u8]> = vec![&p.header];
                    parts.extend(p.payload.iter().copied());
                    sink.send(*d, &parts)?;
                }
            }
        }
        descriptor_heaps += 1;
        Ok(())
    };

    // Live: wait until the wall clock reaches the first timestamp.
    if live {
        let due = sync_time + ts0 as f64 / cfg.adc_rate;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64();
        if due > now {
            std::thread::sleep(Duration::from_secs_f64((due - now).min(1.0)));
        }
    }
    if cfg.descriptor_interval > 0.0 {
        send_descriptors(sink.as_mut(), &mut desc_cnt)?;
    }
    let mut next_desc =
        Instant::now() + Duration::from_secs_f64(cfg.descriptor_interval.max(0.001));

    const BATCH: usize = 32;
    let mut headers = vec![vec![0u8; header_len]; BATCH];
    let mut data_cnt = 2u64;
    let mut heap_k = 0u64;
    let mut packets = 0u64;
    let t_send = Instant::now();
    let total = cfg.heaps.map(|n| n * n_streams as u64);
    let mut slot = 0u64; // (heap index, stream) pairs in send order
    'outer: loop {
        if crate::control::shutdown::requested() {
            info!("stop requested");
            break;
        }
        if pending.is_none() {
            pending = swap_rx.try_recv().ok();
        }
        // A new signal takes effect at a heap boundary, for all streams at once.
        if slot.is_multiple_of(n_streams as u64) {
            if let Some(sw) = pending.take() {
                windows = sw.windows;
                let _ = sw.reply.send(ts0 + slot / n_streams as u64 * hs);
            }
        }
        let mut batch: Vec<(SocketAddrV4, [&[u8]; 2])> = Vec::with_capacity(BATCH);
        let mut meta: Vec<(usize, usize, u64)> = Vec::with_capacity(BATCH);
        while meta.len() < BATCH {
            if total.is_some_and(|t| slot >= t)
                || (pending.is_some() && slot.is_multiple_of(n_streams as u64) && !meta.is_empty())
            {
                break;
            }
            let k = slot / n_streams as u64;
            let s = (slot % n_streams as u64) as usize;
            meta.push((s, (k % window_heaps as u64) as usize, k));
            slot += 1;
        }
        if meta.is_empty() {
            break 'outer;
        }
        for (i, &(s, w, k)) in meta.iter().enumerate() {
            let h = &mut headers[i];
            h.copy_from_slice(&templates[s]);
            patch_u48(h, PTR_HEAP_CNT, data_cnt);
            data_cnt += 2;
            patch_u48(h, PTR_TIMESTAMP, ts0 + k * hs);
            patch_u48(
                h,
                PTR_STATUS,
                spead::digitiser_status(windows[s].saturated[w] as u64),
            );
        }
        for (i, &(s, w, k)) in meta.iter().enumerate() {
            let dests = &cfg.dests[s];
            let dst = dests[(k % dests.len() as u64) as usize];
            batch.push((dst, [&headers[i][..], windows[s].heap(w)]));
            heap_k = heap_k.max(k + 1);
        }
        pacer.wait(batch.len() * packet_size);
        let refs: Vec<(SocketAddrV4, &[&[u8]])> = batch.iter().map(|(d, p)| (*d, &p[..])).collect();
        sink.send_batch(&refs)?;
        packets += batch.len() as u64;
        m_heaps.inc_by(batch.len() as u64);
        m_bytes.inc_by((batch.len() * heap_bytes) as u64);
        if live {
            m_lag.set(pacer.lag_seconds());
        }
        if cfg.descriptor_interval > 0.0 && Instant::now() >= next_desc {
            send_descriptors(sink.as_mut(), &mut desc_cnt)?;
            next_desc += Duration::from_secs_f64(cfg.descriptor_interval);
        }
    }
    sink.flush()?;
    let send_s = t_send.elapsed().as_secs_f64();
    let lag = if live { pacer.lag_seconds() } else { 0.0 };
    if live && lag > 0.1 {
        warn!(
            seconds_behind = lag,
            "could not keep up with the requested rate"
        );
    }
    let summary = DsimSummary {
        streams: n_streams,
        heaps_per_stream: heap_k,
        packets,
        bytes: packets * packet_size as u64,
        descriptor_heaps,
        first_timestamp: ts0,
        packet_size,
        generated_samples: generated,
        generation_seconds: gen_s,
        generation_samples_per_second: generated as f64 / gen_s.max(1e-9),
        send_seconds: send_s,
        time_error_s: lag,
    };
    info!(?summary, "dsim finished");
    Ok(summary)
}
