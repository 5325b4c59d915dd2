//! The engine's send thread (katgpucbf's `--send-affinity`): the outputs' heap senders run
//! on one thread, optionally pinned, so pacing and the socket calls never hold up the
//! thread that feeds the GPU. Jobs (a batch's heaps in one buffer) are sent in the order
//! they were queued, whatever output they belong to, so a shared sink sees the same packet
//! order as sending inline; buffers come back to their output for reuse. A send error
//! stops the worker's sending and is returned by the next call of the output that queues
//! or flushes.

use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::net::send::heap::HeapSender;

/// Jobs queued at most before an output waits for the send thread.
const QUEUE: usize = 8;

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

enum Msg {
    Job {
        out: usize,
        payload_id: u16,
        heaps: Vec<HeapPart>,
        buf: Vec<u8>,
    },
    Flush {
        out: usize,
        done: Sender<io::Result<()>>,
    },
}

/// The first send error, kept for the outputs to report.
type FirstError = Arc<Mutex<Option<(io::ErrorKind, String)>>>;

/// The send thread of an engine. It ends once every [`QueuedSender`] is gone (each
/// output's [`QueuedSender::flush`] waits for what it queued).
pub struct SendWorker {
    _handle: JoinHandle<()>,
}

/// An output's end of the send thread: queues its batches and takes its buffers back.
pub struct QueuedSender {
    out: usize,
    jobs: Sender<Msg>,
    /// Buffers the send thread is done with.
    free: Receiver<Vec<u8>>,
    error: FirstError,
}

impl SendWorker {
    /// Starts the send thread for `senders` (one per output), pinned to `core` if given;
    /// returns the thread and one [`QueuedSender`] per sender, in order.
    pub fn spawn(
        senders: Vec<HeapSender>,
        core: Option<usize>,
    ) -> io::Result<(SendWorker, Vec<QueuedSender>)> {
        let (jobs, rx) = bounded::<Msg>(QUEUE);
        let error: FirstError = Arc::default();
        let mut returns = Vec::new();
        let mut queued = Vec::new();
        for out in 0..senders.len() {
            let (tx, free) = bounded(QUEUE + 2);
            returns.push(tx);
            queued.push(QueuedSender {
                out,
                jobs: jobs.clone(),
                free,
                error: error.clone(),
            });
        }
        let err = error.clone();
        let handle = std::thread::Builder::new()
            .name("send".into())
            .spawn(move || {
                if let Some(c) = core {
                    if let Err(e) = crate::net::affinity::pin_current_thread(c) {
                        tracing::warn!(error = %e, "send thread not pinned");
                    }
                }
                run(senders, rx, returns, err);
            })?;
        Ok((SendWorker { _handle: handle }, queued))
    }
}

fn run(
    mut senders: Vec<HeapSender>,
    rx: Receiver<Msg>,
    returns: Vec<Sender<Vec<u8>>>,
    error: FirstError,
) {
    let failed = |e: &io::Error| {
        if let Ok(mut g) = error.lock() {
            g.get_or_insert((e.kind(), e.to_string()));
        }
    };
    for msg in rx.iter() {
        let stopped = error.lock().map(|g| g.is_some()).unwrap_or(true);
        match msg {
            Msg::Job {
                out,
                payload_id,
                heaps,
                buf,
            } => {
                if !stopped {
                    for h in &heaps {
                        let payload = &buf[h.payload.clone()];
                        if let Err(e) = senders[out].send_heap(h.dst, &h.items, payload_id, payload)
                        {
                            failed(&e);
                            break;
                        }
                    }
                }
                let _ = returns[out].try_send(buf);
            }
            Msg::Flush { out, done } => {
                let r = senders[out].flush();
                if let Err(e) = &r {
                    failed(e);
                }
                let _ = done.send(r);
            }
        }
    }
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

    /// Queues `heaps` (payloads in `buf`, item `payload_id`); waits while the queue is
    /// full. Fails with the send thread's first error, if it had one.
    pub fn send(&self, payload_id: u16, heaps: Vec<HeapPart>, buf: Vec<u8>) -> io::Result<()> {
        self.check()?;
        self.jobs
            .send(Msg::Job {
                out: self.out,
                payload_id,
                heaps,
                buf,
            })
            .map_err(|_| io::Error::other("send thread stopped"))
    }

    /// Waits until everything queued so far is sent, then flushes the output's sink.
    pub fn flush(&self) -> io::Result<()> {
        let (done, wait) = bounded(1);
        self.jobs
            .send(Msg::Flush {
                out: self.out,
                done,
            })
            .map_err(|_| io::Error::other("send thread stopped"))?;
        wait.recv()
            .map_err(|_| io::Error::other("send thread stopped"))??;
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
            q[o].send(0x4300, heaps, b).unwrap();
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
        q[0].send(0x4300, h, b).unwrap();
        let (h, b) = job(1, 150);
        q[0].send(0x4300, h, b).unwrap();
        let e = q[0].flush().unwrap_err();
        assert!(e.to_string().contains("gone"), "{e}");
        let (h, b) = job(2, 150);
        assert!(q[0].send(0x4300, h, b).is_err());
        assert_eq!(seen.lock().unwrap().len(), 4);
    }
}
