//! Clean shutdown on SIGINT/SIGTERM: handlers only set a flag; engines poll it, flush what
//! is complete, close their files and exit 0.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Installs the SIGINT and SIGTERM handlers (idempotent).
pub fn install() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// True once a stop was requested (signal or [`request`]).
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// Requests a stop from inside the process.
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}
