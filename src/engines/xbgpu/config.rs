//! xbgpu's command line (katgpucbf's options, [`XbgpuArgs`]) and the configuration it makes
//! once every option is checked ([`XbgpuConfig`], from [`XbgpuArgs::validate`]).

use clap::Args;

use super::spec::{parse_beam, parse_corrprod, BeamSpec, CorrprodSpec};
use crate::chunk::placement::FengPlacement;
use crate::compute::xengine::XShape;
use crate::engines::common::cli::sample_bits;
use crate::engines::common::send::check_output_is_not_input;
use crate::engines::common::sizes::{check_heap, check_memory, chunks_held, MIN_CHUNKS_HELD};
use crate::engines::common::{ConfigError, EngineArgs};
use crate::mem::{Bytes, HostMemory};

/// `gpucbf xbgpu` options (katgpucbf names).
#[derive(Debug, Clone, Args)]
pub struct XbgpuArgs {
    /// ADC sample rate in Hz.
    #[arg(long)]
    pub adc_sample_rate: f64,
    /// UNIX time of timestamp zero.
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
    /// Complex values per polarisation in one F-engine batch (channels × spectra per heap).
    #[arg(long, default_value_t = 1 << 20)]
    pub jones_per_batch: usize,
    /// First channel handled by this engine.
    #[arg(long, default_value_t = 0)]
    pub channel_offset_value: usize,
    /// Batches of every F-engine in one receive chunk.
    #[arg(long, default_value_t = 32)]
    pub heaps_per_fengine_per_chunk: usize,
    /// Input sample width: 8, or 4 (one byte per complex value, real in the high nibble, as
    /// fgpu `--send-sample-bits 4` sends it).
    #[arg(long, default_value_t = 8, value_parser = sample_bits())]
    pub sample_bits: u32,
    /// Correlation output: name=,dst=,heap_accumulation_threshold=[,send_enabled=]
    #[arg(long, value_parser = parse_corrprod)]
    pub corrprod: Vec<CorrprodSpec>,
    /// Beam output: name=,dst=,pol=[,dither=,send_enabled=]
    #[arg(long, value_parser = parse_beam)]
    pub beam: Vec<BeamSpec>,
    /// Transmit from the start (otherwise wait for ?capture-start); an output's own
    /// `send_enabled=` key overrides it.
    #[arg(long)]
    pub send_enabled: bool,
    /// Bandwidth in Hz used to turn beam delays into phases (default: ADC rate /
    /// --samples-between-spectra × --channels).
    #[arg(long)]
    pub bandwidth: Option<f64>,
    /// Output rate relative to the outputs' nominal data rate (0: unpaced).
    #[arg(long, default_value_t = 1.1)]
    pub send_rate_factor: f64,
    /// katcp control port (default 7147 for network input, none for a pcap file; 0: none).
    #[arg(long)]
    pub katcp_port: Option<u16>,
    /// katcp listening address (the Prometheus endpoint listens there too).
    #[arg(long, default_value = "0.0.0.0")]
    pub katcp_host: std::net::Ipv4Addr,
    /// Test only (`gpucbf qualify --debug-break baselines`): swaps the data of baselines
    /// A and B (ICD baseline indices) in every correlation product dump.
    #[arg(long, hide = true, value_name = "A,B", value_parser = parse_baseline_pair)]
    pub debug_permute_baselines: Option<(usize, usize)>,
    /// Test only: every correlation output's compute call fails after N batches, as a GPU
    /// call that fails (a lost device, a failed launch) does: shows how the engine reports
    /// it.
    #[arg(long, hide = true, value_name = "N")]
    pub debug_fail_compute_after: Option<u64>,
    /// Python debugging consoles (accepted, not applicable).
    #[command(flatten)]
    pub console: crate::engines::common::ConsoleArgs,
    /// Input: a pcap file, or the multicast endpoint of F-engine heaps.
    pub src: String,
    /// Receive, send, backend and metrics options (shared with fgpu).
    #[command(flatten)]
    pub io: EngineArgs,
}

/// A checked xbgpu configuration: every option valid, outputs parsed, the compute shape and
/// the receive layout built, the backend resolved.
#[derive(Debug, Clone)]
pub struct XbgpuConfig {
    /// ADC sample rate in Hz (positive).
    pub adc_sample_rate: f64,
    /// UNIX time of timestamp zero.
    pub sync_time: f64,
    /// Total channels of the stream.
    pub channels: usize,
    /// First channel handled by this engine (a multiple of the substream's channels).
    pub channel_offset: usize,
    /// ADC samples between spectra.
    pub samples_between_spectra: u64,
    /// The compute shape: antennas, channels of this engine, spectra per batch, sample width.
    pub shape: XShape,
    /// Receive layout: batches × antennas per chunk.
    pub placement: FengPlacement,
    /// Correlation outputs.
    pub corrprods: Vec<CorrprodSpec>,
    /// Beams.
    pub beams: Vec<BeamSpec>,
    /// Bandwidth in Hz for beam delay → phase.
    pub bandwidth: f64,
    /// Output rate relative to the nominal data rate (0: unpaced).
    pub send_rate_factor: f64,
    /// katcp endpoint, if served.
    pub katcp: Option<std::net::SocketAddrV4>,
    /// True when `--katcp-port` was given: failing to serve it is then an error (the
    /// default port only warns).
    pub katcp_required: bool,
    /// Test only: baselines whose data are swapped in every dump (`None`: none).
    pub debug_permute_baselines: Option<(usize, usize)>,
    /// Test only: batches each correlator computes before its compute call fails.
    pub debug_fail_compute_after: Option<u64>,
    /// katcp listening address (the Prometheus endpoint listens there too).
    pub katcp_host: std::net::Ipv4Addr,
    /// Correlate and beamform on the GPU.
    pub use_gpu: bool,
    /// Receive, send and metrics options.
    pub io: EngineArgs,
    /// Input: a pcap file or endpoints.
    pub src: String,
}

impl XbgpuConfig {
    /// Antennas.
    pub fn n_ants(&self) -> usize {
        self.placement.n_ants
    }

    /// Channels of this engine (one F-engine substream).
    pub fn channels_per_substream(&self) -> usize {
        self.placement.channels_per_substream
    }

    /// Spectra per F-engine heap.
    pub fn spectra_per_heap(&self) -> usize {
        self.placement.spectra_per_heap
    }
}

impl XbgpuArgs {
    /// Spectra per F-engine heap (`--jones-per-batch` / `--channels`).
    pub fn spectra_per_heap(&self) -> usize {
        self.jones_per_batch / self.channels.max(1)
    }

    /// Checks every option and builds the configuration; nothing starts here.
    pub fn validate(&self) -> Result<XbgpuConfig, ConfigError> {
        self.check_layout()?;
        if self.corrprod.is_empty() && self.beam.is_empty() {
            return Err(ConfigError::NoOutput {
                options: "--corrprod or --beam",
            });
        }
        if !(self.adc_sample_rate.is_finite() && self.adc_sample_rate > 0.0) {
            return Err(ConfigError::rule("--adc-sample-rate", "must be positive"));
        }
        // katcp requests (`?capture-start`, `?beam-weights`) and sensors name streams: two
        // of one name would be one stream.
        let names: Vec<&str> = (self.corrprod.iter().map(|c| c.name.as_str()))
            .chain(self.beam.iter().map(|b| b.name.as_str()))
            .collect();
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(ConfigError::rule(
                    format!("name={n}"),
                    "is given to two outputs (--corrprod, --beam): names must be unique",
                ));
            }
        }
        let (n, cps, sph) = (
            self.array_size,
            self.channels_per_substream,
            self.spectra_per_heap(),
        );
        let shape = XShape::new(n, cps, sph)
            .and_then(|s| s.with_sample_bits(self.sample_bits))
            .map_err(|e| ConfigError::Shape(e.to_string()))?;
        self.check_sizes(&shape, HostMemory::probe())?;
        if let Some(out) = &self.io.send_pcap {
            check_output_is_not_input("--send-pcap", out, &self.src)?;
        }
        let use_gpu = self.io.backend.use_gpu(true)?;
        let bandwidth = self.bandwidth.unwrap_or(
            self.adc_sample_rate / self.samples_between_spectra as f64 * self.channels as f64,
        );
        if !(bandwidth.is_finite() && bandwidth > 0.0) {
            return Err(ConfigError::rule("--bandwidth", "must be positive"));
        }
        if !(self.send_rate_factor.is_finite() && self.send_rate_factor >= 0.0) {
            return Err(ConfigError::rule("--send-rate-factor", "must be ≥ 0"));
        }
        if self.io.send_interface.0.len() > 1 {
            return Err(ConfigError::rule(
                "--send-interface",
                "takes one interface on xbgpu (as katgpucbf's)",
            ));
        }
        self.io.check_interfaces(&[])?;
        let katcp_port = match self.katcp_port {
            Some(0) => None,
            Some(p) => Some(p),
            None if std::path::Path::new(&self.src).is_file() => None,
            None => Some(7147),
        };
        if let Some((a, b)) = self.debug_permute_baselines {
            let nbl = crate::spead::icd::n_baselines(self.array_size);
            if a >= nbl || b >= nbl {
                return Err(ConfigError::rule(
                    format!("--debug-permute-baselines {a},{b}"),
                    format!("must name baselines below {nbl}"),
                ));
            }
        }
        let mut corrprods = self.corrprod.clone();
        for c in &mut corrprods {
            c.send_enabled.get_or_insert(self.send_enabled);
        }
        let mut beams = self.beam.clone();
        for b in &mut beams {
            b.send_enabled.get_or_insert(self.send_enabled);
        }
        Ok(XbgpuConfig {
            adc_sample_rate: self.adc_sample_rate,
            sync_time: self.sync_time,
            channels: self.channels,
            channel_offset: self.channel_offset_value,
            samples_between_spectra: self.samples_between_spectra,
            shape,
            placement: FengPlacement {
                n_ants: n,
                channels_per_substream: cps,
                spectra_per_heap: sph,
                sample_bits: self.sample_bits,
                samples_between_spectra: self.samples_between_spectra,
                batches_per_chunk: self.heaps_per_fengine_per_chunk,
                frequency: Some(self.channel_offset_value as u64),
            },
            corrprods,
            beams,
            bandwidth,
            send_rate_factor: self.send_rate_factor,
            katcp: katcp_port.map(|p| std::net::SocketAddrV4::new(self.katcp_host, p)),
            katcp_required: self.katcp_port.is_some(),
            debug_permute_baselines: self.debug_permute_baselines,
            debug_fail_compute_after: self.debug_fail_compute_after,
            katcp_host: self.katcp_host,
            use_gpu,
            io: self.io.clone(),
            src: self.src.clone(),
        })
    }

    /// F-engine heaps the receiver can count, and receive chunks and correlation dumps that
    /// fit `host`'s memory (lower bounds), before anything is allocated: the message names
    /// the option and the sizes.
    pub fn check_sizes(&self, shape: &XShape, host: Option<HostMemory>) -> Result<(), ConfigError> {
        let slot = (self.channels_per_substream * self.spectra_per_heap()) as u128
            * 4
            * self.sample_bits as u128
            / 8;
        check_heap(
            format!("--jones-per-batch {}", self.jones_per_batch),
            &format!(
                "F-engine heaps ({} channels × {} spectra)",
                self.channels_per_substream,
                self.spectra_per_heap()
            ),
            slot,
        )?;
        let slots = self.heaps_per_fengine_per_chunk as u128 * self.array_size as u128;
        let chunks = chunks_held(slots, slot);
        let what = format!(
            "{MIN_CHUNKS_HELD} receive chunks of {}",
            Bytes(chunks / MIN_CHUNKS_HELD)
        );
        let subject = format!(
            "--heaps-per-fengine-per-chunk {}",
            self.heaps_per_fengine_per_chunk
        );
        check_memory(host, &subject, chunks, &what)?;
        // Each correlation output: its dump (int32) and its accumulator (int64).
        let dumps = self.corrprod.len() as u128 * shape.output_len() as u128 * 12;
        check_memory(
            host,
            format!("{subject} with --array-size {}", self.array_size),
            chunks + dumps,
            &format!("{what} and the correlation dumps"),
        )
    }

    /// Antennas, channels, batches and chunks that fit together.
    fn check_layout(&self) -> Result<(), ConfigError> {
        if self.array_size == 0 || self.array_size > 1024 {
            return Err(ConfigError::rule("--array-size", "must be 1..=1024"));
        }
        if self.channels == 0
            || self.channels_per_substream == 0
            || !self.channels.is_multiple_of(self.channels_per_substream)
        {
            return Err(ConfigError::rule(
                "--channels",
                "must be a positive multiple of --channels-per-substream",
            ));
        }
        if self.heaps_per_fengine_per_chunk == 0 {
            return Err(ConfigError::rule(
                "--heaps-per-fengine-per-chunk",
                "must be at least 1",
            ));
        }
        if self.jones_per_batch == 0 || !self.jones_per_batch.is_multiple_of(self.channels) {
            return Err(ConfigError::rule(
                "--jones-per-batch",
                "must be a multiple of --channels",
            ));
        }
        if !self
            .channel_offset_value
            .is_multiple_of(self.channels_per_substream)
            || self.channel_offset_value >= self.channels
        {
            return Err(ConfigError::rule(
                "--channel-offset-value",
                "must be a multiple of --channels-per-substream below --channels",
            ));
        }
        Ok(())
    }
}

/// `A,B`: two baseline indices.
fn parse_baseline_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("{s:?}: expected A,B"))?;
    let n = |x: &str| {
        x.trim()
            .parse::<usize>()
            .map_err(|_| format!("{x:?} is not a baseline index"))
    };
    Ok((n(a)?, n(b)?))
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
            "--backend",
            "cpu",
        ];
        v.extend_from_slice(extra);
        v.push("f.pcap");
        Cli::try_parse_from(v).expect("parse").args
    }

    #[test]
    fn zero_heaps_per_chunk_is_refused() {
        let cfg = parse(&[]).validate().unwrap();
        assert_eq!((cfg.n_ants(), cfg.channels_per_substream()), (4, 512));
        assert_eq!(cfg.spectra_per_heap(), 256);
        let e = parse(&["--heaps-per-fengine-per-chunk", "0"])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--heaps-per-fengine-per-chunk"), "{e}");
    }

    /// Rules across options fail in `validate`, a single bad value in clap; both name the
    /// option.
    #[test]
    fn debug_permute_baselines_is_hidden_and_checked() {
        let cfg = parse(&["--debug-permute-baselines", "1,2"])
            .validate()
            .unwrap();
        assert_eq!(cfg.debug_permute_baselines, Some((1, 2)));
        assert_eq!(parse(&[]).validate().unwrap().debug_permute_baselines, None);
        let e = parse(&["--debug-permute-baselines", "0,99"])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--debug-permute-baselines 0,99 must name baselines below"),
            "{e}"
        );
        assert!(parse_baseline_pair("1").is_err() && parse_baseline_pair("a,1").is_err());
    }

    #[test]
    fn invalid_options_are_refused_by_name() {
        let bc = "name=bc,dst=127.0.0.1:7162,heap_accumulation_threshold=2";
        let beam = |n: &str| format!("name={n},dst=127.0.0.1:7161,pol=0");
        let (b1, bc_beam) = (beam("b1"), beam("bc"));
        for (extra, want) in [
            (vec!["--corrprod", bc], "name=bc is given to two outputs"),
            (
                vec!["--beam", &b1, "--beam", &b1],
                "name=b1 is given to two outputs",
            ),
            (vec!["--beam", &bc_beam], "name=bc is given to two outputs"),
        ] {
            let e = parse(&extra).validate().unwrap_err().to_string();
            assert!(e.starts_with(want), "{extra:?}: {e}");
        }
        for (extra, want) in [
            (vec!["--jones-per-batch", "1000"], "--jones-per-batch"),
            (
                vec!["--channel-offset-value", "100"],
                "--channel-offset-value",
            ),
            (vec!["--jones-per-batch", "4096"], "invalid shape"),
        ] {
            let e = parse(&extra).validate().unwrap_err().to_string();
            assert!(e.contains(want), "{extra:?}: {e}");
        }
        for (extra, want) in [
            (vec!["--sample-bits", "6"], "--sample-bits"),
            (
                vec!["--beam", "name=b,dst=127.0.0.1:7161,pol=2"],
                "pol=2: expected 0 or 1",
            ),
        ] {
            let mut v = vec!["xbgpu", "--adc-sample-rate", "1", "--sync-time", "0"];
            v.extend(["--array-size", "4", "--channels", "4096"]);
            v.extend([
                "--channels-per-substream",
                "512",
                "--samples-between-spectra",
                "8192",
            ]);
            v.extend(&extra);
            v.push("f.pcap");
            let e = Cli::try_parse_from(v).err().expect("refused").to_string();
            assert!(e.contains(want), "{extra:?}: {e}");
        }
    }
}
