//! The array's receiver: this process takes the XB-engine's correlation products off
//! loopback UDP as [`Dump`]s, and writes them as `visibilities.npy`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use num_complex::Complex32;

use crate::net::{
    recv::udp::UdpRecvSource,
    recv::{PacketSource, Poll},
};
use crate::spead::{ids, Assembler, AssemblerStats, ItemValue};

/// One dump of correlation products.
pub struct Dump {
    /// Timestamp of the accumulation's start (ADC samples).
    pub timestamp: u64,
    /// (channel, baseline, product, re/im) int32.
    pub raw: Vec<i32>,
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

/// Writes the dumps of `n` antennas × `c` channels as `visibilities.npy` (dump, channel,
/// baseline, product; complex64).
pub(crate) fn write_visibilities(
    dir: &Path,
    dumps: &[Dump],
    n: usize,
    c: usize,
) -> anyhow::Result<()> {
    let nbl = n * (n + 1) / 2;
    let mut vis = Vec::with_capacity(dumps.len() * c * nbl * 4);
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
    }
    crate::npy::write_npy(
        &dir.join("visibilities.npy"),
        &[dumps.len(), c, nbl, 4],
        &crate::npy::NpyData::C64(vis),
    )
    .map_err(|e| anyhow::anyhow!("visibilities.npy: {e}"))
}
