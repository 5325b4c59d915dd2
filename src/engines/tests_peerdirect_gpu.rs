//! `--use-peerdirect` on the GPU (skipped without one; fails with `GPUCBF_REQUIRE_GPU=1`):
//! the GPU channeliser keeps its batches on the device and copies each into an output item
//! of one device allocation, and a fake NIC (the fake verbs provider) reads each posted
//! chain only at its next poll, the payloads from GPU memory (a device-to-host copy) and the
//! headers from host memory: the datagrams are the staged path's, every payload byte came
//! from the registered device range, items come back only after their completion, and 10k
//! batches through three items leave nothing in flight and no device memory taken.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};

use clap::Parser;
use cudarc::driver::CudaContext;
use ibverbs_sys::IbvSge;

use super::fgpu::backend::make_channelizer;
use super::fgpu::control::OutputControl;
use super::fgpu::direct::{direct_config, DirectSender, ItemTarget};
use super::fgpu::engine::run_pipelines;
use super::fgpu::{Channelizer, FgpuConfig, Pipeline};
use super::tests_peerdirect_xgpu::gpu_nic;
use crate::chunk::placement::DigitiserPlacement;
use crate::net::recv::pcap::{PcapFileSource, PcapSource};
use crate::net::send::fake_verbs::Fake;
use crate::net::send::heap::HeapSender;
use crate::net::send::verbs::{DeviceItems, PeerDirectSender};
use crate::spead::ids;

const HEADER_LKEY: u32 = 7;
const ITEM_LKEY: u32 = 0x99;

/// fgpu on the GPU backend with the output `wideband` from `src`.
fn config(wideband: &str, src: &str) -> FgpuConfig {
    let a = super::test_cli::F::try_parse_from([
        "fgpu",
        "--adc-sample-rate",
        "1712e6",
        "--sync-time",
        "0",
        "--array-size",
        "4",
        "--feng-id",
        "1",
        "--backend",
        "gpu",
        "--wideband",
        wideband,
        "--dither-seed",
        "3",
        "--recv-chunk-samples",
        "262144",
        src,
    ])
    .unwrap()
    .a;
    a.validate().unwrap()
}

fn channelizer(cfg: &FgpuConfig) -> Box<dyn Channelizer> {
    let spec = &cfg.outputs[0];
    let ctl = OutputControl::new(spec.channels, cfg.gain as f32);
    make_channelizer(spec, cfg, Arc::new(Mutex::new(ctl))).unwrap()
}

/// Bytes of one batch of the output.
fn batch_bytes(cfg: &FgpuConfig) -> usize {
    let spec = &cfg.outputs[0];
    spec.channels * spec.spectra_per_heap() * 2 * cfg.bytes_per_value()
}

/// A direct sender of `cfg`'s output over `n` device items of `ctx`, posting to `nic`.
fn device_sender(
    cfg: &FgpuConfig,
    items: DeviceItems,
    nic: &mut Fake,
) -> std::io::Result<DirectSender> {
    let spec = &cfg.outputs[0];
    let batch = batch_bytes(cfg);
    let n = items.len() / batch;
    let src = (
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148),
        [2, 0, 0, 0, 0, 1],
        4,
    );
    let payload = cfg.io.send_packet_payload;
    let dcfg = direct_config(spec, batch, cfg.feng_id, cfg.array_size, payload, None, src);
    let o = nic.ptr();
    DirectSender::on_device(spec, cfg.feng_id, batch, items, |addr| {
        let items: Vec<(u64, u32)> = (0..n)
            .map(|i| (addr + (i * batch) as u64, ITEM_LKEY))
            .collect();
        // SAFETY: the fake NIC outlives the sender; the items are the sender's memory.
        unsafe { PeerDirectSender::from_raw(o, o, dcfg, &items, |_, _| Ok(HEADER_LKEY)) }
    })
}

/// Checks that a frame's scatter entries are a host header and a payload inside `items`.
fn check_entries(sges: &[IbvSge], base: u64, len: u64) {
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

/// The engine path on the GPU, dsim's tone and noise through fgpu's wideband output: the
/// same datagrams (bytes, destinations, order) from device items as from the staged path.
#[test]
fn gpu_peerdirect_engine_sends_the_staged_heaps_from_gpu_memory() {
    if !crate::gpu::gpu_test_guard("gpu_peerdirect_engine_sends_the_staged_heaps_from_gpu_memory") {
        return;
    }
    let dig = super::test_cli::tmp("pd-gpu", "dsim.pcap");
    super::test_cli::dsim_capture(&dig);
    let cfg = config(
        "name=wb,channels=256,dst=127.0.0.1:7150,127.0.0.1:7151,jones_per_batch=65536",
        &dig.to_string_lossy(),
    );
    let spec = cfg.outputs[0].clone();
    let run = |pipe: Pipeline| {
        let placement: DigitiserPlacement = cfg.placement.clone();
        run_pipelines(
            Box::new(PcapFileSource::open(&dig, vec![]).unwrap()),
            placement,
            vec![pipe],
            cfg.dig_sample_bits,
            &mut |_, _| {},
        )
        .unwrap()
    };
    // The staged path: batches downloaded, heaps into a pcap file.
    let fpcap = super::test_cli::tmp("pd-gpu", "staged.pcap");
    let sink = crate::engines::common::send::open_sink(
        Some(&fpcap),
        Ipv4Addr::UNSPECIFIED,
        4,
        1 << 20,
        false,
    )
    .unwrap();
    let payload = cfg.io.send_packet_payload;
    let sender = HeapSender::new(
        sink,
        spec.dst.clone(),
        cfg.feng_id,
        cfg.array_size,
        payload,
        None,
    );
    let bpv = cfg.bytes_per_value();
    let staged = run(Pipeline::new(
        spec.clone(),
        channelizer(&cfg),
        sender,
        cfg.feng_id,
        bpv,
    ));
    let mut want = Vec::new();
    let mut src = PcapSource::open(&fpcap).unwrap();
    while let Some(d) = src.next_datagram().unwrap() {
        want.push((d.dst, d.payload));
    }
    // PeerDirect: three device items, the channeliser's batches kept on the device.
    let ctx = CudaContext::new(0).unwrap();
    let batch = batch_bytes(&cfg);
    let items = DeviceItems::alloc(&ctx, 3 * batch).unwrap();
    let (base, len) = (items.base(), items.len() as u64);
    let mut nic = gpu_nic(&ctx, &items);
    let sender = device_sender(&cfg, items, &mut nic).unwrap();
    assert!(sender.on_gpu());
    let mut chan = channelizer(&cfg);
    assert!(chan.set_device_output(true));
    let direct = run(Pipeline::new(spec, chan, sender, cfg.feng_id, bpv));
    assert_eq!(nic.pending(), 0, "chains never sent");
    let sent = nic.sent();
    let mut got = Vec::new();
    for (f, sges) in &sent {
        check_entries(sges, base, len);
        let (dst, udp) = crate::net::frame::fast_udp_ipv4(f).unwrap();
        got.push((dst, udp.to_vec()));
    }
    let (s, d) = (&staged.outputs[0], &direct.outputs[0]);
    assert!(s.batches >= 6, "{s:?}");
    assert_eq!(
        (s.batches, s.heaps, s.bytes, s.clipped_samples),
        (d.batches, d.heaps, d.bytes, d.clipped_samples)
    );
    assert_eq!(got.len(), want.len());
    assert!(
        got == want,
        "the heaps sent from GPU memory differ from the staged ones"
    );
    std::fs::remove_file(&dig).ok();
    std::fs::remove_file(&fpcap).ok();
}

/// 10k batches through three device items, alternating two inputs (no dither, no delay:
/// each batch's bytes are one of two references): every frame carries its own batch's bytes
/// from the device items (an item rewritten in flight would show), items are handed out
/// only once back from the NIC, and at the end none is in flight and the device's free
/// memory is what it was after the first batches.
#[test]
fn gpu_peerdirect_ten_thousand_batches_through_three_items_leak_nothing() {
    if !crate::gpu::gpu_test_guard(
        "gpu_peerdirect_ten_thousand_batches_through_three_items_leak_nothing",
    ) {
        return;
    }
    let cfg = config(
        "name=wb,channels=64,dst=127.0.0.1:7150,127.0.0.1:7151,jones_per_batch=2048,taps=4,dither=none",
        "x.pcap",
    );
    let spec = cfg.outputs[0].clone();
    let step = spec.batch_step();
    let batch = batch_bytes(&cfg);
    let bits = cfg.dig_sample_bits;
    let t0 = 1u64 << 30;
    // Two inputs and what the (host-output) channeliser makes of each.
    let mut refc = channelizer(&cfg);
    let r = refc.input_range(t0).unwrap().unwrap();
    let n = (r[0].1 - r[0].0) as usize;
    let inputs: Vec<[Vec<u8>; 2]> = (0..2u64)
        .map(|k| {
            [0u64, 1].map(|p| {
                let s = crate::compute::fengine::sample_noise(n, 10 * k + p);
                let mut b = vec![0u8; crate::spead::bitpack::packed_len(n, bits)];
                crate::spead::bitpack::pack(&s, bits, &mut b);
                b
            })
        })
        .collect();
    let mut refs = Vec::new();
    for b in 0..4u64 {
        let ts = t0 + b * step;
        let r = refc.input_range(ts).unwrap().unwrap();
        assert_eq!((r[0].1 - r[0].0) as usize, n);
        let x = &inputs[(b % 2) as usize];
        refc.submit_packed(ts, [&x[0], &x[1]], [0, 0]).unwrap();
        let mut out = vec![0u8; batch];
        refc.complete(&mut out, true).unwrap().unwrap();
        refs.push(out);
    }
    assert!(
        refs[0] == refs[2] && refs[1] == refs[3],
        "batches depend on more than input"
    );
    assert!(refs[0] != refs[1]);
    let ctx = CudaContext::new(0).unwrap();
    let items = DeviceItems::alloc(&ctx, 3 * batch).unwrap();
    let (base, len) = (items.base(), items.len() as u64);
    let mut nic = gpu_nic(&ctx, &items);
    let mut d = device_sender(&cfg, items, &mut nic).unwrap();
    let mut chan = channelizer(&cfg);
    assert!(chan.set_device_output(true));
    let per_dst = batch / spec.dst.len();
    let mut in_flight = std::collections::VecDeque::new();
    let mut frames = 0usize;
    let mut free_after_warmup = 0;
    for b in 0..10_000u64 {
        let ts = t0 + b * step;
        chan.input_range(ts).unwrap().unwrap();
        let x = &inputs[(b % 2) as usize];
        chan.submit_packed(ts, [&x[0], &x[1]], [0, 0]).unwrap();
        let (item, ItemTarget::Device { addr, len: l }) = d.acquire().unwrap() else {
            panic!("device items");
        };
        while in_flight.len() > d.sender().in_flight() {
            in_flight.pop_front();
        }
        assert!(
            !in_flight.contains(&item),
            "item {item} handed out in flight"
        );
        // SAFETY: the acquired item's device range.
        let c = unsafe { chan.complete_to_device(addr, l, true) }
            .unwrap()
            .unwrap();
        assert_eq!(c.batch_ts, ts);
        d.send(item, ts).unwrap();
        in_flight.push_back(item);
        for (f, sges) in nic.sent() {
            check_entries(&sges, base, len);
            let (_, udp) = crate::net::frame::fast_udp_ipv4(&f).unwrap();
            let v = crate::spead::PacketView::parse(udp).unwrap();
            let k = (v.immediate(ids::TIMESTAMP).unwrap() - t0) / step;
            let dst = v.immediate(ids::FREQUENCY).unwrap() as usize / spec.channels_per_substream();
            let at = dst * per_dst + v.payload_offset as usize;
            let want = &refs[(k % 2) as usize][at..at + v.payload.len()];
            assert!(v.payload == want, "batch {k}: a frame carries other bytes");
            frames += 1;
        }
        if b == 16 {
            free_after_warmup = cudarc::driver::result::mem_get_info().unwrap().0;
        }
    }
    d.flush().unwrap();
    for (_, sges) in nic.sent() {
        check_entries(&sges, base, len);
        frames += 1;
    }
    assert_eq!((nic.pending(), d.sender().in_flight()), (0, 0));
    assert_eq!(d.sender().n_items(), 3);
    let per_batch = d.sender().packets_per_item();
    assert_eq!(frames, 10_000 * per_batch);
    let st = &d.sender().stats;
    assert_eq!(
        (st.items, st.wc_errors, st.stray_completions),
        (10_000, 0, 0)
    );
    let free = cudarc::driver::result::mem_get_info().unwrap().0;
    assert_eq!(
        free, free_after_warmup,
        "device memory taken over 10k batches"
    );
}
