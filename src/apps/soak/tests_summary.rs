//! The verdict and summary on hand-made sample sequences.

use std::collections::BTreeMap;

use super::expo;
use super::sampler::{EngineLog, EngineTarget, Observation};
use super::series::Kind;
use super::summary::{baseline, summarise, Limits};

fn target(name: &str, pid: Option<u32>) -> EngineTarget {
    EngineTarget {
        name: name.into(),
        prometheus: "127.0.0.1:9100".parse().unwrap(),
        pid,
    }
}

fn up(t: f64, page: &str) -> Observation {
    Observation {
        elapsed: t,
        unix: 1.7e9 + t,
        page: Ok(expo::parse(page)),
        rss: None,
        threads: None,
    }
}

fn down(t: f64) -> Observation {
    Observation {
        elapsed: t,
        unix: 1.7e9 + t,
        page: Err("scrape http://127.0.0.1:9100/metrics: Connection refused".into()),
        rss: None,
        threads: None,
    }
}

fn log_of(name: &str, pid: Option<u32>, obs: Vec<Observation>) -> EngineLog {
    let mut l = EngineLog::new(target(name, pid));
    for o in obs {
        l.record(o, &mut std::io::sink()).unwrap();
    }
    l
}

fn warm(s: f64) -> Limits {
    Limits {
        warm_up_s: s,
        ..Default::default()
    }
}

#[test]
fn losses_after_the_warm_up_fail_and_name_engine_counter_and_amount() {
    let l = log_of(
        "fgpu0",
        None,
        vec![
            up(
                0.0,
                "fgpu_input_too_old_heaps_total 0\nfgpu_input_heaps_total{pol=\"0\"} 0",
            ),
            // Start-up losses inside the warm-up do not count.
            up(
                1.0,
                "fgpu_input_too_old_heaps_total 40\nfgpu_input_heaps_total{pol=\"0\"} 100",
            ),
            up(
                2.0,
                "fgpu_input_too_old_heaps_total 40\nfgpu_input_heaps_total{pol=\"0\"} 200",
            ),
            up(
                3.0,
                "fgpu_input_too_old_heaps_total 52\nfgpu_input_heaps_total{pol=\"0\"} 300",
            ),
            up(
                4.0,
                "fgpu_input_too_old_heaps_total 52\nfgpu_input_heaps_total{pol=\"0\"} 400",
            ),
        ],
    );
    let s = summarise(&[l], 1.0, warm(1.5));
    assert!(!s.verdict.ok);
    assert_eq!(s.verdict.problems.len(), 1, "{:?}", s.verdict.problems);
    let p = &s.verdict.problems[0];
    assert_eq!(
        (p.engine.as_str(), p.what.as_str(), p.amount),
        ("fgpu0", "too_old", 12.0)
    );
    assert!(
        p.message.contains("fgpu0")
            && p.message.contains("fgpu_input_too_old_heaps_total")
            && p.message.contains("rose by 12")
            && p.message.contains("3.0 s"),
        "{}",
        p.message
    );
    let e = &s.engines[0];
    assert_eq!(e.baseline_s, Some(1.0));
    assert_eq!(e.losses_after_warm_up["too_old"], 12.0);
    assert_eq!(e.losses_after_warm_up["missing"], 0.0);
    assert_eq!(e.input_heaps, 400.0);
    assert_eq!(e.totals["fgpu_input_heaps_total{pol=\"0\"}"], 400.0);
    assert!(!e.ok);
    let err = s.verdict.check().unwrap_err().to_string();
    assert!(err.contains("rose by 12"), "{err}");
}

#[test]
fn a_clean_run_passes_and_dropped_descriptors_are_no_loss() {
    let l = log_of(
        "xbgpu",
        None,
        vec![
            up(
                0.0,
                "xbgpu_input_metadata_heaps_total 1\nxbgpu_input_missing_heaps_total 3",
            ),
            up(
                1.0,
                "xbgpu_input_metadata_heaps_total 5\nxbgpu_input_missing_heaps_total 3",
            ),
            up(
                2.0,
                "xbgpu_input_metadata_heaps_total 9\nxbgpu_input_missing_heaps_total 3",
            ),
        ],
    );
    let s = summarise(&[l], 1.0, warm(0.0));
    assert!(s.verdict.ok, "{:?}", s.verdict.problems);
    assert!(s.verdict.check().is_ok());
    assert_eq!(s.engines[0].baseline_s, Some(0.0));
    assert_eq!(s.engines[0].max_lag_s, None);
    assert_eq!(s.duration_s, 2.0);
}

#[test]
fn late_series_count_from_zero_and_resets_count_their_new_value() {
    let l = log_of(
        "fgpu1",
        None,
        vec![
            up(0.0, "fgpu_input_missing_heaps_total{pol=\"0\"} 2"),
            up(1.0, "fgpu_input_missing_heaps_total{pol=\"0\"} 2"),
            // A stream's family appears after the warm-up with 4 already counted.
            up(
                2.0,
                "fgpu_input_missing_heaps_total{pol=\"0\"} 2\n\
                 fgpu_output_skipped_heaps_total{stream=\"wide\"} 4",
            ),
            // The engine restarted: the counter fell and counted 1 again.
            up(
                3.0,
                "fgpu_input_missing_heaps_total{pol=\"0\"} 1\n\
                 fgpu_output_skipped_heaps_total{stream=\"wide\"} 4",
            ),
        ],
    );
    let s = summarise(&[l], 1.0, warm(1.0));
    let e = &s.engines[0];
    assert_eq!(e.losses_after_warm_up["skipped"], 4.0);
    assert_eq!(e.losses_after_warm_up["missing"], 1.0);
    let what: Vec<&str> = s.verdict.problems.iter().map(|p| p.what.as_str()).collect();
    assert_eq!(what, ["missing", "skipped"]);
    assert!(s.verdict.problems[1].message.contains("{stream=\"wide\"}"));
}

#[test]
fn failed_scrapes_are_recorded_and_an_engine_lost_at_the_end_fails() {
    // A scrape failing in the middle hides nothing: the next one shows the rise.
    let l = log_of(
        "a",
        None,
        vec![
            up(0.0, "fgpu_input_too_old_heaps_total 0"),
            down(1.0),
            up(2.0, "fgpu_input_too_old_heaps_total 3"),
        ],
    );
    let s = summarise(&[l], 1.0, warm(0.5));
    assert_eq!(s.engines[0].scrape_failures, 1);
    assert!(s.engines[0]
        .last_scrape_error
        .as_deref()
        .unwrap()
        .contains("refused"));
    assert_eq!(s.verdict.problems.len(), 1);
    assert_eq!(s.verdict.problems[0].amount, 3.0);

    let gone = log_of("b", None, vec![up(0.0, "x 1"), up(1.0, "x 1"), down(2.0)]);
    let never = log_of("c", None, vec![down(0.0), down(1.0)]);
    let s = summarise(&[gone, never], 1.0, warm(0.5));
    let msgs: Vec<&str> = s
        .verdict
        .problems
        .iter()
        .map(|p| p.message.as_str())
        .collect();
    assert_eq!(s.verdict.problems.len(), 2, "{msgs:?}");
    assert!(msgs[0].starts_with("b: the last scrape failed") && msgs[0].contains("after 1.0 s"));
    assert!(msgs[1].starts_with("c: no scrape of http://127.0.0.1:9100/metrics succeeded"));
    assert!(s.verdict.problems.iter().all(|p| p.what == "unreachable"));
}

#[test]
fn baseline_is_the_last_good_sample_in_the_warm_up() {
    let l = log_of(
        "a",
        None,
        vec![up(0.0, ""), up(1.0, ""), down(2.0), up(3.0, "")],
    );
    assert_eq!(baseline(&l.samples, 2.5), Some(1));
    assert_eq!(baseline(&l.samples, 0.0), Some(0));
    let late = log_of("a", None, vec![down(0.0), down(1.0), up(2.0, "")]);
    assert_eq!(baseline(&late.samples, 1.5), Some(2));
    assert_eq!(
        baseline(&log_of("a", None, vec![down(0.0)]).samples, 1.0),
        None
    );
}

#[test]
fn lag_rss_and_cpu() {
    let mib = 1u64 << 20;
    let with_proc = |t: f64, page: &str, rss: Option<u64>, recv: f64| Observation {
        rss,
        threads: rss.map(|_| BTreeMap::from([("recv".to_string(), recv), ("main".into(), 1.0)])),
        ..up(t, page)
    };
    let obs =
        vec![
        with_proc(0.0, "fgpu_output_lag_seconds{stream=\"a\"} 9", Some(100 * mib), 0.0),
        with_proc(1.0, "fgpu_output_lag_seconds{stream=\"a\"} 0.2", Some(200 * mib), 0.5),
        with_proc(
            2.0,
            "fgpu_output_lag_seconds{stream=\"a\"} 0.3\nfgpu_output_lag_seconds{stream=\"b\"} 0.7",
            Some(250 * mib),
            1.0,
        ),
        with_proc(3.0, "fgpu_output_lag_seconds{stream=\"a\"} NaN", Some(220 * mib), 1.5),
    ];
    let l = log_of("f", Some(4242), obs.clone());
    assert_eq!(l.ids_of(Kind::ThreadCpu).count(), 2);
    let limits = Limits {
        warm_up_s: 1.0,
        max_lag_s: Some(0.5),
        max_rss_growth_pct: Some(5.0),
    };
    let s = summarise(&[l], 1.0, limits);
    let e = &s.engines[0];
    // The 9 s lag is inside the warm-up; NaN is ignored.
    assert_eq!(e.max_lag_s, Some(0.7));
    let r = e.rss.as_ref().unwrap();
    assert_eq!(
        (r.start_bytes, r.end_bytes, r.max_bytes),
        (200 * mib, 220 * mib, 250 * mib)
    );
    assert!((r.growth_pct - 10.0).abs() < 1e-9, "{}", r.growth_pct);
    assert_eq!(e.threads[0].thread, "recv");
    assert_eq!(e.threads[0].cpu_seconds, 1.5);
    assert!((e.threads[0].mean_cpu_percent - 50.0).abs() < 1e-9);
    assert_eq!(e.threads[1].cpu_seconds, 0.0);
    let what: Vec<&str> = s.verdict.problems.iter().map(|p| p.what.as_str()).collect();
    assert_eq!(what, ["lag", "rss_growth"]);
    assert!(s.verdict.problems[0].message.contains("0.700 s"));
    assert!(s.verdict.problems[1].message.contains("10.0 %"));

    // Without limits the same run passes; a process gone at the end fails it.
    let mut obs = obs;
    obs.push(up(4.0, "fgpu_output_lag_seconds{stream=\"a\"} 0.1"));
    let s = summarise(&[log_of("f", Some(4242), obs)], 1.0, warm(1.0));
    assert_eq!(s.verdict.problems.len(), 1);
    assert_eq!(s.verdict.problems[0].what, "exited");
    assert!(s.verdict.problems[0]
        .message
        .contains("process 4242 is gone"));
}
