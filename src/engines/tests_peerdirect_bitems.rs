//! xbgpu's beams sent from output items (`--use-peerdirect`, [`BDirect`]) against the fake
//! verbs provider, on the CPU: host memory stands in for the device items and a CPU back end
//! writes each batch's beams there by address. The staged beams ([`HeapSender`]) on the same
//! input are the reference, byte for byte. Also what the GPU test (`tests_peerdirect_xgpu`)
//! shares: the beam set, the two runs and the feed (per-beam capture toggled mid-run,
//! batches with no antenna present, chunks formed ahead), and the checks of the items.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};

use super::tests_peerdirect_xitems::{
    check_entries, Datagrams, Record, BATCH_STEP, HEADER_LKEY, ITEM_LKEY, PAYLOAD,
};
use crate::compute::xengine::{Beam, BeamSet, BeamStats, XBackend, XError, XShape};
use crate::engines::xbgpu::beams::{beam_descriptors, BPipeline, BStats};
use crate::engines::xbgpu::direct::{b_direct_config, BDirect};
use crate::engines::xbgpu::Beams;
use crate::net::send::fake_verbs::Fake;
use crate::net::send::heap::HeapSender;
use crate::net::send::verbs::{DeviceItems, PeerDirectSender};

/// The beams' destinations, one each.
pub(super) fn dsts() -> Vec<SocketAddrV4> {
    (0..3)
        .map(|b| SocketAddrV4::new(Ipv4Addr::new(239, 2, 0, b), 7150))
        .collect()
}

/// The beams' shape: 4 antennas, 8 channels, 64 spectra (1 KiB per beam heap: two
/// packets of [`PAYLOAD`]).
pub(super) fn shape() -> XShape {
    XShape::new(4, 8, 64).unwrap()
}

/// The engine's beamformer over `backend`: three beams (two on pol 0, one on pol 1, other
/// weights and gains each), beams 0 and 2 dithered and beam 1 not (two back-end calls per
/// batch, each beam to its own place).
pub(super) fn beams(backend: Box<dyn XBackend + Send>) -> Beams {
    let n = backend.shape().n_ants;
    let beam = |pol, g: f64| Beam {
        pol,
        quant_gain: g,
        weights: (0..n).map(|a| 1.0 - 0.2 * a as f64 * g).collect(),
        delays: (0..n).map(|a| a as f64 * 1e-10).collect(),
        phases: (0..n).map(|a| 0.3 * a as f64).collect(),
    };
    let set = BeamSet {
        beams: vec![beam(0, 0.5), beam(1, 0.8), beam(0, 1.3)],
        channel_offset: 8,
        n_channels_total: 32,
        bandwidth: 856e6,
        dither: true,
        seed: 11,
    };
    Beams::new(backend, Arc::new(Mutex::new(set)), BATCH_STEP).with_dither(vec![true, false, true])
}

/// The beams of `bf` as engine 1 of 4 (heap counters from 1, step 4), sending from the
/// start, their staged sender (descriptors sent) recording into `rec`.
pub(super) fn pipeline(bf: Beams, rec: &Datagrams) -> BPipeline {
    let sh = shape();
    let mut s = HeapSender::new(Box::new(Record(rec.clone())), dsts(), 1, 4, PAYLOAD, None);
    s.send_descriptors(&beam_descriptors(sh.n_channels, sh.spectra_per_batch), 8872)
        .unwrap();
    let names: Vec<String> = (0..3).map(|b| format!("beam{b}")).collect();
    BPipeline::new(&names, Box::new(bf), s, 8, sh.beam_output_len(1), true)
}

/// A [`BDirect`] for `bp` over `items` (their address space whatever `nic` reads), posting
/// to `nic`.
pub(super) fn direct(bp: &BPipeline, items: DeviceItems, nic: &mut Fake) -> BDirect {
    let bytes = bp.beam_bytes();
    let n = items.len() / (3 * bytes);
    let src = (
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148),
        [2, 0, 0, 0, 0, 1],
        4,
    );
    let cfg = b_direct_config(bytes, dsts(), bp.heap_cnt(), PAYLOAD, None, src);
    let o = nic.ptr();
    BDirect::on_device(bytes, 3, bp.channel_offset(), items, |addr| {
        let items: Vec<(u64, u32)> = (0..n)
            .map(|i| (addr + (i * 3 * bytes) as u64, ITEM_LKEY))
            .collect();
        // SAFETY: the fake NIC outlives the sender; the items are the sender's memory.
        unsafe { PeerDirectSender::from_raw(o, o, cfg, &items, |_, _| Ok(HEADER_LKEY)) }
    })
    .unwrap()
}

/// Five pseudo-random batches of [`shape`].
fn batches() -> Vec<Vec<i8>> {
    super::tests_peerdirect_xitems::batches(shape())
}

/// Feeds batches `0..n` to `bp` and ends it: batch k has antenna 1 absent where k % 13 == 5
/// and no antenna where k % 19 == 7 (skipped); beam b's capture is off where
/// (k / 7 + b) % 3 == 0 (on from the batch after where k % 11 == 4), so batches go out
/// with every beam, some or none; chunks of four batches are formed ahead
/// ([`BPipeline::prepare`]) every other time. `each` runs after every call,
/// told which.
pub(super) fn feed(bp: &mut BPipeline, n: u64, mut each: impl FnMut(&mut BPipeline, Call)) {
    let data = batches();
    let na = shape().n_ants;
    let zero = vec![0i8; data[0].len()];
    let mut k = 0;
    while k < n {
        let ks: Vec<u64> = (k..(k + 4).min(n)).collect();
        let mut flat = Vec::new();
        let mut present = Vec::new();
        for &j in &ks {
            let mut p = vec![true; na];
            if j % 13 == 5 {
                p[1] = false;
            }
            if j % 19 == 7 {
                p.iter_mut().for_each(|x| *x = false);
            }
            let batch = if p.iter().all(|&x| !x) {
                &zero
            } else {
                &data[((j * 3 + j / 7) % data.len() as u64) as usize]
            };
            flat.extend_from_slice(batch);
            present.extend(p);
        }
        let ts: Vec<u64> = ks.iter().map(|j| j * BATCH_STEP).collect();
        // Chunks with a batch of no antenna are formed ahead too: that batch is passed
        // over (the engine's feed hands `prepare` only batches with an antenna; any caller
        // may not).
        // Batches whose beams `prepare` forms: as many as there are items.
        let ahead = if (k / 4) % 2 == 0 {
            bp.direct().map_or(ks.len(), |d| d.sender().n_items())
        } else {
            0
        };
        if ahead > 0 {
            bp.prepare(&ts, &flat, &present).unwrap();
            each(bp, Call::Prepare);
        }
        let bb = zero.len();
        for (i, &j) in ks.iter().enumerate() {
            for (b, gate) in bp.enabled.iter().enumerate() {
                if (j / 7 + b as u64).is_multiple_of(3) {
                    gate.stop();
                } else if j % 11 == 4 {
                    gate.start((j + 1) * BATCH_STEP);
                } else if !gate.is_on() {
                    gate.start(0);
                }
            }
            let p = &present[i * na..(i + 1) * na];
            let call = Call::Batch {
                formed: i < ahead || p.iter().any(|&x| x),
                posted: p.iter().any(|&x| x) && bp.enabled.iter().any(|g| g.sends(ts[i])),
            };
            bp.batch(ts[i], &flat[i * bb..(i + 1) * bb], p).unwrap();
            each(bp, call);
        }
        k += 4;
    }
    bp.finish().unwrap();
    each(bp, Call::Finish);
}

/// What [`feed`] called last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    /// [`BPipeline::prepare`].
    Prepare,
    /// [`BPipeline::batch`] of a batch whose beams were `formed` (an antenna present, or
    /// formed ahead by `prepare`) and `posted` (an antenna present and some beam
    /// captured).
    Batch { formed: bool, posted: bool },
    /// [`BPipeline::finish`].
    Finish,
}

/// The staged beams of `n` batches of [`feed`] formed by `bf`: their datagrams
/// (descriptors first) and counters.
pub(super) fn staged(bf: Beams, n: u64) -> (Vec<(SocketAddrV4, Vec<u8>)>, Vec<BStats>) {
    let rec = Datagrams::default();
    let mut bp = pipeline(bf, &rec);
    feed(&mut bp, n, |_, _| {});
    let got = rec.lock().unwrap().clone();
    (got, bp.stats.clone())
}

/// Follows the beams' items after every call: every beam written lies in the items at its
/// beam's place, no item still in flight is written again (the fake NIC completes chains in
/// order), every frame's entries are a header and a payload inside the items under their
/// lkey; the frames are kept.
pub(super) struct Lifetime {
    writes: Arc<Mutex<Vec<u64>>>,
    base: u64,
    len: u64,
    item_bytes: u64,
    seen: usize,
    /// Items formed and not yet sent or given back, oldest first.
    formed: VecDeque<u64>,
    /// Items posted, oldest first (the last `in_flight()` of them still on the NIC).
    posted: VecDeque<u64>,
    items: u64,
    /// The frames the NIC sent, (destination, UDP payload).
    pub(super) frames: Vec<(SocketAddrV4, Vec<u8>)>,
}

impl Lifetime {
    /// Over `items`, the beams' writes recorded in `writes` (one address per beam).
    pub(super) fn new(writes: Arc<Mutex<Vec<u64>>>, items: &DeviceItems) -> Self {
        Lifetime {
            writes,
            base: items.base(),
            len: items.len() as u64,
            item_bytes: 3 * shape().beam_output_len(1) as u64,
            seen: 0,
            formed: VecDeque::new(),
            posted: VecDeque::new(),
            items: 0,
            frames: Vec::new(),
        }
    }

    /// The checks after `call` on `bp`, whose sender posts to `nic`.
    pub(super) fn check(&mut self, bp: &BPipeline, nic: &Fake, call: Call) {
        let d = bp.direct().expect("beams sent from items");
        let beam = d.beam_bytes() as u64;
        let s = d.sender();
        let writes = self.writes.lock().unwrap();
        // The items written in this call, in batch order (each beam written once; the
        // dither groups write theirs one after another).
        let mut new: Vec<(u64, Vec<u64>)> = Vec::new();
        for &w in &writes[self.seen..] {
            assert!(w >= self.base && w + beam <= self.base + self.len, "{w:#x}");
            let item = w - (w - self.base) % self.item_bytes;
            match new.iter_mut().find(|(i, _)| *i == item) {
                Some((_, ws)) => ws.push(w),
                None => new.push((item, vec![w])),
            }
        }
        self.seen = writes.len();
        for (item, ws) in &mut new {
            ws.sort_unstable();
            assert_eq!(ws[..], [*item, *item + beam, *item + 2 * beam]);
            self.formed.push_back(*item);
        }
        // The batch that left: its item (formed ahead or now, in order) was posted, or
        // given back with none of its beams captured.
        let mut just_posted = None;
        if let Call::Batch {
            formed: true,
            posted,
        } = call
        {
            let item = self.formed.pop_front().expect("a batch sent unformed");
            if posted {
                self.posted.push_back(item);
                self.items += 1;
                just_posted = Some(item);
            }
        }
        assert_eq!(
            s.stats.items, self.items,
            "one post per batch with beams captured"
        );
        while self.posted.len() > s.in_flight() {
            self.posted.pop_front();
        }
        for (item, _) in &new {
            assert!(
                !self.posted.contains(item) || just_posted == Some(*item),
                "an item in flight written into"
            );
        }
        assert!(s.in_flight() <= s.n_items());
        for (f, sges) in nic.sent() {
            check_entries(&sges, self.base, self.len);
            let (dst, udp) = crate::net::frame::fast_udp_ipv4(&f).unwrap();
            self.frames.push((dst, udp.to_vec()));
        }
    }
}

/// The direct run against the staged one (`want`, `want_stats`): the same datagrams (the
/// descriptors from the staged sender, the data heaps from the items), the same counters,
/// nothing in flight at the end, every item free again.
pub(super) fn compare(
    bp: &mut BPipeline,
    rec: &Datagrams,
    frames: &[(SocketAddrV4, Vec<u8>)],
    nic: &Fake,
    want: &[(SocketAddrV4, Vec<u8>)],
    want_stats: &[BStats],
) {
    assert_eq!(nic.pending(), 0, "chains never sent");
    // The staged sender sent the descriptors only (one per beam's destination).
    let desc = rec.lock().unwrap().clone();
    assert_eq!(desc.len(), 3);
    assert_eq!(want[..3], desc[..]);
    assert_eq!(frames.len(), want.len() - 3);
    assert!(
        frames[..] == want[3..],
        "the beam heaps from the items differ"
    );
    for (a, b) in bp.stats.iter().zip(want_stats) {
        assert_eq!(
            (
                a.heaps,
                a.bytes,
                a.clipped_samples,
                a.clipped_formed,
                a.skipped_heaps,
                a.last_timestamp
            ),
            (
                b.heaps,
                b.bytes,
                b.clipped_samples,
                b.clipped_formed,
                b.skipped_heaps,
                b.last_timestamp
            ),
            "beam {}",
            a.name
        );
    }
    let d = bp.direct_mut().unwrap();
    let n_items = d.sender().n_items();
    let st = &d.sender().stats;
    assert_eq!((st.wc_errors, st.stray_completions), (0, 0));
    assert_eq!(
        st.heaps,
        want_stats.iter().map(|s| s.heaps).sum::<u64>(),
        "one heap per captured beam"
    );
    assert_eq!(d.sender().in_flight(), 0);
    let got: Vec<u32> = (0..n_items)
        .map(|_| d.acquire(&mut Vec::new()).unwrap())
        .collect();
    assert_eq!(
        got.iter().collect::<std::collections::BTreeSet<_>>().len(),
        n_items,
        "an item never came back"
    );
}

/// A back end recording the address of every beam it writes to device memory. With
/// `host_items`, it stands in for a GPU back end over host memory: `inner` forms the beams
/// on the host and they are written into the "device" items by address (the items are
/// host memory then).
pub(super) struct RecordingX {
    pub(super) inner: Box<dyn XBackend + Send>,
    pub(super) writes: Arc<Mutex<Vec<u64>>>,
    pub(super) host_items: bool,
}

impl RecordingX {
    /// `inner` standing in for a device back end, its writes recorded nowhere.
    pub(super) fn host_device(inner: Box<dyn XBackend + Send>) -> Self {
        RecordingX {
            inner,
            writes: Arc::default(),
            host_items: true,
        }
    }
}

impl XBackend for RecordingX {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn shape(&self) -> XShape {
        self.inner.shape()
    }
    fn accumulate(&mut self, input: &[i8]) -> Result<(), XError> {
        self.inner.accumulate(input)
    }
    fn fence_input(&mut self) -> Result<(), XError> {
        self.inner.fence_input()
    }
    fn dump(&mut self, present: &[bool], out: &mut [i32]) -> Result<u64, XError> {
        self.inner.dump(present, out)
    }
    fn beamform(
        &mut self,
        batch: &[i8],
        present: &[bool],
        beams: &BeamSet,
        batch_index: u64,
        out: &mut [i8],
    ) -> Result<BeamStats, XError> {
        self.inner.beamform(batch, present, beams, batch_index, out)
    }
    fn beamform_batches(
        &mut self,
        batches: &[i8],
        present: &[bool],
        beams: &BeamSet,
        batch_indices: &[u64],
        out: &mut [i8],
    ) -> Result<Vec<BeamStats>, XError> {
        self.inner
            .beamform_batches(batches, present, beams, batch_indices, out)
    }
    fn beamforms_to_device(&self) -> bool {
        self.host_items || self.inner.beamforms_to_device()
    }
    unsafe fn beamform_batches_to_device(
        &mut self,
        batches: &[i8],
        present: &[bool],
        beams: &BeamSet,
        batch_indices: &[u64],
        dsts: &[u64],
    ) -> Result<Vec<BeamStats>, XError> {
        self.writes.lock().unwrap().extend_from_slice(dsts);
        if self.host_items {
            let each = self.shape().beam_output_len(1);
            let mut out = vec![0i8; dsts.len() * each];
            let st =
                self.inner
                    .beamform_batches(batches, present, beams, batch_indices, &mut out)?;
            for (&d, o) in dsts.iter().zip(out.chunks(each)) {
                // SAFETY: the caller's range, host memory where `host_items` is set.
                let to = unsafe { std::slice::from_raw_parts_mut(d as *mut i8, each) };
                to.copy_from_slice(o);
            }
            return Ok(st);
        }
        // SAFETY: the caller's guarantee, passed on.
        unsafe {
            self.inner
                .beamform_batches_to_device(batches, present, beams, batch_indices, dsts)
        }
    }
}

/// The whole check over `n` batches: the staged beams of `backend()` against its beams
/// written into `items` (three items' worth; device memory or host memory standing in,
/// whatever `nic` reads) and sent by `nic` (see [`Lifetime`] and [`compare`]).
pub(super) fn staged_and_direct(
    backend: impl Fn() -> Box<dyn XBackend + Send>,
    items: DeviceItems,
    mut nic: Fake,
    n: u64,
) {
    let (want, want_stats) = staged(beams(backend()), n);
    // The feed covers what it must: skipped batches, beams unsent, heaps of each beam.
    for s in &want_stats {
        assert!(s.skipped_heaps > 0 && s.heaps > 0 && s.heaps + s.skipped_heaps < n);
    }
    let rec = Datagrams::default();
    let writes = Arc::new(Mutex::new(Vec::new()));
    let recording = RecordingX {
        inner: backend(),
        writes: writes.clone(),
        host_items: false,
    };
    let mut bp = pipeline(beams(Box::new(recording)), &rec);
    let mut life = Lifetime::new(writes, &items);
    let d = direct(&bp, items, &mut nic);
    assert!(bp.with_direct(Box::new(d)).is_ok());
    feed(&mut bp, n, |bp, call| life.check(bp, &nic, call));
    let frames = std::mem::take(&mut life.frames);
    compare(&mut bp, &rec, &frames, &nic, &want, &want_stats);
}

mod cpu {
    use super::*;

    use crate::compute::xengine::CpuX;
    use crate::spead::ids;

    fn cpu() -> Box<dyn XBackend + Send> {
        Box::new(CpuX::new(shape()))
    }

    /// Host memory standing in for `n` items of the beams.
    fn host_items(n: usize) -> DeviceItems {
        let bytes = n * 3 * shape().beam_output_len(1);
        let mut host = vec![0u8; bytes + crate::net::send::verbs::REGISTER_ALIGN];
        let base = host.as_mut_ptr() as u64;
        // SAFETY: the Vec (moved into the owner, its heap buffer unmoved) covers the range.
        unsafe { DeviceItems::from_raw(base, bytes, Box::new(host)) }
    }

    /// 10k batches (some with an antenna absent, some with none, each beam's capture
    /// toggled on and off, chunks formed ahead into as many items as there are) through
    /// three items read late by the fake NIC: the frames are the staged datagrams byte for
    /// byte (an item rewritten in flight would show), every payload entry lies in the items
    /// under their lkey, no item in flight is written again, counters match, and at the end
    /// none is in flight and all three can be had again.
    #[test]
    fn ten_thousand_batches_of_beams_through_three_items_match_the_staged_heaps() {
        let host = || Box::new(RecordingX::host_device(cpu())) as Box<dyn XBackend + Send>;
        let items = host_items(3);
        staged_and_direct(host, items, Fake::nic(), 10_000);
    }

    /// Items hold one batch of these beams, from a beamformer that can write device memory:
    /// anything else is refused (and the beams keep staging); the configuration is one heap
    /// per beam to its own destination, the beams' immediates and item.
    #[test]
    fn with_direct_refuses_a_host_beamformer_or_wrong_items() {
        let rec = Datagrams::default();
        let mut bp = pipeline(beams(cpu()), &rec);
        assert!(!bp.forms_to_device());
        let items = host_items(3);
        let mut nic = Fake::nic();
        let d = direct(&bp, items, &mut nic);
        assert!(
            bp.with_direct(Box::new(d)).is_err(),
            "CPU beams form on the host"
        );
        assert!(bp.direct().is_none());
        let host = RecordingX::host_device(cpu());
        let mut bp = pipeline(beams(Box::new(host)), &rec);
        assert!(bp.forms_to_device());
        let items = host_items(3);
        let src = (SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148), [0; 6], 4);
        let bytes = bp.beam_bytes() / 2;
        let o = nic.ptr();
        let cfg = b_direct_config(bytes, dsts(), (1, 4), PAYLOAD, None, src);
        let d = BDirect::on_device(bytes, 3, 8, items, |addr| {
            let items: Vec<(u64, u32)> = (0..3)
                .map(|i| (addr + (i * 3 * bytes) as u64, ITEM_LKEY))
                .collect();
            // SAFETY: as in `direct`.
            unsafe { PeerDirectSender::from_raw(o, o, cfg, &items, |_, _| Ok(HEADER_LKEY)) }
        })
        .unwrap();
        assert!(bp.with_direct(Box::new(d)).is_err(), "half-size beams");
        let cfg = b_direct_config(2048, dsts(), (1, 4), PAYLOAD, None, src);
        assert_eq!(cfg.heaps.len(), 3);
        for (b, h) in cfg.heaps.iter().enumerate() {
            assert_eq!((h.dst, h.offset, h.len), (b, 2048 * b as u64, 2048));
        }
        assert_eq!(
            cfg.immediate_ids,
            vec![ids::TIMESTAMP, ids::FREQUENCY, ids::BEAM_ANTS]
        );
        assert_eq!(cfg.payload_id, ids::BF_RAW);
        assert!(cfg.send_queue_depth >= cfg.packets_per_item());
    }
}
