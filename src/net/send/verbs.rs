//! PeerDirect transmit (feature `ibverbs`): heaps sent by a raw-packet queue pair straight
//! from output items in GPU memory.
//!
//! An output item is a fixed device range (one batch of an output stream: its heaps, one
//! per substream, back to back) registered with the NIC. Every packet's headers (Ethernet,
//! IPv4, UDP, SPEAD) live in a host region registered alongside, laid out once per item and
//! packet when the sender is built; the work-request chains ([`PacketWrs`]) are built then
//! too, so sending an item only rewrites the per-heap values (heap counter and immediates)
//! in its headers and posts its chain: no allocation, no copy of the payload.
//!
//! An item goes back to the free list only when the completion of its last (signalled)
//! packet arrives ([`SendTracker`]); the send queue's budget of work requests is respected
//! by polling completions before posting. [`PeerDirectSender::from_raw`] takes the verbs
//! objects as raw pointers, so the whole path down to `post_send`/`poll_cq` is tested with
//! fake providers; [`PeerDirectSender::open`] makes the real ones.

mod chain;
mod device_items;
mod gpu_mr;

pub use chain::{wr_id, ItemLayout, PacketWrs, SendTracker};
pub use device_items::{DeviceItems, REGISTER_ALIGN};
pub use gpu_mr::GpuMr;

use std::ffi::{c_int, c_void};
use std::io;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use ibverbs_sys::{poll_cq, IbvSge, IbvWc, IBV_WC_SUCCESS};

use super::peerdirect::GpuMrKind;
use crate::net::frame::{write_udp_headers, UDP_HEADERS};
use crate::net::pacing::Pacer;
use crate::net::verbs::{RawSendQp, Verbs};

use crate::spead::{ids, ItemPointer, HEADER_BYTES};

/// One heap of an output item: its destination (index into the sender's destinations) and
/// its payload's byte range inside the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapPlan {
    /// Index into [`PeerDirectConfig::dests`].
    pub dst: usize,
    /// Payload offset inside the item.
    pub offset: u64,
    /// Payload bytes of the heap.
    pub len: u64,
}

/// What the sender sends and how.
#[derive(Debug, Clone)]
pub struct PeerDirectConfig {
    /// Ethernet source address of the frames.
    pub src_mac: [u8; 6],
    /// IPv4 source address and UDP port of the frames.
    pub src: SocketAddrV4,
    /// Destinations (substreams), indexed by [`HeapPlan::dst`].
    pub dests: Vec<SocketAddrV4>,
    /// IPv4 time to live.
    pub ttl: u8,
    /// Payload bytes per packet (as `HeapSender`'s `packet_payload`).
    pub packet_payload: usize,
    /// Immediate items of every data heap, in order (e.g. timestamp, feng_id, frequency).
    pub immediate_ids: Vec<u16>,
    /// The item carrying the payload.
    pub payload_id: u16,
    /// The heaps of one output item.
    pub heaps: Vec<HeapPlan>,
    /// Send work requests the queue pair holds.
    pub send_queue_depth: usize,
    /// Heap counter sequence (as `HeapSender`).
    pub cnt_start: u64,
    /// Heap counter step (at least 1 is used).
    pub cnt_step: u64,
    /// Bytes per second including headers (None: unpaced).
    pub rate: Option<f64>,
}

/// Payload bytes of each data packet (but a heap's last) of a heap with `n_immediates`
/// immediate items, `packet_payload` asked for: as `HeapSender`, the packet size is rounded
/// down to a multiple of 8. Zero where `packet_payload` is too small.
pub fn payload_per_packet(n_immediates: usize, packet_payload: usize) -> usize {
    crate::spead::data_payload_per_packet(n_immediates, packet_payload)
}

impl PeerDirectConfig {
    /// Packets (send work requests) of one output item: every heap's payload in packets
    /// of [`payload_per_packet`] bytes.
    pub fn packets_per_item(&self) -> usize {
        let per_packet = payload_per_packet(self.immediate_ids.len(), self.packet_payload);
        self.heaps
            .iter()
            .map(|h| h.len.div_ceil(per_packet.max(1) as u64) as usize)
            .sum()
    }
}

/// Counters of the PeerDirect sender.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerDirectStats {
    /// Output items sent.
    pub items: u64,
    /// Heaps sent.
    pub heaps: u64,
    /// Packets (send work requests) posted.
    pub packets: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Completions carrying an error status (the item is recycled all the same).
    pub wc_errors: u64,
    /// Completions that matched no item in flight.
    pub stray_completions: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemState {
    Free,
    Filling,
    InFlight,
}

/// Offsets of the per-send fields inside one packet's header.
#[derive(Debug, Clone, Copy)]
struct PacketFields {
    /// Header start in the host region.
    at: usize,
    /// The heap this packet belongs to.
    heap: usize,
}

/// Sends output items from GPU memory through a raw-packet QP.
pub struct PeerDirectSender {
    qp: *mut c_void,
    cq: *mut c_void,
    cfg: PeerDirectConfig,
    /// Device address of each item.
    items: Vec<u64>,
    state: Vec<ItemState>,
    free: Vec<u32>,
    wrs: Vec<PacketWrs>,
    tracker: SendTracker,
    /// Host memory of all packet headers, `header_stride` apart.
    headers: Vec<u8>,
    header_len: usize,
    fields: Vec<PacketFields>,
    packets_per_item: usize,
    /// Per heap of an item: its packets (indices into the item's chain) and its bytes on
    /// the wire.
    heap_packets: Vec<std::ops::Range<usize>>,
    heap_wire: Vec<usize>,
    /// Per item: packets of its latest post (given back to the queue's budget when it
    /// completes).
    posted_packets: Vec<usize>,
    /// Scratch per heap of the item being sent: chosen, and its heap counter.
    chosen: Vec<bool>,
    cnts: Vec<u64>,
    outstanding: usize,
    next_cnt: u64,
    wc: Vec<IbvWc>,
    freed: Vec<u32>,
    pacer: Option<Pacer>,
    /// Keeps the real verbs objects alive (None with fake providers).
    #[allow(dead_code)]
    owner: Option<Box<dyn std::any::Any + Send>>,
    /// Counters so far.
    pub stats: PeerDirectStats,
}

// SAFETY: the QP/CQ pointers are owned by this sender (or its `owner`) and used from the
// thread that owns it.
unsafe impl Send for PeerDirectSender {}

impl PeerDirectSender {
    /// SPEAD header bytes of a data packet (8 + 8 × (4 standard + immediates + payload)).
    pub fn spead_header_len(n_immediates: usize) -> usize {
        crate::spead::data_header_len(n_immediates)
    }

    /// Builds the sender over a live QP and CQ. `items`: device address of each output
    /// item with the lkey of the GPU memory region holding it; `register` registers the
    /// header region (host memory) and returns its lkey.
    ///
    /// # Safety
    /// `qp`/`cq` must be a raw-packet QP in RTS and its send CQ (or fakes whose contexts
    /// provide `post_send`/`poll_cq`), alive as long as the sender; the item ranges must
    /// stay registered and allocated as long as the sender.
    pub unsafe fn from_raw(
        qp: *mut c_void,
        cq: *mut c_void,
        cfg: PeerDirectConfig,
        items: &[(u64, u32)],
        register: impl FnOnce(*mut u8, usize) -> io::Result<u32>,
    ) -> io::Result<Self> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if items.is_empty() || cfg.heaps.is_empty() || cfg.packet_payload == 0 {
            return Err(invalid(
                "PeerDirect needs items, heaps and a packet size".into(),
            ));
        }
        if let Some(h) = cfg
            .heaps
            .iter()
            .find(|h| h.dst >= cfg.dests.len() || h.len == 0)
        {
            return Err(invalid(format!(
                "heap {h:?} has no destination or no payload"
            )));
        }
        let spead = Self::spead_header_len(cfg.immediate_ids.len());
        let per_packet = payload_per_packet(cfg.immediate_ids.len(), cfg.packet_payload);
        if per_packet == 0 {
            return Err(invalid("packet payload too small".into()));
        }
        let header_len = UDP_HEADERS + spead;
        let stride = header_len.div_ceil(64) * 64;
        let packets_per_heap: Vec<usize> = cfg
            .heaps
            .iter()
            .map(|h| h.len.div_ceil(per_packet as u64) as usize)
            .collect();
        let packets_per_item: usize = packets_per_heap.iter().sum();
        if packets_per_item > cfg.send_queue_depth {
            return Err(invalid(format!(
                "an output item needs {packets_per_item} send work requests, the queue holds {}",
                cfg.send_queue_depth
            )));
        }
        let mut headers = vec![0u8; stride * packets_per_item * items.len()];
        let lkey = register(headers.as_mut_ptr(), headers.len())?;
        let base = headers.as_ptr() as u64;
        let mut fields = Vec::with_capacity(packets_per_item);
        let mut wrs = Vec::with_capacity(items.len());
        let mut heap_wire = vec![0; cfg.heaps.len()];
        for (i, &(dptr, payload_lkey)) in items.iter().enumerate() {
            let mut sges = Vec::with_capacity(packets_per_item);
            let mut k = 0;
            for (h, plan) in cfg.heaps.iter().enumerate() {
                let mut off = 0u64;
                while off < plan.len {
                    let len = (plan.len - off).min(per_packet as u64) as usize;
                    let at = (i * packets_per_item + k) * stride;
                    Self::write_static(&mut headers[at..at + header_len], &cfg, plan, off, len);
                    if i == 0 {
                        fields.push(PacketFields { at, heap: h });
                        heap_wire[h] += header_len + len;
                    }
                    sges.push([
                        IbvSge {
                            addr: base + at as u64,
                            length: header_len as u32,
                            lkey,
                        },
                        IbvSge {
                            addr: dptr + plan.offset + off,
                            length: len as u32,
                            lkey: payload_lkey,
                        },
                    ]);
                    off += len as u64;
                    k += 1;
                }
            }
            wrs.push(
                PacketWrs::from_sges(i as u32, sges).ok_or_else(|| invalid("no packets".into()))?,
            );
        }
        let pacer = cfg.rate.filter(|r| *r > 0.0).map(Pacer::new);
        let mut heap_packets = Vec::with_capacity(cfg.heaps.len());
        let mut at = 0;
        for n in &packets_per_heap {
            heap_packets.push(at..at + n);
            at += n;
        }
        let n_heaps = cfg.heaps.len();
        Ok(PeerDirectSender {
            qp,
            cq,
            next_cnt: cfg.cnt_start,
            cfg,
            items: items.iter().map(|i| i.0).collect(),
            state: vec![ItemState::Free; items.len()],
            free: (0..items.len() as u32).rev().collect(),
            wrs,
            tracker: SendTracker::default(),
            headers,
            header_len,
            fields,
            packets_per_item,
            heap_packets,
            heap_wire,
            posted_packets: vec![0; items.len()],
            chosen: vec![false; n_heaps],
            cnts: vec![0; n_heaps],
            outstanding: 0,
            wc: vec![IbvWc::default(); 32],
            freed: Vec::new(),
            pacer,
            owner: None,
            stats: PeerDirectStats::default(),
        })
    }

    /// The parts of a packet header that never change: Ethernet, IPv4 (checksum
    /// included: identification 0, don't fragment), UDP (checksum 0) and the SPEAD header
    /// with the heap size, offset and length; heap counter and immediates are written per
    /// send.
    fn write_static(h: &mut [u8], cfg: &PeerDirectConfig, plan: &HeapPlan, off: u64, len: usize) {
        let dst = cfg.dests[plan.dst];
        let spead = Self::spead_header_len(cfg.immediate_ids.len());
        write_udp_headers(h, cfg.src_mac, None, cfg.src, dst, cfg.ttl, spead + len);
        crate::spead::write_data_header(
            &mut h[42..42 + spead],
            0,
            plan.len,
            off,
            len as u64,
            cfg.immediate_ids.iter().map(|&id| (id, 0)),
            cfg.payload_id,
        );
    }

    /// Output items (free or not).
    pub fn n_items(&self) -> usize {
        self.items.len()
    }

    /// Items in flight on the NIC.
    pub fn in_flight(&self) -> usize {
        self.tracker.in_flight()
    }

    /// Packets (send work requests) of one item.
    pub fn packets_per_item(&self) -> usize {
        self.packets_per_item
    }

    /// Device address of item `item` (where the pipeline writes the batch).
    pub fn item_address(&self, item: u32) -> Option<u64> {
        self.items.get(item as usize).copied()
    }

    /// The header bytes of packet `k` of `item` (for tests and inspection).
    pub fn header(&self, item: u32, k: usize) -> &[u8] {
        let at = self.fields[k].at + item as usize * (self.fields.len() * self.stride());
        &self.headers[at..at + self.header_len]
    }

    fn stride(&self) -> usize {
        self.header_len.div_ceil(64) * 64
    }

    /// Polls the completion queue once; items whose last packet completed become free.
    /// Returns how many items were freed.
    pub fn poll(&mut self) -> io::Result<usize> {
        // SAFETY: cq is live; wc has room for its length.
        let n = unsafe { poll_cq(self.cq, self.wc.len() as c_int, self.wc.as_mut_ptr()) };
        if n < 0 {
            return Err(io::Error::other(format!("ibv_poll_cq failed ({n})")));
        }
        self.freed.clear();
        for k in 0..n as usize {
            let wc = self.wc[k];
            if wc.status != IBV_WC_SUCCESS {
                self.stats.wc_errors += 1;
            }
            let before = self.tracker.stray_completions;
            self.tracker.completed(wc.wr_id, &mut self.freed);
            self.stats.stray_completions += self.tracker.stray_completions - before;
        }
        for &i in &self.freed {
            if let Some(s) = self.state.get_mut(i as usize) {
                if *s == ItemState::InFlight {
                    *s = ItemState::Free;
                    self.free.push(i);
                    let posted = std::mem::take(&mut self.posted_packets[i as usize]);
                    self.outstanding = self.outstanding.saturating_sub(posted);
                }
            }
        }
        Ok(self.freed.len())
    }

    /// A free item to fill, polling completions for up to `timeout` if none is free.
    pub fn acquire(&mut self, timeout: Duration) -> io::Result<u32> {
        let start = Instant::now();
        loop {
            if let Some(i) = self.free.pop() {
                self.state[i as usize] = ItemState::Filling;
                return Ok(i);
            }
            self.poll()?;
            if self.free.is_empty() && start.elapsed() >= timeout {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no output item came back from the NIC within {timeout:?} ({} in flight)",
                        self.in_flight()
                    ),
                ));
            }
        }
    }

    /// Gives back an acquired item that will not be sent (its batch did not complete).
    pub fn release(&mut self, item: u32) {
        if self.state.get(item as usize) == Some(&ItemState::Filling) {
            self.state[item as usize] = ItemState::Free;
            self.free.push(item);
        }
    }

    /// Sends item `item` (acquired and filled): `values` holds the immediates of every
    /// heap in order (heaps × immediate ids). Waits for room in the send queue (up to
    /// `timeout`) and for the pacer.
    pub fn send(&mut self, item: u32, values: &[u64], timeout: Duration) -> io::Result<()> {
        self.send_heaps(item, values, |_| true, timeout)
    }

    /// [`Self::send`] of the heaps `h` of the item for which `wanted(h)` holds (asked once
    /// per heap), in order: only they take heap counters (the next ones of the sequence)
    /// and only their packets are posted, the last of them signalled; the item comes back
    /// when that packet completes. With no heap wanted, nothing is posted and the item is
    /// free again at once. `values` holds the immediates of every heap of the item, wanted
    /// or not.
    pub fn send_heaps(
        &mut self,
        item: u32,
        values: &[u64],
        mut wanted: impl FnMut(usize) -> bool,
        timeout: Duration,
    ) -> io::Result<()> {
        let n_imm = self.cfg.immediate_ids.len();
        if self.state.get(item as usize) != Some(&ItemState::Filling) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("output item {item} was not acquired"),
            ));
        }
        if values.len() != self.cfg.heaps.len() * n_imm {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} immediate values for {} heaps of {n_imm}",
                    values.len(),
                    self.cfg.heaps.len()
                ),
            ));
        }
        let (mut packets, mut wire, mut heaps, mut bytes) = (0, 0, 0u64, 0u64);
        for (h, c) in self.chosen.iter_mut().enumerate() {
            *c = wanted(h);
            if *c {
                packets += self.heap_packets[h].len();
                wire += self.heap_wire[h];
                heaps += 1;
                bytes += self.cfg.heaps[h].len;
            }
        }
        if heaps == 0 {
            self.release(item);
            return Ok(());
        }
        let start = Instant::now();
        while self.outstanding + packets > self.cfg.send_queue_depth {
            self.poll()?;
            if start.elapsed() >= timeout {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the send queue did not drain",
                ));
            }
        }
        for (c, &on) in self.cnts.iter_mut().zip(&self.chosen) {
            if on {
                *c = self.next_cnt;
                self.next_cnt = self.next_cnt.wrapping_add(self.cfg.cnt_step.max(1));
            }
        }
        let base = item as usize * self.fields.len() * self.stride();
        for f in self.fields.iter().filter(|f| self.chosen[f.heap]) {
            let s = base + f.at + UDP_HEADERS + HEADER_BYTES;
            let h = &mut self.headers[s..];
            let cnt = ItemPointer::immediate(ids::HEAP_CNT, self.cnts[f.heap]);
            h[..8].copy_from_slice(&cnt.to_raw().to_be_bytes());
            for (k, &id) in self.cfg.immediate_ids.iter().enumerate() {
                let p = ItemPointer::immediate(id, values[f.heap * n_imm + k]);
                h[8 * (4 + k)..8 * (5 + k)].copy_from_slice(&p.to_raw().to_be_bytes());
            }
        }
        if let Some(p) = self.pacer.as_mut() {
            p.wait(wire);
        }
        let wrs = &mut self.wrs[item as usize];
        let runs = self
            .heap_packets
            .iter()
            .zip(&self.chosen)
            .filter(|(_, &on)| on)
            .map(|(r, _)| r.clone());
        let (first, last) = wrs
            .link_runs(runs)
            .ok_or_else(|| io::Error::other("no packets to post"))?;
        // SAFETY: the QP is live and has room for the chain (checked above); headers and
        // items stay registered while the sender lives.
        unsafe { wrs.post_from(self.qp, first) }?;
        self.tracker.posted_last(item, last);
        self.state[item as usize] = ItemState::InFlight;
        self.posted_packets[item as usize] = packets;
        self.outstanding += packets;
        self.stats.items += 1;
        self.stats.heaps += heaps;
        self.stats.packets += packets as u64;
        self.stats.bytes += bytes;
        Ok(())
    }

    /// Waits (up to `timeout`) until every item is back from the NIC.
    pub fn flush(&mut self, timeout: Duration) -> io::Result<()> {
        let start = Instant::now();
        while self.in_flight() > 0 {
            self.poll()?;
            if start.elapsed() >= timeout {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} output items still in flight", self.in_flight()),
                ));
            }
        }
        Ok(())
    }

    /// The real thing: opens the RDMA device, registers the GPU allocation that holds
    /// `n_items` items of `item_bytes` at `dptr` (`kind`: dmabuf or nvidia-peermem) and the
    /// header region, and builds the sender.
    ///
    /// The registered range is `n_items × item_bytes` rounded up to [`REGISTER_ALIGN`].
    ///
    /// # Safety
    /// `dptr..dptr + (n_items × item_bytes).next_multiple_of(REGISTER_ALIGN)` must be a live
    /// CUDA allocation of the current context, `dptr` aligned to [`REGISTER_ALIGN`] (as
    /// [`DeviceItems::alloc`] makes them), kept alive as long as the sender.
    pub unsafe fn open(
        device: Option<&str>,
        port: u8,
        cfg: PeerDirectConfig,
        dptr: u64,
        item_bytes: usize,
        n_items: usize,
        kind: GpuMrKind,
    ) -> io::Result<Self> {
        let qp = Box::new(RawSendQp::open(device, port, cfg.send_queue_depth)?);
        let verbs: &'static Verbs = &*(&qp.verbs as *const _);
        let len = (item_bytes * n_items).next_multiple_of(REGISTER_ALIGN);
        let gpu = GpuMr::register(verbs, qp.pd, dptr, len, kind)?;
        let lkey = gpu.lkey;
        Self::over_qp(qp, cfg, (dptr, item_bytes, n_items), lkey, Some(gpu))
    }

    /// The sender over an open QP whose `items.2` output items of `items.1` bytes start at
    /// `items.0`, registered under `lkey`; `gpu`, the GPU region holding them if any, is
    /// released before the QP (which owns the verbs), here on error as in the sender.
    ///
    /// # Safety
    /// As [`Self::from_raw`]: the items stay registered and allocated as long as the sender.
    unsafe fn over_qp(
        mut qp: Box<RawSendQp>,
        cfg: PeerDirectConfig,
        items: (u64, usize, usize),
        lkey: u32,
        gpu: Option<GpuMr<'static>>,
    ) -> io::Result<Self> {
        let (base, item_bytes, n_items) = items;
        let items: Vec<(u64, u32)> = (0..n_items)
            .map(|i| (base + (i * item_bytes) as u64, lkey))
            .collect();
        let (raw_qp, raw_cq) = (qp.qp, qp.cq);
        let qp_ref: *mut RawSendQp = &mut *qp;
        let mut s = Self::from_raw(raw_qp, raw_cq, cfg, &items, |p, len| {
            (*qp_ref).register_host(p, len)
        })?;
        s.owner = Some(Box::new(PeerDirectOwner { gpu, qp }));
        Ok(s)
    }
}

impl PeerDirectSender {
    /// [`Self::open`] with the output items in host memory (`memory`, `n_items` items of
    /// `item_bytes`), registered with the NIC: the engine writes each batch into an item
    /// and the NIC reads it from there (no copy into a send ring).
    ///
    /// # Safety
    /// `memory..memory + item_bytes × n_items` must stay allocated, and be written only
    /// through acquired items, as long as the sender.
    pub unsafe fn open_host(
        device: Option<&str>,
        port: u8,
        cfg: PeerDirectConfig,
        memory: *mut u8,
        item_bytes: usize,
        n_items: usize,
    ) -> io::Result<Self> {
        let mut qp = Box::new(RawSendQp::open(device, port, cfg.send_queue_depth)?);
        let lkey = qp.register_host(memory, item_bytes * n_items)?;
        Self::over_qp(qp, cfg, (memory as u64, item_bytes, n_items), lkey, None)
    }
}

impl Drop for PeerDirectSender {
    fn drop(&mut self) {
        if self.owner.is_some() {
            // Let the NIC finish with the headers and items before they are released.
            let _ = self.flush(Duration::from_millis(200));
            self.owner.take();
        }
    }
}

/// The verbs objects behind a real sender; the GPU region must go before the QP that
/// holds the library.
struct PeerDirectOwner {
    gpu: Option<GpuMr<'static>>,
    #[allow(dead_code)]
    qp: Box<RawSendQp>,
}

// SAFETY: the region and the QP are owned here and only dropped, from the sender's thread.
unsafe impl Send for PeerDirectOwner {}

impl Drop for PeerDirectOwner {
    fn drop(&mut self) {
        self.gpu.take();
    }
}

#[cfg(test)]
mod tests;
