//! `gpucbf array` and its child engines as real processes: an engine that dies makes the
//! array fail naming it, and killing the array (SIGKILL) takes its engines with it.
//!
//! Each test runs a one-antenna CPU array on its own loopback ports for a few seconds.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_gpucbf");

/// A fresh output directory under the system temp dir.
fn out_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpucbf-array-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Starts `gpucbf array` (1 antenna, 64 channels, CPU) writing to `out`, its stderr to
/// `out/array.log`.
fn start_array(out: &Path, base_port: u16, duration: &str) -> Child {
    let log = std::fs::File::create(out.join("array.log")).unwrap();
    Command::new(EXE)
        .args([
            "array",
            "--antennas",
            "1",
            "--channels",
            "64",
            "--backend",
            "cpu",
        ])
        .args(["--duration", duration, "--dump-seconds", "0.5"])
        .args(["--base-port", &base_port.to_string()])
        .arg("--output")
        .arg(out.join("run"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// (pid, state, command line) of every process whose parent is `ppid`, from /proc.
fn children_of(ppid: u32) -> Vec<(u32, char, String)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let mut f = rest.split(' ');
        let state = f.next().and_then(|s| s.chars().next()).unwrap_or('?');
        if f.next().and_then(|p| p.parse::<u32>().ok()) != Some(ppid) {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        v.push((pid, state, cmd));
    }
    v
}

/// Waits (at most 120 s) until the array runs its dsim: every engine is then up. Returns
/// the children (pid, command line).
fn wait_for_dsim(array: &mut Child) -> Vec<(u32, String)> {
    let t0 = Instant::now();
    loop {
        let kids = children_of(array.id());
        if kids.iter().any(|k| k.2.contains(" dsim ")) {
            return kids.into_iter().map(|(p, _, c)| (p, c)).collect();
        }
        if let Some(s) = array.try_wait().unwrap() {
            panic!("the array exited ({s}) before starting its dsim");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no dsim after 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// True while `pid` is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].chars().next())
            .is_some_and(|s| s != 'Z'),
        Err(_) => false,
    }
}

fn sigkill(pid: u32) {
    // SAFETY: kill(2) on a process this test started (or one of its engines).
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
}

/// Waits (at most 120 s) for the array to exit.
fn wait_exit(array: &mut Child) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = array.try_wait().unwrap() {
            return s;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            sigkill(array.id());
            panic!("the array did not exit within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The XB-engine killed mid-run: the array stops, fails and names it with its status.
#[test]
fn an_engine_that_dies_fails_the_array_naming_it() {
    let out = out_dir("dies");
    let mut array = start_array(&out, 27310, "6");
    let kids = wait_for_dsim(&mut array);
    let (xb, _) = kids
        .iter()
        .find(|k| k.1.contains(" xbgpu "))
        .expect("an xbgpu child")
        .clone();
    sigkill(xb);
    let status = wait_exit(&mut array);
    let log = std::fs::read_to_string(out.join("array.log")).unwrap();
    // Its other engines were stopped, not left behind.
    for (pid, cmd) in &kids {
        assert!(!alive(*pid), "{cmd} (pid {pid}) still runs");
    }
    assert!(
        !status.success(),
        "the array exited 0 although xbgpu died:\n{log}"
    );
    assert!(
        log.contains(&format!(
            "xbgpu (pid {xb}) exited during the run with signal 9 (SIGKILL)"
        )),
        "{log}"
    );
    assert!(log.contains("xbgpu.log"), "{log}");
    let _ = std::fs::remove_dir_all(&out);
}

/// SIGKILL of the array (no chance to clean up) takes every engine with it: the parent-death
/// signal.
#[test]
fn killing_the_array_kills_its_engines() {
    let out = out_dir("killed");
    let mut array = start_array(&out, 27510, "60");
    let kids = wait_for_dsim(&mut array);
    assert!(kids.len() >= 3, "xbgpu, fgpu0 and dsim: {kids:?}");
    // The engines serve no katcp (an engine or another array on 7147 cannot clash with
    // them): the option on their command lines, no katcp server in their logs.
    for (name, sub) in [("xbgpu", " xbgpu "), ("fgpu0", " fgpu ")] {
        let (_, cmd) = kids
            .iter()
            .find(|k| k.1.contains(sub))
            .expect("the engine runs");
        assert!(cmd.contains(" --katcp-port 0 "), "{cmd}");
        let log = std::fs::read_to_string(out.join(format!("run/logs/{name}.log"))).unwrap();
        assert!(!log.contains("katcp"), "{name}: {log}");
    }
    sigkill(array.id());
    array.wait().unwrap();
    let t0 = Instant::now();
    while kids.iter().any(|k| alive(k.0)) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let orphans: Vec<_> = kids.iter().filter(|k| alive(k.0)).cloned().collect();
    // Leave nothing behind, even when failing.
    orphans.iter().for_each(|k| sigkill(k.0));
    assert!(orphans.is_empty(), "orphan engines: {orphans:?}");
    let _ = std::fs::remove_dir_all(&out);
}
