//! Kernel UDP sockets: unicast or multicast send with sendmmsg batching.

use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};

use super::PacketSink;

/// Most packets handed to one sendmmsg call.
pub const MAX_BATCH: usize = 64;
/// Most parts (iovecs) in one packet.
pub const MAX_PARTS: usize = 8;

/// Sends UDP datagrams from one socket to any number of destinations.
pub struct UdpSink {
    socket: UdpSocket,
    pub packets: u64,
    pub bytes: u64,
}

impl UdpSink {
    /// Opens a socket bound to `interface` (an IPv4 address; `0.0.0.0` for any) with the
    /// given multicast TTL and send buffer size.
    pub fn new(interface: Ipv4Addr, ttl: u32, send_buffer: usize) -> io::Result<Self> {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_send_buffer_size(send_buffer)?;
        s.set_multicast_ttl_v4(ttl)?;
        s.set_ttl_v4(ttl.max(1))?;
        if !interface.is_unspecified() {
            s.set_multicast_if_v4(&interface)?;
        }
        s.set_multicast_loop_v4(true)?;
        s.bind(&SocketAddrV4::new(interface, 0).into())?;
        Ok(UdpSink {
            socket: s.into(),
            packets: 0,
            bytes: 0,
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddrV4> {
        match self.socket.local_addr()? {
            std::net::SocketAddr::V4(a) => Ok(a),
            _ => Err(io::Error::other("not an IPv4 socket")),
        }
    }
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain old data; zeroed is a valid value.
    let mut s: libc::sockaddr_in = unsafe { MaybeUninit::zeroed().assume_init() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = a.port().to_be();
    s.sin_addr = libc::in_addr {
        s_addr: u32::from(*a.ip()).to_be(),
    };
    s
}

impl PacketSink for UdpSink {
    fn send(&mut self, dst: SocketAddrV4, parts: &[&[u8]]) -> io::Result<()> {
        self.send_batch(&[(dst, parts)])
    }

    fn send_batch(&mut self, packets: &[(SocketAddrV4, &[&[u8]])]) -> io::Result<()> {
        for batch in packets.chunks(MAX_BATCH) {
            let n = batch.len();
            let mut addrs = [sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)); MAX_BATCH];
            let mut iovs = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; MAX_BATCH * MAX_PARTS];
            // SAFETY: mmsghdr is plain old data.
            let mut hdrs: [libc::mmsghdr; MAX_BATCH] =
                unsafe { MaybeUninit::zeroed().assume_init() };
            for (i, (dst, parts)) in batch.iter().enumerate() {
                if parts.len() > MAX_PARTS {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "too many packet parts",
                    ));
                }
                addrs[i] = sockaddr(*dst);
                for (j, p) in parts.iter().enumerate() {
                    iovs[i * MAX_PARTS + j] = libc::iovec {
                        iov_base: p.as_ptr() as *mut _,
                        iov_len: p.len(),
                    };
                    self.bytes += p.len() as u64;
                }
                let h = &mut hdrs[i].msg_hdr;
                h.msg_name = &mut addrs[i] as *mut _ as *mut libc::c_void;
                h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
                h.msg_iov = &mut iovs[i * MAX_PARTS] as *mut libc::iovec;
                h.msg_iovlen = parts.len() as _;
            }
            let mut done = 0usize;
            while done < n {
                // SAFETY: hdrs[done..n] point at live iovecs and addresses on this stack frame.
                let r = unsafe {
                    libc::sendmmsg(
                        self.socket.as_raw_fd(),
                        hdrs.as_mut_ptr().add(done),
                        (n - done) as u32,
                        0,
                    )
                };
                if r < 0 {
                    let e = io::Error::last_os_error();
                    match e.kind() {
                        io::ErrorKind::Interrupted => continue,
                        // Kernel queue full: yield and retry (the socket is blocking; ENOBUFS on loopback).
                        _ if e.raw_os_error() == Some(libc::ENOBUFS) => {
                            std::thread::yield_now();
                            continue;
                        }
                        _ => return Err(e),
                    }
                }
                done += r as usize;
            }
            self.packets += n as u64;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A plain UDP receive socket (unicast, or multicast joined on `interface`).
pub struct UdpSource {
    socket: UdpSocket,
}

impl UdpSource {
    /// Binds `addr`; for a multicast address, binds the port and joins the group.
    pub fn bind(addr: SocketAddrV4, interface: Ipv4Addr, recv_buffer: usize) -> io::Result<Self> {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_reuse_address(true)?;
        let _ = s.set_recv_buffer_size(recv_buffer);
        if addr.ip().is_multicast() {
            s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, addr.port()).into())?;
            s.join_multicast_v4(addr.ip(), &interface)?;
        } else {
            s.bind(&addr.into())?;
        }
        Ok(UdpSource { socket: s.into() })
    }

    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.socket.local_addr()
    }

    /// Receives one datagram into `buf`; `Ok(None)` after `timeout` with nothing.
    pub fn recv(&self, buf: &mut [u8], timeout: std::time::Duration) -> io::Result<Option<usize>> {
        self.socket
            .set_read_timeout(Some(timeout.max(std::time::Duration::from_millis(1))))?;
        match self.socket.recv(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}
