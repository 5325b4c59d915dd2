//! The FINUFFT peer of `gpucbf bench nufft`: `tools/nufft_check.py` (carried in the binary)
//! times `finufft.nufft2d1` on the input the CPU benchmark saved, in the same run.

use std::path::{Path, PathBuf};

/// The FINUFFT cross-check script (also `tools/nufft_check.py`), carried in the binary so
/// `gpucbf bench nufft` can run the peer on the same input from anywhere.
const NUFFT_CHECK_PY: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/nufft_check.py"));

/// Python interpreter for the FINUFFT peer: `$GPUCBF_PYTHON`, else the repo venv
/// (`.venv/bin/python` under the working directory), else `python3`.
fn peer_python() -> String {
    if let Ok(p) = std::env::var("GPUCBF_PYTHON") {
        return p;
    }
    let venv = Path::new(".venv/bin/python");
    if venv.exists() {
        return venv.display().to_string();
    }
    "python3".into()
}

/// Why the FINUFFT peer did not run.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The script could not be written next to the saved input.
    #[error("{}: {source}", path.display())]
    Script {
        /// Where it was to go.
        path: PathBuf,
        /// Why it could not.
        source: std::io::Error,
    },
    /// The interpreter could not be started.
    #[error("{python}: {source} (set GPUCBF_PYTHON to a Python with finufft)")]
    Start {
        /// The interpreter.
        python: String,
        /// Why it could not start.
        source: std::io::Error,
    },
    /// The script failed; the last line of its standard error.
    #[error("{python} nufft_check.py failed ({status}): {last}")]
    Failed {
        /// The interpreter.
        python: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The last line it wrote to standard error.
        last: String,
    },
    /// The script's output has no `finufft ` line.
    #[error("no finufft line in the peer's output: {0}")]
    NoLine(String),
    /// The `finufft ` line has no points/s figure.
    #[error("cannot read points/s from: {0}")]
    NoRate(String),
}

/// Points/s that FINUFFT reached on the input saved in `dir` (the issue's "same problem, same
/// run") and the peer's output, or why it could not run.
pub fn finufft_peer(dir: &Path, eps: f64, threads: usize) -> Result<(f64, String), PeerError> {
    let script = dir.join("nufft_check.py");
    std::fs::write(&script, NUFFT_CHECK_PY).map_err(|source| PeerError::Script {
        path: script.clone(),
        source,
    })?;
    let py = peer_python();
    let out = std::process::Command::new(&py)
        .arg(&script)
        .arg("--bench-dir")
        .arg(dir)
        .arg("--threads")
        .arg(threads.to_string())
        .arg("--eps")
        .arg(format!("{eps:e}"))
        .output()
        .map_err(|source| PeerError::Start {
            python: py.clone(),
            source,
        })?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("").to_string();
        return Err(PeerError::Failed {
            python: py,
            status: out.status,
            last,
        });
    }
    let line = text
        .lines()
        .find(|l| l.starts_with("finufft "))
        .ok_or_else(|| PeerError::NoLine(text.clone()))?;
    let rate = line
        .split(" = ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or_else(|| PeerError::NoRate(line.to_string()))?;
    Ok((rate, text))
}
