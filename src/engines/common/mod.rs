//! What every engine shares: command-line pieces ([`cli`]), configuration errors
//! ([`error`]), opening the input and the receive thread ([`recv`]), the output sink
//! ([`send`]) and the size limits checked before allocating ([`sizes`]).

pub mod cli;
pub mod error;
pub mod recv;
pub mod send;
pub mod sizes;

pub use cli::{Backend, EngineArgs};
pub use error::ConfigError;
