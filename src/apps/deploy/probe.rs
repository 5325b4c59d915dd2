//! `gpucbf katcp-request HOST:PORT REQUEST [ARGS...]`: one katcp request, its informs and
//! reply printed one per line, exit status 0 only on an `ok` reply (and, with
//! `--expect-status`, only when every `#sensor-value` inform has that status). The
//! Kubernetes probes of `gpucbf deploy` run it: `watchdog` for liveness, `sensor-value
//! device-status --expect-status nominal` for readiness.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use clap::Args;

use crate::apps::qualify::katcp::{Client, Reply};

/// `gpucbf katcp-request` options.
#[derive(Debug, Clone, Args)]
pub struct KatcpRequestArgs {
    /// The engine's katcp server, HOST:PORT.
    pub address: String,
    /// The request's name, without the `?` (`watchdog`, `sensor-value`).
    pub request: String,
    /// The request's arguments.
    pub args: Vec<String>,
    /// Seconds to wait for the connection and the reply together.
    #[arg(long, default_value_t = 5.0)]
    pub timeout: f64,
    /// Require this status (`nominal`) of every `#sensor-value` inform, and at least one.
    #[arg(long)]
    pub expect_status: Option<String>,
}

/// Sends the request; the reply, or an error saying what failed.
pub fn run(args: &KatcpRequestArgs) -> anyhow::Result<Reply> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        anyhow::bail!("--timeout {} must be positive", args.timeout);
    }
    let timeout = Duration::from_secs_f64(args.timeout.min(3600.0));
    let addr: SocketAddr = args
        .address
        .to_socket_addrs()
        .map_err(|e| anyhow::anyhow!("katcp address {}: {e}", args.address))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("katcp address {}: no address", args.address))?;
    let t0 = std::time::Instant::now();
    let mut c = Client::connect(addr, timeout)
        .map_err(|e| anyhow::anyhow!("katcp {addr}: connecting: {e}"))?;
    let left = timeout
        .saturating_sub(t0.elapsed())
        .max(Duration::from_millis(1));
    let reply = c.request(&args.request, &args.args, left)?;
    if let Some(want) = &args.expect_status {
        check_status(&reply, want)?;
    }
    Ok(reply)
}

/// Every `#sensor-value` inform (`timestamp 1 name status value`) has status `want`.
pub fn check_status(reply: &Reply, want: &str) -> anyhow::Result<()> {
    if reply.informs.is_empty() {
        anyhow::bail!("no #sensor-value informs: nothing has status {want}");
    }
    for i in &reply.informs {
        let (name, status) = (i.get(2), i.get(3));
        if status.map(String::as_str) != Some(want) {
            anyhow::bail!(
                "sensor {} has status {} (value {}), not {want}",
                name.map_or("?", String::as_str),
                status.map_or("?", String::as_str),
                i.get(4).map_or("?", String::as_str)
            );
        }
    }
    Ok(())
}

/// The reply as text: one line per inform, then `ok ARGS`.
pub fn format(reply: &Reply) -> String {
    let mut s = String::new();
    for i in &reply.informs {
        s.push_str(&i.join(" "));
        s.push('\n');
    }
    s.push_str("ok");
    for a in &reply.args {
        s.push(' ');
        s.push_str(a);
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(informs: &[&[&str]]) -> Reply {
        Reply {
            args: vec!["1".into()],
            informs: informs
                .iter()
                .map(|i| i.iter().map(|s| s.to_string()).collect())
                .collect(),
        }
    }

    #[test]
    fn status_must_match_on_every_inform() {
        let ok = reply(&[&["1.0", "1", "device-status", "nominal", "ok"]]);
        check_status(&ok, "nominal").unwrap();
        let e = check_status(&ok, "warn").unwrap_err().to_string();
        assert!(e.contains("device-status") && e.contains("nominal"), "{e}");
        let mixed = reply(&[
            &["1.0", "1", "a", "nominal", "ok"],
            &["1.0", "1", "b", "error", "degraded"],
        ]);
        let e = check_status(&mixed, "nominal").unwrap_err().to_string();
        assert!(e.contains("sensor b has status error"), "{e}");
        assert!(check_status(&reply(&[]), "nominal").is_err());
        assert_eq!(format(&ok), "1.0 1 device-status nominal ok\nok 1\n");
    }

    #[test]
    fn a_closed_port_is_an_error_not_a_hang() {
        // A port nothing listens on: bound then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let args = KatcpRequestArgs {
            address: format!("127.0.0.1:{port}"),
            request: "watchdog".into(),
            args: vec![],
            timeout: 0.5,
            expect_status: None,
        };
        assert!(run(&args).is_err());
        let bad = KatcpRequestArgs {
            address: "nohost-no-port".into(),
            ..args.clone()
        };
        assert!(run(&bad)
            .unwrap_err()
            .to_string()
            .contains("nohost-no-port"));
        let bad = KatcpRequestArgs {
            timeout: -1.0,
            ..args
        };
        assert!(run(&bad).is_err());
    }
}
