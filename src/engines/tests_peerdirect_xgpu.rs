//! `--use-peerdirect` on xbgpu's GPU path (skipped without a GPU; fails with
//! `GPUCBF_REQUIRE_GPU=1`): the GPU correlator writes each dump on the device into an item
//! of one device allocation, and a fake NIC (the fake verbs provider) reads each posted
//! chain only at its next poll, the payloads from GPU memory (a device-to-host copy) and the
//! headers from host memory: the datagrams are the staged engine's, every payload byte came
//! from the registered device range under its lkey, items are dumped into again only after
//! their completion, and 10k dumps through three items leave nothing in flight and no
//! device memory taken. The beams likewise: the GPU beamformer writes each batch's beams
//! into an item, and the captured beams' heaps are posted from there.

use std::net::SocketAddrV4;
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaContext;
use ibverbs_sys::IbvSge;

use super::tests_peerdirect_x::{feng_capture, payloads, tmp, xbgpu};
use super::tests_peerdirect_xitems::{
    batches, check_entries, direct, feed, pipeline, sent, Datagrams, Lifetime, Record, Recording,
    HEADER_LKEY, ITEM_LKEY,
};
use super::xbgpu::backend::{make_backend, Corr};
use super::xbgpu::corrprod::{x_descriptors, XPipeline};
use super::xbgpu::direct::{x_direct_config, XDirect};
use super::xbgpu::engine::run_pipelines;
use crate::compute::xengine::XShape;
use crate::engines::common::recv::RecvSetup;
use crate::net::recv::pcap::PcapFileSource;
use crate::net::send::fake_verbs::Fake;
use crate::net::send::heap::HeapSender;
use crate::net::send::verbs::{DeviceItems, PeerDirectSender};

/// A fake NIC reading payloads in `items` (device memory of `ctx`) by a device-to-host copy,
/// and everything else as host memory (shared by the GPU tests of PeerDirect).
pub(super) fn gpu_nic(ctx: &Arc<CudaContext>, items: &DeviceItems) -> Fake {
    let (ctx, base, len) = (ctx.clone(), items.base(), items.len() as u64);
    Fake::nic_reading(Box::new(move |g: &IbvSge| {
        let mut v = vec![0u8; g.length as usize];
        if g.addr >= base && g.addr < base + len {
            ctx.bind_to_thread().unwrap();
            // SAFETY: inside the live device items; the chain's item is in flight, so
            // nothing writes it.
            unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut v, g.addr) }.unwrap();
        } else {
            // SAFETY: a header in the sender's registered host memory, alive while in flight.
            v.copy_from_slice(unsafe {
                std::slice::from_raw_parts(g.addr as *const u8, g.length as usize)
            });
        }
        v
    }))
}

/// The engine on the GPU backend, dsim → fgpu → xbgpu: the staged engine (`xbgpu::run`,
/// heaps into a pcap file) against the engine loop with the correlation output's dumps
/// written into three device items and sent by the fake NIC: the same datagrams (bytes,
/// destinations, order; descriptors from the staged sender, data heaps from GPU memory).
#[test]
fn gpu_xbgpu_peerdirect_engine_sends_the_staged_heaps_from_gpu_memory() {
    if !crate::gpu::gpu_test_guard(
        "gpu_xbgpu_peerdirect_engine_sends_the_staged_heaps_from_gpu_memory",
    ) {
        return;
    }
    let f = tmp("gpu-f.pcap");
    feng_capture(&f);
    let staged_out = tmp("gpu-x.pcap");
    let o = staged_out.to_string_lossy().to_string();
    let args = || xbgpu("gpu", "127.0.0.1:7160", &["--send-pcap", &o], &[], &f);
    let cfg = args().validate().unwrap();
    let s = crate::engines::xbgpu::run(&cfg).unwrap();
    assert!(s.corrprods[0].heaps >= 4, "{s:?}");
    let want = payloads(&staged_out);
    // The same output by hand, as run.rs builds it: engine 0 of 1, descriptors first.
    let (n, cps) = (cfg.n_ants(), cfg.channels_per_substream());
    let c = &cfg.corrprods[0];
    let rec = Datagrams::default();
    let payload = cfg.io.send_packet_payload;
    let mut hs = HeapSender::new(
        Box::new(Record(rec.clone())),
        vec![c.dst],
        0,
        1,
        payload,
        None,
    );
    hs.send_descriptors(&x_descriptors(cps, n), 8872).unwrap();
    let corr = Box::new(Corr(make_backend(true, cfg.shape).unwrap()));
    let mut x = XPipeline::new(
        &c.name,
        corr,
        hs,
        c.heap_accumulation_threshold,
        cfg.placement.batch_step(),
        cfg.channel_offset as u64,
        n,
        cps,
        true,
    );
    let ctx = CudaContext::new(0).unwrap();
    let bytes = x.dump_bytes();
    let items = DeviceItems::alloc(&ctx, 3 * bytes).unwrap();
    let (base, len) = (items.base(), items.len() as u64);
    let mut nic = gpu_nic(&ctx, &items);
    let src = (
        SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 7148),
        [2, 0, 0, 0, 0, 1],
        4,
    );
    let dcfg = x_direct_config(bytes, c.dst, x.heap_cnt(), payload, None, src);
    let o = nic.ptr();
    let d = XDirect::on_device(bytes, x.channel_offset(), items, |addr| {
        let items: Vec<(u64, u32)> = (0..3)
            .map(|i| (addr + (i * bytes) as u64, ITEM_LKEY))
            .collect();
        // SAFETY: the fake NIC outlives the sender; the items are the sender's memory.
        unsafe { PeerDirectSender::from_raw(o, o, dcfg, &items, |_, _| Ok(HEADER_LKEY)) }
    })
    .unwrap();
    assert!(
        x.with_direct(Box::new(d)).is_ok(),
        "the GPU correlator dumps to device memory"
    );
    let summary = run_pipelines(
        RecvSetup::single(Box::new(PcapFileSource::open(&f, vec![]).unwrap())),
        cfg.placement.clone(),
        vec![x],
        None,
        &mut |_, _, _| {},
        Box::new(|_, _| {}),
    )
    .unwrap();
    assert_eq!(nic.pending(), 0, "chains never sent");
    let mut got = rec.lock().unwrap().clone();
    let n_desc = got.len();
    assert!(n_desc >= 1);
    for (fr, sges) in nic.sent() {
        check_entries(&sges, base, len);
        let (dst, udp) = crate::net::frame::fast_udp_ipv4(&fr).unwrap();
        got.push((dst, udp.to_vec()));
    }
    let (a, b) = (&s.corrprods[0], &summary.corrprods[0]);
    assert_eq!(
        (a.heaps, a.bytes, a.clipped_visibilities, a.incomplete_accs),
        (b.heaps, b.bytes, b.clipped_visibilities, b.incomplete_accs)
    );
    assert_eq!(got.len(), want.len());
    assert!(
        got == want,
        "the heaps sent from GPU memory differ from the staged engine's"
    );
    std::fs::remove_file(&f).ok();
    std::fs::remove_file(&staged_out).ok();
}

/// 10k accumulations (some with an antenna absent, some skipped, some unsent) on the GPU
/// correlator through three device items read late by the fake NIC: the frames equal the
/// staged GPU output's datagrams (an item rewritten in flight would show), no item in
/// flight is dumped into, payload entries lie in the registered range under its lkey, and
/// at the end nothing is in flight, all three items come again, and the device's free
/// memory is what it was after warm-up.
#[test]
fn gpu_xbgpu_peerdirect_ten_thousand_dumps_through_three_items_leak_nothing() {
    if !crate::gpu::gpu_test_guard(
        "gpu_xbgpu_peerdirect_ten_thousand_dumps_through_three_items_leak_nothing",
    ) {
        return;
    }
    let shape = XShape::new(4, 8, 64).unwrap();
    let n = 10_000;
    let data = batches(shape);
    let gpu = || Box::new(Corr(make_backend(true, shape).unwrap()));
    let want = {
        let rec = Datagrams::default();
        let mut x = pipeline(shape, gpu(), &rec);
        feed(&mut x, 4, &data, n, |_| {});
        let w = rec.lock().unwrap().clone();
        w
    };
    let rec = Datagrams::default();
    let dsts = Arc::new(Mutex::new(Vec::new()));
    let corr = Recording {
        inner: gpu(),
        dsts: dsts.clone(),
    };
    let mut x = pipeline(shape, Box::new(corr), &rec);
    let ctx = CudaContext::new(0).unwrap();
    let bytes = x.dump_bytes();
    let items = DeviceItems::alloc(&ctx, 3 * bytes).unwrap();
    let (base, len) = (items.base(), items.len() as u64);
    let mut nic = gpu_nic(&ctx, &items);
    let d = direct(&x, items, &mut nic);
    assert!(x.with_direct(Box::new(d)).is_ok());
    let mut life = Lifetime::new(dsts, base, len);
    let (mut calls, mut free_after_warmup) = (0u64, 0);
    feed(&mut x, 4, &data, n, |x| {
        life.check(x, &nic);
        calls += 1;
        if calls == 32 {
            free_after_warmup = cudarc::driver::result::mem_get_info().unwrap().0;
        }
    });
    assert_eq!(nic.pending(), 0);
    assert_eq!(
        rec.lock().unwrap()[..],
        want[..1],
        "descriptors only, staged"
    );
    assert_eq!(life.frames.len(), want.len() - 1);
    assert!(
        life.frames[..] == want[1..],
        "the heaps from GPU memory differ from the staged ones"
    );
    assert_eq!(x.stats.heaps, sent(n));
    assert!(x.stats.unsent_accs > 0 && x.stats.skipped_accs > 0 && x.stats.incomplete_accs > 0);
    let d = x.direct_mut().unwrap();
    assert_eq!(d.sender().in_flight(), 0);
    let st = &d.sender().stats;
    assert_eq!(
        (st.items, st.wc_errors, st.stray_completions),
        (sent(n), 0, 0)
    );
    let got: Vec<u32> = (0..3).map(|_| d.acquire().unwrap().0).collect();
    assert_eq!(
        got.iter().collect::<std::collections::BTreeSet<_>>().len(),
        3,
        "an item never came back"
    );
    let free = cudarc::driver::result::mem_get_info().unwrap().0;
    assert_eq!(
        free, free_after_warmup,
        "device memory taken over 10k dumps"
    );
}

/// 10k batches of three beams (two dither groups, per-beam capture toggled, batches with no
/// antenna, chunks formed ahead) on the GPU beamformer, written into three device items and
/// read late by the fake NIC: the frames equal the staged GPU beams' datagrams byte for
/// byte, every beam write lies in its item and no item in flight is written, payload
/// entries lie in the registered range under its lkey, and at the end nothing is in flight
/// and every item comes again (`tests_peerdirect_bitems::staged_and_direct`); a second run
/// leaves the device's free memory as the first did.
#[test]
fn gpu_xbgpu_peerdirect_beams_from_device_items_match_the_staged_heaps() {
    if !crate::gpu::gpu_test_guard(
        "gpu_xbgpu_peerdirect_beams_from_device_items_match_the_staged_heaps",
    ) {
        return;
    }
    use super::tests_peerdirect_bitems::{shape, staged_and_direct};
    let ctx = CudaContext::new(0).unwrap();
    let gpu = || make_backend(true, shape()).unwrap();
    let mut free = Vec::new();
    for _ in 0..2 {
        let items = DeviceItems::alloc(&ctx, 3 * 3 * shape().beam_output_len(1)).unwrap();
        let nic = gpu_nic(&ctx, &items);
        staged_and_direct(gpu, items, nic, 10_000);
        free.push(cudarc::driver::result::mem_get_info().unwrap().0);
    }
    assert_eq!(free[0], free[1], "device memory taken over 10k batches");
}
