//! How much memory this process can have at most ([`HostMemory`]), so that a configuration
//! whose buffers cannot fit is refused by name before anything is allocated (an allocation
//! that fails later aborts the process, and one the kernel overcommits brings the OOM
//! killer instead of an error).

use std::fmt;

/// The most memory this process can use: the host's RAM (`MemTotal`), lowered by the
/// cgroup's limit (`memory.max`) and the address-space limit (`RLIMIT_AS`) where set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemory {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure comes from (`MemTotal`, `cgroup memory.max`, `RLIMIT_AS`).
    pub source: &'static str,
}

impl HostMemory {
    /// Probes `/proc/meminfo`, the cgroup and the rlimit; `None` where none of them can be
    /// read (then nothing is refused on memory grounds).
    pub fn probe() -> Option<HostMemory> {
        let mut best: Option<HostMemory> = None;
        let mut consider = |bytes: Option<u64>, source| {
            if let Some(bytes) = bytes.filter(|&b| b > 0) {
                if best.is_none_or(|b| bytes < b.bytes) {
                    best = Some(HostMemory { bytes, source });
                }
            }
        };
        consider(mem_total(), "MemTotal");
        consider(cgroup_limit(), "cgroup memory.max");
        consider(address_space_limit(), "RLIMIT_AS");
        best
    }

    /// Refuses `need` bytes (what `what` needs) beyond this memory.
    pub fn check(&self, need: u128, what: &str) -> Result<(), TooLarge> {
        if need <= self.bytes as u128 {
            return Ok(());
        }
        Err(TooLarge {
            need: Bytes(need),
            what: what.to_string(),
            host: *self,
        })
    }
}

/// A need beyond the host's memory: says how much is needed, what for, and what the host
/// has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("needs at least {need} of memory for {what}, more than this host's {} ({})", Bytes(host.bytes as u128), host.source)]
pub struct TooLarge {
    /// Bytes needed.
    pub need: Bytes,
    /// What needs them (`3 receive chunks of 1.2 TiB`).
    pub what: String,
    /// The memory there is.
    pub host: HostMemory,
}

/// A byte count in binary units for messages (`1.5 GiB`, `12 KiB`, `300 B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u128);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 7] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut v = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while v >= 1024.0 && unit + 1 < UNITS.len() {
            v /= 1024.0;
            unit += 1;
        }
        write!(f, "{v:.1} {}", UNITS[unit])
    }
}

fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

fn cgroup_limit() -> Option<u64> {
    // cgroup v2 ("max" when unlimited), else v1 (a huge number when unlimited).
    [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse().ok())
}

fn address_space_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_name_the_need_and_the_host() {
        let host = HostMemory {
            bytes: 16 << 30,
            source: "MemTotal",
        };
        assert!(host.check(16 << 30, "chunks").is_ok());
        let e = host
            .check((16 << 30) + 1, "receive chunks")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "needs at least 16.0 GiB of memory for receive chunks, more than this host's \
             16.0 GiB (MemTotal)"
        );
        let e = host.check(u128::MAX, "x").unwrap_err().to_string();
        assert!(e.contains("ZiB"), "{e}");
        assert_eq!(Bytes(300).to_string(), "300 B");
        assert_eq!(Bytes(1536).to_string(), "1.5 KiB");
        assert_eq!(Bytes(3 << 40).to_string(), "3.0 TiB");
    }

    #[test]
    fn probe_finds_this_host() {
        let m = HostMemory::probe().expect("Linux has /proc/meminfo");
        assert!(m.bytes >= 64 << 20, "{m:?}");
        assert!(m.bytes <= mem_total().unwrap(), "{m:?}");
    }
}
