//! Control: the katcp protocol (the telescope's control language), a device server, and
//! sensors shared between engines and the server.

pub mod katcp;
pub mod sensors;
pub mod server;

pub use katcp::{Kind, Message};
pub use sensors::{SensorSet, SensorType, Status};
pub use server::{Device, Server};
