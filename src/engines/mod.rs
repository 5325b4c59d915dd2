//! The engine processes: command line -> typed configuration -> run.
//!
//! * [`common`]: receive, send, shutdown and command-line pieces shared by the engines.
//! * [`dsim`]: digitiser simulator (signal -> packed heaps -> paced send).
//! * [`fgpu`]: F-engine (digitiser heaps -> channelised F-engine heaps).
//! * [`links`]: the `fgpu`, `xbgpu`, `dsim` and `schedrr` names of the binary.
//! * [`xbgpu`]: XB-engine (F-engine heaps -> correlation products and beams).

pub mod common;
pub mod dsim;
pub mod fgpu;
pub mod links;
pub mod xbgpu;

#[cfg(test)]
mod test_cli;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_files;
#[cfg(test)]
mod tests_peerdirect;
#[cfg(all(test, feature = "ibverbs"))]
mod tests_peerdirect_bitems;
#[cfg(all(test, feature = "ibverbs"))]
mod tests_peerdirect_gpu;
#[cfg(test)]
mod tests_peerdirect_x;
#[cfg(all(test, feature = "ibverbs"))]
mod tests_peerdirect_xgpu;
#[cfg(all(test, feature = "ibverbs"))]
mod tests_peerdirect_xitems;
#[cfg(test)]
mod tests_vkgdr;
