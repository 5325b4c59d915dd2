//! F-engine tests: the CPU backend against analytic expectations and the float64 reference
//! ([`super::reference`]), and the GPU backends against the CPU one (skipped without a GPU,
//! required with `GPUCBF_REQUIRE_GPU=1`).

mod gpu;
mod gpu_narrowband;
mod gpu_pipeline;
mod narrowband;
mod wideband;
