//! The sensors every katgpucbf engine has (katgpucbf-compat.md §3.2): `device-status`, an
//! aggregate of every other sensor's status, and the kernel clock's NTP state
//! (`time.esterror`, `time.maxerror`, `time.state`, `time.synchronised`) read with adjtimex
//! every 10 s; and `tx.unreachable-packets` (ours: packets dropped because their
//! destination was unreachable, warn while it rises, which makes `device-status` degraded).

use std::time::Duration;

use super::sensors::{SensorSet, SensorType, Status};

pub use super::sensors::{aggregate, is_bad, DEVICE_STATUS};

/// One reading of the kernel clock's state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockState {
    /// Estimated error, seconds.
    pub esterror: f64,
    /// Maximum error, seconds.
    pub maxerror: f64,
    /// adjtimex's return value: 0 ok, 1 ins, 2 del, 3 oop, 4 wait, 5 error.
    pub state: i32,
}

/// Reads the kernel clock's state (`None` where adjtimex fails).
pub fn read_clock() -> Option<ClockState> {
    // SAFETY: timex is plain data; modes 0 only reads.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a timex.
    let state = unsafe { libc::adjtimex(&mut tx) };
    if state < 0 {
        return None;
    }
    Some(ClockState {
        esterror: tx.esterror as f64 * 1e-6,
        maxerror: tx.maxerror as f64 * 1e-6,
        state,
    })
}

const STATES: [&str; 6] = ["ok", "ins", "del", "oop", "wait", "error"];

/// The four time sensors' (value, status) for a reading, as upstream grades them:
/// esterror nominal below 1 ms, warn below 5 ms; maxerror nominal below 10 ms, warn below
/// 100 ms; state ok nominal, error error, others warn; synchronised unless one is error.
pub fn grade(c: ClockState) -> [(String, Status); 4] {
    let band = |v: f64, nominal: f64, warn: f64| {
        if (0.0..nominal).contains(&v) {
            Status::Nominal
        } else if (0.0..warn).contains(&v) {
            Status::Warn
        } else {
            Status::Error
        }
    };
    let est = band(c.esterror, 1e-3, 5e-3);
    let max = band(c.maxerror, 10e-3, 0.1);
    let name = STATES.get(c.state as usize).copied().unwrap_or("error");
    let st = match name {
        "ok" => Status::Nominal,
        "error" => Status::Error,
        _ => Status::Warn,
    };
    let sync = ![est, max, st].contains(&Status::Error);
    [
        (super::sampling::float_repr(c.esterror), est),
        (super::sampling::float_repr(c.maxerror), max),
        (name.to_string(), st),
        (
            if sync { "1" } else { "0" }.to_string(),
            if sync { Status::Nominal } else { Status::Error },
        ),
    ]
}

/// Adds the common sensors to `s`, read from the clock now and then every 10 s by the
/// process's one clock thread (which ends once no set is left).
pub fn add_common_sensors(s: &SensorSet) {
    s.add(
        DEVICE_STATUS,
        "Overall engine health",
        "",
        SensorType::Discrete(vec!["ok".into(), "degraded".into(), "fail".into()]),
        "ok",
    );
    s.set(DEVICE_STATUS, "ok", Status::Nominal);
    s.add(
        "time.esterror",
        "Estimated time synchronisation error",
        "s",
        SensorType::Float,
        "0.0",
    );
    s.add(
        "time.maxerror",
        "Maximum time synchronisation error",
        "s",
        SensorType::Float,
        "0.0",
    );
    s.add(
        "time.state",
        "Kernel timer state",
        "",
        SensorType::Discrete(STATES.iter().map(|x| x.to_string()).collect()),
        "ok",
    );
    s.add(
        "time.synchronised",
        "Whether the host clock is synchronised within tolerances",
        "",
        SensorType::Boolean,
        "0",
    );
    s.add(
        UNREACHABLE_PACKETS,
        "Packets dropped because their destination was unreachable (warn while it rises)",
        "",
        SensorType::Integer,
        "0",
    );
    s.set(
        UNREACHABLE_PACKETS,
        crate::telemetry::faults::unreachable_packets().to_string(),
        Status::Nominal,
    );
    // Valid from the start; then the one clock thread of the process updates every set.
    update_time_sensors(s, read_clock());
    let mut sets = CLOCK_WATCHED.lock().unwrap_or_else(|e| e.into_inner());
    sets.push(s.downgrade());
    if sets.len() == 1 {
        let _ = std::thread::Builder::new()
            .name("time-sensors".into())
            .spawn(clock_loop);
    }
}

type WeakSet = std::sync::Weak<std::sync::Mutex<super::sensors::Inner>>;

/// The sensor sets the clock thread updates (weak: a dropped set leaves the list).
static CLOCK_WATCHED: std::sync::Mutex<Vec<WeakSet>> = std::sync::Mutex::new(Vec::new());

/// Every 10 s: one clock reading for every live sensor set; ends when none is left (the
/// next set added starts it again).
fn clock_loop() {
    loop {
        std::thread::sleep(Duration::from_secs(10));
        let mut sets = CLOCK_WATCHED.lock().unwrap_or_else(|e| e.into_inner());
        let live: Vec<SensorSet> = sets.iter().filter_map(SensorSet::upgrade).collect();
        sets.retain(|w| w.strong_count() > 0);
        if live.is_empty() {
            sets.clear();
            return;
        }
        drop(sets);
        let clock = read_clock();
        let unreachable = crate::telemetry::faults::unreachable_packets();
        for set in &live {
            update_time_sensors(set, clock);
            update_unreachable(set, unreachable);
        }
    }
}

/// The sensor counting packets dropped for unreachable destinations.
pub const UNREACHABLE_PACKETS: &str = "tx.unreachable-packets";

/// Sets `tx.unreachable-packets` to the process's count `total`: warn when it rose since
/// the last update (10 s earlier), nominal once it stopped rising.
pub fn update_unreachable(s: &SensorSet, total: u64) {
    let Some(cur) = s.get(UNREACHABLE_PACKETS) else {
        return;
    };
    let prev: u64 = cur.value.parse().unwrap_or(0);
    let status = if total > prev {
        Status::Warn
    } else {
        Status::Nominal
    };
    if total != prev || cur.status != status {
        s.set(UNREACHABLE_PACKETS, total.to_string(), status);
    }
}

/// Sets the time sensors from one clock reading (`None`: adjtimex unavailable, all
/// inactive as upstream).
pub fn update_time_sensors(s: &SensorSet, c: Option<ClockState>) {
    let names = [
        "time.esterror",
        "time.maxerror",
        "time.state",
        "time.synchronised",
    ];
    match c {
        Some(c) => {
            for (n, (v, st)) in names.iter().zip(grade(c)) {
                s.set(n, v, st);
            }
        }
        None => {
            for n in names {
                let v = s.get(n).map(|x| x.value).unwrap_or_default();
                s.set(n, v, Status::Inactive);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_packets_warn_while_rising_and_degrade_device_status() {
        let s = SensorSet::default();
        add_common_sensors(&s);
        // a synchronised clock, so that only the new sensor can degrade the device
        let good = ClockState {
            esterror: 0.0,
            maxerror: 0.0,
            state: 0,
        };
        update_time_sensors(&s, Some(good));
        assert_eq!(s.get(DEVICE_STATUS).unwrap().value, "ok");
        let base: u64 = s.get(UNREACHABLE_PACKETS).unwrap().value.parse().unwrap();
        update_unreachable(&s, base + 7);
        let v = s.get(UNREACHABLE_PACKETS).unwrap();
        assert_eq!(
            (v.value.as_str(), v.status),
            (&*(base + 7).to_string(), Status::Warn)
        );
        assert_eq!(s.get(DEVICE_STATUS).unwrap().value, "degraded");
        update_unreachable(&s, base + 7);
        let v = s.get(UNREACHABLE_PACKETS).unwrap();
        assert_eq!(v.status, Status::Nominal);
        assert_eq!(s.get(DEVICE_STATUS).unwrap().value, "ok");
    }

    #[test]
    fn clock_states_are_graded_as_upstream() {
        let g = grade(ClockState {
            esterror: 1e-4,
            maxerror: 2e-3,
            state: 0,
        });
        assert_eq!(g[0], ("0.0001".to_string(), Status::Nominal));
        assert_eq!(g[2], ("ok".to_string(), Status::Nominal));
        assert_eq!(g[3], ("1".to_string(), Status::Nominal));
        let g = grade(ClockState {
            esterror: 2e-3,
            maxerror: 0.05,
            state: 4,
        });
        assert_eq!(
            [g[0].1, g[1].1, g[2].1, g[3].1],
            [Status::Warn, Status::Warn, Status::Warn, Status::Nominal]
        );
        let g = grade(ClockState {
            esterror: 0.0,
            maxerror: 16.0,
            state: 5,
        });
        assert_eq!(g[2], ("error".to_string(), Status::Error));
        assert_eq!(g[3], ("0".to_string(), Status::Error));
    }

    #[test]
    fn device_status_follows_the_worst_sensor() {
        let s = SensorSet::default();
        add_common_sensors(&s);
        s.add("x", "", "", SensorType::Integer, "0");
        update_time_sensors(
            &s,
            Some(ClockState {
                esterror: 0.0,
                maxerror: 0.0,
                state: 0,
            }),
        );
        s.set("x", 1, Status::Nominal);
        assert_eq!(s.get(DEVICE_STATUS).unwrap().value, "ok");
        s.set("x", 2, Status::Error);
        let d = s.get(DEVICE_STATUS).unwrap();
        assert_eq!((d.value.as_str(), d.status), ("degraded", Status::Warn));
        s.set("x", 3, Status::Nominal);
        assert_eq!(s.get(DEVICE_STATUS).unwrap().value, "ok");
        update_time_sensors(&s, None);
        assert_eq!(s.get("time.state").unwrap().status, Status::Inactive);
        assert_eq!(s.get(DEVICE_STATUS).unwrap().value, "degraded");
    }
}
