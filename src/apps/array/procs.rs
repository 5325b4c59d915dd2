//! The array's child processes: the same `gpucbf` binary as dsim, fgpu and xbgpu, each
//! logging to its own file, stopped with SIGTERM and read back as a JSON summary.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// Why a child engine did not come up.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// Its log says it failed (an `Error:` line).
    #[error("{} failed to start: see the log", .0.display())]
    Failed(PathBuf),
    /// It did not log its start-up line in time.
    #[error("{} did not report `{marker}` within {timeout:?}: see the log", log.display())]
    NotReady {
        /// Its log file.
        log: PathBuf,
        /// The line it did not log.
        marker: String,
        /// How long the wait was.
        timeout: Duration,
    },
}

/// Starts `exe args…` with its stderr to `log` and its stdout (the summary) piped.
pub(crate) fn child(exe: &Path, args: &[String], log: &Path) -> std::io::Result<Child> {
    let err = std::fs::File::create(log)?;
    let mut cmd = Command::new(exe);
    // Child logs in the format the array was asked for.
    if crate::telemetry::log_format() == crate::telemetry::LogFormat::Json {
        cmd.args(["--log-format", "json"]);
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
}

/// Asks a child to stop (SIGTERM: it finishes its output and prints its summary).
pub(crate) fn stop(c: &mut Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(c.id() as i32, libc::SIGTERM);
    }
}

/// Waits for a child to exit (killing it after `timeout`) and returns its exit status and
/// the JSON summary it printed.
pub(crate) fn wait_json(c: Child, name: &str, timeout: Duration) -> serde_json::Value {
    let t0 = Instant::now();
    let mut c = c;
    loop {
        match c.try_wait() {
            Ok(Some(status)) => {
                let mut out = String::new();
                if let Some(mut o) = c.stdout.take() {
                    let _ = std::io::Read::read_to_string(&mut o, &mut out);
                }
                let v: serde_json::Value =
                    serde_json::from_str(&out).unwrap_or(json!({"stdout": out}));
                return json!({"name": name, "exit_status": status.code(), "summary": v});
            }
            Ok(None) if t0.elapsed() < timeout => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = c.kill();
                let _ = c.wait();
                return json!({"name": name, "exit_status": null, "error": "killed after timeout"});
            }
        }
    }
}

/// Waits until each log file contains `marker` (an engine's start-up line), at most `timeout`;
/// an engine that exits with an error (`Error:` in its log) ends the wait at once.
pub(crate) fn wait_ready(
    logs: &[PathBuf],
    marker: &str,
    timeout: Duration,
) -> Result<(), ChildError> {
    let t0 = Instant::now();
    for log in logs {
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if text.contains(marker) {
                break;
            }
            if text.contains("Error:") {
                return Err(ChildError::Failed(log.clone()));
            }
            if t0.elapsed() > timeout || crate::control::shutdown::requested() {
                return Err(ChildError::NotReady {
                    log: log.clone(),
                    marker: marker.to_string(),
                    timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}
