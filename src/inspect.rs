//! `gpucbf pcap-info`: decode the SPEAD heaps of a capture and summarise them per stream.

use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::path::Path;

use serde::Serialize;

use crate::net::pcap::PcapSource;
use crate::spead::{ids, Assembler, DropReason};

/// Summary of one destination endpoint's heaps.
#[derive(Debug, Default, Serialize)]
pub struct StreamSummary {
    pub destination: String,
    pub packets: u64,
    pub packet_bytes_min: usize,
    pub packet_bytes_max: usize,
    pub heaps: u64,
    pub descriptor_heaps: u64,
    pub stop_heaps: u64,
    pub incomplete_heaps: u64,
    pub heap_counters: (u64, u64),
    pub timestamps: Option<(u64, u64)>,
    pub item_ids: Vec<String>,
    pub dropped_packets: BTreeMap<String, u64>,
}

/// Summary of a whole capture.
#[derive(Debug, Default, Serialize)]
pub struct CaptureSummary {
    pub frames: u64,
    pub udp_datagrams: u64,
    pub skipped_frames: u64,
    pub streams: Vec<StreamSummary>,
}

/// Reads `path` and assembles heaps separately for each destination endpoint.
pub fn summarise(path: &Path) -> std::io::Result<CaptureSummary> {
    let mut src = PcapSource::open(path)?;
    let mut per: BTreeMap<SocketAddrV4, (Assembler, StreamSummary)> = BTreeMap::new();
    let mut heaps = Vec::new();
    while let Some(d) = src.next_datagram()? {
        let (asm, s) = per.entry(d.dst).or_insert_with(|| {
            (
                Assembler::new(64),
                StreamSummary {
                    destination: d.dst.to_string(),
                    packet_bytes_min: usize::MAX,
                    ..Default::default()
                },
            )
        });
        s.packets += 1;
        s.packet_bytes_min = s.packet_bytes_min.min(d.payload.len());
        s.packet_bytes_max = s.packet_bytes_max.max(d.payload.len());
        heaps.clear();
        let _ = asm.push(&d.payload, &mut heaps);
        for h in heaps.drain(..) {
            record(s, &h);
        }
    }
    let mut out = CaptureSummary {
        frames: src.stats.frames,
        udp_datagrams: src.stats.datagrams,
        skipped_frames: src.stats.frames - src.stats.datagrams,
        streams: Vec::new(),
    };
    for (_, (mut asm, mut s)) in per {
        heaps.clear();
        asm.flush(&mut heaps);
        s.incomplete_heaps =
            asm.stats.incomplete_heaps_evicted + asm.stats.incomplete_heaps_flushed;
        for r in DropReason::ALL {
            let n = asm.stats.dropped(r);
            if n > 0 {
                s.dropped_packets.insert(r.name().to_string(), n);
            }
        }
        out.streams.push(s);
    }
    Ok(out)
}

fn record(s: &mut StreamSummary, h: &crate::spead::Heap) {
    if h.is_stop() {
        s.stop_heaps += 1;
        return;
    }
    if h.pointers.iter().any(|p| p.id == ids::DESCRIPTOR) {
        s.descriptor_heaps += 1;
        return;
    }
    s.heaps += 1;
    if s.heaps == 1 {
        s.heap_counters = (h.cnt, h.cnt);
    }
    s.heap_counters = (s.heap_counters.0.min(h.cnt), s.heap_counters.1.max(h.cnt));
    if let Some(ts) = h.u64_item(ids::TIMESTAMP) {
        s.timestamps = Some(match s.timestamps {
            None => (ts, ts),
            Some((a, b)) => (a.min(ts), b.max(ts)),
        });
    }
    for p in &h.pointers {
        let name = format!("0x{:04x}", p.id);
        if !s.item_ids.contains(&name) {
            s.item_ids.push(name);
        }
    }
}
