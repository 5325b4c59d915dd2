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

/// Answers one request as a connected client with no other clients and a fresh sampling
/// session would get it (the standard requests and `device`'s own): the informs, then
/// the reply. `?halt` is answered but halts nothing. For the fuzz target and tests that
/// drive the request handling without sockets.
pub fn respond(device: &dyn Device, req: &Message) -> Vec<Message> {
    let mut out = Vec::new();
    let session = sampling::Session::default();
    requests::handle(
        req,
        device,
        &requests::Clients::default(),
        &session,
        &mut out,
    );
    out
}
