//! `gpucbf fgpu`: from a checked [`FgpuConfig`] to a running engine. Each step is a function:
//! open the sink, build the outputs, serve katcp and metrics, open the input, run.

use std::sync::{Arc, Mutex};

use tracing::{info, warn};

use super::backend::make_channelizer;
use super::config::FgpuConfig;
use super::control::OutputControl;
use super::device::{FgpuDevice, OutputHandle};
use super::engine::{run_pipelines_monitored, FgpuSummary};
use super::metrics::FgpuMetrics;
use super::pipeline::{descriptors, Pipeline};
use super::spec::WidebandSpec;
use crate::control::Server;
use crate::engines::common::error::serve_prometheus;
use crate::engines::common::send_worker::SendWorker;
use crate::net::send::heap::HeapSender;
use crate::net::send::peerdirect::{items_plan, ItemPlace, ItemsPlan, SendSetup};
use crate::net::SharedSink;

/// Runs the engine until the input ends (pcap) or a stop is requested.
pub fn run(cfg: &FgpuConfig) -> anyhow::Result<FgpuSummary> {
    run_observed(cfg, &mut |_| {})
}

/// [`run`], showing `sensors` the engine's katcp sensors once they exist (a test reads
/// `device-status` after the run).
pub fn run_observed(
    cfg: &FgpuConfig,
    sensors: &mut dyn FnMut(&crate::control::sensors::SensorSet),
) -> anyhow::Result<FgpuSummary> {
    crate::mem::steady_heap(true);
    crate::control::shutdown::install();
    let io = &cfg.io;
    io.log_not_applicable();
    let _chunks = plan_chunk_memory(cfg);
    let sink = io.open_sink_for(&output_dsts(cfg))?;
    let (pipelines, handles, send_threads) = build_outputs(cfg, &sink)?;
    let device = Arc::new(
        FgpuDevice::new(
            handles,
            cfg.adc_sample_rate,
            cfg.sync_time,
            cfg.gain,
            cfg.dither_seed,
            cfg.placement.chunk_samples,
        )
        .with_max_delay(cfg.sizing.max_delay_diff),
    );
    sensors(&device.sensors);
    let sensors = device.sensors.clone();
    crate::engines::common::rx_sensors::RxSensors::spawn_watchdog(&device.rx)?;
    let _katcp = serve_katcp(cfg, device.clone())?;
    let _descriptors = resend_descriptors(cfg)?;
    let mut metrics = FgpuMetrics::new(device, pipelines.len(), cfg.sync_time, cfg.adc_sample_rate);
    metrics.set_chunk_samples(cfg.placement.chunk_samples);
    serve_prometheus(metrics.registry(), cfg.io.prometheus_addr(cfg.katcp_host))?;
    let recv = io.recv_setup(&cfg.src)?;
    let monitor_log = io.open_monitor_log()?;
    let monitor = metrics.take_recv_monitor();
    let monitor = match &monitor_log {
        Some(log) => log.recv_monitor(monitor),
        None => monitor,
    };
    let ran = run_pipelines_monitored(
        recv,
        cfg.placement.clone(),
        pipelines,
        cfg.dig_sample_bits,
        &mut |store, pipes| metrics.update(store, pipes),
        monitor,
    );
    // The pipelines (and their queues to the send threads) are gone: what they queued is
    // sent and the sinks flushed before the engine returns, whether it ended well or not.
    if let Some(w) = send_threads {
        w.join();
    }
    ran.map_err(|e| {
        crate::engines::common::error::compute_failure(
            "F-engine",
            &sensors,
            e,
            super::pipeline::is_compute_failure,
        )
    })
}

/// `--use-vkgdr`: receive chunks in GPU memory mapped for the CPU where the GPU backend
/// runs and the host allows (one log line either way). Decided before any chunk exists.
fn plan_chunk_memory(cfg: &FgpuConfig) -> Option<crate::mem::vkgdr::ChunkPlace> {
    use crate::chunk::Placement;
    let chunk = cfg.placement.n_slots() as u64 * cfg.placement.slot_bytes() as u64;
    let held = cfg.io.recv_prealloc.max(cfg.io.recv_chunks + 1) as u64;
    // Without a wideband output the store decodes every chunk on the CPU (statistics).
    let cpu_reads = (!cfg.outputs.iter().any(|o| o.narrowband.is_none())).then(|| {
        "with no wideband output the chunks are decoded on the CPU for the digitiser statistics"
            .to_string()
    });
    crate::mem::vkgdr::plan(
        cfg.io.use_vkgdr,
        cfg.use_gpu,
        cpu_reads,
        chunk.saturating_mul(held),
    )
}

/// Each output's destinations (several `--send-interface`s divide them).
fn output_dsts(cfg: &FgpuConfig) -> Vec<&[std::net::SocketAddrV4]> {
    cfg.outputs.iter().map(|o| o.dst.as_slice()).collect()
}

/// Every output: its controls, channeliser and senders (descriptors sent), as a pipeline
/// and as the katcp device sees it; the outputs' heaps go through the send threads
/// (`--send-affinity`: one per core; the first uses `sink`, each other its own socket; a
/// pcap file takes one thread).
fn build_outputs(
    cfg: &FgpuConfig,
    sink: &SharedSink,
) -> anyhow::Result<(Vec<Pipeline>, Vec<OutputHandle>, Option<SendWorker>)> {
    let mut parts = Vec::new();
    let mut handles = Vec::new();
    for spec in &cfg.outputs {
        let mut ctl = OutputControl::new(spec.channels, cfg.gain as f32);
        ctl.debug = cfg.debug;
        let control = Arc::new(Mutex::new(ctl));
        let chan = make_channelizer(spec, cfg, control.clone())?;
        info!(output = %spec.name, channels = spec.channels, destinations = spec.dst.len(), "output ready");
        handles.push(OutputHandle {
            name: spec.name.clone(),
            channels: spec.channels,
            batch_step: spec.batch_step(),
            spectrum_step: spec.samples_between_spectra(),
            control,
        });
        parts.push((spec.clone(), chan));
    }
    let plan = transmit_plan(cfg);
    #[cfg(feature = "ibverbs")]
    if let Some(direct) = direct_senders(cfg, plan, &mut parts) {
        // The start-up descriptors through the sink, as lane 0 sends them below.
        for spec in &cfg.outputs {
            output_sender(cfg, spec, sink, (0, 1))?;
        }
        let pipelines = parts
            .into_iter()
            .zip(direct)
            .map(|((spec, chan), d)| {
                Pipeline::new(spec, chan, d, cfg.feng_id, cfg.bytes_per_value())
            })
            .collect();
        return Ok((pipelines, handles, None));
    }
    #[cfg(not(feature = "ibverbs"))]
    if cfg.io.use_peerdirect {
        let why: Vec<String> = plan.no_device.into_iter().collect();
        crate::net::send::peerdirect::log_outcome("fgpu", ItemPlace::Staged, &why);
    }
    let mut cores = cfg.io.send_cores()?;
    if cores.len() > 1 && cfg.io.send_pcap.is_some() {
        warn!("--send-pcap: one send thread (the file keeps the packets' order)");
        cores.truncate(1);
    }
    let n = cores.len();
    let mut lanes: Vec<(Vec<HeapSender>, Option<usize>)> = Vec::new();
    for (l, core) in cores.iter().enumerate() {
        let lane_sink = if l == 0 {
            sink.clone()
        } else {
            cfg.io.open_sink_for(&output_dsts(cfg))?
        };
        let senders = cfg
            .outputs
            .iter()
            .map(|spec| output_sender(cfg, spec, &lane_sink, (l, n)))
            .collect::<std::io::Result<Vec<_>>>()?;
        lanes.push((senders, *core));
    }
    let queue = cfg.sizing.send_queue(&cfg.outputs);
    let (worker, queued) = SendWorker::spawn_lanes_sized(lanes, queue)?;
    info!(cores = ?cores, queue_batches = queue, "send threads started");
    let pipelines = parts
        .into_iter()
        .zip(queued)
        .map(|((spec, chan), q)| Pipeline::new(spec, chan, q, cfg.feng_id, cfg.bytes_per_value()))
        .collect();
    Ok((pipelines, handles, Some(worker)))
}

/// The heap sender of one output on send lane `lane.0` of `lane.1` (which sends the heaps of
/// destinations `d % lane.1 == lane.0`), paced at its share of the data rate ×
/// `--send-rate-factor`; lane 0 sends the stream's descriptors.
fn output_sender(
    cfg: &FgpuConfig,
    spec: &WidebandSpec,
    sink: &SharedSink,
    lane: (usize, usize),
) -> std::io::Result<HeapSender> {
    let payload = cfg.io.send_packet_payload;
    let rate = output_rate(cfg, spec);
    let n_dst = spec.dst.len();
    let mine = (0..n_dst).filter(|d| d % lane.1 == lane.0).count();
    let rate = rate * mine as f64 / n_dst.max(1) as f64;
    let mut sender = HeapSender::new(
        Box::new(sink.clone()),
        spec.dst.clone(),
        cfg.feng_id,
        cfg.array_size,
        payload,
        Some(rate),
    );
    if lane.0 == 0 {
        let cps = spec.channels_per_substream();
        sender.send_descriptors(
            &descriptors(cps, spec.spectra_per_heap(), cfg.send_sample_bits),
            8872,
        )?;
    }
    Ok(sender)
}

/// Bytes per second `spec`'s heaps take on the wire (SPEAD headers included) ×
/// `--send-rate-factor`.
fn output_rate(cfg: &FgpuConfig, spec: &WidebandSpec) -> f64 {
    // Three immediates: timestamp, feng_id, frequency.
    let header = crate::spead::data_header_len(3) as f64;
    let values_per_s =
        2.0 * cfg.adc_sample_rate * spec.channels as f64 / spec.samples_between_spectra() as f64;
    values_per_s
        * cfg.bytes_per_value() as f64
        * (1.0 + header / cfg.io.send_packet_payload as f64)
        * cfg.send_rate_factor
}

/// How the outputs may be sent (`--use-peerdirect`, `--send-ibv`), best first; the host is
/// probed only where `--use-peerdirect` asks and nothing else rules GPU items out.
fn transmit_plan(cfg: &FgpuConfig) -> ItemsPlan {
    let setup = SendSetup {
        use_peerdirect: cfg.io.use_peerdirect,
        send_ibv: cfg.io.send_ibv,
        send_pcap: cfg.io.send_pcap.is_some(),
        interfaces: cfg.io.send_interface.0.len(),
        compute_off_gpu: (!cfg.use_gpu)
            .then(|| "the CPU backend computes its batches in host memory".to_string()),
    };
    items_plan(&setup, crate::net::send::peerdirect::probe)
}

/// `--use-peerdirect` / `--send-ibv`: every output written into registered items and sent
/// from them through its own queue pair on the RDMA NIC behind `--send-interface` (no send
/// thread, no copy into a send ring): items in GPU memory (the channeliser copies each batch
/// device to device into its item), else in host memory, as `plan` lists them. `None` where
/// none opens: the outputs then go through the sink (ibverbs ring or UDP) and the send
/// threads. `--use-peerdirect` logs one line saying which and why; `--send-ibv` alone logs
/// as before.
#[cfg(feature = "ibverbs")]
fn direct_senders(
    cfg: &FgpuConfig,
    plan: ItemsPlan,
    parts: &mut [(WidebandSpec, Box<dyn super::Channelizer>)],
) -> Option<Vec<super::direct::DirectSender>> {
    let mut why: Vec<String> = plan.no_device.into_iter().collect();
    for place in plan.tries {
        let opened = match place {
            ItemPlace::Staged => break,
            ItemPlace::Host => open_direct(cfg, parts, None),
            ItemPlace::Device(kind) => {
                let r = open_direct(cfg, parts, Some(kind));
                if r.is_err() {
                    for (_, chan) in parts.iter_mut() {
                        chan.set_device_output(false);
                    }
                }
                r
            }
        };
        match opened {
            Ok(v) if cfg.io.use_peerdirect => {
                crate::net::send::peerdirect::log_outcome("fgpu", place, &why);
                return Some(v);
            }
            Ok(v) => {
                info!(
                    outputs = v.len(),
                    "--send-ibv: outputs sent straight from registered output items"
                );
                return Some(v);
            }
            Err(e) if cfg.io.use_peerdirect => why.push(match place {
                ItemPlace::Device(_) => format!("GPU-memory output items: {e}"),
                _ => format!("host-memory output items: {e}"),
            }),
            Err(e) => {
                warn!("--send-ibv: output items cannot be sent from registered memory ({e}); staging batches for the send threads");
            }
        }
    }
    if cfg.io.use_peerdirect {
        crate::net::send::peerdirect::log_outcome("fgpu", ItemPlace::Staged, &why);
    }
    None
}

/// The direct senders of every output: items in GPU memory registered as `gpu` says (each
/// channeliser switched to keep its batches on the device), or in host memory (None).
#[cfg(feature = "ibverbs")]
fn open_direct(
    cfg: &FgpuConfig,
    parts: &mut [(WidebandSpec, Box<dyn super::Channelizer>)],
    gpu: Option<crate::net::send::peerdirect::GpuMrKind>,
) -> std::io::Result<Vec<super::direct::DirectSender>> {
    use super::direct::{direct_config, DirectSender};
    use crate::engines::common::send::{item_gpu, item_source};
    use crate::net::send::peerdirect::output_items_for_peerdirect;
    use crate::net::send::verbs::{DeviceItems, PeerDirectSender};
    let (port, src) = item_source(&cfg.io.send_interface, cfg.io.send_ttl)?;
    let ctx = gpu.map(|_| item_gpu()).transpose()?;
    let payload = cfg.io.send_packet_payload;
    let mut out = Vec::with_capacity(parts.len());
    for (spec, chan) in parts.iter_mut() {
        let batch = spec.channels * spec.spectra_per_heap() * 2 * cfg.bytes_per_value();
        let rate = Some(output_rate(cfg, spec)).filter(|r| *r > 0.0);
        let dcfg = direct_config(spec, batch, cfg.feng_id, cfg.array_size, payload, rate, src);
        let n_items =
            output_items_for_peerdirect(2, dcfg.send_queue_depth, dcfg.packets_per_item());
        let device = (&port.device, port.port);
        let d = match (gpu, &ctx) {
            (Some(kind), Some(ctx)) => {
                if !chan.set_device_output(true) {
                    return Err(std::io::Error::other(format!(
                        "output {}'s channeliser cannot keep its batches on the GPU",
                        spec.name
                    )));
                }
                let mem = DeviceItems::alloc(ctx, batch * n_items)?;
                DirectSender::on_device(spec, cfg.feng_id, batch, mem, |addr| {
                    // SAFETY: `addr` is the DirectSender's device items (aligned, with room
                    // to the aligned end), which outlive its sender.
                    unsafe {
                        PeerDirectSender::open(
                            Some(device.0),
                            device.1,
                            dcfg,
                            addr,
                            batch,
                            n_items,
                            kind,
                        )
                    }
                })?
            }
            _ => DirectSender::new(spec, cfg.feng_id, batch, n_items, |mem| {
                // SAFETY: `mem` is the DirectSender's item memory, which outlives its
                // sender and is written only through acquired items.
                unsafe {
                    PeerDirectSender::open_host(Some(device.0), device.1, dcfg, mem, batch, n_items)
                }
            })?,
        };
        out.push(d);
    }
    Ok(out)
}

/// Re-sends every output's descriptors while the engine runs (live UDP output only):
/// first after (feng_id + 1) × 5 s, then every array_size × 5 s, from the first send
/// interface, as katgpucbf staggers its F-engines.
fn resend_descriptors(
    cfg: &FgpuConfig,
) -> std::io::Result<Option<crate::engines::common::descriptors::DescriptorLoop>> {
    use crate::engines::common::descriptors::{start, DescribedOutput};
    if cfg.io.send_pcap.is_some() {
        return Ok(None);
    }
    let outputs = cfg
        .outputs
        .iter()
        .map(|spec| DescribedOutput {
            dsts: spec.dst.clone(),
            descriptors: descriptors(
                spec.channels_per_substream(),
                spec.spectra_per_heap(),
                cfg.send_sample_bits,
            ),
        })
        .collect();
    let sink = cfg.io.open_descriptor_sink()?;
    let five = std::time::Duration::from_secs(5);
    let lp = start(
        sink,
        outputs,
        five * (cfg.feng_id as u32).saturating_add(1),
        five * (cfg.array_size.min(u32::MAX as u64) as u32),
        cfg.feng_id,
        cfg.array_size,
        cfg.io.send_packet_payload,
    )?;
    Ok(Some(lp))
}

/// The katcp server, if one is configured; the default port only warns when it is taken.
fn serve_katcp(cfg: &FgpuConfig, device: Arc<FgpuDevice>) -> anyhow::Result<Option<Server>> {
    let Some(addr) = cfg.katcp else {
        return Ok(None);
    };
    match Server::start(addr.into(), device) {
        Ok(s) => Ok(Some(s)),
        Err(e) if !cfg.katcp_required => {
            warn!(port = addr.port(), error = %e, "katcp port unavailable; running without katcp (give --katcp-port)");
            Ok(None)
        }
        Err(e) => Err(anyhow::anyhow!("katcp port {}: {e}", addr.port())),
    }
}
