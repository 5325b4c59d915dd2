//! The katcp server against hostile and broken clients, over 127.0.0.1: long lines,
//! garbage, idle clients, too many clients, clients that never read, every line ending,
//! argument counts. Waits are bounded (read timeouts); nothing here times the server.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use super::device::{Device, RequestError};
use super::sensors::{SensorSet, SensorType};
use super::server::{Limits, Server};

struct Echo(SensorSet);

impl Device for Echo {
    fn api_version(&self) -> String {
        "test-1.0".into()
    }
    fn requests(&self) -> Vec<(&'static str, &'static str)> {
        vec![("echo", "?echo [x]")]
    }
    fn request(&self, _name: &str, args: &[String]) -> Result<Vec<String>, RequestError> {
        if args.len() > 1 {
            return Err("?echo takes at most one argument".into());
        }
        Ok(args.to_vec())
    }
    fn sensors(&self) -> &SensorSet {
        &self.0
    }
}

fn start(limits: Limits) -> Server {
    let s = SensorSet::default();
    for i in 0..200 {
        s.add(
            &format!("s{i:03}"),
            &"d".repeat(200),
            "",
            SensorType::Integer,
            "0",
        );
    }
    Server::start_with("127.0.0.1:0".parse().unwrap(), Arc::new(Echo(s)), limits).unwrap()
}

/// A client: its stream and a reader of its lines; every read waits at most 10 s.
struct Client {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let w = TcpStream::connect(addr).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Client { w, r }
    }

    /// The next line, without its newline; `None` at the end of the stream.
    fn line(&mut self) -> Option<String> {
        let mut l = String::new();
        match self.r.read_line(&mut l) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(l.trim_end_matches('\n').to_string()),
        }
    }

    /// Lines up to and including the first that starts with `prefix` (panics at the end of
    /// the stream or after 10 s without one).
    fn until(&mut self, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let l = self
                .line()
                .unwrap_or_else(|| panic!("no {prefix:?} line; got {out:?}"));
            let done = l.starts_with(prefix);
            out.push(l);
            if done {
                return out;
            }
        }
    }

    fn send(&mut self, data: &[u8]) {
        self.w.write_all(data).unwrap();
    }

    /// Sends `req` and returns its reply line.
    fn ask(&mut self, req: &str) -> String {
        self.send(format!("{req}\n").as_bytes());
        let name = req.split(' ').next().unwrap().trim_start_matches('?');
        self.until(&format!("!{name}")).pop().unwrap()
    }

    /// Reads until the server closes the connection; the lines seen.
    fn until_closed(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(l) = self.line() {
            out.push(l);
        }
        out
    }
}

/// A line longer than the limit with no newline: the server reads no more than the limit,
/// says why and disconnects; a 96 MiB one is refused the same way, and the server still
/// answers. (Before: it read until a newline, however long, before checking.)
#[test]
fn overlong_lines_are_refused_while_read() {
    let limits = Limits::default();
    let server = start(limits);
    let mut c = Client::connect(server.addr);
    c.send(&vec![b'x'; limits.max_line + 1]);
    let lines = c.until_closed();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("#log error") && l.contains("line\\_longer\\_than")),
        "{lines:?}"
    );
    assert!(
        lines.last().unwrap().starts_with("#disconnect"),
        "{lines:?}"
    );
    // 96 MiB without a newline: the writer fails once the server has hung up.
    let mut c = Client::connect(server.addr);
    let block = vec![b'y'; 1 << 20];
    let sent = (0..96)
        .take_while(|_| c.w.write_all(&block).is_ok())
        .count();
    assert!(sent < 96, "the server read a 96 MiB line");
    let mut c = Client::connect(server.addr);
    assert_eq!(c.ask("?watchdog"), "!watchdog ok");
}

/// Garbage (binary, bad escapes, bad names, lone `\r`, stray replies) gets `#log` errors,
/// never a hang or a crash; the same connection then answers `?watchdog`.
#[test]
fn garbage_lines_leave_the_server_answering() {
    let server = start(Limits::default());
    let mut c = Client::connect(server.addr);
    let mut x = 0x1234_5678_9abc_def0u64;
    let mut junk: Vec<u8> = (0..200_000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            match (x >> 56) as u8 {
                b'?' => b'x', // no accidental ?halt
                b => b,
            }
        })
        .collect();
    junk.extend_from_slice(b"\n?a\\q\n?1\n!watchdog ok\n#x\n?[\n\0\n?watchdog[0]\n\n");
    c.send(&junk);
    c.send(b"?watchdog[7]\n");
    let lines = c.until("!watchdog[7]");
    assert_eq!(lines.last().unwrap(), "!watchdog[7] ok");
    assert!(lines.iter().any(|l| l.starts_with("#log error")));
}

/// katcp lines may end with `\n`, `\r` or `\r\n`: each request gets one reply.
/// (Before: a line ended by `\r` alone was never answered.)
#[test]
fn every_line_ending_is_a_line_ending() {
    let server = start(Limits::default());
    let mut c = Client::connect(server.addr);
    c.until("#version-connect katcp-device");
    c.send(b"?watchdog[1]\r?watchdog[2]\r\n?watchdog[3]\n");
    for i in 1..=3 {
        assert_eq!(c.line().unwrap(), format!("!watchdog[{i}] ok"));
    }
}

/// Too many or wrong arguments fail, for the standard requests as for the device's.
#[test]
fn extra_arguments_fail() {
    let server = start(Limits::default());
    let mut c = Client::connect(server.addr);
    for (req, want) in [
        ("?watchdog x", "!watchdog fail"),
        ("?halt now", "!halt fail"),
        ("?help watchdog x", "!help fail"),
        ("?version-list x", "!version-list fail"),
        ("?sensor-list s000 x", "!sensor-list fail"),
        ("?sensor-value s000 x", "!sensor-value fail"),
        ("?client-list x", "!client-list fail"),
        ("?log-level info x", "!log-level fail"),
        ("?log-level loud", "!log-level fail"),
        ("?echo a b", "!echo fail"),
        ("?echo a", "!echo ok a"),
        ("?nosuch", "!nosuch invalid"),
        ("?sensor-value s000", "!sensor-value ok 1"),
    ] {
        let got = c.ask(req);
        assert!(got.starts_with(want), "{req}: {got}");
    }
    // The failed ?halt stopped nothing: the server still answers.
    assert_eq!(c.ask("?watchdog"), "!watchdog ok");
}

/// A client that never sends a request, or leaves a line unfinished, is disconnected after
/// the idle timeout; one that has made a request may stay quiet.
#[test]
fn idle_clients_are_disconnected() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let server = start(limits);
    let mut silent = Client::connect(server.addr);
    let mut partial = Client::connect(server.addr);
    partial.send(b"?watchdog[1]\n?watch");
    let mut active = Client::connect(server.addr);
    assert_eq!(active.ask("?watchdog"), "!watchdog ok");
    let lines = silent.until_closed();
    assert!(
        lines.last().unwrap().contains("no\\_request\\_within"),
        "{lines:?}"
    );
    let lines = partial.until_closed();
    assert!(lines.last().unwrap().contains("unfinished"), "{lines:?}");
    // Both leave the client list; the active client is still served.
    eventually("the idle clients leave the list", || {
        active.ask("?client-list") == "!client-list ok 1"
    });
}

/// No more than `max_clients` at once: one more is told and closed; a slot freed is
/// taken again. 50 idle clients under the default limit do not stop another's requests.
#[test]
fn the_number_of_clients_is_capped() {
    let limits = Limits {
        max_clients: 8,
        ..Limits::default()
    };
    let server = start(limits);
    let mut held: Vec<Client> = (0..8).map(|_| Client::connect(server.addr)).collect();
    // Each has been admitted once it has its version informs.
    for c in held.iter_mut() {
        c.until("#version-connect katcp-device");
    }
    let mut extra = Client::connect(server.addr);
    let lines = extra.until_closed();
    assert_eq!(
        lines,
        vec!["#disconnect too\\_many\\_clients\\_(8\\_connected)"]
    );
    assert_eq!(held[0].ask("?client-list").split(' ').nth(2), Some("8"));
    held.pop();
    // The freed slot is seen once the server has noticed the close: the count drops.
    eventually("the closed client leaves the list", || {
        held[0].ask("?client-list") == "!client-list ok 7"
    });
    let mut again = Client::connect(server.addr);
    assert_eq!(again.ask("?watchdog"), "!watchdog ok");

    let server = start(Limits::default());
    let idle: Vec<Client> = (0..50).map(|_| Client::connect(server.addr)).collect();
    let mut c = Client::connect(server.addr);
    assert_eq!(c.ask("?watchdog"), "!watchdog ok");
    drop(idle);
}

/// A client that sends requests but never reads the replies is disconnected when a write
/// times out, and does not hold up the others.
#[test]
fn clients_that_do_not_read_are_dropped() {
    let limits = Limits {
        write_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let server = start(limits);
    let mut other = Client::connect(server.addr);
    assert_eq!(other.ask("?watchdog"), "!watchdog ok");
    let mut deaf = TcpStream::connect(server.addr).unwrap();
    deaf.set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Each ?sensor-list is ~50 kB of replies; stop once the server hangs up.
    for _ in 0..2000 {
        if deaf.write_all(b"?sensor-list\n").is_err() {
            break;
        }
        if other.ask("?client-list") == "!client-list ok 1" {
            break;
        }
    }
    eventually("the deaf client is dropped", || {
        other.ask("?client-list") == "!client-list ok 1"
    });
    assert_eq!(other.ask("?watchdog"), "!watchdog ok");
}

/// Polls `cond` every 10 ms, at most 1000 times (a bounded wait, not a timing).
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{what}: did not happen");
}

/// The lines of all clients together stay within `max_pending_total`: of four
/// clients each holding a 900 kB unfinished line (1 MiB of reader memory each) under a
/// 3.5 MiB budget, one is told why and disconnected; the other three stay (finishing a
/// line briefly holds it and the next line's start: the half MiB of slack), and finishing
/// their lines frees the memory for a new client.
#[test]
fn unfinished_lines_share_one_memory_budget() {
    let limits = Limits {
        max_line: 1 << 20,
        max_pending_total: 7 << 19,
        ..Limits::default()
    };
    let server = start(limits);
    let mut held: Vec<Client> = (0..4).map(|_| Client::connect(server.addr)).collect();
    for c in held.iter_mut() {
        c.until("#version-connect katcp-device");
        // A request first, so the idle rule for silent clients does not apply.
        assert_eq!(c.ask("?watchdog"), "!watchdog ok");
        // The server may hang up on this one while it writes.
        let _ = c.w.write_all(&vec![b'z'; 900_000]);
    }
    // The server refuses one once it has read enough (which one depends on the order it
    // reads them): that client has a `#disconnect` waiting (the others at most
    // `#client-connected` informs). Only then are lines finished (which frees memory that
    // could otherwise let the fourth line fit).
    let told = |c: &Client| {
        let mut buf = vec![0u8; 1 << 16];
        c.w.set_nonblocking(true).unwrap();
        let n = c.w.peek(&mut buf).unwrap_or(0);
        c.w.set_nonblocking(false).unwrap();
        buf[..n].windows(11).any(|w| w == b"#disconnect")
    };
    eventually("a client is refused", || held.iter().any(told));
    // Exactly one is disconnected; a client still connected answers once its line is
    // finished.
    let mut dropped = 0;
    for c in held.iter_mut() {
        let _ = c.w.write_all(b"\n?watchdog[9]\n");
        let mut lines = Vec::new();
        while let Some(l) = c.line() {
            let done = l.starts_with("!watchdog[9]");
            lines.push(l);
            if done {
                break;
            }
        }
        if lines.last().map(String::as_str) == Some("!watchdog[9] ok") {
            continue;
        }
        dropped += 1;
        assert!(
            lines.iter().any(|l| l.contains("memory\\_for\\_lines")),
            "{lines:?}"
        );
    }
    assert_eq!(dropped, 1);
    let mut fresh = Client::connect(server.addr);
    fresh.send(&vec![b'z'; 900_000]);
    fresh.send(b"\n?watchdog\n");
    assert_eq!(fresh.until("!watchdog").last().unwrap(), "!watchdog ok");
}
