//! The hosts file of `gpucbf deploy`: the machines an array is placed on.
//!
//! JSON, one object with a `hosts` list (order matters: engines are placed in it):
//!
//! ```json
//! {"hosts": [
//!   {"name": "cbf-01", "interfaces": ["ens1f0np0"], "gpus": 2, "cores": 32},
//!   {"name": "cbf-02", "interfaces": ["ens1f0np0", "ens1f1np1"], "gpus": 2, "cores": 32}
//! ]}
//! ```
//!
//! * `name`: the Kubernetes node name (`kubernetes.io/hostname`), unique.
//! * `interfaces`: the data network interfaces by name (the engines' `--recv-interface`,
//!   `--send-interface`, dsim `--interface`); the first carries the multicast groups.
//! * `gpus`: GPUs the host offers (`nvidia.com/gpu`); 0 for a CPU-only host.
//! * `cores`: cores the host offers to engines (whole cores, the static CPU manager's pool).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// One host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Node name.
    pub name: String,
    /// Data interfaces by name, the first carrying the multicast groups.
    pub interfaces: Vec<String>,
    /// GPUs offered.
    #[serde(default)]
    pub gpus: usize,
    /// Cores offered to engines.
    pub cores: usize,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hosts {
    /// The hosts, in placement order.
    pub hosts: Vec<Host>,
}

/// A hosts file that cannot be used, with the reason.
#[derive(Debug, thiserror::Error)]
#[error("hosts file {path}: {reason}")]
pub struct HostsError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl Hosts {
    /// Parses and checks `text` (read from `path`, named in errors).
    pub fn parse(text: &str, path: &str) -> Result<Hosts, HostsError> {
        let err = |reason: String| HostsError {
            path: path.to_string(),
            reason,
        };
        let hosts: Hosts = serde_json::from_str(text).map_err(|e| err(e.to_string()))?;
        if hosts.hosts.is_empty() {
            return Err(err("no hosts".into()));
        }
        for (i, h) in hosts.hosts.iter().enumerate() {
            if !valid_name(&h.name) {
                return Err(err(format!(
                    "host {i}: name {:?} is not a DNS label (lower-case letters, digits, '-', '.')",
                    h.name
                )));
            }
            if hosts.hosts[..i].iter().any(|o| o.name == h.name) {
                return Err(err(format!("host {:?} listed twice", h.name)));
            }
            if h.interfaces.is_empty() || h.interfaces.iter().any(|n| !valid_interface(n)) {
                return Err(err(format!(
                    "host {:?}: interfaces must list one or more interface names, got {:?}",
                    h.name, h.interfaces
                )));
            }
            if h.cores == 0 {
                return Err(err(format!("host {:?}: cores must be at least 1", h.name)));
            }
        }
        Ok(hosts)
    }

    /// Reads and checks the file at `path`.
    pub fn read(path: &Path) -> Result<Hosts, HostsError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| HostsError {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        Hosts::parse(&text, &shown)
    }
}

/// A Kubernetes node name: DNS subdomain (lower-case alphanumerics, '-', '.'), ≤ 253.
fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && n.as_bytes()[0].is_ascii_alphanumeric()
        && n.as_bytes()[n.len() - 1].is_ascii_alphanumeric()
}

/// A Linux interface name: 1..=15 bytes, no '/', whitespace or ':'.
fn valid_interface(n: &str) -> bool {
    (1..=15).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_file_parses_in_order() {
        let h = Hosts::parse(
            r#"{"hosts": [{"name": "cbf-01", "interfaces": ["ens1f0np0"], "gpus": 2, "cores": 32},
                          {"name": "cbf-02", "interfaces": ["eth0", "eth1"], "cores": 8}]}"#,
            "h.json",
        )
        .unwrap();
        assert_eq!(h.hosts.len(), 2);
        assert_eq!(h.hosts[0].gpus, 2);
        assert_eq!(h.hosts[1].gpus, 0);
        assert_eq!(h.hosts[1].interfaces, ["eth0", "eth1"]);
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let cases = [
            ("", "EOF"),
            (r#"{"hosts": []}"#, "no hosts"),
            (
                r#"{"hosts": [{"name": "A", "interfaces": ["eth0"], "cores": 1}]}"#,
                "DNS",
            ),
            (
                r#"{"hosts": [{"name": "a", "interfaces": ["eth0"], "cores": 1},
                              {"name": "a", "interfaces": ["eth0"], "cores": 1}]}"#,
                "twice",
            ),
            (
                r#"{"hosts": [{"name": "a", "interfaces": [], "cores": 1}]}"#,
                "interfaces",
            ),
            (
                r#"{"hosts": [{"name": "a", "interfaces": ["a/b"], "cores": 1}]}"#,
                "interfaces",
            ),
            (
                r#"{"hosts": [{"name": "a", "interfaces": ["eth0"], "cores": 0}]}"#,
                "cores",
            ),
            (
                r#"{"hosts": [{"name": "a", "interfaces": ["eth0"], "cores": 1, "x": 1}]}"#,
                "unknown field",
            ),
        ];
        for (text, want) in cases {
            let e = Hosts::parse(text, "h.json").unwrap_err().to_string();
            assert!(e.contains("h.json") && e.contains(want), "{text}: {e}");
        }
    }
}
