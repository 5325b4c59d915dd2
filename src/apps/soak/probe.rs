//! What one sample reads about an engine from outside: its `/metrics` page over HTTP, its
//! resident set size from `/proc/PID/status` and its threads' CPU time from
//! `/proc/PID/task/*/stat` ([`crate::telemetry::cpu::threads_cpu_seconds_of`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The largest `/metrics` response read (an engine's page is a few kB).
const MAX_RESPONSE: usize = 16 << 20;

/// `GET /metrics` from `addr` within `timeout`; the body, or an error that names the address
/// and what failed. HTTP/1.0 is asked for, so the body is not chunked by a conforming
/// server; a chunked body is decoded all the same.
pub fn scrape(addr: SocketAddr, timeout: Duration) -> Result<String, String> {
    let what = |e: &dyn std::fmt::Display| format!("scrape http://{addr}/metrics: {e}");
    let deadline = Instant::now() + timeout;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| what(&e))?;
    s.set_write_timeout(Some(timeout)).map_err(|e| what(&e))?;
    write!(
        s,
        "GET /metrics HTTP/1.0\r\nHost: {addr}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| what(&e))?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(what(&format!("no complete response within {timeout:?}")));
        }
        s.set_read_timeout(Some(left)).map_err(|e| what(&e))?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(what(&e)),
        }
        if raw.len() > MAX_RESPONSE {
            return Err(what(&format!("response over {MAX_RESPONSE} bytes")));
        }
    }
    http_body(&raw).map_err(|e| what(&e))
}

/// The body of a complete HTTP response with status 200 (Content-Length and chunked
/// transfer encoding honoured).
pub fn http_body(raw: &[u8]) -> Result<String, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("response ended inside the headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8")?;
    let body = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if !status.starts_with("HTTP/") || code != "200" {
        return Err(format!("HTTP status {status:?}"));
    }
    let mut length = None;
    let mut chunked = false;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let v = v.trim();
        if k.eq_ignore_ascii_case("content-length") {
            length = Some(
                v.parse::<usize>()
                    .map_err(|_| format!("Content-Length {v:?}"))?,
            );
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v.to_ascii_lowercase().contains("chunked");
        }
    }
    let body = if chunked {
        dechunk(body)?
    } else if let Some(n) = length {
        body.get(..n)
            .ok_or(format!("body cut at {} of {n} bytes", body.len()))?
            .to_vec()
    } else {
        body.to_vec()
    };
    String::from_utf8(body).map_err(|_| "body is not UTF-8".to_string())
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunked body cut inside a chunk size")?;
        let size_text = std::str::from_utf8(&b[..eol]).map_err(|_| "chunk size is not text")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("chunk size {size_text:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = b
            .get(..size)
            .ok_or(format!("chunk cut at {} of {size} bytes", b.len()))?;
        out.extend_from_slice(chunk);
        b = b.get(size + 2..).ok_or("chunked body cut after a chunk")?;
    }
}

/// Resident set size in bytes of process `pid`; `None` where it cannot be read (exited).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&status)
}

/// The `VmRSS:` line of a `/proc/PID/status` text, in bytes.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut toks = line["VmRSS:".len()..].split_whitespace();
    let n: u64 = toks.next()?.parse().ok()?;
    let unit = match toks.next() {
        Some("kB") | None => 1024,
        Some("mB") | Some("MB") => 1 << 20,
        Some(_) => return None,
    };
    n.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_bodies() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello, and more";
        assert_eq!(http_body(ok).unwrap(), "hello");
        let plain = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\na 1\n";
        assert_eq!(http_body(plain).unwrap(), "a 1\n");
        let chunked =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n3\r\na 1\r\n2;x=y\r\n\nb\r\n0\r\n\r\n";
        assert_eq!(http_body(chunked).unwrap(), "a 1\nb");
        let e = http_body(b"HTTP/1.1 404 Not Found\r\n\r\nx").unwrap_err();
        assert!(e.contains("404"), "{e}");
        let e = http_body(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort").unwrap_err();
        assert!(e.contains("cut at 5 of 50"), "{e}");
        assert!(http_body(b"HTTP/1.1 200 OK\r\nContent-").is_err());
        assert!(http_body(b"SSH-2.0\r\n\r\n").is_err());
        let bad_chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert!(http_body(bad_chunk).unwrap_err().contains("chunk size"));
    }

    #[test]
    fn vm_rss_lines() {
        let status = "Name:\tgpucbf\nVmPeak:\t  9000 kB\nVmRSS:\t   1234 kB\nThreads:\t7\n";
        assert_eq!(parse_vm_rss(status), Some(1234 * 1024));
        assert_eq!(parse_vm_rss("Name:\tkthread\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\tlots kB\n"), None);
        let me = rss_bytes(std::process::id()).expect("own RSS");
        assert!(me > 0);
        assert_eq!(rss_bytes(u32::MAX), None);
    }

    #[test]
    fn scrape_failures_name_the_address() {
        // Bind then drop: nothing listens on this port any more.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let e = scrape(addr, Duration::from_millis(500)).unwrap_err();
        assert!(
            e.contains(&addr.to_string()) && e.contains("/metrics"),
            "{e}"
        );
    }
}
