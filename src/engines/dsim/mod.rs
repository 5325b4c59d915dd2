//! `gpucbf dsim`: the digitiser simulator. One single-pol SPEAD stream per destination,
//! heaps exactly as a MeerKAT digitiser sends them (ICD §4.1): one 5192-byte packet per
//! heap (10-bit), items timestamp, digitiser_id, digitiser_status, adc_samples.
//!
//! A window of signal is generated once (in parallel) and replayed; frequencies snap to
//! multiples of adc_rate / period so the replay is seamless.

pub mod config;
pub mod control;
pub mod generate;
mod run;
pub mod send;
pub mod signal;

pub use config::{DsimArgs, DsimConfig};
pub use run::run;
pub use send::DsimSummary;
