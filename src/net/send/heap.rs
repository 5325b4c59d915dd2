//! Heap transmission for the engines: heaps with repeat pointers and one payload item,
//! packets of at most `packet_payload` payload bytes, heap counters from a sequence
//! (start, step), optional pacing, descriptor and stop heaps. Payloads are borrowed from
//! the engine's output buffers: nothing is copied before the transport.

use std::io;
use std::net::SocketAddrV4;
use std::time::Instant;

use super::PacketSink;
use crate::net::pacing::Pacer;
use crate::spead::{
    data_header_len, data_payload_per_packet, patch_data_header, write_data_header, Descriptor,
    HeapBuilder,
};
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
    /// The packet headers of the heap being sent (kept to save an allocation per heap).
    headers: Vec<u8>,
}

/// Packets handed to the sink at once (one pacing step).
const SEND_BATCH: usize = 32;

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
            headers: Vec::new(),
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
    /// as item `payload_id` at offset 0, every pointer repeated in every packet. The
    /// packets are what [`HeapBuilder::packets`] makes of that heap; their headers are
    /// written into one buffer the sender keeps (one template, then the offset and length
    /// patched per packet), so a heap costs no allocation.
    pub fn send_heap(
        &mut self,
        dst: usize,
        immediates: &[(u16, u64)],
        payload_id: u16,
        payload: &[u8],
    ) -> io::Result<()> {
        let dst = self.destination(dst)?;
        if payload.is_empty() {
            return self.send_empty_heap(dst, immediates, payload_id);
        }
        let mut t = Instant::now();
        let per_packet = data_payload_per_packet(immediates.len(), self.packet_payload);
        let hlen = data_header_len(immediates.len());
        if per_packet == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "packet payload {} cannot hold the item pointers of a data heap ({hlen} header bytes)",
                    self.packet_payload
                ),
            ));
        }
        let cnt = self.next_cnt;
        self.next_cnt = self.next_cnt.wrapping_add(self.cnt_step);
        let n_packets = payload.len().div_ceil(per_packet);
        let heap_size = payload.len() as u64;
        self.headers.resize(n_packets * hlen, 0);
        let (first, rest) = self.headers.split_at_mut(hlen);
        write_data_header(
            first,
            cnt,
            heap_size,
            0,
            per_packet.min(payload.len()) as u64,
            immediates.iter().copied(),
            payload_id,
        );
        for (k, h) in rest.chunks_exact_mut(hlen).enumerate() {
            let offset = (k + 1) * per_packet;
            h.copy_from_slice(first);
            let len = per_packet.min(payload.len() - offset);
            patch_data_header(h, offset as u64, len as u64);
        }
        if let Some(st) = &self.stages {
            t = st.build.since(t);
        }
        let mut parts: [[&[u8]; 2]; SEND_BATCH] = [[&[]; 2]; SEND_BATCH];
        for (b, headers) in self.headers.chunks(SEND_BATCH * hlen).enumerate() {
            let mut bytes = 0;
            for (k, h) in headers.chunks_exact(hlen).enumerate() {
                let offset = (b * SEND_BATCH + k) * per_packet;
                let p = &payload[offset..(offset + per_packet).min(payload.len())];
                parts[k] = [h, p];
                bytes += hlen + p.len();
            }
            let n = headers.len() / hlen;
            if let Some(p) = self.pacer.as_mut() {
                p.wait(bytes);
                if let Some(st) = &self.stages {
                    t = st.pace.since(t);
                }
            }
            let batch: [(SocketAddrV4, &[&[u8]]); SEND_BATCH] =
                std::array::from_fn(|k| (dst, &parts[k][..]));
            self.sink.send_batch(&batch[..n])?;
            if let Some(st) = &self.stages {
                t = st.sink.since(t);
            }
        }
        self.stats.heaps += 1;
        self.stats.packets += n_packets as u64;
        self.stats.bytes += payload.len() as u64;
        Ok(())
    }

    /// Destination `dst`'s address.
    fn destination(&self, dst: usize) -> io::Result<SocketAddrV4> {
        self.dests.get(dst).copied().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("no destination {dst}"))
        })
    }

    /// A data heap with no payload, through [`HeapBuilder`]: one packet with a NULL
    /// pointer and a pad byte, as spead2 sends it.
    fn send_empty_heap(
        &mut self,
        dst: SocketAddrV4,
        immediates: &[(u16, u64)],
        payload_id: u16,
    ) -> io::Result<()> {
        let cnt = self.next_cnt;
        self.next_cnt = self.next_cnt.wrapping_add(self.cnt_step);
        let mut h = HeapBuilder::new(cnt);
        for &(id, v) in immediates {
            h = h.immediate(id, v);
        }
        h = h.addressed(payload_id, &[]);
        let packets = h
            .packets(
                data_header_len(immediates.len()) + self.packet_payload,
                true,
            )
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        for p in &packets {
            if let Some(pacer) = self.pacer.as_mut() {
                pacer.wait(p.len());
            }
            let parts: Vec<&[u8]> = std::iter::once(&p.header[..])
                .chain(p.payload.iter().copied())
                .collect();
            self.sink.send(dst, &parts)?;
        }
        self.stats.heaps += 1;
        self.stats.packets += packets.len() as u64;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    type Seen = Arc<Mutex<Vec<(SocketAddrV4, Vec<u8>, usize)>>>;

    /// Records every packet and the size of the batch it came in.
    struct Record(Seen);

    impl PacketSink for Record {
        fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> io::Result<()> {
            self.0.lock().unwrap().push((dst, parts.concat(), 1));
            Ok(())
        }
        fn send_batch(&mut self, packets: &[(SocketAddrV4, &[&[u8]])]) -> io::Result<()> {
            let mut g = self.0.lock().unwrap();
            for (dst, parts) in packets {
                g.push((*dst, parts.concat(), packets.len()));
            }
            Ok(())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// The packets `send_heap` sends are those HeapBuilder makes of the same heap: sizes
    /// around the packet boundary, several immediates, packet sizes not a multiple of 8,
    /// the counter sequence, and heaps of more than one send batch.
    #[test]
    fn send_heap_sends_what_the_heap_builder_makes() {
        let dests = vec![
            SocketAddrV4::new([239, 1, 2, 3].into(), 7148),
            SocketAddrV4::new([239, 1, 2, 4].into(), 7149),
        ];
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for packet_payload in [1024usize, 1021, 8192] {
            for imms in [
                vec![],
                vec![(0x1600u16, 123_456_789u64)],
                vec![(0x1600, 5), (0x4101, 3), (0x4103, 2)],
            ] {
                let seen = Seen::default();
                let mut s = HeapSender::new(
                    Box::new(Record(seen.clone())),
                    dests.clone(),
                    3,
                    4,
                    packet_payload,
                    None,
                );
                let sizes = [
                    1usize,
                    7,
                    1000,
                    1016,
                    1017,
                    8192,
                    8193,
                    40 * 1024 + 3,
                    300_000,
                ];
                let mut want = Vec::new();
                for (i, &n) in sizes.iter().enumerate() {
                    let cnt = s.next_cnt();
                    s.send_heap(i % 2, &imms, 0x4300, &data[..n]).unwrap();
                    let mut h = HeapBuilder::new(cnt);
                    for &(id, v) in &imms {
                        h = h.immediate(id, v);
                    }
                    let h = h.addressed(0x4300, &data[..n]);
                    let hdr = data_header_len(imms.len());
                    for p in h.packets(hdr + packet_payload, true).unwrap() {
                        want.push((dests[i % 2], p.to_bytes()));
                    }
                }
                let got = seen.lock().unwrap();
                assert_eq!(
                    got.len(),
                    want.len(),
                    "payload {packet_payload}, {} immediates",
                    imms.len()
                );
                for (k, ((d, b, batch), (wd, wb))) in got.iter().zip(&want).enumerate() {
                    assert_eq!((d, b), (wd, wb), "packet {k}, payload {packet_payload}");
                    assert!(*batch <= SEND_BATCH);
                }
                assert!(got.iter().any(|p| p.2 == SEND_BATCH), "no full batch");
                assert_eq!(s.stats.heaps, sizes.len() as u64);
                assert_eq!(s.stats.packets, want.len() as u64);
                assert_eq!(s.stats.bytes, sizes.iter().sum::<usize>() as u64);
                assert_eq!(s.next_cnt(), 3 + 4 * sizes.len() as u64);
            }
        }
    }

    #[test]
    fn an_empty_heap_and_a_tiny_packet_size_are_handled() {
        let seen = Seen::default();
        let dst = SocketAddrV4::new([127, 0, 0, 1].into(), 9);
        let mut s = HeapSender::new(Box::new(Record(seen.clone())), vec![dst], 0, 1, 64, None);
        s.send_heap(0, &[(0x1600, 1)], 0x4300, &[]).unwrap();
        let empty = HeapBuilder::new(0)
            .immediate(0x1600, 1)
            .addressed(0x4300, &[]);
        let want = empty.packets(data_header_len(1) + 64, true).unwrap();
        let got: Vec<Vec<u8>> = seen.lock().unwrap().iter().map(|p| p.1.clone()).collect();
        assert_eq!(got, want.iter().map(|p| p.to_bytes()).collect::<Vec<_>>());
        // No room for payload (a packet size of 4 bytes): a clear error, nothing sent.
        let mut s = HeapSender::new(Box::new(Record(seen.clone())), vec![dst], 0, 1, 4, None);
        let e = s
            .send_heap(0, &[(0x1600, 1)], 0x4300, &[1; 100])
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("packet payload 4"), "{e}");
        let e = s.send_heap(5, &[], 0x4300, &[1; 100]).unwrap_err();
        assert!(e.to_string().contains("no destination 5"), "{e}");
        assert_eq!(seen.lock().unwrap().len(), 1);
    }
}
