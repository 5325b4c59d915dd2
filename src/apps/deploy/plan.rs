//! The array's deployment plan: every engine's exact command line, the multicast groups
//! it sends to and joins, its katcp and Prometheus ports and the host it is placed on.
//!
//! Group plan (all on one UDP port, `--port`):
//! * digitiser (dsim) antenna a, pol p → `dig_groups + 2a + p`;
//! * F-engines → XB-engine k (channel range k of `--x-engines`) → `fx_groups + k`;
//! * XB-engine k's correlation products → `corrprod_groups + k`.
//!
//! Placement spreads the engines over the hosts (XB-engines first, then F-engines, then
//! dsims): each goes to the host with the fewest engines so far that still has the cores
//! (and, off the CPU backend, a GPU) it needs, the first such host on ties. The command
//! lines name each host's first interface, so an engine's line depends on its host only
//! through that name. Ports are unique across the array (base + engine number), so every
//! line also runs unchanged when several engines share a host (or one host runs them all).

use std::net::Ipv4Addr;

use serde::Serialize;

use super::hosts::Hosts;
use super::DeployArgs;
use crate::apps::array::plan::{fgpu_wideband_args, xbgpu_shape_args, Sizes};
use crate::engines::common::{Backend, ConfigError};

/// What an engine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Digitiser simulator (one per antenna, with `--dsims`).
    Dsim,
    /// F-engine (one per antenna).
    Fgpu,
    /// XB-engine (one per channel range).
    Xbgpu,
}

impl Kind {
    /// The subcommand name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Dsim => "dsim",
            Kind::Fgpu => "fgpu",
            Kind::Xbgpu => "xbgpu",
        }
    }
}

/// One engine of the plan.
#[derive(Debug, Clone, Serialize)]
pub struct Engine {
    /// Name (`xbgpu0`, `fgpu3`, `dsim3`), unique, a DNS label.
    pub name: String,
    /// Kind.
    pub kind: Kind,
    /// Antenna (dsim, fgpu) or channel range (xbgpu).
    pub index: usize,
    /// Host name (from the hosts file).
    pub host: String,
    /// The command line, `gpucbf SUBCOMMAND ...`.
    pub argv: Vec<String>,
    /// katcp port.
    pub katcp_port: u16,
    /// Prometheus port.
    pub prometheus_port: u16,
    /// Whole cores requested.
    pub cores: usize,
    /// Needs a GPU.
    pub gpu: bool,
    /// Multicast groups joined (`ADDR:PORT`).
    pub joins: Vec<String>,
    /// Multicast groups sent to (`ADDR:PORT`).
    pub sends: Vec<String>,
    /// First channel (xbgpu) and channel count handled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channels: Option<[usize; 2]>,
}

/// The whole plan, as `--format commands` prints it and the ConfigMap holds it.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Array name.
    pub name: String,
    /// Antennas.
    pub antennas: usize,
    /// Wideband channels.
    pub channels: usize,
    /// XB-engines.
    pub x_engines: usize,
    /// ADC sample rate (Hz).
    pub adc_sample_rate: f64,
    /// Sync time (UNIX seconds).
    pub sync_time: f64,
    /// Complex values per F-engine batch (per pol).
    pub jones_per_batch: usize,
    /// Batches per accumulation (dump).
    pub heap_accumulation_threshold: usize,
    /// Seconds per dump.
    pub dump_seconds: f64,
    /// The UDP port of every stream.
    pub port: u16,
    /// The hosts.
    pub hosts: Vec<super::hosts::Host>,
    /// The engines, XB-engines first.
    pub engines: Vec<Engine>,
}

fn group(base: Ipv4Addr, k: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(base) + k as u32)
}

/// Checks that `count` groups from `base` stay multicast and in `base`'s /16.
fn check_groups(option: &str, base: Ipv4Addr, count: usize) -> Result<(), ConfigError> {
    let last = u32::from(base) as u64 + count as u64 - 1;
    let last_ip = Ipv4Addr::from(last.min(u32::MAX as u64) as u32);
    if !base.is_multicast()
        || !last_ip.is_multicast()
        || (last >> 16) != (u32::from(base) >> 16) as u64
    {
        return Err(ConfigError::rule(
            format!("{option} {base}"),
            format!("{count} multicast groups from it must stay within its /16 of 224.0.0.0/4"),
        ));
    }
    Ok(())
}

/// `base+n-1:port` (an engine's group list), or `base:port` for one.
fn group_list(base: Ipv4Addr, n: usize, port: u16) -> String {
    match n {
        1 => format!("{base}:{port}"),
        _ => format!("{base}+{}:{port}", n - 1),
    }
}

impl Plan {
    /// The plan for `args` on `hosts`.
    pub fn new(args: &DeployArgs, hosts: &Hosts) -> Result<Plan, ConfigError> {
        let (n, c, nx) = (args.antennas, args.channels, args.x_engines);
        let bad = |what: String, why: &str| ConfigError::rule(what, why);
        if n == 0 {
            return Err(bad(format!("--antennas {n}"), "must be at least 1"));
        }
        if !c.is_power_of_two() || !(64..=65536).contains(&c) {
            return Err(bad(
                format!("--channels {c}"),
                "must be a power of two, 64..=65536",
            ));
        }
        if nx == 0 || !nx.is_power_of_two() || c / nx < 32 {
            return Err(bad(
                format!("--x-engines {nx}"),
                "must be a power of two leaving at least 32 channels per XB-engine",
            ));
        }
        if !(args.adc_sample_rate.is_finite() && args.adc_sample_rate > 0.0) {
            return Err(bad(
                format!("--adc-sample-rate {}", args.adc_sample_rate),
                "must be positive",
            ));
        }
        check_groups("--dig-groups", args.dig_groups, 2 * n)?;
        check_groups("--fx-groups", args.fx_groups, nx)?;
        check_groups("--corrprod-groups", args.corrprod_groups, nx)?;
        let sizes = Sizes::for_rate(args.adc_sample_rate, c);
        let jones = args.jones_per_batch.unwrap_or(sizes.jones_per_batch);
        if !jones.is_multiple_of(c) || jones / c == 0 {
            return Err(bad(
                format!("--jones-per-batch {jones}"),
                "must be a multiple of --channels",
            ));
        }
        // Two batches per fgpu receive chunk (as `gpucbf array`), at real rates at least
        // `tools/rt_run.sh`'s 2^25 samples.
        let recv_chunk = match sizes.real_rate {
            true => sizes.recv_chunk_samples.max(4 * jones as u64),
            false => 4 * jones as u64,
        };
        let batch_seconds = 2.0 * jones as f64 / args.adc_sample_rate;
        let threshold = ((args.int_time / batch_seconds).round() as usize).max(1);
        let sync = args.sync_time.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs() as f64)
        });
        let gpu = args.backend != Backend::Cpu;
        let mut placer = Placer::new(hosts);
        let port = args.port;
        let s = |v: &str| v.to_string();
        let common = |kind: Kind| {
            vec![
                s("gpucbf"),
                s(kind.name()),
                s("--adc-sample-rate"),
                args.adc_sample_rate.to_string(),
                s("--sync-time"),
                sync.to_string(),
            ]
        };
        // An engine's receive and send interface (the one its host gives it) and backend.
        let io = |iface: String| {
            [
                s("--recv-interface"),
                iface.clone(),
                s("--send-interface"),
                iface,
                s("--backend"),
                args.backend.name().to_string(),
            ]
        };
        let mut engines = Vec::new();
        let mut number = 0u16;
        let mut ports = |argv: &mut Vec<String>| {
            let (k, p) = (
                args.katcp_port_base + number,
                args.prometheus_port_base + number,
            );
            number += 1;
            argv.extend([
                s("--katcp-port"),
                k.to_string(),
                s("--prometheus-port"),
                p.to_string(),
            ]);
            (k, p)
        };
        let per_x = c / nx;
        for k in 0..nx {
            let (host, iface) = placer.place(&format!("xbgpu{k}"), args.xbgpu_cores, gpu)?;
            let src = format!("{}:{port}", group(args.fx_groups, k));
            let dst = format!("{}:{port}", group(args.corrprod_groups, k));
            let mut argv = common(Kind::Xbgpu);
            argv.extend([s("--array-size"), n.to_string()]);
            argv.extend(xbgpu_shape_args(
                c,
                per_x,
                Some(k * per_x),
                2 * c as u64,
                jones,
                sizes.heaps_per_fengine_per_chunk,
            ));
            argv.extend([
                s("--corrprod"),
                format!("name=baseline-correlation-products,dst={dst},heap_accumulation_threshold={threshold}"),
                s("--send-enabled"),
            ]);
            argv.extend(io(iface));
            argv.extend(sizes.xbgpu_recv.iter().cloned());
            let (kp, pp) = ports(&mut argv);
            argv.push(src.clone());
            engines.push(Engine {
                name: format!("xbgpu{k}"),
                kind: Kind::Xbgpu,
                index: k,
                host,
                argv,
                katcp_port: kp,
                prometheus_port: pp,
                cores: args.xbgpu_cores,
                gpu,
                joins: vec![src],
                sends: vec![dst],
                channels: Some([k * per_x, per_x]),
            });
        }
        let dig =
            |a: usize| [0, 1].map(|p| format!("{}:{port}", group(args.dig_groups, 2 * a + p)));
        for a in 0..n {
            let (host, iface) = placer.place(&format!("fgpu{a}"), args.fgpu_cores, gpu)?;
            let mut argv = common(Kind::Fgpu);
            argv.extend(fgpu_wideband_args(
                a,
                n,
                c,
                &group_list(args.fx_groups, nx, port),
                jones,
                recv_chunk,
            ));
            argv.extend([s("--dither-seed"), args.seed.to_string()]);
            argv.extend(io(iface));
            if let Some(g) = args.gain {
                argv.extend([s("--gain"), g.to_string()]);
            }
            argv.extend(sizes.fgpu_recv.iter().cloned());
            let (kp, pp) = ports(&mut argv);
            argv.push(dig(a).join(","));
            engines.push(Engine {
                name: format!("fgpu{a}"),
                kind: Kind::Fgpu,
                index: a,
                host,
                argv,
                katcp_port: kp,
                prometheus_port: pp,
                cores: args.fgpu_cores,
                gpu,
                joins: dig(a).to_vec(),
                sends: (0..nx)
                    .map(|k| format!("{}:{port}", group(args.fx_groups, k)))
                    .collect(),
                channels: None,
            });
        }
        if args.dsims {
            for a in 0..n {
                let (host, iface) = placer.place(&format!("dsim{a}"), args.dsim_cores, false)?;
                let mut argv = common(Kind::Dsim);
                argv.extend([
                    s("--interface"),
                    iface,
                    s("--first-id"),
                    (2 * a).to_string(),
                    s("--dither-seed"),
                    (args.seed + 1 + a as u64).to_string(),
                    s("--period"),
                    args.dsim_period.to_string(),
                    s("--signals"),
                    args.dsim_signals.clone(),
                ]);
                let (kp, pp) = ports(&mut argv);
                argv.extend(dig(a));
                engines.push(Engine {
                    name: format!("dsim{a}"),
                    kind: Kind::Dsim,
                    index: a,
                    host,
                    argv,
                    katcp_port: kp,
                    prometheus_port: pp,
                    cores: args.dsim_cores,
                    gpu: false,
                    joins: Vec::new(),
                    sends: dig(a).to_vec(),
                    channels: None,
                });
            }
        }
        Ok(Plan {
            name: args.name.clone(),
            antennas: n,
            channels: c,
            x_engines: nx,
            adc_sample_rate: args.adc_sample_rate,
            sync_time: sync,
            jones_per_batch: jones,
            heap_accumulation_threshold: threshold,
            dump_seconds: threshold as f64 * batch_seconds,
            port,
            hosts: hosts.hosts.clone(),
            engines,
        })
    }
}

/// Places engines on hosts: the host with the fewest engines that has what one needs.
struct Placer<'a> {
    hosts: &'a Hosts,
    engines: Vec<usize>,
    cores: Vec<usize>,
    gpus: Vec<usize>,
}

impl<'a> Placer<'a> {
    fn new(hosts: &'a Hosts) -> Self {
        Placer {
            hosts,
            engines: vec![0; hosts.hosts.len()],
            cores: hosts.hosts.iter().map(|h| h.cores).collect(),
            gpus: hosts.hosts.iter().map(|h| h.gpus).collect(),
        }
    }

    /// The host for engine `name` (its name and first interface), its resources taken.
    fn place(
        &mut self,
        name: &str,
        cores: usize,
        gpu: bool,
    ) -> Result<(String, String), ConfigError> {
        let fits = |i: &usize| self.cores[*i] >= cores && (!gpu || self.gpus[*i] > 0);
        let Some(i) = (0..self.engines.len())
            .filter(fits)
            .min_by_key(|&i| self.engines[i])
        else {
            return Err(ConfigError::rule(
                format!("--hosts ({} hosts)", self.hosts.hosts.len()),
                format!(
                    "no host has {cores} free cores{} left for {name}",
                    if gpu { " and a free GPU" } else { "" }
                ),
            ));
        };
        self.engines[i] += 1;
        self.cores[i] -= cores;
        self.gpus[i] -= gpu as usize;
        let h = &self.hosts.hosts[i];
        Ok((h.name.clone(), h.interfaces[0].clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: DeployArgs,
    }

    fn args(extra: &[&str]) -> DeployArgs {
        let mut v = vec!["deploy", "--hosts", "h.json", "--sync-time", "1000"];
        v.extend(extra);
        Cli::try_parse_from(v).unwrap().a
    }

    fn hosts(n: usize, gpus: usize, cores: usize) -> Hosts {
        let hs: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"name": "h{i}", "interfaces": ["eth{i}"], "gpus": {gpus}, "cores": {cores}}}"#))
            .collect();
        Hosts::parse(&format!(r#"{{"hosts": [{}]}}"#, hs.join(",")), "h.json").unwrap()
    }

    fn value<'a>(argv: &'a [String], opt: &str) -> &'a str {
        let i = argv
            .iter()
            .position(|a| a == opt)
            .unwrap_or_else(|| panic!("{opt} in {argv:?}"));
        &argv[i + 1]
    }

    #[test]
    fn groups_ports_and_channel_ranges_follow_the_plan() {
        let a = args(&[
            "--antennas",
            "3",
            "--channels",
            "1024",
            "--x-engines",
            "2",
            "--dsims",
            "--backend",
            "cpu",
            "--adc-sample-rate",
            "1671875",
            "--jones-per-batch",
            "65536",
            "--fgpu-cores",
            "1",
            "--xbgpu-cores",
            "1",
            "--dsim-cores",
            "1",
        ]);
        let p = Plan::new(&a, &hosts(8, 0, 4)).unwrap();
        let names: Vec<&str> = p.engines.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            ["xbgpu0", "xbgpu1", "fgpu0", "fgpu1", "fgpu2", "dsim0", "dsim1", "dsim2"]
        );
        // Spread: one engine per host while there are hosts, each line naming its interface.
        let hosts: Vec<&str> = p.engines.iter().map(|e| e.host.as_str()).collect();
        assert_eq!(hosts, ["h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"]);
        let x1 = &p.engines[1].argv;
        assert_eq!(&x1[..2], ["gpucbf", "xbgpu"]);
        assert_eq!(value(x1, "--recv-interface"), "eth1");
        assert_eq!(value(x1, "--channel-offset-value"), "512");
        assert_eq!(value(x1, "--channels-per-substream"), "512");
        assert_eq!(x1.last().unwrap(), "239.11.0.1:7148");
        assert!(value(x1, "--corrprod").contains("dst=239.12.0.1:7148"));
        assert_eq!(p.engines[1].channels, Some([512, 512]));
        let f2 = &p.engines[4].argv;
        assert_eq!(value(f2, "--feng-id"), "2");
        assert!(value(f2, "--wideband").contains("dst=239.11.0.0+1:7148,jones_per_batch=65536"));
        assert_eq!(f2.last().unwrap(), "239.10.0.4:7148,239.10.0.5:7148");
        let d2 = &p.engines[7].argv;
        assert_eq!(&d2[d2.len() - 2..], ["239.10.0.4:7148", "239.10.0.5:7148"]);
        assert_eq!(value(d2, "--first-id"), "4");
        assert_eq!(value(d2, "--sync-time"), "1000");
        // Ports unique across the array.
        let mut ports: Vec<u16> = p
            .engines
            .iter()
            .flat_map(|e| [e.katcp_port, e.prometheus_port])
            .collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 16);
        assert_eq!(
            (p.engines[0].katcp_port, p.engines[0].prometheus_port),
            (7200, 9200)
        );
        // 2 × 65536 samples per batch at 1671875 Hz: 0.078 s; 0.5 s is 6 batches.
        assert_eq!(p.heap_accumulation_threshold, 6);
        assert!(value(&p.engines[0].argv, "--corrprod").ends_with("heap_accumulation_threshold=6"));
    }

    #[test]
    fn placement_packs_by_resources_and_says_what_is_short() {
        let a = args(&["--antennas", "4", "--channels", "4096", "--x-engines", "4"]);
        // GPU engines: 2 GPUs per host, 16 cores: 4 hosts take 8 engines, 2 each.
        let p = Plan::new(&a, &hosts(4, 2, 16)).unwrap();
        for h in ["h0", "h1", "h2", "h3"] {
            assert_eq!(p.engines.iter().filter(|e| e.host == h).count(), 2, "{h}");
        }
        assert!(p.engines.iter().all(|e| e.gpu));
        let e = Plan::new(&a, &hosts(3, 2, 16)).unwrap_err().to_string();
        assert!(e.contains("free GPU") && e.contains("fgpu"), "{e}");
        let e = Plan::new(&a, &hosts(8, 2, 1)).unwrap_err().to_string();
        assert!(
            e.contains("no host has 2 free cores") && e.contains("xbgpu0"),
            "{e}"
        );
    }

    #[test]
    fn bad_sizes_and_group_ranges_are_refused() {
        let h = hosts(64, 8, 64);
        for (extra, want) in [
            (&["--antennas", "0", "--channels", "1024"][..], "--antennas"),
            (&["--antennas", "2", "--channels", "1000"][..], "--channels"),
            (
                &["--antennas", "2", "--channels", "1024", "--x-engines", "64"][..],
                "--x-engines",
            ),
            (
                &["--antennas", "2", "--channels", "1024", "--x-engines", "3"][..],
                "--x-engines",
            ),
            (
                &[
                    "--antennas",
                    "2",
                    "--channels",
                    "1024",
                    "--dig-groups",
                    "10.0.0.0",
                ][..],
                "--dig-groups",
            ),
            (
                &[
                    "--antennas",
                    "2",
                    "--channels",
                    "1024",
                    "--fx-groups",
                    "239.11.255.254",
                ][..],
                "--fx-groups",
            ),
            (
                &[
                    "--antennas",
                    "2",
                    "--channels",
                    "1024",
                    "--jones-per-batch",
                    "1000",
                ][..],
                "--jones-per-batch",
            ),
        ] {
            let e = Plan::new(&args(extra), &h).unwrap_err().to_string();
            assert!(e.contains(want), "{extra:?}: {e}");
        }
    }
}
