//! `gpucbf bench ...`: one harness per subject, each measured against a bound or a peer in
//! the same run (device copy bandwidth, cuBLASLt int8 GEMM, FMA rate, spead2, FINUFFT).

pub mod fgpu;
pub mod nufft;
pub mod recv;
pub mod xbgpu;
