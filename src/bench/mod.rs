//! `gpucbf bench ...`: one harness per subject, each measured against a bound or a peer in
//! the same run (device copy bandwidth, cuBLASLt int8 GEMM, FMA rate, spead2, FINUFFT).

use clap::{Args, Subcommand};

pub mod fgpu;
pub mod nufft;
pub mod recv;
pub mod xbgpu;

/// Antenna counts of the correlator lines of `gpucbf bench xbgpu` and `xbgpu-corr`.
const XBGPU_ANTS: [usize; 4] = [64, 256, 576, 1024];
/// Samples per correlator launch of those lines.
const XBGPU_SAMPLES_PER_LAUNCH: usize = 8192;

/// `gpucbf bench`: which benchmark to run.
#[derive(Debug, Args)]
pub struct BenchArgs {
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
    /// GPU F-engine: wideband resident and end-to-end throughput, bandwidths, then the
    /// narrowband lines.
    Fgpu,
    /// Only the narrowband lines of `fgpu`.
    FgpuNarrowband,
    /// Packets/s of the file, UDP loopback and DPDK sources vs spead2.
    Recv(recv::RecvBenchArgs),
    /// GPU 2-D type 1, 1e8 points, 4096², eps 1e-5, f32, then the CPU and FINUFFT on the same
    /// input (`GPUCBF_NUFFT_BENCH_M` / `_N` shrink it; `gpucbf nufft bench` has options).
    Nufft,
}

/// Runs the benchmark `args` names; it prints its lines as it goes.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.cmd {
        BenchCmd::Xbgpu => xbgpu::bench_gpu(&XBGPU_ANTS, XBGPU_SAMPLES_PER_LAUNCH)?,
        BenchCmd::XbgpuBeam => xbgpu::bench_gpu_beams()?,
        BenchCmd::XbgpuCorr => {
            xbgpu::bench_gpu_corr(&XBGPU_ANTS, XBGPU_SAMPLES_PER_LAUNCH)?;
        }
        BenchCmd::Fgpu => {
            fgpu::wideband::bench_gpu()?;
            fgpu::narrowband::bench_gpu_narrowband()?;
        }
        BenchCmd::FgpuNarrowband => fgpu::narrowband::bench_gpu_narrowband()?,
        BenchCmd::Recv(a) => {
            recv::run(&a)?;
        }
        BenchCmd::Nufft => nufft::run_issue_case()?,
    }
    Ok(())
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
            BenchCmd::Fgpu => "fgpu",
            BenchCmd::FgpuNarrowband => "fgpu-narrowband",
            BenchCmd::Recv(_) => "recv",
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
}
