//! A correlation output sent straight from GPU memory (feature `ibverbs`,
//! `--use-peerdirect`): each dump is written by the correlator on the device into an item of
//! one device allocation registered with the NIC ([`DeviceItems`]), and the item's
//! pre-built work-request chain is posted ([`PeerDirectSender`]); the item comes back only
//! when its last packet's completion arrives. The heaps on the wire are the staged path's
//! ([`crate::net::send::heap::HeapSender::send_heap`]): same destination, heap counters
//! (going on from the staged sender's, which sent the descriptors), immediates
//! (`timestamp`, `frequency`) and packet boundaries.

use std::net::SocketAddrV4;
use std::time::Duration;

use crate::net::send::verbs::{
    payload_per_packet, DeviceItems, HeapPlan, PeerDirectConfig, PeerDirectSender,
};
use crate::spead::ids;

/// The sender's configuration for one X output's heaps of `heap_bytes` to `dst`: heap
/// counters from `cnt` (start, step), `packet_payload` bytes per packet, `rate` bytes/s
/// (None: unpaced), from `src` (address, MAC, TTL).
pub fn x_direct_config(
    heap_bytes: usize,
    dst: SocketAddrV4,
    cnt: (u64, u64),
    packet_payload: usize,
    rate: Option<f64>,
    src: (SocketAddrV4, [u8; 6], u8),
) -> PeerDirectConfig {
    let per_packet = payload_per_packet(2, packet_payload).max(1);
    let packets = heap_bytes.div_ceil(per_packet);
    PeerDirectConfig {
        src_mac: src.1,
        src: src.0,
        dests: vec![dst],
        ttl: src.2,
        packet_payload,
        immediate_ids: vec![ids::TIMESTAMP, ids::FREQUENCY],
        payload_id: ids::XENG_RAW,
        heaps: vec![HeapPlan {
            dst: 0,
            offset: 0,
            len: heap_bytes as u64,
        }],
        // A queue that holds at least one whole dump.
        send_queue_depth: packets.max(4096),
        cnt_start: cnt.0,
        cnt_step: cnt.1.max(1),
        rate,
    }
}

/// One correlation output's device items and their sender.
pub struct XDirect {
    sender: PeerDirectSender,
    memory: DeviceItems,
    item_bytes: usize,
    /// The heaps' `frequency` item (the engine's first channel).
    channel_offset: u64,
    timeout: Duration,
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
        let sender = open(memory.base())?;
        memory.check_fits(sender.n_items(), item_bytes)?;
        Ok(XDirect {
            sender,
            memory,
            item_bytes,
            channel_offset,
            timeout: Duration::from_secs(1),
        })
    }

    /// A free item (polling completions while none is), and its device range (address,
    /// bytes).
    pub fn acquire(&mut self) -> std::io::Result<(u32, u64, usize)> {
        let item = self.sender.acquire(self.timeout)?;
        let at = item as u64 * self.item_bytes as u64;
        Ok((item, self.memory.base() + at, self.item_bytes))
    }

    /// Gives back an item whose dump is not sent.
    pub fn release(&mut self, item: u32) {
        self.sender.release(item);
    }

    /// Sends the dump of the accumulation at `ts` written into `item`: one heap.
    pub fn send(&mut self, item: u32, ts: u64) -> std::io::Result<()> {
        self.sender
            .send(item, &[ts, self.channel_offset], self.timeout)
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

    /// Bytes of one item (one dump).
    pub fn item_bytes(&self) -> usize {
        self.item_bytes
    }
}
