//! `gpucbf pcap-info`: decode the SPEAD heaps of a capture and summarise them per stream
//! ([`summarise`]); `gpucbf spead-dump`: every heap of a capture or UDP port as one JSON line
//! ([`dump`]).

use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::path::Path;

use serde::Serialize;

use crate::net::recv::pcap::PcapSource;
use crate::spead::{ids, Assembler, DropReason};

/// Summary of one destination endpoint's heaps (one JSON object of `pcap-info`'s output;
/// the field names are the JSON keys).
#[derive(Debug, Default, Serialize)]
pub struct StreamSummary {
    /// The destination `IP:port` the packets were sent to.
    pub destination: String,
    /// UDP datagrams to this destination.
    pub packets: u64,
    /// Smallest UDP payload (a whole SPEAD packet, header included), bytes.
    pub packet_bytes_min: usize,
    /// Largest UDP payload, bytes.
    pub packet_bytes_max: usize,
    /// Heaps assembled that are neither stop nor descriptor heaps (complete or not).
    pub heaps: u64,
    /// Heaps carrying descriptors (item 0x0005).
    pub descriptor_heaps: u64,
    /// Stop heaps (stream control item 0x0006 = 2).
    pub stop_heaps: u64,
    /// Heaps still missing payload when evicted (more than 64 under assembly) or at the end
    /// of the capture.
    pub incomplete_heaps: u64,
    /// Smallest and largest heap counter (item 0x0001) of the data heaps; `(0, 0)` when
    /// there are none.
    pub heap_counters: (u64, u64),
    /// Smallest and largest timestamp (item 0x1600, ADC samples since the sync time) of the
    /// data heaps that carry one.
    pub timestamps: Option<(u64, u64)>,
    /// The item ids (`0x1600` style) seen in data heaps, in order of first appearance.
    pub item_ids: Vec<String>,
    /// Packets the assembler dropped, by reason ([`DropReason::name`]); reasons with no
    /// drops are left out.
    pub dropped_packets: BTreeMap<String, u64>,
}

/// Summary of a whole capture (`pcap-info`'s JSON output).
#[derive(Debug, Default, Serialize)]
pub struct CaptureSummary {
    /// pcap records read.
    pub frames: u64,
    /// IPv4/UDP datagrams among them.
    pub udp_datagrams: u64,
    /// Records that were not usable UDP datagrams (other protocols, fragments, malformed or
    /// truncated).
    pub skipped_frames: u64,
    /// One summary per destination endpoint, in address order.
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

/// One heap as JSON (for `gpucbf spead-dump` and interop tests).
pub fn heap_json(h: &crate::spead::Heap) -> serde_json::Value {
    use crate::spead::ItemValue;
    use serde_json::json;
    let items: Vec<serde_json::Value> = h
        .items()
        .into_iter()
        .filter(|(id, _)| *id != ids::DESCRIPTOR && *id != ids::NULL)
        .map(|(id, v)| match v {
            ItemValue::Immediate(x) => json!({"id": id, "immediate": x}),
            ItemValue::Bytes(b) => {
                let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                json!({"id": id, "hex": hex})
            }
        })
        .collect();
    let descriptors: Vec<serde_json::Value> = h
        .descriptors()
        .into_iter()
        .map(|d| match d {
            Ok(d) => json!({
                "id": d.id, "name": d.name, "description": d.description,
                "shape": d.shape, "format": d.format.iter().map(|(c, b)| (c.to_string(), *b)).collect::<Vec<_>>(),
                "dtype": d.dtype,
            }),
            Err(e) => json!({"error": e}),
        })
        .collect();
    json!({"cnt": h.cnt, "complete": h.complete, "stop": h.is_stop(), "items": items, "descriptors": descriptors})
}

/// Where `spead-dump` reads packets from.
pub enum DumpSource {
    /// The UDP datagrams of this pcap file, to its end.
    Pcap(std::path::PathBuf),
    /// Datagrams received on a UDP socket.
    Udp {
        /// Address to bind (a multicast group is joined on any interface).
        addr: SocketAddrV4,
        /// Stop after this long with no datagram (`None`: wait for ever).
        idle_timeout: Option<std::time::Duration>,
    },
}

/// `--idle-timeout` in seconds: positive, `inf` (or anything too long for a
/// [`std::time::Duration`]) for no timeout; NaN, zero or negative is an error naming the
/// option.
pub fn idle_timeout(seconds: f64) -> anyhow::Result<Option<std::time::Duration>> {
    if seconds.is_nan() || seconds <= 0.0 {
        anyhow::bail!(
            "--idle-timeout {seconds}: must be a positive number of seconds (inf: no timeout)"
        );
    }
    // Sub-millisecond timeouts round up to the socket's 1 ms floor.
    Ok(std::time::Duration::try_from_secs_f64(seconds.max(0.001)).ok())
}

/// Assembles heaps from `src` and writes one JSON line per heap to `out`, at most
/// `max_heaps`. Stops at end of file, after `max_heaps`, after a stop heap (UDP), or after
/// `idle_timeout` with no packet; heaps still incomplete at the end are written too (with
/// `"complete": false`). Returns the assembler counters.
pub fn dump(
    src: DumpSource,
    max_heaps: Option<u64>,
    out: &mut dyn std::io::Write,
) -> std::io::Result<crate::spead::AssemblerStats> {
    // Incomplete heaps (evicted, or still under assembly at the end) are printed too.
    let mut asm = Assembler::new(64).with_keep_incomplete(true);
    let mut heaps = Vec::new();
    let mut n = 0u64;
    let full = |n: u64| max_heaps.is_some_and(|m| n >= m);
    // Writes heaps up to the limit; true when the dump should stop (limit or stop heap).
    let emit = |heaps: &mut Vec<crate::spead::Heap>,
                out: &mut dyn std::io::Write,
                n: &mut u64|
     -> std::io::Result<bool> {
        let mut stop = false;
        for h in heaps.drain(..) {
            if full(*n) {
                return Ok(true);
            }
            writeln!(out, "{}", heap_json(&h))?;
            *n += 1;
            stop |= h.is_stop() || full(*n);
        }
        Ok(stop)
    };
    match src {
        DumpSource::Pcap(path) => {
            let mut p = PcapSource::open(&path)?;
            while let Some(d) = p.next_datagram()? {
                let _ = asm.push(&d.payload, &mut heaps);
                if emit(&mut heaps, out, &mut n)? && full(n) {
                    break;
                }
            }
        }
        DumpSource::Udp { addr, idle_timeout } => {
            let sock = crate::net::recv::udp::UdpSource::bind(
                addr,
                std::net::Ipv4Addr::UNSPECIFIED,
                8 << 20,
            )?;
            let mut buf = vec![0u8; 65536];
            // No timeout: wake up now and then (the socket needs a finite one).
            let wait = idle_timeout.unwrap_or(std::time::Duration::from_secs(3600));
            loop {
                let Some(len) = sock.recv(&mut buf, wait)? else {
                    if idle_timeout.is_some() {
                        break;
                    }
                    continue;
                };
                let _ = asm.push(&buf[..len], &mut heaps);
                if emit(&mut heaps, out, &mut n)? {
                    break;
                }
            }
        }
    }
    heaps.clear();
    asm.flush(&mut heaps);
    emit(&mut heaps, out, &mut n)?;
    Ok(asm.stats)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::net::send::pcap::PcapSink;
    use crate::net::PacketSink;
    use crate::spead::HeapBuilder;

    /// Heaps 1 and 3 whole, heap 2 only its first packet (still under assembly at the end).
    fn capture(path: &Path) {
        let src = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7148);
        let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7149);
        let mut sink = PcapSink::create(path, src, 1).unwrap();
        let data = [7u8; 3000];
        for (cnt, keep) in [(1, 9), (2, 1), (3, 9)] {
            let h = HeapBuilder::new(cnt).addressed(0x1000, &data);
            for p in h.packets(2000, true).unwrap().iter().take(keep) {
                sink.send(dst, &[&p.to_bytes()]).unwrap();
            }
        }
        sink.flush().unwrap();
    }

    fn dumped(path: &Path, max: Option<u64>) -> Vec<(u64, bool)> {
        let mut out = Vec::new();
        dump(DumpSource::Pcap(path.to_path_buf()), max, &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["cnt"].as_u64().unwrap(), v["complete"].as_bool().unwrap())
            })
            .collect()
    }

    /// A heap still under assembly at the end is printed (`"complete": false`), and no
    /// more heaps than `--max-heaps` are.
    #[test]
    fn dump_prints_incomplete_heaps_and_stops_at_max() {
        let path = std::env::temp_dir().join(format!("gpucbf-dump-{}.pcap", std::process::id()));
        capture(&path);
        assert_eq!(dumped(&path, None), [(1, true), (3, true), (2, false)]);
        assert_eq!(dumped(&path, Some(3)), [(1, true), (3, true), (2, false)]);
        assert_eq!(dumped(&path, Some(2)), [(1, true), (3, true)]);
        assert_eq!(dumped(&path, Some(1)), [(1, true)]);
        std::fs::remove_file(&path).ok();
    }

    /// `--idle-timeout`: positive seconds, `inf` for none; NaN, zero or negative refused by
    /// name (`inf` panicked in `Duration::from_secs_f64`).
    #[test]
    fn idle_timeouts() {
        use std::time::Duration;
        assert_eq!(idle_timeout(5.0).unwrap(), Some(Duration::from_secs(5)));
        assert_eq!(idle_timeout(1e-9).unwrap(), Some(Duration::from_millis(1)));
        assert_eq!(idle_timeout(f64::INFINITY).unwrap(), None);
        assert_eq!(idle_timeout(1e300).unwrap(), None);
        for bad in [f64::NAN, 0.0, -1.0, f64::NEG_INFINITY] {
            let e = idle_timeout(bad).unwrap_err().to_string();
            assert!(e.starts_with("--idle-timeout"), "{e}");
        }
    }
}
