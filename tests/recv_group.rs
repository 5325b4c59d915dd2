//! Receive stream groups: several receive threads filling one chunk window give the same
//! chunks, presence and counters as one thread on the same feed (with loss, duplicates,
//! reordering across streams and a stream that stalls), and bad receive options are
//! refused with a clear error.

mod common;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use common::small_feng_placement;
use gpucbf::chunk::placement::DigitiserPlacement;
use gpucbf::chunk::{
    Chunk, ChunkAssembler, ChunkGroup, ChunkStats, Placement, StreamCounts, WindowPolicy,
};
use gpucbf::engines::common::EngineArgs;
use gpucbf::spead::{ids, HeapBuilder};

const HS: u64 = 4096;

/// One digitiser packet (a whole 10-bit heap) of heap `h`, pol `pol`, from digitiser 6/7,
/// its bytes depending on both.
fn dig(h: u64, pol: u64) -> Vec<u8> {
    let payload: Vec<u8> = (0..5120u64)
        .map(|i| (i * 7 + h * 13 + pol * 101) as u8)
        .collect();
    HeapBuilder::new(2 + h * 4 + pol * 2)
        .immediate(ids::TIMESTAMP, h * HS)
        .immediate(ids::DIGITISER_ID, 6 + pol)
        .immediate(ids::DIGITISER_STATUS, 0)
        .addressed(ids::ADC_SAMPLES, &payload)
        .packets(9000, true)
        .unwrap()[0]
        .to_bytes()
}

/// One F-engine heap of batch `b`, antenna `a`, cut into packets of 32 bytes (the last of
/// them first: reordered inside the heap).
fn feng(b: u64, a: u64, slot_bytes: usize, step: u64) -> Vec<Vec<u8>> {
    let payload: Vec<u8> = (0..slot_bytes as u64)
        .map(|i| (i + b * 3 + a * 17) as u8)
        .collect();
    let mut p = HeapBuilder::new(1 + b * 8 + a)
        .immediate(ids::TIMESTAMP, b * step)
        .immediate(ids::FENG_ID, a)
        .immediate(ids::FREQUENCY, 0)
        .addressed(ids::FENG_RAW, &payload)
        .packets(32 + 8 * 8 + 8 * 4, true)
        .unwrap()
        .into_iter()
        .map(|p| p.to_bytes())
        .collect::<Vec<_>>();
    p.rotate_right(1);
    p
}

/// Chunks as compared: id, per-slot received bytes, a hash of the slots received whole.
fn digest(chunks: &[Chunk]) -> Vec<(u64, Vec<u32>, u64)> {
    use std::hash::{Hash, Hasher};
    chunks
        .iter()
        .map(|c| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (0..c.n_slots())
                .filter(|&s| c.present(s))
                .for_each(|s| c.slot(s).hash(&mut h));
            (c.chunk_id, c.received.clone(), h.finish())
        })
        .collect()
}

/// Counters as compared (the notes may be worded per thread).
fn counts(s: &ChunkStats) -> ChunkStats {
    ChunkStats {
        notes: Vec::new(),
        ..s.clone()
    }
}

/// Packets in time order (stable: packets of one timestamp keep their order).
fn by_time(mut pkts: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    pkts.sort_by_key(|p| {
        gpucbf::spead::PacketView::parse(p)
            .ok()
            .and_then(|v| v.immediate(ids::TIMESTAMP))
    });
    pkts
}

/// One assembler fed every stream's packets merged in time order.
fn one_thread<P: Placement>(pl: P, streams: &[Vec<Vec<u8>>]) -> (Vec<Chunk>, ChunkStats) {
    let mut a = ChunkAssembler::with_policy(pl, WindowPolicy::new(2, 64));
    let mut out = Vec::new();
    for p in by_time(streams.concat()) {
        let _ = a.push(&p, &mut out);
    }
    a.flush(&mut out);
    (out, a.stats.clone())
}

/// A group of one thread per stream (even streams placing in batches, odd ones packet by
/// packet); `stall` as for [`ChunkGroup::new`].
fn group<P: Placement + Clone + Sync + 'static>(
    pl: P,
    streams: Vec<Vec<Vec<u8>>>,
    stall: Duration,
) -> (Vec<Chunk>, ChunkStats) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let n = streams.len();
    let g = Arc::new(ChunkGroup::new(pl, WindowPolicy::new(2, 64), n, stall, tx));
    let barrier = Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(i, pkts)| {
            let (g, barrier) = (g.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut c = StreamCounts::default();
                barrier.wait();
                // Runs of 16 packets, then the counters synced: even streams place a run
                // as one batch (inside the window throughout, one fence), odd streams
                // packet by packet (leaving after each), so both ways meet in each test.
                for run in pkts.chunks(16) {
                    if i % 2 == 0 {
                        let mut b = g.batch(i, &mut c);
                        for p in run {
                            assert!(b.push(p));
                        }
                    } else {
                        for p in run {
                            assert!(g.push(i, &mut c, p));
                        }
                    }
                    g.sync(&mut c, &mut std::iter::empty());
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let stats = g.flush();
    drop(g);
    (rx.iter().collect(), stats)
}

/// The streams of a digitiser feed: pol 0 and pol 1, heaps 0..64 (chunks of 8 heaps), some
/// heaps lost, some sent twice, and pol 1's heaps in pairs swapped inside each chunk.
fn dig_streams() -> Vec<Vec<Vec<u8>>> {
    (0..2u64)
        .map(|pol| {
            let mut v = Vec::new();
            for chunk in 0..8u64 {
                let mut c = Vec::new();
                for h in chunk * 8..chunk * 8 + 8 {
                    if (h * 5 + pol) % 11 == 3 {
                        continue;
                    }
                    c.push(dig(h, pol));
                    if h % 9 == 4 {
                        c.push(dig(h, pol));
                    }
                }
                if pol == 1 {
                    // Reordered inside the chunk.
                    c.chunks_mut(2).for_each(|p| p.reverse());
                }
                v.extend(c);
            }
            v
        })
        .collect()
}

#[test]
fn two_receive_threads_equal_one_on_a_digitiser_feed() {
    let pl = DigitiserPlacement::new(HS, 10, 8 * HS).unwrap();
    let streams = dig_streams();
    let (want, want_stats) = one_thread(pl.clone(), &streams);
    assert!(want_stats.rejected(gpucbf::chunk::Reject::Duplicate) > 0);
    assert!(want_stats.missing_heaps > 0);
    for round in 0..5 {
        let (got, stats) = group(pl.clone(), streams.clone(), Duration::from_secs(5));
        assert_eq!(digest(&got), digest(&want), "round {round}");
        assert_eq!(counts(&stats), counts(&want_stats), "round {round}");
    }
}

/// Four antennas, one stream each, heaps of several packets out of order, one antenna
/// losing some heaps; and the same with 2 streams of 2 antennas each.
#[test]
fn four_and_two_receive_threads_equal_one_on_an_fengine_feed() {
    let pl = small_feng_placement(4);
    let (sb, step) = (pl.slot_bytes(), pl.batch_step());
    let per_ant: Vec<Vec<Vec<u8>>> = (0..4u64)
        .map(|a| {
            (0..40u64)
                .filter(|b| a != 2 || b % 7 != 1)
                .flat_map(|b| feng(b, a, sb, step))
                .collect()
        })
        .collect();
    let (want, want_stats) = one_thread(pl.clone(), &per_ant);
    assert_eq!(want.len(), 10);
    for round in 0..3 {
        let (got, stats) = group(pl.clone(), per_ant.clone(), Duration::from_secs(5));
        assert_eq!(digest(&got), digest(&want), "4 streams, round {round}");
        assert_eq!(counts(&stats), counts(&want_stats));
        // Antennas 0 and 1 in one stream, 2 and 3 in the other, each in time order.
        let pairs: Vec<Vec<Vec<u8>>> = (0..2)
            .map(|k| by_time([per_ant[2 * k].clone(), per_ant[2 * k + 1].clone()].concat()))
            .collect();
        let (got, stats) = group(pl.clone(), pairs, Duration::from_secs(5));
        assert_eq!(digest(&got), digest(&want), "2 streams, round {round}");
        assert_eq!(counts(&stats), counts(&want_stats));
    }
}

/// A stream that stops after chunk 2 (its digitiser failed): the others are waited for
/// no longer than the stall time, nothing they deliver is lost, and the chunks equal one
/// thread's on the same packets.
#[test]
fn a_stalled_stream_does_not_hold_the_window() {
    let pl = DigitiserPlacement::new(HS, 10, 8 * HS).unwrap();
    let mut streams = dig_streams();
    streams[1].truncate(20);
    let (want, want_stats) = one_thread(pl.clone(), &streams);
    let (got, stats) = group(pl, streams, Duration::from_millis(100));
    assert_eq!(digest(&got), digest(&want));
    assert_eq!(counts(&stats), counts(&want_stats));
    assert_eq!(stats.rejected(gpucbf::chunk::Reject::TooOld), 0);
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    io: EngineArgs,
}

/// `--recv-affinity`, `--recv-buffer` and `--recv-chunks` values that cannot work are
/// refused before anything starts, naming the option and the reason.
#[test]
fn bad_receive_options_are_refused_clearly() {
    let err = |args: &[&str]| {
        let mut v = vec!["x"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v)
            .unwrap()
            .io
            .recv_cores()
            .unwrap_err()
            .to_string()
    };
    let e = err(&["--recv-affinity", "100000"]);
    assert!(
        e.contains("--recv-affinity 100000") && e.contains("not available"),
        "{e}"
    );
    let e = err(&["--recv-affinity", ""]);
    assert!(e.contains("--recv-affinity") && e.contains("empty"), "{e}");
    let e = err(&["--recv-affinity", "0,x"]);
    assert!(e.contains("\"x\""), "{e}");
    let e = err(&["--recv-buffer", "0"]);
    assert!(e.contains("--recv-buffer"), "{e}");
    let e = err(&["--recv-chunks", "0"]);
    assert!(e.contains("--recv-chunks"), "{e}");
    let ok = Cli::try_parse_from(["x", "--recv-affinity", "0"]).unwrap();
    assert_eq!(ok.io.recv_cores().unwrap(), vec![0]);
}

/// A stream far behind the others (its socket holds a backlog; on the H100 host a pol 18
/// chunks behind the other made the window jump back and forth 1286 times in 20 s): its
/// packets are too old and the window stays with the streams that keep up.
#[test]
fn a_lagging_stream_does_not_drag_the_window_back() {
    let pl = DigitiserPlacement::new(HS, 10, 8 * HS).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let g = ChunkGroup::new(pl, WindowPolicy::new(2, 4), 2, Duration::from_millis(1), tx);
    let (mut c0, mut c1) = (StreamCounts::default(), StreamCounts::default());
    // Pol 0 runs 10 chunks ahead, then pol 1 delivers its backlog from chunk 0 while pol 0
    // keeps going.
    for h in 0..80 {
        assert!(g.push(0, &mut c0, &dig(h, 0)));
    }
    for h in 0..80 {
        assert!(g.push(1, &mut c1, &dig(h, 1)));
        assert!(g.push(0, &mut c0, &dig(80 + h, 0)));
    }
    g.sync(&mut c0, &mut std::iter::empty());
    g.sync(&mut c1, &mut std::iter::empty());
    let stats = g.flush();
    drop(g);
    let chunks: Vec<Chunk> = rx.iter().collect();
    assert_eq!(stats.window_moves, 0, "{stats:?}");
    assert_eq!(stats.rejected(gpucbf::chunk::Reject::TooOld), 80);
    assert_eq!(stats.heaps, 160);
    let ids: Vec<u64> = chunks.iter().map(|c| c.chunk_id).collect();
    assert_eq!(ids, (0..20).collect::<Vec<_>>());
}
