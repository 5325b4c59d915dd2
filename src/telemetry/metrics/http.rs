//! The `/metrics` HTTP endpoint: a thread per connection, at most [`Limits::max_connections`]
//! at once. A request head is read within [`Limits::max_request`] bytes and
//! [`Limits::request_timeout`] (whole head, not per read), so slow, idle or oversized
//! clients cost a bounded amount of memory and time; when every slot is taken, the
//! connection that has waited longest for its request is closed to make room, so idle
//! connections never stop a scrape.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{debug, warn};

/// Bounds on what scrapers may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Largest request head (request line and headers) read, in bytes; a larger one gets
    /// `431` and the connection is closed.
    pub max_request: usize,
    /// Time allowed for the whole request head to arrive.
    pub request_timeout: Duration,
    /// Time allowed for writing the response.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 32,
            max_request: 16 << 10,
            request_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// Why no request head was read.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadError {
    /// More than the limit without the blank line that ends a head.
    TooLarge,
    /// The client closed the connection (or it was closed to make room).
    Closed,
    /// The head did not arrive in time.
    TimedOut,
    /// Another read error.
    Io(io::ErrorKind),
}

/// Reads a request head (up to and including its blank line) from `r`, never holding more
/// than `max` + 1 bytes. `before_read` runs before each read (to set the time left as the
/// read timeout, or fail when none is left).
pub fn read_head(
    r: &mut impl Read,
    max: usize,
    mut before_read: impl FnMut() -> io::Result<()>,
) -> Result<Vec<u8>, HeadError> {
    let mut head = Vec::with_capacity(1024.min(max + 1));
    let mut tmp = [0u8; 4096];
    loop {
        before_read().map_err(|e| HeadError::Io(e.kind()))?;
        let room = (max + 1 - head.len()).min(tmp.len());
        let n = match r.read(&mut tmp[..room]) {
            Ok(0) => return Err(HeadError::Closed),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HeadError::TimedOut)
            }
            Err(e) => return Err(HeadError::Io(e.kind())),
        };
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&tmp[..n]);
        let tail = &head[from..];
        if tail.windows(4).any(|w| w == b"\r\n\r\n") || tail.windows(2).any(|w| w == b"\n\n") {
            return Ok(head);
        }
        if head.len() > max {
            return Err(HeadError::TooLarge);
        }
    }
}

/// (status, content type, body) for a request head.
fn respond(head: &[u8], render: &dyn Fn() -> String) -> (&'static str, &'static str, String) {
    let line = head.split(|&c| c == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" {
        return (
            "405 Method Not Allowed",
            "text/plain",
            "only GET is served\n".into(),
        );
    }
    if path != "/metrics" {
        return (
            "404 Not Found",
            "text/plain",
            "only /metrics is served\n".into(),
        );
    }
    let ctype = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ("200 OK", ctype, render())
}

struct Conn {
    id: u64,
    stream: TcpStream,
    /// Still waiting for its request head (so it may be closed to make room).
    reading: bool,
}

#[derive(Default)]
struct Active {
    conns: Mutex<VecDeque<Conn>>,
}

impl Active {
    fn remove(&self, id: u64) {
        if let Ok(mut c) = self.conns.lock() {
            c.retain(|c| c.id != id);
        }
    }

    fn done_reading(&self, id: u64) {
        if let Ok(mut c) = self.conns.lock() {
            if let Some(c) = c.iter_mut().find(|c| c.id == id) {
                c.reading = false;
            }
        }
    }

    /// Takes a slot for `stream`: when all are taken, closes the oldest connection still
    /// reading its request. `None` when every slot is writing a response.
    fn admit(&self, id: u64, stream: &TcpStream, max: usize) -> Option<()> {
        let mut c = self.conns.lock().ok()?;
        if c.len() >= max {
            let i = c.iter().position(|c| c.reading)?;
            let old = c.remove(i)?;
            debug!("metrics: closing the connection waiting longest for its request");
            let _ = old.stream.shutdown(Shutdown::Both);
        }
        c.push_back(Conn {
            id,
            stream: stream.try_clone().ok()?,
            reading: true,
        });
        Some(())
    }
}

/// Binds `addr` and serves `render()` at `GET /metrics` from background threads.
pub fn serve(
    addr: SocketAddr,
    limits: Limits,
    render: impl Fn() -> String + Send + Sync + 'static,
) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    let render: Arc<dyn Fn() -> String + Send + Sync> = Arc::new(render);
    std::thread::Builder::new()
        .name("prometheus".into())
        .spawn(move || accept_loop(listener, limits, render))?;
    Ok(bound)
}

fn accept_loop(
    listener: TcpListener,
    limits: Limits,
    render: Arc<dyn Fn() -> String + Send + Sync>,
) {
    let active = Arc::new(Active::default());
    let mut next_id = 0u64;
    let mut logged_at: Option<Instant> = None;
    for conn in listener.incoming() {
        let s = match conn {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and the like: do not spin.
                if logged_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    warn!(error = %e, "metrics: accepting a connection failed");
                    logged_at = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        if active.admit(id, &s, limits.max_connections).is_none() {
            if logged_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                warn!(
                    max_connections = limits.max_connections,
                    "metrics: every connection is busy sending; refusing scrapes"
                );
                logged_at = Some(Instant::now());
            }
            let _ = s.set_nonblocking(true);
            let _ = (&s).write_all(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            continue;
        }
        let (act, r) = (active.clone(), render.clone());
        let spawned = std::thread::Builder::new()
            .name("prometheus-conn".into())
            .spawn(move || {
                serve_conn(s, id, &act, limits, r.as_ref());
                act.remove(id);
            });
        if let Err(e) = spawned {
            warn!(error = %e, "metrics: no thread for a connection; closed");
            active.remove(id);
        }
    }
}

fn serve_conn(
    mut s: TcpStream,
    id: u64,
    active: &Active,
    limits: Limits,
    render: &(dyn Fn() -> String + Send + Sync),
) {
    let deadline = Instant::now() + limits.request_timeout;
    let timeouts = s.try_clone();
    let head = read_head(&mut s, limits.max_request, || {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        match &timeouts {
            Ok(t) => t.set_read_timeout(Some(left)),
            Err(e) => Err(e.kind().into()),
        }
    });
    active.done_reading(id);
    let (status, ctype, body) = match head {
        Ok(h) => respond(&h, render),
        Err(HeadError::TooLarge) => (
            "431 Request Header Fields Too Large",
            "text/plain",
            format!("request head over {} bytes\n", limits.max_request),
        ),
        Err(HeadError::TimedOut) | Err(HeadError::Io(io::ErrorKind::TimedOut)) => (
            "408 Request Timeout",
            "text/plain",
            "request too slow\n".into(),
        ),
        Err(e) => {
            debug!(error = ?e, "metrics: no request");
            return;
        }
    };
    let _ = s.set_write_timeout(Some(limits.write_timeout));
    let out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if let Err(e) = s.write_all(out.as_bytes()) {
        debug!(error = %e, "metrics: response not written");
    }
    let _ = s.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        // Bounded wait: a server busy with other connections would time out here.
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request).unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    }

    /// 50 idle connections (connected, sending nothing) do not delay a scrape; with more
    /// idle ones than slots, the oldest are closed to make room.
    #[test]
    fn idle_connections_do_not_stop_a_scrape() {
        let addr = serve("127.0.0.1:0".parse().unwrap(), Limits::default(), || {
            "x_total 7\n".to_string()
        })
        .unwrap();
        for idle in [50, 100] {
            let conns: Vec<TcpStream> = (0..idle)
                .map(|_| TcpStream::connect(addr).unwrap())
                .collect();
            let body = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
            assert!(body.starts_with("HTTP/1.1 200 OK"), "{idle}: {body}");
            assert!(body.ends_with("x_total 7\n"), "{body}");
            drop(conns);
        }
        let body = get(addr, b"GET /other HTTP/1.1\r\n\r\n");
        assert!(body.starts_with("HTTP/1.1 404"), "{body}");
    }

    /// A request head without its end is cut off at the limit (431), not read whole; the
    /// reader never holds more than the limit (+1 byte to see it was passed).
    #[test]
    fn oversized_request_heads_are_refused() {
        let limits = Limits::default();
        let addr = serve("127.0.0.1:0".parse().unwrap(), limits, String::new).unwrap();
        let mut req = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        req.resize(limits.max_request + 1, b'a');
        let body = get(addr, &req);
        assert!(body.starts_with("HTTP/1.1 431"), "{body}");
        // An endless head from a reader: refused after at most max + 1 bytes.
        let mut consumed = 0usize;
        let mut endless = io::repeat(b'a').take(96 << 20);
        let mut counting = CountingReader(&mut endless, &mut consumed);
        let e = read_head(&mut counting, 1000, || Ok(())).unwrap_err();
        assert_eq!(e, HeadError::TooLarge);
        assert!(consumed <= 1001, "{consumed}");
        let ok = read_head(&mut &b"GET / HTTP/1.0\n\nrest"[..], 1000, || Ok(())).unwrap();
        assert!(ok.starts_with(b"GET / HTTP/1.0\n\n"));
    }

    struct CountingReader<'a, R>(&'a mut R, &'a mut usize);

    impl<R: Read> Read for CountingReader<'_, R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.read(buf)?;
            *self.1 += n;
            Ok(n)
        }
    }
}
