//! What an engine gives the katcp server: its version, its own requests and its sensors.

use super::sensors::SensorSet;

/// Why an engine's request failed: any error; its text is the `fail` reply's message.
pub type RequestError = Box<dyn std::error::Error + Send + Sync>;

/// An engine's katcp interface.
pub trait Device: Send + Sync + 'static {
    /// API version, e.g. `katgpucbf-fgpu-1.0` style.
    fn api_version(&self) -> String;
    /// The engine's own requests: (name, help text).
    fn requests(&self) -> Vec<(&'static str, &'static str)>;
    /// Handles one of [`Device::requests`]: `Ok(reply args after "ok")`, or the error whose
    /// text the `fail` reply carries. Each request checks its own argument count.
    fn request(&self, name: &str, args: &[String]) -> Result<Vec<String>, RequestError>;
    /// The engine's sensors, reported by `?sensor-list` and `?sensor-value`.
    fn sensors(&self) -> &SensorSet;
}
