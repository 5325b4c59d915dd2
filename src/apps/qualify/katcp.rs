//! A blocking katcp client: one request at a time, each with a message id, the informs
//! that carry the id collected, the reply's arguments returned (a `fail` reply is an error
//! carrying the engine's message). Asynchronous informs (`#sensor-status`, `#log`) are
//! skipped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::control::katcp::{Kind, LineReader, Message};

/// Longest line accepted from an engine.
const LINE_LIMIT: usize = 16 << 20;

/// A katcp request that failed.
#[derive(Debug, thiserror::Error)]
pub enum KatcpError {
    /// The connection failed or closed.
    #[error("katcp {addr} ?{request}: {source}")]
    Io {
        /// Engine address.
        addr: SocketAddr,
        /// The request.
        request: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The engine replied `fail` (or `invalid`).
    #[error("katcp {addr} ?{request} failed: {message}")]
    Failed {
        /// Engine address.
        addr: SocketAddr,
        /// The request.
        request: String,
        /// The reply's message.
        message: String,
    },
    /// No reply within the timeout.
    #[error("katcp {addr} ?{request}: no reply within {timeout:?}")]
    Timeout {
        /// Engine address.
        addr: SocketAddr,
        /// The request.
        request: String,
        /// How long the wait was.
        timeout: Duration,
    },
}

/// One connection to an engine's katcp server.
pub struct Client {
    addr: SocketAddr,
    stream: TcpStream,
    reader: LineReader,
    lines: Vec<Vec<u8>>,
    next_id: u32,
}

/// A reply: its arguments after `ok`, and the informs of the request.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// Arguments after `ok`.
    pub args: Vec<String>,
    /// Each inform's arguments.
    pub informs: Vec<Vec<String>>,
}

fn strings(m: &Message) -> Vec<String> {
    m.args
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

impl Client {
    /// Connects to `addr`, retrying until `timeout` (the engine may still be starting).
    pub fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<Client> {
        let t0 = Instant::now();
        let stream = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                Ok(s) => break s,
                Err(e) if t0.elapsed() >= timeout => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        stream.set_nodelay(true)?;
        Ok(Client {
            addr,
            stream,
            reader: LineReader::new(LINE_LIMIT),
            lines: Vec::new(),
            next_id: 1,
        })
    }

    /// Sends `?name args…` and waits (at most `timeout`) for its reply.
    pub fn request<S: AsRef<str>>(
        &mut self,
        name: &str,
        args: &[S],
        timeout: Duration,
    ) -> Result<Reply, KatcpError> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let text = std::iter::once(name)
            .chain(args.iter().map(AsRef::as_ref))
            .collect::<Vec<_>>()
            .join(" ");
        let io = |source| KatcpError::Io {
            addr: self.addr,
            request: text.clone(),
            source,
        };
        let msg = Message::with_args(Kind::Request, name, Some(id), args);
        self.stream.write_all(&msg.encode()).map_err(io)?;
        let t0 = Instant::now();
        let mut reply = Reply::default();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            for line in std::mem::take(&mut self.lines) {
                let Ok(m) = Message::parse(&line) else {
                    continue;
                };
                if m.mid != Some(id) || m.name != name {
                    continue;
                }
                match m.kind {
                    Kind::Inform => reply.informs.push(strings(&m)),
                    Kind::Reply => {
                        let mut a = strings(&m);
                        if a.first().map(String::as_str) == Some("ok") {
                            a.remove(0);
                            reply.args = a;
                            return Ok(reply);
                        }
                        return Err(KatcpError::Failed {
                            addr: self.addr,
                            request: text,
                            message: a.get(1..).unwrap_or_default().join(" "),
                        });
                    }
                    Kind::Request => {}
                }
            }
            let left = timeout.saturating_sub(t0.elapsed());
            if left.is_zero() {
                return Err(KatcpError::Timeout {
                    addr: self.addr,
                    request: text,
                    timeout,
                });
            }
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(io)?;
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    return Err(io(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "connection closed",
                    )))
                }
                Ok(n) => {
                    let _ = self.reader.feed(&buf[..n], &mut self.lines);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(io(e)),
            }
        }
    }

    /// The value of sensor `name` (`?sensor-value name`), as text.
    pub fn sensor(&mut self, name: &str, timeout: Duration) -> Result<String, KatcpError> {
        let r = self.request("sensor-value", &[name], timeout)?;
        // `#sensor-value <ts> 1 name status value`.
        r.informs
            .iter()
            .find(|i| i.get(2).map(String::as_str) == Some(name))
            .and_then(|i| i.get(4).cloned())
            .ok_or_else(|| KatcpError::Failed {
                addr: self.addr,
                request: format!("sensor-value {name}"),
                message: "no #sensor-value inform".into(),
            })
    }
}
