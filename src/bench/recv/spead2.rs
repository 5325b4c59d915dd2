//! spead2's ChunkStream on the same feed and transport (tools/spead2_recv_bench.py under
//! `--python`): the peer each backend is measured against.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

use super::feed::{payloads, send_all, udp_buffer, Feed};
use super::{RecvBenchArgs, RecvResult, BITS, CHUNK_SAMPLES, HEAP_SAMPLES};

/// File name of the spead2 peer script.
const PEER_SCRIPT: &str = "spead2_recv_bench.py";

/// Where the spead2 peer script is looked for, in order: `given` (`--peer-script`) alone
/// when there is one; otherwise next to the executable `exe`, then in the source tree
/// this binary was built from (absent in a container image).
fn peer_script_candidates(given: Option<&Path>, exe: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = given {
        return vec![p.to_path_buf()];
    }
    let mut c = Vec::new();
    if let Some(dir) = exe.and_then(Path::parent) {
        c.push(dir.join(PEER_SCRIPT));
    }
    c.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tools")
            .join(PEER_SCRIPT),
    );
    c
}

/// The first of [`peer_script_candidates`] that is a file, or an error naming every path
/// tried.
fn find_peer_script(given: Option<&Path>, exe: Option<&Path>) -> anyhow::Result<PathBuf> {
    let tried = peer_script_candidates(given, exe);
    if let Some(p) = tried.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let list = tried
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    anyhow::bail!(
        "the spead2 peer script {PEER_SCRIPT} is not at {list}: give its path with --peer-script \
         (it is tools/{PEER_SCRIPT} in the gpucbf sources)"
    )
}

pub(super) fn bench_spead2(
    pcap: &Path,
    args: &RecvBenchArgs,
    transport: &str,
    feed: Feed,
) -> anyhow::Result<RecvResult> {
    use std::io::{BufRead, Write};
    let exe = std::env::current_exe().ok();
    let script = find_peer_script(args.peer_script.as_deref(), exe.as_deref())?;
    let mut cmd = std::process::Command::new(&args.python);
    cmd.arg(&script).arg("--pcap").arg(pcap).args([
        "--heap-samples",
        &HEAP_SAMPLES.to_string(),
        "--bits",
        &BITS.to_string(),
        "--chunk-samples",
        &CHUNK_SAMPLES.to_string(),
        "--min-seconds",
        &args.min_seconds.to_string(),
        "--transport",
        transport,
    ]);
    if let Some(c) = args.recv_affinity {
        cmd.args(["--affinity", &c.to_string()]);
    }
    let payloads = if transport == "udp" {
        let p = payloads(pcap)?;
        cmd.args(["--buffer", &udp_buffer(&p).to_string()]);
        Some(p)
    } else {
        None
    };
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut proc = cmd
        .spawn()
        .map_err(|e| anyhow::anyhow!("running {} {}: {e}", args.python, script.display()))?;
    let mut stdout = std::io::BufReader::new(proc.stdout.take().expect("piped"));
    let mut stdin = proc.stdin.take().expect("piped");
    let mut fed = String::new();
    if let Some(p) = &payloads {
        // The script binds its socket and prints the port; we fill it, then say "go".
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let port: u16 = line
            .trim()
            .strip_prefix("port ")
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("spead2 script said {line:?}, not its port"))?;
        let gso_sends = send_all(p, SocketAddrV4::new(Ipv4Addr::LOCALHOST, port), feed.gso())?;
        fed = format!(", {}", feed.describe(gso_sends));
        writeln!(stdin, "go")?;
    }
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest)?;
    let out = proc.wait_with_output()?;
    if !out.status.success() {
        anyhow::bail!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let line = rest
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| anyhow::anyhow!("no JSON from {}", script.display()))?;
    let v: serde_json::Value = serde_json::from_str(line)?;
    let packets = v["packets"].as_u64().unwrap_or(0);
    let secs = v["seconds"].as_f64().unwrap_or(0.0);
    let name = match (transport, feed) {
        ("udp", Feed::Plain) => "spead2-udp-nogso".to_string(),
        _ => format!("spead2-{transport}"),
    };
    Ok(RecvResult::new(
        &name,
        packets,
        secs,
        v["cpu_seconds"].as_f64().unwrap_or(0.0),
        format!(
            "spead2 {} {}, {} passes, {} heaps placed{fed}",
            v["spead2_version"].as_str().unwrap_or("?"),
            v["mode"].as_str().unwrap_or("?"),
            v["passes"],
            v["heaps"]
        ),
    ))
}

#[cfg(test)]
mod tests {
    use crate::bench::recv::spead2::*;

    /// The peer script: `--peer-script` alone when given (an error naming it when it is not
    /// there), else next to the executable before the source tree; an error names every
    /// path tried.
    #[test]
    fn peer_script_is_found_at_run_time() {
        let dir = std::env::temp_dir().join(format!("gpucbf-peer-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let exe = dir.join("bin/gpucbf");
        let beside = dir.join("bin").join(PEER_SCRIPT);
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tools")
            .join(PEER_SCRIPT);
        assert!(source.is_file(), "the source tree has {}", source.display());
        // Nothing beside the executable: the source tree's.
        assert_eq!(find_peer_script(None, Some(&exe)).unwrap(), source);
        std::fs::write(&beside, "").unwrap();
        assert_eq!(find_peer_script(None, Some(&exe)).unwrap(), beside);
        // --peer-script wins, and is not replaced by another when missing.
        let given = dir.join("elsewhere.py");
        let e = find_peer_script(Some(&given), Some(&exe))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&given.display().to_string()) && e.contains("--peer-script"),
            "{e}"
        );
        assert!(!e.contains(&beside.display().to_string()), "{e}");
        std::fs::write(&given, "").unwrap();
        assert_eq!(find_peer_script(Some(&given), Some(&exe)).unwrap(), given);
        // Every default place tried is named.
        assert_eq!(
            peer_script_candidates(None, Some(&exe)),
            vec![beside.clone(), source.clone()]
        );
        assert_eq!(peer_script_candidates(None, None), vec![source]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
