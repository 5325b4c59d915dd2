//! Bytes lent by their owner for as long as a borrower holds them: an output batch left in
//! a backend's page-locked staging and sent from there (no copy into a send buffer); the
//! owner gets the memory back when the borrower drops it.

/// Bytes lent until dropped.
pub trait LentBytes: Send + Sync {
    /// The bytes. Fails only when the owner cannot vouch for them any more (a device
    /// error while they were being written).
    fn bytes(&self) -> std::io::Result<&[u8]>;
}

/// Lent bytes, boxed.
pub type Lent = Box<dyn LentBytes>;
