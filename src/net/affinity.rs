//! Thread placement: core lists as katgpucbf writes them (`--recv-affinity 0,2,4-7`) and
//! pinning the calling thread to one core (`sched_setaffinity`).

use std::fmt;

/// Why a core list or a pin was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AffinityError {
    /// The list is empty or has an empty item (`1,,2`).
    #[error("empty core list item in {0:?}: give cores as N, N-M or N,M,...")]
    Empty(String),
    /// An item is not a core number or a range.
    #[error("{item:?} in core list {list:?} is not a core number or a range N-M")]
    NotACore {
        /// The whole list.
        list: String,
        /// The offending item.
        item: String,
    },
    /// A range runs backwards (`7-4`).
    #[error("core range {0:?} runs backwards")]
    Backwards(String),
    /// A core this process may not run on (offline, outside its cpuset, or too large).
    #[error("core {core} is not available to this process (available: {available})")]
    Unavailable {
        /// The core asked for.
        core: usize,
        /// The cores the process may use, as a list.
        available: CoreList,
    },
    /// The kernel refused the call.
    #[error("pinning a thread to core {core}: {error}")]
    Os {
        /// The core asked for.
        core: usize,
        /// What the kernel said.
        error: String,
    },
}

/// A list of cores, displayed compactly (`0-3,8`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CoreList(pub Vec<usize>);

impl fmt::Display for CoreList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let v = &self.0;
        let mut i = 0;
        while i < v.len() {
            let mut j = i;
            while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
                j += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if j > i {
                write!(f, "{}-{}", v[i], v[j])?;
            } else {
                write!(f, "{}", v[i])?;
            }
            i = j + 1;
        }
        Ok(())
    }
}

/// Parses `N`, `N-M` and comma lists of them, in the order given (repeats kept: two threads
/// may share a core). Whitespace around items is ignored.
pub fn parse_cores(list: &str) -> Result<Vec<usize>, AffinityError> {
    let mut out = Vec::new();
    if list.trim().is_empty() {
        return Err(AffinityError::Empty(list.to_string()));
    }
    for item in list.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(AffinityError::Empty(list.to_string()));
        }
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| AffinityError::NotACore {
                    list: list.to_string(),
                    item: item.to_string(),
                })
        };
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if b < a {
                    return Err(AffinityError::Backwards(item.to_string()));
                }
                out.extend(a..=b);
            }
            None => out.push(num(item)?),
        }
    }
    Ok(out)
}

/// The cores this process may run on (its affinity mask).
pub fn available_cores() -> CoreList {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return CoreList::default();
        }
        CoreList(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect(),
        )
    }
}

/// The cores a thread of this process may be pinned to: its cgroup's cpuset (what a
/// container was given: `docker --cpuset-cpus`), which can be more than the process's own
/// mask — katsdpcontroller starts an engine under `taskset -c CORE` and gives its receive
/// and send threads other cores of the container. Without a readable cpuset, the online
/// cores; the process's mask is always included.
pub fn permitted_cores() -> CoreList {
    let mut cores = available_cores().0;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        });
    let candidates = [
        cgroup.map(|p| {
            format!(
                "/sys/fs/cgroup{}/cpuset.cpus.effective",
                p.trim_end_matches('/')
            )
        }),
        Some("/sys/fs/cgroup/cpuset.cpus.effective".to_string()),
        Some("/sys/devices/system/cpu/online".to_string()),
    ];
    let listed = candidates.iter().flatten().find_map(|f| {
        let t = std::fs::read_to_string(f).ok()?;
        parse_cores(t.trim()).ok().filter(|v| !v.is_empty())
    });
    cores.extend(listed.unwrap_or_default());
    cores.sort_unstable();
    cores.dedup();
    CoreList(cores)
}

/// Checks that every core of `cores` may be given to a thread of this process
/// ([`permitted_cores`]).
pub fn check_cores(cores: &[usize]) -> Result<(), AffinityError> {
    let available = permitted_cores();
    match cores.iter().find(|c| !available.0.contains(c)) {
        Some(&core) => Err(AffinityError::Unavailable { core, available }),
        None => Ok(()),
    }
}

/// Pins the calling thread to `core`.
pub fn pin_current_thread(core: usize) -> Result<(), AffinityError> {
    set_current_thread_cores(&[core])
}

/// Restricts the calling thread to `cores` (threads and processes it starts afterwards
/// inherit the mask): where the array keeps its engines' unpinned threads, off the cores
/// its receive and send threads are pinned to.
pub fn set_current_thread_cores(cores: &[usize]) -> Result<(), AffinityError> {
    check_cores(cores)?;
    let Some(&first) = cores.first() else {
        return Err(AffinityError::Empty(String::new()));
    };
    // SAFETY: cpu_set_t is plain data; the call gets a valid pointer and size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(AffinityError::Os {
                core: first,
                error: std::io::Error::last_os_error().to_string(),
            });
        }
    }
    Ok(())
}

/// Pins the calling thread to a core while it lives, then restores the thread's previous
/// mask (for a benchmark that pins the thread it runs on).
pub struct PinGuard(Option<libc::cpu_set_t>);

impl PinGuard {
    /// Pins to `core` (nothing for `None`).
    pub fn new(core: Option<usize>) -> Result<Self, AffinityError> {
        let Some(core) = core else {
            return Ok(PinGuard(None));
        };
        // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
        let old = unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old) != 0 {
                return Err(AffinityError::Os {
                    core,
                    error: std::io::Error::last_os_error().to_string(),
                });
            }
            old
        };
        pin_current_thread(core)?;
        Ok(PinGuard(Some(old)))
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            // SAFETY: restores the mask read in `new`.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), old) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_lists_parse_as_katgpucbf_writes_them() {
        assert_eq!(parse_cores("3").unwrap(), vec![3]);
        assert_eq!(parse_cores("0,2, 4-6").unwrap(), vec![0, 2, 4, 5, 6]);
        assert_eq!(parse_cores("1,1").unwrap(), vec![1, 1]);
        assert!(matches!(parse_cores(""), Err(AffinityError::Empty(_))));
        assert!(matches!(parse_cores("1,,2"), Err(AffinityError::Empty(_))));
        assert!(matches!(
            parse_cores("x"),
            Err(AffinityError::NotACore { .. })
        ));
        assert!(matches!(
            parse_cores("-1"),
            Err(AffinityError::NotACore { .. })
        ));
        assert!(matches!(
            parse_cores("7-4"),
            Err(AffinityError::Backwards(_))
        ));
        assert_eq!(
            CoreList(vec![0, 1, 2, 3, 8, 10, 11]).to_string(),
            "0-3,8,10-11"
        );
    }

    #[test]
    fn unknown_core_is_refused_and_a_known_one_pins() {
        let avail = available_cores();
        assert!(!avail.0.is_empty());
        let err = check_cores(&[100_000]).unwrap_err();
        assert!(
            err.to_string().contains("core 100000 is not available"),
            "{err}"
        );
        // Pin a scratch thread (the test harness's own thread keeps its mask).
        let core = avail.0[0];
        std::thread::spawn(move || {
            pin_current_thread(core).unwrap();
            assert_eq!(available_cores().0, vec![core]);
        })
        .join()
        .unwrap();
    }

    /// A set of cores becomes the thread's mask, and what it then starts inherits it; an
    /// empty set or an unknown core is refused with the mask unchanged.
    #[test]
    fn a_thread_takes_a_set_of_cores_and_passes_it_on() {
        let avail = available_cores();
        let set: Vec<usize> = avail.0.iter().copied().take(2).collect();
        std::thread::spawn(move || {
            let before = available_cores();
            assert!(matches!(
                set_current_thread_cores(&[]),
                Err(AffinityError::Empty(_))
            ));
            assert!(set_current_thread_cores(&[set[0], 100_000]).is_err());
            assert_eq!(available_cores(), before);
            set_current_thread_cores(&set).unwrap();
            assert_eq!(available_cores().0, set);
            let inherited = std::thread::spawn(available_cores).join().unwrap();
            assert_eq!(inherited.0, set);
        })
        .join()
        .unwrap();
    }
}
