//! fgpu command line: katgpucbf's options, `--wideband`/`--narrowband` key=value specs.

use std::net::{Ipv4Addr, SocketAddrV4};

use clap::Args;

use crate::engines::common::cli::{engine_args, parse_dither, parse_kv, parse_num};

/// PFB window function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowFunction {
    Hann,
    Rect,
}

/// Narrowband options of an output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NarrowbandOpts {
    /// Baseband frequency (Hz) moved to the centre of the output band.
    pub centre_frequency: f64,
    pub decimation: usize,
    pub ddc_taps: Option<usize>,
    pub weight_pass: f64,
    /// Present: no-discard (VLBI) mode with this pass bandwidth (Hz).
    pub pass_bandwidth: Option<f64>,
}

/// One output (`--wideband` or `--narrowband name=,channels=,dst=[,...]`).
#[derive(Debug, Clone, PartialEq)]
pub struct WidebandSpec {
    pub name: String,
    pub channels: usize,
    pub dst: Vec<SocketAddrV4>,
    pub jones_per_batch: usize,
    pub taps: usize,
    pub w_cutoff: f64,
    pub window_function: WindowFunction,
    pub dither: bool,
    pub narrowband: Option<NarrowbandOpts>,
}

impl WidebandSpec {
    pub fn spectra_per_heap(&self) -> usize {
        self.jones_per_batch / self.channels
    }

    pub fn samples_between_spectra(&self) -> u64 {
        2 * self.channels as u64 * self.narrowband.map_or(1, |n| n.decimation as u64)
    }

    /// ADC samples between consecutive output batches (heap timestamp step).
    pub fn batch_step(&self) -> u64 {
        self.spectra_per_heap() as u64 * self.samples_between_spectra()
    }

    pub fn channels_per_substream(&self) -> usize {
        self.channels / self.dst.len()
    }
}

/// Parses a `--wideband` value.
pub fn parse_wideband(spec: &str) -> Result<WidebandSpec, String> {
    parse_output(spec, false)
}

/// Parses a `--narrowband` value.
pub fn parse_narrowband(spec: &str) -> Result<WidebandSpec, String> {
    parse_output(spec, true)
}

fn parse_output(spec: &str, narrow: bool) -> Result<WidebandSpec, String> {
    let mut nb = NarrowbandOpts {
        centre_frequency: f64::NAN,
        decimation: 0,
        ddc_taps: None,
        weight_pass: 0.005,
        pass_bandwidth: None,
    };
    let mut name = None;
    let mut channels = None;
    let mut dst = None;
    let mut w = WidebandSpec {
        name: String::new(),
        channels: 0,
        dst: Vec::new(),
        jones_per_batch: 1 << 20,
        taps: 16,
        w_cutoff: 1.0,
        window_function: WindowFunction::Hann,
        dither: true,
        narrowband: None,
    };
    for (k, v) in parse_kv(spec, &["dst"])? {
        match k.as_str() {
            "name" => name = Some(v),
            "channels" => channels = Some(parse_num::<usize>(&k, &v)?),
            "dst" => dst = Some(crate::net::parse_endpoints(&v)?),
            "jones_per_batch" => w.jones_per_batch = parse_num(&k, &v)?,
            "taps" => w.taps = parse_num(&k, &v)?,
            "w_cutoff" => w.w_cutoff = parse_num(&k, &v)?,
            "window_function" => {
                w.window_function = match v.as_str() {
                    "hann" => WindowFunction::Hann,
                    "rect" => WindowFunction::Rect,
                    _ => return Err(format!("window_function={v}: expected hann or rect")),
                }
            }
            "dither" => w.dither = parse_dither(&v)?,
            "centre_frequency" if narrow => nb.centre_frequency = parse_num(&k, &v)?,
            "decimation" if narrow => nb.decimation = parse_num(&k, &v)?,
            "ddc_taps" if narrow => nb.ddc_taps = Some(parse_num(&k, &v)?),
            "weight_pass" if narrow => nb.weight_pass = parse_num(&k, &v)?,
            "pass_bandwidth" if narrow => nb.pass_bandwidth = Some(parse_num(&k, &v)?),
            _ => {
                return Err(format!(
                    "unknown --{} key {k:?}",
                    if narrow { "narrowband" } else { "wideband" }
                ))
            }
        }
    }
    if narrow {
        if !nb.centre_frequency.is_finite() {
            return Err("--narrowband needs centre_frequency=".into());
        }
        if nb.decimation == 0 {
            return Err("--narrowband needs decimation= (≥ 1)".into());
        }
        if nb.pass_bandwidth.is_none() && !nb.decimation.is_multiple_of(2) {
            return Err(format!(
                "decimation={} must be even in discard mode",
                nb.decimation
            ));
        }
        w.narrowband = Some(nb);
    }
    w.name = name.ok_or("output needs name=")?;
    w.channels = channels.ok_or("output needs channels=")?;
    w.dst = dst.ok_or("output needs dst=")?;
    if !w.channels.is_power_of_two() || w.channels < 64 {
        return Err(format!(
            "channels={} must be a power of two ≥ 64",
            w.channels
        ));
    }
    if w.jones_per_batch == 0 || !w.jones_per_batch.is_multiple_of(w.channels) {
        return Err(format!(
            "jones_per_batch={} must be a multiple of channels={}",
            w.jones_per_batch, w.channels
        ));
    }
    if !w.channels.is_multiple_of(w.dst.len()) {
        return Err(format!(
            "channels={} must divide evenly over {} destinations",
            w.channels,
            w.dst.len()
        ));
    }
    if w.taps == 0 || w.taps > 64 {
        return Err(format!("taps={} out of range 1..=64", w.taps));
    }
    if !w.w_cutoff.is_finite() || w.w_cutoff < 0.0 {
        return Err("w_cutoff must be ≥ 0".into());
    }
    Ok(w)
}

engine_args! {
    /// `gpucbf fgpu` options (katgpucbf names).
    #[derive(Debug, Clone, Args)]
    pub struct FgpuArgs {
        /// ADC sample rate in Hz.
        #[arg(long)]
        pub adc_sample_rate: f64,
        /// UNIX time of timestamp zero.
        #[arg(long)]
        pub sync_time: f64,
        /// This F-engine's index in the array.
        #[arg(long, default_value_t = 0)]
        pub feng_id: u64,
        /// Number of antennas (heap counters step by it).
        #[arg(long, default_value_t = 65536)]
        pub array_size: u64,
        /// Digitiser sample width.
        #[arg(long, default_value_t = 10)]
        pub dig_sample_bits: u32,
        /// Wideband output: name=,channels=,dst=[,jones_per_batch=,taps=,w_cutoff=,window_function=,dither=]
        #[arg(long)]
        pub wideband: Vec<String>,
        /// Narrowband output: name=,channels=,centre_frequency=,decimation=,dst=[,ddc_taps=,weight_pass=,pass_bandwidth=]
        #[arg(long)]
        pub narrowband: Vec<String>,
        /// Initial gain for every channel of both inputs.
        #[arg(long, default_value_t = 1.0)]
        pub gain: f64,
        /// Samples per digitiser heap.
        #[arg(long, default_value_t = 4096)]
        pub recv_packet_samples: u64,
        /// Samples per polarisation in one receive chunk.
        #[arg(long, default_value_t = 1 << 25)]
        pub recv_chunk_samples: u64,
        /// AND mask applied to received timestamps.
        #[arg(long, value_parser = parse_mask)]
        pub mask_timestamp: Option<u64>,
        /// Output rate relative to the nominal data rate.
        #[arg(long, default_value_t = 1.1)]
        pub send_rate_factor: f64,
        /// Output sample width (8, or 4 with real in the high nibble).
        #[arg(long, default_value_t = 8)]
        pub send_sample_bits: u32,
        /// katcp control port (default 7147 for network input, none for a pcap file; 0: none).
        #[arg(long)]
        pub katcp_port: Option<u16>,
        /// katcp listening address.
        #[arg(long, default_value = "0.0.0.0")]
        pub katcp_host: Ipv4Addr,
        /// Dither seed (random if absent).
        #[arg(long)]
        pub dither_seed: Option<u64>,
        /// Input: a pcap file, or digitiser endpoints ADDR[+N]:PORT[,...].
        pub src: String,
    }
}

fn parse_mask(s: &str) -> Result<u64, String> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).map_err(|e| e.to_string()),
        None => s
            .parse()
            .map_err(|e: std::num::ParseIntError| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wideband_specs() {
        let w = parse_wideband("name=wb,channels=4096,dst=239.10.0.0+3:7148,taps=8,dither=none")
            .unwrap();
        assert_eq!(w.dst.len(), 4);
        assert_eq!(w.spectra_per_heap(), 256);
        assert_eq!(w.batch_step(), 1 << 21);
        assert_eq!(w.channels_per_substream(), 1024);
        assert!(!w.dither);
        let w = parse_wideband("name=wb,channels=1024,dst=127.0.0.1:7148,127.0.0.1:7149").unwrap();
        assert_eq!(w.dst.len(), 2);
        for bad in [
            "name=wb,channels=1000,dst=1.2.3.4:1",
            "name=wb,channels=1024",
            "channels=1024,dst=1.2.3.4:1",
            "name=wb,channels=1024,dst=1.2.3.4+2:1",
            "name=wb,channels=1024,dst=1.2.3.4:1,taps=0",
            "name=wb,channels=1024,dst=1.2.3.4:1,jones_per_batch=1000",
            "name=wb,channels=1024,dst=1.2.3.4:1,colour=red",
        ] {
            assert!(parse_wideband(bad).is_err(), "{bad}");
        }
        let n = parse_narrowband(
            "name=nb,channels=1024,centre_frequency=284e6,decimation=8,dst=1.2.3.4:1",
        )
        .unwrap();
        assert_eq!(n.samples_between_spectra(), 2 * 1024 * 8);
        assert!(parse_narrowband("name=nb,channels=1024,decimation=8,dst=1.2.3.4:1").is_err());
        assert!(parse_narrowband(
            "name=nb,channels=1024,centre_frequency=1e8,decimation=3,dst=1.2.3.4:1"
        )
        .is_err());
        assert!(parse_narrowband("name=nb,channels=1024,centre_frequency=1e8,decimation=3,pass_bandwidth=5e7,dst=1.2.3.4:1").is_ok());
        assert!(parse_wideband("name=wb,channels=1024,dst=1.2.3.4:1,decimation=8").is_err());
    }
}
