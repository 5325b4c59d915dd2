//! A katcp v5 device server: one thread per client, the standard requests (help, halt,
//! watchdog, version-list, sensor-list, sensor-value, client-list, log-level) and the
//! engine's own requests through [`Device`]. Bad requests get `fail` or `invalid` replies.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::katcp::{Kind, Message};
use super::sensors::SensorSet;

/// Why an engine's request failed: any error; its text is the `fail` reply's message.
pub type RequestError = Box<dyn std::error::Error + Send + Sync>;

/// An engine's katcp interface.
pub trait Device: Send + Sync + 'static {
    /// API version, e.g. `katgpucbf-fgpu-1.0` style.
    fn api_version(&self) -> String;
    /// The engine's own requests: (name, help text).
    fn requests(&self) -> Vec<(&'static str, &'static str)>;
    /// Handles one of [`Device::requests`]: `Ok(reply args after "ok")`, or the error whose
    /// text the `fail` reply carries.
    fn request(&self, name: &str, args: &[String]) -> Result<Vec<String>, RequestError>;
    /// The engine's sensors, reported by `?sensor-list` and `?sensor-value`.
    fn sensors(&self) -> &SensorSet;
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
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        std::thread::Builder::new()
            .name("katcp".into())
            .spawn(move || {
                while !stop2.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((s, peer)) => {
                            let d = device.clone();
                            let st = stop2.clone();
                            let _ = std::thread::Builder::new()
                                .name("katcp-client".into())
                                .spawn(move || {
                                    if let Err(e) = serve_client(s, d, st) {
                                        debug!(%peer, error = %e, "katcp client ended");
                                    }
                                });
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(20))
                        }
                        Err(e) => warn!(error = %e, "katcp accept failed"),
                    }
                }
            })?;
        info!(%addr, "katcp server listening");
        Ok(Server { addr, stop })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn reply(req: &Message, args: Vec<String>) -> Message {
    Message::with_args(Kind::Reply, &req.name, req.mid, &args)
}

fn inform(req: &Message, args: Vec<String>) -> Message {
    Message::with_args(Kind::Inform, &req.name, req.mid, &args)
}

fn serve_client(
    stream: TcpStream,
    device: Arc<dyn Device>,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut w = stream.try_clone()?;
    let mut r = BufReader::new(stream);
    for (k, v) in [
        ("katcp-protocol", "5.1-M".to_string()),
        (
            "katcp-library",
            format!("gpucbf-{}", env!("CARGO_PKG_VERSION")),
        ),
        ("katcp-device", device.api_version()),
    ] {
        w.write_all(&Message::with_args(Kind::Inform, "version-connect", None, &[k, &v]).encode())?;
    }
    let mut line = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match r.read_until(b'\n', &mut line) {
            Ok(0) => return Ok(()),
            Ok(_) if line.ends_with(b"\n") => {}
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        }
        if line.len() > 1 << 20 {
            line.clear();
            continue;
        }
        let text = std::mem::take(&mut line);
        let text = text.strip_suffix(b"\n").unwrap_or(&text);
        if text.iter().all(|c| c.is_ascii_whitespace()) {
            continue;
        }
        let msg = match Message::parse(text) {
            Ok(m) => m,
            Err(e) => {
                let m = Message::with_args(
                    Kind::Inform,
                    "log",
                    None,
                    &[
                        "error",
                        &format!("{:.6}", super::sensors::now()),
                        "katcp",
                        &format!("malformed message: {e}"),
                    ],
                );
                w.write_all(&m.encode())?;
                continue;
            }
        };
        if msg.kind != Kind::Request {
            continue;
        }
        let mut out = Vec::new();
        let halt = handle(&msg, device.as_ref(), &mut out);
        for m in out {
            w.write_all(&m.encode())?;
        }
        w.flush()?;
        if halt {
            crate::control::shutdown::request();
            return Ok(());
        }
    }
    Ok(())
}

/// Handles one request, appending informs and the reply to `out`. Returns true for ?halt.
pub fn handle(req: &Message, device: &dyn Device, out: &mut Vec<Message>) -> bool {
    let args: Vec<String> = req
        .args
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let ok = |mut v: Vec<String>| {
        v.insert(0, "ok".into());
        v
    };
    let fail = |m: &str| vec!["fail".to_string(), m.to_string()];
    let sensors = device.sensors();
    let reply_args = match req.name.as_str() {
        "halt" => {
            out.push(reply(req, vec!["ok".into()]));
            return true;
        }
        "watchdog" => ok(vec![]),
        "help" => {
            let mut all: Vec<(String, String)> = [
                ("halt", "Stop the engine cleanly."),
                ("help", "List requests."),
                ("watchdog", "Check that the server is alive."),
                ("version-list", "List versions."),
                ("sensor-list", "List sensors."),
                ("sensor-value", "Report sensor values."),
                ("client-list", "List connected clients."),
                ("log-level", "Query the log level."),
            ]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
            all.extend(
                device
                    .requests()
                    .into_iter()
                    .map(|(a, b)| (a.to_string(), b.to_string())),
            );
            let wanted: Vec<_> = all
                .iter()
                .filter(|(n, _)| args.is_empty() || args[0] == *n)
                .collect();
            if wanted.is_empty() {
                fail(&format!("Unknown request: {}", args[0]))
            } else {
                for (n, h) in &wanted {
                    out.push(inform(req, vec![n.clone(), h.clone()]));
                }
                ok(vec![wanted.len().to_string()])
            }
        }
        "version-list" => {
            let v = [
                ("katcp-protocol", "5.1-M".to_string()),
                (
                    "katcp-library",
                    format!("gpucbf-{}", env!("CARGO_PKG_VERSION")),
                ),
                ("katcp-device", device.api_version()),
            ];
            for (k, x) in &v {
                out.push(inform(req, vec![k.to_string(), x.clone()]));
            }
            ok(vec![v.len().to_string()])
        }
        "client-list" => ok(vec!["0".into()]),
        "log-level" => ok(vec!["info".into()]),
        "sensor-list" | "sensor-value" => {
            let all = sensors.all();
            let sel: Vec<_> = all
                .iter()
                .filter(|s| args.is_empty() || s.name == args[0])
                .collect();
            if sel.is_empty() && !args.is_empty() {
                fail(&format!("Unknown sensor name: {}", args[0]))
            } else {
                for s in &sel {
                    if req.name == "sensor-list" {
                        let mut a = vec![
                            s.name.clone(),
                            s.description.clone(),
                            s.units.clone(),
                            s.stype.name().to_string(),
                        ];
                        if let super::sensors::SensorType::Discrete(v) = &s.stype {
                            a.extend(v.iter().cloned());
                        }
                        out.push(inform(req, a));
                    } else {
                        out.push(inform(
                            req,
                            vec![
                                format!("{:.6}", s.timestamp),
                                "1".into(),
                                s.name.clone(),
                                s.status.name().into(),
                                s.value.clone(),
                            ],
                        ));
                    }
                }
                ok(vec![sel.len().to_string()])
            }
        }
        name if device.requests().iter().any(|(n, _)| *n == name) => {
            match device.request(name, &args) {
                Ok(v) => ok(v),
                Err(e) => fail(&e.to_string()),
            }
        }
        name => vec!["invalid".into(), format!("Unknown request: {name}")],
    };
    out.push(reply(req, reply_args));
    false
}
