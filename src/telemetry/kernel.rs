//! The host kernel's own drop counters, where a loss happens before an engine sees a
//! packet: per-CPU backlog drops and time squeezes (`/proc/net/softnet_stat`) and UDP
//! receive errors (`/proc/net/snmp`). A socket whose buffer overflowed counts in
//! `RcvbufErrors` (and `InErrors`); a backlog that overflowed, in the backlog drops.
//! Host-wide (every process on the host, in this network namespace for the UDP counters).

use serde::Serialize;

/// One reading of the counters (each since boot, or since the namespace was made).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct KernelDrops {
    /// Packets dropped because a CPU's input backlog was full (summed over CPUs).
    pub backlog_drops: u64,
    /// Times a CPU's packet processing ran out of budget with work left (summed).
    pub time_squeezes: u64,
    /// UDP datagrams that could not be delivered (`Udp: InErrors`).
    pub udp_in_errors: u64,
    /// UDP datagrams dropped because the socket's buffer was full (`Udp: RcvbufErrors`).
    pub udp_rcvbuf_errors: u64,
}

impl KernelDrops {
    /// The counters now; `None` where the files cannot be read or parsed (not Linux, no
    /// /proc).
    pub fn read() -> Option<KernelDrops> {
        let softnet = std::fs::read_to_string("/proc/net/softnet_stat").ok()?;
        let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
        Self::parse(&softnet, &snmp)
    }

    /// The counters from the text of `/proc/net/softnet_stat` and `/proc/net/snmp`.
    pub fn parse(softnet: &str, snmp: &str) -> Option<KernelDrops> {
        let mut k = KernelDrops::default();
        for line in softnet.lines().filter(|l| !l.trim().is_empty()) {
            let cols: Vec<u64> = line
                .split_whitespace()
                .map(|c| u64::from_str_radix(c, 16).ok())
                .collect::<Option<_>>()?;
            k.backlog_drops += cols.get(1)?;
            k.time_squeezes += cols.get(2)?;
        }
        let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
        let (names, values) = (udp.next()?, udp.next()?);
        let field = |name: &str| -> Option<u64> {
            let i = names.split_whitespace().position(|n| n == name)?;
            values.split_whitespace().nth(i)?.parse().ok()
        };
        k.udp_in_errors = field("InErrors")?;
        k.udp_rcvbuf_errors = field("RcvbufErrors")?;
        Some(k)
    }

    /// What rose from `earlier` to `self` (a counter that went back, as after a namespace
    /// change, counts 0).
    pub fn since(&self, earlier: &KernelDrops) -> KernelDrops {
        KernelDrops {
            backlog_drops: self.backlog_drops.saturating_sub(earlier.backlog_drops),
            time_squeezes: self.time_squeezes.saturating_sub(earlier.time_squeezes),
            udp_in_errors: self.udp_in_errors.saturating_sub(earlier.udp_in_errors),
            udp_rcvbuf_errors: self
                .udp_rcvbuf_errors
                .saturating_sub(earlier.udp_rcvbuf_errors),
        }
    }

    /// True when packets were dropped (time squeezes alone drop nothing).
    pub fn dropped(&self) -> bool {
        self.backlog_drops > 0 || self.udp_in_errors > 0 || self.udp_rcvbuf_errors > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOFTNET: &str = "\
0000a1b2 00000003 00000010 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
00000001 00000002 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001
";
    const SNMP: &str = "\
Ip: Forwarding DefaultTTL
Ip: 1 64
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 1000 2 34747 900 34740 0 7 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
";

    /// The columns as the kernel writes them: hexadecimal per CPU, summed; UDP by name.
    #[test]
    fn counters_parse_from_the_kernels_text() {
        let k = KernelDrops::parse(SOFTNET, SNMP).unwrap();
        assert_eq!(
            k,
            KernelDrops {
                backlog_drops: 5,
                time_squeezes: 17,
                udp_in_errors: 34747,
                udp_rcvbuf_errors: 34740,
            }
        );
        assert!(k.dropped());
        let later = KernelDrops {
            udp_rcvbuf_errors: 34750,
            ..k
        };
        let d = later.since(&k);
        assert_eq!(d.udp_rcvbuf_errors, 10);
        assert!(d.dropped());
        assert!(!KernelDrops::default().since(&k).dropped());
        // Malformed text is refused, not half read.
        assert_eq!(KernelDrops::parse("zz 1 2\n", SNMP), None);
        assert_eq!(KernelDrops::parse(SOFTNET, "Udp: InErrors\n"), None);
        assert_eq!(KernelDrops::parse(SOFTNET, "Ip: 1\n"), None);
    }

    /// On Linux the real files read.
    #[test]
    #[cfg(target_os = "linux")]
    fn the_hosts_counters_read() {
        assert!(KernelDrops::read().is_some());
    }
}
