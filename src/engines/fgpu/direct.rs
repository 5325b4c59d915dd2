//! An F-engine output sent straight from its output items (feature `ibverbs`): each batch
//! is written by the channeliser into an item of memory registered with the NIC, and the
//! item's pre-built work-request chain is posted ([`PeerDirectSender`]); the item comes back
//! only when its last packet's completion arrives. With `--send-ibv` the items are host
//! memory (the channeliser, or the GPU's device-to-host copy, writes the batch where the
//! NIC reads it: no copy into a send ring); the heaps on the wire are those of the staged
//! path ([`crate::net::send::heap::HeapSender`]): same destinations, heap counters,
//! immediates and packet boundaries.

use std::net::SocketAddrV4;
use std::time::Duration;

use super::spec::WidebandSpec;
use crate::net::send::verbs::{HeapPlan, PeerDirectConfig, PeerDirectSender};
use crate::spead::ids;

/// One output's items and their sender.
pub struct DirectSender {
    sender: PeerDirectSender,
    /// The items' memory, registered with the NIC (the sender's items point into it; it
    /// never moves).
    memory: Box<[u8]>,
    item_bytes: usize,
    feng_id: u64,
    /// The `frequency` item of each destination's heap (its first channel).
    frequencies: Vec<u64>,
    timeout: Duration,
    values: Vec<u64>,
}

/// The sender's configuration for `spec`'s heaps, as F-engine `feng_id` of `array_size`
/// sends them (`packet_payload` bytes per packet, `rate` bytes/s, None: unpaced).
pub fn direct_config(
    spec: &WidebandSpec,
    batch_bytes: usize,
    feng_id: u64,
    array_size: u64,
    packet_payload: usize,
    rate: Option<f64>,
    src: (SocketAddrV4, [u8; 6], u8),
) -> PeerDirectConfig {
    let n = spec.dst.len().max(1);
    let per = (batch_bytes / n) as u64;
    PeerDirectConfig {
        src_mac: src.1,
        src: src.0,
        dests: spec.dst.clone(),
        ttl: src.2,
        packet_payload,
        immediate_ids: vec![ids::TIMESTAMP, ids::FENG_ID, ids::FREQUENCY],
        payload_id: ids::FENG_RAW,
        heaps: (0..spec.dst.len())
            .map(|d| HeapPlan {
                dst: d,
                offset: d as u64 * per,
                len: per,
            })
            .collect(),
        send_queue_depth: 4096,
        cnt_start: feng_id,
        cnt_step: array_size,
        rate,
    }
}

impl DirectSender {
    /// `n_items` items of `item_bytes` (one batch each), sent by the sender `open` builds
    /// over them (given the memory's address; it registers that memory).
    pub fn new(
        spec: &WidebandSpec,
        feng_id: u64,
        item_bytes: usize,
        n_items: usize,
        open: impl FnOnce(*mut u8) -> std::io::Result<PeerDirectSender>,
    ) -> std::io::Result<Self> {
        let mut memory = vec![0u8; item_bytes * n_items].into_boxed_slice();
        let sender = open(memory.as_mut_ptr())?;
        Ok(DirectSender {
            sender,
            memory,
            item_bytes,
            feng_id,
            frequencies: (0..spec.dst.len())
                .map(|d| (d * spec.channels_per_substream()) as u64)
                .collect(),
            timeout: Duration::from_secs(1),
            values: Vec::new(),
        })
    }

    /// A free item (polling completions while none is), its bytes to write the batch into.
    pub fn acquire(&mut self) -> std::io::Result<(u32, &mut [u8])> {
        let item = self.sender.acquire(self.timeout)?;
        let at = item as usize * self.item_bytes;
        Ok((item, &mut self.memory[at..at + self.item_bytes]))
    }

    /// Gives back an item whose batch was not written.
    pub fn release(&mut self, item: u32) {
        self.sender.release(item);
    }

    /// Sends the batch at `ts` written into `item`: one heap per destination.
    pub fn send(&mut self, item: u32, ts: u64) -> std::io::Result<()> {
        self.values.clear();
        for &freq in &self.frequencies {
            self.values.extend_from_slice(&[ts, self.feng_id, freq]);
        }
        self.sender.send(item, &self.values, self.timeout)
    }

    /// Waits until the NIC has sent every item.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.sender.flush(self.timeout)
    }

    /// Items sent, in flight and in all (counters of the sender).
    pub fn sender(&self) -> &PeerDirectSender {
        &self.sender
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::send::fake_verbs::Fake;
    use std::net::Ipv4Addr;

    /// 10k batches through three items and a NIC that reads each chain late: every frame
    /// carries its own batch's bytes (no item rewritten in flight), every item comes back,
    /// and the counters add up.
    #[test]
    fn ten_thousand_batches_through_three_items_leak_nothing() {
        let spec = crate::engines::fgpu::parse_wideband(
            "name=wb,channels=64,dst=239.1.0.1+1:7148,jones_per_batch=2048",
        )
        .unwrap();
        let batch = 64 * 32 * 2 * 2;
        let mut nic = Fake::nic();
        let o = nic.ptr();
        let src = (
            SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 7148),
            [2, 0, 0, 0, 0, 1],
            4,
        );
        let cfg = direct_config(&spec, batch, 1, 4, 1024, None, src);
        let mut d = DirectSender::new(&spec, 1, batch, 3, |mem| {
            let items: Vec<(u64, u32)> = (0..3)
                .map(|i| (mem as u64 + (i * batch) as u64, 5))
                .collect();
            // SAFETY: the fake NIC outlives the sender; the items are its memory.
            unsafe { PeerDirectSender::from_raw(o, o, cfg, &items, |_, _| Ok(6)) }
        })
        .unwrap();
        let mut frames = 0usize;
        for b in 0..10_000u64 {
            let (item, out) = d.acquire().unwrap();
            out.fill((b % 251) as u8);
            d.send(item, b * 4096).unwrap();
            assert!(d.sender().in_flight() <= 3);
            for f in nic.frames() {
                let (_, udp) = crate::net::frame::fast_udp_ipv4(&f).unwrap();
                let v = crate::spead::PacketView::parse(udp).unwrap();
                let ts = v.immediate(ids::TIMESTAMP).unwrap();
                let want = ((ts / 4096) % 251) as u8;
                assert!(
                    v.payload.iter().all(|&x| x == want),
                    "a frame of batch {} carries another batch's bytes",
                    ts / 4096
                );
                frames += 1;
            }
        }
        d.flush().unwrap();
        frames += nic.frames().len();
        assert_eq!(nic.pending(), 0);
        assert_eq!(d.sender().in_flight(), 0);
        // 8192 bytes per batch, two heaps of 4096 in 1024-byte packets.
        assert_eq!(frames, 10_000 * 8);
        let st = &d.sender().stats;
        assert_eq!((st.items, st.heaps, st.packets), (10_000, 20_000, 80_000));
        assert_eq!(st.wc_errors + st.stray_completions, 0);
    }
}
