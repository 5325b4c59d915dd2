//! `gpucbf bench ...`: one harness per subject, each measured against a bound or a peer in
//! the same run (device copy bandwidth, cuBLASLt int8 GEMM, FMA rate, spead2, FINUFFT).

pub mod fgpu;
pub mod fgpu_cpu;
pub mod fgpu_narrowband;
pub mod nufft;
pub mod nufft_gpu;
pub mod recv;
pub mod xbgpu;
