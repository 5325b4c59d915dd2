//! Control: the katcp protocol (the telescope's control language), a device server with
//! its standard requests, sensors shared between engines and the server, and clean shutdown
//! (signals, `?halt`).

pub mod common;
pub mod device;
pub mod katcp;
mod requests;
pub mod sampling;
pub mod sensors;
pub mod server;
pub mod shutdown;
#[cfg(test)]
mod tests_server;

pub use device::{Device, RequestError};
pub use katcp::{Kind, Message};
pub use sensors::{SensorSet, SensorType, Status};
pub use server::{Limits, Server};
