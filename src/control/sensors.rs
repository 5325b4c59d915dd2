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

/// A sensor reading's status (katcp v5; aiokatcp's `unreachable` and `inactive` are not
/// used here).
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
}

impl Status {
    /// The katcp status name (`unknown`, `nominal`, `warn`, `error`, `failure`).
    pub fn name(self) -> &'static str {
        match self {
            Status::Unknown => "unknown",
            Status::Nominal => "nominal",
            Status::Warn => "warn",
            Status::Error => "error",
            Status::Failure => "failure",
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
}

/// The wall-clock time in seconds since the UNIX epoch (0.0 if the clock is before 1970),
/// as katcp timestamps use it.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Sensors shared between an engine and its katcp server.
#[derive(Debug, Clone, Default)]
pub struct SensorSet(Arc<Mutex<BTreeMap<String, Sensor>>>);

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
        };
        if let Ok(mut m) = self.0.lock() {
            m.insert(name.into(), s);
        }
    }

    /// Updates a sensor's value and status (ignored for unknown names).
    pub fn set(&self, name: &str, value: impl ToString, status: Status) {
        if let Ok(mut m) = self.0.lock() {
            if let Some(s) = m.get_mut(name) {
                s.value = value.to_string();
                s.status = status;
                s.timestamp = now();
            }
        }
    }

    /// A copy of the named sensor, or `None` for an unknown name.
    pub fn get(&self, name: &str) -> Option<Sensor> {
        self.0.lock().ok()?.get(name).cloned()
    }

    /// Copies of all sensors, sorted by name (the order `?sensor-list` reports them in).
    pub fn all(&self) -> Vec<Sensor> {
        self.0
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }
}
