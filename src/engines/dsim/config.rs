//! dsim's command line (katgpucbf's dsim options, [`DsimArgs`]) and the configuration it
//! makes once every option is checked ([`DsimConfig`], from [`DsimArgs::validate`]).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;

use clap::Args;

use super::signal;
use crate::engines::common::error::endpoints;
use crate::engines::common::sizes::{check_heap, check_memory};
use crate::engines::common::ConfigError;
use crate::mem::{Bytes, HostMemory};
use crate::spead::ADDRESS_MASK;

/// Command-line options (katgpucbf's dsim names).
#[derive(Debug, Clone, Args)]
pub struct DsimArgs {
    /// ADC sample rate in Hz (e.g. 1712e6 for L-band).
    #[arg(long)]
    pub adc_sample_rate: f64,
    /// Bits per sample (2–16).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=16))]
    pub sample_bits: u32,
    /// Samples per heap (one packet per heap).
    #[arg(long, default_value_t = 4096)]
    pub heap_samples: usize,
    /// Signal specification: one ';'-terminated expression per stream, or one for all.
    #[arg(long, default_value = "cw(1.0, 232101234.0);")]
    pub signals: String,
    /// UNIX time of timestamp zero (default: now).
    #[arg(long)]
    pub sync_time: Option<f64>,
    /// digitiser_id of the first stream (stream i gets first_id + i; LSB = polarisation).
    #[arg(long, default_value_t = 0)]
    pub first_id: u64,
    /// Seed for the dither (and for wgn without explicit entropy); random if absent.
    #[arg(long)]
    pub dither_seed: Option<u64>,
    /// Replay period in samples (a multiple of heap_samples).
    #[arg(long, default_value_t = 1 << 27)]
    pub period: u64,
    /// Stop after this many heaps per stream.
    #[arg(long)]
    pub heaps: Option<u64>,
    /// Write packets to this pcap file instead of sending them.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Output interface(s): names (`lo`, `ens1f0`: the first IPv4 address of each) or IPv4
    /// addresses, comma-separated. With several, each stream's destinations are divided
    /// among them in contiguous blocks (as fgpu divides an output's among its send
    /// interfaces: their number must be a multiple of the number of interfaces).
    #[arg(long, value_name = "IFACE[,IFACE...]", default_value = "0.0.0.0", value_parser = crate::engines::common::cli::parse_interfaces)]
    pub interface: crate::engines::common::cli::Interfaces,
    /// Size of the pre-computed ring in samples (default --period): a multiple of --period
    /// and of --heap-samples, at least 2 heaps. `?signals SPEC PERIOD` takes any period
    /// dividing it.
    #[arg(long)]
    pub max_period: Option<u64>,
    /// Send through ibverbs (katgpucbf's option; feature `ibverbs`): a raw-packet queue
    /// pair on the RDMA NIC behind --interface, one per send thread. Without one the dsim
    /// sends through UDP sockets, with one log line.
    #[arg(long)]
    pub ibv: bool,
    /// ibverbs completion vector (-1: poll); checked and accepted: the send path always
    /// polls its completion queue.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0)]
    pub comp_vector: i64,
    /// Python debugging consoles (accepted, not applicable).
    #[command(flatten)]
    pub console: crate::engines::common::ConsoleArgs,
    /// Multicast TTL.
    #[arg(long, default_value_t = 4)]
    pub ttl: u32,
    /// Seconds between descriptor heaps (0: none). Default: 5 s when sending live without
    /// --heaps, none for --pcap or --heaps runs (so those hold exactly the data heaps).
    #[arg(long)]
    pub descriptor_interval: Option<f64>,
    /// Rate multiplier (1.0 = real time; 0 = as fast as possible).
    #[arg(long, default_value_t = 1.0)]
    pub rate_factor: f64,
    /// katcp control port (default 7147 when sending live, none for --pcap or --heaps;
    /// 0: none).
    #[arg(long)]
    pub katcp_port: Option<u16>,
    /// Prometheus metrics port (none by default).
    #[arg(long)]
    pub prometheus_port: Option<u16>,
    /// katcp listening address.
    #[arg(long, default_value = "0.0.0.0")]
    pub katcp_host: Ipv4Addr,
    /// Address the Prometheus endpoint listens on (default: the `--katcp-host` address).
    #[arg(long, value_name = "ADDR")]
    pub prometheus_host: Option<Ipv4Addr>,
    /// Print a JSON summary on stdout at the end.
    #[arg(long)]
    pub summary: bool,
    /// Send threads (katgpucbf's option, here a list): one per core given (`N`, `N-M`,
    /// comma lists), each pinned there and sending its share of the streams (dealt
    /// round-robin), all paced on one schedule; -1: one unpinned thread.
    #[arg(
        long,
        value_name = "CORES",
        allow_hyphen_values = true,
        default_value = "-1"
    )]
    pub affinity: String,
    /// Core of the main thread (katcp, signal swaps); -1: unpinned.
    #[arg(long, value_name = "CORE", allow_hyphen_values = true, default_value_t = -1)]
    pub main_affinity: i64,
    /// Kernel send buffer of each send thread's UDP socket, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20)]
    pub send_buffer: usize,
    /// One destination per single-pol stream: ADDR[+N]:PORT (N extra multicast groups,
    /// heaps round-robin over them).
    #[arg(required = true, num_args = 1..)]
    pub dest: Vec<String>,
}

/// A checked dsim configuration: every option valid, the signals parsed per stream, the
/// destinations and endpoints resolved.
#[derive(Debug, Clone)]
pub struct DsimConfig {
    /// ADC sample rate in Hz (positive).
    pub adc_rate: f64,
    /// Bits per sample (2..=16).
    pub bits: u32,
    /// Samples per heap (a whole number of bytes).
    pub heap_samples: usize,
    /// The signal of each stream.
    pub signals: Vec<signal::StreamSignal>,
    /// `--signals` as given (the katcp sensors show it).
    pub signals_text: String,
    /// UNIX time of timestamp zero; `None`: the moment sending starts (first timestamp 0).
    pub sync_time: Option<f64>,
    /// digitiser_id of the first stream.
    pub first_id: u64,
    /// Dither seed (drawn at random when not given).
    pub dither_seed: u64,
    /// The signal's period in samples at start (divides `max_period`).
    pub period: u64,
    /// Samples in the pre-computed ring (a multiple of `period` and of `heap_samples`, at
    /// least 2 heaps).
    pub max_period: u64,
    /// Heaps per stream to send (`None`: until stopped).
    pub heaps: Option<u64>,
    /// Write packets to this pcap file instead of sending them.
    pub pcap: Option<PathBuf>,
    /// Every `--interface`, in order (at least one): each stream's destinations are
    /// divided among them.
    pub interfaces: Vec<Ipv4Addr>,
    /// Multicast TTL.
    pub ttl: u32,
    /// Seconds between descriptor heaps (0: none).
    pub descriptor_interval: f64,
    /// Rate multiplier (0: as fast as possible).
    pub rate_factor: f64,
    /// Destinations per stream (heaps round-robin over them).
    pub dests: Vec<Vec<SocketAddrV4>>,
    /// katcp server address, if enabled.
    pub katcp: Option<SocketAddrV4>,
    /// True when `--katcp-port` was given: failing to serve it is then an error (the
    /// default port only warns).
    pub katcp_required: bool,
    /// Prometheus endpoint address, if enabled.
    pub prometheus: Option<SocketAddrV4>,
    /// One entry per send thread: the core it is pinned to, if any.
    pub send_cores: Vec<Option<usize>>,
    /// Core of the main thread, if pinned.
    pub main_core: Option<usize>,
    /// Kernel send buffer per UDP socket (or ibverbs frame ring), bytes.
    pub send_buffer: usize,
    /// Send through ibverbs where the interface has an RDMA NIC (`--ibv`).
    pub ibv: bool,
}

impl DsimConfig {
    /// The local interface address the dsim sends from: the first `--interface`.
    pub fn interface(&self) -> Ipv4Addr {
        self.interfaces
            .first()
            .copied()
            .unwrap_or(Ipv4Addr::UNSPECIFIED)
    }
}

/// Timestamps and digitiser ids are 48-bit SPEAD items: 2^48.
const ITEM_SPACE: f64 = (ADDRESS_MASK as f64) + 1.0;

impl DsimArgs {
    /// Logs once the katgpucbf options that are accepted but have no effect here.
    pub fn log_not_applicable(&self) {
        self.console.log_not_applicable();
    }

    /// Refuses digitiser ids and timestamps that would not fit the 48-bit items (they
    /// would wrap silently on the wire): `--first-id` for every stream, the first
    /// timestamp after `--sync-time`, and the last of a `--heaps` run.
    fn check_48_bits(&self, n_streams: usize, now: f64) -> Result<(), ConfigError> {
        let item = "the 48-bit digitiser_id item";
        if self.first_id > ADDRESS_MASK {
            return Err(ConfigError::rule(
                format!("--first-id {}", self.first_id),
                format!("does not fit {item} (at most {ADDRESS_MASK})"),
            ));
        }
        let extra = n_streams.saturating_sub(1) as u64;
        if self.first_id + extra > ADDRESS_MASK {
            return Err(ConfigError::rule(
                format!("--first-id + {extra} = {}", self.first_id + extra),
                format!("(the last of {n_streams} streams) does not fit {item} (at most {ADDRESS_MASK})"),
            ));
        }
        let days = |samples: f64| samples / self.adc_sample_rate / 86400.0;
        let start = match self.sync_time {
            Some(t) => ((now - t) * self.adc_sample_rate).max(0.0),
            None => 0.0,
        };
        if start >= ITEM_SPACE {
            return Err(ConfigError::rule(
                format!("--sync-time {}", self.sync_time.unwrap_or_default()),
                format!(
                    "is {:.2} days ago: its timestamps are past the 48-bit timestamp space \
                     (2^48 samples, {:.2} days at {} Hz)",
                    days(start),
                    days(ITEM_SPACE),
                    self.adc_sample_rate
                ),
            ));
        }
        if let Some(n) = self.heaps {
            let end = start + n as f64 * self.heap_samples as f64;
            if end > ITEM_SPACE {
                return Err(ConfigError::rule(
                    format!("--heaps {n}"),
                    format!(
                        "× --heap-samples {} from timestamp {start:.0} runs past the 48-bit \
                         timestamp space (2^48 samples)",
                        self.heap_samples
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks every option and builds the configuration; nothing starts here.
    pub fn validate(&self) -> Result<DsimConfig, ConfigError> {
        self.check_sizes(HostMemory::probe())?;
        if !(self.adc_sample_rate.is_finite() && self.adc_sample_rate > 0.0) {
            return Err(ConfigError::rule(
                "--adc-sample-rate",
                "must be a positive number",
            ));
        }
        if self.heap_samples == 0
            || !(self.heap_samples * self.sample_bits as usize).is_multiple_of(8)
        {
            return Err(ConfigError::rule(
                "--heap-samples × --sample-bits",
                "must be a positive whole number of bytes",
            ));
        }
        let max_period = self.ring()?;
        if self.comp_vector < -1 {
            return Err(ConfigError::rule("--comp-vector", "must be ≥ -1"));
        }
        if !(self.rate_factor.is_finite() && self.rate_factor >= 0.0) {
            return Err(ConfigError::rule("--rate-factor", "must be ≥ 0"));
        }
        let dests = self
            .dest
            .iter()
            .map(|d| endpoints(d))
            .collect::<Result<Vec<_>, _>>()?;
        let dither_seed = self.dither_seed.unwrap_or_else(rand::random);
        let mut k = 0u64;
        let mut entropy = || {
            k += 1;
            signal::mix64(dither_seed ^ 0xD51A_0000_0000_0000 ^ k)
        };
        let signals_error = |e: signal::SignalError| ConfigError::Parse {
            option: "--signals",
            reason: Box::new(e),
        };
        let parsed = signal::parse(&self.signals, &mut entropy).map_err(signals_error)?;
        let signals = signal::per_stream(parsed, dests.len()).map_err(signals_error)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        if let Some(t) = self.sync_time {
            if !t.is_finite() || t > now + 1.0 {
                return Err(ConfigError::rule(
                    "--sync-time",
                    "must not be in the future",
                ));
            }
        }
        let sync_time = self.sync_time;
        self.check_48_bits(dests.len(), now)?;
        let bounded = self.heaps.is_some() || self.pcap.is_some();
        let descriptor_interval =
            self.descriptor_interval
                .unwrap_or(if bounded { 0.0 } else { 5.0 });
        if !(descriptor_interval.is_finite() && descriptor_interval >= 0.0) {
            return Err(ConfigError::rule("--descriptor-interval", "must be ≥ 0"));
        }
        let (send_cores, main_core) = self.cores(dests.len())?;
        let n_if = self.interface.0.len();
        if let Some(d) = dests.iter().find(|d| n_if > 1 && d.len() % n_if != 0) {
            return Err(ConfigError::rule(
                "--interface",
                format!(
                    "{n_if} interfaces cannot share a stream of {} destinations evenly (each stream's destinations are divided among the interfaces in contiguous blocks)",
                    d.len()
                ),
            ));
        }
        if self.send_buffer == 0 {
            return Err(ConfigError::rule(
                "--send-buffer",
                "must be at least 1 byte",
            ));
        }
        Ok(DsimConfig {
            send_cores,
            main_core,
            send_buffer: self.send_buffer,
            ibv: self.ibv,
            adc_rate: self.adc_sample_rate,
            bits: self.sample_bits,
            heap_samples: self.heap_samples,
            signals,
            signals_text: self.signals.clone(),
            sync_time,
            first_id: self.first_id,
            dither_seed,
            period: self.period,
            max_period,
            heaps: self.heaps,
            pcap: self.pcap.clone(),
            interfaces: self.interface.0.clone(),
            ttl: self.ttl,
            descriptor_interval,
            rate_factor: self.rate_factor,
            dests,
            katcp: match self.katcp_port {
                Some(0) => None,
                Some(p) => Some(p),
                None if bounded => None,
                None => Some(7147),
            }
            .map(|p| SocketAddrV4::new(self.katcp_host, p)),
            katcp_required: self.katcp_port.is_some(),
            prometheus: self
                .prometheus_port
                .map(|p| SocketAddrV4::new(self.prometheus_host.unwrap_or(self.katcp_host), p)),
        })
    }
}

impl DsimArgs {
    /// The ring's length (`--max-period`, default `--period`), checked as katgpucbf checks
    /// it: a multiple of `--period` and of `--heap-samples`, at least 2 heaps. Without
    /// `--max-period` the messages name `--period` (it is then the ring).
    fn ring(&self) -> Result<u64, ConfigError> {
        let hs = self.heap_samples as u64;
        let name = match self.max_period {
            Some(m) => format!("--max-period {m}"),
            None => format!("--period {}", self.period),
        };
        let max = self.max_period.unwrap_or(self.period);
        if self.period == 0 {
            return Err(ConfigError::rule("--period 0", "must be positive"));
        }
        if !max.is_multiple_of(self.period) {
            return Err(ConfigError::rule(
                name,
                format!("must be a multiple of --period {}", self.period),
            ));
        }
        if !max.is_multiple_of(hs) {
            return Err(ConfigError::rule(
                name,
                format!("must be a multiple of --heap-samples {hs}"),
            ));
        }
        if max < 2 * hs {
            return Err(ConfigError::rule(name, "must hold at least 2 heaps"));
        }
        Ok(max)
    }

    /// The send threads' cores (`--affinity`; one unpinned thread for -1) for `streams`
    /// streams, and the main thread's (`--main-affinity`), checked against the cores this
    /// process may use.
    fn cores(&self, streams: usize) -> Result<(Vec<Option<usize>>, Option<usize>), ConfigError> {
        use crate::net::affinity::{check_cores, parse_cores};
        let send = if self.affinity.trim() == "-1" {
            vec![None]
        } else {
            let bad = |e: crate::net::affinity::AffinityError| {
                ConfigError::rule(format!("--affinity {}:", self.affinity), e.to_string())
            };
            let cores = parse_cores(&self.affinity).map_err(bad)?;
            check_cores(&cores).map_err(bad)?;
            if cores.len() > streams {
                return Err(ConfigError::rule(
                    format!("--affinity {}", self.affinity),
                    format!(
                        "starts {} send threads for {streams} streams: give at most one core per stream",
                        cores.len()
                    ),
                ));
            }
            if cores.len() > 1 && self.pcap.is_some() {
                return Err(ConfigError::rule(
                    format!("--affinity {}", self.affinity),
                    "--pcap writes one file from one thread: give one core",
                ));
            }
            cores.into_iter().map(Some).collect()
        };
        let main = match self.main_affinity {
            -1 => None,
            c if c < 0 => {
                return Err(ConfigError::rule(
                    format!("--main-affinity {c}"),
                    "must be a core number, or -1 for unpinned",
                ))
            }
            c => {
                check_cores(&[c as usize]).map_err(|e| {
                    ConfigError::rule(format!("--main-affinity {c}:"), e.to_string())
                })?;
                Some(c as usize)
            }
        };
        Ok((send, main))
    }

    /// Heaps the receivers can count, and a replay window (the heaps of the ring,
    /// `--max-period`, or of `--heaps` if fewer, for every stream, generated before sending)
    /// that fits `host`'s memory: the message names the option and the sizes.
    pub fn check_sizes(&self, host: Option<HostMemory>) -> Result<(), ConfigError> {
        let heap_bytes = self.heap_samples as u128 * self.sample_bits as u128 / 8;
        check_heap(
            format!("--heap-samples {}", self.heap_samples),
            "digitiser heaps",
            heap_bytes,
        )?;
        let ring = self.max_period.unwrap_or(self.period);
        let per_period = ring / (self.heap_samples as u64).max(1);
        let heaps = self.heaps.map_or(per_period, |h| h.min(per_period)) as u128;
        let streams = self.dest.len() as u128;
        // Packed samples and a saturation count per heap.
        let need = streams * heaps * (heap_bytes + 4);
        check_memory(
            host,
            match self.max_period {
                Some(m) => format!("--max-period {m}"),
                None => format!("--period {}", self.period),
            },
            need,
            &format!(
                "the replay window ({streams} streams × {heaps} heaps of {})",
                Bytes(heap_bytes)
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: DsimArgs,
    }

    fn validate(extra: &[&str]) -> Result<DsimConfig, ConfigError> {
        let mut v = vec!["dsim", "--adc-sample-rate", "1712e6", "--dither-seed", "1"];
        v.extend_from_slice(extra);
        v.extend(["127.0.0.1:7148", "127.0.0.1:7149"]);
        Cli::try_parse_from(v).expect("parse").args.validate()
    }

    /// `--signals` takes the same bounds as `?signals`: a clear error, not a stack overflow
    /// or a generation that never ends.
    #[test]
    fn hostile_signals_option_is_refused() {
        let deep = format!("{}1{};", "(".repeat(10_000), ")".repeat(10_000));
        let e = validate(&["--signals", &deep]).unwrap_err().to_string();
        assert!(e.starts_with("--signals: nesting deeper than 64"), "{e}");
        let e = validate(&["--signals", "multicw(1000000, 0.1, 0, 1e6, 1e3);"]).unwrap_err();
        assert!(e.to_string().contains("more than 4096 operations"), "{e}");
        let e = validate(&["--signals", &"1;".repeat(40_000)]).unwrap_err();
        assert!(e.to_string().contains("longer than 65536 bytes"), "{e}");
        assert!(validate(&["--signals", "multicw(64, 0.01, 0, 1e8, 1e6);"]).is_ok());
    }

    /// `--max-period` sizes the ring: a multiple of `--period` and of `--heap-samples`, at
    /// least 2 heaps; without it the ring is `--period`.
    #[test]
    fn max_period_sizes_the_ring() {
        let ring = |extra: &[&str]| validate(extra).map(|c| (c.period, c.max_period));
        assert_eq!(ring(&[]).unwrap(), (1 << 27, 1 << 27));
        assert_eq!(
            ring(&["--period", "8192", "--max-period", "65536"]).unwrap(),
            (8192, 65536)
        );
        // A period that is not a whole number of heaps, inside a ring that is.
        assert_eq!(
            ring(&["--period", "2048", "--max-period", "16384"]).unwrap(),
            (2048, 16384)
        );
        let err = |extra: &[&str]| validate(extra).unwrap_err().to_string();
        let e = err(&["--period", "8192", "--max-period", "20480"]);
        assert!(
            e.contains("--max-period 20480") && e.contains("multiple of --period 8192"),
            "{e}"
        );
        let e = err(&["--period", "3000", "--max-period", "6000"]);
        assert!(e.contains("multiple of --heap-samples 4096"), "{e}");
        let e = err(&["--period", "4096", "--max-period", "4096"]);
        assert!(e.contains("at least 2 heaps"), "{e}");
        let e = err(&["--period", "2048"]);
        assert!(
            e.starts_with("--period 2048") && e.contains("--heap-samples"),
            "{e}"
        );
        let e = err(&["--period", "0", "--max-period", "8192"]);
        assert!(e.contains("positive"), "{e}");
    }

    #[test]
    fn items_that_would_wrap_48_bits_are_refused() {
        // 2^48 - 2 and 2^48 - 1 fit; one more stream does not.
        let ok = (ADDRESS_MASK - 1).to_string();
        assert!(validate(&["--first-id", &ok]).is_ok());
        let e = validate(&["--first-id", &(1u64 << 48).to_string()]).unwrap_err();
        assert!(e.to_string().contains("48-bit digitiser_id"), "{e}");
        let e = validate(&["--first-id", &ADDRESS_MASK.to_string()]).unwrap_err();
        assert!(e.to_string().contains("--first-id + 1"), "{e}");
        let e = validate(&["--first-id", &u64::MAX.to_string()]).unwrap_err();
        assert!(e.to_string().starts_with("--first-id"), "{e}");

        // Sync time 0: 1.7e9 s × 1712e6 samples/s is far beyond 2^48 (1.9 days).
        let e = validate(&["--sync-time", "0"]).unwrap_err().to_string();
        assert!(
            e.contains("--sync-time 0")
                && e.contains("48-bit timestamp")
                && e.contains("1.90 days"),
            "{e}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(validate(&["--sync-time", &(now - 86400.0).to_string()]).is_ok());
        // A bounded run that would pass 2^48.
        let e = validate(&["--heaps", &(1u64 << 37).to_string()]).unwrap_err();
        assert!(e.to_string().starts_with("--heaps"), "{e}");
        assert!(validate(&["--heaps", &(1u64 << 30).to_string()]).is_ok());
    }
}
