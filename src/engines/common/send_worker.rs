//! The engine's send threads (katgpucbf's `--send-affinity`): the outputs' heap senders
//! run on their own threads, optionally pinned, so pacing and the socket calls never hold
//! up the thread that feeds the GPU. With one thread (lane), jobs (a batch's heaps in one
//! buffer) are sent in the order they were queued, whatever output they belong to, so a
//! shared sink sees the same packet order as sending inline. With several lanes (several
//! `--send-affinity` cores), lane `l` sends the heaps of destinations `d % lanes == l`
//! through its own sockets and pacers, each destination's heaps still in order. Buffers
//! come back to their output for reuse once the last lane is done with them; lent buffers
//! go back to the compute when dropped. A send error stops the sending and is returned by
//! the next call of an output that queues or flushes.

use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::mem::LentBytes;
use crate::net::send::heap::HeapSender;
use crate::telemetry::stages::Stage;

/// Jobs queued at most before an output waits for the send thread.
const QUEUE: usize = 16;

/// One heap of a job: destination index, immediate items, payload bytes of the job's buffer.
#[derive(Debug, Clone)]
pub struct HeapPart {
    /// Destination (substream) index of the output's sender.
    pub dst: usize,
    /// Immediate items, in order.
    pub items: Vec<(u16, u64)>,
    /// The payload's bytes in the job's buffer.
    pub payload: Range<usize>,
}

/// A batch's bytes on their way to be sent.
pub enum OutBuf {
    /// A buffer of the output's own: it comes back to the output for reuse.
    Owned(Vec<u8>),
    /// Bytes the compute lent (its page-locked download staging): they go back to it when
    /// dropped, once sent.
    Lent(Box<dyn LentBytes>),
}

impl OutBuf {
    /// The bytes.
    pub fn bytes(&self) -> io::Result<&[u8]> {
        match self {
            OutBuf::Owned(v) => Ok(v),
            OutBuf::Lent(l) => l.bytes(),
        }
    }
}

enum Msg {
    Job {
        out: usize,
        payload_id: u16,
        heaps: Vec<HeapPart>,
        buf: Arc<OutBuf>,
    },
    Flush {
        out: usize,
        done: Sender<io::Result<()>>,
    },
}

/// The first send error, kept for the outputs to report.
type FirstError = Arc<Mutex<Option<(io::ErrorKind, String)>>>;

/// The send threads of an engine. They end once every [`QueuedSender`] is gone (each
/// output's [`QueuedSender::flush`] waits for what it queued).
pub struct SendWorker {
    handles: Vec<JoinHandle<()>>,
}

/// An output's end of the send threads: queues its batches and takes its buffers back.
pub struct QueuedSender {
    out: usize,
    /// One queue per send thread (lane); a heap for destination `d` goes to lane
    /// `d % lanes`.
    lanes: Vec<Sender<Msg>>,
    /// Buffers the send threads are done with.
    free: Receiver<Vec<u8>>,
    error: FirstError,
}

impl SendWorker {
    /// Waits for the send threads, which end once every [`QueuedSender`] is gone (drop
    /// them first, or this waits for ever) and what was queued is sent: their sinks (a
    /// pcap file's last records) are flushed when this returns, also when the engine
    /// stops on an error. Left running, they were cut off by the process's exit with the
    /// capture still in their buffers.
    pub fn join(mut self) {
        for h in self.handles.drain(..) {
            if h.join().is_err() {
                tracing::error!("a send thread panicked");
            }
        }
    }

    /// Starts the send thread for `senders` (one per output), pinned to `core` if given;
    /// returns the thread and one [`QueuedSender`] per sender, in order.
    pub fn spawn(
        senders: Vec<HeapSender>,
        core: Option<usize>,
    ) -> io::Result<(SendWorker, Vec<QueuedSender>)> {
        Self::spawn_lanes(vec![(senders, core)])
    }

    /// Starts one send thread per lane: lane `l` holds a sender per output (its own socket
    /// and pacer) and sends the heaps whose destination index `d` has `d % lanes == l`, in
    /// queue order, pinned to its core if given. Returns one [`QueuedSender`] per output.
    pub fn spawn_lanes(
        lanes: Vec<(Vec<HeapSender>, Option<usize>)>,
    ) -> io::Result<(SendWorker, Vec<QueuedSender>)> {
        Self::spawn_lanes_sized(lanes, QUEUE)
    }

    /// [`SendWorker::spawn_lanes`] with `queue` jobs (batches) queued per lane at most before
    /// an output waits (fgpu: two output chunks, `--send-chunk-jones`).
    pub fn spawn_lanes_sized(
        lanes: Vec<(Vec<HeapSender>, Option<usize>)>,
        queue: usize,
    ) -> io::Result<(SendWorker, Vec<QueuedSender>)> {
        let queue = queue.max(1);
        let outputs = lanes.first().map_or(0, |l| l.0.len());
        if lanes.is_empty() || lanes.iter().any(|l| l.0.len() != outputs) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "every send lane needs one sender per output",
            ));
        }
        let error: FirstError = Arc::default();
        let mut returns = Vec::new();
        let mut frees = Vec::new();
        for _ in 0..outputs {
            let (tx, free) = bounded(lanes.len() * queue + 2);
            returns.push(tx);
            frees.push(free);
        }
        let n = lanes.len();
        let mut txs = Vec::new();
        let mut handles = Vec::new();
        for (l, (senders, core)) in lanes.into_iter().enumerate() {
            let (jobs, rx) = bounded::<Msg>(queue);
            txs.push(jobs);
            let err = error.clone();
            let returns = returns.clone();
            let name = if n == 1 {
                "send".to_string()
            } else {
                format!("send-{l}")
            };
            handles.push(std::thread::Builder::new().name(name).spawn(move || {
                if let Some(c) = core {
                    if let Err(e) = crate::net::affinity::pin_current_thread(c) {
                        tracing::warn!(error = %e, "send thread not pinned");
                    }
                }
                run(senders, rx, returns, err);
            })?);
        }
        let queued = frees
            .into_iter()
            .enumerate()
            .map(|(out, free)| QueuedSender {
                out,
                lanes: txs.clone(),
                free,
                error: error.clone(),
            })
            .collect();
        Ok((SendWorker { handles }, queued))
    }
}

fn run(
    mut senders: Vec<HeapSender>,
    rx: Receiver<Msg>,
    returns: Vec<Sender<Vec<u8>>>,
    error: FirstError,
) {
    for s in senders.iter_mut() {
        s.time_stages("send");
    }
    let idle = Stage::new("send", "wait_jobs");
    let failed = |e: &io::Error| {
        if let Ok(mut g) = error.lock() {
            g.get_or_insert((e.kind(), e.to_string()));
        }
    };
    let mut t = Instant::now();
    while let Ok(msg) = rx.recv() {
        idle.since(t);
        let stopped = error.lock().map(|g| g.is_some()).unwrap_or(true);
        match msg {
            Msg::Job {
                out,
                payload_id,
                heaps,
                buf,
            } => {
                if !stopped {
                    if let Err(e) = send_job(&mut senders[out], payload_id, &heaps, &buf) {
                        failed(&e);
                    }
                }
                // The last lane done with an output's own buffer gives it back.
                if let Some(OutBuf::Owned(v)) = Arc::into_inner(buf) {
                    let _ = returns[out].try_send(v);
                }
            }
            Msg::Flush { out, done } => {
                let r = senders[out].flush();
                if let Err(e) = &r {
                    failed(e);
                }
                let _ = done.send(r);
            }
        }
        t = Instant::now();
    }
}

/// Sends one job's heaps from `buf`.
fn send_job(
    sender: &mut HeapSender,
    payload_id: u16,
    heaps: &[HeapPart],
    buf: &OutBuf,
) -> io::Result<()> {
    let all = buf.bytes()?;
    for h in heaps {
        let payload = all.get(h.payload.clone()).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "heap outside its job's buffer")
        })?;
        sender.send_heap(h.dst, &h.items, payload_id, payload)?;
    }
    Ok(())
}

impl QueuedSender {
    fn check(&self) -> io::Result<()> {
        match self.error.lock() {
            Ok(g) => match &*g {
                Some((kind, msg)) => Err(io::Error::new(*kind, format!("send thread: {msg}"))),
                None => Ok(()),
            },
            Err(_) => Err(io::Error::other("send thread: error state poisoned")),
        }
    }

    /// A buffer of `len` bytes to fill with a batch (one the send thread returned, when
    /// there is one).
    pub fn buffer(&self, len: usize) -> Vec<u8> {
        let mut b = self.free.try_recv().unwrap_or_default();
        b.resize(len, 0);
        b
    }

    /// Queues `heaps` (payloads in `buf`, item `payload_id`), each on its destination's
    /// lane; waits while a lane's queue is full. Fails with the send threads' first error,
    /// if there was one.
    pub fn send(&self, payload_id: u16, heaps: Vec<HeapPart>, buf: OutBuf) -> io::Result<()> {
        self.check()?;
        let n = self.lanes.len();
        let buf = Arc::new(buf);
        let mut parts: Vec<Vec<HeapPart>> = (0..n).map(|_| Vec::new()).collect();
        for h in heaps {
            parts[h.dst % n].push(h);
        }
        for (lane, heaps) in self.lanes.iter().zip(parts) {
            if heaps.is_empty() {
                continue;
            }
            lane.send(Msg::Job {
                out: self.out,
                payload_id,
                heaps,
                buf: buf.clone(),
            })
            .map_err(|_| io::Error::other("send thread stopped"))?;
        }
        Ok(())
    }

    /// Waits until everything queued so far is sent, then flushes the output's sinks.
    pub fn flush(&self) -> io::Result<()> {
        let mut waits = Vec::new();
        for lane in &self.lanes {
            let (done, wait) = bounded(1);
            lane.send(Msg::Flush {
                out: self.out,
                done,
            })
            .map_err(|_| io::Error::other("send thread stopped"))?;
            waits.push(wait);
        }
        for wait in waits {
            wait.recv()
                .map_err(|_| io::Error::other("send thread stopped"))??;
        }
        self.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::send::PacketSink;
    use std::net::SocketAddrV4;

    /// (destination port, packet bytes) as sent.
    type Seen = Arc<Mutex<Vec<(u16, Vec<u8>)>>>;

    /// Records (destination port, packet bytes) and fails after `fail_after` packets.
    struct Record {
        seen: Seen,
        fail_after: usize,
    }

    impl PacketSink for Record {
        fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> io::Result<()> {
            let mut g = self.seen.lock().unwrap();
            if g.len() >= self.fail_after {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "gone"));
            }
            g.push((dst.port(), parts.concat()));
            Ok(())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn is_offline(&self) -> bool {
            true
        }
    }

    fn sender(seen: &Seen, port: u16, fail_after: usize) -> HeapSender {
        let sink = Record {
            seen: seen.clone(),
            fail_after,
        };
        let dst = vec![SocketAddrV4::new([127, 0, 0, 1].into(), port)];
        HeapSender::new(Box::new(sink), dst, 1, 2, 64, None)
    }

    fn job(ts: u64, n: usize) -> (Vec<HeapPart>, Vec<u8>) {
        let buf: Vec<u8> = (0..n).map(|i| (i as u64 + ts) as u8).collect();
        let heaps = vec![HeapPart {
            dst: 0,
            items: vec![(0x1600, ts)],
            payload: 0..n,
        }];
        (heaps, buf)
    }

    /// Two outputs queued alternately reach one sink in queue order with the bytes an
    /// inline sender sends; buffers come back for reuse.
    #[test]
    fn jobs_are_sent_in_queue_order_as_inline() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (worker, q) = SendWorker::spawn(
            vec![sender(&seen, 1, usize::MAX), sender(&seen, 2, usize::MAX)],
            None,
        )
        .unwrap();
        let inline_seen = Arc::new(Mutex::new(Vec::new()));
        let mut inline = [
            sender(&inline_seen, 1, usize::MAX),
            sender(&inline_seen, 2, usize::MAX),
        ];
        for ts in 0..20u64 {
            let o = (ts % 2) as usize;
            let (heaps, buf) = job(ts, 150);
            inline[o]
                .send_heap(0, &heaps[0].items, 0x4300, &buf)
                .unwrap();
            let mut b = q[o].buffer(150);
            b.copy_from_slice(&buf);
            q[o].send(0x4300, heaps, OutBuf::Owned(b)).unwrap();
        }
        q[0].flush().unwrap();
        q[1].flush().unwrap();
        assert_eq!(*seen.lock().unwrap(), *inline_seen.lock().unwrap());
        assert_eq!(seen.lock().unwrap().len(), 60, "3 packets per heap");
        assert!(!q[0].free.is_empty(), "buffers come back");
        drop(q);
        drop(worker);
    }

    /// A send error is reported by the next send or flush, and later jobs are not sent.
    #[test]
    fn a_send_error_is_reported_and_stops_sending() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (_worker, q) = SendWorker::spawn(vec![sender(&seen, 1, 4)], None).unwrap();
        let (h, b) = job(0, 150);
        q[0].send(0x4300, h, OutBuf::Owned(b)).unwrap();
        let (h, b) = job(1, 150);
        q[0].send(0x4300, h, OutBuf::Owned(b)).unwrap();
        let e = q[0].flush().unwrap_err();
        assert!(e.to_string().contains("gone"), "{e}");
        let (h, b) = job(2, 150);
        assert!(q[0].send(0x4300, h, OutBuf::Owned(b)).is_err());
        assert_eq!(seen.lock().unwrap().len(), 4);
    }

    /// Records (destination port, packet bytes) into a shared list; never fails.
    fn lane_sender(seen: &Seen, ports: &[u16]) -> HeapSender {
        let sink = Record {
            seen: seen.clone(),
            fail_after: usize::MAX,
        };
        let dst = ports
            .iter()
            .map(|&p| SocketAddrV4::new([127, 0, 0, 1].into(), p))
            .collect();
        HeapSender::new(Box::new(sink), dst, 1, 2, 64, None)
    }

    /// Bytes lent by a test owner: counts how many are out.
    struct Lent(Vec<u8>, Arc<std::sync::atomic::AtomicUsize>);

    impl LentBytes for Lent {
        fn bytes(&self) -> io::Result<&[u8]> {
            Ok(&self.0)
        }
    }

    impl Drop for Lent {
        fn drop(&mut self) {
            self.1.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Two lanes over four destinations: lane l sends exactly the heaps of destinations
    /// d % 2 == l, each destination's heaps in queue order and with the bytes one inline
    /// sender sends them; owned buffers come back once both lanes are done, and lent ones
    /// go back to their owner (none left out after the flush).
    #[test]
    fn lanes_split_destinations_and_keep_each_in_order() {
        let ports = [10, 11, 12, 13];
        let lane_seen: Vec<Seen> = (0..2).map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
        let (worker, q) = SendWorker::spawn_lanes(
            lane_seen
                .iter()
                .map(|s| (vec![lane_sender(s, &ports)], None))
                .collect(),
        )
        .unwrap();
        let inline_seen: Seen = Arc::new(Mutex::new(Vec::new()));
        let mut inline = lane_sender(&inline_seen, &ports);
        let out = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for ts in 0..30u64 {
            let per = 100;
            let bytes: Vec<u8> = (0..4 * per).map(|i| (i as u64 * 7 + ts) as u8).collect();
            let heaps: Vec<HeapPart> = (0..4)
                .map(|d| HeapPart {
                    dst: d,
                    items: vec![(0x1600, ts), (0x4103, d as u64)],
                    payload: d * per..(d + 1) * per,
                })
                .collect();
            for h in &heaps {
                inline
                    .send_heap(h.dst, &h.items, 0x4300, &bytes[h.payload.clone()])
                    .unwrap();
            }
            let buf = if ts % 2 == 0 {
                let mut b = q[0].buffer(bytes.len());
                b.copy_from_slice(&bytes);
                OutBuf::Owned(b)
            } else {
                out.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                OutBuf::Lent(Box::new(Lent(bytes.clone(), out.clone())))
            };
            q[0].send(0x4300, heaps, buf).unwrap();
        }
        q[0].flush().unwrap();
        assert_eq!(
            out.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "lent bytes all returned"
        );
        assert!(!q[0].free.is_empty(), "owned buffers come back");
        let want = inline_seen.lock().unwrap().clone();
        for (l, seen) in lane_seen.iter().enumerate() {
            let got = seen.lock().unwrap().clone();
            let mine: Vec<_> = want
                .iter()
                .filter(|(p, _)| (*p as usize - 10) % 2 == l)
                .cloned()
                .collect();
            // Heap counters come from each lane's own sequence: compare the packets per
            // destination with the counter bytes (heap cnt item, bytes 8..16) masked.
            let mask = |v: &[(u16, Vec<u8>)]| -> Vec<(u16, Vec<u8>)> {
                v.iter()
                    .map(|(p, b)| {
                        let mut b = b.clone();
                        b[8..16].fill(0);
                        (*p, b)
                    })
                    .collect()
            };
            assert_eq!(mask(&got), mask(&mine), "lane {l}");
            assert_eq!(
                got.len(),
                2 * 30 * 2,
                "2 destinations x 30 jobs x 2 packets"
            );
        }
        drop(q);
        drop(worker);
    }
}
