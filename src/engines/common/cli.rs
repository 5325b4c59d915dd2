//! Command-line pieces shared by the engines: `key=value,...` output specs (`--wideband`,
//! `--narrowband`, `--corrprod`, `--beam`), the `--backend auto|cpu|gpu` choice
//! ([`Backend`]), and the options `fgpu` and `xbgpu` share ([`EngineArgs`], flattened into
//! both).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};

use super::error::ConfigError;
pub use super::iface::{parse_interface, parse_interfaces, Interfaces};
use super::recv::RecvOptions;
use super::send::{open_sink, RoutedSink};
use crate::net::SharedSink;

/// Splits `key=value,key=value`. Items without `=` continue the previous value when its key
/// is one of `list_keys` (an endpoint list: `dst=a:1,b:2`); elsewhere they are an error.
pub fn parse_kv(spec: &str, list_keys: &[&str]) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for part in spec.split(',') {
        match part.split_once('=') {
            Some((k, v)) => out.push((k.trim().to_string(), v.trim().to_string())),
            None => match out.last_mut() {
                Some((k, v)) if list_keys.contains(&k.as_str()) => {
                    v.push(',');
                    v.push_str(part.trim());
                }
                _ => return Err(ConfigError::NotKeyValue(part.to_string())),
            },
        }
    }
    Ok(out)
}

/// Parses a number, accepting float notation for integers too (`channels=4096.0`, `1e3`).
pub fn parse_num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, ConfigError> {
    v.parse::<T>().or_else(|_| {
        let f: f64 = v
            .parse()
            .map_err(|_| ConfigError::value(k, v, "not a number"))?;
        if f.fract() != 0.0 {
            return Err(ConfigError::value(k, v, "not an integer"));
        }
        format!("{}", f as i128)
            .parse::<T>()
            .map_err(|_| ConfigError::value(k, v, "out of range"))
    })
}

/// Parses `uniform` / `none` (the `dither=` key).
pub fn parse_dither(v: &str) -> Result<bool, ConfigError> {
    match v {
        "uniform" => Ok(true),
        "none" => Ok(false),
        _ => Err(ConfigError::value("dither", v, "expected uniform or none")),
    }
}

/// Parses `8` or `4`: the sample width of F-engine data (fgpu `--send-sample-bits`, xbgpu
/// `--sample-bits`).
pub fn sample_bits() -> impl TypedValueParser<Value = u32> {
    PossibleValuesParser::new(["8", "4"]).map(|s| if s == "4" { 4 } else { 8 })
}

/// `--backend`: where the compute runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Backend {
    /// The GPU where one is usable and the configuration runs there, else the CPU.
    #[default]
    Auto,
    /// The CPU reference backends.
    Cpu,
    /// The GPU backends (an error without a usable GPU).
    Gpu,
}

impl Backend {
    /// The name on the command line (`auto`, `cpu`, `gpu`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Cpu => "cpu",
            Backend::Gpu => "gpu",
        }
    }

    /// Resolved: true for the GPU backend. `gpu_supported` says whether the GPU backend
    /// handles this configuration at all (auto falls back to the CPU when it does not or
    /// when no GPU exists; an explicit `gpu` without a GPU is a clear error).
    pub fn use_gpu(self, gpu_supported: bool) -> Result<bool, ConfigError> {
        match self {
            Backend::Cpu => Ok(false),
            Backend::Gpu if !crate::gpu::gpu_available() => Err(ConfigError::NoGpu),
            Backend::Gpu => Ok(true),
            Backend::Auto => Ok(gpu_supported && crate::gpu::gpu_available()),
        }
    }
}

/// The options `fgpu` and `xbgpu` share (katgpucbf names): network receive and send,
/// output pcap, compute backend and Prometheus port. Flattened into each engine's options.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct EngineArgs {
    /// Input interface(s) for multicast receive: names (`lo`, `ens1f0`) or IPv4 addresses,
    /// comma-separated; a name stands for its interface's first IPv4 address. Kernel UDP
    /// receive joins every multicast group of SRC on each of them; --recv-ibv uses the
    /// first (its RDMA port).
    #[arg(long, value_name = "IFACE[,IFACE...]", default_value = "0.0.0.0", value_parser = parse_interfaces)]
    pub recv_interface: Interfaces,
    /// Receive through DPDK (feature `dpdk`) with these EAL arguments, e.g.
    /// "--no-huge --no-pci -m 512 --vdev net_pcap0,rx_pcap=FILE"; SRC then lists the
    /// endpoints to keep ("all": every UDP datagram).
    #[arg(long, allow_hyphen_values = true, value_name = "EAL ARGS")]
    pub recv_dpdk: Option<String>,
    /// Receive through ibverbs (feature `ibverbs`): a raw-packet queue pair on the RDMA
    /// port behind --recv-interface, one flow-steering rule per endpoint in SRC.
    #[arg(long)]
    pub recv_ibv: bool,
    /// Send heaps straight from GPU memory through ibverbs (PeerDirect; GPU backend:
    /// fgpu's batches, xbgpu's correlation dumps): output items in GPU memory registered
    /// with the RDMA NIC. Where that cannot be, fgpu uses registered host items (as
    /// --send-ibv), else both stage as without it; one line at start says which and why.
    #[arg(long)]
    pub use_peerdirect: bool,
    /// Receive chunks in GPU memory mapped for the CPU (vkgdr: Vulkan-exported, imported
    /// into CUDA), so the placement copy lands on the GPU and no upload is needed; without
    /// Vulkan, a GPU, a host-visible device-local memory type or the GPU backend, chunks
    /// stay in pinned host memory (logged at start).
    #[arg(long)]
    pub use_vkgdr: bool,
    /// Output interface(s): names or IPv4 addresses, comma-separated. With several, each
    /// output's destinations are divided among them in contiguous blocks (the number of an
    /// output's destinations must be a multiple of the number of interfaces).
    #[arg(long, value_name = "IFACE[,IFACE...]", default_value = "0.0.0.0", value_parser = parse_interfaces)]
    pub send_interface: Interfaces,
    /// Send through ibverbs (feature `ibverbs`; katgpucbf's option). Without an RDMA NIC
    /// behind --send-interface the output goes through UDP sockets, with one log line.
    #[arg(long)]
    pub send_ibv: bool,
    /// ibverbs completion vector of the send queue (katgpucbf's option; checked and
    /// accepted: gpucbf's ibverbs sender always polls its completion queue, as with -1).
    #[arg(
        long,
        value_name = "VECTOR",
        allow_hyphen_values = true,
        default_value_t = 0
    )]
    pub send_comp_vector: i64,
    /// ibverbs completion vector(s) of the receive queue(s) (-1: poll), one per
    /// --recv-affinity core; used with --recv-ibv.
    #[arg(
        long,
        value_name = "VECTOR[,VECTOR...]",
        allow_hyphen_values = true,
        default_value = "0"
    )]
    pub recv_comp_vector: String,
    /// Write katgpucbf's JSON-lines queue and event monitor to FILE: the receive queues'
    /// depths every 0.25 s, receive counts that moved, the engine's state changes; each line
    /// flushed, the file closed cleanly on exit (SIGINT/SIGTERM too).
    #[arg(long, value_name = "FILE")]
    pub monitor_log: Option<PathBuf>,
    /// Multicast TTL.
    #[arg(long, default_value_t = 4)]
    pub send_ttl: u32,
    /// Payload bytes per output packet.
    #[arg(long, default_value_t = 8192)]
    pub send_packet_payload: usize,
    /// Write output packets to this pcap file instead of sending them.
    #[arg(long)]
    pub send_pcap: Option<PathBuf>,
    /// Receive window tolerance in ADC ticks (katgpucbf xbgpu's option, here for fgpu too):
    /// a packet farther than this outside the window is dropped and counted as a bad
    /// timestamp, unless 16 consecutive packets agree that the stream really moved there
    /// (then the window follows it, with a log line).
    #[arg(long, default_value_t = super::recv::DEFAULT_REORDER_TOL)]
    pub recv_reorder_tol: u64,
    /// Receive threads, one per listed core, each pinned there and reading its share of
    /// the endpoints' ports, all filling one chunk window (a stream group), e.g. `2,3` or
    /// `4-7`. More threads than unicast ports share each port (SO_REUSEPORT: each SPEAD
    /// heap goes to one thread, by its heap counter). Default: one unpinned thread.
    #[arg(long, value_name = "CORES")]
    pub recv_affinity: Option<String>,
    /// Kernel receive buffer per UDP socket in bytes (past net.core.rmem_max with
    /// SO_RCVBUFFORCE when allowed, else capped with a warning).
    #[arg(long, value_name = "BYTES", default_value_t = super::recv::DEFAULT_RECV_BUFFER)]
    pub recv_buffer: usize,
    /// Microseconds a UDP receive thread waits after a read that emptied its sockets
    /// before reading again, instead of being woken by the next datagram: each wake-up
    /// then takes a batch (0: wake per datagram, the lowest latency).
    #[arg(long, value_name = "MICROSECONDS", default_value_t = 100)]
    pub recv_hold_us: u64,
    /// Chunk buffers to allocate (and register with CUDA) before receiving, so that the
    /// receive threads never stop to allocate while packets arrive (a real-time run wants
    /// the window, the queue to the engine and what the engine holds: about
    /// --recv-chunks + 8). 0: allocate as needed.
    #[arg(long, value_name = "CHUNKS", default_value_t = 0)]
    pub recv_prealloc: usize,
    /// Core of the send thread (katgpucbf's option; -1: unpinned). The outputs' heaps are
    /// paced and sent from that thread, not the thread that feeds the compute. A list
    /// (`4,5` or `4-5`) starts one send thread per core, each with its own sockets, sending
    /// the heaps of every n-th destination (substream); the order across destinations is
    /// then not kept.
    #[arg(
        long,
        value_name = "CORE[,CORE...]",
        allow_hyphen_values = true,
        default_value = "-1"
    )]
    pub send_affinity: String,
    /// Kernel send buffer of the UDP output socket in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub send_buffer: usize,
    /// Chunks open at once in the receive window (a heap may arrive this many chunks late).
    #[arg(long, default_value_t = super::recv::ACTIVE_CHUNKS)]
    pub recv_chunks: usize,
    /// Compute backend: auto, cpu or gpu.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// Prometheus metrics port (none by default).
    #[arg(long)]
    pub prometheus_port: Option<u16>,
    /// Address the Prometheus endpoint listens on (default: the `--katcp-host` address,
    /// which is every interface unless given).
    #[arg(long, value_name = "ADDR")]
    pub prometheus_host: Option<Ipv4Addr>,
}

impl EngineArgs {
    /// Where `--prometheus-port` listens: `--prometheus-host`, else the katcp host.
    pub fn prometheus_addr(&self, katcp_host: Ipv4Addr) -> Option<SocketAddrV4> {
        let host = self.prometheus_host.unwrap_or(katcp_host);
        self.prometheus_port.map(|p| SocketAddrV4::new(host, p))
    }

    /// The output sink every output of the engine writes to: UDP from `--send-interface`
    /// with `--send-ttl`, or the `--send-pcap` file.
    pub fn open_sink(&self) -> std::io::Result<SharedSink> {
        self.open_sink_for(&[])
    }

    /// The UDP sink of the engine's periodic SPEAD descriptors (never the pcap file: the
    /// descriptors go to the network only), out of the first `--send-interface`.
    pub fn open_descriptor_sink(&self) -> std::io::Result<Box<dyn crate::net::PacketSink>> {
        open_sink(
            None,
            self.send_interface.first(),
            self.send_ttl,
            self.send_buffer,
            false,
        )
    }

    /// [`EngineArgs::open_sink`] for outputs with these destinations: with several
    /// `--send-interface`s each output's destinations are divided among them in contiguous
    /// blocks (katgpucbf's rule); a destination not listed goes out of the first.
    pub fn open_sink_for(&self, outputs: &[&[SocketAddrV4]]) -> std::io::Result<SharedSink> {
        let ifs = &self.send_interface.0;
        let open = |ip: Ipv4Addr| {
            open_sink(
                self.send_pcap.as_deref(),
                ip,
                self.send_ttl,
                self.send_buffer,
                self.send_ibv,
            )
        };
        if ifs.len() <= 1 || self.send_pcap.is_some() {
            return Ok(SharedSink::new(open(self.send_interface.first())?));
        }
        let routed = RoutedSink::open(ifs, outputs, open)?;
        Ok(SharedSink::new(Box::new(routed)))
    }

    /// Checks the interface options against the outputs (`n_dsts`: each output's number of
    /// destinations) and the ibverbs options (`--recv-comp-vector`, one per
    /// `--recv-affinity` core with `--recv-ibv`); logs once what is accepted but not used.
    pub fn check_interfaces(&self, n_dsts: &[usize]) -> Result<(), ConfigError> {
        let n_if = self.send_interface.0.len();
        for &n in n_dsts {
            if !n.is_multiple_of(n_if) {
                return Err(ConfigError::rule(
                    format!("--send-interface ({n_if} interfaces)"),
                    format!("must divide every output's destinations ({n} given)"),
                ));
            }
        }
        let vectors = self
            .recv_comp_vector
            .split(',')
            .map(|v| v.trim().parse::<i64>().ok().filter(|&v| v >= -1))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ConfigError::rule(
                    format!("--recv-comp-vector {}", self.recv_comp_vector),
                    "must be a list of integers ≥ -1",
                )
            })?;
        if self.send_comp_vector < -1 {
            return Err(ConfigError::rule("--send-comp-vector", "must be ≥ -1"));
        }
        if self.recv_ibv {
            let cores = self.recv_cores()?;
            if !cores.is_empty() && cores.len() != vectors.len() {
                return Err(ConfigError::rule(
                    "--recv-comp-vector",
                    format!(
                        "must list as many vectors ({}) as --recv-affinity lists cores ({})",
                        vectors.len(),
                        cores.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Logs, once at start, the katgpucbf options that are accepted but have no effect here.
    pub fn log_not_applicable(&self) {
        if self.recv_interface.0.len() > 1 && (self.recv_ibv || self.recv_dpdk.is_some()) {
            tracing::info!(
                first = %self.recv_interface.first(),
                "--recv-interface: several interfaces given; --recv-ibv/--recv-dpdk receive on the first"
            );
        }
    }

    /// Opens `--monitor-log`, if given (its sampler runs until the monitor is dropped).
    pub fn open_monitor_log(
        &self,
    ) -> std::io::Result<Option<crate::telemetry::monitor::MonitorLog>> {
        self.monitor_log
            .as_deref()
            .map(|f| {
                crate::telemetry::monitor::MonitorLog::create(
                    f,
                    crate::control::shutdown::requested,
                )
            })
            .transpose()
    }

    /// The send threads' cores (`--send-affinity`; one unpinned thread for -1), checked
    /// against the cores this process may use, after checking `--send-buffer`.
    pub fn send_cores(&self) -> Result<Vec<Option<usize>>, ConfigError> {
        if self.send_buffer == 0 {
            return Err(ConfigError::rule(
                "--send-buffer",
                "must be at least 1 byte",
            ));
        }
        let v = self.send_affinity.trim();
        if v == "-1" {
            return Ok(vec![None]);
        }
        let bad = |e: String| ConfigError::rule(format!("--send-affinity {v}:"), e);
        let cores = crate::net::affinity::parse_cores(v).map_err(|e| {
            bad(format!(
                "{e} (a core number or list of them, or -1 for one unpinned send thread)"
            ))
        })?;
        crate::net::affinity::check_cores(&cores).map_err(|e| bad(e.to_string()))?;
        Ok(cores.into_iter().map(Some).collect())
    }

    /// How the engine receives (`--recv-interface`, `--recv-dpdk`, `--recv-ibv`).
    pub fn recv_options(&self) -> RecvOptions<'_> {
        RecvOptions {
            interface: Some(self.recv_interface.first()),
            join: &self.recv_interface.0,
            dpdk: self.recv_dpdk.as_deref(),
            ibv: self.recv_ibv,
            buffer: self.recv_buffer,
            hold: Some(std::time::Duration::from_micros(self.recv_hold_us)),
        }
    }

    /// The receive cores (`--recv-affinity`, checked against the cores this process may
    /// use; empty without the option) after checking the receive options' values.
    pub fn recv_cores(&self) -> Result<Vec<usize>, ConfigError> {
        if self.recv_buffer == 0 {
            return Err(ConfigError::rule(
                "--recv-buffer",
                "must be at least 1 byte",
            ));
        }
        if !(1..=64).contains(&self.recv_chunks) {
            return Err(ConfigError::rule("--recv-chunks", "must be 1..=64"));
        }
        let Some(list) = &self.recv_affinity else {
            return Ok(Vec::new());
        };
        let bad = |e: crate::net::affinity::AffinityError| {
            ConfigError::rule(format!("--recv-affinity {list}:"), e.to_string())
        };
        let cores = crate::net::affinity::parse_cores(list).map_err(bad)?;
        crate::net::affinity::check_cores(&cores).map_err(bad)?;
        Ok(cores)
    }

    /// Opens the engine's input `src` as `--recv-affinity` says (one receive thread per
    /// core) with the receive window options.
    pub fn recv_setup(&self, src: &str) -> anyhow::Result<super::recv::RecvSetup> {
        let cores = self.recv_cores()?;
        let sources = super::recv::open_sources(src, &self.recv_options(), cores.len())?;
        Ok(super::recv::RecvSetup {
            sources,
            cores,
            reorder_tol: self.recv_reorder_tol,
            window_chunks: self.recv_chunks,
            prealloc: self.recv_prealloc,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_lists_numbers_and_backends() {
        let kv = parse_kv("name=wb, dst=1.2.3.4:1,5.6.7.8:2,taps=4", &["dst"]).unwrap();
        assert_eq!(kv[1], ("dst".into(), "1.2.3.4:1,5.6.7.8:2".into()));
        assert_eq!(kv[2], ("taps".into(), "4".into()));
        assert!(parse_kv("name=wb,dst=1.2.3.4:1,5.6.7.8:2", &[]).is_err());
        assert!(parse_kv("oops", &["dst"]).is_err());
        assert_eq!(parse_num::<usize>("c", "4096.0").unwrap(), 4096);
        assert_eq!(parse_num::<usize>("c", "1e3").unwrap(), 1000);
        assert!(parse_num::<usize>("c", "2.5").is_err());
        assert!(parse_num::<usize>("c", "-1").is_err());
        assert!(parse_num::<u8>("c", "300").is_err());
        assert!(!parse_dither("none").unwrap());
        assert!(parse_dither("gaussian").is_err());
        assert!(!Backend::Cpu.use_gpu(true).unwrap());
        assert!(!Backend::Auto.use_gpu(false).unwrap());
        assert_eq!(
            Backend::Auto.use_gpu(true).unwrap(),
            crate::gpu::gpu_available()
        );
        assert_eq!(
            Backend::Gpu.use_gpu(true).is_ok(),
            crate::gpu::gpu_available()
        );
        let e = Backend::from_str("tpu", false).unwrap_err();
        assert!(e.contains("tpu"), "{e}");
    }

    /// Messages as the engines have always printed them.
    #[test]
    fn messages_name_the_key() {
        let e = |r: Result<usize, ConfigError>| r.unwrap_err().to_string();
        assert_eq!(e(parse_num("taps", "x")), "taps=x: not a number");
        assert_eq!(e(parse_num("taps", "2.5")), "taps=2.5: not an integer");
        assert_eq!(
            parse_kv("oops", &[]).unwrap_err().to_string(),
            "expected key=value, got \"oops\""
        );
        assert_eq!(
            parse_dither("x").unwrap_err().to_string(),
            "dither=x: expected uniform or none"
        );
        assert_eq!(
            ConfigError::NoGpu.to_string(),
            "--backend gpu: no usable CUDA device found (use --backend cpu or auto)"
        );
    }
}
