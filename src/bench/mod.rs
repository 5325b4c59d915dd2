//! `gpucbf bench ...`: one harness per subject, each measured against a bound or a peer in
//! the same run (device copy bandwidth, cuBLASLt int8 GEMM, FMA rate, spead2, FINUFFT).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

pub mod fgpu;
pub mod loopback;
pub mod nufft;
pub mod recv;
pub mod recv_place;
pub mod xbgpu;

/// Antenna counts of the correlator lines of `gpucbf bench xbgpu` and `xbgpu-corr`.
const XBGPU_ANTS: [usize; 4] = [64, 256, 576, 1024];
/// Samples per correlator launch of those lines.
const XBGPU_SAMPLES_PER_LAUNCH: usize = 8192;

/// `gpucbf bench`: which benchmark to run, and where its report goes.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Also write the run's report (its figures, the bounds measured in the same run and the
    /// ratios) as JSON to FILE.
    #[arg(long, global = true, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// What to benchmark.
    #[command(subcommand)]
    pub cmd: BenchCmd,
}

/// The benchmarks, each with its own options.
#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// X-engine correlator, beamformer, cuBLASLt int8 GEMM.
    Xbgpu,
    /// Only the beamformer against copy bandwidth.
    XbgpuBeam,
    /// Only the correlator kernels, their limit probes and cuBLASLt.
    XbgpuCorr,
    /// The XB-engine's host work per received chunk (chunk -> batches to the correlator) at
    /// the L-band shape, against memcpy and the real-time rate; needs no GPU.
    XbgpuFeed(xbgpu::feed::FeedArgs),
    /// GPU F-engine: wideband resident and end-to-end throughput, bandwidths, then the
    /// narrowband lines and a line of the CPU backend.
    Fgpu,
    /// Only the narrowband lines of `fgpu`.
    FgpuNarrowband,
    /// `--use-vkgdr` chunks (GPU memory mapped for the CPU) against pinned host chunks:
    /// writer threads placing payloads as the receive threads do, then the engine's GPU
    /// channeliser, end to end; writers alone as each memory's bound.
    FgpuVkgdr(fgpu::vkgdr::VkgdrArgs),
    /// Packets/s of the file, UDP loopback and DPDK sources vs spead2.
    Recv(recv::RecvBenchArgs),
    /// CPU per packet of placing digitiser packets into chunks (one thread's assembler, the
    /// receive group with 1, 2, 4 threads) against a plain copy of the payloads; no sockets.
    RecvPlace(recv_place::PlaceArgs),
    /// UDP loopback throughput of this host (GSO send -> GRO receive, digitiser-sized
    /// datagrams, per pair and per CPU-second): the bound of the real-time runs.
    Loopback(loopback::LoopbackArgs),
    /// GPU 2-D type 1, 1e8 points, 4096², eps 1e-5, f32, then the CPU and FINUFFT on the same
    /// input (`GPUCBF_NUFFT_BENCH_M` / `_N` shrink it; `gpucbf nufft bench` has options).
    Nufft,
}

/// A benchmark's report: the figures it printed, the bounds it measured in the same run
/// and the ratios, as `--json` writes it (`"bench"` names the benchmark).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "bench", rename_all = "kebab-case")]
pub enum Report {
    /// `gpucbf bench xbgpu`.
    Xbgpu(xbgpu::XbgpuReport),
    /// `gpucbf bench xbgpu-beam`.
    XbgpuBeam(xbgpu::BeamReport),
    /// `gpucbf bench xbgpu-corr`.
    XbgpuCorr(xbgpu::CorrReport),
    /// `gpucbf bench xbgpu-feed`.
    XbgpuFeed(xbgpu::feed::FeedReport),
    /// `gpucbf bench fgpu`.
    Fgpu(fgpu::FgpuReport),
    /// `gpucbf bench fgpu-narrowband`.
    FgpuNarrowband(fgpu::narrowband::NarrowbandReport),
    /// `gpucbf bench fgpu-vkgdr`.
    FgpuVkgdr(fgpu::vkgdr::VkgdrReport),
    /// `gpucbf bench recv`.
    Recv(recv::RecvReport),
    /// `gpucbf bench recv-place`.
    RecvPlace(recv_place::PlaceReport),
    /// `gpucbf bench loopback`.
    Loopback(loopback::LoopbackReport),
    /// `gpucbf bench nufft`.
    Nufft(Box<nufft::NufftReport>),
}

/// Runs the benchmark `args` names (it prints its lines as it goes), writes its report to
/// `--json FILE` if given, and returns it.
pub fn run(args: BenchArgs) -> anyhow::Result<Report> {
    let report = match args.cmd {
        BenchCmd::Xbgpu => Report::Xbgpu(xbgpu::bench_gpu(&XBGPU_ANTS, XBGPU_SAMPLES_PER_LAUNCH)?),
        BenchCmd::XbgpuBeam => Report::XbgpuBeam(xbgpu::bench_gpu_beams()?),
        BenchCmd::XbgpuCorr => Report::XbgpuCorr(xbgpu::bench_gpu_corr(
            &XBGPU_ANTS,
            XBGPU_SAMPLES_PER_LAUNCH,
        )?),
        BenchCmd::XbgpuFeed(a) => Report::XbgpuFeed(xbgpu::feed::run(&a)?),
        BenchCmd::Fgpu => Report::Fgpu(fgpu::bench_fgpu()?),
        BenchCmd::FgpuNarrowband => {
            Report::FgpuNarrowband(fgpu::narrowband::bench_gpu_narrowband()?)
        }
        BenchCmd::FgpuVkgdr(a) => Report::FgpuVkgdr(fgpu::vkgdr::run(&a)?),
        BenchCmd::Recv(a) => Report::Recv(recv::run(&a)?),
        BenchCmd::RecvPlace(a) => Report::RecvPlace(recv_place::run(&a)?),
        BenchCmd::Loopback(a) => Report::Loopback(loopback::run(&a)?),
        BenchCmd::Nufft => Report::Nufft(Box::new(nufft::run_issue_case()?)),
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("--json {}", path.display()))?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use crate::bench::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Top,
    }

    #[derive(Subcommand)]
    enum Top {
        Bench(BenchArgs),
    }

    fn parse(args: &str) -> Result<BenchArgs, clap::Error> {
        let argv = ["gpucbf"].into_iter().chain(args.split_whitespace());
        Cli::try_parse_from(argv).map(|c| match c.cmd {
            Top::Bench(b) => b,
        })
    }

    /// Every spelling `gpucbf bench WHAT` took before it became a subcommand still parses to
    /// its benchmark.
    #[test]
    fn every_old_spelling_parses() {
        let name = |c: &BenchCmd| match c {
            BenchCmd::Xbgpu => "xbgpu",
            BenchCmd::XbgpuBeam => "xbgpu-beam",
            BenchCmd::XbgpuCorr => "xbgpu-corr",
            BenchCmd::XbgpuFeed(_) => "xbgpu-feed",
            BenchCmd::Fgpu => "fgpu",
            BenchCmd::FgpuNarrowband => "fgpu-narrowband",
            BenchCmd::FgpuVkgdr(_) => "fgpu-vkgdr",
            BenchCmd::Recv(_) => "recv",
            BenchCmd::RecvPlace(_) => "recv-place",
            BenchCmd::Loopback(_) => "loopback",
            BenchCmd::Nufft => "nufft",
        };
        let old = [
            "xbgpu",
            "xbgpu-beam",
            "xbgpu-corr",
            "fgpu",
            "fgpu-narrowband",
            "recv",
            "nufft",
        ];
        for what in old {
            let b = parse(&format!("bench {what}")).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(name(&b.cmd), what);
        }
        assert!(parse("bench").is_err());
        assert!(parse("bench xengine").is_err());
    }

    /// `bench fgpu-vkgdr` takes its options, with the engine's chunk size by default.
    #[test]
    fn fgpu_vkgdr_options_parse() {
        let BenchCmd::FgpuVkgdr(d) = parse("bench fgpu-vkgdr").unwrap().cmd else {
            panic!("not fgpu-vkgdr")
        };
        assert_eq!((d.chunk_samples, d.chunks, d.iters), (1 << 25, 4, 48));
        assert!(d.cores.is_empty());
        let a = "bench fgpu-vkgdr --chunk-samples 4194304 --chunks 3 --iters 8 --cores 2,3";
        let BenchCmd::FgpuVkgdr(r) = parse(a).unwrap().cmd else {
            panic!("not fgpu-vkgdr")
        };
        assert_eq!((r.chunk_samples, r.chunks, r.iters), (4194304, 3, 8));
        assert_eq!(r.cores, [2, 3]);
    }

    /// `bench recv` keeps its options and their defaults, and the hidden ones its DPDK child
    /// is started with.
    #[test]
    fn recv_options_parse() {
        let BenchCmd::Recv(d) = parse("bench recv").unwrap().cmd else {
            panic!("not recv")
        };
        assert_eq!(
            (d.heaps, d.min_seconds, d.trials, d.bypass_packets),
            (20000, 0.3, 5, 2_000_000)
        );
        assert_eq!(d.recv_affinity, None);
        assert_eq!(d.python, "/opt/gpucbf-venv/bin/python");
        assert_eq!(d.dir, std::path::PathBuf::from("/tmp"));
        assert_eq!(d.dpdk_eal, "--no-huge --no-pci -m 1024");
        let a = "bench recv --heaps 100 --min-seconds 0.1 --trials 1 --bypass-packets 1000 \
                 --recv-affinity 3 --python .venv/bin/python --peer-script p.py --dir /d \
                 --dpdk-eal --in-memory --only dpdk-net_ring --feed f.pcap";
        let BenchCmd::Recv(r) = parse(a).unwrap().cmd else {
            panic!("not recv")
        };
        assert_eq!(
            (r.heaps, r.min_seconds, r.trials, r.bypass_packets),
            (100, 0.1, 1, 1000)
        );
        assert_eq!(r.recv_affinity, Some(3));
        assert_eq!(r.python, ".venv/bin/python");
        assert_eq!(r.peer_script.as_deref(), Some(std::path::Path::new("p.py")));
        assert_eq!(r.dir, std::path::PathBuf::from("/d"));
        assert_eq!(r.dpdk_eal, "--in-memory");
        assert_eq!(r.only.as_deref(), Some("dpdk-net_ring"));
        assert_eq!(r.feed.as_deref(), Some(std::path::Path::new("f.pcap")));
        // the recv options belong to recv alone
        assert!(parse("bench xbgpu --trials 1").is_err());
    }

    /// `bench xbgpu-feed` takes the L-band shape by default; its options parse.
    #[test]
    fn xbgpu_feed_options_parse() {
        let BenchCmd::XbgpuFeed(d) = parse("bench xbgpu-feed").unwrap().cmd else {
            panic!("not xbgpu-feed")
        };
        assert_eq!(d.ants, vec![1, 4]);
        assert_eq!(
            (
                d.channels,
                d.spectra_per_heap,
                d.batches_per_chunk,
                d.accumulation
            ),
            (4096, 256, 32, 408)
        );
        let a = "bench xbgpu-feed --ants 2,8 --channels 512 --seconds 0.5 --missing-every 8";
        let BenchCmd::XbgpuFeed(r) = parse(a).unwrap().cmd else {
            panic!("not xbgpu-feed")
        };
        assert_eq!((r.ants, r.channels, r.missing_every), (vec![2, 8], 512, 8));
        assert_eq!((d.backend.as_str(), r.backend.as_str()), ("none", "none"));
        let BenchCmd::XbgpuFeed(g) = parse("bench xbgpu-feed --backend gpu").unwrap().cmd else {
            panic!("not xbgpu-feed")
        };
        assert_eq!(g.backend, "gpu");
        assert!(parse("bench xbgpu-feed --backend fpga").is_err());
        assert_eq!(r.seconds, 0.5);
        assert!(parse("bench xbgpu-feed --ants x").is_err());
    }

    /// `--json FILE` belongs to `bench` and may come before or after the benchmark's name.
    #[test]
    fn json_is_global_to_bench() {
        for a in [
            "bench --json r.json recv --trials 1",
            "bench recv --trials 1 --json r.json",
        ] {
            let b = parse(a).unwrap();
            assert_eq!(
                b.json.as_deref(),
                Some(std::path::Path::new("r.json")),
                "{a}"
            );
            assert!(matches!(b.cmd, BenchCmd::Recv(_)), "{a}");
        }
        assert_eq!(parse("bench nufft").unwrap().json, None);
        let b = parse("bench xbgpu-corr --json x.json").unwrap();
        assert_eq!(b.json.as_deref(), Some(std::path::Path::new("x.json")));
    }

    /// A report is tagged with its benchmark's name and carries the figures it printed.
    #[test]
    fn report_names_its_bench() {
        let cpu = nufft::cpu::bench_cpu(2000, 16, 1e-5, 2.0, 1, 2, None).unwrap();
        let r = Report::Nufft(Box::new(nufft::NufftReport {
            m: 2000,
            n: 16,
            eps: 1e-5,
            gpu: None,
            cpu,
            finufft: None,
            finufft_error: Some("not run here".into()),
        }));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["bench"], "nufft");
        assert_eq!(v["cpu"]["m"], 2000);
        assert!(v["cpu"]["points_per_s"].as_f64().unwrap() > 0.0);
        assert!(v["cpu"]["sample_rel_err"].as_f64().unwrap() < 1e-3);
        assert!(v["gpu"].is_null());
        let line = fgpu::cpu::bench_cpu(
            crate::compute::fengine::FConfig::wideband(256, 32),
            32,
            10,
            1,
        )
        .unwrap();
        let v = serde_json::to_value(&line).unwrap();
        assert_eq!(v["kind"], "wideband");
        assert!(v["gsps_per_pol"].as_f64().unwrap() > 0.0);
    }
}
