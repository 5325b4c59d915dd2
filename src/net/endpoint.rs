//! Endpoint lists in katgpucbf syntax: `ADDR[+N]:PORT`, comma separated.

use std::net::{Ipv4Addr, SocketAddrV4};

/// Parses `ADDR[+N]:PORT[,ADDR[+N]:PORT...]` into consecutive IPv4 endpoints.
pub fn parse_endpoints(spec: &str) -> Result<Vec<SocketAddrV4>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (host, port) = part
            .rsplit_once(':')
            .ok_or_else(|| format!("endpoint {part:?} has no :PORT"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("bad port in endpoint {part:?}"))?;
        let (addr, extra) = match host.split_once('+') {
            Some((a, n)) => (
                a,
                n.parse::<u32>()
                    .map_err(|_| format!("bad +N in endpoint {part:?}"))?,
            ),
            None => (host, 0),
        };
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("bad IPv4 address in endpoint {part:?}"))?;
        let base = u32::from(addr);
        let last = base
            .checked_add(extra)
            .ok_or_else(|| format!("endpoint range {part:?} overflows"))?;
        out.extend((base..=last).map(|a| SocketAddrV4::new(Ipv4Addr::from(a), port)));
    }
    if out.is_empty() {
        return Err(format!("no endpoints in {spec:?}"));
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
    }
}
