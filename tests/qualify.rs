//! `gpucbf qualify` against a live CPU array (2 antennas, 256 channels, the scaled rate):
//! the quick subset passes and writes a well-formed report naming every check; breaking
//! the product through a hidden debug option (a flipped delay sign, ignored gains, two
//! swapped baselines) makes the relevant check fail with a clear message while the others
//! still pass. The runs are serialised (each is a whole array on a shared host), each on
//! its own ports.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_gpucbf");

/// One array at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Longest a run may take (the quick subset takes about a minute on 2 cores).
const TIMEOUT: Duration = Duration::from_secs(420);

struct Run {
    status: std::process::ExitStatus,
    stdout: String,
    dir: PathBuf,
}

impl Run {
    /// The stdout line of check `name` (`PASS name: ...` / `FAIL name: ...`).
    fn line(&self, name: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no line for {name} in:\n{}", self.stdout))
    }

    fn passed(&self, name: &str) -> bool {
        self.line(name).starts_with("PASS ")
    }
}

/// Runs `gpucbf qualify` with `extra` options into a fresh directory.
fn qualify(tag: &str, base_port: u16, extra: &[&str]) -> Run {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("gpucbf-qualify-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::fs::File::create(dir.join("stdout.txt")).unwrap();
    let err = std::fs::File::create(dir.join("stderr.txt")).unwrap();
    let mut child = Command::new(EXE)
        .args([
            "qualify",
            "--backend",
            "cpu",
            "--antennas",
            "2",
            "--channels",
            "256",
        ])
        .args(["--base-port", &base_port.to_string()])
        .arg("--output")
        .arg(dir.join("report"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("qualify {tag} ran past {TIMEOUT:?}: see {}", dir.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let stdout = std::fs::read_to_string(dir.join("stdout.txt")).unwrap();
    Run {
        status,
        stdout,
        dir,
    }
}

/// Void elements of HTML (no closing tag).
const VOID: [&str; 5] = ["meta", "img", "br", "hr", "link"];

/// Checks that every non-void tag of `html` is closed in order; returns the ids.
fn check_html(html: &str) -> Vec<String> {
    assert!(html.starts_with("<!DOCTYPE html>"), "no doctype");
    let mut stack: Vec<String> = Vec::new();
    let mut ids = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest.find('>').expect("unterminated tag");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack
                .pop()
                .unwrap_or_else(|| panic!("</{name}> closes nothing"));
            assert_eq!(open, name, "</{name}> closes <{open}>");
            continue;
        }
        let name: String = tag
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        assert!(!name.is_empty(), "bad tag <{tag}>");
        if let Some(p) = tag.find("id=\"") {
            let v = &tag[p + 4..];
            ids.push(v[..v.find('"').unwrap()].to_string());
        }
        if tag.starts_with("img") {
            let src = tag.split("src=\"").nth(1).expect("img without src");
            assert!(
                src.starts_with("data:image/png;base64,"),
                "image not embedded: {}",
                &src[..src.len().min(40)]
            );
        }
        if !VOID.contains(&name.as_str()) {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    ids
}

fn report(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("report/report.json")).unwrap()).unwrap()
}

/// The quick subset passes on the CPU backend; report.json holds every check with its
/// measured value, threshold and plot data; report.html is well-formed, self-contained
/// and has a section (and embedded plots) for every check.
#[test]
fn quick_subset_passes_with_a_full_report() {
    let run = qualify("quick", 18600, &["--only", "quick"]);
    assert!(
        run.status.success(),
        "qualify failed ({}):\n{}",
        run.status,
        run.stdout
    );
    let rep = report(&run.dir);
    let checks = rep["checks"].as_array().unwrap();
    assert!(checks.len() >= 12, "{} checks", checks.len());
    assert_eq!(rep["passed"], true);
    // The checks began once the array was steady, and the report says when that was.
    let warm = rep["warm_up"]["seconds"].as_f64().unwrap();
    assert!(warm > 0.0 && warm < 90.0, "warm-up {warm} s");
    assert!(rep["warm_up"]["incomplete_dumps"].as_u64().is_some());
    assert!(rep["warm_up"]["incomplete_beam_heaps"].as_u64().is_some());
    for c in checks {
        let name = c["name"].as_str().unwrap();
        assert!(run.passed(name), "{}", run.line(name));
        assert!(c["measured"].as_f64().is_some_and(f64::is_finite), "{name}");
        assert!(!c["threshold"].as_str().unwrap().is_empty(), "{name}");
        assert!(!c["method"].as_str().unwrap().is_empty(), "{name}");
    }
    // SFDR measured, not assumed: a finite number above the threshold.
    let sfdr = checks
        .iter()
        .find(|c| c["name"] == "test_channelisation_and_sfdr")
        .unwrap();
    assert!(sfdr["measured"].as_f64().unwrap() > 53.0);
    assert!(!sfdr["plots"][0]["series"][0]["points"]
        .as_array()
        .unwrap()
        .is_empty());
    let html = std::fs::read_to_string(run.dir.join("report/report.html")).unwrap();
    let ids = check_html(&html);
    for c in checks {
        let name = c["name"].as_str().unwrap();
        assert!(ids.iter().any(|i| i == name), "no section for {name}");
    }
    assert!(html.matches("data:image/png;base64,").count() >= 10);
    assert!(
        !html.contains("src=\"http"),
        "the report must be self-contained"
    );
    screenshot(&run.dir.join("report/report.html"));
}

/// Where a Chromium is installed: a headless screenshot of the report (skipped, saying so,
/// where none is).
fn screenshot(html: &Path) {
    let Some(browser) = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    else {
        eprintln!("no Chromium installed: report screenshot skipped");
        return;
    };
    let png = html.with_file_name("report.png");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .args(["--window-size=1000,3000", "--virtual-time-budget=5000"])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{browser} did not finish the screenshot within 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{browser} failed: {status}");
    let img = std::fs::read(&png).unwrap();
    assert_eq!(&img[..8], b"\x89PNG\r\n\x1a\n");
    // A rendered page (text, tables, plots), not a blank one.
    assert!(img.len() > 50_000, "screenshot of {} bytes", img.len());
}

/// A flipped delay sign in the F-engines fails the delay checks, naming the error; the
/// channelisation check still passes.
#[test]
fn flipped_delay_sign_fails_the_delay_checks() {
    let run = qualify(
        "delay-sign",
        18700,
        &[
            "--only",
            "test_delay_phase,test_channelisation_and_sfdr",
            "--debug-break",
            "delay-sign",
        ],
    );
    assert!(!run.status.success());
    let l = run.line("test_delay_phase");
    assert!(
        l.starts_with("FAIL ") && l.contains("phase error") && l.contains("exceeds 1°"),
        "{l}"
    );
    assert!(run.passed("test_channelisation_and_sfdr"), "{}", run.stdout);
}

/// F-engines that ignore `?gain` fail test_gains with the worst relative error and the
/// gains concerned; the delay phase check still passes.
#[test]
fn ignored_gains_fail_test_gains() {
    let run = qualify(
        "gains",
        18800,
        &[
            "--only",
            "test_gains,test_delay_phase",
            "--debug-break",
            "gains",
        ],
    );
    assert!(!run.status.success());
    let l = run.line("test_gains");
    assert!(
        l.starts_with("FAIL ") && l.contains("relative error") && l.contains("gains"),
        "{l}"
    );
    assert!(run.passed("test_delay_phase"), "{}", run.stdout);
}

/// Two swapped baselines in the XB-engine fail the baseline ordering check, naming a
/// channel and product; the accumulation length check still passes.
#[test]
fn swapped_baselines_fail_baseline_ordering() {
    let run = qualify(
        "baselines",
        18900,
        &[
            "--only",
            "test_baseline_correlation_products,test_accum_length",
            "--debug-break",
            "baselines",
        ],
    );
    assert!(!run.status.success());
    let l = run.line("test_baseline_correlation_products");
    assert!(
        l.starts_with("FAIL ")
            && l.contains("do not match the gain pattern")
            && l.contains("channel"),
        "{l}"
    );
    assert!(run.passed("test_accum_length"), "{}", run.stdout);
    let rep = report(&run.dir);
    assert_eq!(rep["passed"], false);
    assert_eq!(rep["config"]["debug_break"], "Baselines");
}

/// Bad options are refused by name before anything starts.
#[test]
fn bad_options_are_refused() {
    for (args, want) in [
        (vec!["--antennas", "1"], "--antennas 1 must be in 2..=16"),
        (
            vec!["--channels", "300"],
            "--channels 300 must be a power of two",
        ),
        (vec!["--only", "nothing-matches"], "selects no check"),
        (
            vec!["--antennas", "8", "--channels", "256"],
            "needs at least",
        ),
    ] {
        let out = Command::new(EXE)
            .args(["qualify", "--backend", "cpu", "--output"])
            .arg(std::env::temp_dir().join("gpucbf-qualify-bad"))
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
