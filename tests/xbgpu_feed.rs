//! The XB-engine's per-chunk feed ([`ChunkFeed`]) hands batches straight from the chunk:
//! absent and incomplete heaps are zeroed in place, giving the packets a batch-by-batch feed
//! of gathered copies sent (same bytes, same order, correlation and beams, CPU and GPU);
//! the batches of one accumulation go to the correlator in one call; every output is fenced
//! before a chunk is recycled, also when feeding fails, and a chunk whose fence failed is
//! never recycled.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};

use gpucbf::chunk::placement::FengPlacement;
use gpucbf::chunk::{Chunk, Placement};
use gpucbf::compute::xengine::{Beam, BeamSet, CpuX, GpuX, XBackend, XShape};
use gpucbf::engines::xbgpu::feed::ChunkFeed;
use gpucbf::engines::xbgpu::{
    BPipeline, BackendError, Beams, Correlator, PipelineError, XPipeline,
};
use gpucbf::gpu::gpu_test_guard;
use gpucbf::mem::MemPolicy;
use gpucbf::net::send::heap::HeapSender;
use gpucbf::net::{PacketSink, SharedSink};

const N_ANTS: usize = 3;
const CHANNELS: usize = 4;
const SPECTRA: usize = 16;

fn placement() -> FengPlacement {
    FengPlacement {
        n_ants: N_ANTS,
        channels_per_substream: CHANNELS,
        spectra_per_heap: SPECTRA,
        sample_bits: 8,
        samples_between_spectra: 8,
        batches_per_chunk: 4,
        frequency: None,
    }
}

/// A packet: destination and UDP payload.
type Packet = (SocketAddrV4, Vec<u8>);

/// Every packet sent, in order.
#[derive(Clone, Default)]
struct Record(Arc<Mutex<Vec<Packet>>>);

impl PacketSink for Record {
    fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> std::io::Result<()> {
        self.0.lock().unwrap().push((dst, parts.concat()));
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    fn is_offline(&self) -> bool {
        true
    }
}

/// A correlator on a back end shared with the test (to read its upload counters).
struct Shared(Arc<Mutex<dyn XBackend + Send>>);

impl Correlator for Shared {
    fn accumulate(&mut self, batch: &[i8]) -> Result<(), BackendError> {
        Ok(self.0.lock().unwrap().accumulate(batch)?)
    }

    fn dump(&mut self, present: &[bool], out: &mut [i32]) -> Result<u64, BackendError> {
        Ok(self.0.lock().unwrap().dump(present, out)?)
    }

    fn fence_input(&mut self) -> Result<(), BackendError> {
        Ok(self.0.lock().unwrap().fence_input()?)
    }
}

fn sender(sink: &SharedSink, port: u16, n: usize) -> HeapSender {
    HeapSender::new(
        Box::new(sink.clone()),
        vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, port); n],
        0,
        1,
        8192,
        None,
    )
}

fn beam_set() -> BeamSet {
    BeamSet {
        beams: (0..2)
            .map(|b| Beam {
                pol: b % 2,
                quant_gain: 0.05,
                weights: (0..N_ANTS).map(|a| 1.0 - 0.2 * a as f64).collect(),
                delays: (0..N_ANTS).map(|a| a as f64 * 1e-10).collect(),
                phases: (0..N_ANTS).map(|a| 0.4 * a as f64).collect(),
            })
            .collect(),
        channel_offset: 0,
        n_channels_total: CHANNELS,
        bandwidth: 856e6,
        dither: true,
        seed: 7,
    }
}

/// Two correlation outputs (dumps every 3 and every 4 batches: one crosses chunks, one does
/// not) and two beams, all on one recorded sink, on back ends made by `backend`.
fn outputs(
    backend: &mut dyn FnMut() -> Arc<Mutex<dyn XBackend + Send>>,
) -> (Vec<XPipeline>, BPipeline, Record) {
    let rec = Record::default();
    let sink = SharedSink::new(Box::new(rec.clone()));
    let pl = placement();
    let xs = [3, 4]
        .iter()
        .enumerate()
        .map(|(k, &thr)| {
            XPipeline::new(
                &format!("x{k}"),
                Box::new(Shared(backend())),
                sender(&sink, 7200 + k as u16, 1),
                thr,
                pl.batch_step(),
                0,
                N_ANTS,
                CHANNELS,
                true,
            )
        })
        .collect();
    let shape = XShape::new(N_ANTS, CHANNELS, SPECTRA).unwrap();
    let bf = Beams::new(
        Box::new(CpuX::new(shape)),
        Arc::new(Mutex::new(beam_set())),
        pl.batch_step(),
    );
    let names = ["b0".to_string(), "b1".to_string()];
    let bp = BPipeline::new(
        &names,
        Box::new(bf),
        sender(&sink, 7210, 2),
        0,
        CHANNELS * SPECTRA * 2,
        true,
    );
    (xs, bp, rec)
}

/// What arrived of slot (batch, antenna): every byte, the first half, or nothing.
#[derive(Clone, Copy, PartialEq)]
enum Got {
    All,
    Half,
    None,
}

/// 5 chunks of 4 batches: antenna 1 misses batch 5; batch 9 is lost whole (a gap inside the
/// span); antenna 2's heap of batch 14 is incomplete; antenna 0 misses batches 16..=19 (a
/// whole chunk); batch 17 has only incomplete heaps; chunk 0 begins at batch 2.
fn got(b: usize, a: usize) -> Got {
    match (b, a) {
        (0 | 1, _) | (9, _) => Got::None,
        (5, 1) => Got::None,
        (14, 2) | (17, _) => Got::Half,
        (16..=19, 0) => Got::None,
        _ => Got::All,
    }
}

/// Deterministic heap bytes in [−127, 127], different for every slot.
fn heap(b: usize, a: usize, slot: usize) -> Vec<u8> {
    let mut x = (b * 131 + a * 7 + 1) as u64;
    (0..slot)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (((x >> 33) % 255) as i16 - 127) as i8 as u8
        })
        .collect()
}

/// The chunks of the feed; slots that did not arrive whole keep stale, non-zero bytes (what a
/// recycled chunk holds), and half the bytes of an incomplete heap.
fn chunks(policy: &MemPolicy) -> Vec<Chunk> {
    let pl = placement();
    let slot = pl.slot_bytes();
    (0..5)
        .map(|c| {
            let mut ch = Chunk::try_with_policy(pl.n_slots(), slot, policy).unwrap();
            ch.chunk_id = c as u64;
            for s in 0..pl.n_slots() {
                let (b, a) = (c * 4 + s / N_ANTS, s % N_ANTS);
                let bytes = &mut ch.data[s * slot..(s + 1) * slot];
                let (fill, n) = match got(b, a) {
                    Got::All => (heap(b, a, slot), slot),
                    Got::Half => (heap(b, a, slot), slot / 2),
                    Got::None => (heap(b + 1000, a, slot), 0),
                };
                bytes.copy_from_slice(&fill);
                if got(b, a) == Got::Half {
                    // the second half never arrived: stale bytes of another heap
                    bytes[slot / 2..].copy_from_slice(&heap(b + 2000, a, slot)[slot / 2..]);
                }
                ch.received[s] = n as u32;
            }
            ch
        })
        .collect()
}

/// The feed as it was before batches came straight from the chunk: each batch gathered into
/// a copy (absent and incomplete heaps zeroed) and fed to every output one at a time, inside
/// the received span.
fn batch_by_batch(chunks: &[Chunk], xs: &mut [XPipeline], bp: &mut BPipeline) {
    let pl = placement();
    let (slot, step) = (pl.slot_bytes(), pl.batch_step());
    let zeros = vec![0i8; N_ANTS * slot];
    let absent = vec![false; N_ANTS];
    let mut pending = Vec::new();
    let mut started = false;
    for ch in chunks {
        for b in 0..4 {
            let ts = (ch.chunk_id * 4 + b as u64) * step;
            let slots = b * N_ANTS..(b + 1) * N_ANTS;
            if slots.clone().all(|s| ch.received[s] == 0) {
                if started {
                    pending.push(ts);
                }
                continue;
            }
            started = true;
            for t in pending.drain(..) {
                xs.iter_mut()
                    .for_each(|x| x.batch(t, &zeros, &absent).unwrap());
                bp.batch(t, &zeros, &absent).unwrap();
            }
            let present: Vec<bool> = slots.clone().map(|s| ch.present(s)).collect();
            let mut data = Vec::new();
            for s in slots {
                if ch.present(s) {
                    data.extend(ch.slot(s).iter().map(|&v| v as i8));
                } else {
                    data.extend(std::iter::repeat_n(0i8, slot));
                }
            }
            let (d, p) = if present.iter().any(|&p| p) {
                (&data[..], &present[..])
            } else {
                (&zeros[..], &absent[..])
            };
            xs.iter_mut().for_each(|x| x.batch(ts, d, p).unwrap());
            bp.batch(ts, d, p).unwrap();
        }
    }
    xs.iter_mut().for_each(|x| x.finish().unwrap());
    bp.finish().unwrap();
}

/// The packets of the chunk feed on back ends from `backend`, with the chunks in memory of
/// `policy`; checks that what went back to the receivers is the chunks, zeroed in place where
/// nothing (whole) arrived in a batch with an antenna present.
fn chunk_feed(
    policy: &MemPolicy,
    backend: &mut dyn FnMut() -> Arc<Mutex<dyn XBackend + Send>>,
) -> Vec<Packet> {
    let pl = placement();
    let slot = pl.slot_bytes();
    let (mut xs, mut bp, rec) = outputs(backend);
    let mut feed = ChunkFeed::new(&pl);
    let mut back = Vec::new();
    for ch in chunks(policy) {
        feed.chunk_then_recycle(ch, &mut xs, Some(&mut bp), &mut |c| back.push(c))
            .unwrap();
    }
    xs.iter_mut().for_each(|x| x.finish().unwrap());
    bp.finish().unwrap();
    assert_eq!(back.len(), 5, "every chunk goes back to the receivers");
    for ch in &back {
        for s in 0..pl.n_slots() {
            let (b, a) = (ch.chunk_id as usize * 4 + s / N_ANTS, s % N_ANTS);
            let any = (0..N_ANTS).any(|k| got(b, k) == Got::All);
            let zeroed = ch.slot(s).iter().all(|&v| v == 0);
            match got(b, a) {
                Got::All => assert!(ch.slot(s) == &heap(b, a, slot)[..], "slot {b},{a}"),
                _ if any => assert!(zeroed, "slot {b},{a} of a fed batch not zeroed"),
                _ => assert!(
                    !zeroed,
                    "slot {b},{a} of an unread batch needlessly written"
                ),
            }
        }
    }
    let packets = rec.0.lock().unwrap().clone();
    packets
}

fn cpu_backend() -> Arc<Mutex<dyn XBackend + Send>> {
    Arc::new(Mutex::new(CpuX::new(
        XShape::new(N_ANTS, CHANNELS, SPECTRA).unwrap(),
    )))
}

/// Absent and incomplete heaps zeroed in place: the same packets (X and beam heaps, same
/// bytes, same order) as the batch-by-batch feed of gathered copies; on the GPU too, where
/// chunk memory is registered and copied by DMA.
#[test]
fn zeroing_in_place_sends_what_the_gathered_feed_sent() {
    let (mut xs, mut bp, rec) = outputs(&mut cpu_backend);
    let plain = MemPolicy::default();
    batch_by_batch(&chunks(&plain), &mut xs, &mut bp);
    let want = rec.0.lock().unwrap().clone();
    let stats: Vec<_> = xs.iter().map(|x| x.stats.clone()).collect();
    // thresholds 3 and 4 over batches 2..=19: dumps whole, with MISSING, and skipped
    assert_eq!(
        stats
            .iter()
            .map(|s| (s.heaps, s.incomplete_accs, s.skipped_accs))
            .collect::<Vec<_>>(),
        vec![(3, 2, 3), (2, 2, 3)],
        "{stats:?}"
    );
    assert!(want.len() > 20);
    let got = chunk_feed(&plain, &mut cpu_backend);
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(g == w, "packet {k} differs");
    }
    if !gpu_test_guard("zeroing_in_place_sends_what_the_gathered_feed_sent (GPU part)") {
        return;
    }
    let shape = XShape::new(N_ANTS, CHANNELS, SPECTRA).unwrap();
    let mut gpus: Vec<Arc<Mutex<GpuX>>> = Vec::new();
    let mut gpu = || {
        let g = Arc::new(Mutex::new(GpuX::new(shape).unwrap()));
        gpus.push(g.clone());
        g as Arc<Mutex<dyn XBackend + Send>>
    };
    let got = chunk_feed(MemPolicy::shared(), &mut gpu);
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(g == w, "GPU: packet {k} differs");
    }
    let up = gpus[0].lock().unwrap().uploads();
    if chunks(MemPolicy::shared())[0].data.cuda_pinned() {
        assert!(up.direct > 0 && up.staged == 0, "{up:?}");
    } else {
        eprintln!("chunk memory not registered here: the GPU copied pageable input ({up:?})");
    }
}

/// What the correlator and the receivers saw, in order.
#[derive(Debug, Clone, PartialEq)]
enum Event {
    /// An accumulate call of this many batches starting at this chunk byte offset.
    Accumulate {
        chunk: u64,
        offset: usize,
        batches: usize,
    },
    Fence,
    Recycle(u64),
}

/// Logs its calls against the chunk being fed; fails accumulate and fence on request.
struct Logger {
    log: Arc<Mutex<Vec<Event>>>,
    /// Base address and id of the chunk being fed.
    chunk: Arc<Mutex<(usize, u64)>>,
    batch_bytes: usize,
    fail_accumulate: bool,
    fail_fence: bool,
}

impl Correlator for Logger {
    fn accumulate(&mut self, batch: &[i8]) -> Result<(), BackendError> {
        let (base, id) = *self.chunk.lock().unwrap();
        self.log.lock().unwrap().push(Event::Accumulate {
            chunk: id,
            offset: batch.as_ptr() as usize - base,
            batches: batch.len() / self.batch_bytes,
        });
        if self.fail_accumulate {
            return Err(BackendError::LockPoisoned);
        }
        Ok(())
    }

    fn dump(&mut self, _present: &[bool], out: &mut [i32]) -> Result<u64, BackendError> {
        out.fill(0);
        Ok(0)
    }

    fn fence_input(&mut self) -> Result<(), BackendError> {
        self.log.lock().unwrap().push(Event::Fence);
        if self.fail_fence {
            return Err(BackendError::LockPoisoned);
        }
        Ok(())
    }
}

/// Feeds 3 whole chunks (12 batches) to an output dumping every 3 batches through a
/// [`Logger`] failing as asked; returns the log and the results.
fn logged_run(
    fail_accumulate: bool,
    fail_fence: bool,
) -> (Vec<Event>, Vec<Result<(), PipelineError>>) {
    let pl = placement();
    let slot = pl.slot_bytes();
    let log = Arc::new(Mutex::new(Vec::new()));
    let current = Arc::new(Mutex::new((0usize, 0u64)));
    let logger = Logger {
        log: log.clone(),
        chunk: current.clone(),
        batch_bytes: N_ANTS * slot,
        fail_accumulate,
        fail_fence,
    };
    let sink = SharedSink::new(Box::new(Record::default()));
    let x = XPipeline::new(
        "x",
        Box::new(logger),
        sender(&sink, 7220, 1),
        3,
        pl.batch_step(),
        0,
        N_ANTS,
        CHANNELS,
        true,
    );
    let mut xs = vec![x];
    let mut feed = ChunkFeed::new(&pl);
    let mut results = Vec::new();
    for c in 0..3u64 {
        let mut ch = Chunk::try_with_policy(pl.n_slots(), slot, &MemPolicy::default()).unwrap();
        ch.chunk_id = c;
        ch.received.fill(slot as u32);
        *current.lock().unwrap() = (ch.data.as_ptr() as usize, c);
        let l = log.clone();
        let r = feed.chunk_then_recycle(ch, &mut xs, None, &mut |ch| {
            l.lock().unwrap().push(Event::Recycle(ch.chunk_id))
        });
        results.push(r);
    }
    let events = log.lock().unwrap().clone();
    (events, results)
}

/// The batches of one accumulation in a chunk go to the correlator in one call (cut where
/// an accumulation ends), and the output is fenced after its last call on a chunk and
/// before the chunk is recycled.
#[test]
fn one_call_per_accumulation_and_a_fence_before_each_recycle() {
    let bb = N_ANTS * placement().slot_bytes();
    let acc = |chunk, b: usize, batches| Event::Accumulate {
        chunk,
        offset: b * bb,
        batches,
    };
    let (events, results) = logged_run(false, false);
    assert!(results.iter().all(Result::is_ok));
    use Event::{Fence, Recycle};
    assert_eq!(
        events,
        vec![
            acc(0, 0, 3),
            acc(0, 3, 1),
            Fence,
            Recycle(0),
            acc(1, 0, 2),
            acc(1, 2, 2),
            Fence,
            Recycle(1),
            acc(2, 0, 1),
            acc(2, 1, 3),
            Fence,
            Recycle(2),
        ]
    );
}

/// A failed accumulate still fences the output before the chunk goes back; a failed fence
/// keeps the chunk from the receivers (a copy may still read it); both errors reach the
/// caller.
#[test]
fn failures_fence_first_and_a_failed_fence_recycles_nothing() {
    let (events, results) = logged_run(true, false);
    assert!(results.iter().all(Result::is_err), "{results:?}");
    assert_eq!(
        events[..3],
        [
            Event::Accumulate {
                chunk: 0,
                offset: 0,
                batches: 3
            },
            Event::Fence,
            Event::Recycle(0)
        ]
    );
    let (events, results) = logged_run(false, true);
    assert!(results.iter().all(Result::is_err), "{results:?}");
    assert!(
        !events.iter().any(|e| matches!(e, Event::Recycle(_))),
        "{events:?}"
    );
    assert_eq!(events.iter().filter(|e| **e == Event::Fence).count(), 3);
}
