//! `gpucbf dsim`: from a checked [`DsimConfig`] to heaps on the wire. Each step is a
//! function: open the sink, place the first heap, generate the signal windows, serve katcp
//! and metrics, wait for the first timestamp, send.

use crate::engines::common::error::listen_error;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::control::{DsimDevice, GenContext, SignalSwap};
use super::generate::{generate, HeapFormat, Window};
use super::send::{DsimSummary, HeapStream, SendMetrics};
use super::signal::Timebase;
use super::DsimConfig;
use crate::control::Server;
use crate::net::send::pcap::PcapSink;
use crate::net::send::udp::UdpSink;
use crate::net::PacketSink;
use crate::telemetry::metrics::Metrics;

/// Generates and sends; returns when `--heaps` are done or on SIGINT/SIGTERM.
pub fn run(cfg: &DsimConfig) -> anyhow::Result<DsimSummary> {
    crate::control::shutdown::install();
    let mut sink = open_sink(cfg)?;
    let live = !sink.is_offline();
    let start = Start::next_heap(cfg)?;
    let (windows, generation) = generate_windows(cfg, &start);
    let (swap_tx, swap_rx) = crossbeam_channel::bounded::<SignalSwap>(1);
    let _katcp = serve_katcp(cfg, &start, swap_tx)?;
    let metrics = Metrics::new("dsim");
    let send_metrics = SendMetrics::new(&metrics);
    if let Some(addr) = cfg.prometheus {
        let bound = metrics
            .serve(addr.into())
            .map_err(listen_error("--prometheus-port", addr))?;
        info!(%bound, "prometheus metrics at /metrics");
    }
    let mut stream = HeapStream::new(cfg, windows, start.ts0, start.window_heaps, live);
    if live {
        wait_for_first_timestamp(cfg, &start)?;
    }
    let sent = stream.send(sink.as_mut(), &swap_rx, &send_metrics)?;
    if live && sent.lag > 0.1 {
        warn!(
            seconds_behind = sent.lag,
            "could not keep up with the requested rate"
        );
    }
    let packet_size = stream.packet_size();
    let summary = DsimSummary {
        streams: cfg.dests.len(),
        heaps_per_stream: sent.heaps_per_stream,
        packets: sent.packets,
        bytes: sent.packets * packet_size as u64,
        descriptor_heaps: sent.descriptor_heaps,
        first_timestamp: start.ts0,
        packet_size,
        generated_samples: generation.samples,
        generation_seconds: generation.seconds,
        generation_samples_per_second: generation.samples as f64 / generation.seconds.max(1e-9),
        send_seconds: sent.seconds,
        time_error_s: sent.lag,
    };
    info!(?summary, "dsim finished");
    Ok(summary)
}

/// The output: a pcap file (`--pcap`) or UDP.
fn open_sink(cfg: &DsimConfig) -> anyhow::Result<Box<dyn PacketSink>> {
    Ok(match &cfg.pcap {
        Some(path) => {
            let ip = if cfg.interface.is_unspecified() {
                Ipv4Addr::LOCALHOST
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

/// Where the stream starts on the sync-time clock, and the window of the period it
/// replays.
struct Start {
    tb: Timebase,
    /// UNIX time of timestamp 0.
    sync_time: f64,
    /// Timestamp of the first heap: the next heap boundary after "now".
    ts0: u64,
    /// Period heap index of the first heap.
    first_heap: u64,
    /// Heaps generated per stream (the period, or fewer for a shorter `--heaps` run).
    window_heaps: usize,
}

impl Start {
    /// The next heap boundary after "now" on the sync-time clock (`--sync-time`, or now).
    fn next_heap(cfg: &DsimConfig) -> anyhow::Result<Self> {
        let hs = cfg.heap_samples as u64;
        let heaps_per_period = cfg.period / hs;
        let now = unix_now()?;
        let sync_time = cfg.sync_time.unwrap_or(now);
        let elapsed = ((now - sync_time) * cfg.adc_rate).max(0.0);
        let ts0 = (elapsed / hs as f64).ceil() as u64 * hs;
        Ok(Start {
            tb: Timebase {
                adc_rate: cfg.adc_rate,
                period: cfg.period,
            },
            sync_time,
            ts0,
            first_heap: (ts0 / hs) % heaps_per_period,
            window_heaps: cfg
                .heaps
                .map_or(heaps_per_period, |n| n.min(heaps_per_period))
                as usize,
        })
    }
}

fn unix_now() -> anyhow::Result<f64> {
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64())
}

fn heap_format(cfg: &DsimConfig) -> HeapFormat {
    HeapFormat {
        bits: cfg.bits,
        heap_samples: cfg.heap_samples,
    }
}

/// How long generating the windows took.
struct Generation {
    samples: u64,
    seconds: f64,
}

/// Every stream's window of packed heaps (in parallel), logged with the rate it took.
fn generate_windows(cfg: &DsimConfig, start: &Start) -> (Vec<Window>, Generation) {
    let t_gen = Instant::now();
    let windows: Vec<Window> = cfg
        .signals
        .iter()
        .enumerate()
        .map(|(s, sig)| {
            generate(
                sig,
                &start.tb,
                heap_format(cfg),
                start.first_heap,
                start.window_heaps,
                cfg.dither_seed,
                s as u64,
            )
        })
        .collect();
    let seconds = t_gen.elapsed().as_secs_f64();
    let samples = (start.window_heaps * cfg.dests.len()) as u64 * cfg.heap_samples as u64;
    info!(
        samples,
        seconds,
        samples_per_second = samples as f64 / seconds.max(1e-9),
        "signal generated"
    );
    for (s, sig) in cfg.signals.iter().enumerate() {
        info!(stream = s, dither = sig.dither, signal = ?sig.signal, "stream signal");
    }
    (windows, Generation { samples, seconds })
}

/// The katcp server (`?signals`, `?time`), if configured; new signals reach the send loop
/// through `swaps`.
fn serve_katcp(
    cfg: &DsimConfig,
    start: &Start,
    swaps: crossbeam_channel::Sender<SignalSwap>,
) -> std::io::Result<Option<Server>> {
    let Some(addr) = cfg.katcp else {
        return Ok(None);
    };
    let ctx = GenContext {
        tb: start.tb,
        fmt: heap_format(cfg),
        first_heap: start.first_heap,
        window_heaps: start.window_heaps,
        dither_seed: cfg.dither_seed,
        n_streams: cfg.dests.len(),
    };
    let dev = DsimDevice::new(ctx, swaps, &cfg.signals_text, start.sync_time);
    let server = Server::start(addr.into(), std::sync::Arc::new(dev))
        .map_err(listen_error("--katcp-port", addr))?;
    Ok(Some(server))
}

/// Live: waits until the wall clock reaches the first timestamp (at most a second).
fn wait_for_first_timestamp(cfg: &DsimConfig, start: &Start) -> anyhow::Result<()> {
    let due = start.sync_time + start.ts0 as f64 / cfg.adc_rate;
    let now = unix_now()?;
    if due > now {
        std::thread::sleep(Duration::from_secs_f64((due - now).min(1.0)));
    }
    Ok(())
}
