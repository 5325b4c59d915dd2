//! `gpucbf fgpu`: the F-engine process (command line, receive, timeline, pipelines, send).
//! The channelising compute lives in [`crate::fengine`] behind its backend trait.

pub mod backend;
pub mod config;
pub mod engine;
pub mod store;

pub use config::{parse_wideband, FgpuArgs, WidebandSpec};
pub use engine::{run, Channelizer, FgpuSummary, Pipeline};
