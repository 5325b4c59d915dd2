//! fgpu's outputs: the `--wideband` / `--narrowband` key=value specs ([`WidebandSpec`]) and
//! what follows from them (heap shape, batch step, substreams).

use std::net::SocketAddrV4;

use crate::engines::common::cli::{parse_dither, parse_kv, parse_num};
use crate::engines::common::error::{endpoints, ConfigError};

/// The most channels an output takes (MeerKAT uses up to 32768).
pub const MAX_CHANNELS: usize = 1 << 20;
/// The largest narrowband decimation (MeerKAT's narrowband uses 8 to 256).
pub const MAX_DECIMATION: usize = 1 << 16;
/// The most complex values per polarisation in one output batch (katgpucbf's default is
/// 2^20; sizes up to this bound are then checked against the heap size and the host's
/// memory, naming what they would need).
pub const MAX_JONES_PER_BATCH: usize = 1 << 32;

/// PFB window function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowFunction {
    /// Hann window (the default).
    Hann,
    /// Rectangular window.
    Rect,
}

/// Narrowband options of an output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NarrowbandOpts {
    /// Baseband frequency (Hz) moved to the centre of the output band.
    pub centre_frequency: f64,
    /// Decimation factor of the digital down-converter.
    pub decimation: usize,
    /// DDC filter taps (`None`: the compute default for the decimation).
    pub ddc_taps: Option<usize>,
    /// Pass-band weight of the DDC filter design.
    pub weight_pass: f64,
    /// Present: no-discard (VLBI) mode with this pass bandwidth (Hz).
    pub pass_bandwidth: Option<f64>,
}

/// One output (`--wideband` or `--narrowband name=,channels=,dst=[,...]`).
#[derive(Debug, Clone, PartialEq)]
pub struct WidebandSpec {
    /// Stream name (katcp requests and sensors use it).
    pub name: String,
    /// Output channels.
    pub channels: usize,
    /// Destinations: the channels are split evenly over them (one substream each).
    pub dst: Vec<SocketAddrV4>,
    /// Complex values per polarisation in one output batch (channels × spectra per heap).
    pub jones_per_batch: usize,
    /// PFB taps.
    pub taps: usize,
    /// PFB window width scale.
    pub w_cutoff: f64,
    /// PFB window function.
    pub window_function: WindowFunction,
    /// Uniform dither before quantisation.
    pub dither: bool,
    /// Present for a narrowband output.
    pub narrowband: Option<NarrowbandOpts>,
}

impl WidebandSpec {
    /// Spectra in one output heap.
    pub fn spectra_per_heap(&self) -> usize {
        self.jones_per_batch / self.channels
    }

    /// ADC samples between consecutive output spectra.
    pub fn samples_between_spectra(&self) -> u64 {
        2 * self.channels as u64 * self.narrowband.map_or(1, |n| n.decimation as u64)
    }

    /// ADC samples between consecutive output batches (heap timestamp step).
    pub fn batch_step(&self) -> u64 {
        self.spectra_per_heap() as u64 * self.samples_between_spectra()
    }

    /// Channels in each destination's substream.
    pub fn channels_per_substream(&self) -> usize {
        self.channels / self.dst.len()
    }
}

/// Parses a `--wideband` value.
pub fn parse_wideband(spec: &str) -> Result<WidebandSpec, ConfigError> {
    parse_output(spec, false)
}

/// Parses a `--narrowband` value.
pub fn parse_narrowband(spec: &str) -> Result<WidebandSpec, ConfigError> {
    parse_output(spec, true)
}

fn parse_output(spec: &str, narrow: bool) -> Result<WidebandSpec, ConfigError> {
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
            "dst" => dst = Some(endpoints(&v)?),
            "jones_per_batch" => w.jones_per_batch = parse_num(&k, &v)?,
            "taps" => w.taps = parse_num(&k, &v)?,
            "w_cutoff" => w.w_cutoff = parse_num(&k, &v)?,
            "window_function" => {
                w.window_function = match v.as_str() {
                    "hann" => WindowFunction::Hann,
                    "rect" => WindowFunction::Rect,
                    _ => {
                        return Err(ConfigError::value(
                            "window_function",
                            &v,
                            "expected hann or rect",
                        ))
                    }
                }
            }
            "dither" => w.dither = parse_dither(&v)?,
            "centre_frequency" if narrow => nb.centre_frequency = parse_num(&k, &v)?,
            "decimation" if narrow => nb.decimation = parse_num(&k, &v)?,
            "ddc_taps" if narrow => nb.ddc_taps = Some(parse_num(&k, &v)?),
            "weight_pass" if narrow => nb.weight_pass = parse_num(&k, &v)?,
            "pass_bandwidth" if narrow => nb.pass_bandwidth = Some(parse_num(&k, &v)?),
            _ => {
                return Err(ConfigError::UnknownKey {
                    option: if narrow { "narrowband" } else { "wideband" },
                    key: k,
                })
            }
        }
    }
    if narrow {
        if !nb.centre_frequency.is_finite() {
            return Err(ConfigError::MissingKey {
                what: "--narrowband",
                key: "centre_frequency",
            });
        }
        if nb.decimation == 0 {
            return Err(ConfigError::rule("--narrowband", "needs decimation= (≥ 1)"));
        }
        if nb.decimation > MAX_DECIMATION {
            return Err(ConfigError::rule(
                format!("decimation={}", nb.decimation),
                format!("must be at most {MAX_DECIMATION}"),
            ));
        }
        if nb.pass_bandwidth.is_none() && !nb.decimation.is_multiple_of(2) {
            return Err(ConfigError::rule(
                format!("decimation={}", nb.decimation),
                "must be even in discard mode",
            ));
        }
        w.narrowband = Some(nb);
    }
    let missing = |key| ConfigError::MissingKey {
        what: "output",
        key,
    };
    w.name = name.ok_or_else(|| missing("name"))?;
    w.channels = channels.ok_or_else(|| missing("channels"))?;
    w.dst = dst.ok_or_else(|| missing("dst"))?;
    if !w.channels.is_power_of_two() || w.channels < 64 || w.channels > MAX_CHANNELS {
        return Err(ConfigError::rule(
            format!("channels={}", w.channels),
            format!("must be a power of two in 64..={MAX_CHANNELS}"),
        ));
    }
    if w.jones_per_batch > MAX_JONES_PER_BATCH {
        return Err(ConfigError::rule(
            format!("jones_per_batch={}", w.jones_per_batch),
            format!("must be at most {MAX_JONES_PER_BATCH}"),
        ));
    }
    if w.jones_per_batch == 0 || !w.jones_per_batch.is_multiple_of(w.channels) {
        return Err(ConfigError::rule(
            format!("jones_per_batch={}", w.jones_per_batch),
            format!("must be a multiple of channels={}", w.channels),
        ));
    }
    if !w.channels.is_multiple_of(w.dst.len()) {
        return Err(ConfigError::rule(
            format!("channels={}", w.channels),
            format!("must divide evenly over {} destinations", w.dst.len()),
        ));
    }
    if w.taps == 0 || w.taps > 64 {
        return Err(ConfigError::rule(
            format!("taps={}", w.taps),
            "out of range 1..=64",
        ));
    }
    if !w.w_cutoff.is_finite() || w.w_cutoff < 0.0 {
        return Err(ConfigError::rule("w_cutoff", "must be ≥ 0"));
    }
    Ok(w)
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

    /// Sizes whose products overflow are refused naming the key (a fuzz find: decimation
    /// 8666666666666666 overflowed samples_between_spectra); the largest taken compute.
    #[test]
    fn sizes_past_their_bounds_are_refused() {
        let nb = |extra: &str| {
            parse_narrowband(&format!(
                "name=nb,channels=32768,centre_frequency=400,dst=127.0.0.1:7150,{extra}"
            ))
        };
        let e = nb("decimation=8666666666666666,pass_bandwidth=6").unwrap_err();
        assert!(
            e.to_string().starts_with("decimation=8666666666666666"),
            "{e}"
        );
        assert!(nb(&format!("decimation={}", MAX_DECIMATION + 2)).is_err());
        let wb = |extra: &str| parse_wideband(&format!("name=wb,dst=1.2.3.4:1,{extra}"));
        let e = wb("channels=9223372036854775808").unwrap_err().to_string();
        assert!(e.starts_with("channels=9223372036854775808"), "{e}");
        let e = wb("channels=64,jones_per_batch=4611686018427387904")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("jones_per_batch="), "{e}");
        let big = parse_narrowband(&format!(
            "name=nb,channels={MAX_CHANNELS},centre_frequency=1e8,decimation={MAX_DECIMATION},\
             jones_per_batch={MAX_JONES_PER_BATCH},dst=1.2.3.4:1"
        ))
        .unwrap();
        assert_eq!(big.batch_step(), (1u64 << 12) * 2 * (1 << 20) * (1 << 16));
    }
}
