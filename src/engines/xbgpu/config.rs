//! xbgpu command line: katgpucbf's options, `--corrprod` and `--beam` key=value specs.

use std::net::SocketAddrV4;

use clap::Args;

use crate::engines::common::cli::{engine_args, parse_dither, parse_kv};

/// One correlation-products output.
#[derive(Debug, Clone, PartialEq)]
pub struct CorrprodSpec {
    pub name: String,
    pub dst: SocketAddrV4,
    /// Batches per dump.
    pub heap_accumulation_threshold: u64,
}

/// One single-polarisation beam.
#[derive(Debug, Clone, PartialEq)]
pub struct BeamSpec {
    pub name: String,
    pub dst: SocketAddrV4,
    pub pol: usize,
    pub dither: bool,
}

fn one_endpoint(v: &str) -> Result<SocketAddrV4, String> {
    let e = crate::net::parse_endpoints(v)?;
    if e.len() != 1 {
        return Err(format!("dst={v}: one endpoint expected"));
    }
    Ok(e[0])
}

pub fn parse_corrprod(spec: &str) -> Result<CorrprodSpec, String> {
    let (mut name, mut dst, mut thr) = (None, None, None);
    for (k, v) in parse_kv(spec, &[])? {
        match k.as_str() {
            "name" => name = Some(v),
            "dst" => dst = Some(one_endpoint(&v)?),
            "heap_accumulation_threshold" => {
                thr = Some(v.parse::<u64>().map_err(|_| {
                    format!("heap_accumulation_threshold={v}: not a positive integer")
                })?)
            }
            _ => return Err(format!("unknown --corrprod key {k:?}")),
        }
    }
    let thr = thr.ok_or("--corrprod needs heap_accumulation_threshold=")?;
    if thr == 0 {
        return Err("heap_accumulation_threshold must be ≥ 1".into());
    }
    Ok(CorrprodSpec {
        name: name.ok_or("--corrprod needs name=")?,
        dst: dst.ok_or("--corrprod needs dst=")?,
        heap_accumulation_threshold: thr,
    })
}

pub fn parse_beam(spec: &str) -> Result<BeamSpec, String> {
    let (mut name, mut dst, mut pol, mut dither) = (None, None, None, true);
    for (k, v) in parse_kv(spec, &[])? {
        match k.as_str() {
            "name" => name = Some(v),
            "dst" => dst = Some(one_endpoint(&v)?),
            "pol" => {
                pol = Some(match v.as_str() {
                    "0" => 0,
                    "1" => 1,
                    _ => return Err(format!("pol={v}: expected 0 or 1")),
                })
            }
            "dither" => dither = parse_dither(&v)?,
            _ => return Err(format!("unknown --beam key {k:?}")),
        }
    }
    Ok(BeamSpec {
        name: name.ok_or("--beam needs name=")?,
        dst: dst.ok_or("--beam needs dst=")?,
        pol: pol.ok_or("--beam needs pol=")?,
        dither,
    })
}

engine_args! {
    /// `gpucbf xbgpu` options (katgpucbf names).
    #[derive(Debug, Clone, Args)]
    pub struct XbgpuArgs {
        #[arg(long)]
        pub adc_sample_rate: f64,
        #[arg(long)]
        pub sync_time: f64,
        /// Number of antennas (F-engines).
        #[arg(long)]
        pub array_size: usize,
        /// Total channels of the stream.
        #[arg(long)]
        pub channels: usize,
        /// Channels in each F-engine heap (this engine's share).
        #[arg(long)]
        pub channels_per_substream: usize,
        /// ADC samples between spectra (2 × channels for wideband).
        #[arg(long)]
        pub samples_between_spectra: u64,
        #[arg(long, default_value_t = 1 << 20)]
        pub jones_per_batch: usize,
        /// First channel handled by this engine.
        #[arg(long, default_value_t = 0)]
        pub channel_offset_value: usize,
        #[arg(long, default_value_t = 32)]
        pub heaps_per_fengine_per_chunk: usize,
        /// Input sample width: 8, or 4 (one byte per complex value, real in the high nibble, as
        /// fgpu `--send-sample-bits 4` sends it).
        #[arg(long, default_value_t = 8)]
        pub sample_bits: u32,
        /// Correlation output: name=,dst=,heap_accumulation_threshold=
        #[arg(long)]
        pub corrprod: Vec<String>,
        /// Beam output: name=,dst=,pol=[,dither=]
        #[arg(long)]
        pub beam: Vec<String>,
        /// Transmit from the start (otherwise wait for ?capture-start).
        #[arg(long)]
        pub send_enabled: bool,
        #[arg(long)]
        pub katcp_port: Option<u16>,
        /// Input: a pcap file, or the multicast endpoint of F-engine heaps.
        pub src: String,
    }
}

impl XbgpuArgs {
    pub fn spectra_per_heap(&self) -> usize {
        self.jones_per_batch / self.channels.max(1)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.array_size == 0 || self.array_size > 1024 {
            return Err("--array-size must be 1..=1024".into());
        }
        if self.channels == 0
            || self.channels_per_substream == 0
            || !self.channels.is_multiple_of(self.channels_per_substream)
        {
            return Err(
                "--channels must be a positive multiple of --channels-per-substream".into(),
            );
        }
        if self.heaps_per_fengine_per_chunk == 0 {
            return Err("--heaps-per-fengine-per-chunk must be at least 1".into());
        }
        if self.jones_per_batch == 0 || !self.jones_per_batch.is_multiple_of(self.channels) {
            return Err("--jones-per-batch must be a multiple of --channels".into());
        }
        if self.sample_bits != 8 && self.sample_bits != 4 {
            return Err("--sample-bits must be 8 or 4".into());
        }
        if !self
            .channel_offset_value
            .is_multiple_of(self.channels_per_substream)
            || self.channel_offset_value >= self.channels
        {
            return Err("--channel-offset-value must be a multiple of --channels-per-substream below --channels".into());
        }
        if self.corrprod.is_empty() && self.beam.is_empty() {
            return Err("give at least one --corrprod or --beam output".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: XbgpuArgs,
    }

    fn parse(extra: &[&str]) -> XbgpuArgs {
        let mut v = vec![
            "xbgpu",
            "--adc-sample-rate",
            "1712e6",
            "--sync-time",
            "0",
            "--array-size",
            "4",
            "--channels",
            "4096",
            "--channels-per-substream",
            "512",
            "--samples-between-spectra",
            "8192",
            "--corrprod",
            "name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=2",
        ];
        v.extend_from_slice(extra);
        v.push("f.pcap");
        Cli::try_parse_from(v).expect("parse").args
    }

    #[test]
    fn zero_heaps_per_chunk_is_refused() {
        assert_eq!(parse(&[]).validate(), Ok(()));
        let e = parse(&["--heaps-per-fengine-per-chunk", "0"])
            .validate()
            .unwrap_err();
        assert!(e.contains("--heaps-per-fengine-per-chunk"), "{e}");
    }
}
