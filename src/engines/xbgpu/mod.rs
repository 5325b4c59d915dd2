//! `gpucbf xbgpu`: the XB-engine process (command line, receive, accumulation, dumps,
//! beams, send). The correlation and beamforming compute lives in [`crate::compute::xengine`].

pub mod config;
pub mod engine;
pub mod run;

pub use config::{parse_beam, parse_corrprod, XbgpuArgs};
pub use engine::{baseline_index, n_baselines, Beamformer, Correlator, XPipeline, MISSING};
pub use run::{run, Beams};
