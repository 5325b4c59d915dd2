//! The receive sensors of fgpu and xbgpu (katgpucbf's `recv.py`; katgpucbf-compat.md §3.2):
//! per input (`input0.`/`input1.` on fgpu, no prefix on xbgpu) `rx.timestamp`,
//! `rx.unixtime` and `rx.missing-unixtime`, and `rx.device-status` over them.
//!
//! A chunk that brought heaps sets the first two (nominal, timestamped with the chunk's data
//! time); a chunk with heaps missing sets `rx.missing-unixtime` (error). Without a further
//! update for T_rx = max(1 s, 10 chunks) of wall time, the first two revert to error and the
//! third to nominal, timestamped T_rx after their last reading, as upstream's timers do: a
//! watchdog thread ([`RxSensors::spawn_watchdog`]) checks that while no data arrive.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::control::sampling::float_repr;
use crate::control::{SensorSet, SensorType, Status};

/// The aggregate over the receive sensors.
pub const RX_DEVICE_STATUS: &str = "rx.device-status";

/// What one input's timers need: when (wall clock) and for which data time (UNIX) its
/// sensors were last set.
#[derive(Debug, Clone, Copy, Default)]
struct Watch {
    received: Option<(Instant, f64)>,
    missing: Option<(Instant, f64)>,
}

/// The receive sensors of one engine, with their timers.
#[derive(Debug)]
pub struct RxSensors {
    sensors: SensorSet,
    prefixes: Vec<String>,
    sync_time: f64,
    adc_rate: f64,
    t_rx: f64,
    watch: Mutex<Vec<Watch>>,
}

impl RxSensors {
    /// Adds the sensors for inputs with `prefixes` (`["input0.", "input1."]`, or `[""]`)
    /// to `sensors`, at their initial values (`rx.timestamp` and `rx.unixtime` in error, so
    /// `rx.device-status` starts degraded), all rate-limited (`auto` = event-rate 1 s).
    /// Chunk timestamps become UNIX times with `sync_time` and `adc_rate`; a chunk spans
    /// `chunk_ticks` ADC samples.
    pub fn add(
        sensors: &SensorSet,
        prefixes: &[&str],
        sync_time: f64,
        adc_rate: f64,
        chunk_ticks: u64,
    ) -> Arc<Self> {
        for p in prefixes {
            for (k, d, units, t, v, st) in [
                (
                    "rx.timestamp",
                    "The timestamp (in samples) of the last chunk of data received",
                    "",
                    SensorType::Integer,
                    "-1",
                    Status::Error,
                ),
                (
                    "rx.unixtime",
                    "The timestamp (in UNIX time) of the last chunk of data received",
                    "s",
                    SensorType::Timestamp,
                    "-1.0",
                    Status::Error,
                ),
                (
                    "rx.missing-unixtime",
                    "The timestamp (in UNIX time) when missing data was last detected",
                    "s",
                    SensorType::Timestamp,
                    "-1.0",
                    Status::Nominal,
                ),
            ] {
                let name = format!("{p}{k}");
                sensors.add(&name, d, units, t, v);
                sensors.rate_limit(&name, 1.0);
                sensors.set(&name, v, st);
            }
        }
        sensors.add(
            RX_DEVICE_STATUS,
            "Whether the engine is receiving data without loss",
            "",
            SensorType::Discrete(vec!["ok".into(), "degraded".into(), "fail".into()]),
            "degraded",
        );
        sensors.set(RX_DEVICE_STATUS, "degraded", Status::Warn);
        let adc_rate = if adc_rate > 0.0 { adc_rate } else { 1.0 };
        Arc::new(RxSensors {
            sensors: sensors.clone(),
            prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
            sync_time,
            adc_rate,
            t_rx: (10.0 * chunk_ticks as f64 / adc_rate).max(1.0),
            watch: Mutex::new(vec![Watch::default(); prefixes.len()]),
        })
    }

    /// T_rx in seconds: how long a reading holds without an update.
    pub fn t_rx(&self) -> f64 {
        self.t_rx
    }

    /// The UNIX time of ADC timestamp `ts`.
    pub fn unix(&self, ts: u64) -> f64 {
        self.sync_time + ts as f64 / self.adc_rate
    }

    /// Input `input`'s chunk starting at ADC timestamp `start`, seen at wall time `now`:
    /// `heaps` whether it brought any heap, `lost` whether heaps went missing.
    pub fn chunk(&self, input: usize, start: u64, heaps: bool, lost: bool, now: Instant) {
        let Some(p) = self.prefixes.get(input) else {
            return;
        };
        let unix = self.unix(start);
        let s = &self.sensors;
        let Ok(mut watch) = self.watch.lock() else {
            return;
        };
        if heaps {
            s.set_at(&format!("{p}rx.timestamp"), start, Status::Nominal, unix);
            let v = float_repr(unix);
            s.set_at(&format!("{p}rx.unixtime"), v, Status::Nominal, unix);
            watch[input].received = Some((now, unix));
        }
        if lost {
            let v = float_repr(unix);
            s.set_at(&format!("{p}rx.missing-unixtime"), v, Status::Error, unix);
            watch[input].missing = Some((now, unix));
        }
        drop(watch);
        self.aggregate();
    }

    /// Reverts the readings not updated for T_rx by wall time `now`: `rx.timestamp` and
    /// `rx.unixtime` to error, `rx.missing-unixtime` to nominal, each timestamped T_rx after
    /// its last reading (values kept).
    pub fn expire(&self, now: Instant) {
        let t_rx = Duration::from_secs_f64(self.t_rx);
        let s = &self.sensors;
        let Ok(mut watch) = self.watch.lock() else {
            return;
        };
        let mut changed = false;
        for (p, w) in self.prefixes.iter().zip(watch.iter_mut()) {
            let keep = |name: &str| s.get(name).map(|x| x.value).unwrap_or_default();
            if let Some((at, unix)) = w.received {
                if now.saturating_duration_since(at) >= t_rx {
                    for k in ["rx.timestamp", "rx.unixtime"] {
                        let name = format!("{p}{k}");
                        s.set_at(&name, keep(&name), Status::Error, unix + self.t_rx);
                    }
                    w.received = None;
                    changed = true;
                }
            }
            if let Some((at, unix)) = w.missing {
                if now.saturating_duration_since(at) >= t_rx {
                    let name = format!("{p}rx.missing-unixtime");
                    s.set_at(&name, keep(&name), Status::Nominal, unix + self.t_rx);
                    w.missing = None;
                    changed = true;
                }
            }
        }
        drop(watch);
        if changed {
            self.aggregate();
        }
    }

    /// Sets `rx.device-status` (ok/nominal while every input's `rx.timestamp` and
    /// `rx.missing-unixtime` are nominal, else degraded/warn) when that changes it.
    fn aggregate(&self) {
        let s = &self.sensors;
        let nominal = |n: String| s.get(&n).is_some_and(|x| x.status == Status::Nominal);
        let ok = self.prefixes.iter().all(|p| {
            nominal(format!("{p}rx.timestamp")) && nominal(format!("{p}rx.missing-unixtime"))
        });
        let (v, st) = if ok {
            ("ok", Status::Nominal)
        } else {
            ("degraded", Status::Warn)
        };
        if s.get(RX_DEVICE_STATUS)
            .is_some_and(|x| x.value != v || x.status != st)
        {
            s.set(RX_DEVICE_STATUS, v, st);
        }
    }

    /// Starts the thread that reverts stale readings ([`RxSensors::expire`]) ten times per
    /// T_rx; it ends once `this` is dropped.
    pub fn spawn_watchdog(this: &Arc<Self>) -> std::io::Result<()> {
        let weak: Weak<Self> = Arc::downgrade(this);
        let tick = Duration::from_secs_f64(this.t_rx / 10.0);
        std::thread::Builder::new()
            .name("rx-sensors".into())
            .spawn(move || loop {
                std::thread::sleep(tick);
                match weak.upgrade() {
                    Some(rx) => rx.expire(Instant::now()),
                    None => return,
                }
            })
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(s: &SensorSet, n: &str) -> (String, Status, f64) {
        let x = s.get(n).unwrap();
        (x.value, x.status, x.timestamp)
    }

    /// Upstream's lifecycle on a wall clock given to the calls: error until data, nominal
    /// with the chunk's data time, loss flagged then cleared T_rx later, error again T_rx
    /// after the last chunk, timestamped with the data time plus T_rx.
    #[test]
    fn rx_sensors_follow_data_and_revert_after_t_rx() {
        let s = SensorSet::default();
        // 1000 samples/s, chunks of 200 samples: T_rx = max(1, 10 × 0.2) = 2 s.
        let rx = RxSensors::add(&s, &["input0.", "input1."], 100.0, 1000.0, 200);
        assert_eq!(rx.t_rx(), 2.0);
        assert_eq!(status(&s, "input0.rx.timestamp").1, Status::Error);
        assert_eq!(status(&s, RX_DEVICE_STATUS).0, "degraded");
        let t0 = Instant::now();
        rx.chunk(0, 4000, true, false, t0);
        assert_eq!(
            status(&s, "input0.rx.timestamp"),
            ("4000".into(), Status::Nominal, 104.0)
        );
        assert_eq!(status(&s, "input0.rx.unixtime").0, "104.0");
        // input1 has no data yet: still degraded.
        assert_eq!(status(&s, RX_DEVICE_STATUS).1, Status::Warn);
        rx.chunk(1, 4000, true, false, t0);
        assert_eq!(
            status(&s, RX_DEVICE_STATUS),
            ("ok".into(), Status::Nominal, status(&s, RX_DEVICE_STATUS).2)
        );
        // A loss on input1: error with the chunk's time, degraded.
        rx.chunk(1, 4200, true, true, t0 + Duration::from_secs(1));
        assert_eq!(
            status(&s, "input1.rx.missing-unixtime"),
            ("104.2".into(), Status::Error, 104.2)
        );
        assert_eq!(status(&s, RX_DEVICE_STATUS).0, "degraded");
        // input0 keeps receiving; 1.9 s after input1's loss nothing reverts yet.
        rx.chunk(0, 4400, true, false, t0 + Duration::from_millis(2500));
        rx.expire(t0 + Duration::from_millis(2900));
        assert_eq!(status(&s, "input1.rx.missing-unixtime").1, Status::Error);
        assert_eq!(status(&s, "input1.rx.timestamp").1, Status::Nominal);
        // 2 s after input1's last chunk: its loss clears (ts = 104.2 + 2), its rx.timestamp
        // reverts to error (keeping the value, ts = data time + 2); input0 stays nominal.
        rx.expire(t0 + Duration::from_secs(3));
        assert_eq!(
            status(&s, "input1.rx.missing-unixtime"),
            ("104.2".into(), Status::Nominal, 106.2)
        );
        assert_eq!(
            status(&s, "input1.rx.timestamp"),
            ("4200".into(), Status::Error, 106.2)
        );
        assert_eq!(status(&s, "input1.rx.unixtime").1, Status::Error);
        assert_eq!(status(&s, "input0.rx.timestamp").1, Status::Nominal);
        assert_eq!(status(&s, RX_DEVICE_STATUS).0, "degraded");
        // Data again: nominal, ok.
        rx.chunk(1, 9000, true, false, t0 + Duration::from_secs(4));
        assert_eq!(status(&s, "input1.rx.timestamp").1, Status::Nominal);
        assert_eq!(status(&s, RX_DEVICE_STATUS).0, "ok");
        // A chunk without heaps does not refresh rx.timestamp.
        rx.chunk(0, 9000, false, false, t0 + Duration::from_secs(4));
        rx.expire(t0 + Duration::from_millis(4600));
        assert_eq!(status(&s, "input0.rx.timestamp").0, "4400");
        assert_eq!(status(&s, "input0.rx.timestamp").1, Status::Error);
        // Unknown input index: ignored.
        rx.chunk(7, 1, true, true, t0);
    }
}
