//! The standard katcp requests (help, halt, watchdog, version-list, sensor-list,
//! sensor-value, client-list, log-level) and the dispatch of the engine's own ones. Every
//! standard request checks its argument count (`fail` on too many, as aiokatcp does);
//! unknown requests get `invalid`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::device::Device;
use super::katcp::{Kind, Message};
use super::sampling::{Sampler, Session, Strategy};
use super::sensors::{Sensor, SensorType};

/// What a client's writer thread sends: encoded lines, or a sensor reading to sample.
#[derive(Debug)]
pub(crate) enum Out {
    /// Lines to write as they are.
    Lines(Vec<u8>),
    /// A reading set on the device's sensors.
    Reading(Sensor),
    /// The reader is done: write what is queued before this, then end (other senders,
    /// such as the client list's, may still exist).
    Close,
}

/// One connected client: id, address, and its writer's queue once it has one.
type ClientEntry = (u64, SocketAddr, Option<std::sync::mpsc::SyncSender<Out>>);

/// The clients connected now: (id, address), for `?client-list`, the client cap and
/// `#client-connected`.
#[derive(Debug, Default)]
pub(crate) struct Clients {
    list: Mutex<Vec<ClientEntry>>,
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
        l.push((id, peer, None));
        Some(id)
    }

    /// Gives client `id` its writer's queue, and tells every other client that it came
    /// (`#client-connected ADDR`, as aiokatcp does).
    pub(crate) fn attach(&self, id: u64, tx: std::sync::mpsc::SyncSender<Out>) {
        let Ok(mut l) = self.list.lock() else { return };
        let Some(peer) = l.iter().find(|(i, _, _)| *i == id).map(|(_, p, _)| *p) else {
            return;
        };
        let line = Message::with_args(Kind::Inform, "client-connected", None, &[peer.to_string()])
            .encode();
        for (i, _, t) in l.iter() {
            if let (true, Some(t)) = (*i != id, t) {
                let _ = t.try_send(Out::Lines(line.clone()));
            }
        }
        if let Some(e) = l.iter_mut().find(|(i, _, _)| *i == id) {
            e.2 = Some(tx);
        }
    }

    pub(crate) fn remove(&self, id: u64) {
        if let Ok(mut l) = self.list.lock() {
            l.retain(|(i, _, _)| *i != id);
        }
    }

    /// `?halt` was accepted: every client (the one that asked, after its reply) is told
    /// `#disconnect "server shutting down"`, as aiokatcp's server does before it closes.
    pub(crate) fn halt(&self) {
        let line = Message::with_args(
            Kind::Inform,
            "disconnect",
            None,
            &["server shutting down".to_string()],
        )
        .encode();
        if let Ok(l) = self.list.lock() {
            for t in l.iter().filter_map(|(_, _, t)| t.as_ref()) {
                let _ = t.try_send(Out::Lines(line.clone()));
            }
        }
    }

    /// The connected clients' addresses, oldest first.
    pub(crate) fn addresses(&self) -> Vec<SocketAddr> {
        self.list
            .lock()
            .map(|l| l.iter().map(|(_, a, _)| *a).collect())
            .unwrap_or_default()
    }
}

fn reply(req: &Message, args: Vec<String>) -> Message {
    Message::with_args(Kind::Reply, &req.name, req.mid, &args)
}

fn inform(req: &Message, args: Vec<String>) -> Message {
    Message::with_args(Kind::Inform, &req.name, req.mid, &args)
}

/// The three version informs (`#version-connect` on connect, `#version-list` on request):
/// protocol 5.1 with aiokatcp's flags (M multi-client, I message ids, B bulk sensor
/// sampling), the library and the device, each with its version and build.
pub(crate) fn version_informs(device: &dyn Device, name: &str, mid: Option<u32>) -> Vec<Message> {
    let version = env!("CARGO_PKG_VERSION");
    let minor = version.rsplit_once('.').map_or(version, |(a, _)| a);
    let build = format!("gpucbf-{version}");
    [
        vec!["katcp-protocol".to_string(), "5.1-MIB".into()],
        vec![
            "katcp-library".into(),
            format!("gpucbf-{minor}"),
            build.clone(),
        ],
        vec!["katcp-device".into(), device.api_version(), build],
    ]
    .iter()
    .map(|a| Message::with_args(Kind::Inform, name, mid, a))
    .collect()
}

/// The sensors `?sensor-list` / `?sensor-value` name: all (no argument), those whose name a
/// `/regex/` matches anywhere (none is no error), or the one named.
fn select<'a>(all: &'a [Sensor], arg: Option<&String>) -> Result<Vec<&'a Sensor>, String> {
    match arg {
        None => Ok(all.iter().collect()),
        Some(a) if a.len() >= 2 && a.starts_with('/') && a.ends_with('/') => {
            let re = regex::Regex::new(&a[1..a.len() - 1])
                .map_err(|e| format!("invalid regular expression {a}: {e}"))?;
            Ok(all.iter().filter(|s| re.is_match(&s.name)).collect())
        }
        Some(a) => match all.iter().find(|s| s.name == *a) {
            Some(s) => Ok(vec![s]),
            None => Err(format!("Unknown sensor {a:?}")),
        },
    }
}

/// A `#sensor-status` (or `#sensor-value`) inform's arguments for a reading.
pub(crate) fn reading_args(s: &Sensor) -> Vec<String> {
    vec![
        format!("{:.6}", s.timestamp),
        "1".into(),
        s.name.clone(),
        s.status.name().into(),
        s.value.clone(),
    ]
}

/// `?sensor-sampling NAME[,NAME...] [STRATEGY [PARAMS...]]`: with a strategy, sets it for
/// every named sensor (all checked first: an unknown or repeated name or a bad parameter
/// fails and changes nothing) and sends each one's first `#sensor-status`; without one,
/// reports the strategy of the one named sensor.
fn sensor_sampling(
    args: &[String],
    sensors: &[Sensor],
    session: &Session,
    out: &mut Vec<Message>,
) -> Result<Vec<String>, String> {
    let Some(names_arg) = args.first() else {
        return Err("?sensor-sampling needs a sensor name".into());
    };
    let names: Vec<&str> = names_arg.split(',').collect();
    let mut chosen = Vec::new();
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(format!("Sensor {n:?} is listed more than once"));
        }
        let s = sensors
            .iter()
            .find(|s| s.name == *n)
            .ok_or_else(|| format!("Unknown sensor {n:?}"))?;
        chosen.push(s);
    }
    let mut subs = session
        .subs
        .lock()
        .map_err(|_| "sampling state unavailable".to_string())?;
    if args.len() == 1 {
        if chosen.len() != 1 {
            return Err("Only one sensor may be queried at a time".into());
        }
        let st = subs
            .get(chosen[0].name.as_str())
            .map_or(Strategy::None, |s| s.asked.clone());
        let mut r = vec![names_arg.clone()];
        r.extend(st.describe());
        return Ok(r);
    }
    let types: Vec<&SensorType> = chosen.iter().map(|s| &s.stype).collect();
    let strategy = Strategy::parse(&args[1..], &types)?;
    let now = std::time::Instant::now();
    for s in &chosen {
        if strategy == Strategy::None {
            subs.remove(&s.name);
            continue;
        }
        let (sampler, first) = Sampler::new(strategy.clone(), s, now);
        subs.insert(s.name.clone(), sampler);
        if let Some(r) = first {
            out.push(Message::with_args(
                Kind::Inform,
                "sensor-status",
                None,
                &reading_args(&r),
            ));
        }
    }
    session
        .active
        .store(!subs.is_empty(), std::sync::atomic::Ordering::Relaxed);
    let mut r = vec![names_arg.clone()];
    r.extend(strategy.describe());
    Ok(r)
}

/// The standard requests: (name, most arguments, help text).
const STANDARD: [(&str, usize, &str); 9] = [
    (
        "sensor-sampling",
        usize::MAX,
        "Set or query sensor sampling: ?sensor-sampling NAME[,NAME...] [STRATEGY [PARAMS...]].",
    ),
    ("halt", 0, "Stop the engine cleanly."),
    ("help", 1, "List requests: ?help [name]."),
    ("watchdog", 0, "Check that the server is alive."),
    ("version-list", 0, "List versions."),
    (
        "sensor-list",
        1,
        "List sensors: ?sensor-list [name or /regex/].",
    ),
    (
        "sensor-value",
        1,
        "Report sensor values: ?sensor-value [name or /regex/].",
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
    session: &Session,
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
        "sensor-sampling" => {
            let all = sensors.all();
            let mut informs = Vec::new();
            match sensor_sampling(&args, &all, session, &mut informs) {
                Ok(r) => {
                    out.extend(informs);
                    ok(r)
                }
                Err(e) => fail(&e),
            }
        }
        "sensor-list" | "sensor-value" => {
            let all = sensors.all();
            let sel = select(&all, args.first());
            if let Err(e) = &sel {
                fail(e)
            } else {
                let sel = sel.unwrap_or_default();
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
                        out.push(inform(req, reading_args(s)));
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
