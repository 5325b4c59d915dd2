//! xbgpu's dumps sent from output items (`--use-peerdirect`, [`XDirect`]) against the fake
//! verbs provider, on the CPU: host memory stands in for the device items and a CPU
//! correlator writes each dump there by address. Also what the GPU tests
//! (`tests_peerdirect_xgpu`) share: a recording sink, a correlation output over items posting
//! to a fake NIC, a feed of many accumulations with absent antennas, skipped and unsent
//! dumps, and the checks of the items' lifetime.

use crate::compute::xengine::XShape;
use crate::engines::xbgpu::backend::BackendError;
use crate::engines::xbgpu::corrprod::{x_descriptors, XPipeline};
use crate::engines::xbgpu::direct::{x_direct_config, XDirect};
use crate::engines::xbgpu::Correlator;
use crate::net::send::fake_verbs::Fake;
use crate::net::send::heap::HeapSender;
use crate::net::send::verbs::{DeviceItems, PeerDirectSender};
use crate::net::send::PacketSink;
use ibverbs_sys::IbvSge;
use std::net::Ipv4Addr;
use std::net::SocketAddrV4;
use std::sync::{Arc, Mutex};

/// The lkey the fake registration gives the headers.
pub(super) const HEADER_LKEY: u32 = 7;
/// The lkey of the device items.
pub(super) const ITEM_LKEY: u32 = 0x99;
/// The output's destination.
pub(super) const DST: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7160);
/// Batches per accumulation.
pub(super) const THRESHOLD: u64 = 2;
/// ADC samples between batches.
pub(super) const BATCH_STEP: u64 = 4096;
/// Bytes of packet payload.
pub(super) const PAYLOAD: usize = 1024;

/// Datagrams sent, (destination, UDP payload), in order.
pub(super) type Datagrams = Arc<Mutex<Vec<(SocketAddrV4, Vec<u8>)>>>;

/// A sink keeping every datagram.
pub(super) struct Record(pub(super) Datagrams);

impl PacketSink for Record {
    fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> std::io::Result<()> {
        self.0.lock().unwrap().push((dst, parts.concat()));
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A correlation output of `shape` through `corr` as engine 1 of 4 (channel offset one
/// substream in), its staged sender (descriptors sent) recording into `rec`.
pub(super) fn pipeline(shape: XShape, corr: Box<dyn Correlator>, rec: &Datagrams) -> XPipeline {
    let mut s = HeapSender::new(
        Box::new(Record(rec.clone())),
        vec![DST],
        1,
        4,
        PAYLOAD,
        None,
    );
    s.send_descriptors(&x_descriptors(shape.n_channels, shape.n_ants), 8872)
        .unwrap();
    XPipeline::new(
        "x",
        corr,
        s,
        THRESHOLD,
        BATCH_STEP,
        shape.n_channels as u64,
        shape.n_ants,
        shape.n_channels,
        true,
    )
}

/// An [`XDirect`] for `x` over `items` (their address space whatever `nic` reads),
/// posting to `nic`.
pub(super) fn direct(x: &XPipeline, items: DeviceItems, nic: &mut Fake) -> XDirect {
    let bytes = x.dump_bytes();
    let n = items.len() / bytes;
    let src = (
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148),
        [2, 0, 0, 0, 0, 1],
        4,
    );
    let cfg = x_direct_config(bytes, DST, x.heap_cnt(), PAYLOAD, None, src);
    let o = nic.ptr();
    XDirect::on_device(bytes, x.channel_offset(), items, |addr| {
        let items: Vec<(u64, u32)> = (0..n)
            .map(|i| (addr + (i * bytes) as u64, ITEM_LKEY))
            .collect();
        // SAFETY: the fake NIC outlives the sender; the items are the sender's memory.
        unsafe { PeerDirectSender::from_raw(o, o, cfg, &items, |_, _| Ok(HEADER_LKEY)) }
    })
    .unwrap()
}

/// Checks that a frame's scatter entries are a host header and a payload inside
/// `base..base + len` under the items' lkey.
pub(super) fn check_entries(sges: &[IbvSge], base: u64, len: u64) {
    assert_eq!(sges.len(), 2);
    let (h, p) = (sges[0], sges[1]);
    assert_eq!((h.lkey, p.lkey), (HEADER_LKEY, ITEM_LKEY));
    assert!(
        p.addr >= base && p.addr + p.length as u64 <= base + len,
        "{p:?}"
    );
    assert!(
        h.addr + (h.length as u64) <= base || h.addr >= base + len,
        "{h:?}"
    );
}

/// Five pseudo-random batches of `shape`.
pub(super) fn batches(shape: XShape) -> Vec<Vec<i8>> {
    let mut x = 7u64;
    (0..5)
        .map(|_| {
            (0..shape.batch_bytes())
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 57) as i8 - 64
                })
                .collect()
        })
        .collect()
}

/// Feeds accumulations `0..n` of `data` to `x` (and the end): accumulation d has
/// antenna 1 absent in a batch where d % 13 == 5 (MISSING markers), no antenna where
/// d % 19 == 7 (skipped), and goes out with capture off where d % 17 == 3 (unsent);
/// `each` runs after every batch.
pub(super) fn feed(
    x: &mut XPipeline,
    n_ants: usize,
    data: &[Vec<i8>],
    n: u64,
    mut each: impl FnMut(&mut XPipeline),
) {
    let zero = vec![0i8; data[0].len()];
    for d in 0..n {
        // The capture switch as the previous accumulation's dump (at this batch) sees it.
        if d > 0 && (d - 1) % 17 == 3 {
            x.enabled.stop();
        } else {
            x.enabled.start(0);
        }
        for b in 0..THRESHOLD {
            let mut present = vec![true; n_ants];
            if d % 13 == 5 && b == 1 {
                present[1] = false;
            }
            if d % 19 == 7 {
                present.iter_mut().for_each(|p| *p = false);
            }
            let k = (d * THRESHOLD + b) as usize;
            let batch = if present.iter().all(|&p| !p) {
                &zero
            } else {
                &data[(k * 3 + k / 7) % data.len()]
            };
            x.batch((d * THRESHOLD + b) * BATCH_STEP, batch, &present)
                .unwrap();
            each(x);
        }
    }
    x.enabled.start(0);
    x.finish().unwrap();
    each(x);
}

/// A correlator recording the address of every dump it writes to device memory.
pub(super) struct Recording {
    pub(super) inner: Box<dyn Correlator>,
    pub(super) dsts: Arc<Mutex<Vec<u64>>>,
}

impl Correlator for Recording {
    fn accumulate(&mut self, batch: &[i8]) -> Result<(), BackendError> {
        self.inner.accumulate(batch)
    }
    fn dump(&mut self, present: &[bool], out: &mut [i32]) -> Result<u64, BackendError> {
        self.inner.dump(present, out)
    }
    fn fence_input(&mut self) -> Result<(), BackendError> {
        self.inner.fence_input()
    }
    fn dumps_to_device(&self) -> bool {
        self.inner.dumps_to_device()
    }
    unsafe fn dump_to_device(
        &mut self,
        present: &[bool],
        dst: u64,
        len: usize,
    ) -> Result<u64, BackendError> {
        self.dsts.lock().unwrap().push(dst);
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.inner.dump_to_device(present, dst, len) }
    }
}

/// Follows an output's items after every batch: no item still in flight is dumped into
/// again (the fake NIC completes chains in order), every dump lies in the items, every
/// frame's entries are a header and a payload inside the items; the frames are kept.
pub(super) struct Lifetime {
    pub(super) dsts: Arc<Mutex<Vec<u64>>>,
    pub(super) base: u64,
    pub(super) len: u64,
    pub(super) frames: Vec<(SocketAddrV4, Vec<u8>)>,
    seen: usize,
    heaps: u64,
    posted: std::collections::VecDeque<u64>,
}

impl Lifetime {
    /// Over the items `base..base + len`, dumps recorded in `dsts`.
    pub(super) fn new(dsts: Arc<Mutex<Vec<u64>>>, base: u64, len: u64) -> Self {
        Lifetime {
            dsts,
            base,
            len,
            frames: Vec::new(),
            seen: 0,
            heaps: 0,
            posted: Default::default(),
        }
    }

    /// The checks after a batch of `x`, whose sender posts to `nic`.
    pub(super) fn check(&mut self, x: &XPipeline, nic: &Fake) {
        let d = x.direct().expect("dumps sent from items");
        let bytes = d.item_bytes() as u64;
        let new_heaps = x.stats.heaps - self.heaps;
        self.heaps = x.stats.heaps;
        // Posted before and still in flight.
        let old = d.sender().in_flight().saturating_sub(new_heaps as usize);
        while self.posted.len() > old {
            self.posted.pop_front();
        }
        let dsts = self.dsts.lock().unwrap();
        for &a in &dsts[self.seen..] {
            assert!(!self.posted.contains(&a), "an item in flight dumped into");
            assert!(a >= self.base && a + bytes <= self.base + self.len);
            assert_eq!((a - self.base) % bytes, 0);
        }
        if new_heaps == 1 {
            self.posted.push_back(*dsts.last().unwrap());
        }
        self.seen = dsts.len();
        assert!(d.sender().in_flight() <= d.sender().n_items());
        for (f, sges) in nic.sent() {
            check_entries(&sges, self.base, self.len);
            let (dst, udp) = crate::net::frame::fast_udp_ipv4(&f).unwrap();
            self.frames.push((dst, udp.to_vec()));
        }
    }
}

/// Dumps of `n` accumulations that go out (what [`feed`] sends).
pub(super) fn sent(n: u64) -> u64 {
    (0..n)
        .filter(|d| d % 19 != 7 && (d % 17 != 3 || *d == n - 1))
        .count() as u64
}

mod cpu {
    use super::*;

    use crate::compute::xengine::CpuX;
    use crate::engines::xbgpu::backend::Corr;
    use crate::spead::ids;

    /// The CPU correlator standing in for the GPU's: its "device" dumps are written into
    /// host memory by address (the items are host memory here), each address recorded.
    struct HostDump {
        inner: Corr,
        out: Vec<i32>,
        dsts: Arc<Mutex<Vec<u64>>>,
    }

    impl Correlator for HostDump {
        fn accumulate(&mut self, batch: &[i8]) -> Result<(), BackendError> {
            self.inner.accumulate(batch)
        }
        fn dump(&mut self, present: &[bool], out: &mut [i32]) -> Result<u64, BackendError> {
            self.inner.dump(present, out)
        }
        fn dumps_to_device(&self) -> bool {
            true
        }
        unsafe fn dump_to_device(
            &mut self,
            present: &[bool],
            dst: u64,
            len: usize,
        ) -> Result<u64, BackendError> {
            assert_eq!(len, self.out.len() * 4);
            let c = self.inner.dump(present, &mut self.out)?;
            // SAFETY: the caller's range, host memory in this test.
            let d = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
            for (b, v) in d.chunks_exact_mut(4).zip(&self.out) {
                b.copy_from_slice(&v.to_le_bytes());
            }
            self.dsts.lock().unwrap().push(dst);
            Ok(c)
        }
    }

    fn shape() -> XShape {
        XShape::new(4, 8, 16).unwrap()
    }

    /// The staged output of `n` accumulations of [`feed`]: its datagrams (descriptors
    /// first) and counters.
    fn staged(
        n: u64,
    ) -> (
        Vec<(SocketAddrV4, Vec<u8>)>,
        crate::engines::xbgpu::corrprod::XStats,
    ) {
        let rec = Datagrams::default();
        let corr = Box::new(Corr(Box::new(CpuX::new(shape()))));
        let mut x = pipeline(shape(), corr, &rec);
        feed(&mut x, 4, &batches(shape()), n, |_| {});
        let got = rec.lock().unwrap().clone();
        (got, x.stats.clone())
    }

    /// 10k accumulations (some with an antenna absent, some skipped, some sent with
    /// capture off) through three items read late by the fake NIC: the frames are the
    /// staged datagrams byte for byte (an item rewritten in flight would show), every
    /// payload entry lies in the items under their lkey, no item still in flight is dumped
    /// into again, and at the end none is in flight and all three can be had again.
    #[test]
    fn ten_thousand_dumps_through_three_items_match_the_staged_heaps() {
        let n = 10_000;
        let (want, want_stats) = staged(n);
        let rec = Datagrams::default();
        let dsts = Arc::new(Mutex::new(Vec::new()));
        let corr = HostDump {
            inner: Corr(Box::new(CpuX::new(shape()))),
            out: vec![0; shape().output_len()],
            dsts: dsts.clone(),
        };
        let mut x = pipeline(shape(), Box::new(corr), &rec);
        let bytes = x.dump_bytes();
        let mut host = vec![0u8; 3 * bytes + crate::net::send::verbs::REGISTER_ALIGN];
        let base = host.as_mut_ptr() as u64;
        // SAFETY: the Vec (moved into the owner, its heap buffer unmoved) covers the range.
        let items = unsafe { DeviceItems::from_raw(base, 3 * bytes, Box::new(host)) };
        let mut nic = Fake::nic();
        let d = direct(&x, items, &mut nic);
        assert!(x.with_direct(Box::new(d)).is_ok());
        let mut life = Lifetime::new(dsts, base, 3 * bytes as u64);
        feed(&mut x, 4, &batches(shape()), n, |x| life.check(x, &nic));
        let frames = life.frames;
        assert_eq!(nic.pending(), 0);
        // The staged sender sent the descriptors only; the NIC every data heap.
        let desc = rec.lock().unwrap().clone();
        assert_eq!(desc.len(), 1);
        assert_eq!(want[..1], desc[..]);
        assert_eq!(frames.len(), want.len() - 1);
        assert!(frames[..] == want[1..], "the heaps from the items differ");
        let s = &x.stats;
        assert_eq!(s.heaps, sent(n));
        assert_eq!(
            (s.heaps, s.bytes, s.clipped_visibilities, s.skipped_accs),
            (
                want_stats.heaps,
                want_stats.bytes,
                want_stats.clipped_visibilities,
                want_stats.skipped_accs
            )
        );
        assert_eq!(
            (s.unsent_accs, s.incomplete_accs),
            (want_stats.unsent_accs, want_stats.incomplete_accs)
        );
        assert!(s.unsent_accs > 0 && s.skipped_accs > 0 && s.incomplete_accs > 0);
        let d = x.direct_mut().unwrap();
        assert_eq!(d.sender().in_flight(), 0);
        assert_eq!(d.sender().stats.items, sent(n));
        assert_eq!(
            d.sender().stats.wc_errors + d.sender().stats.stray_completions,
            0
        );
        // No item left acquired: all three come at once.
        let got: Vec<u32> = (0..3).map(|_| d.acquire().unwrap().0).collect();
        assert_eq!(
            got.iter().collect::<std::collections::BTreeSet<_>>().len(),
            3
        );
    }

    /// Items are one dump each, from a correlator that can dump to device memory: anything
    /// else is refused (and the output keeps staging).
    #[test]
    fn with_direct_refuses_a_host_correlator_or_wrong_items() {
        let rec = Datagrams::default();
        let corr = Box::new(Corr(Box::new(CpuX::new(shape()))));
        let mut x = pipeline(shape(), corr, &rec);
        let bytes = x.dump_bytes();
        let mut host = vec![0u8; 3 * bytes + crate::net::send::verbs::REGISTER_ALIGN];
        let base = host.as_mut_ptr() as u64;
        // SAFETY: as above.
        let items = unsafe { DeviceItems::from_raw(base, 3 * bytes, Box::new(host)) };
        let mut nic = Fake::nic();
        let d = direct(&x, items, &mut nic);
        assert!(
            x.with_direct(Box::new(d)).is_err(),
            "the CPU correlator dumps on the host"
        );
        assert!(x.direct().is_none());
        let cfg = x_direct_config(bytes, DST, (1, 4), PAYLOAD, None, (DST, [0; 6], 4));
        assert_eq!(cfg.heaps.len(), 1);
        assert_eq!(cfg.immediate_ids, vec![ids::TIMESTAMP, ids::FREQUENCY]);
        assert_eq!(cfg.payload_id, ids::XENG_RAW);
        assert!(cfg.send_queue_depth >= bytes.div_ceil(PAYLOAD));
    }
}
