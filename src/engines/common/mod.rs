//! What every engine shares: command-line pieces ([`cli`]), configuration errors
//! ([`error`]), opening the input and the receive thread ([`recv`]), the output sink
//! ([`send`]) and the send thread ([`send_worker`]), the size limits checked before allocating ([`sizes`]) and the output-lag
//! gauge ([`lag`]).

pub mod cli;
pub mod descriptors;
pub mod error;
pub mod iface;
pub mod lag;
pub mod recv;
pub mod rx_sensors;
pub mod send;
pub mod send_worker;
pub mod sizes;
pub mod upstream;

pub use cli::{Backend, EngineArgs};
pub use error::ConfigError;
pub use upstream::ConsoleArgs;
