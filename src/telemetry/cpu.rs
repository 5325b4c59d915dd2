//! CPU time: of the calling thread (for a benchmark's per-core rates), and of every thread of
//! this process or another by name (for soak reports: which thread is busy).

use std::collections::BTreeMap;
use std::path::Path;

/// CPU seconds (user + system) the calling thread has used.
pub fn thread_cpu_seconds() -> f64 {
    clock_seconds(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU seconds (user + system) the whole process has used.
pub fn process_cpu_seconds() -> f64 {
    clock_seconds(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn clock_seconds(clock: libc::clockid_t) -> f64 {
    // SAFETY: clock_gettime fills the zeroed timespec.
    let t = unsafe {
        let mut t: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(clock, &mut t);
        t
    };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// CPU seconds per thread name of this process (threads of the same name summed), read from
/// `/proc/self/task/*/stat`. Empty where `/proc` cannot be read.
pub fn threads_cpu_seconds() -> BTreeMap<String, f64> {
    threads_in(Path::new("/proc/self/task")).unwrap_or_default()
}

/// CPU seconds per thread name of process `pid` (threads of the same name summed), read from
/// `/proc/PID/task/*/stat`: for a soak report watching engines from outside. `None` where
/// the process's task list cannot be read (it exited, or `/proc` is not mounted).
pub fn threads_cpu_seconds_of(pid: u32) -> Option<BTreeMap<String, f64>> {
    threads_in(&Path::new("/proc").join(pid.to_string()).join("task"))
}

fn threads_in(task_dir: &Path) -> Option<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    for e in std::fs::read_dir(task_dir).ok()?.flatten() {
        // A thread that exited between the listing and this read is skipped.
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        if let Some((name, secs)) = parse_stat(&stat, ticks) {
            *out.entry(name).or_insert(0.0) += secs;
        }
    }
    Some(out)
}

/// (comm, utime + stime in seconds) of one `/proc/.../stat` line. The name is between the
/// first '(' and the last ')' (it may hold spaces and parentheses).
fn parse_stat(stat: &str, ticks: f64) -> Option<(String, f64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    // Fields after the name: state is field 3; utime and stime are fields 14 and 15.
    let rest: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    let utime: f64 = rest.get(11)?.parse().ok()?;
    let stime: f64 = rest.get(12)?.parse().ok()?;
    Some((name, (utime + stime) / ticks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_with_odd_names() {
        let line = "1234 (recv (pol) 0) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 0 0";
        let (name, s) = parse_stat(line, 100.0).unwrap();
        assert_eq!(name, "recv (pol) 0");
        assert!((s - 3.0).abs() < 1e-12, "{s}");
        assert!(parse_stat("garbage", 100.0).is_none());
    }

    #[test]
    fn own_threads_are_listed() {
        let h = std::thread::Builder::new()
            .name("cpu-probe".into())
            .spawn(|| {
                let t = threads_cpu_seconds();
                assert!(t.contains_key("cpu-probe"), "{t:?}");
                thread_cpu_seconds()
            })
            .unwrap();
        assert!(h.join().unwrap() >= 0.0);
        assert!(process_cpu_seconds() > 0.0);
        let me = threads_cpu_seconds_of(std::process::id()).expect("own task list");
        assert!(!me.is_empty(), "{me:?}");
        // Pids are below 2^22 on Linux: this one never exists.
        assert!(threads_cpu_seconds_of(u32::MAX).is_none());
    }
}
