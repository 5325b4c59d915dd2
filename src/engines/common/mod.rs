//! What every engine shares: command-line helpers ([`cli`]), opening the input and the
//! receive thread ([`recv`]) and the output sink ([`send`]).

pub mod cli;
pub mod recv;
pub mod send;
