//! `gpucbf xbgpu`: the XB-engine process. Command line -> [`XbgpuConfig`] ([`config`],
//! output specs in [`spec`]) -> [`run()`]: batches of F-engine heaps ([`engine`], per chunk [`feed`]) go to the
//! correlation outputs ([`corrprod`]) and the beams ([`beams`]) through the compute seams of
//! [`backend`]; katcp capture and beam control in [`device`]. The correlation and
//! beamforming compute lives in [`crate::compute::xengine`].

pub mod backend;
pub mod beams;
pub mod config;
pub mod corrprod;
pub mod device;
#[cfg(feature = "ibverbs")]
pub mod direct;
pub mod engine;
pub mod feed;
mod metrics;
mod run;
mod sensors;
pub mod spec;

pub use backend::{BackendError, Beamformer, Beams, Correlator, PipelineError};
pub use beams::BPipeline;
pub use config::{XbgpuArgs, XbgpuConfig};
pub use corrprod::XPipeline;
pub use engine::XbgpuSummary;
pub use run::run;
pub use spec::{parse_beam, parse_corrprod};
