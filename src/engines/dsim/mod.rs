//! `gpucbf dsim`: the digitiser simulator. One single-pol SPEAD stream per destination,
//! heaps exactly as a MeerKAT digitiser sends them (ICD §4.1): one 5192-byte packet per
//! heap (10-bit), items timestamp, digitiser_id, digitiser_status, adc_samples.
//!
//! A window of signal is generated once (in parallel) and replayed; frequencies snap to
//! multiples of adc_rate / period so the replay is seamless.

pub mod control;
pub mod generate;
pub mod send;
pub mod signal;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;

use clap::Args;

pub use send::{run, DsimSummary};

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

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct DsimConfig {
    pub adc_rate: f64,
    pub bits: u32,
    pub heap_samples: usize,
    pub signals: Vec<signal::StreamSignal>,
    pub signals_text: String,
    /// UNIX time of timestamp zero; `None`: the moment sending starts (first timestamp 0).
    pub sync_time: Option<f64>,
    pub first_id: u64,
    pub dither_seed: u64,
    pub period: u64,
    pub heaps: Option<u64>,
    pub pcap: Option<PathBuf>,
    pub interface: Ipv4Addr,
    pub ttl: u32,
    pub descriptor_interval: f64,
    pub rate_factor: f64,
    pub dests: Vec<Vec<SocketAddrV4>>,
    /// katcp server address, if enabled.
    pub katcp: Option<SocketAddrV4>,
    /// Prometheus endpoint address, if enabled.
    pub prometheus: Option<SocketAddrV4>,
}

impl DsimArgs {
    pub fn validate(&self) -> Result<DsimConfig, String> {
        if !(self.adc_sample_rate.is_finite() && self.adc_sample_rate > 0.0) {
            return Err("--adc-sample-rate must be a positive number".into());
        }
        if self.heap_samples == 0
            || !(self.heap_samples * self.sample_bits as usize).is_multiple_of(8)
        {
            return Err(
                "--heap-samples × --sample-bits must be a positive whole number of bytes".into(),
            );
        }
        if self.period == 0 || !self.period.is_multiple_of(self.heap_samples as u64) {
            return Err(format!(
                "--period {} must be a positive multiple of --heap-samples {}",
                self.period, self.heap_samples
            ));
        }
        if !(self.rate_factor.is_finite() && self.rate_factor >= 0.0) {
            return Err("--rate-factor must be ≥ 0".into());
        }
        let dests = self
            .dest
            .iter()
            .map(|d| crate::net::parse_endpoints(d))
            .collect::<Result<Vec<_>, _>>()?;
        let dither_seed = self.dither_seed.unwrap_or_else(rand::random);
        let mut k = 0u64;
        let mut entropy = || {
            k += 1;
            signal::mix64(dither_seed ^ 0xD51A_0000_0000_0000 ^ k)
        };
        let parsed =
            signal::parse(&self.signals, &mut entropy).map_err(|e| format!("--signals: {e}"))?;
        let signals =
            signal::per_stream(parsed, dests.len()).map_err(|e| format!("--signals: {e}"))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        if let Some(t) = self.sync_time {
            if !t.is_finite() || t > now + 1.0 {
                return Err("--sync-time must not be in the future".into());
            }
        }
        let sync_time = self.sync_time;
        let bounded = self.heaps.is_some() || self.pcap.is_some();
        let descriptor_interval =
            self.descriptor_interval
                .unwrap_or(if bounded { 0.0 } else { 5.0 });
        if !(descriptor_interval.is_finite() && descriptor_interval >= 0.0) {
            return Err("--descriptor-interval must be ≥ 0".into());
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
