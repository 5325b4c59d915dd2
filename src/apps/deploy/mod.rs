//! `gpucbf deploy`: the whole array as Kubernetes manifests, or as the engines' command
//! lines (`--format commands`, what the multi-host test harness runs).
//!
//! * [`hosts`]: the hosts file (JSON: name, interfaces, GPUs, cores per host).
//! * [`plan`]: the engines, their exact command lines, multicast groups, ports and hosts.
//! * [`k8s`]: one Pod per engine (host networking, GPU, RDMA, hugepages, integer CPUs with
//!   guaranteed QoS, katcp probes, Prometheus annotations) and a ConfigMap with the plan.
//! * [`yaml`]: the YAML writer for the manifests.
//! * [`probe`]: `gpucbf katcp-request`, the probes' one katcp request.

pub mod hosts;
pub mod k8s;
pub mod plan;
pub mod probe;
pub mod yaml;

use std::net::Ipv4Addr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::engines::common::Backend;

/// What `gpucbf deploy` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Kubernetes manifests, YAML documents separated by `---`.
    Yaml,
    /// Kubernetes manifests as one JSON `v1/List`.
    Json,
    /// The plan as JSON: every engine's argv, host, ports and groups.
    Commands,
}

/// `gpucbf deploy` options.
#[derive(Debug, Clone, Args)]
pub struct DeployArgs {
    /// Antennas (one F-engine each).
    #[arg(long)]
    pub antennas: usize,
    /// Wideband channels (a power of two).
    #[arg(long)]
    pub channels: usize,
    /// Hosts file (JSON; see the README's "Deployment on Kubernetes").
    #[arg(long)]
    pub hosts: PathBuf,
    /// XB-engines, each correlating an equal channel range (a power of two, at least 32
    /// channels each).
    #[arg(long, default_value_t = 4)]
    pub x_engines: usize,
    /// ADC sample rate (Hz).
    #[arg(long, default_value_t = 1712e6)]
    pub adc_sample_rate: f64,
    /// Sync time (UNIX seconds) of every engine; default: now, in whole seconds.
    #[arg(long)]
    pub sync_time: Option<f64>,
    /// Compute backend of the F- and XB-engines (cpu: no GPU resource is asked for).
    #[arg(long, value_enum, default_value_t = Backend::Gpu)]
    pub backend: Backend,
    /// Complex values per F-engine batch (per pol); default: as `gpucbf array` at this rate.
    #[arg(long)]
    pub jones_per_batch: Option<usize>,
    /// Integration time (s): batches per dump, rounded, at least one.
    #[arg(long, default_value_t = 0.5)]
    pub int_time: f64,
    /// F-engine `--gain` (default: the engine's).
    #[arg(long)]
    pub gain: Option<f64>,
    /// Dither seed of the F-engines; dsim a gets SEED + 1 + a.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Add a simulated digitiser (dsim) per antenna.
    #[arg(long)]
    pub dsims: bool,
    /// The dsims' `--signals` (correlated noise by default).
    #[arg(
        long,
        default_value = "common = wgn(0.1, 7); common + wgn(0.05); common + wgn(0.05);"
    )]
    pub dsim_signals: String,
    /// The dsims' `--period` (samples; each dsim generates one period before it sends).
    #[arg(long, default_value_t = 1 << 22)]
    pub dsim_period: u64,
    /// UDP port of every stream.
    #[arg(long, default_value_t = 7148)]
    pub port: u16,
    /// First digitiser group (antenna a, pol p: + 2a + p).
    #[arg(long, default_value = "239.10.0.0")]
    pub dig_groups: Ipv4Addr,
    /// First F→X group (XB-engine k: + k).
    #[arg(long, default_value = "239.11.0.0")]
    pub fx_groups: Ipv4Addr,
    /// First correlation-product group (XB-engine k: + k).
    #[arg(long, default_value = "239.12.0.0")]
    pub corrprod_groups: Ipv4Addr,
    /// katcp port of engine 0 (engine i: + i; unique across the array).
    #[arg(long, default_value_t = 7200)]
    pub katcp_port_base: u16,
    /// Prometheus port of engine 0 (engine i: + i).
    #[arg(long, default_value_t = 9200)]
    pub prometheus_port_base: u16,
    /// Cores per F-engine pod (integer CPUs: exclusive cores under the static CPU manager).
    #[arg(long, default_value_t = 6)]
    pub fgpu_cores: usize,
    /// Cores per XB-engine pod.
    #[arg(long, default_value_t = 2)]
    pub xbgpu_cores: usize,
    /// Cores per dsim pod.
    #[arg(long, default_value_t = 3)]
    pub dsim_cores: usize,
    /// Memory per pod (requests = limits), a Kubernetes quantity.
    #[arg(long, default_value = "8Gi")]
    pub memory: String,
    /// 2 MiB hugepages per F- and XB-engine pod (a Kubernetes quantity; 0: none).
    #[arg(long, default_value = "2Gi")]
    pub hugepages: String,
    /// RDMA device resource per F- and XB-engine pod (empty: none).
    #[arg(long, default_value = "rdma/rdma_shared_device_a")]
    pub rdma_resource: String,
    /// Container image.
    #[arg(long, default_value = "gpucbf:latest")]
    pub image: String,
    /// Kubernetes namespace.
    #[arg(long, default_value = "cbf")]
    pub namespace: String,
    /// Array name (prefix of every object's name).
    #[arg(long, default_value = "gpucbf")]
    pub name: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Yaml)]
    pub format: Format,
    /// Write here instead of stdout.
    #[arg(long)]
    pub output: Option<PathBuf>,
}

/// Builds the plan and writes it in `args.format`.
pub fn run(args: &DeployArgs) -> anyhow::Result<()> {
    let text = render(args)?;
    match &args.output {
        Some(p) => {
            std::fs::write(p, text).map_err(|e| anyhow::anyhow!("writing {}: {e}", p.display()))?
        }
        None => {
            use std::io::Write;
            match std::io::stdout().lock().write_all(text.as_bytes()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                r => r?,
            }
        }
    }
    Ok(())
}

/// The text `gpucbf deploy` writes for `args`.
pub fn render(args: &DeployArgs) -> anyhow::Result<String> {
    let hosts = hosts::Hosts::read(&args.hosts)?;
    let plan = plan::Plan::new(args, &hosts)?;
    Ok(match args.format {
        Format::Commands => serde_json::to_string_pretty(&plan)? + "\n",
        Format::Json => serde_json::to_string_pretty(&k8s::list(args, &plan)?)? + "\n",
        Format::Yaml => k8s::objects(args, &plan)?
            .iter()
            .map(yaml::document)
            .collect::<Vec<_>>()
            .join(""),
    })
}
