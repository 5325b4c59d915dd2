//! A correlation output sent straight from GPU memory (feature `ibverbs`,
//! `--use-peerdirect`): each dump is written by the correlator on the device into an item of
//! one device allocation registered with the NIC ([`DeviceItems`]), and the item's
//! pre-built work-request chain is posted ([`PeerDirectSender`]); the item comes back only
//! when its last packet's completion arrives. The heaps on the wire are the staged path's
//! ([`crate::net::send::heap::HeapSender::send_heap`]): same destination, heap counters
//! (going on from the staged sender's, which sent the descriptors), immediates
//! (`timestamp`, `frequency`) and packet boundaries. The beams likewise ([`BDirect`]): one
//! item per batch holding every beam, the heaps of the beams being captured posted.

use std::net::SocketAddrV4;
use std::time::Duration;

use crate::net::send::verbs::{DeviceItems, HeapPlan, PeerDirectConfig, PeerDirectSender};
use crate::spead::ids;

/// The sender's configuration for items holding one heap of `heap_bytes` per destination,
/// back to back (heap h to `dsts[h]`), with the item ids `(immediates, payload)`;
/// heap counters from `cnt` (start, step), `packet_payload` bytes per packet, `rate` bytes/s
/// (None: unpaced), from `src` (address, MAC, TTL). The send queue holds at least one
/// whole item.
fn items_config(
    heap_bytes: usize,
    dsts: Vec<SocketAddrV4>,
    (immediate_ids, payload_id): (Vec<u16>, u16),
    cnt: (u64, u64),
    packet_payload: usize,
    rate: Option<f64>,
    src: (SocketAddrV4, [u8; 6], u8),
) -> PeerDirectConfig {
    let mut cfg = PeerDirectConfig {
        src_mac: src.1,
        src: src.0,
        heaps: (0..dsts.len())
            .map(|h| HeapPlan {
                dst: h,
                offset: (h * heap_bytes) as u64,
                len: heap_bytes as u64,
            })
            .collect(),
        dests: dsts,
        ttl: src.2,
        packet_payload,
        immediate_ids,
        payload_id,
        send_queue_depth: 0,
        cnt_start: cnt.0,
        cnt_step: cnt.1.max(1),
        rate,
    };
    cfg.send_queue_depth = cfg.packets_per_item().max(4096);
    cfg
}

/// The sender's configuration for one X output's heaps of `heap_bytes` to `dst` (one dump
/// per item; [`items_config`]'s other terms).
pub fn x_direct_config(
    heap_bytes: usize,
    dst: SocketAddrV4,
    cnt: (u64, u64),
    packet_payload: usize,
    rate: Option<f64>,
    src: (SocketAddrV4, [u8; 6], u8),
) -> PeerDirectConfig {
    let ids = (vec![ids::TIMESTAMP, ids::FREQUENCY], ids::XENG_RAW);
    items_config(heap_bytes, vec![dst], ids, cnt, packet_payload, rate, src)
}

/// Output items in device memory and the sender posting them: what [`XDirect`] and
/// [`BDirect`] share (they dereference to it).
pub struct DirectItems {
    sender: PeerDirectSender,
    memory: DeviceItems,
    item_bytes: usize,
    timeout: Duration,
}

impl DirectItems {
    /// `memory.len() / item_bytes` items of `item_bytes` in device memory, sent by the
    /// sender `open` builds over them (given the items' device address; it registers
    /// them).
    fn on_device(
        item_bytes: usize,
        memory: DeviceItems,
        open: impl FnOnce(u64) -> std::io::Result<PeerDirectSender>,
    ) -> std::io::Result<Self> {
        let sender = open(memory.base())?;
        memory.check_fits(sender.n_items(), item_bytes)?;
        Ok(DirectItems {
            sender,
            memory,
            item_bytes,
            timeout: Duration::from_secs(1),
        })
    }

    /// A free item (polling completions while none is) and its device address.
    fn take(&mut self) -> std::io::Result<(u32, u64)> {
        let item = self.sender.acquire(self.timeout)?;
        Ok((
            item,
            self.memory.base() + item as u64 * self.item_bytes as u64,
        ))
    }

    /// Gives back an item whose heaps are not sent.
    pub fn release(&mut self, item: u32) {
        self.sender.release(item);
    }

    /// Waits until the NIC has sent every item.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.sender.flush(self.timeout)
    }

    /// Items sent, in flight and in all (counters of the sender).
    pub fn sender(&self) -> &PeerDirectSender {
        &self.sender
    }

    /// The items' device memory.
    pub fn memory(&self) -> &DeviceItems {
        &self.memory
    }

    /// Bytes of one item.
    pub fn item_bytes(&self) -> usize {
        self.item_bytes
    }
}

/// One correlation output's device items (one dump each) and their sender.
pub struct XDirect {
    items: DirectItems,
    /// The heaps' `frequency` item (the engine's first channel).
    channel_offset: u64,
}

impl std::ops::Deref for XDirect {
    type Target = DirectItems;
    fn deref(&self) -> &DirectItems {
        &self.items
    }
}

impl std::ops::DerefMut for XDirect {
    fn deref_mut(&mut self) -> &mut DirectItems {
        &mut self.items
    }
}

impl XDirect {
    /// `memory.len() / item_bytes` items of `item_bytes` (one dump each) in device memory,
    /// sent by the sender `open` builds over them (given the items' device address; it
    /// registers them); the heaps carry `channel_offset` as their `frequency`.
    pub fn on_device(
        item_bytes: usize,
        channel_offset: u64,
        memory: DeviceItems,
        open: impl FnOnce(u64) -> std::io::Result<PeerDirectSender>,
    ) -> std::io::Result<Self> {
        Ok(XDirect {
            items: DirectItems::on_device(item_bytes, memory, open)?,
            channel_offset,
        })
    }

    /// A free item (polling completions while none is), and its device range (address,
    /// bytes).
    pub fn acquire(&mut self) -> std::io::Result<(u32, u64, usize)> {
        let (item, at) = self.items.take()?;
        Ok((item, at, self.items.item_bytes))
    }

    /// Sends the dump of the accumulation at `ts` written into `item`: one heap.
    pub fn send(&mut self, item: u32, ts: u64) -> std::io::Result<()> {
        let d = &mut self.items;
        d.sender.send(item, &[ts, self.channel_offset], d.timeout)
    }
}

/// The sender's configuration for the beams' heaps: one item per batch holding every beam
/// (`beam_bytes` each, back to back in beam order), beam b's heap to `dsts[b]`, the beams
/// sharing one heap counter sequence and `rate` ([`items_config`]'s other terms).
pub fn b_direct_config(
    beam_bytes: usize,
    dsts: Vec<SocketAddrV4>,
    cnt: (u64, u64),
    packet_payload: usize,
    rate: Option<f64>,
    src: (SocketAddrV4, [u8; 6], u8),
) -> PeerDirectConfig {
    let ids = (
        vec![ids::TIMESTAMP, ids::FREQUENCY, ids::BEAM_ANTS],
        ids::BF_RAW,
    );
    items_config(beam_bytes, dsts, ids, cnt, packet_payload, rate, src)
}

/// The beams' device items (one batch of every beam each) and their sender.
pub struct BDirect {
    items: DirectItems,
    beam_bytes: usize,
    n_beams: usize,
    /// The heaps' `frequency` item (the engine's first channel).
    channel_offset: u64,
    /// Scratch: the immediates of every heap of an item.
    values: Vec<u64>,
}

impl std::ops::Deref for BDirect {
    type Target = DirectItems;
    fn deref(&self) -> &DirectItems {
        &self.items
    }
}

impl std::ops::DerefMut for BDirect {
    fn deref_mut(&mut self) -> &mut DirectItems {
        &mut self.items
    }
}

impl BDirect {
    /// Items of `n_beams` × `beam_bytes` in `memory` (as many as the sender `open` builds
    /// over them, given their device address; it registers them), the heaps carrying
    /// `channel_offset` as their `frequency`.
    pub fn on_device(
        beam_bytes: usize,
        n_beams: usize,
        channel_offset: u64,
        memory: DeviceItems,
        open: impl FnOnce(u64) -> std::io::Result<PeerDirectSender>,
    ) -> std::io::Result<Self> {
        Ok(BDirect {
            items: DirectItems::on_device(n_beams * beam_bytes, memory, open)?,
            beam_bytes,
            n_beams,
            channel_offset,
            values: vec![0; 3 * n_beams],
        })
    }

    /// A free item (polling completions while none is); the device addresses of its
    /// beams (one batch's, in beam order) are appended to `dsts`.
    pub fn acquire(&mut self, dsts: &mut Vec<u64>) -> std::io::Result<u32> {
        let (item, at) = self.items.take()?;
        dsts.extend((0..self.n_beams as u64).map(|b| at + b * self.beam_bytes as u64));
        Ok(item)
    }

    /// Sends the heaps of the beams `beams` (ascending) of the batch at `ts` (`n_present`
    /// antennas in the sum) written into `item`; with none, the item is free again at once.
    pub fn send(
        &mut self,
        item: u32,
        ts: u64,
        n_present: u64,
        beams: &[usize],
    ) -> std::io::Result<()> {
        for v in self.values.chunks_exact_mut(3) {
            v.copy_from_slice(&[ts, self.channel_offset, n_present]);
        }
        let d = &mut self.items;
        d.sender
            .send_heaps(item, &self.values, |b| beams.contains(&b), d.timeout)
    }

    /// Beams per item.
    pub fn n_beams(&self) -> usize {
        self.n_beams
    }

    /// Bytes of one beam's heap.
    pub fn beam_bytes(&self) -> usize {
        self.beam_bytes
    }
}
