//! `gpucbf dsim`: from a checked [`DsimConfig`] to heaps on the wire. Each step is a
//! function: open the sink, place the first heap, generate the signal windows, serve katcp
//! and metrics, wait for the first timestamp, send.

use crate::engines::common::error::{listen_error, serve_prometheus};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::control::{DsimDevice, GenContext, SignalSwap};
use super::generate::{generate, HeapFormat, Span, Window};
use super::send::{DsimSummary, HeapStream, SendMetrics, Sent};
use super::signal::Timebase;
use super::DsimConfig;
use crate::control::Server;
use crate::engines::common::send::{open_live, RoutedSink};
use crate::net::send::pcap::PcapSink;
use crate::net::PacketSink;
use crate::telemetry::metrics::Metrics;

/// Generates and sends; returns when `--heaps` are done or on SIGINT/SIGTERM.
pub fn run(cfg: &DsimConfig) -> anyhow::Result<DsimSummary> {
    crate::mem::steady_heap(false);
    crate::control::shutdown::install();
    let mut sink = open_sink(cfg)?;
    let live = !sink.is_offline();
    let start = Start::next_heap(cfg)?;
    let (windows, generation) = generate_windows(cfg, &start);
    let (swap_tx, swap_rx) = crossbeam_channel::bounded::<SignalSwap>(1);
    let _katcp = serve_katcp(cfg, &start, swap_tx)?;
    let metrics = Metrics::new("dsim");
    crate::telemetry::stages::register(&metrics);
    let send_metrics = SendMetrics::new(&metrics);
    serve_prometheus(&metrics, cfg.prometheus)?;
    let (sent, packet_size) = if cfg.send_cores.len() > 1 {
        drop(sink); // every send thread opens its own socket
        send_threads(cfg, &start, windows, &swap_rx, &send_metrics)?
    } else {
        pin("send", cfg.send_cores[0]);
        let mut stream = HeapStream::new(cfg, windows, start.ts0, start.window_heaps, live);
        if live {
            wait_for_first_timestamp(cfg, &start)?;
        }
        let sent = stream.send(sink.as_mut(), &swap_rx, &send_metrics)?;
        (sent, stream.packet_size())
    };
    if live && sent.lag > 0.1 {
        warn!(
            seconds_behind = sent.lag,
            "could not keep up with the requested rate"
        );
    }
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

/// Pins the calling thread to `core` (a warning if that fails).
fn pin(what: &str, core: Option<usize>) {
    if let Some(c) = core {
        match crate::net::affinity::pin_current_thread(c) {
            Ok(()) => info!(thread = what, core = c, "pinned"),
            Err(e) => warn!(thread = what, error = %e, "not pinned"),
        }
    }
}

/// Sends with one thread per `--affinity` core, each owning the streams dealt to it
/// (stream s to thread s mod n) with its own socket and pacer on the common schedule. A new
/// signal is split among the threads and starts at one heap index for all of them, a
/// little past the furthest thread (the reply carries its timestamp). Live sending only.
fn send_threads(
    cfg: &DsimConfig,
    start: &Start,
    windows: Vec<Window>,
    swaps: &crossbeam_channel::Receiver<SignalSwap>,
    metrics: &SendMetrics,
) -> anyhow::Result<(Sent, usize)> {
    let n = cfg.send_cores.len();
    let share = |all: Vec<Window>| {
        let mut per: Vec<Vec<Window>> = (0..n).map(|_| Vec::new()).collect();
        for (s, w) in all.into_iter().enumerate() {
            per[s % n].push(w);
        }
        per
    };
    let progress: Vec<Arc<AtomicU64>> = (0..n).map(|_| Arc::default()).collect();
    let mut to_thread = Vec::new();
    let mut from_main = Vec::new();
    for _ in 0..n {
        let (tx, rx) = crossbeam_channel::bounded::<SignalSwap>(1);
        to_thread.push(tx);
        from_main.push(rx);
    }
    // Heaps a new signal starts past the furthest thread: 50 ms at the sending rate, and
    // at least two send batches.
    let lead =
        ((cfg.adc_rate * cfg.rate_factor * 0.05 / cfg.heap_samples as f64).ceil() as u64).max(64);
    std::thread::scope(|scope| -> anyhow::Result<(Sent, usize)> {
        let mut handles = Vec::new();
        for (j, (w, rx)) in share(windows).into_iter().zip(from_main).enumerate() {
            let streams: Vec<usize> = (j..cfg.dests.len()).step_by(n).collect();
            let progress = progress[j].clone();
            handles.push(scope.spawn(move || -> anyhow::Result<(Sent, usize)> {
                pin(&format!("send-{j}"), cfg.send_cores[j]);
                let mut sink = open_network(cfg)?;
                let mut stream =
                    HeapStream::for_streams(cfg, streams, w, start.ts0, start.window_heaps, true);
                stream.publish_progress(progress);
                wait_for_first_timestamp(cfg, start)?;
                let sent = stream.send(&mut *sink, &rx, metrics)?;
                Ok((sent, stream.packet_size()))
            }));
        }
        // After the send threads start: they inherit the mask of the thread that spawns them.
        pin("main", cfg.main_core);
        while handles.iter().any(|h| !h.is_finished()) {
            let sw = match swaps.recv_timeout(Duration::from_millis(50)) {
                Ok(sw) => sw,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                // No katcp server (`--katcp-port 0`, or `--heaps` without a port): no
                // swap will come, so join the send threads below. This loop used to
                // spin here, taking half of the send core the main thread shares (52 %
                // of a core on the H100 host).
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            };
            let furthest = progress.iter().map(|p| p.load(Ordering::Relaxed)).max();
            let at = furthest.unwrap_or(0) + lead;
            for (tx, w) in to_thread.iter().zip(share(sw.windows)) {
                let (reply, _) = crossbeam_channel::bounded(1);
                let _ = tx.send(SignalSwap {
                    windows: w,
                    reply,
                    at_heap: Some(at),
                });
            }
            let _ = sw.reply.send(start.ts0 + at * cfg.heap_samples as u64);
        }
        let mut total: Option<(Sent, usize)> = None;
        for h in handles {
            let (s, size) = h
                .join()
                .map_err(|_| anyhow::anyhow!("a send thread panicked"))??;
            total = Some(match total {
                None => (s, size),
                Some((t, _)) => (
                    Sent {
                        heaps_per_stream: t.heaps_per_stream.max(s.heaps_per_stream),
                        packets: t.packets + s.packets,
                        descriptor_heaps: t.descriptor_heaps.max(s.descriptor_heaps),
                        seconds: t.seconds.max(s.seconds),
                        lag: t.lag.max(s.lag),
                    },
                    size,
                ),
            });
        }
        total.ok_or_else(|| anyhow::anyhow!("no send thread"))
    })
}

/// The output: a pcap file (`--pcap`), or the network (UDP, or ibverbs with `--ibv`).
fn open_sink(cfg: &DsimConfig) -> anyhow::Result<Box<dyn PacketSink>> {
    Ok(match &cfg.pcap {
        Some(path) => {
            let ip = if cfg.interface().is_unspecified() {
                Ipv4Addr::LOCALHOST
            } else {
                cfg.interface()
            };
            Box::new(PcapSink::create(
                path,
                SocketAddrV4::new(ip, 7148),
                cfg.ttl as u8,
            )?)
        }
        None => open_network(cfg)?,
    })
}

/// The network sink: out of the one `--interface`, or with several a sink per interface,
/// each sending its contiguous block of every stream's destinations.
fn open_network(cfg: &DsimConfig) -> std::io::Result<Box<dyn PacketSink>> {
    let open = |ip| open_live(ip, cfg.ttl, cfg.send_buffer, cfg.ibv);
    let ifs = &cfg.interfaces;
    if ifs.len() <= 1 {
        return open(cfg.interface());
    }
    let streams: Vec<&[SocketAddrV4]> = cfg.dests.iter().map(Vec::as_slice).collect();
    Ok(Box::new(RoutedSink::open(ifs, &streams, open)?))
}

/// Where the stream starts on the sync-time clock, and the window of the ring it
/// replays.
struct Start {
    /// Sample rate and the signal's period (`--period`).
    tb: Timebase,
    /// UNIX time of timestamp 0.
    sync_time: f64,
    /// Timestamp of the first heap: the next heap boundary after "now".
    ts0: u64,
    /// The heaps generated per stream: the ring (`--max-period`), or fewer for a shorter
    /// `--heaps` run, from the ring index of the first heap.
    span: Span,
    /// Heaps generated per stream (`span.n_heaps`).
    window_heaps: usize,
}

impl Start {
    /// The next heap boundary after "now" on the sync-time clock (`--sync-time`, or now).
    fn next_heap(cfg: &DsimConfig) -> anyhow::Result<Self> {
        let hs = cfg.heap_samples as u64;
        let ring_heaps = cfg.max_period / hs;
        let now = unix_now()?;
        let sync_time = cfg.sync_time.unwrap_or(now);
        let elapsed = ((now - sync_time) * cfg.adc_rate).max(0.0);
        let ts0 = (elapsed / hs as f64).ceil() as u64 * hs;
        let window_heaps = cfg.heaps.map_or(ring_heaps, |n| n.min(ring_heaps)) as usize;
        Ok(Start {
            tb: Timebase {
                adc_rate: cfg.adc_rate,
                period: cfg.period,
            },
            sync_time,
            ts0,
            span: Span {
                first_heap: (ts0 / hs) % ring_heaps,
                n_heaps: window_heaps,
                ring_heaps,
            },
            window_heaps,
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
                start.span,
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
        span: start.span,
        dither_seed: cfg.dither_seed,
        n_streams: cfg.dests.len(),
    };
    // One expression for every stream reads as the program that gave it.
    let distinct = if cfg.signals.windows(2).all(|w| w[0] == w[1]) {
        &cfg.signals[..cfg.signals.len().min(1)]
    } else {
        &cfg.signals[..]
    };
    let canonical = super::signal::canonical(distinct);
    let dev = DsimDevice::new(ctx, swaps, &cfg.signals_text, &canonical, start.sync_time);
    match Server::start(addr.into(), std::sync::Arc::new(dev)) {
        Ok(s) => Ok(Some(s)),
        Err(e) if !cfg.katcp_required => {
            tracing::warn!(port = addr.port(), error = %e, "katcp port unavailable; running without katcp (give --katcp-port)");
            Ok(None)
        }
        Err(e) => Err(listen_error("--katcp-port", addr)(e)),
    }
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
