//! The `gpucbf` command: one subcommand per engine or tool.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use gpucbf::telemetry::{init_logging, LogFormat};

#[derive(Parser)]
#[command(
    name = "gpucbf",
    version,
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
    Bench {
        /// What to benchmark: `xbgpu` (X-engine correlator, beamformer, cuBLASLt int8 GEMM;
        /// `xbgpu-beam`: only the beamformer against copy bandwidth; `xbgpu-corr`: only the
        /// correlator kernels, their limit probes and cuBLASLt),
        /// `fgpu` (GPU F-engine: wideband resident and end-to-end throughput, bandwidths,
        /// then the narrowband lines), `fgpu-narrowband` (only the narrowband lines),
        /// `recv` (packets/s of the file, UDP loopback and DPDK sources vs spead2) or `nufft`
        /// (GPU 2-D type 1, 1e8 points, 4096², eps 1e-5, f32; `gpucbf nufft bench` has options).
        #[arg(value_parser = ["xbgpu", "xbgpu-beam", "xbgpu-corr", "fgpu", "fgpu-narrowband", "recv", "nufft"])]
        what: String,
        /// Options of `bench recv`.
        #[command(flatten)]
        recv: gpucbf::bench::recv::RecvBenchArgs,
    },
    /// Non-uniform FFTs (FINUFFT conventions) on .npy files, and the CPU benchmark.
    #[command(subcommand)]
    Nufft(gpucbf::apps::nufft::NufftCmd),
    /// Dirty image (FITS, PNG) of correlator visibilities (.npy dumps or X-engine pcap).
    Image(gpucbf::apps::image::cli::ImageArgs),
    /// Loopback array: dsim → F-engines → XB-engine → visibilities, plots, dirty image.
    Array(gpucbf::apps::array::ArrayArgs),
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
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Fgpu(args) => {
            let cfg = args.validate()?;
            let summary = gpucbf::engines::fgpu::run(&cfg)?;
            print_json(&summary)?;
        }
        Command::Xbgpu(args) => {
            let cfg = args.validate()?;
            let summary = gpucbf::engines::xbgpu::run(&cfg)?;
            print_json(&summary)?;
        }
        Command::Dsim(args) => {
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
                    idle_timeout: std::time::Duration::from_secs_f64(idle_timeout.max(0.001)),
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
        Command::Bench { what, recv } => match what.as_str() {
            "recv" => {
                gpucbf::bench::recv::run(&recv)?;
            }
            "fgpu" => {
                gpucbf::bench::fgpu::bench_gpu()?;
                gpucbf::bench::fgpu_narrowband::bench_gpu_narrowband()?;
            }
            "fgpu-narrowband" => gpucbf::bench::fgpu_narrowband::bench_gpu_narrowband()?,
            "nufft" => bench_nufft()?,
            "xbgpu-beam" => gpucbf::bench::xbgpu::bench_gpu_beams()?,
            "xbgpu-corr" => {
                gpucbf::bench::xbgpu::bench_gpu_corr(&[64, 256, 576, 1024], 8192)?;
            }
            _ => gpucbf::bench::xbgpu::bench_gpu(&[64, 256, 576, 1024], 8192)?,
        },
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
    }
    Ok(())
}

/// `gpucbf bench nufft`: the issue's problem (2-D type 1, 1e8 points, 4096², eps 1e-5, f32) on
/// the GPU (data resident) where one exists, then on the CPU and through FINUFFT (Python) on
/// the same input in the same run, with the ratio. `GPUCBF_NUFFT_BENCH_M` / `_N` shrink it.
fn bench_nufft() -> anyhow::Result<()> {
    use gpucbf::bench::nufft::{bench_cpu, finufft_peer};
    let env = |k: &str, d: usize| -> anyhow::Result<usize> {
        match std::env::var(k) {
            Ok(v) => v
                .parse()
                .map_err(|_| anyhow::anyhow!("{k}={v}: expected a whole number")),
            Err(_) => Ok(d),
        }
    };
    let (m, n, eps) = (
        env("GPUCBF_NUFFT_BENCH_M", 100_000_000)?,
        env("GPUCBF_NUFFT_BENCH_N", 4096)?,
        1e-5,
    );
    if gpucbf::gpu::gpu_available() {
        let mut opts = gpucbf::bench::nufft_gpu::GpuBenchOpts::issue_case();
        opts.m = m;
        opts.n = n;
        gpucbf::bench::nufft_gpu::bench_gpu(&opts)?;
    } else {
        println!("nufft bench gpu: no CUDA device, GPU figure skipped");
    }
    let dir = std::env::temp_dir().join(format!("gpucbf-nufft-bench-{}", std::process::id()));
    let ours = bench_cpu(m, n, eps, 2.0, 2, 8, Some(&dir))?;
    let rate = ours.m as f64 / ours.total.as_secs_f64();
    match finufft_peer(&dir, eps, rayon::current_num_threads()) {
        Ok((theirs, text)) => {
            print!("{text}");
            println!(
                "cpu ratio gpucbf / finufft = {:.3e} / {:.3e} points/s = {:.2}",
                rate,
                theirs,
                rate / theirs
            );
        }
        Err(e) => println!("finufft peer not run: {e}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
