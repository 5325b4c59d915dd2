//! The loopback array the checks run against: the XB-engine(s) (correlation products and
//! beams, sending only after `?capture-start`, as the controller starts them), one
//! F-engine per antenna and one dsim per antenna (a digitiser's two pols, as a telescope
//! has them, so that each sending thread carries one antenna's rate), each a `gpucbf` process with its katcp
//! port on 127.0.0.1, started and stopped with the array's process helpers.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use crate::apps::array::plan::{xbgpu_shape_args, EngineCores, Placement, Sizes};
use crate::apps::array::procs::{child, stop_all, wait_json, wait_ready, Proc};
use crate::spead::ids;

use super::recv::Receiver;
use super::{DebugBreak, QualifyArgs};

/// Beams: three of pol 0 and one of pol 1 (katgpucbf's `tied-array-channelised-voltage`
/// names).
pub const BEAMS: [(&str, usize); 4] = [
    ("tied-array-channelised-voltage-0x", 0),
    ("tied-array-channelised-voltage-1x", 0),
    ("tied-array-channelised-voltage-2x", 0),
    ("tied-array-channelised-voltage-0y", 1),
];

/// The wideband output's name and correlation-product stream.
pub const WIDEBAND: &str = "wideband";
/// The correlation-product stream of the wideband output.
pub const BCP: &str = "baseline-correlation-products";
/// The narrowband output's name.
pub const NARROWBAND: &str = "narrowband";
/// katgpucbf's narrowband centre as a fraction of the ADC rate (3456789 / 2^24).
pub const NB_CENTRE_FRACTION: f64 = 3456789.0 / 16777216.0;
/// Narrowband decimation.
pub const NB_DECIMATION: usize = 8;
/// dsim replay period (samples): tone frequencies are multiples of adc_rate / period.
pub const DSIM_PERIOD: u64 = 1 << 20;

/// Shape of one correlator stream.
#[derive(Debug, Clone)]
pub struct StreamShape {
    /// fgpu output name.
    pub output: String,
    /// Its correlation-product stream name.
    pub corrprod: String,
    /// Channels.
    pub channels: usize,
    /// ADC samples between spectra.
    pub spectrum_step: u64,
    /// Spectra per batch (per heap).
    pub spectra_per_heap: u64,
    /// Batches per dump.
    pub dump_batches: u64,
    /// Frequency of channel k: `f0 + k · df` (Hz, baseband).
    pub f0: f64,
    /// Channel spacing (Hz).
    pub df: f64,
    /// Decimation (1: wideband).
    pub decimation: usize,
    /// Batches per XB-engine input chunk.
    pub chunk_batches: u64,
}

impl StreamShape {
    /// ADC samples per dump.
    pub fn acc_step(&self) -> u64 {
        self.dump_batches * self.spectra_per_heap * self.spectrum_step
    }

    /// Spectra accumulated per dump.
    pub fn acc_len(&self) -> u64 {
        self.dump_batches * self.spectra_per_heap
    }

    /// Centre frequency of channel k.
    pub fn freq(&self, k: f64) -> f64 {
        self.f0 + k * self.df
    }
}

/// The running array: its processes, and what the checks use.
pub struct Array {
    /// The XB-engine(s), F-engines and dsims.
    pub procs: Procs,
    /// Addresses, receivers, shapes.
    pub io: Io,
}

/// The array's processes.
pub struct Procs(Vec<Proc>);

/// The array's katcp addresses, receivers and stream shapes.
pub struct Io {
    /// The dsims' katcp addresses (one per antenna).
    pub dsim_katcp: Vec<SocketAddr>,
    /// The F-engines' katcp addresses.
    pub fgpu_katcp: Vec<SocketAddr>,
    /// The XB-engines' katcp addresses (wideband, then narrowband).
    pub xb_katcp: Vec<SocketAddr>,
    /// Correlation-product receivers (wideband, then narrowband).
    pub corrprods: Vec<Receiver>,
    /// Beam receivers, in [`BEAMS`] order.
    pub beams: Vec<Receiver>,
    /// The correlator streams' shapes (wideband, then narrowband).
    pub shapes: Vec<StreamShape>,
    /// Sync time (UNIX s).
    pub sync_time: f64,
    /// Beam heaps: spectra per heap.
    pub beam_spectra_per_heap: usize,
}

fn local(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
}

impl Array {
    /// Starts the array (the receivers first, then the XB-engines, the F-engines, and once
    /// they are ready the dsim).
    pub fn start(args: &QualifyArgs) -> anyhow::Result<Array> {
        let (n, c, fs) = (args.antennas, args.channels, args.adc_sample_rate);
        let exe = std::env::current_exe()?;
        let sizes = Sizes::for_rate(fs, c);
        // At the scaled rate, smaller batches than the array's give an integration time
        // within 4 % of the requested one.
        let jones = if sizes.real_rate {
            sizes.jones_per_batch
        } else {
            (1usize << 16).max(c * 32)
        };
        let recv_chunk = if sizes.real_rate {
            sizes.recv_chunk_samples
        } else {
            (4 * jones) as u64
        };
        let base = args.base_port;
        // UDP: the F-engines' inputs (2 per antenna), the XB-engines' inputs, their
        // outputs, the beams. TCP: katcp of the XB-engines, the F-engines, the dsims.
        let f_in = |a: usize, p: usize| local(base + (2 * a + p) as u16);
        let x_in = |k: usize| local(base + 40 + k as u16);
        let x_out = |k: usize| local(base + 42 + k as u16);
        let beam_out = |b: usize| local(base + 44 + b as u16);
        let dsim_katcp = |a: usize| local(base + 100 + a as u16);
        let xb_katcp = |k: usize| local(base + 61 + k as u16);
        let f_katcp = |a: usize| local(base + 70 + a as u16);
        // `--prometheus`: each engine's metrics port, logged once.
        let metrics = |name: &str, port: u16| -> Vec<String> {
            if !args.prometheus {
                return Vec::new();
            }
            tracing::info!("prometheus: {name} at http://127.0.0.1:{port}/metrics");
            ["--prometheus-host", "127.0.0.1", "--prometheus-port"]
                .iter()
                .map(|v| v.to_string())
                .chain([port.to_string()])
                .collect()
        };
        let sync = (unix_now()? - 1.0).floor();
        let logs = args.output.join("logs");
        let s = |v: &str| v.to_string();
        let backend = args.backend.name().to_string();
        let mut shapes = vec![StreamShape {
            output: WIDEBAND.into(),
            corrprod: BCP.into(),
            channels: c,
            spectrum_step: 2 * c as u64,
            spectra_per_heap: (jones / c) as u64,
            dump_batches: 0,
            f0: 0.0,
            df: fs / (2 * c) as f64,
            decimation: 1,
            chunk_batches: sizes.heaps_per_fengine_per_chunk as u64,
        }];
        if args.narrowband {
            let d = NB_DECIMATION;
            let bw = fs / 2.0 / d as f64;
            shapes.push(StreamShape {
                output: NARROWBAND.into(),
                corrprod: format!("{NARROWBAND}-{BCP}"),
                channels: c,
                spectrum_step: (2 * c * d) as u64,
                spectra_per_heap: (jones / c) as u64,
                dump_batches: 0,
                f0: fs * NB_CENTRE_FRACTION - bw / 2.0,
                df: bw / c as f64,
                decimation: d,
                chunk_batches: sizes.heaps_per_fengine_per_chunk as u64,
            });
        }
        for sh in &mut shapes {
            let batch = (sh.spectra_per_heap * sh.spectrum_step) as f64 / fs;
            sh.dump_batches = ((args.int_time / batch).round() as u64).max(1);
        }
        let mut corrprods = Vec::new();
        for k in 0..shapes.len() {
            corrprods.push(Receiver::start(x_out(k), ids::XENG_RAW, None)?);
        }
        let beams = (0..BEAMS.len())
            .map(|b| Receiver::start(beam_out(b), ids::BF_RAW, Some(n as u64)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let pins = Pins::new(
            sizes.real_rate,
            &crate::net::affinity::available_cores().0,
            n,
            shapes.len(),
        );
        for line in pins.lines() {
            tracing::info!("{line}");
        }
        // The F-engines and every unpinned thread stay off the pinned cores (engines
        // inherit this thread's mask), as the array does.
        let spare = pins.spare(&crate::net::affinity::available_cores().0);
        if !spare.is_empty() {
            if let Err(e) = crate::net::affinity::set_current_thread_cores(&spare) {
                tracing::warn!(error = %e, "the F-engines may run on pinned cores");
            }
        }
        let mut procs = Vec::new();
        let started = (|| -> anyhow::Result<()> {
            for (k, sh) in shapes.iter().enumerate() {
                let name = if k == 0 { "xbgpu" } else { "xbgpu-nb" };
                let mut a = vec![
                    s("xbgpu"),
                    s("--adc-sample-rate"),
                    fs.to_string(),
                    s("--sync-time"),
                    sync.to_string(),
                    s("--array-size"),
                    n.to_string(),
                ];
                a.extend(xbgpu_shape_args(
                    c,
                    c,
                    None,
                    sh.spectrum_step,
                    jones,
                    sizes.heaps_per_fengine_per_chunk,
                ));
                a.extend([
                    s("--corrprod"),
                    format!(
                        "name={},dst={},heap_accumulation_threshold={}",
                        sh.corrprod,
                        x_out(k),
                        sh.dump_batches
                    ),
                    s("--katcp-host"),
                    s("127.0.0.1"),
                    s("--katcp-port"),
                    xb_katcp(k).port().to_string(),
                    s("--backend"),
                    backend.clone(),
                ]);
                if k == 0 {
                    for (b, (bname, pol)) in BEAMS.iter().enumerate() {
                        a.push(s("--beam"));
                        a.push(format!("name={bname},dst={},pol={pol}", beam_out(b)));
                    }
                    if args.debug_break == Some(DebugBreak::Baselines) {
                        a.push(s("--debug-permute-baselines"));
                        a.push(s("1,2"));
                    }
                }
                a.extend(sizes.xbgpu_recv.iter().cloned());
                a.extend(pins.xb(k));
                a.extend(metrics(name, base + 130 + k as u16));
                a.push(x_in(k).to_string());
                procs.push(child(name, &exe, &a, &logs.join(format!("{name}.log")))?);
            }
            for ant in 0..n {
                let name = format!("fgpu{ant}");
                let mut a = vec![
                    s("fgpu"),
                    s("--adc-sample-rate"),
                    fs.to_string(),
                    s("--sync-time"),
                    sync.to_string(),
                    s("--feng-id"),
                    ant.to_string(),
                    s("--array-size"),
                    n.to_string(),
                    s("--wideband"),
                    format!(
                        "name={WIDEBAND},channels={c},dst={},jones_per_batch={jones}",
                        x_in(0)
                    ),
                ];
                if args.narrowband {
                    a.push(s("--narrowband"));
                    a.push(format!(
                        "name={NARROWBAND},channels={c},centre_frequency={},decimation={},\
                         dst={},jones_per_batch={jones}",
                        fs * NB_CENTRE_FRACTION,
                        NB_DECIMATION,
                        x_in(1)
                    ));
                }
                a.extend([
                    s("--recv-chunk-samples"),
                    recv_chunk.to_string(),
                    s("--katcp-host"),
                    s("127.0.0.1"),
                    s("--katcp-port"),
                    f_katcp(ant).port().to_string(),
                    s("--backend"),
                    backend.clone(),
                ]);
                match args.debug_break {
                    Some(DebugBreak::DelaySign) => a.push(s("--debug-flip-delay-sign")),
                    Some(DebugBreak::Gains) => a.push(s("--debug-ignore-gains")),
                    _ => {}
                }
                a.extend(sizes.fgpu_recv.iter().cloned());
                a.extend(metrics(&name, base + 140 + ant as u16));
                a.push(format!("{},{}", f_in(ant, 0), f_in(ant, 1)));
                procs.push(child(&name, &exe, &a, &logs.join(format!("{name}.log")))?);
            }
            let mut all: Vec<&mut Proc> = procs.iter_mut().collect();
            wait_ready(&mut all, "output ready", Duration::from_secs(120))?;
            for ant in 0..n {
                let name = format!("dsim{ant}");
                let mut a = vec![
                    s("dsim"),
                    s("--adc-sample-rate"),
                    fs.to_string(),
                    s("--sync-time"),
                    sync.to_string(),
                    s("--period"),
                    DSIM_PERIOD.to_string(),
                    s("--signals"),
                    s("0;"),
                    s("--katcp-host"),
                    s("127.0.0.1"),
                    s("--katcp-port"),
                    dsim_katcp(ant).port().to_string(),
                ];
                a.extend(pins.dsim(ant));
                a.extend(metrics(&name, base + 160 + ant as u16));
                a.extend([f_in(ant, 0).to_string(), f_in(ant, 1).to_string()]);
                procs.push(child(&name, &exe, &a, &logs.join(format!("{name}.log")))?);
            }
            Ok(())
        })();
        if let Err(e) = started {
            stop_all(
                &mut procs.iter_mut().collect::<Vec<_>>(),
                Duration::from_secs(10),
            );
            return Err(e);
        }
        Ok(Array {
            procs: Procs(procs),
            io: Io {
                dsim_katcp: (0..n).map(|a| dsim_katcp(a).into()).collect(),
                fgpu_katcp: (0..n).map(|a| f_katcp(a).into()).collect(),
                xb_katcp: (0..shapes.len()).map(|k| xb_katcp(k).into()).collect(),
                corrprods,
                beams,
                shapes,
                sync_time: sync,
                beam_spectra_per_heap: jones / c,
            },
        })
    }
}

/// Where the threads that must keep up run at real rates: each XB-engine's receive thread
/// on a core of its own (the last cores available: one thread takes every F-engine's
/// output) and each dsim's two send threads on two more (the first cores); the F-engines'
/// threads float over the rest. The array's core plan gives every thread a core, which
/// 4 antennas with their dsims and 2 XB-engines (26 threads) do not find on a 16-core host.
/// Nothing is pinned below the real rate or where the cores do not suffice.
struct Pins {
    /// The XB-engines' placements (wideband, then narrowband).
    xb: Vec<EngineCores>,
    /// The dsims' placements, by antenna.
    dsims: Vec<EngineCores>,
    /// Why nothing is pinned.
    unpinned: Option<String>,
}

impl Pins {
    fn new(real_rate: bool, available: &[usize], antennas: usize, xbs: usize) -> Pins {
        let need = 2 * antennas + xbs;
        let unpinned = if !real_rate {
            Some("below the real rate the engines keep up unpinned".to_string())
        } else if available.len() < need + 2 {
            Some(format!(
                "{need} threads to pin and 2 cores for the F-engines, but {} cores available",
                available.len()
            ))
        } else {
            None
        };
        if unpinned.is_some() {
            return Pins {
                xb: Vec::new(),
                dsims: Vec::new(),
                unpinned,
            };
        }
        let xb = (0..xbs)
            .map(|k| EngineCores {
                name: if k == 0 { "xbgpu" } else { "xbgpu-nb" }.to_string(),
                place: Placement::Xbgpu {
                    recv: vec![available[available.len() - 1 - k]],
                },
            })
            .collect();
        let dsims = (0..antennas)
            .map(|a| EngineCores {
                name: format!("dsim{a}"),
                place: Placement::Dsim {
                    send: available[2 * a..2 * a + 2].to_vec(),
                    main: available[2 * a + 1],
                },
            })
            .collect();
        Pins {
            xb,
            dsims,
            unpinned: None,
        }
    }

    /// The options of XB-engine `k` for its cores (none when unpinned).
    fn xb(&self, k: usize) -> Vec<String> {
        self.xb.get(k).map(EngineCores::args).unwrap_or_default()
    }

    /// The options of antenna `a`'s dsim for its cores (none when unpinned).
    fn dsim(&self, a: usize) -> Vec<String> {
        self.dsims.get(a).map(EngineCores::args).unwrap_or_default()
    }

    /// The plan as the log prints it.
    /// The cores of `available` no dsim or XB receive thread is pinned to (the F-engines'
    /// and the harness's); none when unpinned.
    fn spare(&self, available: &[usize]) -> Vec<usize> {
        if self.unpinned.is_some() {
            return Vec::new();
        }
        crate::apps::array::plan::spare_cores(available, self.dsims.iter().chain(&self.xb))
    }

    fn lines(&self) -> Vec<String> {
        match &self.unpinned {
            Some(why) => vec![format!("core plan: engines unpinned: {why}")],
            None => self
                .dsims
                .iter()
                .chain(&self.xb)
                .map(|e| format!("core plan: {} (F-engines unpinned)", e.describe()))
                .collect(),
        }
    }
}

impl Procs {
    /// An error naming the first engine that has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for p in &mut self.0 {
            if let Some(status) = p.try_wait()? {
                return Err(p.exited("during the checks", status).into());
            }
        }
        Ok(())
    }

    /// Stops every engine (the dsims first) and returns how each exited, with its log.
    pub fn stop(mut self) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        for p in self.0.iter_mut().rev() {
            if matches!(p.try_wait(), Ok(None)) {
                crate::apps::array::procs::stop(p);
            }
            let (_, mut j) = wait_json(p, Duration::from_secs(30));
            if let Some(o) = j.as_object_mut() {
                o.remove("summary");
                o.insert("log".into(), log_name(&p.log).into());
            }
            out.push(j);
        }
        out.reverse();
        out
    }
}

fn log_name(p: &Path) -> String {
    p.file_name()
        .map(|f| format!("logs/{}", f.to_string_lossy()))
        .unwrap_or_default()
}

/// Seconds since the UNIX epoch.
pub fn unix_now() -> anyhow::Result<f64> {
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::Pins;

    #[test]
    fn real_rate_pins_the_dsims_and_xb_receive_threads_on_disjoint_cores() {
        let cores: Vec<usize> = (0..16).collect();
        let p = Pins::new(true, &cores, 4, 2);
        assert!(p.unpinned.is_none());
        assert_eq!(p.xb(0), ["--recv-affinity", "15"]);
        assert_eq!(p.xb(1), ["--recv-affinity", "14"]);
        assert_eq!(p.dsim(3), ["--affinity", "6-7", "--main-affinity", "7"]);
        // The F-engines and the harness get the rest.
        assert_eq!(p.spare(&cores), [8, 9, 10, 11, 12, 13]);
        // 4 antennas need 10 pinned cores and 2 to float on.
        let few = Pins::new(true, &cores[..11], 4, 2);
        assert!(few.unpinned.as_deref().unwrap().contains("11 cores"));
        assert!(few.xb(0).is_empty());
        assert!(few.spare(&cores).is_empty());
        assert!(Pins::new(false, &cores, 4, 2).unpinned.is_some());
    }
}
