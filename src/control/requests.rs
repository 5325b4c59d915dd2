//! The standard katcp requests (help, halt, watchdog, version-list, sensor-list,
//! sensor-value, client-list, log-level) and the dispatch of the engine's own ones. Every
//! standard request checks its argument count (`fail` on too many, as aiokatcp does);
//! unknown requests get `invalid`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::device::Device;
use super::katcp::{Kind, Message};

/// The clients connected now: (id, address), for `?client-list` and the client cap.
#[derive(Debug, Default)]
pub(crate) struct Clients {
    list: Mutex<Vec<(u64, SocketAddr)>>,
    next_id: AtomicU64,
}

impl Clients {
    /// Registers `peer` unless `max` clients are connected; its id, or `None`.
    pub(crate) fn admit(&self, peer: SocketAddr, max: usize) -> Option<u64> {
        let mut l = self.list.lock().ok()?;
        if l.len() >= max {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        l.push((id, peer));
        Some(id)
    }

    pub(crate) fn remove(&self, id: u64) {
        if let Ok(mut l) = self.list.lock() {
            l.retain(|(i, _)| *i != id);
        }
    }

    /// The connected clients' addresses, oldest first.
    pub(crate) fn addresses(&self) -> Vec<SocketAddr> {
        self.list
            .lock()
            .map(|l| l.iter().map(|(_, a)| *a).collect())
            .unwrap_or_default()
    }
}

fn reply(req: &Message, args: Vec<String>) -> Message {
    Message::with_args(Kind::Reply, &req.name, req.mid, &args)
}

fn inform(req: &Message, args: Vec<String>) -> Message {
    Message::with_args(Kind::Inform, &req.name, req.mid, &args)
}

/// The three version informs (`#version-connect` on connect, `#version-list` on request).
pub(crate) fn version_informs(device: &dyn Device, name: &str, mid: Option<u32>) -> Vec<Message> {
    [
        ("katcp-protocol", "5.1-M".to_string()),
        (
            "katcp-library",
            format!("gpucbf-{}", env!("CARGO_PKG_VERSION")),
        ),
        ("katcp-device", device.api_version()),
    ]
    .iter()
    .map(|(k, v)| Message::with_args(Kind::Inform, name, mid, &[*k, v.as_str()]))
    .collect()
}

/// The standard requests: (name, most arguments, help text).
const STANDARD: [(&str, usize, &str); 8] = [
    ("halt", 0, "Stop the engine cleanly."),
    ("help", 1, "List requests: ?help [name]."),
    ("watchdog", 0, "Check that the server is alive."),
    ("version-list", 0, "List versions."),
    ("sensor-list", 1, "List sensors: ?sensor-list [name]."),
    (
        "sensor-value",
        1,
        "Report sensor values: ?sensor-value [name].",
    ),
    ("client-list", 0, "List connected clients."),
    (
        "log-level",
        1,
        "Query or set the log level: ?log-level [all|trace|debug|info|warn|error|fatal|off].",
    ),
];

/// Handles one request, appending informs and the reply to `out`. Returns true for a
/// `?halt` that was accepted.
pub(crate) fn handle(
    req: &Message,
    device: &dyn Device,
    clients: &Clients,
    out: &mut Vec<Message>,
) -> bool {
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
    if let Some((name, most, _)) = STANDARD.iter().find(|(n, _, _)| *n == req.name) {
        if args.len() > *most {
            let why = match most {
                0 => format!("?{name} takes no arguments ({} given)", args.len()),
                m => format!("?{name} takes at most {m} argument ({} given)", args.len()),
            };
            out.push(reply(req, fail(&why)));
            return false;
        }
    }
    let sensors = device.sensors();
    let reply_args = match req.name.as_str() {
        "halt" => {
            out.push(reply(req, vec!["ok".into()]));
            return true;
        }
        "watchdog" => ok(vec![]),
        "help" => {
            let mut all: Vec<(String, String)> = STANDARD
                .iter()
                .map(|(a, _, b)| (a.to_string(), b.to_string()))
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
            let v = version_informs(device, &req.name, req.mid);
            let n = v.len();
            out.extend(v);
            ok(vec![n.to_string()])
        }
        "client-list" => {
            let all = clients.addresses();
            for a in &all {
                out.push(inform(req, vec![a.to_string()]));
            }
            ok(vec![all.len().to_string()])
        }
        "log-level" => match args.first() {
            None => ok(vec![crate::telemetry::log_level().to_string()]),
            Some(level) => match crate::telemetry::set_log_level(level) {
                Ok(()) => ok(vec![crate::telemetry::log_level().to_string()]),
                Err(e) => fail(&e.to_string()),
            },
        },
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
