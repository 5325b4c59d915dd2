//! `gpucbf bench xbgpu-feed`: the XB-engine's host work per received chunk, as the engine
//! loop does it ([`ChunkFeed::chunk_then_recycle`]: chunk → batches handed to the correlator,
//! absent antennas zeroed, the chunk recycled), at the shape of one MeerKAT L-band X-engine
//! (4096 channels, 256 spectra per heap, 8-bit input, 32 batches per chunk, a dump every 408
//! batches ≈ 0.5 s), on a correlator that only takes the batches: no GPU is needed. Each line
//! reads against a plain `memcpy` of a chunk measured in the same run and against the rate
//! one antenna needs in real time (1712 MS/s: 3.42 GB/s of F-engine heaps per antenna).

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use serde::Serialize;

use crate::chunk::placement::FengPlacement;
use crate::chunk::{Chunk, Placement};
use crate::compute::xengine::XShape;
use crate::engines::xbgpu::backend::{make_backend, Corr};
use crate::engines::xbgpu::feed::ChunkFeed;
use crate::engines::xbgpu::{BackendError, Correlator, XPipeline};
use crate::mem::MemPolicy;
use crate::net::send::heap::HeapSender;
use crate::net::PacketSink;

/// Options of `gpucbf bench xbgpu-feed`.
#[derive(Debug, Clone, Args)]
pub struct FeedArgs {
    /// Antenna counts, one line each (with and without missing heaps).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub ants: Vec<usize>,
    /// Channels of the X-engine (channels per substream).
    #[arg(long, default_value_t = 4096)]
    pub channels: usize,
    /// Spectra per F-engine heap.
    #[arg(long, default_value_t = 256)]
    pub spectra_per_heap: usize,
    /// Batches (heap timestamps) per receive chunk.
    #[arg(long, default_value_t = 32)]
    pub batches_per_chunk: usize,
    /// Batches per correlator dump.
    #[arg(long, default_value_t = 408)]
    pub accumulation: u64,
    /// One heap in this many is absent on the lines with missing heaps.
    #[arg(long, default_value_t = 16)]
    pub missing_every: usize,
    /// ADC sample rate the real-time figure is for, Hz.
    #[arg(long, default_value_t = 1712e6)]
    pub adc_sample_rate: f64,
    /// Seconds each line runs (at least two chunks).
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// The correlator the batches go to: `none` takes them without computing (the host work
    /// alone, no GPU needed); `gpu` is the engine's GPU back end (adds the copies, launches
    /// and the wait before each chunk is recycled); `cpu` the CPU reference (slow at this
    /// shape).
    #[arg(long, default_value = "none", value_parser = ["none", "gpu", "cpu"])]
    pub backend: String,
}

/// One line: an antenna count, with or without missing heaps.
#[derive(Debug, Clone, Serialize)]
pub struct FeedLine {
    /// Antennas.
    pub n_ants: usize,
    /// One heap in this many absent (0: none).
    pub missing_every: usize,
    /// Bytes of one chunk.
    pub chunk_bytes: usize,
    /// Chunks fed.
    pub chunks: u64,
    /// Bytes handed to the correlator.
    pub handed_bytes: u64,
    /// Correlator calls.
    pub calls: u64,
    /// Chunk bytes fed per second, GB/s.
    pub gbps: f64,
    /// Host time per chunk, µs.
    pub us_per_chunk: f64,
    /// `gbps` over the same run's memcpy bandwidth.
    pub vs_memcpy: f64,
    /// `gbps` over the rate these antennas send in real time.
    pub vs_real_time: f64,
}

/// Report of `gpucbf bench xbgpu-feed`.
#[derive(Debug, Clone, Serialize)]
pub struct FeedReport {
    /// Single-thread memcpy of one chunk of the largest line, GB/s.
    pub memcpy_gbps: f64,
    /// F-engine heap bytes one antenna sends per second in real time, GB/s.
    pub real_time_gbps_per_antenna: f64,
    /// One line per antenna count and missing-heap pattern.
    pub lines: Vec<FeedLine>,
}

/// Calls and bytes a [`Taker`] was handed.
#[derive(Default)]
struct Handed {
    calls: AtomicU64,
    bytes: AtomicU64,
}

/// Takes every batch, reading one byte of each call so the call is not optimised away.
#[derive(Default)]
struct Taker(Arc<Handed>);

impl Correlator for Taker {
    fn accumulate(&mut self, batch: &[i8]) -> Result<(), BackendError> {
        black_box(batch.first());
        self.0.calls.fetch_add(1, Ordering::Relaxed);
        self.0
            .bytes
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn dump(&mut self, _present: &[bool], out: &mut [i32]) -> Result<u64, BackendError> {
        out.fill(0);
        Ok(0)
    }
}

/// A real correlator, counted by a [`Taker`].
struct Counted(Corr, Taker);

impl Correlator for Counted {
    fn accumulate(&mut self, batch: &[i8]) -> Result<(), BackendError> {
        self.1.accumulate(batch)?;
        self.0.accumulate(batch)
    }

    fn dump(&mut self, present: &[bool], out: &mut [i32]) -> Result<u64, BackendError> {
        self.0.dump(present, out)
    }

    fn fence_input(&mut self) -> Result<(), BackendError> {
        self.0.fence_input()
    }
}

/// Drops every packet (an offline sink: no pacing).
struct Discard;

impl PacketSink for Discard {
    fn send(&mut self, _dst: SocketAddrV4, parts: &[&[u8]]) -> std::io::Result<()> {
        black_box(parts.len());
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    fn is_offline(&self) -> bool {
        true
    }
}

/// Runs the lines and prints them.
pub fn run(a: &FeedArgs) -> anyhow::Result<FeedReport> {
    anyhow::ensure!(
        !a.ants.is_empty() && a.ants.iter().all(|&n| n >= 1),
        "--ants: give antenna counts of at least 1"
    );
    anyhow::ensure!(
        a.channels >= 1 && a.spectra_per_heap >= 1 && a.batches_per_chunk >= 1,
        "--channels, --spectra-per-heap and --batches-per-chunk must be at least 1"
    );
    anyhow::ensure!(a.accumulation >= 1, "--accumulation must be at least 1");
    anyhow::ensure!(a.missing_every >= 2, "--missing-every must be at least 2");
    anyhow::ensure!(
        a.adc_sample_rate > 0.0 && a.seconds >= 0.0,
        "--adc-sample-rate must be positive and --seconds not negative"
    );
    let most = a.ants.iter().copied().max().unwrap_or(1);
    let memcpy_gbps = memcpy_gbps(placement(a, most).n_slots() * placement(a, most).slot_bytes());
    let pl1 = placement(a, 1);
    let per_ant = pl1.slot_bytes() as f64 * a.adc_sample_rate / pl1.batch_step() as f64 / 1e9;
    println!(
        "xbgpu feed ({} correlator): {} channels, {} spectra per heap, {} batches per chunk; \
         memcpy {:.2} GB/s, real time {:.2} GB/s per antenna",
        a.backend, a.channels, a.spectra_per_heap, a.batches_per_chunk, memcpy_gbps, per_ant
    );
    let mut lines = Vec::new();
    for &n in &a.ants {
        for missing in [0, a.missing_every] {
            let mut l = line(a, n, missing)?;
            l.vs_memcpy = l.gbps / memcpy_gbps;
            l.vs_real_time = l.gbps / (per_ant * n as f64);
            println!(
                "  {n} antenna(s), {}: {:.2} GB/s = {:.2}x memcpy, {:.1}x real time, \
                 {:.1} µs per chunk ({} chunks of {} MiB, {} correlator calls)",
                if missing == 0 {
                    "all heaps".to_string()
                } else {
                    format!("1 heap in {missing} absent")
                },
                l.gbps,
                l.vs_memcpy,
                l.vs_real_time,
                l.us_per_chunk,
                l.chunks,
                l.chunk_bytes >> 20,
                l.calls
            );
            lines.push(l);
        }
    }
    Ok(FeedReport {
        memcpy_gbps,
        real_time_gbps_per_antenna: per_ant,
        lines,
    })
}

fn placement(a: &FeedArgs, n_ants: usize) -> FengPlacement {
    FengPlacement {
        n_ants,
        channels_per_substream: a.channels,
        spectra_per_heap: a.spectra_per_heap,
        sample_bits: 8,
        samples_between_spectra: 2 * a.channels as u64,
        batches_per_chunk: a.batches_per_chunk,
        frequency: None,
    }
}

/// GB/s of a single-thread copy of `bytes` (best of a few).
fn memcpy_gbps(bytes: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let mut best = f64::INFINITY;
    for _ in 0..4 {
        let t = Instant::now();
        dst.copy_from_slice(black_box(&src));
        black_box(&dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    bytes as f64 / best / 1e9
}

/// Feeds two chunks in turn (ids counting up, as received) for `a.seconds`.
fn line(a: &FeedArgs, n_ants: usize, missing: usize) -> anyhow::Result<FeedLine> {
    let pl = placement(a, n_ants);
    let (n_slots, slot) = (pl.n_slots(), pl.slot_bytes());
    let policy = MemPolicy::shared();
    let mut ring = std::collections::VecDeque::new();
    for k in 0..2 {
        let mut c = Chunk::try_with_policy(n_slots, slot, policy)?;
        for (i, b) in c.data.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(k) & 0x7f;
        }
        ring.push_back(c);
    }
    let taker = Taker::default();
    let handed = taker.0.clone();
    let corr: Box<dyn Correlator> = match a.backend.as_str() {
        "none" => Box::new(taker),
        b => {
            let shape = XShape::new(n_ants, a.channels, a.spectra_per_heap)?;
            Box::new(Counted(Corr(make_backend(b == "gpu", shape)?), taker))
        }
    };
    let sender = HeapSender::new(
        Box::new(Discard),
        vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148)],
        0,
        1,
        8192,
        None,
    );
    let x = XPipeline::new(
        "bench",
        corr,
        sender,
        a.accumulation,
        pl.batch_step(),
        0,
        n_ants,
        a.channels,
        true,
    );
    let mut xs = vec![x];
    let mut feed = ChunkFeed::new(&pl);
    let mut fed = 0u64;
    let mut seconds = 0.0;
    while fed < 2 || seconds < a.seconds {
        let mut c = ring
            .pop_front()
            .ok_or_else(|| anyhow::anyhow!("a chunk was not recycled"))?;
        c.chunk_id = fed;
        for (s, r) in c.received.iter_mut().enumerate() {
            let absent = missing > 0 && (s + fed as usize * 7).is_multiple_of(missing);
            *r = if absent { 0 } else { slot as u32 };
        }
        let t = Instant::now();
        feed.chunk_then_recycle(c, &mut xs, None, &mut |c| ring.push_back(c))?;
        seconds += t.elapsed().as_secs_f64();
        fed += 1;
    }
    let calls = handed.calls.load(Ordering::Relaxed);
    let handed_bytes = handed.bytes.load(Ordering::Relaxed);
    let chunk_bytes = n_slots * slot;
    Ok(FeedLine {
        n_ants,
        missing_every: missing,
        chunk_bytes,
        chunks: fed,
        handed_bytes,
        calls,
        gbps: (fed as usize * chunk_bytes) as f64 / seconds / 1e9,
        us_per_chunk: seconds / fed as f64 * 1e6,
        vs_memcpy: 0.0,
        vs_real_time: 0.0,
    })
}

#[cfg(test)]
mod tests {
    use crate::bench::xbgpu::feed::*;

    /// A small run hands every present batch's bytes to the correlator and fills its report.
    #[test]
    fn small_feed_bench_runs() {
        let a = FeedArgs {
            ants: vec![1, 3],
            channels: 16,
            spectra_per_heap: 16,
            batches_per_chunk: 4,
            accumulation: 3,
            missing_every: 4,
            adc_sample_rate: 1712e6,
            seconds: 0.0,
            backend: "none".into(),
        };
        let r = run(&a).unwrap();
        assert_eq!(r.lines.len(), 4);
        for l in &r.lines {
            assert_eq!(l.chunk_bytes, l.n_ants * 4 * 16 * 16 * 4);
            assert!(l.chunks >= 2 && l.gbps > 0.0 && l.vs_memcpy > 0.0, "{l:?}");
            assert!(
                l.calls >= 1 && l.vs_real_time > 0.0 && l.us_per_chunk > 0.0,
                "{l:?}"
            );
            let all = l.chunks * l.chunk_bytes as u64;
            if l.missing_every == 0 || l.n_ants == 3 {
                // every batch has an antenna present: all of them reach the correlator
                assert_eq!(l.handed_bytes, all, "{l:?}");
            } else {
                // one antenna: a batch whose heap is absent (1 in 4) has nothing to correlate
                assert_eq!(l.handed_bytes * 4, all * 3, "{l:?}");
            }
        }
        let slot = 16.0 * 16.0 * 4.0;
        assert!((r.real_time_gbps_per_antenna - slot * 1712e6 / 512.0 / 1e9).abs() < 1e-9);
        let bad = FeedArgs {
            missing_every: 1,
            ..a.clone()
        };
        assert!(run(&bad).is_err());
        let bad = FeedArgs {
            ants: vec![0],
            ..a.clone()
        };
        assert!(run(&bad).is_err());
        // the CPU correlator behind the feed: the same batches reach it
        let cpu = FeedArgs {
            ants: vec![2],
            backend: "cpu".into(),
            ..a
        };
        let r = run(&cpu).unwrap();
        assert!(r.lines.iter().all(|l| l.calls >= 1 && l.handed_bytes > 0));
    }
}
