//! A katcp v5 device server: one thread per client, the standard requests (see
//! [`super::requests`]) and the engine's own requests through [`Device`].
//!
//! Hostile or broken clients are bounded ([`Limits`]): lines are cut off at a length limit
//! while they are read (the client is told and disconnected), a client that sends no
//! request or leaves a line unfinished for the idle timeout is disconnected, at most
//! [`Limits::max_clients`] are served at once (more are refused with a log line), and a
//! client that does not read its replies is disconnected when a write times out. Memory is
//! bounded too: the lines of all clients together (unfinished or being served) stay within
//! [`Limits::max_pending_total`], and a client's unwritten replies within
//! [`Limits::max_queued`] (past it the server stops reading that client's requests until
//! it reads). Each client has its own thread and holds no lock while it writes, so none of
//! this stalls the engine or the other clients.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::device::Device;
use super::katcp::{Kind, LineReader, Message};
use super::requests::{handle, reading_args, version_informs, Clients, Out};
use super::sampling::Session;

/// Bounds on what clients may cost the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest line accepted, in bytes (aiokatcp's 16 MiB by default: a `?gain` with one
    /// full-precision value per channel of a 32k-channel output is about 1.4 MB). A longer
    /// line is refused while it is read, never buffered whole.
    pub max_line: usize,
    /// Clients served at once; one more is sent `#disconnect` and closed, with a log line.
    pub max_clients: usize,
    /// A client that sends no complete request this long after connecting, or leaves a line
    /// unfinished this long, is disconnected. A client that has made requests may then stay
    /// quiet for as long as it likes (a controller holds its connection for hours).
    pub idle_timeout: Duration,
    /// A client whose replies cannot be written within this long (it does not read them)
    /// is disconnected.
    pub write_timeout: Duration,
    /// Bytes of lines held for all clients together (unfinished lines and the lines being
    /// served); the client whose line would pass it is disconnected (64 clients at
    /// `max_line` would otherwise hold 1 GiB).
    pub max_pending_total: usize,
    /// Bytes of replies queued for one client and not yet written; past it the server
    /// reads no more of that client's requests until the client reads its replies (or
    /// the write timeout drops it).
    pub max_queued: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: 16 << 20,
            max_clients: 64,
            idle_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
            max_pending_total: 64 << 20,
            max_queued: 4 << 20,
        }
    }
}

/// A running server.
pub struct Server {
    /// The address actually bound (with the port chosen when port 0 was asked for).
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) and serves `device` until dropped.
    pub fn start(addr: SocketAddr, device: Arc<dyn Device>) -> io::Result<Server> {
        Self::start_with(addr, device, Limits::default())
    }

    /// [`Server::start`] with other [`Limits`].
    pub fn start_with(
        addr: SocketAddr,
        device: Arc<dyn Device>,
        limits: Limits,
    ) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        std::thread::Builder::new()
            .name("katcp".into())
            .spawn(move || accept_loop(listener, device, limits, stop2))?;
        info!(%addr, "katcp server listening");
        Ok(Server { addr, stop })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn accept_loop(
    listener: TcpListener,
    device: Arc<dyn Device>,
    limits: Limits,
    stop: Arc<AtomicBool>,
) {
    let clients = Arc::new(Clients::default());
    let pending = Arc::new(AtomicUsize::new(0));
    let mut refusals = Refusals::default();
    while !stop.load(Ordering::Relaxed) {
        let (s, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => {
                warn!(error = %e, "katcp accept failed");
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let Some(id) = clients.admit(peer, limits.max_clients) else {
            refusals.refuse(s, peer, limits.max_clients);
            continue;
        };
        let (d, st, cl) = (device.clone(), stop.clone(), clients.clone());
        let pending = pending.clone();
        let spawned = std::thread::Builder::new()
            .name("katcp-client".into())
            .spawn(move || {
                let shared = Shared {
                    clients: &cl,
                    pending: &pending,
                    limits,
                    stop: st,
                };
                match serve_client(s, id, d, &shared) {
                    Ok(()) => debug!(%peer, "katcp client ended"),
                    Err(e) => debug!(%peer, error = %e, "katcp client ended"),
                }
                cl.remove(id);
            });
        if let Err(e) = spawned {
            warn!(%peer, error = %e, "katcp: no thread for a new client; closed");
            clients.remove(id);
        }
    }
}

/// Clients refused because the server is full: each is told why; the log says so at most
/// once every 10 s (with how many were refused), so a flood does not flood the log.
#[derive(Default)]
struct Refusals {
    unlogged: u64,
    logged_at: Option<Instant>,
}

impl Refusals {
    fn refuse(&mut self, s: TcpStream, peer: SocketAddr, max: usize) {
        // One short write into a fresh socket's empty buffer: it cannot block.
        let _ = s.set_nonblocking(true);
        let why = format!("too many clients ({max} connected)");
        let _ =
            (&s).write_all(&Message::with_args(Kind::Inform, "disconnect", None, &[&why]).encode());
        drop(s);
        self.unlogged += 1;
        if self
            .logged_at
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            warn!(
                %peer,
                max_clients = max,
                refused = self.unlogged,
                "katcp: refusing clients: the server already has its maximum of clients"
            );
            self.unlogged = 0;
            self.logged_at = Some(Instant::now());
        }
    }
}

/// A `#log <level> <time> katcp <text>` inform.
fn log_inform(level: &str, text: &str) -> Message {
    Message::with_args(
        Kind::Inform,
        "log",
        None,
        &[
            level,
            &format!("{:.6}", super::sensors::now()),
            "katcp",
            text,
        ],
    )
}

/// Tells the client why it is being disconnected (best effort: it may not be reading);
/// the writer sends it before it ends.
fn disconnect(
    tx: &std::sync::mpsc::SyncSender<Out>,
    peer: SocketAddr,
    why: &str,
) -> io::Result<()> {
    info!(%peer, reason = why, "katcp: disconnecting client");
    let mut out = log_inform("error", why).encode();
    out.extend(Message::with_args(Kind::Inform, "disconnect", None, &[why]).encode());
    let _ = tx.try_send(Out::Lines(out));
    Ok(())
}

/// What the clients' threads share: the client list, the line memory held for all
/// clients, the limits and the stop flag.
struct Shared<'a> {
    clients: &'a Clients,
    pending: &'a AtomicUsize,
    limits: Limits,
    stop: Arc<AtomicBool>,
}

/// Bytes of replies a client's reader has queued and its writer not yet written, and
/// whether the writer has ended.
#[derive(Default)]
struct Queued {
    bytes: AtomicUsize,
    writer_done: AtomicBool,
}

fn serve_client(
    stream: TcpStream,
    id: u64,
    device: Arc<dyn Device>,
    shared: &Shared,
) -> io::Result<()> {
    let (clients, limits) = (shared.clients, shared.limits);
    let peer = stream.peer_addr()?;
    stream.set_nonblocking(false)?;
    // Short reads let the thread see the stop flag and the idle deadlines.
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    stream.set_write_timeout(Some(limits.write_timeout))?;
    let w = stream.try_clone()?;
    let mut r = stream;
    let mut hello = Vec::new();
    for m in version_informs(device.as_ref(), "version-connect", None) {
        hello.extend(m.encode());
    }
    // Everything written to the client goes through its writer thread: replies in order,
    // and the `#sensor-status` informs of its subscriptions as readings and clocks say.
    let session = Arc::new(Session::default());
    let (tx, rx) = std::sync::mpsc::sync_channel::<Out>(WRITE_QUEUE);
    tx.send(Out::Lines(hello))
        .map_err(|_| io::Error::other("katcp writer gone"))?;
    let sensors = device.sensors().clone();
    let listener = {
        let (tx, session) = (tx.clone(), session.clone());
        sensors.listen(move |s| {
            if session.active.load(Ordering::Relaxed) {
                // A full queue (a client not reading) drops readings, never blocks the engine.
                let _ = tx.try_send(Out::Reading(s.clone()));
            }
        })
    };
    let queued = Arc::new(Queued::default());
    let writer = {
        let (session, sensors, queued) = (session.clone(), sensors.clone(), queued.clone());
        let mut w = w.try_clone()?;
        std::thread::Builder::new()
            .name("katcp-write".into())
            .spawn(move || {
                write_loop(&mut w, peer, rx, &session, &sensors, &queued.bytes);
                queued.writer_done.store(true, Ordering::Relaxed);
            })?
    };
    clients.attach(id, tx.clone());
    let mut held = 0;
    let res = read_loop(
        &mut r,
        peer,
        &tx,
        device.as_ref(),
        shared,
        &session,
        &queued,
        &mut held,
    );
    shared.pending.fetch_sub(held, Ordering::Relaxed);
    sensors.unlisten(listener);
    // The client list still holds a sender: the writer ends on Close, not on the queue
    // closing (a writer stuck on a full queue ends at its write timeout).
    let _ = tx.send(Out::Close);
    drop(tx);
    let _ = writer.join();
    res
}

/// Queued writes per client (lines and readings) before readings are dropped and replies
/// wait.
const WRITE_QUEUE: usize = 4096;

/// The client's writer: writes what the reader queues and the sampled sensor readings,
/// until the reader is done or a write fails (the client is then shut down).
fn write_loop(
    w: &mut TcpStream,
    peer: SocketAddr,
    rx: std::sync::mpsc::Receiver<Out>,
    session: &Session,
    sensors: &super::sensors::SensorSet,
    queued: &AtomicUsize,
) {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        let msg = match session.due() {
            Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let now = Instant::now();
        let mut out = Vec::new();
        let mut taken = 0;
        match msg {
            Ok(Out::Lines(b)) => {
                taken = b.len();
                out = b;
            }
            Ok(Out::Reading(r)) => {
                let sent = session
                    .subs
                    .lock()
                    .ok()
                    .and_then(|mut subs| subs.get_mut(&r.name)?.update(&r, now));
                if let Some(x) = sent {
                    out.extend(status_inform(&x));
                }
            }
            Ok(Out::Close) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Ok(mut subs) = session.subs.lock() {
            for (name, s) in subs.iter_mut() {
                if s.due().is_some_and(|d| d <= now) {
                    let Some(cur) = sensors.get(name) else {
                        continue;
                    };
                    if let Some(x) = s.tick(&cur, now) {
                        out.extend(status_inform(&x));
                    }
                }
            }
        }
        if !out.is_empty() && write_or_drop(w, peer, &out).is_err() {
            let _ = w.shutdown(std::net::Shutdown::Both);
            return;
        }
        // Lines queued elsewhere (the greeting, informs to every client) were never
        // counted: saturate rather than wrap.
        let _ = queued.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
            Some(q.saturating_sub(taken))
        });
    }
}

fn status_inform(s: &super::sensors::Sensor) -> Vec<u8> {
    Message::with_args(Kind::Inform, "sensor-status", None, &reading_args(s)).encode()
}

/// Reads the client's requests and queues the replies, until it goes, breaks a limit or
/// the server stops. `held` is what this client's unfinished line counts in the shared
/// line memory (the caller gives it back).
#[allow(clippy::too_many_arguments)]
fn read_loop(
    r: &mut TcpStream,
    peer: SocketAddr,
    tx: &std::sync::mpsc::SyncSender<Out>,
    device: &dyn Device,
    shared: &Shared,
    session: &Session,
    queued: &Queued,
    held: &mut usize,
) -> io::Result<()> {
    let (clients, limits, stop) = (shared.clients, shared.limits, &shared.stop);
    let queue = |out: Vec<u8>| {
        queued.bytes.fetch_add(out.len(), Ordering::Relaxed);
        tx.send(Out::Lines(out))
            .map_err(|_| io::Error::other("katcp writer gone"))
    };
    let connected = Instant::now();
    let mut requested = false;
    let mut line_started: Option<Instant> = None;
    let mut reader = LineReader::new(limits.max_line);
    let mut buf = vec![0u8; 64 << 10];
    let mut lines = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if queued.bytes.load(Ordering::Relaxed) > limits.max_queued {
            // The client does not read its replies: read no more requests until it does;
            // the writer drops it at its write timeout.
            if queued.writer_done.load(Ordering::Relaxed) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                let idle = limits.idle_timeout;
                if !requested && connected.elapsed() >= idle {
                    let why = format!("no request within {} s of connecting", idle.as_secs_f64());
                    return disconnect(tx, peer, &why);
                }
                if line_started.is_some_and(|t| t.elapsed() >= idle) {
                    let why = format!("a line left unfinished for {} s", idle.as_secs_f64());
                    return disconnect(tx, peer, &why);
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        lines.clear();
        let fed = reader.feed(&buf[..n], &mut lines);
        // The line memory this client holds (its unfinished line and the lines it is about
        // to be served) is its share of the budget of all clients.
        let taking = reader.capacity() + lines.iter().map(Vec::capacity).sum::<usize>();
        if !account(shared.pending, held, taking, limits.max_pending_total) {
            let why = format!(
                "the server's memory for lines ({} MiB over all clients) is full: disconnecting",
                limits.max_pending_total >> 20
            );
            return disconnect(tx, peer, &why);
        }
        for line in &lines {
            match serve_line(line, device, clients, session) {
                Line::Blank => {}
                Line::Reply(out, halt) => {
                    requested = true;
                    queue(out)?;
                    if halt {
                        clients.halt();
                        crate::control::shutdown::request();
                        return Ok(());
                    }
                }
            }
        }
        lines.clear();
        account(shared.pending, held, reader.capacity(), usize::MAX);
        if let Err(e) = fed {
            return disconnect(tx, peer, &format!("{e}: disconnecting"));
        }
        line_started = match (reader.pending(), line_started) {
            (0, _) => None,
            (_, None) => Some(Instant::now()),
            (_, t) => t,
        };
    }
    Ok(())
}

/// Moves this client's share of the shared line memory from `*held` to `now`; false (and
/// nothing moved) when growing to `now` would take the total past `max`. Growth is added
/// only when it fits, so a client refused never counts against the others.
fn account(total: &AtomicUsize, held: &mut usize, now: usize, max: usize) -> bool {
    let before = *held;
    if now <= before {
        total.fetch_sub(before - now, Ordering::Relaxed);
        *held = now;
        return true;
    }
    let grown = now - before;
    let fits = total
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
            (t + grown <= max).then_some(t + grown)
        })
        .is_ok();
    if fits {
        *held = now;
    }
    fits
}

/// Writes `out`; a client that does not take it within the write timeout is dropped.
fn write_or_drop(w: &mut TcpStream, peer: SocketAddr, out: &[u8]) -> io::Result<()> {
    match w.write_all(out) {
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            warn!(%peer, "katcp: client does not read its replies; disconnected");
            let _ = w.shutdown(std::net::Shutdown::Both);
            Err(e)
        }
        other => other,
    }
}

enum Line {
    /// Nothing to answer (a blank line, or a reply or inform from the client).
    Blank,
    /// Encoded replies, and whether it was `?halt`.
    Reply(Vec<u8>, bool),
}

/// One line from a client: a request's informs and reply, a `#log` for a malformed line.
fn serve_line(line: &[u8], device: &dyn Device, clients: &Clients, session: &Session) -> Line {
    if line.iter().all(|c| c.is_ascii_whitespace()) {
        return Line::Blank;
    }
    let msg = match Message::parse(line) {
        Ok(m) => m,
        Err(e) => {
            let m = log_inform("error", &format!("malformed message: {e}"));
            return Line::Reply(m.encode(), false);
        }
    };
    if msg.kind != Kind::Request {
        return Line::Blank;
    }
    let mut out = Vec::new();
    let halt = handle(&msg, device, clients, session, &mut out);
    Line::Reply(out.iter().flat_map(Message::encode).collect(), halt)
}
