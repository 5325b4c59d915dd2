//! SPEAD descriptors re-sent while an engine runs, as katgpucbf's `DescriptorSender` does
//! (katgpucbf-compat.md §5.1): after the first set sent at start, again after
//! `first_interval`, then every `interval` on an absolute schedule (a late send does not
//! shift the later ones; at least 1 % of the interval between sends), unpaced from their
//! own socket so the data's pacing is not disturbed, until the engine stops. fgpu staggers
//! its engines (`first_interval` = (feng_id + 1) × 5 s, `interval` = array_size × 5 s);
//! xbgpu sends every 5 s. Only live UDP outputs get them (a pcap file keeps exactly what it
//! had).

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::net::send::heap::HeapSender;
use crate::net::PacketSink;
use crate::spead::Descriptor;

/// Heap counters of re-sent descriptor heaps start here: far above any data heap's counter,
/// so a receiver never mixes the two.
pub const DESCRIPTOR_CNT_BASE: u64 = 1 << 46;

/// One output's descriptors and destinations.
pub struct DescribedOutput {
    /// Every destination (substream) of the output.
    pub dsts: Vec<SocketAddrV4>,
    /// The output's item descriptors.
    pub descriptors: Vec<Descriptor>,
}

/// The running re-send thread; dropping it stops the thread.
pub struct DescriptorLoop {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for DescriptorLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The send times after `start`: `first`, then every `interval` (absolute schedule). `now`
/// past a due time skips to the next one at least 1 % of the interval ahead.
pub fn next_due(start: Instant, first: Duration, interval: Duration, now: Instant) -> Instant {
    let t0 = start + first;
    if now < t0 {
        return t0;
    }
    let iv = interval.max(Duration::from_millis(1));
    let k = ((now - t0).as_secs_f64() / iv.as_secs_f64()).floor() as u32 + 1;
    let due = t0 + iv * k;
    due.max(now + iv / 100)
}

/// Starts re-sending `outputs`' descriptors through `sink` (cnt sequence from
/// [`DESCRIPTOR_CNT_BASE`] + `cnt_offset`, step `cnt_step`, packets of at most
/// `packet_payload` bytes).
pub fn start(
    sink: Box<dyn PacketSink>,
    outputs: Vec<DescribedOutput>,
    first: Duration,
    interval: Duration,
    cnt_offset: u64,
    cnt_step: u64,
    packet_payload: usize,
) -> std::io::Result<DescriptorLoop> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let shared = crate::net::SharedSink::new(sink);
    let mut senders: Vec<(HeapSender, Vec<Descriptor>)> = outputs
        .into_iter()
        .map(|o| {
            let s = HeapSender::new(
                Box::new(shared.clone()),
                o.dsts,
                DESCRIPTOR_CNT_BASE + cnt_offset,
                cnt_step,
                packet_payload,
                None,
            );
            (s, o.descriptors)
        })
        .collect();
    let handle = std::thread::Builder::new()
        .name("descriptors".into())
        .spawn(move || {
            let start = Instant::now();
            let mut due = next_due(start, first, interval, start);
            while !stop2.load(Ordering::Relaxed) {
                let now = Instant::now();
                if now < due {
                    std::thread::sleep((due - now).min(Duration::from_millis(100)));
                    continue;
                }
                for (s, d) in &mut senders {
                    if let Err(e) = s.send_descriptors(d, 8872) {
                        tracing::warn!(error = %e, "descriptor re-send failed");
                    }
                }
                due = next_due(start, first, interval, Instant::now());
            }
        })?;
    Ok(DescriptorLoop {
        stop,
        handle: Some(handle),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_absolute_with_a_stagger() {
        let t = Instant::now();
        let s = Duration::from_secs;
        // fgpu feng_id 1 of 4: 10 s, then every 20 s.
        assert_eq!(next_due(t, s(10), s(20), t), t + s(10));
        assert_eq!(next_due(t, s(10), s(20), t + s(10)), t + s(30));
        assert_eq!(next_due(t, s(10), s(20), t + s(31)), t + s(50));
        // Late by a whole interval: the next slot, never a burst.
        assert_eq!(next_due(t, s(5), s(5), t + s(19)), t + s(20));
        // Just before a slot: still at least 1 % of the interval ahead.
        let near = t + s(20) - Duration::from_millis(10);
        assert_eq!(
            next_due(t, s(5), s(5), near),
            near + Duration::from_millis(50)
        );
    }
}
