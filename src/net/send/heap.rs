//! Heap transmission for the engines: heaps with repeat pointers and one payload item,
//! packets of at most `packet_payload` payload bytes, heap counters from a sequence
//! (start, step), optional pacing, descriptor and stop heaps. Payloads are borrowed from
//! the engine's output buffers: nothing is copied before the transport.

use std::io;
use std::net::SocketAddrV4;
use std::time::Instant;

use super::PacketSink;
use crate::net::pacing::Pacer;
use crate::spead::{Descriptor, HeapBuilder};
use crate::telemetry::stages::SendStages;

/// Counters of a heap sender.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendStats {
    /// Heaps sent (data heaps).
    pub heaps: u64,
    /// Packets sent for data heaps.
    pub packets: u64,
    /// Payload bytes of data heaps.
    pub bytes: u64,
    /// Descriptor heaps sent (one per call, whatever the number of destinations).
    pub descriptor_heaps: u64,
}

/// Sends heaps to a fixed list of destinations (substreams).
pub struct HeapSender {
    sink: Box<dyn PacketSink>,
    /// Destinations (substreams), indexed by `send_heap`'s `dst`.
    pub dests: Vec<SocketAddrV4>,
    next_cnt: u64,
    cnt_step: u64,
    packet_payload: usize,
    pacer: Option<Pacer>,
    /// Counters so far.
    pub stats: SendStats,
    /// Where the time goes (pacing, the sink), when timed.
    stages: Option<SendStages>,
}

impl HeapSender {
    /// `cnt_start`/`cnt_step`: the heap counter sequence (katgpucbf's `set_cnt_sequence`).
    /// `rate`: bytes per second including headers (None or an offline sink: no pacing).
    pub fn new(
        sink: Box<dyn PacketSink>,
        dests: Vec<SocketAddrV4>,
        cnt_start: u64,
        cnt_step: u64,
        packet_payload: usize,
        rate: Option<f64>,
    ) -> Self {
        let pacer = match rate {
            Some(r) if !sink.is_offline() && r > 0.0 => Some(Pacer::new(r)),
            _ => None,
        };
        HeapSender {
            sink,
            dests,
            next_cnt: cnt_start,
            cnt_step: cnt_step.max(1),
            packet_payload,
            pacer,
            stats: SendStats::default(),
            stages: None,
        }
    }

    /// The heap counter the next heap (data or control) gets: a sender that takes over
    /// this stream's data heaps goes on from here.
    pub fn next_cnt(&self) -> u64 {
        self.next_cnt
    }

    /// The counter step (the number of engines sharing the stream).
    pub fn cnt_step(&self) -> u64 {
        self.cnt_step
    }

    /// True if the sink has its own notion of time (a file): the packets' order there is
    /// the output, so the heaps are best sent from the thread that makes them.
    pub fn is_offline(&self) -> bool {
        self.sink.is_offline()
    }

    /// Counts the time of this sender's data heaps on thread `thread`'s stages
    /// `build`, `pace` and `sink`.
    pub fn time_stages(&mut self, thread: &str) {
        self.stages = Some(SendStages::new(thread));
    }

    /// Sends one data heap to destination `dst`: the immediates in order, then `payload`
    /// as item `payload_id` at offset 0.
    pub fn send_heap(
        &mut self,
        dst: usize,
        immediates: &[(u16, u64)],
        payload_id: u16,
        payload: &[u8],
    ) -> io::Result<()> {
        let mut t = Instant::now();
        let cnt = self.next_cnt;
        self.next_cnt = self.next_cnt.wrapping_add(self.cnt_step);
        let mut h = HeapBuilder::new(cnt);
        for &(id, v) in immediates {
            h = h.immediate(id, v);
        }
        h = h.addressed(payload_id, payload);
        let header_bytes = crate::spead::HEADER_BYTES + 8 * (4 + immediates.len() + 1);
        let packets = h
            .packets(header_bytes + self.packet_payload, true)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let dst = *self.dests.get(dst).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("no destination {dst}"))
        })?;
        let parts: Vec<Vec<&[u8]>> = packets
            .iter()
            .map(|p| {
                std::iter::once(&p.header[..])
                    .chain(p.payload.iter().copied())
                    .collect()
            })
            .collect();
        if let Some(st) = &self.stages {
            t = st.build.since(t);
        }
        for chunk in parts.chunks(32) {
            if let Some(p) = self.pacer.as_mut() {
                p.wait(
                    chunk
                        .iter()
                        .map(|v| v.iter().map(|s| s.len()).sum::<usize>())
                        .sum(),
                );
                if let Some(st) = &self.stages {
                    t = st.pace.since(t);
                }
            }
            let batch: Vec<(SocketAddrV4, &[&[u8]])> =
                chunk.iter().map(|v| (dst, &v[..])).collect();
            self.sink.send_batch(&batch)?;
            if let Some(st) = &self.stages {
                t = st.sink.since(t);
            }
        }
        self.stats.heaps += 1;
        self.stats.packets += packets.len() as u64;
        self.stats.bytes += payload.len() as u64;
        Ok(())
    }

    /// Sends a descriptor heap to every destination. Not paced.
    pub fn send_descriptors(
        &mut self,
        descriptors: &[Descriptor],
        max_packet_size: usize,
    ) -> io::Result<()> {
        let mut h = HeapBuilder::new(0);
        for d in descriptors {
            h = h.descriptor(d);
        }
        self.send_to_all(h, max_packet_size)?;
        self.stats.descriptor_heaps += 1;
        Ok(())
    }

    /// Sends a stream-control stop heap to every destination.
    pub fn send_stop(&mut self) -> io::Result<()> {
        self.send_to_all(HeapBuilder::new(0).stop(), 1500)
    }

    /// Sends a control heap (descriptors, stop) to every destination, unpaced. Its counter
    /// comes from the stream's sequence, like data heaps, so counters never collide.
    fn send_to_all(&mut self, mut heap: HeapBuilder<'_>, max_packet_size: usize) -> io::Result<()> {
        heap.cnt = self.next_cnt;
        self.next_cnt = self.next_cnt.wrapping_add(self.cnt_step);
        let packets = heap
            .packets(max_packet_size, false)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        for dst in self.dests.clone() {
            for p in &packets {
                let parts: Vec<&[u8]> = std::iter::once(&p.header[..])
                    .chain(p.payload.iter().copied())
                    .collect();
                self.sink.send(dst, &parts)?;
            }
        }
        Ok(())
    }

    /// Flushes the sink (for files: writes what is buffered).
    pub fn flush(&mut self) -> io::Result<()> {
        self.sink.flush()
    }
}
