//! Process-wide fault counters that no one engine object owns, read by the metrics
//! ([`crate::telemetry::metrics::Metrics::render`]) and the common sensors
//! ([`crate::control::common`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// Packets dropped because their destination was unreachable (every UDP sink of the
/// process; see `net::send::udp`).
static UNREACHABLE_PACKETS: AtomicU64 = AtomicU64::new(0);

/// Counts `n` packets dropped for an unreachable destination.
pub fn add_unreachable_packets(n: u64) {
    UNREACHABLE_PACKETS.fetch_add(n, Ordering::Relaxed);
}

/// Packets dropped for an unreachable destination since the process started.
pub fn unreachable_packets() -> u64 {
    UNREACHABLE_PACKETS.load(Ordering::Relaxed)
}

/// Compute calls (GPU or CPU backend) that failed and stopped an engine.
static COMPUTE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Counts a compute call that failed.
pub fn add_compute_failure() {
    COMPUTE_FAILURES.fetch_add(1, Ordering::Relaxed);
}

/// Compute calls that failed since the process started.
pub fn compute_failures() -> u64 {
    COMPUTE_FAILURES.load(Ordering::Relaxed)
}

/// The `NAMESPACE_output_unreachable_packets` and `NAMESPACE_compute_failures` counter
/// families as exposition text.
pub fn render(namespace: &str) -> String {
    let name = format!("{namespace}_output_unreachable_packets");
    let compute = format!("{namespace}_compute_failures");
    format!(
        "# HELP {name} Packets dropped because their destination was unreachable.\n\
         # TYPE {name} counter\n{name}_total {}\n\
         # HELP {compute} Compute calls (GPU or CPU backend) that failed and stopped the engine.\n\
         # TYPE {compute} counter\n{compute}_total {}\n",
        unreachable_packets(),
        compute_failures()
    )
}
