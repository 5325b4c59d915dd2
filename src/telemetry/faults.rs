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

/// The `NAMESPACE_output_unreachable_packets` counter family as exposition text.
pub fn render(namespace: &str) -> String {
    let name = format!("{namespace}_output_unreachable_packets");
    format!(
        "# HELP {name} Packets dropped because their destination was unreachable.\n\
         # TYPE {name} counter\n{name}_total {}\n",
        unreachable_packets()
    )
}
