//! Tools built on the engines and compute stages.
//!
//! * [`array`](mod@array): a loopback array (dsim -> F-engines -> XB-engine) in one command.
//! * [`image`]: dirty images of correlator visibilities.
//! * [`inspect`]: `pcap-info` and `spead-dump`.
//! * [`nufft`]: `gpucbf nufft`, NUFFTs on `.npy` files ([`crate::npy`]).
//! * [`soak`]: `gpucbf soak`, the soak report of running engines (CSV, JSON, PNG, verdict).

pub mod array;
pub mod image;
pub mod inspect;
pub mod nufft;
pub mod soak;
