//! katcp `?log-level` queries and sets the level of the process's real log subscriber (its
//! own test binary: it installs the global subscriber). Before, `?log-level debug` replied
//! `ok` and changed nothing.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use gpucbf::control::{Device, RequestError, SensorSet, Server};
use gpucbf::telemetry::{init_logging, LogFormat};
use tracing::Level;

struct Bare(SensorSet);

impl Device for Bare {
    fn api_version(&self) -> String {
        "test-1.0".into()
    }
    fn requests(&self) -> Vec<(&'static str, &'static str)> {
        vec![]
    }
    fn request(&self, name: &str, _args: &[String]) -> Result<Vec<String>, RequestError> {
        Err(format!("no {name}").into())
    }
    fn sensors(&self) -> &SensorSet {
        &self.0
    }
}

#[test]
fn log_level_sets_the_real_level() {
    init_logging(LogFormat::Human);
    let server = Server::start(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(Bare(SensorSet::default())),
    )
    .unwrap();
    let mut w = TcpStream::connect(server.addr).unwrap();
    w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(w.try_clone().unwrap());
    let mut ask = |req: &str| -> String {
        w.write_all(format!("{req}\n").as_bytes()).unwrap();
        loop {
            let mut l = String::new();
            assert!(r.read_line(&mut l).unwrap() > 0, "closed");
            if l.starts_with("!log-level") {
                return l.trim_end().to_string();
            }
        }
    };
    // The start-up level (`info`, or RUST_LOG's) is reported as it is.
    let start = ask("?log-level");
    let want = format!("!log-level ok {}", gpucbf::telemetry::log_level());
    assert_eq!(start, want);
    assert_eq!(ask("?log-level info"), "!log-level ok info");
    assert!(tracing::enabled!(Level::INFO) && !tracing::enabled!(Level::DEBUG));
    assert_eq!(ask("?log-level debug"), "!log-level ok debug");
    assert!(tracing::enabled!(Level::DEBUG) && !tracing::enabled!(Level::TRACE));
    assert_eq!(ask("?log-level"), "!log-level ok debug");
    assert_eq!(ask("?log-level all"), "!log-level ok all");
    assert!(tracing::enabled!(Level::TRACE));
    assert_eq!(ask("?log-level fatal"), "!log-level ok fatal");
    assert!(tracing::enabled!(Level::ERROR) && !tracing::enabled!(Level::WARN));
    // A level katcp does not have fails and changes nothing.
    assert!(ask("?log-level loud").starts_with("!log-level fail"));
    assert_eq!(ask("?log-level"), "!log-level ok fatal");
    assert!(!tracing::enabled!(Level::WARN));
    assert_eq!(ask("?log-level off"), "!log-level ok off");
    assert!(!tracing::enabled!(Level::ERROR));
    assert_eq!(ask("?log-level warn"), "!log-level ok warn");
    assert!(tracing::enabled!(Level::WARN) && !tracing::enabled!(Level::INFO));
}
