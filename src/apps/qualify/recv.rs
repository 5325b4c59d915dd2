//! Receivers of the array's outputs: a thread per correlation-product stream and per beam
//! takes the real heaps off loopback UDP (the X-engine's `xeng_raw`, the beams' `bf_raw`)
//! into a [`Store`] keyed by timestamp, from which the checks wait for data stamped at or
//! after a timestamp.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::net::recv::udp::UdpRecvSource;
use crate::net::recv::{PacketSource, Poll};
use crate::spead::{ids, Assembler, ItemValue};

/// Most heaps kept per stream (the oldest are dropped).
const KEEP: usize = 256;

/// Heaps of one stream by timestamp.
#[derive(Default)]
pub struct Stream {
    heaps: Mutex<BTreeMap<u64, Vec<u8>>>,
    arrived: Condvar,
    /// Heaps received that had no timestamp or payload (counted, not kept).
    pub malformed: std::sync::atomic::AtomicU64,
    /// Beam heaps formed from fewer antennas than the array has (an F-engine's data lost
    /// on the way): counted, not kept, as dumps with MISSING markers are skipped.
    pub incomplete: std::sync::atomic::AtomicU64,
}

impl Stream {
    fn push(&self, ts: u64, data: Vec<u8>) {
        let Ok(mut m) = self.heaps.lock() else { return };
        m.insert(ts, data);
        while m.len() > KEEP {
            m.pop_first();
        }
        self.arrived.notify_all();
    }

    /// Forgets every heap received so far.
    pub fn clear(&self) {
        if let Ok(mut m) = self.heaps.lock() {
            m.clear();
        }
    }

    /// Forgets every heap received so far and every one that arrives until none has come
    /// for `quiet`: what a stopped output formed before `?capture-stop` and still had on
    /// its way (send queue, sockets). An error if heaps still come after `limit`.
    pub fn drain(&self, quiet: Duration, limit: Duration) -> anyhow::Result<()> {
        let poisoned = || anyhow::anyhow!("receiver lock poisoned");
        let t0 = Instant::now();
        let mut m = self.heaps.lock().map_err(|_| poisoned())?;
        m.clear();
        let mut last = Instant::now();
        loop {
            let idle = last.elapsed();
            if idle >= quiet {
                return Ok(());
            }
            if t0.elapsed() >= limit {
                anyhow::bail!(
                    "heaps still arrived {limit:?} after the output was stopped (none for \
                     {quiet:?} expected)"
                );
            }
            m = self
                .arrived
                .wait_timeout(m, quiet - idle)
                .map_err(|_| poisoned())?
                .0;
            if !m.is_empty() {
                m.clear();
                last = Instant::now();
            }
        }
    }

    /// Waits (at most `timeout`) for `count` heaps stamped at or after `from`, and returns
    /// the first `count` of them in timestamp order; an error says how many came.
    pub fn wait(
        &self,
        from: u64,
        count: usize,
        timeout: Duration,
    ) -> anyhow::Result<Vec<(u64, Vec<u8>)>> {
        let t0 = Instant::now();
        let mut m = self
            .heaps
            .lock()
            .map_err(|_| anyhow::anyhow!("receiver lock poisoned"))?;
        loop {
            let got: Vec<_> = m.range(from..).take(count).collect();
            if got.len() == count {
                return Ok(got.into_iter().map(|(t, d)| (*t, d.clone())).collect());
            }
            let left = timeout.saturating_sub(t0.elapsed());
            if left.is_zero() || crate::control::shutdown::requested() {
                anyhow::bail!(
                    "{} of {count} heaps stamped at or after {from} arrived within {timeout:?} \
                     (latest received: {:?})",
                    got.len(),
                    m.last_key_value().map(|(t, _)| *t)
                );
            }
            m = self
                .arrived
                .wait_timeout(m, left.min(Duration::from_millis(200)))
                .map_err(|_| anyhow::anyhow!("receiver lock poisoned"))?
                .0;
        }
    }

    /// The latest timestamp received.
    pub fn latest(&self) -> Option<u64> {
        self.heaps
            .lock()
            .ok()
            .and_then(|m| m.last_key_value().map(|(t, _)| *t))
    }
}

/// A running receiver.
pub struct Receiver {
    /// What it received.
    pub stream: Arc<Stream>,
    handle: Option<JoinHandle<std::io::Result<()>>>,
    stop: Arc<AtomicBool>,
}

impl Receiver {
    /// Receives heaps of item `item` (`XENG_RAW`, `BF_RAW`) on `addr`; with `antennas`
    /// (beams), a heap whose `beam_ants` is below it is counted in
    /// [`Stream::incomplete`] and not kept.
    pub fn start(
        addr: SocketAddrV4,
        item: u16,
        antennas: Option<u64>,
    ) -> std::io::Result<Receiver> {
        let mut src = UdpRecvSource::new(&[addr], Ipv4Addr::UNSPECIFIED, 64 << 20)?;
        let stream = Arc::new(Stream::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (stream.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            let mut asm = Assembler::new(8);
            let mut heaps = Vec::new();
            while !stop2.load(Ordering::Relaxed) {
                let r = src.recv_batch(&mut |p| {
                    let _ = asm.push(p, &mut heaps);
                })?;
                for h in heaps.drain(..) {
                    let ants = h.u64_item(ids::BEAM_ANTS);
                    if let (Some(full), Some(a)) = (antennas, ants) {
                        if a < full {
                            s2.incomplete.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                    match (h.u64_item(ids::TIMESTAMP), h.item(item)) {
                        (Some(ts), Some(ItemValue::Bytes(b))) => s2.push(ts, b.to_vec()),
                        // Descriptor and stop heaps carry neither.
                        (None, None) => {}
                        _ => {
                            s2.malformed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                if matches!(r, Poll::Idle) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Ok(())
        });
        Ok(Receiver {
            stream,
            handle: Some(handle),
            stop,
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A correlation-product dump as int32 (channel, baseline, product, re/im).
pub fn i32s(raw: &[u8]) -> Vec<i32> {
    raw.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that keeps receiving for a while is drained once it goes quiet, and left
    /// empty; one that never stops is an error at the limit.
    #[test]
    fn drain_waits_for_the_stream_to_go_quiet() {
        let s = Arc::new(Stream::default());
        s.push(1, vec![1]);
        let feed = |s: Arc<Stream>, n: u64| {
            std::thread::spawn(move || {
                for t in 0..n {
                    s.push(10 + t, vec![0]);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let h = feed(s.clone(), 15);
        let t0 = Instant::now();
        s.drain(Duration::from_millis(150), Duration::from_secs(10))
            .unwrap();
        h.join().unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(14 * 20 + 150));
        assert_eq!(s.latest(), None, "everything that came was forgotten");
        let h = feed(s.clone(), 40);
        let e = s
            .drain(Duration::from_millis(150), Duration::from_millis(300))
            .unwrap_err();
        assert!(e.to_string().contains("still arrived"), "{e}");
        h.join().unwrap();
    }
}
