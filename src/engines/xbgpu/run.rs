//! `gpucbf xbgpu`: from a checked [`XbgpuConfig`] to a running engine. Each step is a function:
//! open the sink, build the correlation outputs and the beams, serve katcp, open the input,
//! count, run.

use super::corrprod::CaptureGate;
use std::sync::{Arc, Mutex};

use tracing::info;

use super::backend::{make_backend, Beams, Corr};
use super::beams::{beam_descriptors, BPipeline};
use super::config::XbgpuConfig;
use super::corrprod::{x_descriptors, XPipeline};
use super::device::XbDevice;
use super::engine::{run_pipelines, XbgpuSummary};
use super::metrics::XbgpuMetrics;
use super::sensors::XbSensors;
use super::spec::CorrprodSpec;
use crate::compute::xengine::{Beam, BeamSet};
use crate::control::{SensorSet, SensorType};
use crate::engines::common::error::{listen_error, serve_prometheus};
use crate::engines::common::rx_sensors::RxSensors;
use crate::net::send::heap::HeapSender;
use crate::net::SharedSink;

/// Runs the engine until the input ends or a stop is requested.
pub fn run(cfg: &XbgpuConfig) -> anyhow::Result<XbgpuSummary> {
    crate::mem::steady_heap(true);
    crate::control::shutdown::install();
    let io = &cfg.io;
    io.log_not_applicable();
    let _chunks = plan_chunk_memory(cfg);
    let sink = io.open_sink()?;
    let sensors = SensorSet::default();
    crate::control::common::add_common_sensors(&sensors);
    let mut streams = Vec::new();
    let mut xs = corrprod_outputs(cfg, &sink, &sensors, &mut streams)?;
    let set = Arc::new(Mutex::new(beam_set(cfg, &sensors)));
    let mut beams = beam_output(cfg, &sink, &set, &mut streams)?;
    peerdirect_outputs(cfg, &mut xs, beams.as_mut());
    let x_names: Vec<String> = cfg.corrprods.iter().map(|c| c.name.clone()).collect();
    let b_names: Vec<String> = cfg.beams.iter().map(|b| b.name.clone()).collect();
    let chunk_ticks = cfg.placement.batch_step() * cfg.placement.batches_per_chunk as u64;
    let mut data_sensors = XbSensors::add(
        &sensors,
        &x_names,
        &b_names,
        cfg.sync_time,
        cfg.adc_sample_rate,
        chunk_ticks,
    );
    RxSensors::spawn_watchdog(&data_sensors.rx)?;
    let status = sensors.clone();
    let device = XbDevice {
        sensors,
        outputs: streams,
        beams: b_names,
        set,
        n_ants: cfg.n_ants(),
        steady: beams.as_ref().map(|b| b.steady.clone()).unwrap_or_default(),
    };
    let _katcp = serve_katcp(cfg, Arc::new(device))?;
    let _descriptors = resend_descriptors(cfg)?;
    let recv = io.recv_setup(&cfg.src)?;
    let mut metrics = XbgpuMetrics::new(cfg.sync_time, cfg.adc_sample_rate);
    serve_prometheus(metrics.registry(), io.prometheus_addr(cfg.katcp_host))?;
    let monitor_log = io.open_monitor_log()?;
    let monitor = metrics.take_recv_monitor();
    let monitor = match &monitor_log {
        Some(log) => log.recv_monitor(monitor),
        None => monitor,
    };
    run_pipelines(
        recv,
        cfg.placement.clone(),
        xs,
        beams,
        &mut |xs, bp, chunk| {
            metrics.update(xs, bp);
            data_sensors.update(xs, bp, chunk);
        },
        monitor,
    )
    .map_err(|e| {
        use super::backend::{BackendError, PipelineError};
        crate::engines::common::error::compute_failure("X-engine", &status, e, |c| {
            c.downcast_ref::<BackendError>().is_some()
                || matches!(
                    c.downcast_ref::<PipelineError>(),
                    Some(PipelineError::Compute(_))
                )
        })
    })
}

/// `--use-peerdirect`: every correlation output's dumps written by the GPU correlator, and
/// every batch of the beams by the GPU beamformer, into items of registered device
/// allocations (one per correlation output, one for the beams) and sent from there, where
/// the set-up allows (GPU backend, no `--send-pcap`, one `--send-interface` with an RDMA
/// NIC, dmabuf or nvidia-peermem; for the dumps, no `--debug-permute-baselines`); else the
/// staged path (the sink: UDP, or `--send-ibv`'s ibverbs ring). One log line either way,
/// naming what stays staged.
fn peerdirect_outputs(cfg: &XbgpuConfig, xs: &mut [XPipeline], mut beams: Option<&mut BPipeline>) {
    use crate::net::send::peerdirect::{items_plan, log_outcome, probe, ItemPlace, SendSetup};
    if !cfg.io.use_peerdirect {
        return;
    }
    let permuted = "--debug-permute-baselines swaps baselines in host memory";
    let off_gpu = if beams.is_none() && xs.is_empty() {
        Some("no --corrprod or --beam output".to_string())
    } else if beams.is_none() && cfg.debug_permute_baselines.is_some() {
        Some(permuted.to_string())
    } else if !cfg.use_gpu {
        Some("the CPU backend computes its outputs in host memory".to_string())
    } else {
        None
    };
    let setup = SendSetup {
        use_peerdirect: true,
        send_ibv: cfg.io.send_ibv,
        send_pcap: cfg.io.send_pcap.is_some(),
        interfaces: cfg.io.send_interface.0.len(),
        compute_off_gpu: off_gpu,
    };
    let plan = items_plan(&setup, probe);
    #[cfg_attr(not(feature = "ibverbs"), allow(unused_mut))]
    let mut why: Vec<String> = plan.no_device.into_iter().collect();
    for place in plan.tries {
        // Host items are fgpu's; xbgpu's host path is the sink (--send-ibv: the ibverbs ring).
        let ItemPlace::Device(_kind) = place else {
            continue;
        };
        #[cfg(feature = "ibverbs")]
        {
            // The dumps stay staged where their baselines are permuted on the host.
            let permute = cfg.debug_permute_baselines.is_some() && !xs.is_empty();
            let dumps: &mut [XPipeline] = if permute { &mut [] } else { &mut *xs };
            match open_direct(cfg, dumps, beams.as_deref_mut(), _kind) {
                Ok(mut staged) => {
                    if permute {
                        staged.push(format!(
                            "the correlation dumps are staged through host memory: {permuted}"
                        ));
                    }
                    log_outcome("xbgpu", place, &staged);
                    return;
                }
                Err(e) => why.push(format!("GPU-memory output items: {e}")),
            }
        }
    }
    #[cfg(not(feature = "ibverbs"))]
    let _ = (&xs, &mut beams);
    log_outcome("xbgpu", ItemPlace::Staged, &why);
}

/// Device items and senders (`kind`: how the GPU memory is registered) for every
/// correlation output of `xs` (none attached unless all open) and for the beams, attached
/// to their pipelines. The beams failing where dumps go direct leaves them staged: the
/// returned notes say so. An error if nothing was attached.
#[cfg(feature = "ibverbs")]
fn open_direct(
    cfg: &XbgpuConfig,
    xs: &mut [XPipeline],
    beams: Option<&mut BPipeline>,
    kind: crate::net::send::peerdirect::GpuMrKind,
) -> std::io::Result<Vec<String>> {
    use crate::engines::common::send::{item_gpu, item_source};
    let (port, src) = item_source(&cfg.io.send_interface, cfg.io.send_ttl)?;
    let ctx = item_gpu()?;
    let nic = DirectNic {
        port: &port,
        src,
        ctx: &ctx,
        kind,
    };
    open_x_direct(cfg, xs, &nic)?;
    let mut staged = Vec::new();
    if let Some(bp) = beams {
        match open_b_direct(cfg, bp, &nic) {
            Ok(()) => {}
            Err(e) if !xs.is_empty() => {
                staged.push(format!("the beams are staged through host memory: {e}"))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(staged)
}

/// Where the device items are sent from: the RDMA port, the frames' source (address, MAC,
/// TTL), the GPU holding the items and how its memory is registered.
#[cfg(feature = "ibverbs")]
struct DirectNic<'a> {
    port: &'a crate::net::verbs::RdmaPort,
    src: crate::engines::common::send::ItemSource,
    ctx: &'a Arc<cudarc::driver::CudaContext>,
    kind: crate::net::send::peerdirect::GpuMrKind,
}

#[cfg(feature = "ibverbs")]
impl DirectNic<'_> {
    /// Opens the sender of `cfg`'s `n_items` items of `item_bytes` at the device address
    /// it is given (the items' memory, which must outlive the sender: `XDirect` and
    /// `BDirect` own both).
    fn sender(
        &self,
        cfg: crate::net::send::verbs::PeerDirectConfig,
        item_bytes: usize,
        n_items: usize,
    ) -> impl FnOnce(u64) -> std::io::Result<crate::net::send::verbs::PeerDirectSender> + '_ {
        move |addr| {
            // SAFETY: `addr` is the device items of the XDirect or BDirect being built
            // (aligned, with room to the aligned end), which outlive its sender.
            unsafe {
                crate::net::send::verbs::PeerDirectSender::open(
                    Some(&self.port.device),
                    self.port.port,
                    cfg,
                    addr,
                    item_bytes,
                    n_items,
                    self.kind,
                )
            }
        }
    }
}

/// Every correlation output's device items and sender, attached to its pipeline; none
/// attached unless all open.
#[cfg(feature = "ibverbs")]
fn open_x_direct(cfg: &XbgpuConfig, xs: &mut [XPipeline], nic: &DirectNic) -> std::io::Result<()> {
    use super::direct::{x_direct_config, XDirect};
    use crate::net::send::peerdirect::output_items_for_peerdirect;
    use crate::net::send::verbs::DeviceItems;
    let payload = cfg.io.send_packet_payload;
    let mut direct = Vec::with_capacity(xs.len());
    for (x, c) in xs.iter().zip(&cfg.corrprods) {
        let bytes = x.dump_bytes();
        let dcfg = x_direct_config(
            bytes,
            c.dst,
            x.heap_cnt(),
            payload,
            corrprod_rate(cfg, c),
            nic.src,
        );
        let n_items =
            output_items_for_peerdirect(2, dcfg.send_queue_depth, dcfg.packets_per_item());
        let mem = DeviceItems::alloc(nic.ctx, bytes * n_items)?;
        let d = XDirect::on_device(
            bytes,
            x.channel_offset(),
            mem,
            nic.sender(dcfg, bytes, n_items),
        )?;
        direct.push(Box::new(d));
    }
    for (x, d) in xs.iter_mut().zip(direct) {
        if x.with_direct(d).is_err() {
            return Err(std::io::Error::other(format!(
                "output {}'s correlator cannot dump into GPU memory",
                x.name
            )));
        }
    }
    Ok(())
}

/// The beams' device items (one batch of every beam each; enough for a chunk's batches
/// formed at once and a full send queue) and sender, attached to `bp`.
#[cfg(feature = "ibverbs")]
fn open_b_direct(cfg: &XbgpuConfig, bp: &mut BPipeline, nic: &DirectNic) -> std::io::Result<()> {
    use super::direct::{b_direct_config, BDirect};
    use crate::net::send::peerdirect::output_items_for_peerdirect;
    use crate::net::send::verbs::DeviceItems;
    if !bp.forms_to_device() {
        return Err(std::io::Error::other(
            "the beamformer cannot write into GPU memory",
        ));
    }
    let (beam_bytes, nb) = (bp.beam_bytes(), cfg.beams.len());
    let dcfg = b_direct_config(
        beam_bytes,
        cfg.beams.iter().map(|b| b.dst).collect(),
        bp.heap_cnt(),
        cfg.io.send_packet_payload,
        beam_rate(cfg),
        nic.src,
    );
    let n_items = output_items_for_peerdirect(
        2 + cfg.placement.batches_per_chunk,
        dcfg.send_queue_depth,
        dcfg.packets_per_item(),
    );
    let item_bytes = nb * beam_bytes;
    let mem = DeviceItems::alloc(nic.ctx, item_bytes * n_items)?;
    let d = BDirect::on_device(
        beam_bytes,
        nb,
        bp.channel_offset(),
        mem,
        nic.sender(dcfg, item_bytes, n_items),
    )?;
    bp.with_direct(Box::new(d))
        .map_err(|_| std::io::Error::other("the beams' items do not fit the beamformer"))
}

/// `--use-vkgdr`: receive chunks in GPU memory mapped for the CPU where the GPU backend
/// runs and the host allows (one log line either way). Decided before any chunk exists.
fn plan_chunk_memory(cfg: &XbgpuConfig) -> Option<crate::mem::vkgdr::ChunkPlace> {
    use crate::chunk::Placement;
    let chunk = cfg.placement.n_slots() as u64 * cfg.placement.slot_bytes() as u64;
    let held = cfg.io.recv_prealloc.max(cfg.io.recv_chunks + 1) as u64;
    crate::mem::vkgdr::plan(
        cfg.io.use_vkgdr,
        cfg.use_gpu,
        None,
        chunk.saturating_mul(held),
    )
}

/// Serves katcp on `--katcp-port` (7147 by default for network input: a default port
/// that is taken only warns; an explicit one that is taken is an error).
fn serve_katcp(
    cfg: &XbgpuConfig,
    device: Arc<XbDevice>,
) -> anyhow::Result<Option<crate::control::Server>> {
    let Some(addr) = cfg.katcp else {
        return Ok(None);
    };
    match crate::control::Server::start(addr.into(), device) {
        Ok(s) => Ok(Some(s)),
        Err(e) if !cfg.katcp_required => {
            tracing::warn!(port = addr.port(), error = %e, "katcp port unavailable; running without katcp (give --katcp-port)");
            Ok(None)
        }
        Err(e) => Err(listen_error("--katcp-port", addr)(e).into()),
    }
}

/// Re-sends every output's descriptors every 5 s while the engine runs (live UDP output
/// only), whatever the capture state, as katgpucbf's xbgpu.
fn resend_descriptors(
    cfg: &XbgpuConfig,
) -> std::io::Result<Option<crate::engines::common::descriptors::DescriptorLoop>> {
    use crate::engines::common::descriptors::{start, DescribedOutput};
    if cfg.io.send_pcap.is_some() {
        return Ok(None);
    }
    let (cps, n) = (cfg.channels_per_substream(), cfg.n_ants());
    let mut outputs: Vec<DescribedOutput> = cfg
        .corrprods
        .iter()
        .map(|c| DescribedOutput {
            dsts: vec![c.dst],
            descriptors: x_descriptors(cps, n),
        })
        .collect();
    if !cfg.beams.is_empty() {
        outputs.push(DescribedOutput {
            dsts: cfg.beams.iter().map(|b| b.dst).collect(),
            descriptors: beam_descriptors(cps, cfg.spectra_per_heap()),
        });
    }
    let sink = cfg.io.open_descriptor_sink()?;
    let five = std::time::Duration::from_secs(5);
    let lp = start(
        sink,
        outputs,
        five,
        five,
        (cfg.channel_offset / cps) as u64,
        (cfg.channels / cps) as u64,
        cfg.io.send_packet_payload,
    )?;
    Ok(Some(lp))
}

/// The send rate for `rate` bytes/s of nominal output: × --send-rate-factor, none (unpaced)
/// for 0.
fn paced(cfg: &XbgpuConfig, rate: f64) -> Option<f64> {
    (cfg.send_rate_factor > 0.0).then_some(rate * cfg.send_rate_factor)
}

/// A heap sender from this engine (heap counters step by the number of engines) to `dst`,
/// paced at `rate` bytes/s, with `descriptors` sent.
fn sender(
    cfg: &XbgpuConfig,
    sink: &SharedSink,
    dst: Vec<std::net::SocketAddrV4>,
    rate: Option<f64>,
    descriptors: &[crate::spead::Descriptor],
) -> std::io::Result<HeapSender> {
    let cps = cfg.channels_per_substream();
    let engines = (cfg.channels / cps) as u64;
    let cnt0 = (cfg.channel_offset / cps) as u64;
    let mut s = HeapSender::new(
        Box::new(sink.clone()),
        dst,
        cnt0,
        engines,
        cfg.io.send_packet_payload,
        rate,
    );
    s.send_descriptors(descriptors, 8872)?;
    Ok(s)
}

/// Every `--corrprod` output, with its `chan-range` sensor; its sending switch joins
/// `streams`.
fn corrprod_outputs(
    cfg: &XbgpuConfig,
    sink: &SharedSink,
    sensors: &SensorSet,
    streams: &mut Vec<(String, Arc<CaptureGate>)>,
) -> anyhow::Result<Vec<XPipeline>> {
    let mut xs = Vec::new();
    for c in &cfg.corrprods {
        let x = corrprod_output(cfg, sink, c)?;
        let (first, cps) = (cfg.channel_offset, cfg.channels_per_substream());
        let name = format!("{}.chan-range", c.name);
        let range = format!("({},{})", first, first + cps - 1);
        sensors.add(
            &name,
            "Channels of this engine",
            "",
            SensorType::String,
            &range,
        );
        sensors.set(&name, range, crate::control::Status::Nominal);
        streams.push((c.name.clone(), x.enabled.clone()));
        xs.push(x);
    }
    Ok(xs)
}

/// The send rate of a correlation output: one dump per accumulation (headers counted),
/// × --send-rate-factor; None: unpaced.
fn corrprod_rate(cfg: &XbgpuConfig, c: &CorrprodSpec) -> Option<f64> {
    let heap_bytes = cfg.shape.output_len() * 4;
    let interval =
        (c.heap_accumulation_threshold * cfg.placement.batch_step()) as f64 / cfg.adc_sample_rate;
    // Two immediates: timestamp, frequency.
    let header = crate::spead::data_header_len(2) as f64;
    let rate = heap_bytes as f64 * (1.0 + header / cfg.io.send_packet_payload as f64) / interval;
    paced(cfg, rate)
}

/// One correlation output: its sender paced at one dump per accumulation, its correlator.
fn corrprod_output(
    cfg: &XbgpuConfig,
    sink: &SharedSink,
    c: &CorrprodSpec,
) -> anyhow::Result<XPipeline> {
    let shape = cfg.shape;
    let batch_step = cfg.placement.batch_step();
    let (n, cps) = (cfg.n_ants(), cfg.channels_per_substream());
    let interval = (c.heap_accumulation_threshold * batch_step) as f64 / cfg.adc_sample_rate;
    let sender = sender(
        cfg,
        sink,
        vec![c.dst],
        corrprod_rate(cfg, c),
        &x_descriptors(cps, n),
    )?;
    let mut corr: Box<dyn super::backend::Correlator> =
        Box::new(Corr(make_backend(cfg.use_gpu, shape)?));
    if let Some(after) = cfg.debug_fail_compute_after {
        corr = Box::new(super::backend::FailAfter {
            inner: corr,
            after,
            taken: 0,
        });
    }
    let mut x = XPipeline::new(
        &c.name,
        corr,
        sender,
        c.heap_accumulation_threshold,
        batch_step,
        cfg.channel_offset as u64,
        n,
        cps,
        c.send_enabled.unwrap_or(false),
    );
    x.debug_permute = cfg.debug_permute_baselines;
    info!(stream = %c.name, dump_seconds = interval, "corrprod output ready");
    Ok(x)
}

/// The beam set of every `--beam` (unit weights, no delay), with their sensors.
fn beam_set(cfg: &XbgpuConfig, sensors: &SensorSet) -> BeamSet {
    let n = cfg.n_ants();
    let mut set = BeamSet {
        beams: Vec::new(),
        channel_offset: cfg.channel_offset,
        n_channels_total: cfg.channels,
        bandwidth: cfg.bandwidth,
        dither: true,
        seed: rand::random(),
    };
    for b in &cfg.beams {
        set.dither &= b.dither;
        set.beams.push(Beam {
            pol: b.pol,
            quant_gain: 1.0,
            weights: vec![1.0; n],
            delays: vec![0.0; n],
            phases: vec![0.0; n],
        });
        // Upstream's initial values: unit weights, gain 1, zero delays (T = 0).
        let zeros = vec!["0.0"; 2 * n].join(", ");
        let (first, cps) = (cfg.channel_offset, cfg.channels_per_substream());
        for (k, d, t, v) in [
            (
                "weight",
                "Antenna weights",
                SensorType::String,
                format!("{:?}", vec![1.0f32; n]),
            ),
            (
                "quantiser-gain",
                "Quantiser gain",
                SensorType::Float,
                "1.0".to_string(),
            ),
            (
                "delay",
                "Delays and phases: (T, delay0, phase0, delay1, phase1, ...)",
                SensorType::String,
                format!("(0, {zeros})"),
            ),
            (
                "chan-range",
                "Channels of this engine",
                SensorType::String,
                format!("({},{})", first, first + cps - 1),
            ),
            (
                "dither-seed",
                "Dither seed (shared by the beams of this engine)",
                SensorType::String,
                set.seed.to_string(),
            ),
        ] {
            let name = format!("{}.{k}", b.name);
            sensors.add(&name, d, "", t, &v);
            sensors.set(&name, v, crate::control::Status::Nominal);
        }
    }
    set
}

/// The send rate of the beams (all of them): one heap per beam per batch (headers
/// counted), × --send-rate-factor; None: unpaced.
fn beam_rate(cfg: &XbgpuConfig) -> Option<f64> {
    let beam_bytes = cfg.channels_per_substream() * cfg.spectra_per_heap() * 2;
    // Three immediates: timestamp, frequency, beam_ants.
    let header = crate::spead::data_header_len(3) as f64;
    let rate = cfg.beams.len() as f64
        * beam_bytes as f64
        * (1.0 + header / cfg.io.send_packet_payload as f64)
        / (cfg.placement.batch_step() as f64 / cfg.adc_sample_rate);
    paced(cfg, rate)
}

/// The beams (none without `--beam`): one sender for all, paced at their data rate, and
/// the beamformer reading `set`; their sending switches join `streams`.
fn beam_output(
    cfg: &XbgpuConfig,
    sink: &SharedSink,
    set: &Arc<Mutex<BeamSet>>,
    streams: &mut Vec<(String, Arc<CaptureGate>)>,
) -> anyhow::Result<Option<BPipeline>> {
    if cfg.beams.is_empty() {
        return Ok(None);
    }
    let (cps, sph) = (cfg.channels_per_substream(), cfg.spectra_per_heap());
    let batch_step = cfg.placement.batch_step();
    let names: Vec<String> = cfg.beams.iter().map(|b| b.name.clone()).collect();
    let dsts = cfg.beams.iter().map(|b| b.dst).collect();
    let beam_bytes = cps * sph * 2;
    let sender = sender(cfg, sink, dsts, beam_rate(cfg), &beam_descriptors(cps, sph))?;
    let bf = Beams::new(
        make_backend(cfg.use_gpu, cfg.shape)?,
        set.clone(),
        batch_step,
    )
    .with_dither(cfg.beams.iter().map(|b| b.dither).collect());
    let core = cfg.io.send_cores()?.first().copied().flatten();
    let bp = BPipeline::new(
        &names,
        Box::new(bf),
        sender,
        cfg.channel_offset as u64,
        beam_bytes,
        false,
    )
    .with_send_thread(core)?;
    for ((name, e), b) in names.iter().zip(&bp.enabled).zip(&cfg.beams) {
        if b.send_enabled.unwrap_or(false) {
            e.start(0);
        } else {
            e.stop();
        }
        streams.push((name.clone(), e.clone()));
    }
    Ok(Some(bp))
}
