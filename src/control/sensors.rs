//! katcp sensors: a shared, thread-safe set that engines update and the server reports
//! (`?sensor-list`, `?sensor-value`). Which sensors each engine has, their types and initial
//! values are in the ICD, section 11, and katgpucbf-compat.md, sections 3.2 to 3.5.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// A sensor's katcp type, as `?sensor-list` reports it. It describes how the value string
/// is to be read; [`SensorSet::set`] does not check values against it.
#[derive(Debug, Clone, PartialEq)]
pub enum SensorType {
    /// A decimal integer.
    Integer,
    /// A floating-point number.
    Float,
    /// `1` or `0`.
    Boolean,
    /// Free text.
    String,
    /// Seconds since the UNIX epoch, as a float.
    Timestamp,
    /// One of the listed values (e.g. `ok`, `degraded`, `fail`); `?sensor-list` lists them
    /// after the type.
    Discrete(Vec<String>),
}

impl SensorType {
    /// The katcp type name (`integer`, `float`, `boolean`, `string`, `timestamp`,
    /// `discrete`).
    pub fn name(&self) -> &'static str {
        match self {
            SensorType::Integer => "integer",
            SensorType::Float => "float",
            SensorType::Boolean => "boolean",
            SensorType::String => "string",
            SensorType::Timestamp => "timestamp",
            SensorType::Discrete(_) => "discrete",
        }
    }
}

/// A sensor reading's status (katcp v5, and aiokatcp's `unreachable` and `inactive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// No valid reading yet: every sensor starts here ([`SensorSet::add`]).
    Unknown,
    /// The value is within its normal range.
    Nominal,
    /// The value is outside its normal range, but the device still works.
    Warn,
    /// The value shows that the device is not working as it should.
    Error,
    /// Taking the reading failed, so the value is not valid.
    Failure,
    /// The sensor cannot be reached.
    Unreachable,
    /// The sensor is not in use (e.g. the clock's state cannot be read).
    Inactive,
}

impl Status {
    /// The katcp status name (`unknown`, `nominal`, `warn`, `error`, `failure`,
    /// `unreachable`, `inactive`).
    pub fn name(self) -> &'static str {
        match self {
            Status::Unknown => "unknown",
            Status::Nominal => "nominal",
            Status::Warn => "warn",
            Status::Error => "error",
            Status::Failure => "failure",
            Status::Unreachable => "unreachable",
            Status::Inactive => "inactive",
        }
    }
}

/// One sensor: its description and its latest reading.
#[derive(Debug, Clone)]
pub struct Sensor {
    /// The katcp name (`input0.dig-rms-dbfs`): unique within a [`SensorSet`].
    pub name: String,
    /// One line for `?sensor-list`.
    pub description: String,
    /// Units for `?sensor-list` (`s`, `Hz`, `dBFS`); empty when the value has none.
    pub units: String,
    /// How to read [`Sensor::value`].
    pub stype: SensorType,
    /// The latest value, already formatted as katcp sends it.
    pub value: String,
    /// The latest reading's status.
    pub status: Status,
    /// When the latest reading was taken (or the sensor added): seconds since the UNIX
    /// epoch, wall clock.
    pub timestamp: f64,
    /// For a "rate-limited" sensor, the shortest interval in seconds of its `auto`
    /// sampling ([`SensorSet::rate_limit`]); `None`: `auto` reports every assignment.
    pub auto_rate: Option<f64>,
}

/// The wall-clock time in seconds since the UNIX epoch (0.0 if the clock is before 1970),
/// as katcp timestamps use it.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The aggregate sensor's name.
pub const DEVICE_STATUS: &str = "device-status";

/// Statuses that make `device-status` degraded (unknown counts as fine, as upstream).
pub fn is_bad(s: Status) -> bool {
    !matches!(s, Status::Unknown | Status::Nominal)
}

/// `device-status` for the worst status among the other sensors: ok/nominal, or
/// degraded/warn (never fail, as upstream).
pub fn aggregate(any_bad: bool) -> (&'static str, Status) {
    if any_bad {
        ("degraded", Status::Warn)
    } else {
        ("ok", Status::Nominal)
    }
}

/// A function told of every sensor reading as it is set ([`SensorSet::listen`]).
type Listener = Box<dyn Fn(&Sensor) + Send>;

/// The sensors and their listeners (behind [`SensorSet`]'s lock).
#[derive(Default)]
pub struct Inner {
    map: BTreeMap<String, Sensor>,
    listeners: Vec<(u64, Listener)>,
    next_listener: u64,
}

impl Inner {
    /// Sets `device-status` (where the set has one) from every other sensor's status, when
    /// that changes its reading (timestamped with the change).
    fn aggregate(&mut self, timestamp: f64) {
        if !self.map.contains_key(DEVICE_STATUS) {
            return;
        }
        let bad = self
            .map
            .values()
            .any(|s| s.name != DEVICE_STATUS && s.name != "rx.device-status" && is_bad(s.status));
        let (value, status) = aggregate(bad);
        let Some(d) = self.map.get_mut(DEVICE_STATUS) else {
            return;
        };
        if d.value == value && d.status == status {
            return;
        }
        d.value = value.into();
        d.status = status;
        d.timestamp = d.timestamp.max(timestamp);
        for (_, l) in &self.listeners {
            l(d);
        }
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SensorSet")
            .field("sensors", &self.map.len())
            .field("listeners", &self.listeners.len())
            .finish()
    }
}

/// Sensors shared between an engine and its katcp server.
#[derive(Debug, Clone, Default)]
pub struct SensorSet(Arc<Mutex<Inner>>);

impl SensorSet {
    /// Adds a sensor (status unknown until set).
    pub fn add(
        &self,
        name: &str,
        description: &str,
        units: &str,
        stype: SensorType,
        initial: &str,
    ) {
        let s = Sensor {
            name: name.into(),
            description: description.into(),
            units: units.into(),
            stype,
            value: initial.into(),
            status: Status::Unknown,
            timestamp: now(),
            auto_rate: None,
        };
        if let Ok(mut m) = self.0.lock() {
            m.map.insert(name.into(), s);
        }
    }

    /// Makes a sensor "rate-limited" as katgpucbf's receive and clip-count sensors are: the
    /// `auto` sampling strategy then reports it as `event-rate SHORTEST inf` does, instead
    /// of every assignment.
    pub fn rate_limit(&self, name: &str, shortest: f64) {
        if let Ok(mut m) = self.0.lock() {
            if let Some(s) = m.map.get_mut(name) {
                s.auto_rate = Some(shortest);
            }
        }
    }

    /// Updates a sensor's value and status, timestamped now (ignored for unknown names).
    pub fn set(&self, name: &str, value: impl ToString, status: Status) {
        self.set_at(name, value, status, now());
    }

    /// Updates a sensor's value and status with the reading's own timestamp (UNIX
    /// seconds: e.g. the data time the reading is about); ignored for unknown names. Every
    /// listener is told, in the order readings are set.
    pub fn set_at(&self, name: &str, value: impl ToString, status: Status, timestamp: f64) {
        if let Ok(mut m) = self.0.lock() {
            let inner = &mut *m;
            if let Some(s) = inner.map.get_mut(name) {
                s.value = value.to_string();
                s.status = status;
                s.timestamp = timestamp;
                for (_, l) in &inner.listeners {
                    l(s);
                }
            }
            if name != DEVICE_STATUS {
                inner.aggregate(timestamp);
            }
        }
    }

    /// Calls `f` with every reading set from now on (until [`SensorSet::unlisten`]); `f` runs
    /// under the set's lock, so it must only hand the reading on (e.g. `try_send`).
    pub fn listen(&self, f: impl Fn(&Sensor) + Send + 'static) -> u64 {
        let Ok(mut m) = self.0.lock() else { return 0 };
        m.next_listener += 1;
        let id = m.next_listener;
        m.listeners.push((id, Box::new(f)));
        id
    }

    /// Stops the listener `id`.
    pub fn unlisten(&self, id: u64) {
        if let Ok(mut m) = self.0.lock() {
            m.listeners.retain(|(i, _)| *i != id);
        }
    }

    /// A handle that does not keep the set alive (for a thread that updates it while the
    /// engine lives).
    pub fn downgrade(&self) -> std::sync::Weak<Mutex<Inner>> {
        Arc::downgrade(&self.0)
    }

    /// The set behind a [`SensorSet::downgrade`] handle, while it lives.
    pub fn upgrade(w: &std::sync::Weak<Mutex<Inner>>) -> Option<SensorSet> {
        w.upgrade().map(SensorSet)
    }

    /// A copy of the named sensor, or `None` for an unknown name.
    pub fn get(&self, name: &str) -> Option<Sensor> {
        self.0.lock().ok()?.map.get(name).cloned()
    }

    /// Copies of all sensors, sorted by name (the order `?sensor-list` reports them in).
    pub fn all(&self) -> Vec<Sensor> {
        self.0
            .lock()
            .map(|m| m.map.values().cloned().collect())
            .unwrap_or_default()
    }
}
