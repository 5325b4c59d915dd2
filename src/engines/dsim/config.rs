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
    /// Local interface address to send from (multicast interface).
    #[arg(long, default_value = "0.0.0.0")]
    pub interface: Ipv4Addr,
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
    /// katcp control port (none by default).
    #[arg(long)]
    pub katcp_port: Option<u16>,
    /// Prometheus metrics port (none by default).
    #[arg(long)]
    pub prometheus_port: Option<u16>,
    /// katcp listening address.
    #[arg(long, default_value = "0.0.0.0")]
    pub katcp_host: Ipv4Addr,
    /// Print a JSON summary on stdout at the end.
    #[arg(long)]
    pub summary: bool,
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
    /// Replay period in samples (a multiple of `heap_samples`).
    pub period: u64,
    /// Heaps per stream to send (`None`: until stopped).
    pub heaps: Option<u64>,
    /// Write packets to this pcap file instead of sending them.
    pub pcap: Option<PathBuf>,
    /// Local interface address to send from.
    pub interface: Ipv4Addr,
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
    /// Prometheus endpoint address, if enabled.
    pub prometheus: Option<SocketAddrV4>,
}

impl DsimArgs {
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
        if self.period == 0 || !self.period.is_multiple_of(self.heap_samples as u64) {
            return Err(ConfigError::rule(
                format!("--period {}", self.period),
                format!(
                    "must be a positive multiple of --heap-samples {}",
                    self.heap_samples
                ),
            ));
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
        let bounded = self.heaps.is_some() || self.pcap.is_some();
        let descriptor_interval =
            self.descriptor_interval
                .unwrap_or(if bounded { 0.0 } else { 5.0 });
        if !(descriptor_interval.is_finite() && descriptor_interval >= 0.0) {
            return Err(ConfigError::rule("--descriptor-interval", "must be ≥ 0"));
        }
        Ok(DsimConfig {
            adc_rate: self.adc_sample_rate,
            bits: self.sample_bits,
            heap_samples: self.heap_samples,
            signals,
            signals_text: self.signals.clone(),
            sync_time,
            first_id: self.first_id,
            dither_seed,
            period: self.period,
            heaps: self.heaps,
            pcap: self.pcap.clone(),
            interface: self.interface,
            ttl: self.ttl,
            descriptor_interval,
            rate_factor: self.rate_factor,
            dests,
            katcp: self
                .katcp_port
                .map(|p| SocketAddrV4::new(self.katcp_host, p)),
            prometheus: self
                .prometheus_port
                .map(|p| SocketAddrV4::new(self.katcp_host, p)),
        })
    }
}

impl DsimArgs {
    /// Heaps the receivers can count, and a replay window (the heaps of one period, or of
    /// `--heaps` if fewer, for every stream, generated before sending) that fits `host`'s
    /// memory: the message names the option and the sizes.
    pub fn check_sizes(&self, host: Option<HostMemory>) -> Result<(), ConfigError> {
        let heap_bytes = self.heap_samples as u128 * self.sample_bits as u128 / 8;
        check_heap(
            format!("--heap-samples {}", self.heap_samples),
            "digitiser heaps",
            heap_bytes,
        )?;
        let per_period = self.period / (self.heap_samples as u64).max(1);
        let heaps = self.heaps.map_or(per_period, |h| h.min(per_period)) as u128;
        let streams = self.dest.len() as u128;
        // Packed samples and a saturation count per heap.
        let need = streams * heaps * (heap_bytes + 4);
        check_memory(
            host,
            format!("--period {}", self.period),
            need,
            &format!(
                "the replay window ({streams} streams × {heaps} heaps of {})",
                Bytes(heap_bytes)
            ),
        )
    }
}
