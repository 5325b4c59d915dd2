//! `gpucbf fgpu`: the F-engine process. Command line -> [`FgpuConfig`] ([`config`], output
//! specs in [`spec`]) -> [`run()`]: outputs ([`pipeline`]) channelise through the
//! [`Channelizer`] seam ([`channelizer`], implemented over the compute backends in
//! [`backend`]), driven over the sample timeline ([`store`], [`engine`]); katcp gains and
//! delays ([`control`], [`device`]) and metrics (`metrics.rs`) alongside. The channelising
//! compute lives in [`crate::compute::fengine`].

pub mod backend;
pub mod channelizer;
pub mod config;
pub mod control;
pub mod device;
#[cfg(feature = "ibverbs")]
pub mod direct;
pub mod engine;
mod metrics;
pub mod pipeline;
mod run;
pub mod sizing;
pub mod spec;
pub mod store;
#[cfg(test)]
mod tests_backend;
#[cfg(test)]
mod tests_control;

pub use channelizer::{Channelizer, ChannelizerError, Completed};
pub use config::{FgpuArgs, FgpuConfig};
pub use engine::FgpuSummary;
pub use pipeline::{OutputStats, Pipeline};
pub use run::{run, run_observed};
pub use spec::{parse_wideband, WidebandSpec};
