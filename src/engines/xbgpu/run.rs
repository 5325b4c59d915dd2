//! `gpucbf xbgpu`: builds the outputs from the command line on the chosen backend, serves
//! katcp (capture-start/stop, beam weights, delays and gains) and runs the engine.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tracing::info;

use super::config::{parse_beam, parse_corrprod, XbgpuArgs};
use super::engine::{
    run_pipelines, x_descriptors, BPipeline, Beamformer, Correlator, XPipeline, XbgpuSummary,
};
use crate::chunk::placement::FengPlacement;
use crate::compute::xengine::{Beam, BeamSet, CpuX, GpuX, XBackend, XShape};
use crate::control::{Device, SensorSet, SensorType, Status};
use crate::engines::common::recv::open_source_with;
use crate::engines::common::send::open_sink;
use crate::net::send::heap::HeapSender;
use crate::net::SharedSink;
use crate::spead::{ids, Descriptor};

struct Corr(Box<dyn XBackend + Send>);

impl Correlator for Corr {
    fn accumulate(&mut self, batch: &[i8]) -> Result<(), String> {
        self.0.accumulate(batch).map_err(|e| e.to_string())
    }

    fn dump(&mut self, present: &[bool], out: &mut [i32]) -> Result<u64, String> {
        self.0.dump(present, out).map_err(|e| e.to_string())
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
        }
    }

    fn beam_set(&self) -> Result<BeamSet, String> {
        Ok(self
            .set
            .lock()
            .map_err(|_| "beam set lock poisoned")?
            .clone())
    }
}

impl Beamformer for Beams {
    fn beamform_chunk(
        &mut self,
        ts: &[u64],
        data: &[i8],
        present: &[bool],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<Vec<u64>>, String> {
        let set = self.beam_set()?;
        let per = self.backend.shape().beam_output_len(set.beams.len());
        let nb = set.beams.len();
        if out.len() != ts.len() * nb {
            return Err(format!(
                "beamformer chunk: {} outputs for {} batches of {nb} beams",
                out.len(),
                ts.len()
            ));
        }
        self.flat.resize(ts.len() * per, 0);
        let idx: Vec<u64> = ts.iter().map(|&t| t / self.batch_step).collect();
        let stats = self
            .backend
            .beamform_batches(data, present, &set, &idx, &mut self.flat)
            .map_err(|e| e.to_string())?;
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
    ) -> Result<Vec<u64>, String> {
        let set = self.beam_set()?;
        self.flat
            .resize(self.backend.shape().beam_output_len(set.beams.len()), 0);
        let stats = self
            .backend
            .beamform(
                batch,
                present,
                &set,
                batch_ts / self.batch_step,
                &mut self.flat,
            )
            .map_err(|e| e.to_string())?;
        let per = self.flat.len() / out.len().max(1);
        for (b, o) in out.iter_mut().enumerate() {
            o.copy_from_slice(&self.flat[b * per..(b + 1) * per]);
        }
        Ok(stats.saturated)
    }
}

fn backend(kind: &str, shape: XShape) -> anyhow::Result<Box<dyn XBackend + Send>> {
    Ok(if crate::engines::common::cli::use_gpu(kind, true)? {
        Box::new(GpuX::new(shape).map_err(|e| anyhow::anyhow!("GPU backend: {e}"))?)
    } else {
        Box::new(CpuX::new(shape))
    })
}

/// xbgpu's katcp interface.
struct XbDevice {
    sensors: SensorSet,
    outputs: Vec<(String, Arc<AtomicBool>)>,
    beams: Vec<String>,
    set: Arc<Mutex<BeamSet>>,
    n_ants: usize,
}

impl XbDevice {
    fn output(&self, name: Option<&String>) -> Result<&Arc<AtomicBool>, String> {
        let name = name.ok_or("which stream?")?;
        self.outputs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| e)
            .ok_or_else(|| format!("unknown stream {name:?}"))
    }

    fn beam(&self, name: Option<&String>) -> Result<usize, String> {
        let name = name.ok_or("which beam?")?;
        self.beams
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| format!("unknown beam {name:?}"))
    }

    fn floats(&self, args: &[String]) -> Result<Vec<f64>, String> {
        let v = args
            .iter()
            .map(|a| {
                a.parse::<f64>()
                    .map_err(|_| format!("{a:?} is not a number"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if v.iter().any(|x| !x.is_finite()) {
            return Err("values must be finite".into());
        }
        Ok(v)
    }
}

impl Device for XbDevice {
    fn api_version(&self) -> String {
        "katgpucbf-xbgpu-1.0".into()
    }

    fn requests(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            (
                "capture-start",
                "Start transmitting a stream: ?capture-start stream",
            ),
            (
                "capture-stop",
                "Stop transmitting a stream: ?capture-stop stream",
            ),
            (
                "beam-weights",
                "Set a beam's antenna weights: ?beam-weights beam w0 … w(n−1)",
            ),
            (
                "beam-delays",
                "Set a beam's delays and phases: ?beam-delays beam d0:φ0 … (seconds:radians)",
            ),
            (
                "beam-quant-gains",
                "Set a beam's quantisation gain: ?beam-quant-gains beam g",
            ),
        ]
    }

    fn request(&self, name: &str, args: &[String]) -> Result<Vec<String>, String> {
        match name {
            "capture-start" | "capture-stop" => {
                if args.len() > 2 {
                    return Err(format!("usage: ?{name} stream"));
                }
                let e = self.output(args.first())?;
                e.store(name == "capture-start", Ordering::Relaxed);
                Ok(vec![])
            }
            "beam-weights" => {
                let b = self.beam(args.first())?;
                let w = self.floats(&args[1..])?;
                if w.len() != self.n_ants {
                    return Err(format!(
                        "{} weights given, {} antennas",
                        w.len(),
                        self.n_ants
                    ));
                }
                let mut set = self.set.lock().map_err(|_| "lock poisoned")?;
                set.beams[b].weights = w;
                self.sensors.set(
                    &format!("{}.weight", self.beams[b]),
                    format!("{:?}", set.beams[b].weights),
                    Status::Nominal,
                );
                Ok(vec![])
            }
            "beam-quant-gains" => {
                let b = self.beam(args.first())?;
                let g = self.floats(&args[1..])?;
                if g.len() != 1 {
                    return Err("give one gain".into());
                }
                self.set.lock().map_err(|_| "lock poisoned")?.beams[b].quant_gain = g[0];
                self.sensors.set(
                    &format!("{}.quantiser-gain", self.beams[b]),
                    g[0],
                    Status::Nominal,
                );
                Ok(vec![])
            }
            "beam-delays" => {
                let b = self.beam(args.first())?;
                if args.len() - 1 != self.n_ants {
                    return Err(format!(
                        "{} delays given, {} antennas",
                        args.len() - 1,
                        self.n_ants
                    ));
                }
                let mut d = Vec::new();
                let mut p = Vec::new();
                for a in &args[1..] {
                    let (x, y) = a
                        .split_once(':')
                        .ok_or_else(|| format!("{a:?}: expected delay:phase"))?;
                    let v = self.floats(&[x.to_string(), y.to_string()])?;
                    d.push(v[0]);
                    p.push(v[1]);
                }
                let mut set = self.set.lock().map_err(|_| "lock poisoned")?;
                set.beams[b].delays = d;
                set.beams[b].phases = p;
                self.sensors.set(
                    &format!("{}.delay", self.beams[b]),
                    args[1..].join(" "),
                    Status::Nominal,
                );
                Ok(vec![])
            }
            _ => Err(format!("unknown request {name}")),
        }
    }

    fn sensors(&self) -> &SensorSet {
        &self.sensors
    }
}

fn beam_descriptors(cps: usize, sph: usize) -> Vec<Descriptor> {
    let u48 = [('u', 48)];
    vec![
        Descriptor::with_format(
            ids::TIMESTAMP,
            "timestamp",
            "Timestamp of the first spectrum, in ADC samples.",
            &[],
            &u48,
        ),
        Descriptor::with_format(
            ids::FREQUENCY,
            "frequency",
            "Identifies the first channel in the band of frequencies in the SPEAD heap.",
            &[],
            &u48,
        ),
        Descriptor::with_format(
            ids::BEAM_ANTS,
            "beam_ants",
            "Number of antennas present in the sum.",
            &[],
            &u48,
        ),
        Descriptor::with_dtype(
            ids::BF_RAW,
            "bf_raw",
            "Beamformer output for the frequency range.",
            &[cps as u64, sph as u64, 2],
            "|i1",
        ),
    ]
}

/// Runs `gpucbf xbgpu`.
pub fn run(args: &XbgpuArgs) -> anyhow::Result<XbgpuSummary> {
    crate::control::shutdown::install();
    args.validate().map_err(anyhow::Error::msg)?;
    if !(args.adc_sample_rate.is_finite() && args.adc_sample_rate > 0.0) {
        anyhow::bail!("--adc-sample-rate must be positive");
    }
    let n = args.array_size;
    let cps = args.channels_per_substream;
    let sph = args.spectra_per_heap();
    let shape = XShape::new(n, cps, sph)
        .and_then(|s| s.with_sample_bits(args.sample_bits))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let placement = FengPlacement {
        n_ants: n,
        channels_per_substream: cps,
        spectra_per_heap: sph,
        sample_bits: args.sample_bits,
        samples_between_spectra: args.samples_between_spectra,
        batches_per_chunk: args.heaps_per_fengine_per_chunk,
    };
    let batch_step = placement.batch_step();
    let sink = SharedSink::new(open_sink(
        args.send_pcap.as_deref(),
        args.send_interface,
        args.send_ttl,
    )?);
    let engines = (args.channels / cps) as u64;
    let cnt0 = (args.channel_offset_value / cps) as u64;
    let sensors = SensorSet::default();
    let mut outputs = Vec::new();
    let mut xs = Vec::new();
    for spec in &args.corrprod {
        let c = parse_corrprod(spec).map_err(|e| anyhow::anyhow!("--corrprod {spec}: {e}"))?;
        let heap_bytes = shape.output_len() * 4;
        let interval = (c.heap_accumulation_threshold * batch_step) as f64 / args.adc_sample_rate;
        let rate =
            heap_bytes as f64 * (1.0 + 64.0 / args.send_packet_payload as f64) / interval * 1.1;
        let mut sender = HeapSender::new(
            Box::new(sink.clone()),
            vec![c.dst],
            cnt0,
            engines,
            args.send_packet_payload,
            Some(rate),
        );
        sender.send_descriptors(&x_descriptors(cps, n), 8872)?;
        let corr = Box::new(Corr(backend(&args.backend, shape)?));
        let x = XPipeline::new(
            &c.name,
            corr,
            sender,
            c.heap_accumulation_threshold,
            batch_step,
            args.channel_offset_value as u64,
            n,
            cps,
            args.send_enabled,
        );
        sensors.add(
            &format!("{}.chan-range", c.name),
            "Channels of this engine",
            "",
            SensorType::String,
            &format!(
                "({},{})",
                args.channel_offset_value,
                args.channel_offset_value + cps - 1
            ),
        );
        outputs.push((c.name.clone(), x.enabled.clone()));
        info!(stream = %c.name, dump_seconds = interval, "corrprod output ready");
        xs.push(x);
    }
    let mut beam_names = Vec::new();
    let set = Arc::new(Mutex::new(BeamSet {
        beams: Vec::new(),
        channel_offset: args.channel_offset_value,
        n_channels_total: args.channels,
        bandwidth: args.adc_sample_rate / args.samples_between_spectra as f64
            * args.channels as f64,
        dither: true,
        seed: rand::random(),
    }));
    let mut beam_dsts = Vec::new();
    for spec in &args.beam {
        let b = parse_beam(spec).map_err(|e| anyhow::anyhow!("--beam {spec}: {e}"))?;
        let mut s = set.lock().map_err(|_| anyhow::anyhow!("lock"))?;
        s.dither &= b.dither;
        s.beams.push(Beam {
            pol: b.pol,
            quant_gain: 1.0,
            weights: vec![1.0; n],
            delays: vec![0.0; n],
            phases: vec![0.0; n],
        });
        for (k, d) in [
            ("weight", "Antenna weights"),
            ("quantiser-gain", "Quantiser gain"),
            ("delay", "Delays and phases"),
        ] {
            sensors.add(&format!("{}.{k}", b.name), d, "", SensorType::String, "");
        }
        beam_names.push(b.name.clone());
        beam_dsts.push(b.dst);
    }
    let beams = if beam_names.is_empty() {
        None
    } else {
        let beam_bytes = cps * sph * 2;
        let rate = beam_names.len() as f64
            * beam_bytes as f64
            * (1.0 + 72.0 / args.send_packet_payload as f64)
            / (batch_step as f64 / args.adc_sample_rate)
            * 1.1;
        let mut sender = HeapSender::new(
            Box::new(sink.clone()),
            beam_dsts,
            cnt0,
            engines,
            args.send_packet_payload,
            Some(rate),
        );
        sender.send_descriptors(&beam_descriptors(cps, sph), 8872)?;
        let bf = Beams::new(backend(&args.backend, shape)?, set.clone(), batch_step);
        let bp = BPipeline::new(
            &beam_names,
            Box::new(bf),
            sender,
            args.channel_offset_value as u64,
            beam_bytes,
            args.send_enabled,
        );
        for (nm, e) in beam_names.iter().zip(&bp.enabled) {
            outputs.push((nm.clone(), e.clone()));
        }
        Some(bp)
    };
    let _server = match args.katcp_port {
        Some(p) => {
            let dev = XbDevice {
                sensors,
                outputs,
                beams: beam_names,
                set,
                n_ants: n,
            };
            Some(crate::control::Server::start(
                ([0, 0, 0, 0], p).into(),
                Arc::new(dev),
            )?)
        }
        None => None,
    };
    let src = open_source_with(
        &args.src,
        &crate::engines::common::recv::RecvOptions {
            interface: Some(args.recv_interface),
            dpdk: args.recv_dpdk.as_deref(),
            ibv: args.recv_ibv,
        },
    )?;
    let _transmit = crate::net::send::peerdirect::plan(args.use_peerdirect);
    let metrics = crate::telemetry::metrics::Metrics::new("xbgpu");
    let recv_metrics = crate::telemetry::recv::RecvMetrics::new(
        &metrics,
        crate::telemetry::recv::RecvFlavour::Feng,
    );
    let m_x = metrics.counter_family("output_x_heaps", "Correlation heaps transmitted");
    let m_xbytes =
        metrics.counter_family("output_x_bytes", "Correlation payload bytes transmitted");
    let m_xvis = metrics.counter_family("output_x_visibilities", "Visibilities transmitted");
    let m_unsent = metrics.counter_family(
        "output_x_unsent_accs",
        "Accumulations not sent: output stopped (?capture-stop)",
    );
    let m_xclip = metrics.counter_family("output_x_clipped_visibilities", "Saturated visibilities");
    let m_skip = metrics.counter_family(
        "output_x_skipped_accs",
        "Accumulations not sent: no antenna present",
    );
    let m_inc = metrics.counter_family(
        "output_x_incomplete_accs",
        "Accumulations sent with MISSING markers",
    );
    let m_b = metrics.counter_family("output_b_heaps", "Beam heaps transmitted");
    let m_bbytes = metrics.counter_family("output_b_bytes", "Beam payload bytes transmitted");
    let m_bsamples = metrics.counter_family("output_b_samples", "Beam complex samples transmitted");
    let m_bclip = metrics.counter_family("output_b_clipped_samples", "Saturated beam samples");
    let m_bskip = metrics.counter_family(
        "output_b_skipped_heaps",
        "Beam heaps not sent: no antenna present",
    );
    if let Some(p) = args.prometheus_port {
        let bound = metrics.serve(([0, 0, 0, 0], p).into())?;
        info!(%bound, "prometheus metrics at /metrics");
    }
    let mut seen_x: Vec<super::engine::XStats> = Vec::new();
    let mut seen_b: Vec<super::engine::BStats> = Vec::new();
    let mut hook = move |xs: &[XPipeline], bp: Option<&BPipeline>| {
        use crate::telemetry::metrics::labels;
        seen_x.resize(xs.len(), Default::default());
        for (x, seen) in xs.iter().zip(seen_x.iter_mut()) {
            let s = &x.stats;
            let l = labels(&[("stream", &s.name)]);
            m_x.get_or_create(&l).inc_by(s.heaps - seen.heaps);
            m_xbytes.get_or_create(&l).inc_by(s.bytes - seen.bytes);
            m_xvis
                .get_or_create(&l)
                .inc_by(s.visibilities - seen.visibilities);
            m_unsent
                .get_or_create(&l)
                .inc_by(s.unsent_accs - seen.unsent_accs);
            m_xclip
                .get_or_create(&l)
                .inc_by(s.clipped_visibilities - seen.clipped_visibilities);
            m_skip
                .get_or_create(&l)
                .inc_by(s.skipped_accs - seen.skipped_accs);
            m_inc
                .get_or_create(&l)
                .inc_by(s.incomplete_accs - seen.incomplete_accs);
            *seen = s.clone();
        }
        if let Some(bp) = bp {
            seen_b.resize(bp.stats.len(), Default::default());
            for (s, seen) in bp.stats.iter().zip(seen_b.iter_mut()) {
                let l = labels(&[("stream", &s.name)]);
                m_b.get_or_create(&l).inc_by(s.heaps - seen.heaps);
                m_bbytes.get_or_create(&l).inc_by(s.bytes - seen.bytes);
                // One byte per real value: complex samples are half the payload.
                m_bsamples
                    .get_or_create(&l)
                    .inc_by((s.bytes - seen.bytes) / 2);
                m_bclip
                    .get_or_create(&l)
                    .inc_by(s.clipped_samples - seen.clipped_samples);
                m_bskip
                    .get_or_create(&l)
                    .inc_by(s.skipped_heaps - seen.skipped_heaps);
                *seen = s.clone();
            }
        }
    };
    run_pipelines(
        src,
        placement,
        xs,
        beams,
        &mut hook,
        recv_metrics.into_monitor(),
    )
}
