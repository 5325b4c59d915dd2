//! Feed builders shared by the integration tests: digitiser heaps sent through a
//! [`HeapSender`], and a small F-engine placement for the X-engine side.
// Each test binary compiles its own copy and uses only part of it.
#![allow(dead_code)]

use std::ops::Range;
use std::path::PathBuf;

use gpucbf::chunk::placement::FengPlacement;
use gpucbf::net::send::heap::HeapSender;
use gpucbf::spead::ids;

/// Samples per digitiser heap.
pub const HEAP_SAMPLES: u64 = 4096;
/// Payload bytes of a digitiser heap (4096 10-bit samples).
pub const HEAP_BYTES: usize = 5120;

/// A fresh directory `gpucbf-<tag>-<pid>` under the system temporary directory.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpucbf-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Sends digitiser heaps `heaps` on substreams `0..streams` (substream `s` carries
/// polarisation `s % 2`, so a third one repeats pol 0 for a filter to drop), leaving out
/// `(heap, substream)` = `skip`; `payload(heap, substream)` gives the [`HEAP_BYTES`] bytes.
/// Flushes at the end.
pub fn send_digitiser_heaps(
    s: &mut HeapSender,
    heaps: Range<u64>,
    streams: u64,
    skip: Option<(u64, u64)>,
    payload: impl Fn(u64, u64) -> Vec<u8>,
) {
    for h in heaps {
        for pol in 0..streams {
            if skip == Some((h, pol)) {
                continue;
            }
            let items = [
                (ids::TIMESTAMP, h * HEAP_SAMPLES),
                (ids::DIGITISER_ID, pol % 2),
                (ids::DIGITISER_STATUS, 0),
            ];
            let p = payload(h, pol);
            s.send_heap(pol as usize, &items, ids::ADC_SAMPLES, &p)
                .unwrap();
        }
    }
    s.flush().unwrap();
}

/// F-engine heaps of 4 channels × 8 spectra of 8-bit samples, 16 ADC samples between
/// spectra (a batch step of 128), 4 batches per chunk.
pub fn small_feng_placement(n_ants: usize) -> FengPlacement {
    FengPlacement {
        n_ants,
        channels_per_substream: 4,
        spectra_per_heap: 8,
        sample_bits: 8,
        samples_between_spectra: 16,
        batches_per_chunk: 4,
        frequency: None,
    }
}

/// Pushes every packet into `a` (rejections are counted by the assembler), then flushes:
/// the chunks emitted, in order.
pub fn push_all<P: gpucbf::chunk::Placement>(
    a: &mut gpucbf::chunk::ChunkAssembler<P>,
    pkts: &[Vec<u8>],
) -> Vec<gpucbf::chunk::Chunk> {
    let mut out = Vec::new();
    for p in pkts {
        let _ = a.push(p, &mut out);
    }
    a.flush(&mut out);
    out
}

/// One raw SPEAD-64-48 packet of an F-engine heap of `heap_size` bytes: `payload` at
/// `offset`, timestamp `ts`, feng_id `feng`, frequency `freq` (`u64::MAX`: no frequency item).
pub fn raw_feng(
    cnt: u64,
    heap_size: u64,
    offset: u64,
    ts: u64,
    feng: u64,
    payload: &[u8],
) -> Vec<u8> {
    raw_feng_freq(cnt, heap_size, offset, ts, feng, u64::MAX, payload)
}

pub fn raw_feng_freq(
    cnt: u64,
    heap_size: u64,
    offset: u64,
    ts: u64,
    feng: u64,
    freq: u64,
    payload: &[u8],
) -> Vec<u8> {
    let mut items = vec![
        (ids::HEAP_CNT, cnt),
        (ids::HEAP_SIZE, heap_size),
        (ids::HEAP_OFFSET, offset),
        (ids::PAYLOAD_LENGTH, payload.len() as u64),
        (ids::TIMESTAMP, ts),
        (ids::FENG_ID, feng),
    ];
    if freq != u64::MAX {
        items.push((ids::FREQUENCY, freq));
    }
    let mut p = vec![0x53, 4, 2, 6, 0, 0, 0, items.len() as u8];
    for (id, v) in items {
        p.extend_from_slice(&((1u64 << 63) | (u64::from(id) << 48) | v).to_be_bytes());
    }
    p.extend_from_slice(payload);
    p
}
