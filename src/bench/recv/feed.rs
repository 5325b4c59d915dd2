//! The digitiser feed every backend receives: a pcap file written by the dsim library, and
//! its datagrams sent over loopback with or without UDP GSO.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use clap::Parser;

use crate::net::send::udp::UdpSink;
use crate::net::PacketSink;
use crate::net::{
    recv::pcap::PcapFileSource,
    recv::{PacketSource, Poll},
};

#[derive(Parser)]
struct DsimCli {
    #[command(flatten)]
    args: crate::engines::dsim::DsimArgs,
}

/// Writes the digitiser feed (two pols to 127.0.0.1:`port`) with the dsim library.
pub(super) fn write_feed(path: &Path, heaps: u64, port: u16) -> anyhow::Result<()> {
    let dest = format!("127.0.0.1:{port}");
    let cli = DsimCli::try_parse_from([
        "dsim",
        "--adc-sample-rate",
        "1712e6",
        "--heaps",
        &heaps.to_string(),
        "--period",
        &(1u64 << 22).to_string(),
        "--dither-seed",
        "1",
        "--rate-factor",
        "0",
        "--pcap",
        path.to_str()
            .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path"))?,
        &dest,
        &dest,
    ])?;
    let cfg = cli.args.validate().map_err(anyhow::Error::msg)?;
    crate::engines::dsim::run(&cfg)?;
    Ok(())
}

/// The feed's UDP payloads, and a stop heap to end it.
pub(super) fn payloads(pcap: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut v = Vec::new();
    let mut src = PcapFileSource::open(pcap, Vec::new())?;
    while let Poll::Packets(_) = src.recv_batch(&mut |p| v.push(p.to_vec()))? {}
    let stop = crate::spead::HeapBuilder::new(u64::MAX >> 17).stop();
    let parts = stop.packets(9000, true).map_err(anyhow::Error::msg)?;
    v.extend(parts.iter().map(|p| p.to_bytes()));
    Ok(v)
}

/// Sends every payload to `dst` with sendmmsg (from the calling thread), with UDP GSO
/// (runs of equal-size packets as super-datagrams, cut by the kernel into the same
/// datagrams) or without. Returns the number of GSO super-datagrams.
pub(super) fn send_all(payloads: &[Vec<u8>], dst: SocketAddrV4, gso: bool) -> anyhow::Result<u64> {
    let mut sink = UdpSink::new(Ipv4Addr::UNSPECIFIED, 1, 8 << 20)?;
    sink.set_gso(gso);
    for group in payloads.chunks(64) {
        let parts: Vec<[&[u8]; 1]> = group.iter().map(|p| [p.as_slice()]).collect();
        let batch: Vec<(SocketAddrV4, &[&[u8]])> = parts.iter().map(|p| (dst, &p[..])).collect();
        sink.send_batch(&batch)?;
    }
    sink.flush()?;
    if gso && (sink.gso_refused > 0 || sink.gso_sends == 0) {
        anyhow::bail!(
            "the kernel refused UDP GSO on loopback ({} refusals)",
            sink.gso_refused
        );
    }
    Ok(sink.gso_sends)
}

/// The two loopback feeds: the same datagrams on the wire, sent with or without GSO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Feed {
    /// UDP GSO: runs of equal-size packets as super-datagrams.
    Gso,
    /// One sendmmsg message per datagram.
    Plain,
}

impl Feed {
    pub(super) fn gso(self) -> bool {
        self == Feed::Gso
    }

    pub(super) fn describe(self, gso_sends: u64) -> String {
        match self {
            Feed::Gso => format!("GSO feed ({gso_sends} super-datagrams)"),
            Feed::Plain => "plain sendmmsg feed".into(),
        }
    }
}

/// Socket receive buffer that holds the whole feed (kernel accounting is about 2× the
/// payload for 5 kB datagrams on loopback).
pub(super) fn udp_buffer(payloads: &[Vec<u8>]) -> usize {
    payloads.iter().map(|p| 2 * p.len() + 1024).sum::<usize>() + (16 << 20)
}
