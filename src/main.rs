//! The `gpucbf` command: one subcommand per engine or tool. Each arm parses its arguments
//! (clap), validates them into the library's typed configuration, runs it and prints the
//! summary as JSON on stdout; logs go to stderr (`--log-format`). Errors reach `main` as
//! `anyhow` errors and exit non-zero.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use gpucbf::telemetry::{init_logging, LogFormat};

#[derive(Parser)]
#[command(
    name = "gpucbf",
    version,
    propagate_version = true,
    about = "GPU correlator-beamformer (katgpucbf wire-compatible)"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, global = true, default_value = "human")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// F-engine: digitiser heaps (UDP or pcap) → channelised F-engine heaps.
    Fgpu(gpucbf::engines::fgpu::FgpuArgs),
    /// XB-engine: F-engine heaps (UDP or pcap) → correlation products and beams.
    Xbgpu(gpucbf::engines::xbgpu::XbgpuArgs),
    /// Digitiser simulator: SPEAD digitiser heaps to UDP destinations or a pcap file.
    Dsim(gpucbf::engines::dsim::DsimArgs),
    /// Print every SPEAD heap of a pcap file or UDP port as one JSON line (items, descriptors).
    SpeadDump {
        /// Read this pcap file.
        #[arg(long, conflicts_with = "udp", required_unless_present = "udp")]
        pcap: Option<PathBuf>,
        /// Receive on this UDP endpoint (unicast or multicast ADDR:PORT).
        #[arg(long)]
        udp: Option<std::net::SocketAddrV4>,
        /// Stop after this many heaps.
        #[arg(long)]
        max_heaps: Option<u64>,
        /// UDP: stop after this many seconds without a packet.
        #[arg(long, default_value_t = 5.0)]
        idle_timeout: f64,
    },
    /// Decode the SPEAD heaps of a pcap file and print a JSON summary per destination.
    PcapInfo {
        /// Capture to read.
        path: PathBuf,
    },
    /// Benchmarks (`gpucbf bench xbgpu | fgpu | recv | nufft`).
    Bench(gpucbf::bench::BenchArgs),
    /// Non-uniform FFTs (FINUFFT conventions) on .npy files, and the CPU benchmark.
    #[command(subcommand)]
    Nufft(gpucbf::apps::nufft::NufftCmd),
    /// Dirty image (FITS, PNG) of correlator visibilities (.npy dumps or X-engine pcap).
    Image(gpucbf::apps::image::cli::ImageArgs),
    /// Loopback array: dsim → F-engines → XB-engine → visibilities, plots, dirty image.
    Array(gpucbf::apps::array::ArrayArgs),
    /// Qualification: the telescope's acceptance tests against a live loopback array,
    /// with report.json and report.html.
    Qualify(gpucbf::apps::qualify::QualifyArgs),
    /// Replay a pcap capture to UDP endpoints at a chosen rate, with seeded faults.
    Replay(gpucbf::apps::replay::ReplayArgs),
    /// Soak report of running engines: samples their metrics, writes soak.csv/json/png and
    /// exits non-zero when anything was lost after the warm-up.
    Soak(gpucbf::apps::soak::SoakArgs),
    /// Kubernetes manifests (or the engines' command lines) for a whole array on a list of
    /// hosts: one pod per engine, multicast groups, ports and resources planned.
    Deploy(gpucbf::apps::deploy::DeployArgs),
    /// One katcp request to an engine (`watchdog`, `sensor-value NAME`): prints the informs
    /// and reply, exits non-zero on failure (the deploy manifests' probes).
    KatcpRequest(gpucbf::apps::deploy::probe::KatcpRequestArgs),
    /// Runs PROGRAM [ARGS...] with the SCHED_RR real-time policy at priority 1 (katgpucbf
    /// image's `schedrr`: needs CAP_SYS_NICE; fails with status 1 without it).
    #[command(disable_version_flag = true)]
    Schedrr {
        /// The program and its arguments.
        #[arg(required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<std::ffi::OsString>,
    },
}

/// The command line, with the subcommand taken from the program's name when it is run as
/// `fgpu`, `xbgpu`, `dsim` or `schedrr` (links to this binary, as katgpucbf's image has
/// those commands on its PATH): `fgpu ARGS` is `gpucbf fgpu ARGS`.
fn args() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let name = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .map(str::to_string);
    if let Some(n) = name.filter(|n| gpucbf::engines::links::LINKS.contains(&n.as_str())) {
        args[0] = "gpucbf".into();
        args.insert(1, n.into());
    }
    args
}

/// Prints a JSON document on stdout; a closed pipe (`| head`) is not an error.
fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    use std::io::Write;
    let text = serde_json::to_string_pretty(v)?;
    match writeln!(std::io::stdout().lock(), "{text}") {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse_from(args());
    init_logging(cli.log_format);
    match cli.command {
        Command::Schedrr { command } => gpucbf::engines::links::schedrr(&command),
        Command::Fgpu(args) => {
            args.console.log_not_applicable();
            let cfg = args.validate()?;
            let summary = gpucbf::engines::fgpu::run(&cfg)?;
            print_json(&summary)?;
        }
        Command::Xbgpu(args) => {
            args.console.log_not_applicable();
            let cfg = args.validate()?;
            let summary = gpucbf::engines::xbgpu::run(&cfg)?;
            print_json(&summary)?;
        }
        Command::Dsim(args) => {
            args.log_not_applicable();
            let cfg = args.validate()?;
            let summary = gpucbf::engines::dsim::run(&cfg)?;
            if args.summary {
                print_json(&summary)?;
            }
        }
        Command::SpeadDump {
            pcap,
            udp,
            max_heaps,
            idle_timeout,
        } => {
            use gpucbf::apps::inspect::{dump, DumpSource};
            let src = match (pcap, udp) {
                (Some(p), _) => DumpSource::Pcap(p),
                (None, Some(addr)) => DumpSource::Udp {
                    addr,
                    idle_timeout: gpucbf::apps::inspect::idle_timeout(idle_timeout)?,
                },
                (None, None) => anyhow::bail!("give --pcap FILE or --udp ADDR:PORT"),
            };
            let stats = dump(src, max_heaps, &mut std::io::stdout().lock())?;
            tracing::info!(?stats, "spead-dump finished");
        }
        Command::PcapInfo { path } => {
            let s = gpucbf::apps::inspect::summarise(&path)?;
            print_json(&s)?;
        }
        Command::Bench(args) => {
            gpucbf::bench::run(args)?;
        }
        Command::Nufft(cmd) => gpucbf::apps::nufft::run(cmd)?,
        Command::Image(args) => {
            let summary = gpucbf::apps::image::cli::run(&args)?;
            print_json(&summary)?;
        }
        Command::Array(args) => {
            let cfg = args.validate()?;
            let summary = gpucbf::apps::array::run(&cfg)?;
            print_json(&summary)?;
        }
        Command::Qualify(args) => {
            let results = gpucbf::apps::qualify::run(&args)?;
            let failed = results.iter().filter(|r| !r.passed).count();
            if failed > 0 {
                anyhow::bail!("{failed} of {} checks failed", results.len());
            }
        }
        Command::Deploy(args) => gpucbf::apps::deploy::run(&args)?,
        Command::KatcpRequest(args) => {
            let reply = gpucbf::apps::deploy::probe::run(&args)?;
            print!("{}", gpucbf::apps::deploy::probe::format(&reply));
        }
        Command::Replay(args) => print_json(&gpucbf::apps::replay::run(&args)?)?,
        Command::Soak(args) => {
            let report = gpucbf::apps::soak::run(&args)?;
            print_json(&report.summary)?;
            report.summary.verdict.check()?;
        }
    }
    Ok(())
}
