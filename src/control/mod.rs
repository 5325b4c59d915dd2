//! Control: the katcp protocol (the telescope's control language), a device server,
//! sensors shared between engines and the server, and clean shutdown (signals, `?halt`).

pub mod katcp;
pub mod sensors;
pub mod server;
pub mod shutdown;

pub use katcp::{Kind, Message};
pub use sensors::{SensorSet, SensorType, Status};
pub use server::{Device, RequestError, Server};
