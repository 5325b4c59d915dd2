//! Size limits the engines check before allocating: heaps the receivers can count, and
//! buffers that fit the host's memory ([`crate::mem::HostMemory`]). A configuration past
//! them fails in `validate` with the option named, not as an allocation abort.

use super::error::ConfigError;
use crate::mem::{Bytes, HostMemory};

/// Largest heap, in bytes, an engine sends or receives: the receivers count a heap's
/// bytes in 32 bits.
pub const MAX_HEAP_BYTES: u128 = u32::MAX as u128;

/// Receive chunks an engine holds at least at once: two open in the receive window and
/// one being processed.
pub const MIN_CHUNKS_HELD: u128 = 3;

/// Bookkeeping bytes per heap slot of a chunk (received-byte count and range list).
pub const SLOT_BOOKKEEPING_BYTES: u128 = 28;

/// Refuses a heap of `bytes` past [`MAX_HEAP_BYTES`]: `subject` (the option) makes heaps of
/// `what` (`digitiser heaps`).
pub fn check_heap(subject: impl Into<String>, what: &str, bytes: u128) -> Result<(), ConfigError> {
    if bytes <= MAX_HEAP_BYTES {
        return Ok(());
    }
    Err(ConfigError::rule(
        subject,
        format!(
            "makes {what} of {}, larger than the {} a heap can be",
            Bytes(bytes),
            Bytes(MAX_HEAP_BYTES)
        ),
    ))
}

/// Refuses `need` bytes for `what` beyond `host`'s memory (nothing is refused where the
/// host's memory is unknown), naming `subject` (the option).
pub fn check_memory(
    host: Option<HostMemory>,
    subject: impl Into<String>,
    need: u128,
    what: &str,
) -> Result<(), ConfigError> {
    match host {
        Some(h) => h
            .check(need, what)
            .map_err(|e| ConfigError::rule(subject, e.to_string())),
        None => Ok(()),
    }
}

/// Bytes of [`MIN_CHUNKS_HELD`] receive chunks of `slots` heap slots of `slot_bytes`.
pub fn chunks_held(slots: u128, slot_bytes: u128) -> u128 {
    MIN_CHUNKS_HELD * slots * (slot_bytes + SLOT_BOOKKEEPING_BYTES)
}
