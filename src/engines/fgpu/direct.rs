//! An F-engine output sent straight from its output items (feature `ibverbs`): each batch
//! is written by the channeliser into an item of memory registered with the NIC, and the
//! item's pre-built work-request chain is posted ([`PeerDirectSender`]); the item comes back
//! only when its last packet's completion arrives. The items are host memory
//! ([`ItemMemory::Host`]: `--send-ibv`, the channeliser or the GPU's device-to-host copy
//! writes the batch where the NIC reads it, no copy into a send ring) or device memory
//! ([`ItemMemory::Device`]: `--use-peerdirect`, the GPU channeliser copies the batch device
//! to device into the item and the NIC reads it from GPU memory); the heaps on the wire are
//! those of the staged path ([`crate::net::send::heap::HeapSender`]): same destinations,
//! heap counters, immediates and packet boundaries.

use std::net::SocketAddrV4;
use std::time::Duration;

use super::spec::WidebandSpec;
use crate::net::send::verbs::{DeviceItems, HeapPlan, PeerDirectConfig, PeerDirectSender};
use crate::spead::ids;

/// Where an output's items live (registered with the NIC; the sender's items point into
/// it; it never moves).
pub enum ItemMemory {
    /// Host memory: the batch is written into the item's bytes.
    Host(Box<[u8]>),
    /// Device memory: the batch is copied into the item on the device.
    Device(DeviceItems),
}

/// Where the batch of an acquired item goes.
pub enum ItemTarget<'a> {
    /// The item's bytes in host memory.
    Host(&'a mut [u8]),
    /// The item's device range.
    Device {
        /// Device address of the item's first byte.
        addr: u64,
        /// Bytes of the item.
        len: usize,
    },
}

/// One output's items and their sender.
pub struct DirectSender {
    sender: PeerDirectSender,
    memory: ItemMemory,
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
        Ok(Self::over(
            spec,
            feng_id,
            item_bytes,
            sender,
            ItemMemory::Host(memory),
        ))
    }

    /// `memory.len() / item_bytes` items of `item_bytes` in device memory, sent by the
    /// sender `open` builds over them (given the items' device address; it registers them).
    pub fn on_device(
        spec: &WidebandSpec,
        feng_id: u64,
        item_bytes: usize,
        memory: DeviceItems,
        open: impl FnOnce(u64) -> std::io::Result<PeerDirectSender>,
    ) -> std::io::Result<Self> {
        let sender = open(memory.base())?;
        memory.check_fits(sender.n_items(), item_bytes)?;
        Ok(Self::over(
            spec,
            feng_id,
            item_bytes,
            sender,
            ItemMemory::Device(memory),
        ))
    }

    fn over(
        spec: &WidebandSpec,
        feng_id: u64,
        item_bytes: usize,
        sender: PeerDirectSender,
        memory: ItemMemory,
    ) -> Self {
        DirectSender {
            sender,
            memory,
            item_bytes,
            feng_id,
            frequencies: (0..spec.dst.len())
                .map(|d| (d * spec.channels_per_substream()) as u64)
                .collect(),
            timeout: Duration::from_secs(1),
            values: Vec::new(),
        }
    }

    /// True if the items are device memory.
    pub fn on_gpu(&self) -> bool {
        matches!(self.memory, ItemMemory::Device(_))
    }

    /// The items' memory.
    pub fn memory(&self) -> &ItemMemory {
        &self.memory
    }

    /// A free item (polling completions while none is), and where to write its batch.
    pub fn acquire(&mut self) -> std::io::Result<(u32, ItemTarget<'_>)> {
        let item = self.sender.acquire(self.timeout)?;
        let at = item as usize * self.item_bytes;
        let target = match &mut self.memory {
            ItemMemory::Host(m) => ItemTarget::Host(&mut m[at..at + self.item_bytes]),
            ItemMemory::Device(d) => ItemTarget::Device {
                addr: d.base() + at as u64,
                len: self.item_bytes,
            },
        };
        Ok((item, target))
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
            let (item, ItemTarget::Host(out)) = d.acquire().unwrap() else {
                panic!("host items");
            };
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

    /// Device items (host memory standing in for the device: [`DeviceItems::from_raw`]):
    /// acquired items are handed out as device ranges inside the items, never one in
    /// flight; every payload entry the NIC reads lies in the items' range under the region's
    /// lkey (headers under their own); 10k batches through three items leave none in flight.
    #[test]
    fn device_items_are_written_by_address_and_recycled_after_completion() {
        use crate::net::send::verbs::DeviceItems;
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
        let mut host = vec![0u8; 3 * batch + crate::net::send::verbs::REGISTER_ALIGN];
        let base = host.as_mut_ptr() as u64;
        // SAFETY: the Vec (moved into the owner, its heap buffer unmoved) covers the range.
        let mem = unsafe { DeviceItems::from_raw(base, 3 * batch, Box::new(host)) };
        let mut d = DirectSender::on_device(&spec, 1, batch, mem, |addr| {
            assert_eq!(addr, base);
            let items: Vec<(u64, u32)> = (0..3).map(|i| (addr + (i * batch) as u64, 5)).collect();
            // SAFETY: the fake NIC outlives the sender; the items are its memory.
            unsafe { PeerDirectSender::from_raw(o, o, cfg, &items, |_, _| Ok(6)) }
        })
        .unwrap();
        assert!(d.on_gpu());
        let mut in_flight = std::collections::VecDeque::new();
        let mut frames = 0usize;
        for b in 0..10_000u64 {
            let (item, ItemTarget::Device { addr, len }) = d.acquire().unwrap() else {
                panic!("device items");
            };
            assert_eq!((addr, len), (base + item as u64 * batch as u64, batch));
            // The NIC completes chains in order: the oldest ones are back.
            while in_flight.len() > d.sender().in_flight() {
                in_flight.pop_front();
            }
            assert!(
                !in_flight.contains(&item),
                "item {item} handed out in flight"
            );
            // SAFETY: the acquired item's range, host memory in this test.
            unsafe { std::ptr::write_bytes(addr as *mut u8, (b % 251) as u8, len) };
            d.send(item, b * 4096).unwrap();
            in_flight.push_back(item);
            for (f, sges) in nic.sent() {
                let (_, udp) = crate::net::frame::fast_udp_ipv4(&f).unwrap();
                let v = crate::spead::PacketView::parse(udp).unwrap();
                let ts = v.immediate(ids::TIMESTAMP).unwrap();
                assert!(v.payload.iter().all(|&x| x == ((ts / 4096) % 251) as u8));
                assert_eq!((sges[0].lkey, sges[1].lkey), (6, 5));
                let p = sges[1];
                assert!(p.addr >= base && p.addr + p.length as u64 <= base + 3 * batch as u64);
                assert!(sges[0].addr < base || sges[0].addr >= base + 3 * batch as u64);
                frames += 1;
            }
        }
        d.flush().unwrap();
        frames += nic.frames().len();
        assert_eq!((nic.pending(), d.sender().in_flight()), (0, 0));
        assert_eq!(d.sender().n_items(), 3);
        assert_eq!(frames, 10_000 * 8);
        assert_eq!(d.sender().stats.items, 10_000);
    }
}
