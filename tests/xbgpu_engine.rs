//! The XB-engine's engine layer with stand-in backends: batches are fed inside the received
//! span only, so the unfilled head of the first chunk and tail of the last neither make
//! skipped accumulations or beam heaps nor count as missing heaps; a gap inside the span does.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};

use common::{scratch_dir, small_feng_placement};
use gpucbf::fgpu::engine::open_sink;
use gpucbf::net::heapsend::HeapSender;
use gpucbf::net::pcap::PcapSink;
use gpucbf::net::source::PcapFileSource;
use gpucbf::spead::ids;
use gpucbf::xbgpu::engine::{run_pipelines, BPipeline};
use gpucbf::xbgpu::{Beamformer, Correlator, XPipeline};

struct Counting;

impl Correlator for Counting {
    fn accumulate(&mut self, _batch: &[i8]) -> Result<(), String> {
        Ok(())
    }

    fn dump(&mut self, _present: &[bool], out: &mut [i32]) -> Result<u64, String> {
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
    ) -> Result<Vec<u64>, String> {
        Ok(vec![0; out.len()])
    }
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
            open_sink(Some(&dir.join(name)), Ipv4Addr::UNSPECIFIED, 4).unwrap(),
            vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7160)],
            0,
            1,
            8192,
            None,
        )
    };
    // Dumps of 2 batches: (2,3) complete, (4,5) antenna 1 absent, (6,7) batch 7 lost so all
    // absent ⇒ skipped, (8,9) complete.
    let x = XPipeline::new(
        "bc",
        Box::new(Counting),
        out("x.pcap"),
        2,
        step,
        0,
        2,
        4,
        true,
    );
    let b = BPipeline::new(
        &["b0".to_string()],
        Box::new(Counting),
        out("b.pcap"),
        0,
        4 * 8 * 2,
        true,
    );
    let summary = run_pipelines(
        Box::new(PcapFileSource::open(&fpcap, vec![]).unwrap()),
        pl,
        vec![x],
        Some(b),
        &mut |_, _| {},
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
