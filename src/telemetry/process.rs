//! The standard `process_*` metrics (as Prometheus client libraries export them, and as
//! katgpucbf's engines have them through prometheus-client): CPU seconds, virtual and
//! resident memory, start time, open and maximum file descriptors, read from /proc.

/// The process figures behind the metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// User + system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// Resident set size, bytes.
    pub resident_bytes: u64,
    /// Start time, seconds since the UNIX epoch.
    pub start_time: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// Soft limit of file descriptors.
    pub max_fds: u64,
}

/// Parses `/proc/self/stat` (`stat`) with the clock tick rate, page size and boot time.
pub fn parse_stat(
    stat: &str,
    ticks: f64,
    page: u64,
    boot_time: f64,
) -> Option<(f64, u64, u64, f64)> {
    // Fields after the command name in parentheses (which may hold spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state): field n is f[n - 3].
    let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    let cpu = (num(14)? + num(15)?) as f64 / ticks;
    let start = boot_time + num(22)? as f64 / ticks;
    Some((cpu, num(23)?, num(24)? * page, start))
}

/// Reads this process's figures (`None` where /proc is not there).
pub fn read() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let btime = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
    // SAFETY: sysconf and getrlimit only read process-wide values into plain data.
    let (ticks, page, max_fds) = unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur
        } else {
            0
        };
        (
            libc::sysconf(libc::_SC_CLK_TCK) as f64,
            libc::sysconf(libc::_SC_PAGESIZE) as u64,
            max,
        )
    };
    let (cpu_seconds, virtual_bytes, resident_bytes, start_time) =
        parse_stat(&stat, ticks.max(1.0), page, btime)?;
    let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    Some(ProcessStats {
        cpu_seconds,
        virtual_bytes,
        resident_bytes,
        start_time,
        open_fds,
        max_fds,
    })
}

/// The metrics as OpenMetrics text (families without the engine's prefix, as upstream).
pub fn render(p: &ProcessStats) -> String {
    let mut s = String::new();
    let mut family = |name: &str, kind: &str, help: &str, sample: &str, v: String| {
        s.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{sample} {v}\n"
        ));
    };
    family(
        "process_cpu_seconds",
        "counter",
        "Total user and system CPU time spent in seconds.",
        "process_cpu_seconds_total",
        format!("{:?}", p.cpu_seconds),
    );
    family(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        "process_virtual_memory_bytes",
        p.virtual_bytes.to_string(),
    );
    family(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        "process_resident_memory_bytes",
        p.resident_bytes.to_string(),
    );
    family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        "process_start_time_seconds",
        format!("{:?}", p.start_time),
    );
    family(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        "process_open_fds",
        p.open_fds.to_string(),
    );
    family(
        "process_max_fds",
        "gauge",
        "Maximum number of open file descriptors.",
        "process_max_fds",
        p.max_fds.to_string(),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_by_position() {
        // A command name with a space and a parenthesis, as /proc allows.
        let stat = "1234 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 8 0 1000 4096000 300 \
                    18446744073709551615";
        let (cpu, vsize, rss, start) = parse_stat(stat, 100.0, 4096, 1_700_000_000.0).unwrap();
        assert_eq!(cpu, 3.0);
        assert_eq!(vsize, 4_096_000);
        assert_eq!(rss, 300 * 4096);
        assert_eq!(start, 1_700_000_010.0);
        assert!(parse_stat("garbage", 100.0, 4096, 0.0).is_none());
        let me = read().unwrap();
        assert!(me.resident_bytes > 0 && me.open_fds > 0 && me.max_fds >= me.open_fds);
        let text = render(&me);
        assert!(text.contains("# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total "));
    }
}
