//! Endpoint lists in katgpucbf syntax: `ADDR[+N]:PORT`, comma separated.

use std::net::{Ipv4Addr, SocketAddrV4};

/// Why an endpoint list did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// An entry without `:PORT`.
    #[error("endpoint {0:?} has no :PORT")]
    NoPort(String),
    /// The port is not a number in 0..=65535.
    #[error("bad port in endpoint {0:?}")]
    BadPort(String),
    /// The `+N` count is not a number.
    #[error("bad +N in endpoint {0:?}")]
    BadCount(String),
    /// The address is not a dotted IPv4 address.
    #[error("bad IPv4 address in endpoint {0:?}")]
    BadAddress(String),
    /// `ADDR+N` runs past 255.255.255.255.
    #[error("endpoint range {0:?} overflows")]
    Overflow(String),
    /// The list names no endpoint at all.
    #[error("no endpoints in {0:?}")]
    Empty(String),
    /// More endpoints than any engine uses ([`MAX_ENDPOINTS`]).
    #[error("endpoint list {0:?} names more than {MAX_ENDPOINTS} endpoints")]
    TooMany(String),
}

/// Most endpoints one list may name: far above any product's (a MeerKAT X-engine has one
/// substream per GPU; 80 antennas × 2 pols of digitiser groups), far below what would
/// exhaust memory (`0.0.0.0+4294967294:1` asked for 4 × 10^9 of them).
pub const MAX_ENDPOINTS: usize = 65536;

/// The message, for validation code that still collects errors as strings (the engines'
/// argument checks).
/// Parses `ADDR[+N]:PORT[,ADDR[+N]:PORT...]` into consecutive IPv4 endpoints.
pub fn parse_endpoints(spec: &str) -> Result<Vec<SocketAddrV4>, EndpointError> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (host, port) = part
            .rsplit_once(':')
            .ok_or_else(|| EndpointError::NoPort(part.into()))?;
        let port: u16 = port
            .parse()
            .map_err(|_| EndpointError::BadPort(part.into()))?;
        let (addr, extra) = match host.split_once('+') {
            Some((a, n)) => (
                a,
                n.parse::<u32>()
                    .map_err(|_| EndpointError::BadCount(part.into()))?,
            ),
            None => (host, 0),
        };
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| EndpointError::BadAddress(part.into()))?;
        let base = u32::from(addr);
        let last = base
            .checked_add(extra)
            .ok_or_else(|| EndpointError::Overflow(part.into()))?;
        if out.len() + extra as usize >= MAX_ENDPOINTS {
            return Err(EndpointError::TooMany(spec.into()));
        }
        out.extend((base..=last).map(|a| SocketAddrV4::new(Ipv4Addr::from(a), port)));
    }
    if out.is_empty() {
        return Err(EndpointError::Empty(spec.into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_lists() {
        let e = parse_endpoints("239.102.0.64+2:7148,127.0.0.1:7149").unwrap();
        assert_eq!(e.len(), 4);
        assert_eq!(e[2], "239.102.0.66:7148".parse().unwrap());
        assert_eq!(e[3], "127.0.0.1:7149".parse().unwrap());
        assert!(parse_endpoints("1.2.3.4").is_err());
        assert!(parse_endpoints("1.2.3.4+x:1").is_err());
        assert!(parse_endpoints("255.255.255.255+1:1").is_err());
        // A huge range is refused before anything is allocated (found by fuzzing: it
        // aborted on a 24 GB allocation); the largest allowed list parses.
        let e = parse_endpoints("0.0.0.0+4294967294:1").unwrap_err();
        assert!(matches!(e, EndpointError::TooMany(_)), "{e}");
        assert_eq!(
            parse_endpoints("10.0.0.0+65535:1").map(|v| v.len()),
            Ok(65536)
        );
        assert!(parse_endpoints("10.0.0.0+65535:1,1.2.3.4:5").is_err());
        // The messages users see.
        let msg = |s: &str| parse_endpoints(s).unwrap_err().to_string();
        assert_eq!(msg("1.2.3.4"), r#"endpoint "1.2.3.4" has no :PORT"#);
        assert_eq!(msg("1.2.3.4:x"), r#"bad port in endpoint "1.2.3.4:x""#);
        assert_eq!(msg("1.2.3.4+x:1"), r#"bad +N in endpoint "1.2.3.4+x:1""#);
        assert_eq!(msg("1.2.3:1"), r#"bad IPv4 address in endpoint "1.2.3:1""#);
        assert_eq!(
            msg("255.255.255.255+1:1"),
            r#"endpoint range "255.255.255.255+1:1" overflows"#
        );
        assert_eq!(msg(" , "), r#"no endpoints in " , ""#);
    }
}
