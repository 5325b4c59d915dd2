//! The array's child processes: the same `gpucbf` binary as dsim, fgpu and xbgpu, each
//! logging to its own file, stopped with SIGTERM and read back as a JSON summary. Every
//! child gets a parent-death signal, so killing the array (even with SIGKILL) takes its
//! engines with it; a child that exits on its own is reported by name, pid and status.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// Why a child engine did not come up, or did not last.
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
    /// It exited when it should have been running (or failed when stopped).
    #[error("{name} (pid {pid}) exited {when} with {status}: see {}", log.display())]
    Exited {
        /// The engine (`xbgpu`, `fgpu0`, `dsim`).
        name: String,
        /// Its process id.
        pid: u32,
        /// When (`while starting`, `during the run`, `when stopped`).
        when: &'static str,
        /// How (`exit status 1`, `signal 9 (SIGKILL)`).
        status: String,
        /// Its log file.
        log: PathBuf,
    },
}

/// A running child engine: its name, process and log file.
pub(crate) struct Proc {
    /// The engine's name in messages and the summary (`xbgpu`, `fgpu0`, `dsim`).
    pub(crate) name: String,
    /// The process.
    pub(crate) child: Child,
    /// Where its stderr goes.
    pub(crate) log: PathBuf,
}

/// `exit status 1`, `signal 9 (SIGKILL)`.
pub(crate) fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    let Some(sig) = status.signal() else {
        return status.to_string();
    };
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    format!("signal {sig} ({name})")
}

impl Proc {
    /// The error for this child having exited with `status` (`when`: `during the run`).
    pub(crate) fn exited(&self, when: &'static str, status: ExitStatus) -> ChildError {
        ChildError::Exited {
            name: self.name.clone(),
            pid: self.child.id(),
            when,
            status: describe(status),
            log: self.log.clone(),
        }
    }

    /// `Some(status)` once the child has exited.
    pub(crate) fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }
}

/// Starts `exe args…` as engine `name` with its stderr to `log` and its stdout (the
/// summary) piped. The child is sent SIGKILL when the thread that started it (the array's
/// main thread) ends, so no engine outlives the array.
pub(crate) fn child(name: &str, exe: &Path, args: &[String], log: &Path) -> std::io::Result<Proc> {
    child_env(name, exe, args, log, &[])
}

/// [`child`] with extra environment variables.
pub(crate) fn child_env(
    name: &str,
    exe: &Path,
    args: &[String],
    log: &Path,
    env: &[(String, String)],
) -> std::io::Result<Proc> {
    let err = std::fs::File::create(log)?;
    let mut cmd = Command::new(exe);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    // Child logs in the format the array was asked for.
    if crate::telemetry::log_format() == crate::telemetry::LogFormat::Json {
        cmd.args(["--log-format", "json"]);
    }
    // SAFETY: getpid is async-signal-safe; so are prctl and getppid, the only calls made
    // between fork and exec.
    let parent = unsafe { libc::getpid() };
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The array died between fork and prctl: the signal will never come.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the array exited while starting it"));
            }
            Ok(())
        });
    }
    let child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .map_err(|e| std::io::Error::new(e.kind(), format!("starting {name}: {e}")))?;
    Ok(Proc {
        name: name.to_string(),
        child,
        log: log.to_path_buf(),
    })
}

/// Asks a child to stop (SIGTERM: it finishes its output and prints its summary).
pub(crate) fn stop(p: &mut Proc) {
    // SAFETY: kill(2) on our own child's pid (not yet reaped: we hold its Child).
    unsafe {
        libc::kill(p.child.id() as i32, libc::SIGTERM);
    }
}

/// Waits for a child to exit (killing it after `timeout`) and returns how it exited
/// (`None`: killed after the timeout) and its summary: name, exit status and the JSON it
/// printed.
pub(crate) fn wait_json(
    p: &mut Proc,
    timeout: Duration,
) -> (Option<ExitStatus>, serde_json::Value) {
    let t0 = Instant::now();
    let name = p.name.clone();
    loop {
        match p.child.try_wait() {
            Ok(Some(status)) => {
                let mut out = String::new();
                if let Some(mut o) = p.child.stdout.take() {
                    let _ = std::io::Read::read_to_string(&mut o, &mut out);
                }
                let v: serde_json::Value =
                    serde_json::from_str(&out).unwrap_or(json!({"stdout": out}));
                let s = json!({"name": name, "exit_status": status.code(),
                    "exit": describe(status), "summary": v});
                return (Some(status), s);
            }
            Ok(None) if t0.elapsed() < timeout => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = p.child.kill();
                let _ = p.child.wait();
                let s = json!({"name": name, "exit_status": null, "error": "killed after timeout"});
                return (None, s);
            }
        }
    }
}

/// Stops every child in `procs` (SIGTERM, then SIGKILL after `timeout`) and reaps them:
/// the array leaves nothing running when it fails.
pub(crate) fn stop_all(procs: &mut [&mut Proc], timeout: Duration) {
    for p in procs.iter_mut() {
        if matches!(p.try_wait(), Ok(None)) {
            stop(p);
        }
    }
    for p in procs.iter_mut() {
        let _ = wait_json(p, timeout);
    }
}

/// Waits until each child's log contains `marker` (an engine's start-up line), at most
/// `timeout`; an engine that exits, or logs an error (`Error:`), ends the wait at once.
pub(crate) fn wait_ready(
    procs: &mut [&mut Proc],
    marker: &str,
    timeout: Duration,
) -> Result<(), ChildError> {
    let t0 = Instant::now();
    for i in 0..procs.len() {
        loop {
            let text = std::fs::read_to_string(&procs[i].log).unwrap_or_default();
            if text.contains(marker) {
                break;
            }
            if text.contains("Error:") {
                return Err(ChildError::Failed(procs[i].log.clone()));
            }
            for p in procs.iter_mut() {
                if let Ok(Some(status)) = p.try_wait() {
                    return Err(p.exited("while starting", status));
                }
            }
            if t0.elapsed() > timeout || crate::control::shutdown::requested() {
                return Err(ChildError::NotReady {
                    log: procs[i].log.clone(),
                    marker: marker.to_string(),
                    timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}
