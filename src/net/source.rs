//! Packet sources for the engines' receive side: a pcap file (replayed as fast as the
//! consumer takes it) or UDP sockets (recvmmsg over one socket per port, multicast joined).

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::Path;

use socket2::{Domain, Protocol, Socket, Type};

use super::pcap::PcapSource;

/// What a receive call produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// This many packets were handed to the callback.
    Packets(usize),
    /// Nothing arrived within the poll interval.
    Idle,
    /// The source is exhausted (end of file).
    End,
}

/// Where packets come from.
pub trait PacketSource: Send {
    /// Hands up to one batch of packet payloads (UDP payloads) to `f`.
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8])) -> io::Result<Poll>;
}

/// Replays the UDP datagrams of a pcap file, keeping those addressed to `endpoints`
/// (all datagrams if the list is empty).
pub struct PcapFileSource {
    src: PcapSource,
    endpoints: Vec<SocketAddrV4>,
    /// Datagrams skipped because of their destination.
    pub filtered: u64,
}

impl PcapFileSource {
    pub fn open(path: &Path, endpoints: Vec<SocketAddrV4>) -> io::Result<Self> {
        Ok(PcapFileSource {
            src: PcapSource::open(path)?,
            endpoints,
            filtered: 0,
        })
    }

    pub fn stats(&self) -> &super::pcap::PcapSourceStats {
        &self.src.stats
    }
}

impl PacketSource for PcapFileSource {
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8])) -> io::Result<Poll> {
        let mut n = 0;
        while n < 64 {
            match self.src.next_datagram()? {
                None => return Ok(if n == 0 { Poll::End } else { Poll::Packets(n) }),
                Some(d) => {
                    if self.endpoints.is_empty() || self.endpoints.contains(&d.dst) {
                        f(&d.payload);
                        n += 1;
                    } else {
                        self.filtered += 1;
                    }
                }
            }
        }
        Ok(Poll::Packets(n))
    }
}

const BATCH: usize = 64;
const MAX_DATAGRAM: usize = 9216;

/// Receives UDP datagrams for a list of endpoints: one socket per port, bound to the
/// unicast address or joined to every multicast group of that port on `interface`.
pub struct UdpRecvSource {
    sockets: Vec<UdpSocket>,
    bufs: Vec<u8>,
    poll_ms: i32,
}

impl UdpRecvSource {
    pub fn new(
        endpoints: &[SocketAddrV4],
        interface: Ipv4Addr,
        recv_buffer: usize,
    ) -> io::Result<Self> {
        let mut ports: Vec<u16> = endpoints.iter().map(|e| e.port()).collect();
        ports.sort_unstable();
        ports.dedup();
        let mut sockets = Vec::new();
        for port in ports {
            let eps: Vec<&SocketAddrV4> = endpoints.iter().filter(|e| e.port() == port).collect();
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
            s.set_reuse_address(true)?;
            let _ = s.set_recv_buffer_size(recv_buffer);
            let multicast = eps.iter().any(|e| e.ip().is_multicast());
            if multicast {
                s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port).into())?;
                for e in &eps {
                    if e.ip().is_multicast() {
                        s.join_multicast_v4(e.ip(), &interface)?;
                    }
                }
            } else {
                if eps.len() > 1 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("several unicast addresses share port {port}"),
                    ));
                }
                s.bind(&(*eps[0]).into())?;
            }
            s.set_nonblocking(true)?;
            sockets.push(s.into());
        }
        Ok(UdpRecvSource {
            sockets,
            bufs: vec![0; BATCH * MAX_DATAGRAM],
            poll_ms: 100,
        })
    }
}

impl PacketSource for UdpRecvSource {
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8])) -> io::Result<Poll> {
        let mut fds: Vec<libc::pollfd> = self
            .sockets
            .iter()
            .map(|s| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: fds is a valid array of pollfd for the duration of the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, self.poll_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(Poll::Idle)
            } else {
                Err(e)
            };
        }
        if r == 0 {
            return Ok(Poll::Idle);
        }
        let mut total = 0;
        for (i, pfd) in fds.iter().enumerate() {
            if pfd.revents & libc::POLLIN == 0 {
                continue;
            }
            let mut iovs: Vec<libc::iovec> = (0..BATCH)
                .map(|k| libc::iovec {
                    iov_base: self.bufs[k * MAX_DATAGRAM..].as_mut_ptr() as *mut _,
                    iov_len: MAX_DATAGRAM,
                })
                .collect();
            // SAFETY: mmsghdr is plain old data; each header points at one iovec above.
            let mut hdrs: Vec<libc::mmsghdr> =
                (0..BATCH).map(|_| unsafe { std::mem::zeroed() }).collect();
            for (h, iov) in hdrs.iter_mut().zip(iovs.iter_mut()) {
                h.msg_hdr.msg_iov = iov;
                h.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: buffers outlive the call; the socket is non-blocking.
            let n = unsafe {
                libc::recvmmsg(
                    self.sockets[i].as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    BATCH as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) {
                    continue;
                }
                return Err(e);
            }
            for (k, h) in hdrs.iter().take(n as usize).enumerate() {
                let len = (h.msg_len as usize).min(MAX_DATAGRAM);
                f(&self.bufs[k * MAX_DATAGRAM..k * MAX_DATAGRAM + len]);
            }
            total += n as usize;
        }
        Ok(if total == 0 {
            Poll::Idle
        } else {
            Poll::Packets(total)
        })
    }
}
