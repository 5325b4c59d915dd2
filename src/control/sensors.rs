//! katcp sensors: a shared, thread-safe set that engines update and the server reports.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, PartialEq)]
pub enum SensorType {
    Integer,
    Float,
    Boolean,
    String,
    Timestamp,
    Discrete(Vec<String>),
}

impl SensorType {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Unknown,
    Nominal,
    Warn,
    Error,
    Failure,
}

impl Status {
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

#[derive(Debug, Clone)]
pub struct Sensor {
    pub name: String,
    pub description: String,
    pub units: String,
    pub stype: SensorType,
    pub value: String,
    pub status: Status,
    pub timestamp: f64,
}

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

    pub fn get(&self, name: &str) -> Option<Sensor> {
        self.0.lock().ok()?.get(name).cloned()
    }

    pub fn all(&self) -> Vec<Sensor> {
        self.0
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }
}
