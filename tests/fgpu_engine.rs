//! The F-engine's engine layer with a recording channeliser: batch scheduling and
//! alignment, skipping of batches touched by missing input, substream split, heap
//! counters and items, from a pcap file to a pcap file.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::Range;
use std::path::Path;

use common::{scratch_dir, send_digitiser_heaps, HEAP_BYTES, HEAP_SAMPLES};
use gpucbf::chunk::placement::DigitiserPlacement;
use gpucbf::engines::common::send::open_sink;
use gpucbf::engines::fgpu::engine::run_pipelines;
use gpucbf::engines::fgpu::{parse_wideband, Channelizer, ChannelizerError, FgpuSummary, Pipeline};
use gpucbf::net::recv::pcap::PcapFileSource;
use gpucbf::net::recv::pcap::PcapSource;
use gpucbf::net::send::heap::HeapSender;
use gpucbf::net::send::pcap::PcapSink;
use gpucbf::spead::{ids, Assembler};

struct Recording {
    window: usize,
    step: u64,
}

impl Channelizer for Recording {
    fn input_range(&self, batch_ts: u64) -> Result<Option<[(u64, u64); 2]>, ChannelizerError> {
        Ok(Some([(batch_ts, batch_ts + self.window as u64); 2]))
    }

    fn process(
        &mut self,
        batch_ts: u64,
        input: [&[i16]; 2],
        out: &mut [u8],
    ) -> Result<[u64; 2], ChannelizerError> {
        assert_eq!(input[0].len(), self.window);
        // The input really starts at batch_ts: the digitiser payload encodes its heap index.
        let heap = (batch_ts / 4096) as i16;
        assert_eq!(input[0][0], heap % 200);
        assert_eq!(input[1][0], -(heap % 200));
        out.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = ((batch_ts / self.step) as usize + i) as u8);
        Ok([1, 2])
    }
}

/// A heap sender of digitiser heaps (pol 0 to port 7148, pol 1 to 7149) into a pcap file.
fn digitiser_sender(path: &Path) -> HeapSender {
    let sink =
        Box::new(PcapSink::create(path, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148), 4).unwrap());
    let dsts = vec![
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148),
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7149),
    ];
    HeapSender::new(sink, dsts, 2, 2, 8192, None)
}

/// Digitiser heaps `heaps` of both pols into a pcap file, all but `(heap, pol)` = `skip`,
/// with the 4096 samples `samples(heap, pol)`.
fn write_heaps(
    path: &Path,
    heaps: Range<u64>,
    skip: Option<(u64, u64)>,
    samples: impl Fn(u64, u64) -> Vec<i16>,
) {
    let mut s = digitiser_sender(path);
    send_digitiser_heaps(&mut s, heaps, 2, skip, |h, pol| {
        let mut payload = vec![0u8; HEAP_BYTES];
        gpucbf::spead::bitpack::pack(&samples(h, pol), 10, &mut payload);
        payload
    });
}

/// [`write_heaps`] where every sample of heap h is h % 200 (pol 0) or −(h % 200) (pol 1).
fn write_feed(path: &Path, heaps: Range<u64>, skip: Option<(u64, u64)>) {
    write_heaps(path, heaps, skip, |h, pol| {
        let v = (h % 200) as i16 * if pol == 0 { 1 } else { -1 };
        vec![v; HEAP_SAMPLES as usize]
    });
}

/// Noise samples of digitiser heap `h`, pol `pol` (deterministic, uniform in ±255).
fn noise_heap(h: u64, pol: u64) -> Vec<i16> {
    use rand::{RngExt, SeedableRng};
    let mut r = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(2 * h + pol);
    (0..HEAP_SAMPLES)
        .map(|_| r.random_range(-255i16..=255))
        .collect()
}

/// Heaps 0..`n_heaps` of [`noise_heap`] samples in `dir`/d.pcap; returns its path and each
/// pol's samples from timestamp 0.
fn noise_feed(dir: &Path, n_heaps: u64) -> (std::path::PathBuf, Vec<Vec<i16>>) {
    let dpcap = dir.join("d.pcap");
    write_heaps(&dpcap, 0..n_heaps, None, noise_heap);
    let signal = (0..2)
        .map(|pol| (0..n_heaps).flat_map(|h| noise_heap(h, pol)).collect())
        .collect();
    (dpcap, signal)
}

/// The wideband output of these tests: 64 channels over two destinations, batches of 32
/// spectra (a step of 4096 samples), 4 taps.
fn spec() -> gpucbf::engines::fgpu::WidebandSpec {
    parse_wideband(
        "name=wb,channels=64,dst=127.0.0.1:7150,127.0.0.1:7151,jones_per_batch=2048,taps=4",
    )
    .unwrap()
}

/// Runs [`spec`]'s output with channeliser `chan` from the digitiser pcap `dpcap` to the pcap
/// `fpcap`, chunks of 8 heaps.
fn run_output(chan: Box<dyn Channelizer>, dpcap: &Path, fpcap: &Path) -> FgpuSummary {
    let spec = spec();
    let sender = HeapSender::new(
        open_sink(Some(fpcap), Ipv4Addr::UNSPECIFIED, 4, 1 << 20, false).unwrap(),
        spec.dst.clone(),
        3,
        5,
        8192,
        None,
    );
    let pipe = Pipeline::new(spec, chan, sender, 3, 2);
    run_pipelines(
        Box::new(PcapFileSource::open(dpcap, vec![]).unwrap()),
        DigitiserPlacement::new(4096, 10, 8 * 4096).unwrap(),
        vec![pipe],
        10,
        &mut |_, _| {},
    )
    .unwrap()
}

/// [`run_output`] with a [`Recording`] channeliser; returns the summary and the batch step.
fn run_recording(dpcap: &Path, fpcap: &Path) -> (FgpuSummary, u64) {
    let step = spec().batch_step();
    let chan = Box::new(Recording {
        window: (32 + 3) * 128,
        step,
    });
    (run_output(chan, dpcap, fpcap), step)
}

/// The F-engine heaps in a pcap file.
fn read_heaps(fpcap: &Path) -> Vec<gpucbf::spead::Heap> {
    let mut src = PcapSource::open(fpcap).unwrap();
    let mut asm = Assembler::new(8);
    let mut heaps = Vec::new();
    while let Some(d) = src.next_datagram().unwrap() {
        asm.push(&d.payload, &mut heaps).unwrap();
    }
    heaps
}

/// The compute configuration of [`spec`]'s output (dither seed 5).
fn delay_cfg() -> gpucbf::compute::fengine::FConfig {
    let mut cfg = gpucbf::compute::fengine::FConfig::wideband(64, 32);
    cfg.taps = 4;
    cfg.dither_seed = 5;
    cfg
}

/// Controls with gain 0.05 and the delay model (delay, delay rate) per pol from timestamp 0.
fn delay_control(delays: [(f64, f64); 2]) -> gpucbf::engines::fgpu::control::SharedControl {
    let mut ctl = gpucbf::engines::fgpu::control::OutputControl::new(64, 0.05);
    for (pol, (delay, delay_rate)) in delays.into_iter().enumerate() {
        ctl.push_model(
            pol,
            gpucbf::compute::fengine::LinearDelayModel {
                start: 0,
                delay,
                delay_rate,
                phase: 0.3,
                phase_rate: 1e-4,
            },
        );
    }
    std::sync::Arc::new(std::sync::Mutex::new(ctl))
}

/// A CPU channeliser of [`spec`]'s output with [`delay_control`], taking packed input if
/// `packed`.
fn delay_channelizer(
    delays: [(f64, f64); 2],
    packed: bool,
) -> gpucbf::engines::fgpu::backend::BackendChannelizer<gpucbf::compute::fengine::CpuBackend> {
    gpucbf::engines::fgpu::backend::BackendChannelizer::new(
        gpucbf::compute::fengine::CpuBackend::new(delay_cfg()).unwrap(),
        10,
        delay_control(delays),
    )
    .with_packed_input(packed)
}

#[test]
fn batches_skips_and_heaps() {
    let dir = scratch_dir("fgpu");
    let dpcap = dir.join("d.pcap");
    let fpcap = dir.join("f.pcap");
    write_feed(&dpcap, 0..64, Some((10, 1)));
    let (summary, step) = run_recording(&dpcap, &fpcap);
    assert_eq!(step, 4096);

    let o = &summary.outputs[0];
    assert_eq!(o.batches, 61);
    assert_eq!(o.skipped_heaps, 4);
    assert_eq!(o.clipped_samples, [61, 122]);
    assert_eq!(summary.input_missing_heaps, [0, 1]);
    assert_eq!(summary.input_heaps, [64, 63]);

    // Read the output back: per destination, heaps with the ICD's items.
    let heaps = read_heaps(&fpcap);
    assert_eq!(heaps.len(), 122);
    let mut cnts: Vec<u64> = heaps.iter().map(|h| h.cnt).collect();
    cnts.sort();
    assert_eq!(cnts, (0..122).map(|k| 3 + 5 * k).collect::<Vec<_>>());
    for (k, h) in heaps.iter().enumerate() {
        let ids_in_order: Vec<u16> = h.pointers.iter().map(|p| p.id).collect();
        assert_eq!(
            ids_in_order,
            vec![ids::TIMESTAMP, ids::FENG_ID, ids::FREQUENCY, ids::FENG_RAW]
        );
        let ts = h.u64_item(ids::TIMESTAMP).unwrap();
        assert_eq!(ts % step, 0);
        assert!(
            ts != 9 * 4096 && ts != 10 * 4096,
            "batches touching the lost heap are skipped"
        );
        assert_eq!(h.u64_item(ids::FENG_ID), Some(3));
        let d = k % 2;
        assert_eq!(h.u64_item(ids::FREQUENCY), Some(32 * d as u64));
        let payload = match h.item(ids::FENG_RAW).unwrap() {
            gpucbf::spead::ItemValue::Bytes(b) => b,
            _ => panic!(),
        };
        assert_eq!(payload.len(), 32 * 32 * 4);
        let half = payload.len();
        assert_eq!(payload[0], ((ts / step) as usize + d * half) as u8);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A stream that starts and ends mid-chunk: batches are made inside the received span only,
/// so the unfilled head of the first chunk and tail of the last give neither skipped heaps
/// nor missing heaps.
#[test]
fn no_skips_or_missing_outside_the_received_span() {
    let dir = scratch_dir("fgpu-span");
    let dpcap = dir.join("d.pcap");
    let fpcap = dir.join("f.pcap");
    // Heaps 3..=20 in chunks of 8 heaps: chunk 0 lacks heaps 0..=2, chunk 2 heaps 21..=23.
    // Each batch needs its own heap and the next one.
    write_feed(&dpcap, 3..21, None);
    let (summary, _) = run_recording(&dpcap, &fpcap);
    let o = &summary.outputs[0];
    assert_eq!(summary.input_heaps, [18, 18]);
    assert_eq!(summary.input_missing_heaps, [0, 0]);
    assert_eq!((o.batches, o.skipped_heaps), (17, 0));
    assert_eq!(o.first_timestamp, Some(3 * 4096));
    assert_eq!(o.last_timestamp, Some(19 * 4096));
}

/// The engine with a pipelined channeliser (packed samples kept by the store, no host
/// decode, batches submitted and completed, digitiser statistics from the channeliser's
/// batches) sends exactly the heaps of the decoded path, on the CPU backend, with a
/// coarse delay that steps inside batches and a lost heap.
#[test]
fn packed_pipelined_engine_sends_the_decoded_engines_heaps() {
    let dir = scratch_dir("fgpu-packed");
    let dpcap = dir.join("d.pcap");
    // Away from 0 (heaps 8..48): the first batch's input starts before its timestamp.
    write_heaps(&dpcap, 8..48, Some((25, 0)), noise_heap);
    let run = |packed: bool| {
        let chan = delay_channelizer([(21.0, 1.5e-4), (2.0, 0.0)], packed);
        let fpcap = dir.join(format!("f{}.pcap", u8::from(packed)));
        let summary = run_output(Box::new(chan), &dpcap, &fpcap);
        let mut src = PcapSource::open(&fpcap).unwrap();
        let mut payloads = Vec::new();
        while let Some(d) = src.next_datagram().unwrap() {
            payloads.push(d.payload.to_vec());
        }
        (summary, payloads)
    };
    let (sd, bd) = run(false);
    let (sp, bp) = run(true);
    let (od, op) = (&sd.outputs[0], &sp.outputs[0]);
    assert!(od.batches > 20 && od.skipped_heaps > 0, "{od:?}");
    assert_eq!(
        (od.batches, od.heaps, od.skipped_heaps, od.clipped_samples),
        (op.batches, op.heaps, op.skipped_heaps, op.clipped_samples)
    );
    // The first batch (its input from 8·4096 − 21 on) is not made, on either path.
    assert_eq!((od.before_input_heaps, op.before_input_heaps), (2, 2));
    assert_eq!(
        (sd.input_heaps, sd.input_missing_heaps),
        (sp.input_heaps, sp.input_missing_heaps)
    );
    assert_eq!(bd.len(), bp.len());
    assert!(bd == bp, "the packed engine's heaps differ");
    for p in 0..2 {
        // Statistics over the processed batches (packed) vs all received samples: the same
        // noise level.
        assert!(
            (sd.input_rms_dbfs[p] - sp.input_rms_dbfs[p]).abs() < 0.2,
            "{:?} {:?}",
            sd.input_rms_dbfs,
            sp.input_rms_dbfs
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `--send-ibv`'s engine path: each batch written into a registered output item and posted
/// from there ([`DirectSender`]), through a fake NIC that reads a chain only at the next
/// poll (so an item rewritten while in flight would show as wrong bytes), with three items
/// recycled over 40 batches: the same datagrams, to the same destinations and in the same
/// order, as the staged path's heap sender; on the decoded and the packed paths; every item
/// back at the end.
#[cfg(feature = "ibverbs")]
#[test]
fn outputs_sent_from_their_items_are_the_staged_heaps() {
    use gpucbf::engines::fgpu::direct::{direct_config, DirectSender};
    use gpucbf::net::send::fake_verbs::Fake;
    use gpucbf::net::send::verbs::PeerDirectSender;
    let dir = scratch_dir("fgpu-direct");
    let dpcap = dir.join("d.pcap");
    write_heaps(&dpcap, 8..48, Some((25, 0)), noise_heap);
    let delays = [(21.0, 1.5e-4), (2.0, 0.0)];
    for packed in [false, true] {
        let fpcap = dir.join("staged.pcap");
        let staged = run_output(Box::new(delay_channelizer(delays, packed)), &dpcap, &fpcap);
        let mut src = PcapSource::open(&fpcap).unwrap();
        let mut want = Vec::new();
        while let Some(d) = src.next_datagram().unwrap() {
            want.push((d.dst, d.payload));
        }

        let spec = spec();
        let batch = 64 * 32 * 2 * 2;
        let mut nic = Fake::nic();
        let o = nic.ptr();
        let src = (
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148),
            [2, 0, 0, 0, 0, 1],
            4,
        );
        let dcfg = direct_config(&spec, batch, 3, 5, 8192, None, src);
        let sender = DirectSender::new(&spec, 3, batch, 3, |mem| {
            let items: Vec<(u64, u32)> = (0..3)
                .map(|i| (mem as u64 + (i * batch) as u64, 0x99))
                .collect();
            // SAFETY: the fake NIC outlives the pipeline; the items are the sender's memory.
            unsafe { PeerDirectSender::from_raw(o, o, dcfg, &items, |_, _| Ok(7)) }
        })
        .unwrap();
        let pipe = Pipeline::new(
            spec,
            Box::new(delay_channelizer(delays, packed)),
            sender,
            3,
            2,
        );
        let direct = run_pipelines(
            Box::new(PcapFileSource::open(&dpcap, vec![]).unwrap()),
            DigitiserPlacement::new(4096, 10, 8 * 4096).unwrap(),
            vec![pipe],
            10,
            &mut |_, _| {},
        )
        .unwrap();
        let got: Vec<(SocketAddrV4, Vec<u8>)> = nic
            .frames()
            .iter()
            .map(|f| {
                let (dst, udp) = gpucbf::net::frame::fast_udp_ipv4(f).unwrap();
                (dst, udp.to_vec())
            })
            .collect();
        assert_eq!(nic.pending(), 0, "chains never sent");
        let (s, d) = (&staged.outputs[0], &direct.outputs[0]);
        assert!(s.batches > 30, "{s:?}");
        assert_eq!(
            (
                s.batches,
                s.heaps,
                s.bytes,
                s.skipped_heaps,
                s.clipped_samples
            ),
            (
                d.batches,
                d.heaps,
                d.bytes,
                d.skipped_heaps,
                d.clipped_samples
            )
        );
        assert_eq!(got.len(), want.len(), "packed {packed}");
        assert!(
            got == want,
            "packed {packed}: the heaps sent from items differ"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A channeliser whose batches "stay on the device" where the device is host memory: the
/// engine's device-item path (`--use-peerdirect`) without a GPU. `complete_to_device`
/// writes the batch at the address it is given.
#[cfg(feature = "ibverbs")]
struct HostAsDevice<C: Channelizer> {
    inner: C,
    on: bool,
    scratch: Vec<u8>,
}

#[cfg(feature = "ibverbs")]
impl<C: Channelizer> Channelizer for HostAsDevice<C> {
    fn input_range(&self, ts: u64) -> Result<Option<[(u64, u64); 2]>, ChannelizerError> {
        self.inner.input_range(ts)
    }
    fn process(
        &mut self,
        ts: u64,
        input: [&[i16]; 2],
        out: &mut [u8],
    ) -> Result<[u64; 2], ChannelizerError> {
        self.inner.process(ts, input, out)
    }
    fn pipelined(&self) -> bool {
        self.inner.pipelined()
    }
    fn depth(&self) -> usize {
        self.inner.depth()
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
    fn submit_packed(
        &mut self,
        ts: u64,
        input: [&[u8]; 2],
        skip: [usize; 2],
    ) -> Result<(), ChannelizerError> {
        self.inner.submit_packed(ts, input, skip)
    }
    fn complete(
        &mut self,
        out: &mut [u8],
        wait: bool,
    ) -> Result<Option<gpucbf::engines::fgpu::Completed>, ChannelizerError> {
        assert!(!self.on, "a batch kept on the device completed to the host");
        self.inner.complete(out, wait)
    }
    fn set_device_output(&mut self, on: bool) -> bool {
        self.on = on;
        true
    }
    unsafe fn complete_to_device(
        &mut self,
        dst: u64,
        len: usize,
        wait: bool,
    ) -> Result<Option<gpucbf::engines::fgpu::Completed>, ChannelizerError> {
        assert!(self.on);
        self.scratch.resize(len, 0);
        let c = self.inner.complete(&mut self.scratch, wait)?;
        if c.is_some() {
            // SAFETY: the caller's item range (host memory in this test).
            unsafe { std::ptr::copy_nonoverlapping(self.scratch.as_ptr(), dst as *mut u8, len) };
        }
        Ok(c)
    }
}

/// `--use-peerdirect`'s engine path with host memory standing in for the device: each
/// packed batch completed by address into a device item ([`DeviceItems`], three of them,
/// recycled over 40 batches) and posted from there through a fake NIC that reads a chain
/// only at the next poll: the staged path's datagrams (same bytes, destinations, order),
/// every payload entry inside the items under their lkey, every item back at the end.
#[cfg(feature = "ibverbs")]
#[test]
fn outputs_sent_from_device_items_are_the_staged_heaps() {
    use gpucbf::engines::fgpu::direct::{direct_config, DirectSender};
    use gpucbf::net::send::fake_verbs::Fake;
    use gpucbf::net::send::verbs::{DeviceItems, PeerDirectSender, REGISTER_ALIGN};
    let dir = scratch_dir("fgpu-device-items");
    let dpcap = dir.join("d.pcap");
    write_heaps(&dpcap, 8..48, Some((25, 0)), noise_heap);
    let delays = [(21.0, 1.5e-4), (2.0, 0.0)];
    let fpcap = dir.join("staged.pcap");
    let staged = run_output(Box::new(delay_channelizer(delays, true)), &dpcap, &fpcap);
    let mut src = PcapSource::open(&fpcap).unwrap();
    let mut want = Vec::new();
    while let Some(d) = src.next_datagram().unwrap() {
        want.push((d.dst, d.payload));
    }
    let spec = spec();
    let batch = 64 * 32 * 2 * 2;
    let mut nic = Fake::nic();
    let o = nic.ptr();
    let src = (
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148),
        [2, 0, 0, 0, 0, 1],
        4,
    );
    let dcfg = direct_config(&spec, batch, 3, 5, 8192, None, src);
    let mut host = vec![0u8; 3 * batch + REGISTER_ALIGN];
    let base = host.as_mut_ptr() as u64;
    // SAFETY: the Vec's buffer (owned by the items, never moved) covers the range.
    let mem = unsafe { DeviceItems::from_raw(base, 3 * batch, Box::new(host)) };
    let sender = DirectSender::on_device(&spec, 3, batch, mem, |addr| {
        let items: Vec<(u64, u32)> = (0..3).map(|i| (addr + (i * batch) as u64, 0x99)).collect();
        // SAFETY: the fake NIC outlives the pipeline; the items are the sender's memory.
        unsafe { PeerDirectSender::from_raw(o, o, dcfg, &items, |_, _| Ok(7)) }
    })
    .unwrap();
    assert!(sender.on_gpu());
    let mut chan = HostAsDevice {
        inner: delay_channelizer(delays, true),
        on: false,
        scratch: Vec::new(),
    };
    assert!(chan.set_device_output(true));
    let pipe = Pipeline::new(spec, Box::new(chan), sender, 3, 2);
    let direct = run_pipelines(
        Box::new(PcapFileSource::open(&dpcap, vec![]).unwrap()),
        DigitiserPlacement::new(4096, 10, 8 * 4096).unwrap(),
        vec![pipe],
        10,
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(nic.pending(), 0, "chains never sent");
    let end = base + 3 * batch as u64;
    let got: Vec<(SocketAddrV4, Vec<u8>)> = nic
        .sent()
        .iter()
        .map(|(f, sges)| {
            let (h, p) = (sges[0], sges[1]);
            assert_eq!((h.lkey, p.lkey), (7, 0x99));
            assert!(p.addr >= base && p.addr + p.length as u64 <= end, "{p:?}");
            let (dst, udp) = gpucbf::net::frame::fast_udp_ipv4(f).unwrap();
            (dst, udp.to_vec())
        })
        .collect();
    let (s, d) = (&staged.outputs[0], &direct.outputs[0]);
    assert!(s.batches > 30, "{s:?}");
    assert_eq!(
        (
            s.batches,
            s.heaps,
            s.bytes,
            s.skipped_heaps,
            s.clipped_samples
        ),
        (
            d.batches,
            d.heaps,
            d.bytes,
            d.skipped_heaps,
            d.clipped_samples
        )
    );
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the heaps sent from device items differ");
    std::fs::remove_dir_all(&dir).ok();
}

/// A stream from timestamp 0 with positive delays (pol 0: 5000 samples, more than a batch
/// step; pol 1: 21): the batches whose spectra would need input from before the stream's
/// first sample are not made (counted in `before_input_heaps`, not an error and not input
/// loss), the output stays on the batch grid, and every later heap is exactly what the
/// channeliser makes of the same input; on the decoded and the packed (pipelined) engine
/// paths alike.
#[test]
fn positive_delay_at_the_stream_start_drops_only_the_early_batches() {
    let dir = scratch_dir("fgpu-early");
    let (dpcap, signal) = noise_feed(&dir, 24);
    let step = spec().batch_step();
    assert_eq!(step, 4096);
    let delays = [(5000.0, 0.0), (21.0, 0.0)];
    // What the channeliser makes of each batch, straight from the samples.
    let mut reference = delay_channelizer(delays, false);
    // The engine's batches per timestamp, checking the counters: batches 0 (both pols
    // before timestamp 0) and 1 (pol 0: 4096 − 5000 < 0) not made, nothing skipped for
    // input loss, the last batch the one whose input (pol 1 from T − 21, (32 + 3)·128
    // samples) arrived.
    let run = |chan: Box<dyn Channelizer>, what: &str| {
        let fpcap = dir.join(format!("f-{what}.pcap"));
        let summary = run_output(chan, &dpcap, &fpcap);
        let o = &summary.outputs[0];
        assert_eq!(o.before_input_heaps, 4, "{what}: {o:?}");
        assert_eq!(o.skipped_heaps, 0, "{what}: {o:?}");
        assert_eq!(o.first_timestamp, Some(2 * step), "{what}");
        assert_eq!(o.last_timestamp, Some(22 * step), "{what}");
        assert_eq!(o.batches, 21, "{what}");
        // Per batch, the payloads of substreams 0 (channels 0..32) and 1 (32..64).
        let mut by_ts = std::collections::BTreeMap::<u64, [Vec<u8>; 2]>::new();
        for h in &read_heaps(&fpcap) {
            let ts = h.u64_item(ids::TIMESTAMP).unwrap();
            assert_eq!(ts % step, 0, "{what}: off the batch grid");
            let Some(gpucbf::spead::ItemValue::Bytes(b)) = h.item(ids::FENG_RAW) else {
                panic!("no feng_raw");
            };
            let d = usize::from(h.u64_item(ids::FREQUENCY) == Some(32));
            by_ts.entry(ts).or_default()[d] = b.to_vec();
        }
        assert_eq!(by_ts.len(), 21, "{what}");
        by_ts
            .into_iter()
            .map(|(ts, [a, b])| (ts, [a, b].concat()))
            .collect::<Vec<_>>()
    };
    let mut want = Vec::new();
    for (ts, got) in run(Box::new(delay_channelizer(delays, false)), "decoded") {
        let r = reference
            .input_range(ts)
            .unwrap()
            .expect("a sent batch has its input");
        let input = [0, 1].map(|p| &signal[p][r[p].0 as usize..r[p].1 as usize]);
        let mut w = vec![0u8; got.len()];
        reference.process(ts, input, &mut w).unwrap();
        assert!(w.iter().any(|&v| v != 0));
        assert!(got == w, "decoded: batch at {ts} differs");
        want.push((ts, w));
    }
    let packed = run(Box::new(delay_channelizer(delays, true)), "packed");
    assert!(packed == want, "packed: the batches differ");
    // The GPU channeliser (batches in flight on the GPU) skips the same batches and makes
    // the others within 1 LSB on ≥ 99.9 % of values.
    if gpucbf::gpu::gpu_test_guard(
        "positive_delay_at_the_stream_start_drops_only_the_early_batches",
    ) {
        use gpucbf::compute::fengine::{GpuBackend, PipelineBackend, Pipelined};
        let be = Pipelined::new(PipelineBackend::Wideband(
            GpuBackend::new(delay_cfg()).unwrap(),
        ))
        .unwrap();
        let chan =
            gpucbf::engines::fgpu::backend::BackendChannelizer::new(be, 10, delay_control(delays));
        let gpu = run(Box::new(chan), "gpu");
        for ((ts, got), (wts, w)) in gpu.iter().zip(&want) {
            assert_eq!(ts, wts);
            let close = got
                .iter()
                .zip(w)
                .filter(|(a, b)| (**a as i8 as i32 - **b as i8 as i32).abs() <= 1)
                .count();
            assert!(
                close * 1000 >= 999 * w.len(),
                "gpu: batch at {ts}: {close}/{}",
                w.len()
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A delay model that does not evaluate (pol 1: a NaN delay from spectrum 3 of batch 8 until
/// spectrum 1 of batch 11, valid models before and after): the batches that would use it
/// (8 to 11) are dropped and counted in `delay_error_heaps`, the engine goes on to the end
/// of the input, and every other batch is sent exactly as the channeliser makes it from the
/// same samples; on the decoded and the packed engine paths alike.
#[test]
fn batches_whose_delay_model_does_not_evaluate_are_dropped_and_counted() {
    let dir = scratch_dir("fgpu-delay-error");
    let (dpcap, signal) = noise_feed(&dir, 24);
    let step = spec().batch_step();
    let sbs = 128u64;
    assert_eq!(step, 32 * sbs);
    let control = || {
        let ctl = delay_control([(21.0, 0.0), (2.0, 0.0)]);
        {
            let mut c = ctl.lock().unwrap();
            let m = |start: u64, delay: f64| gpucbf::compute::fengine::LinearDelayModel {
                start,
                delay,
                delay_rate: 0.0,
                phase: 0.1,
                phase_rate: 0.0,
            };
            c.push_model(1, m(8 * step + 3 * sbs, f64::NAN));
            c.push_model(1, m(11 * step + sbs, 7.0));
        }
        ctl
    };
    let chan = |packed: bool| {
        gpucbf::engines::fgpu::backend::BackendChannelizer::new(
            gpucbf::compute::fengine::CpuBackend::new(delay_cfg()).unwrap(),
            10,
            control(),
        )
        .with_packed_input(packed)
    };
    // What the channeliser makes of each batch, straight from the samples; batches 8 to 11
    // do not evaluate, batch 0 needs input before timestamp 0, batch 23 input past the end.
    let mut reference = chan(false);
    let mut want = std::collections::BTreeMap::new();
    for k in 0..23u64 {
        let ts = k * step;
        match reference.input_range(ts) {
            Err(_) => assert!((8..=11).contains(&k), "batch {k} does not evaluate"),
            Ok(None) => assert_eq!(k, 0),
            Ok(Some(r)) => {
                assert!(!(8..=11).contains(&k) && k > 0, "batch {k} evaluates");
                let input = [0, 1].map(|p| &signal[p][r[p].0 as usize..r[p].1 as usize]);
                let mut w = vec![0u8; 64 * 32 * 4];
                reference.process(ts, input, &mut w).unwrap();
                want.insert(ts, w);
            }
        }
    }
    assert_eq!(want.len(), 18);
    for (packed, what) in [(false, "decoded"), (true, "packed")] {
        let fpcap = dir.join(format!("f-{what}.pcap"));
        let summary = run_output(Box::new(chan(packed)), &dpcap, &fpcap);
        let o = &summary.outputs[0];
        assert_eq!(o.delay_error_heaps, 8, "{what}: {o:?}");
        assert_eq!(o.before_input_heaps, 2, "{what}: {o:?}");
        assert_eq!(o.skipped_heaps, 0, "{what}: {o:?}");
        assert_eq!((o.batches, o.heaps), (18, 36), "{what}: {o:?}");
        let mut got = std::collections::BTreeMap::<u64, [Vec<u8>; 2]>::new();
        for h in &read_heaps(&fpcap) {
            let ts = h.u64_item(ids::TIMESTAMP).unwrap();
            let Some(gpucbf::spead::ItemValue::Bytes(b)) = h.item(ids::FENG_RAW) else {
                panic!("no feng_raw");
            };
            let d = usize::from(h.u64_item(ids::FREQUENCY) == Some(32));
            got.entry(ts).or_default()[d] = b.to_vec();
        }
        let got: std::collections::BTreeMap<u64, Vec<u8>> = got
            .into_iter()
            .map(|(ts, [a, b])| (ts, [a, b].concat()))
            .collect();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{what}: the batches sent"
        );
        for (ts, w) in &want {
            assert!(&got[ts] == w, "{what}: batch at {ts} differs");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Digitiser heaps at (timestamp, pol), in this order, into a pcap file; every sample of
/// the heap at timestamp t is (t / 4096) % 200 (pol 0) or its negation (pol 1).
fn write_in_order(path: &Path, heaps: &[(u64, u64)]) {
    let mut s = digitiser_sender(path);
    for &(ts, pol) in heaps {
        let v = ((ts / HEAP_SAMPLES) % 200) as i16 * if pol == 0 { 1 } else { -1 };
        let mut payload = vec![0u8; HEAP_BYTES];
        gpucbf::spead::bitpack::pack(&[v; HEAP_SAMPLES as usize], 10, &mut payload);
        let items = [
            (ids::TIMESTAMP, ts),
            (ids::DIGITISER_ID, pol),
            (ids::DIGITISER_STATUS, 0),
        ];
        s.send_heap(pol as usize, &items, ids::ADC_SAMPLES, &payload)
            .unwrap();
    }
    s.flush().unwrap();
}

/// Heaps `heaps` of both pols, in time order.
fn in_time_order(heaps: Range<u64>) -> Vec<(u64, u64)> {
    heaps
        .flat_map(|h| [(h * HEAP_SAMPLES, 0), (h * HEAP_SAMPLES, 1)])
        .collect()
}

/// Far timestamps (#27 item 1): two packets per pol at 2^44 and 2^44 + 2^26 inside the
/// feed are dropped as bad timestamps and the output goes on as without them (before, the
/// window jumped to 2^44, every later heap was too old and the output stepped batch by
/// batch across the gap); a lone packet at 2^46 before the feed moves the window once the
/// feed agrees, and the output resynchronises to the feed's timeline in one step (before,
/// nothing was output at all).
#[test]
fn far_timestamps_neither_stall_nor_wreck_the_output() {
    let dir = scratch_dir("fgpu-far");
    let fpcap = dir.join("f.pcap");
    let plain = dir.join("plain.pcap");
    write_in_order(&plain, &in_time_order(0..64));
    let (want, _) = run_recording(&plain, &fpcap);
    let want = &want.outputs[0];
    assert_eq!(want.batches, 63);

    let (a, b) = (1u64 << 44, (1u64 << 44) + (1 << 26));
    let mut heaps = in_time_order(0..64);
    heaps.splice(40..40, [(a, 0), (a, 1), (b, 0), (b, 1)]);
    let dpcap = dir.join("d.pcap");
    write_in_order(&dpcap, &heaps);
    let (s, _) = run_recording(&dpcap, &fpcap);
    assert_eq!(
        s.recv_rejected.get("bad_timestamp_heaps"),
        Some(&4),
        "{s:?}"
    );
    assert_eq!(s.recv_rejected.get("too_old_heaps"), None, "{s:?}");
    assert_eq!(s.input_heaps, [64, 64]);
    assert_eq!(s.recv_window_moves, 0);
    let o = &s.outputs[0];
    assert_eq!(
        (o.batches, o.skipped_heaps),
        (want.batches, want.skipped_heaps)
    );
    assert_eq!(s.recv_notes.len(), 1, "{:?}", s.recv_notes);

    let mut heaps = vec![(1u64 << 46, 0)];
    heaps.extend(in_time_order(0..64));
    write_in_order(&dpcap, &heaps);
    let (s, _) = run_recording(&dpcap, &fpcap);
    assert_eq!(s.recv_window_moves, 1, "{s:?}");
    assert_eq!(s.recv_rejected.get("too_old_heaps"), None, "{s:?}");
    let o = &s.outputs[0];
    assert_eq!(o.last_timestamp, want.last_timestamp);
    // The 15 packets that voted for the move (heaps 0..=7) are lost: batches from heap 8 on.
    assert_eq!(o.first_timestamp, Some(8 * HEAP_SAMPLES));
    assert_eq!(o.batches, want.batches - 8);
    std::fs::remove_dir_all(&dir).ok();
}
