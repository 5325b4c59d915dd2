//! The XB-engine's engine layer with stand-in backends: batches are fed inside the received
//! span only, so the unfilled head of the first chunk and tail of the last neither make
//! skipped accumulations or beam heaps nor count as missing heaps; a gap inside the span does.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{scratch_dir, small_feng_placement};
use gpucbf::chunk::placement::FengPlacement;
use gpucbf::compute::xengine::{Beam, BeamSet, CpuX, GpuX, XShape};
use gpucbf::engines::common::recv::RecvSetup;
use gpucbf::engines::common::send::open_sink;
use gpucbf::engines::xbgpu::engine::run_pipelines;
use gpucbf::engines::xbgpu::{BPipeline, BackendError, Beamformer, Correlator, XPipeline};
use gpucbf::gpu::gpu_test_guard;
use gpucbf::net::recv::pcap::{PcapFileSource, PcapSource};
use gpucbf::net::send::heap::HeapSender;
use gpucbf::net::send::pcap::PcapSink;
use gpucbf::net::send::PacketSink;
use gpucbf::spead::{ids, Assembler, Heap};

struct Counting;

impl Correlator for Counting {
    fn accumulate(&mut self, _batch: &[i8]) -> Result<(), BackendError> {
        Ok(())
    }

    fn dump(&mut self, _present: &[bool], out: &mut [i32]) -> Result<u64, BackendError> {
        out.iter_mut().for_each(|v| *v = 0);
        Ok(0)
    }
}

impl Beamformer for Counting {
    fn beamform(
        &mut self,
        _batch_ts: u64,
        _batch: &[i8],
        _present: &[bool],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<u64>, BackendError> {
        Ok(vec![0; out.len()])
    }
}

/// A correlation output of 2 antennas dumping every 2 batches of `step` ADC samples through
/// the [`Counting`] correlator, to `dir`/x.pcap.
fn counting_corrprod(dir: &Path, step: u64) -> XPipeline {
    let sender = HeapSender::new(
        open_sink(
            Some(&dir.join("x.pcap")),
            Ipv4Addr::UNSPECIFIED,
            4,
            1 << 20,
            false,
        )
        .unwrap(),
        vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7160)],
        0,
        1,
        8192,
        None,
    );
    XPipeline::new("bc", Box::new(Counting), sender, 2, step, 0, 2, 4, true)
}

#[test]
fn only_batches_inside_the_received_span_are_fed() {
    let dir = scratch_dir("xbgpu-span");
    let fpcap = dir.join("f.pcap");
    let pl = small_feng_placement(2);
    let step = pl.batch_step();
    let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7150);
    let sink = Box::new(PcapSink::create(&fpcap, dst, 4).unwrap());
    let mut s = HeapSender::new(sink, vec![dst], 1, 1, 8192, None);
    // Batches 2..=9 (chunks of 4: chunk 0 lacks batches 0 and 1, chunk 2 batches 10 and 11);
    // antenna 1 misses batch 5, and batch 7 is lost entirely.
    let payload = vec![1u8; 4 * 8 * 4];
    for b in 2..10u64 {
        for a in 0..2u64 {
            if (b, a) == (5, 1) || b == 7 {
                continue;
            }
            let items = [
                (ids::TIMESTAMP, b * step),
                (ids::FENG_ID, a),
                (ids::FREQUENCY, 0),
            ];
            s.send_heap(0, &items, ids::FENG_RAW, &payload).unwrap();
        }
    }
    s.flush().unwrap();
    drop(s);

    let out = |name: &str| {
        HeapSender::new(
            open_sink(
                Some(&dir.join(name)),
                Ipv4Addr::UNSPECIFIED,
                4,
                1 << 20,
                false,
            )
            .unwrap(),
            vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7160)],
            0,
            1,
            8192,
            None,
        )
    };
    // Dumps of 2 batches: (2,3) complete, (4,5) antenna 1 absent, (6,7) batch 7 lost so all
    // absent ⇒ skipped, (8,9) complete.
    let x = counting_corrprod(&dir, step);
    let b = BPipeline::new(
        &["b0".to_string()],
        Box::new(Counting),
        out("b.pcap"),
        0,
        4 * 8 * 2,
        true,
    );
    let summary = run_pipelines(
        RecvSetup::single(Box::new(PcapFileSource::open(&fpcap, vec![]).unwrap())),
        pl,
        vec![x],
        Some(b),
        &mut |_, _, _| {},
        Box::new(|_, _| {}),
    )
    .unwrap();
    assert_eq!(summary.input_heaps, 13);
    assert_eq!(summary.input_missing_heaps, 3);
    let x = &summary.corrprods[0];
    assert_eq!(
        (x.heaps, x.incomplete_accs, x.skipped_accs),
        (3, 1, 1),
        "{x:?}"
    );
    assert_eq!(x.first_timestamp, Some(2 * step));
    // Beam heaps for the 7 batches with an antenna; batch 7 (inside the span) is skipped.
    assert_eq!(
        (summary.beams[0].heaps, summary.beams[0].skipped_heaps),
        (7, 1)
    );
}

/// A lone F-engine heap at 2^46 before the feed (#27 item 1): the window opens there, then
/// follows the feed once 16 of its packets agree, and the accumulations of the feed are
/// dumped (before, every heap of the feed was too old and nothing was dumped).
#[test]
fn a_lone_far_heap_before_the_feed_does_not_wreck_it() {
    let dir = scratch_dir("xbgpu-far");
    let fpcap = dir.join("f.pcap");
    let pl = small_feng_placement(2);
    let step = pl.batch_step();
    let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7150);
    let sink = Box::new(PcapSink::create(&fpcap, dst, 4).unwrap());
    let mut s = HeapSender::new(sink, vec![dst], 1, 1, 8192, None);
    let payload = vec![1u8; 4 * 8 * 4];
    let far = (1u64 << 46) / step * step;
    for (b, a) in std::iter::once((far / step, 0)).chain((0..24u64).flat_map(|b| [(b, 0), (b, 1)]))
    {
        let items = [
            (ids::TIMESTAMP, b * step),
            (ids::FENG_ID, a),
            (ids::FREQUENCY, 0),
        ];
        s.send_heap(0, &items, ids::FENG_RAW, &payload).unwrap();
    }
    s.flush().unwrap();
    drop(s);
    let x = counting_corrprod(&dir, step);
    let summary = run_pipelines(
        RecvSetup::single(Box::new(PcapFileSource::open(&fpcap, vec![]).unwrap())),
        pl,
        vec![x],
        None,
        &mut |_, _, _| {},
        Box::new(|_, _| {}),
    )
    .unwrap();
    assert_eq!(summary.recv_window_moves, 1, "{summary:?}");
    assert_eq!(summary.recv_rejected.get("too_old_heaps"), None);
    assert_eq!(summary.recv_rejected.get("bad_timestamp_heaps"), Some(&15));
    // Batches 0..=7 lost heaps to the vote; the accumulations of batches 8..=23 are whole.
    let x = &summary.corrprods[0];
    assert_eq!(x.heaps - x.incomplete_accs, 8, "{x:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Forwards only the per-batch call of a beamformer: the engine's per-batch path.
struct PerBatch(gpucbf::engines::xbgpu::Beams);

impl Beamformer for PerBatch {
    fn beamform(
        &mut self,
        batch_ts: u64,
        batch: &[i8],
        present: &[bool],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<u64>, BackendError> {
        self.0.beamform(batch_ts, batch, present, out)
    }
}

/// Forwards both calls, recording the most batches handed over in one chunk call.
struct Chunked(gpucbf::engines::xbgpu::Beams, Arc<AtomicUsize>);

impl Beamformer for Chunked {
    fn beamform(
        &mut self,
        batch_ts: u64,
        batch: &[i8],
        present: &[bool],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<u64>, BackendError> {
        self.0.beamform(batch_ts, batch, present, out)
    }

    fn beamform_chunk(
        &mut self,
        ts: &[u64],
        data: &[i8],
        present: &[bool],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<Vec<u64>>, BackendError> {
        self.1.fetch_max(ts.len(), Ordering::Relaxed);
        self.0.beamform_chunk(ts, data, present, out)
    }
}

/// A file sink that says it is live, so that the engine sends its beams from their own
/// thread as it does to a network.
struct Live(Box<dyn PacketSink>);

impl PacketSink for Live {
    fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> std::io::Result<()> {
        self.0.send(dst, parts)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The beam heaps of an engine run on F-engine heaps with 2 chunks of 4 batches (antenna 3
/// misses batch 5), through `bf`; `live`: sent from the beams' own send thread.
fn beam_run(
    dir: &Path,
    fpcap: &Path,
    pl: &FengPlacement,
    bf: Box<dyn Beamformer>,
    name: &str,
    live: bool,
) -> Vec<Heap> {
    let bpcap = dir.join(name);
    let mut sink = open_sink(Some(&bpcap), Ipv4Addr::UNSPECIFIED, 4, 1 << 20, false).unwrap();
    if live {
        sink = Box::new(Live(sink));
    }
    let sender = HeapSender::new(
        sink,
        vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7161); 3],
        0,
        1,
        8192,
        None,
    );
    let names: Vec<String> = (0..3).map(|b| format!("b{b}")).collect();
    let bp = BPipeline::new(&names, bf, sender, 0, 4 * 16 * 2, true)
        .with_send_thread(None)
        .unwrap();
    assert_eq!(bp.sends_from_own_thread(), live);
    let summary = run_pipelines(
        RecvSetup::single(Box::new(PcapFileSource::open(fpcap, vec![]).unwrap())),
        pl.clone(),
        vec![],
        Some(bp),
        &mut |_, _, _| {},
        Box::new(|_, _| {}),
    )
    .unwrap();
    assert!(summary.beams.iter().all(|b| b.heaps == 8), "{summary:?}");
    let mut src = PcapSource::open(&bpcap).unwrap();
    let mut asm = Assembler::new(8);
    let mut heaps = Vec::new();
    while let Some(d) = src.next_datagram().unwrap() {
        asm.push(&d.payload, &mut heaps).unwrap();
    }
    heaps.retain(|h| h.pointers.iter().any(|p| p.id == ids::BF_RAW));
    heaps
}

/// The engine hands the beamformer whole chunks (a multi-batch chunk with an antenna missing in
/// one batch): the heaps equal those of the per-batch CPU path, payloads equal on the CPU back
/// end and within 1 LSB on the GPU (one launch per chunk), same items and order
/// (the chunked CPU run sends from the beams' own send thread, as to a network).
#[test]
fn chunked_beams_match_the_per_batch_cpu_path() {
    let dir = scratch_dir("xbgpu-beam-chunks");
    let fpcap = dir.join("f.pcap");
    let n_ants = 5;
    let pl = FengPlacement {
        n_ants,
        channels_per_substream: 4,
        spectra_per_heap: 16,
        sample_bits: 8,
        samples_between_spectra: 16,
        batches_per_chunk: 4,
        frequency: None,
    };
    let step = pl.batch_step();
    let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7151);
    let sink = Box::new(PcapSink::create(&fpcap, dst, 4).unwrap());
    let mut s = HeapSender::new(sink, vec![dst], 1, 1, 8192, None);
    let mut x = 12345u64;
    for b in 0..8u64 {
        for a in 0..n_ants as u64 {
            if (b, a) == (5, 3) {
                continue;
            }
            let payload: Vec<u8> = (0..4 * 16 * 4)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    // -127..=127
                    (((x >> 33) % 255) as i16 - 127) as i8 as u8
                })
                .collect();
            let items = [
                (ids::TIMESTAMP, b * step),
                (ids::FENG_ID, a),
                (ids::FREQUENCY, 0),
            ];
            s.send_heap(0, &items, ids::FENG_RAW, &payload).unwrap();
        }
    }
    s.flush().unwrap();
    drop(s);

    let shape = XShape::new(n_ants, 4, 16).unwrap();
    let set = Arc::new(Mutex::new(BeamSet {
        beams: (0..3)
            .map(|b| Beam {
                pol: b % 2,
                quant_gain: 0.05 + 0.02 * b as f64,
                weights: (0..n_ants).map(|a| 1.0 - 0.1 * a as f64).collect(),
                delays: (0..n_ants).map(|a| a as f64 * 2e-10).collect(),
                phases: (0..n_ants).map(|a| 0.3 * a as f64).collect(),
            })
            .collect(),
        channel_offset: 0,
        n_channels_total: 4,
        bandwidth: 856e6,
        dither: true,
        seed: 99,
    }));
    let cpu = || gpucbf::engines::xbgpu::Beams::new(Box::new(CpuX::new(shape)), set.clone(), step);
    let want = beam_run(
        &dir,
        &fpcap,
        &pl,
        Box::new(PerBatch(cpu())),
        "per-batch.pcap",
        false,
    );
    assert_eq!(want.len(), 24);
    let most = Arc::new(AtomicUsize::new(0));
    let chunked = beam_run(
        &dir,
        &fpcap,
        &pl,
        Box::new(Chunked(cpu(), most.clone())),
        "chunk.pcap",
        true,
    );
    assert_eq!(chunked.len(), want.len());
    assert_eq!(
        most.load(Ordering::Relaxed),
        4,
        "whole chunks go to the beamformer"
    );
    for (g, w) in chunked.iter().zip(&want) {
        assert_eq!(g.cnt, w.cnt);
        assert_eq!(g.pointers, w.pointers, "heap {}", g.cnt);
        assert!(
            g.payload == w.payload,
            "CPU: chunked and per-batch beam heap {} differ",
            g.cnt
        );
    }
    // antenna 3 missing in batch 5: beam_ants 4 there, 5 elsewhere
    let ants: Vec<u64> = want
        .iter()
        .map(|h| {
            h.pointers
                .iter()
                .find(|p| p.id == ids::BEAM_ANTS)
                .unwrap()
                .value
        })
        .collect();
    assert_eq!(ants.iter().filter(|&&a| a == 4).count(), 3, "{ants:?}");
    if !gpu_test_guard("chunked_beams_match_the_per_batch_cpu_path (GPU part)") {
        return;
    }
    let gpu =
        gpucbf::engines::xbgpu::Beams::new(Box::new(GpuX::new(shape).unwrap()), set.clone(), step);
    let most = Arc::new(AtomicUsize::new(0));
    let got = beam_run(
        &dir,
        &fpcap,
        &pl,
        Box::new(Chunked(gpu, most.clone())),
        "gpu.pcap",
        false,
    );
    assert_eq!(most.load(Ordering::Relaxed), 4);
    assert_eq!(got.len(), want.len());
    let mut off = 0;
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.cnt, w.cnt);
        assert_eq!(g.pointers, w.pointers);
        assert_eq!(g.payload.len(), w.payload.len());
        for (&a, &b) in g.payload.iter().zip(&w.payload) {
            let d = (a as i8 as i32 - b as i8 as i32).abs();
            assert!(d <= 1, "heap {}: gpu {} cpu {}", g.cnt, a as i8, b as i8);
            off += usize::from(d != 0);
        }
    }
    let total: usize = want.iter().map(|h| h.payload.len()).sum();
    assert!(off * 20 < total, "{off} of {total} values differ by 1");
    assert!(
        want.iter()
            .flat_map(|h| &h.payload)
            .filter(|&&v| v != 0)
            .count()
            * 2
            > total,
        "test beams should be mostly non-zero"
    );
}
