//! The F-engine's engine layer with a recording channeliser: batch scheduling and
//! alignment, skipping of batches touched by missing input, substream split, heap
//! counters and items, from a pcap file to a pcap file.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::Range;
use std::path::Path;

use common::{scratch_dir, send_digitiser_heaps, HEAP_BYTES, HEAP_SAMPLES};
use gpucbf::chunk::placement::DigitiserPlacement;
use gpucbf::fgpu::engine::{open_sink, run_pipelines};
use gpucbf::fgpu::{parse_wideband, Channelizer, FgpuSummary, Pipeline};
use gpucbf::net::heapsend::HeapSender;
use gpucbf::net::pcap::{PcapSink, PcapSource};
use gpucbf::net::source::PcapFileSource;
use gpucbf::spead::{ids, Assembler};

struct Recording {
    window: usize,
    step: u64,
}

impl Channelizer for Recording {
    fn input_range(&self, batch_ts: u64) -> [(u64, u64); 2] {
        [(batch_ts, batch_ts + self.window as u64); 2]
    }

    fn process(
        &mut self,
        batch_ts: u64,
        input: [&[i16]; 2],
        out: &mut [u8],
    ) -> Result<[u64; 2], String> {
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

/// Digitiser heaps `heaps` of both pols into a pcap file, all but `skip`: every sample of
/// heap h is h % 200 (pol 0) or −(h % 200) (pol 1).
fn write_feed(path: &Path, heaps: Range<u64>, skip: Option<(u64, u64)>) {
    let sink =
        Box::new(PcapSink::create(path, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148), 4).unwrap());
    let dsts = vec![
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148),
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7149),
    ];
    let mut s = HeapSender::new(sink, dsts, 2, 2, 8192, None);
    send_digitiser_heaps(&mut s, heaps, 2, skip, |h, pol| {
        let v = (h % 200) as i16 * if pol == 0 { 1 } else { -1 };
        let mut payload = vec![0u8; HEAP_BYTES];
        gpucbf::bitpack::pack(&vec![v; HEAP_SAMPLES as usize], 10, &mut payload);
        payload
    });
}

/// One wideband output (64 channels over two destinations) with a [`Recording`]
/// channeliser, from the digitiser pcap `dpcap` to the pcap `fpcap`, chunks of 8 heaps.
/// Returns the summary and the batch step.
fn run_recording(dpcap: &Path, fpcap: &Path) -> (FgpuSummary, u64) {
    let spec = parse_wideband(
        "name=wb,channels=64,dst=127.0.0.1:7150,127.0.0.1:7151,jones_per_batch=2048,taps=4",
    )
    .unwrap();
    let step = spec.batch_step();
    let sender = HeapSender::new(
        open_sink(Some(fpcap), Ipv4Addr::UNSPECIFIED, 4).unwrap(),
        spec.dst.clone(),
        3,
        5,
        8192,
        None,
    );
    let chan = Box::new(Recording {
        window: (32 + 3) * 128,
        step,
    });
    let pipe = Pipeline::new(spec, chan, sender, 3, 2);
    let summary = run_pipelines(
        Box::new(PcapFileSource::open(dpcap, vec![]).unwrap()),
        DigitiserPlacement::new(4096, 10, 8 * 4096).unwrap(),
        vec![pipe],
        10,
        &mut |_, _| {},
    )
    .unwrap();
    (summary, step)
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
    let mut src = PcapSource::open(&fpcap).unwrap();
    let mut asm = Assembler::new(8);
    let mut heaps = Vec::new();
    while let Some(d) = src.next_datagram().unwrap() {
        asm.push(&d.payload, &mut heaps).unwrap();
    }
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
    use gpucbf::fengine::{CpuBackend, FConfig, LinearDelayModel};
    use gpucbf::fgpu::backend::BackendChannelizer;
    use gpucbf::fgpu::control::OutputControl;
    let dir = std::env::temp_dir().join(format!("gpucbf-fgpu-packed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dpcap = dir.join("d.pcap");
    let sink = Box::new(
        PcapSink::create(&dpcap, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148), 4).unwrap(),
    );
    let dsts = vec![
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148),
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7149),
    ];
    let mut s = HeapSender::new(sink, dsts, 2, 2, 8192, None);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for h in 0..40u64 {
        for pol in 0..2u64 {
            if (h, pol) == (17, 0) {
                continue;
            }
            let v: Vec<i16> = (0..4096)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    ((x >> 40) % 511) as i16 - 255
                })
                .collect();
            let mut payload = vec![0u8; 5120];
            gpucbf::bitpack::pack(&v, 10, &mut payload);
            s.send_heap(
                pol as usize,
                &[
                    // Away from 0: the first batch's input starts before its timestamp.
                    (ids::TIMESTAMP, (h + 8) * 4096),
                    (ids::DIGITISER_ID, pol),
                    (ids::DIGITISER_STATUS, 0),
                ],
                ids::ADC_SAMPLES,
                &payload,
            )
            .unwrap();
        }
    }
    s.flush().unwrap();
    drop(s);
    let run = |packed: bool| {
        let spec = parse_wideband(
            "name=wb,channels=64,dst=127.0.0.1:7150,127.0.0.1:7151,jones_per_batch=2048,taps=4",
        )
        .unwrap();
        let mut cfg = FConfig::wideband(64, 32);
        cfg.taps = 4;
        cfg.dither_seed = 5;
        let mut ctl = OutputControl::new(64, 0.05);
        for (pol, delay, rate) in [(0, 21.0, 1.5e-4), (1, 2.0, 0.0)] {
            ctl.push_model(
                pol,
                LinearDelayModel {
                    start: 0,
                    delay,
                    delay_rate: rate,
                    phase: 0.3,
                    phase_rate: 1e-4,
                },
            );
        }
        let chan = BackendChannelizer::new(
            CpuBackend::new(cfg).unwrap(),
            10,
            std::sync::Arc::new(std::sync::Mutex::new(ctl)),
        )
        .with_packed_input(packed);
        let fpcap = dir.join(format!("f{}.pcap", u8::from(packed)));
        let sender = HeapSender::new(
            open_sink(Some(&fpcap), Ipv4Addr::UNSPECIFIED, 4).unwrap(),
            spec.dst.clone(),
            3,
            5,
            8192,
            None,
        );
        let pipe = Pipeline::new(spec, Box::new(chan), sender, 3, 2);
        let summary = run_pipelines(
            Box::new(PcapFileSource::open(&dpcap, vec![]).unwrap()),
            DigitiserPlacement::new(4096, 10, 8 * 4096).unwrap(),
            vec![pipe],
            10,
            &mut |_, _| {},
        )
        .unwrap();
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
