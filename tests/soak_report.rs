//! The soak report against live `/metrics` endpoints on 127.0.0.1 (the engines' own
//! Prometheus server, fed by a thread that plays an engine): the sampler runs for a few
//! seconds, writes soak.csv, soak.json and soak.png, and the verdict flags a loss injected
//! after the warm-up but not one inside it; `gpucbf soak` exits non-zero naming engine,
//! counter and amount, and 0 on a clean run.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::scratch_dir;
use gpucbf::apps::soak::{EngineTarget, Soak, SoakOptions};
use gpucbf::telemetry::metrics::{labels, Metrics};

/// A stand-in engine: its metrics move every 20 ms; `loss` = (counter, labels, amount, at
/// seconds) is added once when that time has passed.
struct FakeEngine {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

type Loss = (
    &'static str,
    &'static [(&'static str, &'static str)],
    u64,
    f64,
);

impl FakeEngine {
    fn start(ns: &str, losses: Vec<Loss>) -> Self {
        let m = Metrics::new(ns);
        let heaps = m.counter_family("input_heaps", "heaps");
        let ready = m.gauge("input_ready_chunks", "ready");
        let free = m.gauge("input_free_chunks", "free");
        let lag = m.gauge_f64("output_lag_seconds", "lag");
        let out = m.counter_family("output_heaps", "sent");
        let loss_counters: Vec<_> = losses
            .iter()
            .map(|(name, l, _, _)| {
                let name = name.strip_suffix("_total").unwrap();
                let name = name.strip_prefix(&format!("{ns}_")).unwrap();
                (m.counter_family(name, "loss"), labels(l))
            })
            .collect();
        for (f, l) in &loss_counters {
            let _ = f.get_or_create(l);
        }
        let addr = m.serve("127.0.0.1:0".parse().unwrap()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut done = vec![false; losses.len()];
            let mut k = 0i64;
            // Bounded: the test stops it, and it gives up by itself after 60 s.
            while !stopped.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(60) {
                for pol in ["0", "1"] {
                    heaps.get_or_create(&labels(&[("pol", pol)])).inc_by(50);
                }
                out.get_or_create(&labels(&[("stream", "wide")])).inc_by(40);
                ready.set(k % 3);
                free.set(4 - k % 3);
                lag.set(0.05 + 0.01 * (k % 5) as f64);
                for (i, (_, _, amount, at)) in losses.iter().enumerate() {
                    if !done[i] && t0.elapsed().as_secs_f64() >= *at {
                        loss_counters[i]
                            .0
                            .get_or_create(&loss_counters[i].1)
                            .inc_by(*amount);
                        done[i] = true;
                    }
                }
                k += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        FakeEngine {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakeEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn fresh_dir(tag: &str) -> std::path::PathBuf {
    let d = scratch_dir(tag);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn png_size(path: &Path) -> (u32, u32) {
    let f = std::fs::File::open(path).unwrap();
    let r = png::Decoder::new(std::io::BufReader::new(f))
        .read_info()
        .unwrap();
    (r.info().width, r.info().height)
}

#[test]
fn soak_writes_csv_json_png_and_flags_a_loss_after_the_warm_up() {
    // fgpu0 loses 5 heaps inside the warm-up (start-up: not a failure); xb0 loses 7 after it.
    let fgpu = FakeEngine::start(
        "fgpu",
        vec![("fgpu_input_too_old_heaps_total", &[], 5, 0.4)],
    );
    let xb = FakeEngine::start(
        "xbgpu",
        vec![("xbgpu_input_too_old_heaps_total", &[], 7, 2.0)],
    );
    // Nothing listens here: scrapes fail, are recorded, and do not stop the soak.
    let dead: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = fresh_dir("soak-lib");
    let target = |name: &str, prometheus, pid| EngineTarget {
        name: name.into(),
        prometheus,
        pid,
    };
    let engines = vec![
        target("fgpu0", fgpu.addr, Some(std::process::id())),
        target("xb0", xb.addr, None),
        target("gone", dead, None),
    ];
    let mut opts = SoakOptions::new(&dir, Duration::from_secs(1));
    opts.interval = Duration::from_millis(250);
    let soak = Soak::start(engines, opts).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let report = soak.finish().unwrap();
    drop((fgpu, xb));

    let v = &report.summary.verdict;
    assert!(!v.ok);
    let got: Vec<(&str, &str, f64)> = v
        .problems
        .iter()
        .map(|p| (p.engine.as_str(), p.what.as_str(), p.amount))
        .collect();
    assert_eq!(
        got,
        [("xb0", "too_old", 7.0), ("gone", "unreachable", 0.0)],
        "{v:#?}"
    );
    assert!(v.problems[0]
        .message
        .starts_with("xb0: xbgpu_input_too_old_heaps_total rose by 7 after the warm-up"));
    let e = &report.summary.engines;
    assert!(e[0].ok && !e[1].ok && !e[2].ok);
    assert_eq!(e[0].totals["fgpu_input_too_old_heaps_total"], 5.0);
    assert_eq!(e[0].losses_after_warm_up["too_old"], 0.0);
    assert!(e[0].input_heaps > 0.0 && e[1].output_heaps > 0.0);
    assert!(e[0].rss.as_ref().unwrap().end_bytes > 0);
    assert!(!e[0].threads.is_empty());
    assert!(e[0].max_lag_s.unwrap() >= 0.05);
    assert_eq!(e[2].scrape_failures as usize, e[2].samples);

    // soak.csv: the header, seven fields a row, every engine present.
    let csv = std::fs::read_to_string(&report.csv).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("unix_time,elapsed_s,engine,kind,series,labels,value")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 7), "{csv}");
    let has = |engine: &str, kind: &str| rows.iter().any(|r| r[2] == engine && r[3] == kind);
    for (engine, kind) in [
        ("fgpu0", "input_heaps"),
        ("fgpu0", "too_old"),
        ("fgpu0", "rss"),
        ("fgpu0", "thread_cpu"),
        ("fgpu0", "output_lag"),
        ("fgpu0", "ready_chunks"),
        ("xb0", "too_old"),
        ("xb0", "output_heaps"),
        ("gone", "up"),
    ] {
        assert!(has(engine, kind), "no {engine} {kind} row in\n{csv}");
    }
    assert!(rows
        .iter()
        .filter(|r| r[2] == "gone")
        .all(|r| r[3] == "up" && r[6] == "0"));
    assert!(rows
        .iter()
        .any(|r| r[4] == "fgpu_input_heaps_total" && r[5] == "pol=1"));

    // soak.json: the summary as returned.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report.json).unwrap()).unwrap();
    assert_eq!(json["verdict"]["ok"], false);
    assert_eq!(json["engines"].as_array().unwrap().len(), 3);
    assert_eq!(json["engines"][1]["losses_after_warm_up"]["too_old"], 7.0);
    assert_eq!(json["engines"][1]["loss_series"][0]["kind"], "too_old");

    // soak.png: a full-size picture.
    assert_eq!(png_size(&report.png), (1600, 1200));
}

/// Runs `gpucbf soak` on one engine, bounded: killed after 60 s.
fn gpucbf_soak(name: &str, addr: SocketAddr, dir: &Path) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpucbf"))
        .args(["soak", "--engine"])
        .arg(format!(
            "name={name},prometheus={addr},pid={}",
            std::process::id()
        ))
        .args(["--seconds", "2", "--warm-up", "0.5", "--interval", "0.25"])
        .arg("--output")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("gpucbf soak did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn gpucbf_soak_exits_non_zero_naming_the_loss_and_zero_when_clean() {
    let lossy = FakeEngine::start(
        "fgpu",
        vec![("fgpu_input_missing_heaps_total", &[("pol", "1")], 3, 1.2)],
    );
    let clean = FakeEngine::start("fgpu", vec![]);
    let (d1, d2) = (fresh_dir("soak-cli-lossy"), fresh_dir("soak-cli-clean"));
    let (a1, a2) = (lossy.addr, clean.addr);
    let (bad, good) = std::thread::scope(|s| {
        let bad = s.spawn(|| gpucbf_soak("f0", a1, &d1));
        let good = s.spawn(|| gpucbf_soak("f1", a2, &d2));
        (bad.join().unwrap(), good.join().unwrap())
    });
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success(), "{stderr}");
    assert!(
        stderr
            .contains("f0: fgpu_input_missing_heaps_total{pol=\"1\"} rose by 3 after the warm-up"),
        "{stderr}"
    );
    let summary: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    assert_eq!(summary["verdict"]["ok"], false);
    for f in ["soak.csv", "soak.json", "soak.png"] {
        assert!(d1.join(f).is_file(), "{f}");
    }

    let stderr = String::from_utf8_lossy(&good.stderr);
    assert!(good.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&good.stdout).unwrap();
    assert_eq!(summary["verdict"]["ok"], true);
    assert_eq!(png_size(&d2.join("soak.png")), (1600, 1200));
}
