//! Command-line helpers shared by the engines: `key=value,...` output specs
//! (`--wideband`, `--narrowband`, `--corrprod`, `--beam`), the `--backend auto|cpu|gpu`
//! choice, and the options `fgpu` and `xbgpu` share ([`engine_args!`]).

/// Splits `key=value,key=value`. Items without `=` continue the previous value when its key
/// is one of `list_keys` (an endpoint list: `dst=a:1,b:2`); elsewhere they are an error.
pub fn parse_kv(spec: &str, list_keys: &[&str]) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for part in spec.split(',') {
        match part.split_once('=') {
            Some((k, v)) => out.push((k.trim().to_string(), v.trim().to_string())),
            None => match out.last_mut() {
                Some((k, v)) if list_keys.contains(&k.as_str()) => {
                    v.push(',');
                    v.push_str(part.trim());
                }
                _ => return Err(format!("expected key=value, got {part:?}")),
            },
        }
    }
    Ok(out)
}

/// Parses a number, accepting float notation for integers too (`channels=4096.0`, `1e3`).
pub fn parse_num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, String> {
    v.parse::<T>().or_else(|_| {
        let f: f64 = v.parse().map_err(|_| format!("{k}={v}: not a number"))?;
        if f.fract() != 0.0 {
            return Err(format!("{k}={v}: not an integer"));
        }
        format!("{}", f as i128)
            .parse::<T>()
            .map_err(|_| format!("{k}={v}: out of range"))
    })
}

/// Parses `uniform` / `none` (the `dither=` key).
pub fn parse_dither(v: &str) -> Result<bool, String> {
    match v {
        "uniform" => Ok(true),
        "none" => Ok(false),
        _ => Err(format!("dither={v}: expected uniform or none")),
    }
}

/// `--backend auto|cpu|gpu`, resolved: true for the GPU backend. `gpu_supported` says whether
/// the GPU backend handles this configuration at all (auto falls back to the CPU when it does
/// not or when no GPU exists; an explicit `gpu` without a GPU is a clear error).
pub fn use_gpu(backend: &str, gpu_supported: bool) -> anyhow::Result<bool> {
    match backend {
        "cpu" => Ok(false),
        "gpu" => {
            if !crate::gpu::gpu_available() {
                anyhow::bail!(
                    "--backend gpu: no usable CUDA device found (use --backend cpu or auto)"
                );
            }
            Ok(true)
        }
        "auto" => Ok(gpu_supported && crate::gpu::gpu_available()),
        other => anyhow::bail!("--backend {other}: expected auto, cpu or gpu"),
    }
}

/// Declares an engine's options struct (a `clap::Args`) with the options that `fgpu` and
/// `xbgpu` share appended to its own fields (katgpucbf names): network receive and send,
/// output pcap, compute backend and Prometheus port.
macro_rules! engine_args {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($fields:tt)* }) => {
        $(#[$meta])*
        $vis struct $name {
            $($fields)*
            /// Local interface address for multicast receive.
            #[arg(long, default_value = "0.0.0.0")]
            pub recv_interface: ::std::net::Ipv4Addr,
            /// Receive through DPDK (feature `dpdk`) with these EAL arguments, e.g.
            /// "--no-huge --no-pci -m 512 --vdev net_pcap0,rx_pcap=FILE"; SRC then lists the
            /// endpoints to keep ("all": every UDP datagram).
            #[arg(long, allow_hyphen_values = true, value_name = "EAL ARGS")]
            pub recv_dpdk: Option<String>,
            /// Receive through ibverbs (feature `ibverbs`): a raw-packet queue pair on the RDMA
            /// port behind --recv-interface, one flow-steering rule per endpoint in SRC.
            #[arg(long)]
            pub recv_ibv: bool,
            /// Send heaps straight from GPU memory through ibverbs (PeerDirect); without an
            /// RDMA NIC, a GPU and GPU memory registration, output is staged through pinned
            /// host memory (logged at start).
            #[arg(long)]
            pub use_peerdirect: bool,
            /// Local interface address to send from.
            #[arg(long, default_value = "0.0.0.0")]
            pub send_interface: ::std::net::Ipv4Addr,
            /// Multicast TTL.
            #[arg(long, default_value_t = 4)]
            pub send_ttl: u32,
            /// Payload bytes per output packet.
            #[arg(long, default_value_t = 8192)]
            pub send_packet_payload: usize,
            /// Write output packets to this pcap file instead of sending them.
            #[arg(long)]
            pub send_pcap: Option<::std::path::PathBuf>,
            /// Compute backend: auto, cpu or gpu.
            #[arg(long, default_value = "auto")]
            pub backend: String,
            /// Prometheus metrics port (none by default).
            #[arg(long)]
            pub prometheus_port: Option<u16>,
        }
    };
}
pub(crate) use engine_args;

#[cfg(test)]
mod tests {
    use crate::engines::common::cli::*;

    #[test]
    fn kv_lists_numbers_and_backends() {
        let kv = parse_kv("name=wb, dst=1.2.3.4:1,5.6.7.8:2,taps=4", &["dst"]).unwrap();
        assert_eq!(kv[1], ("dst".into(), "1.2.3.4:1,5.6.7.8:2".into()));
        assert_eq!(kv[2], ("taps".into(), "4".into()));
        assert!(parse_kv("name=wb,dst=1.2.3.4:1,5.6.7.8:2", &[]).is_err());
        assert!(parse_kv("oops", &["dst"]).is_err());
        assert_eq!(parse_num::<usize>("c", "4096.0"), Ok(4096));
        assert_eq!(parse_num::<usize>("c", "1e3"), Ok(1000));
        assert!(parse_num::<usize>("c", "2.5").is_err());
        assert!(parse_num::<usize>("c", "-1").is_err());
        assert!(parse_num::<u8>("c", "300").is_err());
        assert_eq!(parse_dither("none"), Ok(false));
        assert!(parse_dither("gaussian").is_err());
        assert!(!use_gpu("cpu", true).unwrap());
        assert!(!use_gpu("auto", false).unwrap());
        assert_eq!(use_gpu("auto", true).unwrap(), crate::gpu::gpu_available());
        assert_eq!(use_gpu("gpu", true).is_ok(), crate::gpu::gpu_available());
        let e = use_gpu("tpu", true).unwrap_err().to_string();
        assert!(e.contains("expected auto, cpu or gpu"), "{e}");
    }

    /// `fgpu` and `xbgpu` both take the options of [`engine_args!`], with their defaults.
    #[test]
    fn engine_args_carry_the_shared_options() {
        use clap::Parser;
        #[derive(Parser)]
        struct F {
            #[command(flatten)]
            a: crate::engines::fgpu::FgpuArgs,
        }
        #[derive(Parser)]
        struct X {
            #[command(flatten)]
            a: crate::engines::xbgpu::XbgpuArgs,
        }
        let common = ["--adc-sample-rate", "1712e6", "--sync-time", "0"];
        let shared = [
            "--send-ttl",
            "7",
            "--recv-ibv",
            "--send-pcap",
            "o.pcap",
            "--backend",
            "cpu",
            "--prometheus-port",
            "9100",
            "--recv-interface",
            "10.0.0.1",
        ];
        let xb = [
            "--array-size",
            "4",
            "--channels",
            "1024",
            "--channels-per-substream",
            "256",
            "--samples-between-spectra",
            "2048",
        ];
        let f = F::try_parse_from(
            ["fgpu"]
                .iter()
                .chain(&common)
                .chain(&shared)
                .chain(&["x.pcap"]),
        )
        .unwrap()
        .a;
        let x = X::try_parse_from(
            ["xbgpu"]
                .iter()
                .chain(&common)
                .chain(&xb)
                .chain(&shared)
                .chain(&["x.pcap"]),
        )
        .unwrap()
        .a;
        // The same fields, read from either struct.
        macro_rules! shared {
            ($a:expr) => {
                (
                    ($a.send_ttl, $a.recv_ibv, $a.send_pcap.clone()),
                    ($a.backend.clone(), $a.prometheus_port, $a.recv_interface),
                    ($a.send_packet_payload, $a.send_interface),
                    ($a.recv_dpdk.clone(), $a.use_peerdirect, $a.src.clone()),
                )
            };
        }
        let want = (
            (7, true, Some(std::path::PathBuf::from("o.pcap"))),
            (
                "cpu".to_string(),
                Some(9100),
                std::net::Ipv4Addr::new(10, 0, 0, 1),
            ),
            (8192, std::net::Ipv4Addr::UNSPECIFIED),
            (None, false, "x.pcap".to_string()),
        );
        assert_eq!(shared!(f), want);
        assert_eq!(shared!(x), want);
    }
}
