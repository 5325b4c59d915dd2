//! `gpucbf fgpu`: the F-engine process (command line, receive, timeline, pipelines, send).
//! The channelising compute lives in [`crate::compute::fengine`] behind its backend trait.

pub mod backend;
pub mod config;
pub mod control;
pub mod device;
pub mod engine;
pub mod store;
#[cfg(test)]
mod tests_backend;
#[cfg(test)]
mod tests_control;

pub use config::{parse_wideband, FgpuArgs, WidebandSpec};
pub use engine::{run, Channelizer, FgpuSummary, Pipeline};
