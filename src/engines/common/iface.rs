//! Network interface options as katgpucbf takes them: an interface *name* (`lo`, `ens1f0`)
//! or a comma list of names, each converted to the interface's first IPv4 address (as
//! katsdpservices' `get_interface_address` does); an IPv4 address is still taken as it is.
//! An unknown name, or an interface without an IPv4 address, is a parse error that names
//! the interfaces there are.

use std::ffi::CStr;
use std::net::Ipv4Addr;

/// The IPv4 addresses of one interface option, in the order given (at least one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interfaces(pub Vec<Ipv4Addr>);

impl Interfaces {
    /// Every interface: the wildcard address `0.0.0.0` (the default when none is named).
    pub fn any() -> Self {
        Interfaces(vec![Ipv4Addr::UNSPECIFIED])
    }

    /// The first interface's address.
    pub fn first(&self) -> Ipv4Addr {
        self.0.first().copied().unwrap_or(Ipv4Addr::UNSPECIFIED)
    }
}

/// (name, IPv4 address) of every interface with an IPv4 address, in the kernel's order
/// (getifaddrs); an interface with several addresses appears once per address.
pub fn ipv4_interfaces() -> std::io::Result<Vec<(String, Ipv4Addr)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we own until freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points at a sockaddr whose family says its real type.
        let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
        if family != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address is a sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        let addr = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        out.push((name, addr));
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// One interface: an IPv4 address as it is, else the named interface's first IPv4 address.
pub fn resolve_one(item: &str, have: &[(String, Ipv4Addr)]) -> Result<Ipv4Addr, String> {
    let item = item.trim();
    if let Ok(a) = item.parse::<Ipv4Addr>() {
        return Ok(a);
    }
    if let Some((_, a)) = have.iter().find(|(n, _)| n == item) {
        return Ok(*a);
    }
    let mut names: Vec<&str> = have.iter().map(|(n, _)| n.as_str()).collect();
    names.dedup();
    Err(format!(
        "no interface {item:?} with an IPv4 address (interfaces with one: {})",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    ))
}

/// Parses `NAME|ADDR[,NAME|ADDR...]` against `have` (the machine's interfaces).
pub fn resolve_list(text: &str, have: &[(String, Ipv4Addr)]) -> Result<Interfaces, String> {
    if text.trim().is_empty() {
        return Err("empty interface list".into());
    }
    let v = text
        .split(',')
        .map(|i| resolve_one(i, have))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Interfaces(v))
}

/// The clap value parser of interface options: names resolved on this machine.
pub fn parse_interfaces(text: &str) -> Result<Interfaces, String> {
    let have = if text
        .split(',')
        .all(|i| i.trim().parse::<Ipv4Addr>().is_ok())
    {
        Vec::new()
    } else {
        ipv4_interfaces().map_err(|e| format!("cannot list the network interfaces: {e}"))?
    };
    resolve_list(text, &have)
}

/// The clap value parser of a single-interface option (dsim `--interface`).
pub fn parse_interface(text: &str) -> Result<Ipv4Addr, String> {
    let all = parse_interfaces(text)?;
    match all.0.as_slice() {
        [one] => Ok(*one),
        _ => Err(format!("one interface expected, got {}", all.0.len())),
    }
}

/// Which of `n_if` interfaces sends to destination `i` of `n_dst` (contiguous blocks, as
/// katgpucbf divides an output's substreams among its send interfaces; `n_dst` is a
/// multiple of `n_if` where the engine checked it).
pub fn interface_of(i: usize, n_dst: usize, n_if: usize) -> usize {
    if n_if <= 1 || n_dst == 0 {
        return 0;
    }
    (i * n_if / n_dst).min(n_if - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_and_unknown_names_are_refused() {
        let have = vec![
            ("lo".to_string(), Ipv4Addr::LOCALHOST),
            ("eth0".to_string(), Ipv4Addr::new(10, 0, 0, 2)),
            ("eth0".to_string(), Ipv4Addr::new(10, 0, 0, 3)),
        ];
        assert_eq!(resolve_one("eth0", &have), Ok(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(
            resolve_one("10.9.8.7", &have),
            Ok(Ipv4Addr::new(10, 9, 8, 7))
        );
        let e = resolve_one("ens9", &have).unwrap_err();
        assert!(e.contains("\"ens9\"") && e.contains("lo, eth0"), "{e}");
        assert_eq!(
            resolve_list("lo,eth0", &have).unwrap().0,
            vec![Ipv4Addr::LOCALHOST, Ipv4Addr::new(10, 0, 0, 2)]
        );
        assert!(resolve_list("lo,", &have).is_err());
        assert!(resolve_list("", &have).is_err());
        // This machine's loopback interface is `lo` (Linux).
        assert_eq!(parse_interface("lo"), Ok(Ipv4Addr::LOCALHOST));
        assert!(parse_interface("lo,lo").is_err());
        assert!(parse_interfaces("no-such-interface-x").is_err());
    }

    #[test]
    fn destinations_are_divided_in_blocks() {
        let of: Vec<usize> = (0..8).map(|i| interface_of(i, 8, 2)).collect();
        assert_eq!(of, [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(interface_of(3, 4, 1), 0);
        assert_eq!(interface_of(2, 3, 4), 2);
    }
}
