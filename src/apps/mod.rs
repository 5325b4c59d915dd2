//! Tools built on the engines and compute stages.
//!
//! * [`array`](mod@array): a loopback array (dsim -> F-engines -> XB-engine) in one command.
//! * [`deploy`]: `gpucbf deploy`, the array as Kubernetes manifests or command lines, and
//!   `gpucbf katcp-request` (the probes' request).
//! * [`image`]: dirty images of correlator visibilities.
//! * [`inspect`]: `pcap-info` and `spead-dump`.
//! * [`nufft`]: `gpucbf nufft`, NUFFTs on `.npy` files ([`crate::npy`]).
//! * [`qualify`]: `gpucbf qualify`, the acceptance tests against a live loopback array.
//! * [`replay`]: `gpucbf replay`, a capture to UDP at a chosen rate with seeded faults.
//! * [`soak`]: `gpucbf soak`, the soak report of running engines (CSV, JSON, PNG, verdict).

pub mod array;
pub mod deploy;
pub mod image;
pub mod inspect;
pub mod nufft;
pub mod qualify;
pub mod replay;
pub mod soak;
