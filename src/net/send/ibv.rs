//! `--send-ibv` / dsim `--ibv` (feature `ibverbs`): packets through a raw-packet verbs queue
//! pair from registered host memory, bypassing the kernel's UDP stack as spead2's ibverbs
//! sender does.
//!
//! The sink owns a ring of frame slots in one registered host region, one slot per send
//! work request the queue pair holds. Sending a packet writes its Ethernet/IPv4/UDP headers
//! ([`crate::net::frame::write_udp_headers`]) and payload into the next slot and chains a
//! work request for it; a batch is posted with one `post_send`. Completions are requested
//! for the last request of each post and every quarter ring, and the send queue completes
//! in order, so a completion frees its slot and every slot before it. A slot is reused only
//! after that: the NIC never reads a slot being rewritten. [`IbvSink::from_raw`] takes the
//! verbs objects as raw pointers, so everything down to `post_send`/`poll_cq` is tested
//! with a fake provider; [`IbvSink::open`] makes the real ones for an interface's address.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

use ibverbs_sys::{
    poll_cq, post_send, IbvSendWr, IbvSge, IbvWc, IBV_SEND_SIGNALED, IBV_WC_SUCCESS, IBV_WR_SEND,
};

use super::PacketSink;
use crate::net::frame::{write_udp_headers, UDP_HEADERS};
use crate::net::verbs::{interface_with_address, rdma_port_of_interface, RawSendQp};

/// How the sink frames and queues packets.
#[derive(Debug, Clone)]
pub struct IbvSinkConfig {
    /// Ethernet source address (the interface's).
    pub src_mac: [u8; 6],
    /// IPv4 source address and UDP source port of the frames.
    pub src: SocketAddrV4,
    /// IPv4 time to live.
    pub ttl: u8,
    /// Frame slots: send work requests the queue pair holds.
    pub slots: usize,
    /// Bytes per slot: the largest frame (headers included) the sink sends.
    pub slot_bytes: usize,
    /// Ethernet addresses of unicast destinations (multicast ones map by RFC 1112).
    pub neighbours: HashMap<Ipv4Addr, [u8; 6]>,
    /// Where unknown unicast destinations are looked up again (an ARP table in the format
    /// of `/proc/net/arp`, and the interface), at most once per `arp_refresh`.
    pub arp: Option<(std::path::PathBuf, String)>,
    /// The least time between two reads of the ARP table.
    pub arp_refresh: Duration,
    /// How long a send waits for a free slot before failing.
    pub timeout: Duration,
}

/// Counters of the sink.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IbvSinkStats {
    /// Packets (work requests) taken by the NIC.
    pub packets: u64,
    /// UDP payload bytes of those packets.
    pub bytes: u64,
    /// `post_send` calls.
    pub posts: u64,
    /// Completions carrying an error status (their slots are reused all the same).
    pub wc_errors: u64,
}

/// Sends UDP packets through a raw-packet queue pair from a registered ring of frames.
pub struct IbvSink {
    qp: *mut c_void,
    cq: *mut c_void,
    cfg: IbvSinkConfig,
    /// The registered frame ring (`slots × slot_bytes`); never moves or reallocates.
    ring: Box<[u8]>,
    sges: Box<[IbvSge]>,
    wrs: Box<[IbvSendWr]>,
    /// Sequence number of the next packet (its slot is `head % slots`).
    head: u64,
    /// Packets before this sequence number are complete: their slots are free.
    done: u64,
    /// First sequence number written but not yet posted.
    unposted: u64,
    /// When the ARP table was last read for an unknown destination.
    arp_read: Option<Instant>,
    wc: Vec<IbvWc>,
    /// Keeps the real verbs objects alive (None with fake providers).
    #[allow(dead_code)]
    owner: Option<Box<RawSendQp>>,
    /// Counters so far.
    pub stats: IbvSinkStats,
}

// SAFETY: the QP/CQ pointers are owned by this sink (or its `owner`) and only used from
// the thread that owns the sink; the work requests point into the sink's own boxes.
unsafe impl Send for IbvSink {}

fn invalid(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, m)
}

impl IbvSink {
    /// Builds the sink over a live QP and CQ; `register` registers the frame ring (host
    /// memory) and returns its lkey.
    ///
    /// # Safety
    /// `qp`/`cq` must be a raw-packet QP in RTS with at least `cfg.slots` send work
    /// requests and its send CQ (or fakes whose contexts provide `post_send`/`poll_cq`),
    /// alive as long as the sink; the registration must last as long as the sink.
    pub unsafe fn from_raw(
        qp: *mut c_void,
        cq: *mut c_void,
        cfg: IbvSinkConfig,
        register: impl FnOnce(*mut u8, usize) -> io::Result<u32>,
    ) -> io::Result<Self> {
        if cfg.slots < 2 || cfg.slot_bytes <= UDP_HEADERS || cfg.slot_bytes > u32::MAX as usize {
            return Err(invalid(format!(
                "ibverbs send ring of {} slots of {} bytes: need at least 2 slots of more than {UDP_HEADERS} bytes",
                cfg.slots, cfg.slot_bytes
            )));
        }
        let len = cfg.slots.checked_mul(cfg.slot_bytes).ok_or_else(|| {
            invalid(format!(
                "ibverbs send ring of {} × {} bytes",
                cfg.slots, cfg.slot_bytes
            ))
        })?;
        let mut ring = vec![0u8; len].into_boxed_slice();
        let lkey = register(ring.as_mut_ptr(), len)?;
        let base = ring.as_mut_ptr() as u64;
        let mut sges: Box<[IbvSge]> = (0..cfg.slots)
            .map(|k| IbvSge {
                addr: base + (k * cfg.slot_bytes) as u64,
                length: 0,
                lkey,
            })
            .collect();
        let wrs: Box<[IbvSendWr]> = sges
            .iter_mut()
            .map(|sge| IbvSendWr {
                wr_id: 0,
                next: std::ptr::null_mut(),
                sg_list: sge,
                num_sge: 1,
                opcode: IBV_WR_SEND,
                send_flags: 0,
                imm_data: 0,
                rest: [0; 11],
            })
            .collect();
        Ok(IbvSink {
            qp,
            cq,
            cfg,
            ring,
            sges,
            wrs,
            head: 0,
            done: 0,
            unposted: 0,
            arp_read: None,
            wc: vec![IbvWc::default(); 64],
            owner: None,
            stats: IbvSinkStats::default(),
        })
    }

    /// Opens the RDMA device behind the interface holding `interface` (an IPv4 address),
    /// with a ring of about `send_buffer` bytes of frames sized for the interface's MTU.
    pub fn open(interface: Ipv4Addr, ttl: u32, send_buffer: usize) -> io::Result<Self> {
        if interface.is_unspecified() {
            return Err(invalid(
                "ibverbs transmit needs the interface's address (--send-interface / --interface), not 0.0.0.0".into(),
            ));
        }
        let ifname = interface_with_address(interface)?;
        let port = rdma_port_of_interface(Path::new("/sys"), &ifname)?;
        let mtu: usize = std::fs::read_to_string(format!("/sys/class/net/{ifname}/mtu"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1500);
        let slot_bytes = (14 + mtu).div_ceil(64) * 64;
        let slots = (send_buffer / slot_bytes).clamp(64, 16384);
        let cfg = IbvSinkConfig {
            src_mac: port.mac,
            src: SocketAddrV4::new(interface, 7148),
            ttl: ttl.min(255) as u8,
            slots,
            slot_bytes,
            neighbours: arp_neighbours(Path::new("/proc/net/arp"), &ifname),
            arp: Some(("/proc/net/arp".into(), ifname.clone())),
            arp_refresh: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        };
        let mut qp = Box::new(RawSendQp::open(Some(&port.device), port.port, slots)?);
        let (raw_qp, raw_cq) = (qp.qp, qp.cq);
        let qp_ref: *mut RawSendQp = &mut *qp;
        // SAFETY: the QP is in RTS with `slots` send requests; the ring registration lives
        // in `qp`, which the sink owns and drops after the ring is no longer posted.
        let mut s = unsafe {
            Self::from_raw(raw_qp, raw_cq, cfg, |p, len| {
                (*qp_ref).register_host(p, len)
            })
        }?;
        s.owner = Some(qp);
        tracing::info!(
            interface = %ifname,
            device = %port.device,
            port = port.port,
            slots,
            slot_bytes,
            "--send-ibv: sending through an ibverbs raw-packet queue pair"
        );
        Ok(s)
    }

    /// Packets posted but not yet known complete.
    pub fn in_flight(&self) -> usize {
        (self.unposted - self.done) as usize
    }

    /// The frame of packet number `seq` while its slot still holds it (tests, inspection).
    pub fn frame(&self, seq: u64) -> Option<&[u8]> {
        if seq < self.done || seq >= self.head {
            return None;
        }
        let k = (seq % self.cfg.slots as u64) as usize;
        let at = k * self.cfg.slot_bytes;
        Some(&self.ring[at..at + self.sges[k].length as usize])
    }

    /// Polls the completion queue once; returns the number of completions.
    pub fn poll(&mut self) -> io::Result<usize> {
        // SAFETY: cq is live; wc has room for its length.
        let n = unsafe { poll_cq(self.cq, self.wc.len() as c_int, self.wc.as_mut_ptr()) };
        if n < 0 {
            return Err(io::Error::other(format!("ibv_poll_cq failed ({n})")));
        }
        for w in &self.wc[..n as usize] {
            if w.status != IBV_WC_SUCCESS {
                self.stats.wc_errors += 1;
            }
            // In-order completion: everything up to this request is done. A completion for
            // a request never posted is ignored.
            if w.wr_id >= self.done && w.wr_id < self.unposted {
                self.done = w.wr_id + 1;
            }
        }
        Ok(n as usize)
    }

    /// Posts the written but unposted packets as one chain, the last signalled.
    fn post(&mut self) -> io::Result<()> {
        if self.unposted == self.head {
            return Ok(());
        }
        let slots = self.cfg.slots as u64;
        let quarter = (slots / 4).max(1);
        for seq in self.unposted..self.head {
            let k = (seq % slots) as usize;
            let last = seq + 1 == self.head;
            let next: *mut IbvSendWr = if last {
                std::ptr::null_mut()
            } else {
                &mut self.wrs[((seq + 1) % slots) as usize]
            };
            let w = &mut self.wrs[k];
            w.wr_id = seq;
            w.next = next;
            w.send_flags = if last || seq % quarter == quarter - 1 {
                IBV_SEND_SIGNALED
            } else {
                0
            };
        }
        let first = &mut self.wrs[(self.unposted % slots) as usize] as *mut IbvSendWr;
        let mut bad: *mut IbvSendWr = std::ptr::null_mut();
        // SAFETY: the chain lies in `wrs`, each request points at its slot's entry in
        // `sges`; the QP is live and has room (at most `slots` requests outstanding).
        let rc = unsafe { post_send(self.qp, first, &mut bad) };
        // The requests before `bad` were taken by the NIC (all of them on success); the
        // rest are dropped and their slots reused.
        let taken = match (rc, bad.is_null()) {
            (0, _) => self.head,
            (_, true) => self.unposted,
            // SAFETY: `bad` points at one of our requests.
            (_, false) => unsafe { (*bad).wr_id }.clamp(self.unposted, self.head),
        };
        for seq in self.unposted..taken {
            let len = self.sges[(seq % slots) as usize].length as usize;
            self.stats.packets += 1;
            self.stats.bytes += (len - UDP_HEADERS) as u64;
        }
        self.head = taken;
        self.unposted = taken;
        if rc != 0 {
            return Err(io::Error::other(format!(
                "ibv_post_send failed: {}",
                io::Error::from_raw_os_error(rc)
            )));
        }
        self.stats.posts += 1;
        Ok(())
    }

    /// A free slot for the next packet: posts what is pending and polls completions while
    /// the ring is full, for up to the configured timeout.
    fn wait_for_slot(&mut self) -> io::Result<()> {
        let slots = self.cfg.slots as u64;
        if self.head - self.done < slots {
            return Ok(());
        }
        self.complete_up_to(self.head + 1 - slots, "no slot came free")
    }

    /// Posts what is pending, then polls until every packet before `seq` is complete, for
    /// up to the configured timeout (then `TimedOut`, saying `what`).
    fn complete_up_to(&mut self, seq: u64, what: &str) -> io::Result<()> {
        self.post()?;
        let start = Instant::now();
        while self.done < seq {
            self.poll()?;
            if self.done < seq && start.elapsed() >= self.cfg.timeout {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{what}: the NIC did not complete within {:?} ({} packets in flight)",
                        self.cfg.timeout,
                        self.in_flight()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Writes one packet into the next slot (not posted yet).
    fn write(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> io::Result<()> {
        let payload: usize = parts.iter().map(|p| p.len()).sum();
        let frame = UDP_HEADERS + payload;
        if frame > self.cfg.slot_bytes || payload > u16::MAX as usize - 28 {
            return Err(invalid(format!(
                "a {payload}-byte UDP payload does not fit the ibverbs frame of {} bytes",
                self.cfg.slot_bytes
            )));
        }
        let dst_mac = if dst.ip().is_multicast() {
            None
        } else {
            if !self.cfg.neighbours.contains_key(dst.ip()) {
                self.reread_arp();
            }
            Some(*self.cfg.neighbours.get(dst.ip()).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "--send-ibv: no Ethernet address for unicast destination {} (not in the ARP table of the interface); send to a multicast group or resolve the neighbour first",
                        dst.ip()
                    ),
                )
            })?)
        };
        self.wait_for_slot()?;
        let k = (self.head % self.cfg.slots as u64) as usize;
        let at = k * self.cfg.slot_bytes;
        let slot = &mut self.ring[at..at + frame];
        let (src_mac, src, ttl) = (self.cfg.src_mac, self.cfg.src, self.cfg.ttl);
        write_udp_headers(slot, src_mac, dst_mac, src, dst, ttl, payload);
        let mut o = UDP_HEADERS;
        for p in parts {
            slot[o..o + p.len()].copy_from_slice(p);
            o += p.len();
        }
        self.sges[k].length = frame as u32;
        self.head += 1;
        Ok(())
    }

    /// Reads the ARP table again for a destination not resolved yet (the kernel learns
    /// neighbours as traffic flows), at most once per `arp_refresh`.
    fn reread_arp(&mut self) {
        let Some((path, ifname)) = &self.cfg.arp else {
            return;
        };
        if self
            .arp_read
            .is_some_and(|t| t.elapsed() < self.cfg.arp_refresh)
        {
            return;
        }
        self.arp_read = Some(Instant::now());
        let fresh = arp_neighbours(path, ifname);
        self.cfg.neighbours.extend(fresh);
    }

    /// Waits (up to the configured timeout) until the NIC has completed every packet.
    pub fn drain(&mut self) -> io::Result<()> {
        self.complete_up_to(self.head, "draining")
    }
}

impl PacketSink for IbvSink {
    fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> io::Result<()> {
        self.write(dst, parts)?;
        self.post()
    }

    fn send_batch(&mut self, packets: &[(SocketAddrV4, &[&[u8]])]) -> io::Result<()> {
        for (dst, parts) in packets {
            if let Err(e) = self.write(*dst, parts) {
                // The packets before the bad one still go out.
                self.post()?;
                return Err(e);
            }
        }
        self.post()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.drain()
    }
}

impl Drop for IbvSink {
    fn drop(&mut self) {
        if self.owner.is_some() {
            // Let the NIC finish reading the ring before it is deregistered and freed.
            if let Err(e) = self.drain() {
                tracing::warn!("--send-ibv: closing with packets in flight: {e}");
            }
        }
    }
}

/// The Ethernet addresses of `interface`'s complete neighbour entries in `arp` (the format
/// of `/proc/net/arp`); an unreadable file gives none.
pub fn arp_neighbours(arp: &Path, interface: &str) -> HashMap<Ipv4Addr, [u8; 6]> {
    let Ok(text) = std::fs::read_to_string(arp) else {
        return HashMap::new();
    };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // IP address, HW type, Flags (0x2: complete), HW address, Mask, Device.
            if f.len() < 6 || f[5] != interface || f[2] != "0x2" {
                return None;
            }
            let ip: Ipv4Addr = f[0].parse().ok()?;
            let mac: Vec<u8> = f[3]
                .split(':')
                .map(|h| u8::from_str_radix(h, 16))
                .collect::<Result<_, _>>()
                .ok()?;
            Some((ip, mac.try_into().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests;
