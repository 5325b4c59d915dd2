//! fgpu's command line (katgpucbf's options, [`FgpuArgs`]) and the configuration it makes
//! once every option is checked ([`FgpuConfig`], from [`FgpuArgs::validate`]).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use clap::Args;

use super::sizing::ChunkSizing;
use super::spec::{parse_narrowband, parse_wideband, WidebandSpec};
use crate::chunk::placement::DigitiserPlacement;
use crate::engines::common::cli::sample_bits;
use crate::engines::common::send::check_output_is_not_input;
use crate::engines::common::sizes::{check_heap, check_memory, chunks_held, MIN_CHUNKS_HELD};
use crate::engines::common::{ConfigError, EngineArgs};
use crate::mem::{Bytes, HostMemory};

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
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=16))]
    pub dig_sample_bits: u32,
    /// Wideband output: name=,channels=,dst=[,jones_per_batch=,taps=,w_cutoff=,window_function=,dither=]
    #[arg(long, value_parser = parse_wideband)]
    pub wideband: Vec<WidebandSpec>,
    /// Narrowband output: name=,channels=,centre_frequency=,decimation=,dst=[,ddc_taps=,weight_pass=,pass_bandwidth=]
    #[arg(long, value_parser = parse_narrowband)]
    pub narrowband: Vec<WidebandSpec>,
    /// Initial gain for every channel of both inputs.
    #[arg(long, default_value_t = 1.0)]
    pub gain: f64,
    /// Samples per digitiser heap.
    #[arg(long, default_value_t = 4096)]
    pub recv_packet_samples: u64,
    /// Samples per polarisation in one receive chunk.
    #[arg(long, default_value_t = 1 << 25)]
    pub recv_chunk_samples: u64,
    /// Clear the low bits of received timestamps (katgpucbf's digitiser workaround): as a
    /// flag, the bits below --recv-packet-samples; `--mask-timestamp=MASK` ANDs this mask
    /// (decimal or 0x hexadecimal) instead.
    #[arg(long, value_parser = parse_mask, require_equals = true, value_name = "MASK")]
    pub mask_timestamp: Option<Option<u64>>,
    /// katgpucbf's global batch size: parsed but unused there and here (each output's
    /// `jones_per_batch=` key is used).
    #[arg(long, default_value_t = 1 << 20)]
    pub jones_per_batch: u64,
    /// Output chunk size in Jones vectors, rounded up to a multiple of every output's
    /// `jones_per_batch=`: the send queue holds two output chunks of every output (batches
    /// are still sent as computed).
    #[arg(long, default_value_t = 1 << 23)]
    pub send_chunk_jones: u64,
    /// Largest delay, in samples, the input overlap is sized for: `?delays` takes delays
    /// up to this magnitude, and the receive chunks held for it count in the memory check.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_delay_diff: u64,
    /// Python debugging consoles (accepted, not applicable).
    #[command(flatten)]
    pub console: crate::engines::common::ConsoleArgs,
    /// Output rate relative to the nominal data rate.
    #[arg(long, default_value_t = 1.1)]
    pub send_rate_factor: f64,
    /// Output sample width (8, or 4 with real in the high nibble).
    #[arg(long, default_value_t = 8, value_parser = sample_bits())]
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
    /// Test only (`gpucbf qualify --debug-break delay-sign`): applies every delay model
    /// with the opposite sign (the sensors still show the requested one).
    #[arg(long, hide = true)]
    pub debug_flip_delay_sign: bool,
    /// Test only (`gpucbf qualify --debug-break gains`): keeps `--gain` on every channel
    /// whatever `?gain` and `?gain-all` set (the sensors still show the requested gains).
    #[arg(long, hide = true)]
    pub debug_ignore_gains: bool,
    /// Test only: the compute call of every output fails after N batches, as a GPU call
    /// that fails (a lost device, a failed launch) does: shows how the engine reports it.
    #[arg(long, hide = true, value_name = "N")]
    pub debug_fail_compute_after: Option<u64>,
    /// Input: a pcap file, or digitiser endpoints ADDR[+N]:PORT[,...].
    pub src: String,
    /// Receive, send, backend and metrics options (shared with xbgpu).
    #[command(flatten)]
    pub io: EngineArgs,
}

/// A timestamp mask: decimal, or hexadecimal with `0x`.
fn parse_mask(s: &str) -> Result<u64, std::num::ParseIntError> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
}

/// A checked fgpu configuration: every option valid, outputs parsed, the receive layout
/// built, the backend and the katcp endpoint resolved.
#[derive(Debug, Clone)]
pub struct FgpuConfig {
    /// ADC sample rate in Hz (positive).
    pub adc_sample_rate: f64,
    /// UNIX time of timestamp zero.
    pub sync_time: f64,
    /// This F-engine's index in the array (below `array_size`).
    pub feng_id: u64,
    /// Number of antennas.
    pub array_size: u64,
    /// Digitiser sample width (2..=16).
    pub dig_sample_bits: u32,
    /// The outputs: wideband ones first, then narrowband ones (at least one).
    pub outputs: Vec<WidebandSpec>,
    /// Initial gain (finite).
    pub gain: f64,
    /// Receive layout: heap and chunk sizes, timestamp mask.
    pub placement: DigitiserPlacement,
    /// Output rate relative to the nominal data rate (≥ 0).
    pub send_rate_factor: f64,
    /// Output sample width (8 or 4).
    pub send_sample_bits: u32,
    /// katcp endpoint, if served.
    pub katcp: Option<SocketAddrV4>,
    /// katcp listening address (the Prometheus endpoint listens there too).
    pub katcp_host: Ipv4Addr,
    /// True when `--katcp-port` was given: failing to serve it is then an error (the
    /// default port only warns).
    pub katcp_required: bool,
    /// Dither seed (drawn at random when not given).
    pub dither_seed: u64,
    /// Test-only faults (hidden options), off by default.
    pub debug: super::control::DebugBreak,
    /// Channelise on the GPU.
    pub use_gpu: bool,
    /// Output chunk and input overlap sizes (`--send-chunk-jones`, `--max-delay-diff`).
    pub sizing: ChunkSizing,
    /// Receive, send and metrics options.
    pub io: EngineArgs,
    /// Input: a pcap file or digitiser endpoints.
    pub src: String,
}

impl FgpuConfig {
    /// Bytes per output value (re or im): 1 for 8-bit samples, and for 4-bit ones one byte
    /// holds both halves of a complex value.
    pub fn bytes_per_value(&self) -> usize {
        if self.send_sample_bits == 4 {
            1
        } else {
            2
        }
    }
}

impl FgpuArgs {
    /// Checks every option and builds the configuration; nothing starts here.
    pub fn validate(&self) -> Result<FgpuConfig, ConfigError> {
        if !(self.adc_sample_rate.is_finite() && self.adc_sample_rate > 0.0) {
            return Err(ConfigError::rule("--adc-sample-rate", "must be positive"));
        }
        if self.array_size == 0 || self.feng_id >= self.array_size {
            return Err(ConfigError::rule("--feng-id", "must be below --array-size"));
        }
        if !(self.send_rate_factor.is_finite() && self.send_rate_factor >= 0.0) {
            return Err(ConfigError::rule("--send-rate-factor", "must be ≥ 0"));
        }
        let outputs: Vec<WidebandSpec> = self
            .wideband
            .iter()
            .chain(&self.narrowband)
            .cloned()
            .collect();
        if outputs.is_empty() {
            return Err(ConfigError::NoOutput {
                options: "--wideband or --narrowband",
            });
        }
        // katcp requests and sensors name outputs: two of one name would be one stream.
        for (i, o) in outputs.iter().enumerate() {
            if outputs[..i].iter().any(|p| p.name == o.name) {
                return Err(ConfigError::rule(
                    format!("name={}", o.name),
                    "is given to two outputs (--wideband, --narrowband): names must be unique",
                ));
            }
        }
        if !self.gain.is_finite() {
            return Err(ConfigError::rule("--gain", "must be finite"));
        }
        self.check_sizes(&outputs, HostMemory::probe())?;
        if let Some(out) = &self.io.send_pcap {
            check_output_is_not_input("--send-pcap", out, &self.src)?;
        }
        self.io.send_cores()?;
        let use_gpu = self.io.backend.use_gpu(true)?;
        let mut placement = DigitiserPlacement::new(
            self.recv_packet_samples,
            self.dig_sample_bits,
            self.recv_chunk_samples,
        )
        .map_err(|e| ConfigError::Placement(e.to_string()))?;
        match self.mask_timestamp {
            Some(Some(m)) => placement.timestamp_mask = m,
            Some(None) => placement.timestamp_mask = !self.recv_packet_samples.saturating_sub(1),
            None => {}
        }
        let sizing = ChunkSizing::new(
            self.send_chunk_jones,
            self.max_delay_diff,
            self.recv_chunk_samples,
            &outputs,
        )?;
        let n_dsts: Vec<usize> = outputs.iter().map(|o| o.dst.len()).collect();
        self.io.check_interfaces(&n_dsts)?;
        let katcp_port = match self.katcp_port {
            Some(0) => None,
            Some(p) => Some(p),
            None if Path::new(&self.src).is_file() => None,
            None => Some(7147),
        };
        Ok(FgpuConfig {
            adc_sample_rate: self.adc_sample_rate,
            sync_time: self.sync_time,
            feng_id: self.feng_id,
            array_size: self.array_size,
            dig_sample_bits: self.dig_sample_bits,
            outputs,
            gain: self.gain,
            placement,
            send_rate_factor: self.send_rate_factor,
            send_sample_bits: self.send_sample_bits,
            katcp: katcp_port.map(|p| SocketAddrV4::new(self.katcp_host, p)),
            katcp_host: self.katcp_host,
            katcp_required: self.katcp_port.is_some(),
            dither_seed: self.dither_seed.unwrap_or_else(rand::random),
            debug: super::control::DebugBreak {
                flip_delay_sign: self.debug_flip_delay_sign,
                ignore_gains: self.debug_ignore_gains,
                fail_compute_after: self.debug_fail_compute_after,
            },
            use_gpu,
            sizing,
            io: self.io.clone(),
            src: self.src.clone(),
        })
    }
}

impl FgpuArgs {
    /// Heaps that fit the receivers' 32-bit byte counts, and buffers that fit `host`'s
    /// memory (receive chunks and each output's batch buffers, lower bounds), before anything
    /// is allocated: the message names the option and the sizes.
    pub fn check_sizes(
        &self,
        outputs: &[WidebandSpec],
        host: Option<HostMemory>,
    ) -> Result<(), ConfigError> {
        let bits = self.dig_sample_bits as u128;
        check_heap(
            format!("--recv-packet-samples {}", self.recv_packet_samples),
            "digitiser heaps",
            self.recv_packet_samples as u128 * bits / 8,
        )?;
        let bytes_per_value: u128 = if self.send_sample_bits == 4 { 1 } else { 2 };
        let mut outputs_need = 0u128;
        for o in outputs {
            let jones = o.jones_per_batch as u128;
            let subject = || format!("{} jones_per_batch={}", o.name, o.jones_per_batch);
            check_heap(
                subject(),
                &format!(
                    "output heaps ({} channels per substream)",
                    o.channels_per_substream()
                ),
                jones / o.dst.len() as u128 * 2 * bytes_per_value,
            )?;
            // The output batch, its spectra (complex float, both pols) and the input samples
            // of one batch (both pols; a decimating output reads `decimation` times as many).
            let decimation = o.narrowband.map_or(1, |n| n.decimation) as u128;
            let need = jones * (2 * bytes_per_value + 16 + 16 * decimation);
            check_memory(
                host,
                subject(),
                need,
                &format!("output {}'s batch buffers", o.name),
            )?;
            outputs_need += need;
        }
        let slots = 2 * (self.recv_chunk_samples / self.recv_packet_samples.max(1)) as u128;
        let chunks = chunks_held(slots, self.recv_packet_samples as u128 * bits / 8);
        // The chunks the store keeps for the overlap (--max-delay-diff and the windows), and
        // the two output chunks of every output the send queue holds (--send-chunk-jones).
        let sizing = ChunkSizing::new(
            self.send_chunk_jones,
            self.max_delay_diff,
            self.recv_chunk_samples,
            outputs,
        )
        .ok();
        let overlap = sizing.map_or(0, |s| s.overlap_chunks) as u128;
        let out_chunks = sizing.map_or(0, |s| {
            2 * s.chunk_jones as u128 * 2 * bytes_per_value * outputs.len() as u128
        });
        check_memory(
            host,
            format!("--send-chunk-jones {}", self.send_chunk_jones),
            out_chunks,
            "two output chunks of every output (the send queue)",
        )?;
        let held = MIN_CHUNKS_HELD + overlap;
        let chunks = chunks / MIN_CHUNKS_HELD * held;
        let what = format!(
            "{held} receive chunks of {} ({overlap} for --max-delay-diff {} and the filter windows)",
            Bytes(chunks / held),
            self.max_delay_diff
        );
        let subject = format!("--recv-chunk-samples {}", self.recv_chunk_samples);
        check_memory(host, &subject, chunks, &what)?;
        check_memory(
            host,
            format!("{subject} with these outputs"),
            chunks + outputs_need + out_chunks,
            &format!("{what}, the outputs' batches and output chunks"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: FgpuArgs,
    }

    fn parse(extra: &[&str]) -> Result<FgpuArgs, clap::Error> {
        let mut v = vec!["fgpu", "--adc-sample-rate", "1712e6", "--sync-time", "0"];
        v.extend_from_slice(extra);
        v.push("x.pcap");
        Cli::try_parse_from(v).map(|c| c.args)
    }

    const WB: [&str; 2] = ["--wideband", "name=wb,channels=1024,dst=127.0.0.1:7148"];

    /// Every rule fails in `validate` (or in clap for a single option's value), naming
    /// the option, before anything starts.
    #[test]
    fn invalid_options_are_refused_by_name() {
        let cfg = parse(&[&WB[..], &["--backend", "cpu"]].concat())
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!((cfg.outputs.len(), cfg.bytes_per_value()), (1, 2));
        // "x.pcap" is no file here: network input, katcp on 7147 unless --katcp-port 0.
        assert_eq!(
            cfg.katcp,
            Some(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 7147))
        );
        assert!(!cfg.katcp_required);
        let cfg = parse(&[&WB[..], &["--backend", "cpu", "--katcp-port", "0"]].concat())
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(cfg.katcp, None);
        for (extra, want) in [
            (vec!["--feng-id", "4", "--array-size", "4"], "--feng-id"),
            (vec!["--send-rate-factor", "nan"], "--send-rate-factor"),
            (vec!["--gain", "inf"], "--gain must be finite"),
            (vec!["--recv-chunk-samples", "1000"], "chunk samples 1000"),
        ] {
            let e = parse(&[&WB[..], &extra].concat())
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{extra:?}: {e}");
        }
        let e = parse(&[&WB[..], &WB[..]].concat())
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("name=wb is given to two outputs"), "{e}");
        let nb = [
            "--narrowband",
            "name=wb,channels=1024,dst=127.0.0.1:7150,centre_frequency=2e8,decimation=8",
        ];
        let e = parse(&[&WB[..], &nb[..]].concat()).unwrap().validate();
        assert!(e.is_err(), "a narrowband output named as the wideband one");
        let e = parse(&[]).unwrap().validate().unwrap_err().to_string();
        assert_eq!(e, "give at least one --wideband or --narrowband output");
        for (extra, want) in [
            (vec!["--dig-sample-bits", "17"], "--dig-sample-bits"),
            (vec!["--send-sample-bits", "6"], "--send-sample-bits"),
            (vec!["--backend", "tpu"], "--backend"),
            (vec!["--mask-timestamp=zz"], "--mask-timestamp"),
            (
                vec!["--wideband", "name=wb,channels=1000,dst=1.2.3.4:1"],
                "channels=1000",
            ),
        ] {
            let e = parse(&extra).expect_err("refused").to_string();
            assert!(e.contains(want), "{extra:?}: {e}");
        }
        let a =
            parse(&[&WB[..], &["--mask-timestamp", "--send-sample-bits", "4"]].concat()).unwrap();
        assert_eq!((a.mask_timestamp, a.send_sample_bits), (Some(None), 4));
        let a = parse(&[&WB[..], &["--mask-timestamp=0xff"]].concat()).unwrap();
        assert_eq!(a.mask_timestamp, Some(Some(255)));
        // The flag clears the bits below the heap size.
        let cfg = parse(&[&WB[..], &["--mask-timestamp", "--backend", "cpu"]].concat())
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(cfg.placement.timestamp_mask, !4095);
    }
}
