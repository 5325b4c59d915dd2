//! xbgpu's outputs: the `--corrprod` and `--beam` key=value specs.

use std::net::SocketAddrV4;

use crate::engines::common::cli::{parse_dither, parse_kv};
use crate::engines::common::error::{endpoints, ConfigError};

/// One correlation-products output.
#[derive(Debug, Clone, PartialEq)]
pub struct CorrprodSpec {
    /// Stream name.
    pub name: String,
    /// Destination.
    pub dst: SocketAddrV4,
    /// Batches per dump.
    pub heap_accumulation_threshold: u64,
    /// `send_enabled=`: transmit from the start (`None`: as `--send-enabled` says).
    pub send_enabled: Option<bool>,
}

/// One single-polarisation beam.
#[derive(Debug, Clone, PartialEq)]
pub struct BeamSpec {
    /// Stream name.
    pub name: String,
    /// Destination.
    pub dst: SocketAddrV4,
    /// Input polarisation (0 or 1).
    pub pol: usize,
    /// Uniform dither before quantisation.
    pub dither: bool,
    /// `send_enabled=`: transmit from the start (`None`: as `--send-enabled` says).
    pub send_enabled: Option<bool>,
}

/// Parses a `send_enabled=` value as katgpucbf's per-output branch does: true/false/1/0,
/// any case (katsdpcontroller writes Python's `True` / `False`).
pub fn parse_send_enabled(v: &str) -> Result<bool, ConfigError> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(ConfigError::value(
            "send_enabled",
            v,
            "expected true, false, 1 or 0",
        )),
    }
}

fn one_endpoint(v: &str) -> Result<SocketAddrV4, ConfigError> {
    let e = endpoints(v)?;
    if e.len() != 1 {
        return Err(ConfigError::value("dst", v, "one endpoint expected"));
    }
    Ok(e[0])
}

/// Parses a `--corrprod` value: `name=,dst=,heap_accumulation_threshold=[,send_enabled=]`.
pub fn parse_corrprod(spec: &str) -> Result<CorrprodSpec, ConfigError> {
    let (mut name, mut dst, mut thr, mut send_enabled) = (None, None, None, None);
    for (k, v) in parse_kv(spec, &[])? {
        match k.as_str() {
            "name" => name = Some(v),
            "dst" => dst = Some(one_endpoint(&v)?),
            "heap_accumulation_threshold" => {
                thr = Some(
                    v.parse::<u64>()
                        .map_err(|_| ConfigError::value(&k, &v, "not a positive integer"))?,
                )
            }
            "send_enabled" => send_enabled = Some(parse_send_enabled(&v)?),
            _ => {
                return Err(ConfigError::UnknownKey {
                    option: "corrprod",
                    key: k,
                })
            }
        }
    }
    let missing = |key| ConfigError::MissingKey {
        what: "--corrprod",
        key,
    };
    let thr = thr.ok_or_else(|| missing("heap_accumulation_threshold"))?;
    if thr == 0 {
        return Err(ConfigError::rule(
            "heap_accumulation_threshold",
            "must be ≥ 1",
        ));
    }
    Ok(CorrprodSpec {
        name: name.ok_or_else(|| missing("name"))?,
        dst: dst.ok_or_else(|| missing("dst"))?,
        heap_accumulation_threshold: thr,
        send_enabled,
    })
}

/// Parses a `--beam` value: `name=,dst=,pol=[,dither=,send_enabled=]`.
pub fn parse_beam(spec: &str) -> Result<BeamSpec, ConfigError> {
    let (mut name, mut dst, mut pol, mut dither) = (None, None, None, true);
    let mut send_enabled = None;
    for (k, v) in parse_kv(spec, &[])? {
        match k.as_str() {
            "name" => name = Some(v),
            "dst" => dst = Some(one_endpoint(&v)?),
            "pol" => {
                pol = Some(match v.as_str() {
                    "0" => 0,
                    "1" => 1,
                    _ => return Err(ConfigError::value("pol", &v, "expected 0 or 1")),
                })
            }
            "dither" => dither = parse_dither(&v)?,
            "send_enabled" => send_enabled = Some(parse_send_enabled(&v)?),
            _ => {
                return Err(ConfigError::UnknownKey {
                    option: "beam",
                    key: k,
                })
            }
        }
    }
    let missing = |key| ConfigError::MissingKey {
        what: "--beam",
        key,
    };
    Ok(BeamSpec {
        name: name.ok_or_else(|| missing("name"))?,
        dst: dst.ok_or_else(|| missing("dst"))?,
        pol: pol.ok_or_else(|| missing("pol"))?,
        dither,
        send_enabled,
    })
}
