//! `gpucbf bench loopback`: the host's own UDP loopback bound, the peer of the real-time
//! runs. Pairs of threads (sender, receiver) move digitiser-sized datagrams (5192 bytes by
//! default) over 127.0.0.1 exactly as the engines do: UDP GSO sendmmsg batches out, recvmmsg
//! with UDP GRO in. Each pair reports packets and bytes per second and per CPU-second of each
//! thread, so a real-time result reads as a fraction of what this host's kernel can move.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use crate::net::affinity::{parse_cores, pin_current_thread, CoreList};
use crate::net::recv::udp::UdpRecvSource;
use crate::net::recv::{PacketSource, Poll};
use crate::net::send::udp::UdpSink;
use crate::net::PacketSink;
use crate::telemetry::cpu::thread_cpu_seconds;

/// Datagrams per sendmmsg call (the engines' heap sender batches as many).
const BATCH: usize = 64;

/// Options of `gpucbf bench loopback`.
#[derive(Debug, Clone, Args)]
pub struct LoopbackArgs {
    /// Sender/receiver pairs running at once (their sum is the host's aggregate bound).
    #[arg(long, default_value_t = 1)]
    pub pairs: usize,
    /// Seconds each pair sends.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Cores to pin (`0,2,4-7`): pair i's sender on the (2i)th, its receiver on the
    /// (2i+1)th. Unpinned if not given.
    #[arg(long, value_parser = |s: &str| parse_cores(s).map(CoreList))]
    pub cores: Option<CoreList>,
    /// Datagram size in bytes (a 10-bit digitiser heap's packet is 5192).
    #[arg(long, default_value_t = 5192)]
    pub datagram: usize,
    /// First UDP port on 127.0.0.1 (pair i uses port + i).
    #[arg(long, default_value_t = 18900)]
    pub port: u16,
    /// Receive buffer per socket, bytes (forced past net.core.rmem_max where permitted).
    #[arg(long, default_value_t = 64 << 20)]
    pub recv_buffer: usize,
    /// Send one datagram per sendmmsg entry instead of GSO super-datagrams.
    #[arg(long)]
    pub no_gso: bool,
}

/// One pair's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PairReport {
    /// Sender core and receiver core (if pinned).
    pub cores: Option<(usize, usize)>,
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams received.
    pub received: u64,
    /// Sent but not received (dropped by the kernel: receive buffer full).
    pub lost: u64,
    /// Seconds from the first send to the last datagram received.
    pub seconds: f64,
    /// Received datagrams per second.
    pub packets_per_s: f64,
    /// Received payload, gigabits per second.
    pub gbit_per_s: f64,
    /// CPU seconds of the sending thread.
    pub sender_cpu_s: f64,
    /// CPU seconds of the receiving thread.
    pub receiver_cpu_s: f64,
    /// Sent datagrams per sender CPU-second (the per-core send rate).
    pub sent_per_cpu_s: f64,
    /// Received datagrams per receiver CPU-second (the per-core receive rate).
    pub received_per_cpu_s: f64,
    /// Receive buffer the kernel granted, bytes.
    pub recv_buffer: usize,
    /// GSO super-datagrams sent (0 without GSO).
    pub gso_sends: u64,
}

/// Report of `gpucbf bench loopback`.
#[derive(Debug, Clone, Serialize)]
pub struct LoopbackReport {
    /// Datagram size, bytes.
    pub datagram: usize,
    /// Whether the senders used UDP GSO.
    pub gso: bool,
    /// One per pair.
    pub pairs: Vec<PairReport>,
    /// Sum of the pairs' received datagrams per second.
    pub total_packets_per_s: f64,
    /// Sum of the pairs' received gigabits per second.
    pub total_gbit_per_s: f64,
}

/// Runs the pairs and prints one line each, then the total.
pub fn run(a: &LoopbackArgs) -> anyhow::Result<LoopbackReport> {
    if a.pairs == 0 || !(a.seconds > 0.0 && a.seconds <= 600.0) {
        anyhow::bail!("--pairs must be at least 1 and --seconds in (0, 600]");
    }
    if !(64..=65000).contains(&a.datagram) {
        anyhow::bail!("--datagram must be 64 to 65000 bytes");
    }
    if usize::from(a.port) + a.pairs > usize::from(u16::MAX) + 1 {
        anyhow::bail!("--port {} + {} pairs runs past port 65535", a.port, a.pairs);
    }
    let cores = match &a.cores {
        Some(c) if c.0.len() < 2 * a.pairs => anyhow::bail!(
            "--cores lists {} cores; {} pairs need {}",
            c.0.len(),
            a.pairs,
            2 * a.pairs
        ),
        Some(c) => {
            crate::net::affinity::check_cores(&c.0)?;
            Some(c.0.clone())
        }
        None => None,
    };
    let handles: Vec<_> = (0..a.pairs)
        .map(|i| {
            let a = a.clone();
            let pin = cores.as_ref().map(|c| (c[2 * i], c[2 * i + 1]));
            std::thread::Builder::new()
                .name(format!("loopback-{i}"))
                .spawn(move || pair(&a, a.port + i as u16, pin))
        })
        .collect::<Result<_, _>>()?;
    let mut pairs = Vec::new();
    for h in handles {
        pairs.push(
            h.join()
                .map_err(|_| anyhow::anyhow!("a loopback pair panicked"))??,
        );
    }
    let report = LoopbackReport {
        datagram: a.datagram,
        gso: !a.no_gso,
        total_packets_per_s: pairs.iter().map(|p| p.packets_per_s).sum(),
        total_gbit_per_s: pairs.iter().map(|p| p.gbit_per_s).sum(),
        pairs,
    };
    for (i, p) in report.pairs.iter().enumerate() {
        println!(
            "loopback pair {i}{}: {:.0} packets/s ({:.2} Gbit/s) of {}-byte datagrams, lost {} of {}; \
             sender {:.0} packets per CPU-second, receiver {:.0}; receive buffer {} MiB",
            p.cores.map_or(String::new(), |(s, r)| format!(" (cores {s} -> {r})")),
            p.packets_per_s,
            p.gbit_per_s,
            a.datagram,
            p.lost,
            p.sent,
            p.sent_per_cpu_s,
            p.received_per_cpu_s,
            p.recv_buffer >> 20,
        );
    }
    println!(
        "loopback total: {:.0} packets/s, {:.2} Gbit/s over {} pair(s), {}",
        report.total_packets_per_s,
        report.total_gbit_per_s,
        report.pairs.len(),
        if report.gso {
            "UDP GSO -> GRO"
        } else {
            "no GSO"
        },
    );
    Ok(report)
}

/// One sender and one receiver on `port`.
fn pair(a: &LoopbackArgs, port: u16, pin: Option<(usize, usize)>) -> anyhow::Result<PairReport> {
    let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let mut src = UdpRecvSource::new(&[dst], Ipv4Addr::UNSPECIFIED, a.recv_buffer)?;
    let recv_buffer = src
        .force_recv_buffer(a.recv_buffer)
        .unwrap_or_else(|_| src.recv_buffer_size());
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let sender = {
        let (a, stop) = (a.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("loopback-send-{port}"))
            .spawn(move || send(&a, dst, pin.map(|p| p.0), &stop))?
    };
    if let Some((_, r)) = pin {
        pin_current_thread(r)?;
    }
    let cpu0 = thread_cpu_seconds();
    let mut received = 0u64;
    let mut last = start;
    let deadline = start + Duration::from_secs_f64(a.seconds);
    loop {
        let poll = src.recv_batch(&mut |_| received += 1)?;
        let now = Instant::now();
        match poll {
            Poll::Packets(_) => last = now,
            // After the sender stopped, 200 ms without a packet ends the drain.
            _ if stop.load(Ordering::Relaxed) && now - last > Duration::from_millis(200) => break,
            _ => {}
        }
        if now > deadline + Duration::from_secs(5) {
            break;
        }
    }
    let receiver_cpu_s = thread_cpu_seconds() - cpu0;
    let (sent, sender_cpu_s, gso_sends) = sender
        .join()
        .map_err(|_| anyhow::anyhow!("loopback sender panicked"))??;
    let seconds = (last - start).as_secs_f64().max(1e-9);
    Ok(PairReport {
        cores: pin,
        sent,
        received,
        lost: sent.saturating_sub(received),
        seconds,
        packets_per_s: received as f64 / seconds,
        gbit_per_s: received as f64 * a.datagram as f64 * 8.0 / seconds * 1e-9,
        sender_cpu_s,
        receiver_cpu_s,
        sent_per_cpu_s: sent as f64 / sender_cpu_s.max(1e-9),
        received_per_cpu_s: received as f64 / receiver_cpu_s.max(1e-9),
        recv_buffer,
        gso_sends,
    })
}

/// Sends numbered datagrams to `dst` until `a.seconds` have passed; sets `stop` when done.
/// Returns (datagrams sent, CPU seconds, GSO sends).
fn send(
    a: &LoopbackArgs,
    dst: SocketAddrV4,
    core: Option<usize>,
    stop: &AtomicBool,
) -> anyhow::Result<(u64, f64, u64)> {
    let result = (|| {
        if let Some(c) = core {
            pin_current_thread(c)?;
        }
        let mut sink = UdpSink::new(Ipv4Addr::UNSPECIFIED, 1, 8 << 20)?;
        sink.set_gso(!a.no_gso);
        let mut bufs = vec![vec![0u8; a.datagram]; BATCH];
        let cpu0 = thread_cpu_seconds();
        let deadline = Instant::now() + Duration::from_secs_f64(a.seconds);
        let mut seq = 0u64;
        while Instant::now() < deadline {
            for b in bufs.iter_mut() {
                b[..8].copy_from_slice(&seq.to_be_bytes());
                seq += 1;
            }
            let parts: Vec<[&[u8]; 1]> = bufs.iter().map(|b| [b.as_slice()]).collect();
            let batch: Vec<(SocketAddrV4, &[&[u8]])> =
                parts.iter().map(|p| (dst, &p[..])).collect();
            sink.send_batch(&batch)?;
        }
        sink.flush()?;
        Ok((seq, thread_cpu_seconds() - cpu0, sink.gso_sends))
    })();
    stop.store(true, Ordering::Relaxed);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_pair_moves_datagrams_and_counts_them() {
        let a = LoopbackArgs {
            pairs: 1,
            seconds: 0.2,
            cores: None,
            datagram: 1000,
            port: 18977,
            recv_buffer: 4 << 20,
            no_gso: false,
        };
        let r = run(&a).unwrap();
        let p = &r.pairs[0];
        assert!(p.sent > 0 && p.received > 0, "{p:?}");
        assert_eq!(p.lost, p.sent - p.received);
        assert!(p.received <= p.sent);
    }

    #[test]
    fn bad_options_are_refused() {
        let base = LoopbackArgs {
            pairs: 2,
            seconds: 1.0,
            cores: Some(CoreList(vec![0, 1, 2])),
            datagram: 5192,
            port: 18900,
            recv_buffer: 1 << 20,
            no_gso: false,
        };
        let e = run(&base).unwrap_err().to_string();
        assert!(e.contains("2 pairs need 4"), "{e}");
        let e = run(&LoopbackArgs {
            cores: None,
            port: 65535,
            ..base.clone()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("past port 65535"), "{e}");
        let e = run(&LoopbackArgs {
            cores: None,
            pairs: 0,
            ..base
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--pairs"), "{e}");
    }
}
