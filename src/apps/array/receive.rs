//! The array's receiver: this process takes each XB-engine's correlation products off
//! loopback UDP as [`Dump`]s, assembles the full band of every timestamp from the
//! XB-engines' channel ranges ([`assemble`]), and writes them ([`write_dumps`]).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use num_complex::Complex32;

use crate::net::{
    recv::udp::UdpRecvSource,
    recv::{PacketSource, Poll},
};
use crate::npy::{write_npy, NpyData};
use crate::spead::icd::MISSING;
use crate::spead::{ids, Assembler, AssemblerStats, ItemValue};

/// One dump of correlation products.
#[derive(Debug)]
pub struct Dump {
    /// Timestamp of the accumulation's start (ADC samples).
    pub timestamp: u64,
    /// (channel, baseline, product, re/im) int32.
    pub raw: Vec<i32>,
}

impl Dump {
    /// Whether some product carries the ICD's MISSING marker (an antenna absent).
    pub fn incomplete(&self) -> bool {
        self.raw.chunks_exact(2).any(|p| p == MISSING)
    }
}

/// Receives X-engine heaps on `addr` until `stop` is set and the socket has been idle.
pub(crate) fn receive_dumps(
    addr: SocketAddrV4,
    stop: Arc<AtomicBool>,
) -> std::io::Result<(Vec<Dump>, AssemblerStats)> {
    let mut src = UdpRecvSource::new(&[addr], Ipv4Addr::UNSPECIFIED, 64 << 20)?;
    let mut asm = Assembler::new(8);
    let mut heaps = Vec::new();
    let mut dumps = Vec::new();
    let mut idle = 0;
    loop {
        let r = src.recv_batch(&mut |p| {
            let _ = asm.push(p, &mut heaps);
        })?;
        for h in heaps.drain(..) {
            if let (Some(ts), Some(ItemValue::Bytes(b))) =
                (h.u64_item(ids::TIMESTAMP), h.item(ids::XENG_RAW))
            {
                let raw = b
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                dumps.push(Dump { timestamp: ts, raw });
            }
        }
        match r {
            Poll::Idle if stop.load(Ordering::Relaxed) => {
                idle += 1;
                if idle > 10 {
                    break;
                }
            }
            _ => idle = 0,
        }
    }
    Ok((dumps, asm.stats))
}

/// Full-band dumps assembled from the XB-engines' channel ranges.
#[derive(Debug, Default)]
pub struct Assembled {
    /// The timestamps every XB-engine sent, in timestamp order, their parts joined in
    /// channel order.
    pub dumps: Vec<Dump>,
    /// Per XB-engine: timestamps that another XB-engine sent but this one did not (lost:
    /// those timestamps are left out of `dumps`).
    pub missing: Vec<u64>,
    /// Per XB-engine: dumps it sent twice for one timestamp (the first is kept).
    pub repeated: Vec<u64>,
}

/// Joins the dumps of XB-engines that each correlate an equal channel range (engine k:
/// channels k·C/N.. of C) into full-band dumps: a timestamp that every engine sent
/// becomes one dump (channel-major, so the parts are concatenated in engine order); one
/// that some engine did not send is counted against that engine and left out. A part
/// whose size is not `part_len` values is an error naming the engine and timestamp.
pub fn assemble(
    parts: Vec<Vec<Dump>>,
    part_len: usize,
    names: &[String],
) -> anyhow::Result<Assembled> {
    let nx = parts.len();
    let mut out = Assembled {
        dumps: Vec::new(),
        missing: vec![0; nx],
        repeated: vec![0; nx],
    };
    let mut by_ts: BTreeMap<u64, Vec<Option<Vec<i32>>>> = BTreeMap::new();
    for (k, dumps) in parts.into_iter().enumerate() {
        for d in dumps {
            if d.raw.len() != part_len {
                anyhow::bail!(
                    "{} sent a dump at {} of {} values, expected {part_len}",
                    names.get(k).map_or("an XB-engine", String::as_str),
                    d.timestamp,
                    d.raw.len()
                );
            }
            let slot = &mut by_ts.entry(d.timestamp).or_insert_with(|| vec![None; nx])[k];
            if slot.is_some() {
                out.repeated[k] += 1;
            } else {
                *slot = Some(d.raw);
            }
        }
    }
    for (timestamp, ps) in by_ts {
        if ps.iter().all(Option::is_some) {
            let raw = ps.into_iter().flatten().flatten().collect();
            out.dumps.push(Dump { timestamp, raw });
        } else {
            for (k, p) in ps.iter().enumerate() {
                if p.is_none() {
                    out.missing[k] += 1;
                }
            }
        }
    }
    Ok(out)
}

/// Writes the dumps of `n` antennas × `c` channels: `visibilities.npy` (dump, channel,
/// baseline, product; complex64), the same products exactly as sent in `products.npy`
/// (dump, channel, baseline, product, re/im; int32: complex64 rounds values past 2^24),
/// `timestamps.npy` (each dump's ADC timestamp, uint64) and `incomplete.npy` (bool: some
/// product of the dump carries the MISSING marker), so that runs can be compared dump by
/// dump (`tools/compare_arrays.py`).
pub(crate) fn write_dumps(dir: &Path, dumps: &[Dump], n: usize, c: usize) -> anyhow::Result<()> {
    let nbl = n * (n + 1) / 2;
    let mut vis = Vec::with_capacity(dumps.len() * c * nbl * 4);
    let mut raw = Vec::with_capacity(dumps.len() * c * nbl * 8);
    for d in dumps {
        if d.raw.len() != c * nbl * 4 * 2 {
            anyhow::bail!(
                "dump at {} has {} values, expected {}",
                d.timestamp,
                d.raw.len(),
                c * nbl * 8
            );
        }
        vis.extend(
            d.raw
                .chunks_exact(2)
                .map(|p| Complex32::new(p[0] as f32, p[1] as f32)),
        );
        raw.extend_from_slice(&d.raw);
    }
    let timestamps = dumps.iter().map(|d| d.timestamp).collect();
    let incomplete = dumps.iter().map(Dump::incomplete).collect();
    let nd = dumps.len();
    for (name, shape, data) in [
        ("visibilities.npy", vec![nd, c, nbl, 4], NpyData::C64(vis)),
        ("products.npy", vec![nd, c, nbl, 4, 2], NpyData::I32(raw)),
        ("timestamps.npy", vec![nd], NpyData::U64(timestamps)),
        ("incomplete.npy", vec![nd], NpyData::Bool(incomplete)),
    ] {
        write_npy(&dir.join(name), &shape, &data).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(timestamp: u64, v: &[i32]) -> Dump {
        Dump {
            timestamp,
            raw: v.to_vec(),
        }
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|k| format!("xbgpu{k}")).collect()
    }

    /// Parts join in engine (channel) order per timestamp; a timestamp one engine lacks is
    /// counted against it and left out; repeats are counted; a wrong size names the engine.
    #[test]
    fn parts_join_per_timestamp_and_gaps_count_as_lost() {
        let x0 = vec![dump(20, &[1, 2]), dump(10, &[3, 4]), dump(30, &[5, 6])];
        let x1 = vec![
            dump(10, &[7, 8]),
            dump(30, &[9, 0]),
            dump(40, &[1, 1]),
            dump(30, &[0, 0]),
        ];
        let a = assemble(vec![x0, x1], 2, &names(2)).unwrap();
        let got: Vec<_> = a
            .dumps
            .iter()
            .map(|d| (d.timestamp, d.raw.clone()))
            .collect();
        assert_eq!(got, [(10, vec![3, 4, 7, 8]), (30, vec![5, 6, 9, 0])]);
        assert_eq!(a.missing, [1, 1]);
        assert_eq!(a.repeated, [0, 1]);
        // One engine: its dumps in timestamp order, nothing missing.
        let a = assemble(vec![vec![dump(2, &[1]), dump(1, &[2])]], 1, &names(1)).unwrap();
        assert_eq!(
            a.dumps.iter().map(|d| d.timestamp).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(a.missing, [0]);
        let e = assemble(
            vec![vec![dump(1, &[1])], vec![dump(1, &[1, 2, 3])]],
            1,
            &names(2),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(e, "xbgpu1 sent a dump at 1 of 3 values, expected 1");
    }

    /// The four files hold the dumps in order: products exactly (int32), the timestamps,
    /// and which dumps carry a MISSING marker.
    #[test]
    fn dumps_are_written_with_timestamps_and_missing_flags() {
        use crate::npy::read_npy;
        let dir = std::env::temp_dir().join(format!("gpucbf-dumps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // One antenna (one baseline), one channel: 4 products of (re, im).
        let big = (1 << 24) + 1;
        let whole = dump(4096, &[big, -3, 1, 2, 3, 4, 5, 6]);
        let marked = dump(8192, &[1, 2, i32::MIN, 1, 0, 0, 0, 0]);
        // (MISSING's halves in different products do not count.)
        let split = dump(12288, &[0, i32::MIN, 1, 0, 0, 0, 0, 0]);
        write_dumps(&dir, &[whole, marked, split], 1, 1).unwrap();
        let read = |f: &str| read_npy(&dir.join(f)).unwrap();
        let p = read("products.npy");
        assert_eq!(p.shape, [3, 1, 1, 4, 2]);
        let NpyData::I32(v) = p.data else { panic!() };
        assert_eq!(v[..2], [big, -3]);
        assert_eq!(v[10..12], [i32::MIN, 1]);
        assert_eq!(
            read("timestamps.npy").data,
            NpyData::U64(vec![4096, 8192, 12288])
        );
        assert_eq!(
            read("incomplete.npy").data,
            NpyData::Bool(vec![false, true, false])
        );
        assert_eq!(read("visibilities.npy").shape, [3, 1, 1, 4]);
        assert!(write_dumps(&dir, &[dump(1, &[1])], 1, 1).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
