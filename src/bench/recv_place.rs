//! `gpucbf bench recv-place`: what placing a digitiser packet into its chunk costs the
//! receive threads, without the sockets: packets built in memory (one 5120-byte heap per
//! packet, as MeerKAT's digitisers send) go through the engine's placing paths at the
//! engine's chunk size, each line against a plain copy of the same payloads into a
//! buffer of the same size on the same threads (the bound), measured in the same run.
//!
//! * `assembler`: one thread, the [`ChunkAssembler`] (fgpu with one receive core).
//! * `group-N`: N threads placing into one [`ChunkGroup`] window (fgpu with N receive
//!   cores), thread t taking pol t % 2 and every (N/2)-th heap of it, as the receive
//!   threads of `--recv-affinity` do with two ports per pol.
//! * `copy-N`: N threads copying the same payloads to where they belong in a buffer of the
//!   window's size (memcpy only: the bound).
//!
//! Figures are nanoseconds of thread CPU time per packet (the cost per core, whatever else
//! runs) and packets per wall second of the whole line.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use crate::chunk::placement::DigitiserPlacement;
use crate::chunk::{Chunk, ChunkAssembler, ChunkGroup, Placement, StreamCounts, WindowPolicy};
use crate::net::affinity::PinGuard;
use crate::telemetry::cpu::thread_cpu_seconds;

const HEAP_SAMPLES: u64 = 4096;
const BITS: u32 = 10;

/// Options of `gpucbf bench recv-place`.
#[derive(Debug, Clone, Args)]
pub struct PlaceArgs {
    /// Samples per polarisation per chunk (fgpu's `--recv-chunk-samples`).
    #[arg(long, default_value_t = 1 << 25)]
    pub chunk_samples: u64,
    /// Chunks open at once (`--recv-chunks`).
    #[arg(long, default_value_t = 8)]
    pub window: usize,
    /// Chunks of packets each line places.
    #[arg(long, default_value_t = 24)]
    pub chunks: u64,
    /// Thread counts of the group lines.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub threads: Vec<usize>,
    /// Cores for the threads (thread t on the t-th core); none: not pinned.
    #[arg(long, value_delimiter = ',')]
    pub cores: Vec<usize>,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct PlaceLine {
    /// `assembler`, `group-N` or `copy-N`.
    pub path: String,
    /// Threads placing.
    pub threads: usize,
    /// Packets placed.
    pub packets: u64,
    /// Thread CPU nanoseconds per packet (summed over the threads).
    pub cpu_ns_per_packet: f64,
    /// Packets per wall second of the line.
    pub packets_per_second: f64,
    /// CPU per packet of the copy bound with as many threads over this line's.
    pub vs_copy: Option<f64>,
}

/// `gpucbf bench recv-place`'s report.
#[derive(Debug, Clone, Serialize)]
pub struct PlaceReport {
    /// Samples per pol per chunk.
    pub chunk_samples: u64,
    /// The lines.
    pub lines: Vec<PlaceLine>,
}

/// A thread's packets: (pol, heap index within the chunk) of each in order, and a ring of
/// packet buffers (about 0.5 MB, as a receive batch stays in the caches after the
/// kernel's copy) patched with each packet's pol and timestamp before it is pushed.
struct Packets {
    heaps: Vec<(u64, u64)>,
    ring: Vec<Vec<u8>>,
}

/// Packets in the ring of a thread.
const RING: usize = 96;

/// Writes `value` into the packet's item pointer `ptr` (after the 8-byte header).
fn patch(buf: &mut [u8], ptr: usize, value: u64) {
    let at = crate::spead::HEADER_BYTES + ptr * crate::spead::ITEM_POINTER_BYTES + 2;
    buf[at..at + 6].copy_from_slice(&value.to_be_bytes()[2..]);
}

/// Thread t's packets: pol t % 2, heaps t / 2 + j × ⌈threads / 2⌉ (all heaps of both pols,
/// interleaved, for one thread).
fn share(t: usize, threads: usize, heaps_per_chunk: u64) -> Packets {
    let heaps = if threads == 1 {
        (0..heaps_per_chunk)
            .flat_map(|k| [(0, k), (1, k)])
            .collect()
    } else {
        let per_pol = threads.div_ceil(2) as u64;
        ((t / 2) as u64..heaps_per_chunk)
            .step_by(per_pol as usize)
            .map(|k| ((t % 2) as u64, k))
            .collect()
    };
    let bytes = (HEAP_SAMPLES * BITS as u64 / 8) as usize;
    let header = crate::engines::dsim::send::data_header_template(0, bytes);
    let ring = (0..RING)
        .map(|r| {
            let mut b = header.clone();
            b.extend((0..bytes).map(|i| (i ^ r) as u8));
            b
        })
        .collect();
    Packets { heaps, ring }
}

/// Runs `f(t, packets, chunks)` on `threads` threads (pinned as `cores` says): first
/// `warm` chunks untimed (the chunk buffers faulted in and recycled once), then `chunks`
/// timed. Returns the packets of the timed part, their summed thread CPU seconds and the
/// wall seconds of the slowest thread.
fn on_threads(
    threads: usize,
    cores: &[usize],
    heaps_per_chunk: u64,
    (warm, chunks): (u64, u64),
    f: impl Fn(usize, &mut Packets, std::ops::Range<u64>) -> u64 + Sync,
) -> anyhow::Result<(u64, f64, f64)> {
    let shares: Vec<Packets> = (0..threads)
        .map(|t| share(t, threads, heaps_per_chunk))
        .collect();
    let barrier = std::sync::Barrier::new(threads);
    let results: Vec<anyhow::Result<(u64, f64, f64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = shares
            .into_iter()
            .enumerate()
            .map(|(t, mut mine)| {
                let (f, barrier) = (&f, &barrier);
                let core = cores.get(t).copied();
                s.spawn(move || -> anyhow::Result<(u64, f64, f64)> {
                    let _pin = PinGuard::new(core)?;
                    f(t, &mut mine, 0..warm);
                    barrier.wait();
                    let (t0, cpu0) = (Instant::now(), thread_cpu_seconds());
                    let n = f(t, &mut mine, warm..warm + chunks);
                    Ok((n, thread_cpu_seconds() - cpu0, t0.elapsed().as_secs_f64()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("thread panicked")))
            })
            .collect()
    });
    let (mut n, mut cpu, mut wall) = (0, 0.0, 0.0f64);
    for r in results {
        let (a, b, w) = r?;
        n += a;
        cpu += b;
        wall = wall.max(w);
    }
    Ok((n, cpu, wall))
}

/// The packets of `mine` for a span of chunks, one at a time.
struct Gen<'a> {
    mine: &'a mut Packets,
    chunks: std::ops::Range<u64>,
    heaps_per_chunk: u64,
    chunk: u64,
    i: usize,
}

impl<'a> Gen<'a> {
    fn new(mine: &'a mut Packets, mut chunks: std::ops::Range<u64>, heaps_per_chunk: u64) -> Self {
        let chunk = chunks.next().unwrap_or(u64::MAX);
        Gen {
            mine,
            chunks,
            heaps_per_chunk,
            chunk,
            i: 0,
        }
    }

    /// The next packet, patched with its pol and timestamp.
    fn next(&mut self) -> Option<&[u8]> {
        if self.i == self.mine.heaps.len() {
            self.chunk = self.chunks.next()?;
            self.i = 0;
        }
        if self.chunk == u64::MAX {
            return None;
        }
        let (pol, k) = self.mine.heaps[self.i];
        let buf = &mut self.mine.ring[self.i % RING];
        self.i += 1;
        patch(
            buf,
            4,
            (self.chunk * self.heaps_per_chunk + k) * HEAP_SAMPLES,
        );
        patch(buf, 5, pol);
        Some(buf)
    }
}

/// Pushes every packet of `mine` for the chunks `range`, calling `push` with each.
fn feed(
    mine: &mut Packets,
    range: std::ops::Range<u64>,
    heaps_per_chunk: u64,
    push: &mut dyn FnMut(&[u8]),
) -> u64 {
    let mut gen = Gen::new(mine, range, heaps_per_chunk);
    let mut n = 0;
    while let Some(buf) = gen.next() {
        push(buf);
        n += 1;
    }
    n
}

/// Takes the emitted chunks and hands them back for reuse, until the senders are gone.
fn consumer(
    rx: crossbeam_channel::Receiver<Chunk>,
    back: crossbeam_channel::Sender<Chunk>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut heaps = 0;
        for c in rx {
            heaps += c.n_present() as u64;
            if back.send(c).is_err() {
                break;
            }
        }
        heaps
    })
}

/// Runs the benchmark, printing a line per path.
pub fn run(args: &PlaceArgs) -> anyhow::Result<PlaceReport> {
    let placement = DigitiserPlacement::new(HEAP_SAMPLES, BITS, args.chunk_samples)?;
    let hpc = placement.heaps_per_pol() as u64;
    let chunks = args.chunks.max(2);
    // Untimed first: every chunk buffer of the window written and recycled once.
    let span = (args.window as u64 + 4, chunks);
    let policy = WindowPolicy::new(
        args.window.max(1),
        ChunkAssembler::<DigitiserPlacement>::JUMP_CHUNKS,
    );
    println!(
        "placing {chunks} chunks of {} samples per pol (2 pols, {hpc} heaps of {} bytes each per pol), window {} chunks; ns: thread CPU per packet",
        args.chunk_samples,
        placement.slot_bytes(),
        args.window
    );
    let mut lines = Vec::new();
    let mut line = |path: String, threads: usize, r: (u64, f64, f64)| {
        let l = PlaceLine {
            path,
            threads,
            packets: r.0,
            cpu_ns_per_packet: r.1 * 1e9 / r.0.max(1) as f64,
            packets_per_second: r.0 as f64 / r.2,
            vs_copy: None,
        };
        lines.push(l);
    };
    let mut counts: Vec<usize> = args.threads.clone();
    counts.retain(|&t| t > 0);
    counts.sort_unstable();
    counts.dedup();
    for &threads in &counts {
        // The bound: the same payloads copied into a window-sized buffer, with plain and
        // with streaming stores.
        let window_bytes = args.window.max(1) * placement.n_slots() * placement.slot_bytes();
        let mut dst = vec![1u8; window_bytes];
        let base = dst.as_mut_ptr() as usize;
        let slot_bytes = placement.slot_bytes();
        let n_slots = placement.n_slots();
        let window = args.window.max(1) as u64;
        for stream in [false, true] {
            let r = on_threads(threads, &args.cores, hpc, span, |_, mine, range| {
                let n = feed(mine, range, hpc, &mut |buf| {
                    let pkt = crate::spead::PacketView::parse(buf).expect("built packet");
                    let place = placement.place(&pkt).expect("built packet");
                    let at =
                        ((place.chunk_id % window) as usize * n_slots + place.slot) * slot_bytes;
                    // SAFETY: at + slot_bytes ≤ window_bytes (slot < n_slots, chunk %
                    // window); threads write disjoint heaps of a buffer that outlives them.
                    unsafe {
                        let d = (base as *mut u8).add(at);
                        if stream {
                            crate::mem::copy_stream(d, pkt.payload);
                            crate::mem::stream_fence();
                        } else {
                            std::ptr::copy_nonoverlapping(
                                pkt.payload.as_ptr(),
                                d,
                                pkt.payload.len(),
                            )
                        }
                    };
                });
                crate::mem::stream_fence();
                n
            })?;
            let name = if stream { "copy-nt" } else { "copy" };
            line(format!("{name}-{threads}"), threads, r);
        }
        std::hint::black_box(&dst);
        drop(dst);
        if threads == 1 {
            let mut asm = ChunkAssembler::with_policy(placement.clone(), policy);
            asm.prefill(args.window + 2);
            let asm = std::sync::Mutex::new(asm);
            let r = on_threads(1, &args.cores, hpc, span, |_, mine, range| {
                let mut asm = asm.lock().unwrap_or_else(|e| e.into_inner());
                let mut out = Vec::new();
                feed(mine, range, hpc, &mut |buf| {
                    asm_push(&mut asm, buf, &mut out);
                })
            });
            line("assembler".into(), 1, r?);
        }
        let (tx, rx) = crossbeam_channel::bounded(4);
        let (back_tx, back_rx) = crossbeam_channel::unbounded();
        let group = Arc::new(ChunkGroup::new(
            placement.clone(),
            policy,
            threads,
            Duration::from_millis(50),
            tx,
        ));
        group.prefill(args.window + 4);
        let cons = consumer(rx, back_tx);
        let r = on_threads(threads, &args.cores, hpc, span, |t, mine, range| {
            let mut c = StreamCounts::default();
            let mut gen = Gen::new(mine, range, hpc);
            let mut n = 0;
            // Batches of 64 packets (a receive batch), each followed by a sync, as the
            // receive threads do.
            loop {
                let mut batch = group.batch(t, &mut c);
                let mut k = 0;
                while k < 64 {
                    let Some(buf) = gen.next() else { break };
                    batch.push(buf);
                    k += 1;
                }
                drop(batch);
                n += k;
                group.sync(&mut c, &mut back_rx.try_iter());
                if k < 64 {
                    break;
                }
            }
            n
        })?;
        let stats = group.flush();
        drop(group);
        let heaps = cons.join().unwrap_or(0);
        let sent = 2 * hpc * (span.0 + span.1);
        anyhow::ensure!(
            stats.packets == sent && heaps == sent,
            "group-{threads}: {} of {sent} packets placed, {heaps} heaps emitted",
            stats.packets,
        );
        line(format!("group-{threads}"), threads, r);
    }
    let copy: std::collections::HashMap<usize, f64> = lines
        .iter()
        .filter(|l| l.path.starts_with("copy-") && !l.path.starts_with("copy-nt"))
        .map(|l| (l.threads, l.cpu_ns_per_packet))
        .collect();
    for l in &mut lines {
        if !l.path.starts_with("copy") {
            l.vs_copy = copy.get(&l.threads).map(|c| c / l.cpu_ns_per_packet);
        }
        println!(
            "{:<10} {:>2} threads {:>10} packets {:>8.0} ns/packet {:>12.0} packets/s{}",
            l.path,
            l.threads,
            l.packets,
            l.cpu_ns_per_packet,
            l.packets_per_second,
            l.vs_copy
                .map(|v| format!("  copy bound / this {v:.2}"))
                .unwrap_or_default()
        );
    }
    Ok(PlaceReport {
        chunk_samples: args.chunk_samples,
        lines,
    })
}

/// One packet into the assembler, emitted chunks straight back for reuse.
fn asm_push(asm: &mut ChunkAssembler<DigitiserPlacement>, buf: &[u8], out: &mut Vec<Chunk>) {
    let _ = asm.push(buf, out);
    for c in out.drain(..) {
        asm.recycle(c);
    }
}
