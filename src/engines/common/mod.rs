//! What every engine shares: command-line pieces ([`cli`]), configuration errors
//! ([`error`]), opening the input and the receive thread ([`recv`]) and the output sink
//! ([`send`]).

pub mod cli;
pub mod error;
pub mod recv;
pub mod send;

pub use cli::{Backend, EngineArgs};
pub use error::ConfigError;
