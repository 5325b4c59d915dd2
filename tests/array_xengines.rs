//! `gpucbf array --x-engines N`: N XB-engines each correlating a channel range, this
//! process joining their dumps into the full band. The correlation of a channel does not
//! depend on how the band is split, so a run with two XB-engines gives the visibilities of
//! a run with one.
//!
//! Not byte for byte: the runs' data start at the wall clock (timestamps count from a
//! sync time of the run's start) and the F-engines' dither is keyed by the absolute
//! spectrum, so two runs one after the other quantise the same sky with different dither
//! (side by side from one `--sync-time` they agree byte for byte:
//! tests/interop/test_compare_arrays.py). The dsim's signal repeats every 2^22 samples and a dump here is exactly 2^22
//! samples (8 batches of 2^19), so every dump of both runs correlates the same samples;
//! what differs is the dither, a fraction of a percent of each channel's visibilities,
//! while the channel-to-channel structure (per-antenna delays, the tone) changes the
//! visibilities by several percent from one channel to the next. The test asserts the
//! first and that its measure sees the second.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gpucbf::npy::{read_npy, NpyData};
use num_complex::Complex32;

const EXE: &str = env!("CARGO_BIN_EXE_gpucbf");
const CHANNELS: usize = 128;
const ANTENNAS: usize = 2;
const BASELINES: usize = ANTENNAS * (ANTENNAS + 1) / 2;

/// A fresh output directory under the system temp dir.
fn out_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpucbf-array-x-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the array (2 antennas, 128 channels, CPU, 4 s, 2^22-sample dumps) with `x`
/// XB-engines into `out`; returns its summary.
fn run_array(out: &Path, x: usize, base_port: u16) -> serde_json::Value {
    run_array_with(out, x, base_port, &[])
}

/// [`run_array`] with more options.
fn run_array_with(out: &Path, x: usize, base_port: u16, extra: &[&str]) -> serde_json::Value {
    let o = Command::new(EXE)
        .args(["array", "--backend", "cpu", "--antennas", "2"])
        .args(["--channels", &CHANNELS.to_string()])
        .args(["--x-engines", &x.to_string()])
        .args(["--duration", "4", "--dump-seconds", "1.25"])
        .args(["--base-port", &base_port.to_string()])
        .args(extra)
        .arg("--output")
        .arg(out)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "array --x-engines {x} failed:\n{log}");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("summary: {e}\n{log}"))
}

/// The dumps of `visibilities.npy` (dump, channel, baseline, product).
fn dumps(out: &Path) -> Vec<Vec<Complex32>> {
    let a = read_npy(&out.join("visibilities.npy")).unwrap();
    assert_eq!(a.shape[1..], [CHANNELS, BASELINES, 4]);
    let NpyData::C64(v) = a.data else {
        panic!("visibilities are {}", a.data.dtype());
    };
    v.chunks_exact(CHANNELS * BASELINES * 4)
        .map(<[_]>::to_vec)
        .collect()
}

/// Per channel: |a − b| / |b| over the channel's baselines and products, with `a`'s
/// channels taken `shift` further along (cyclically).
fn channel_differences(a: &[Complex32], b: &[Complex32], shift: usize) -> Vec<f64> {
    let w = BASELINES * 4;
    (0..CHANNELS)
        .map(|c| {
            let ca = &a[(c + shift) % CHANNELS * w..][..w];
            let cb = &b[c * w..][..w];
            let d: f64 = ca
                .iter()
                .zip(cb)
                .map(|(x, y)| (x - y).norm_sqr() as f64)
                .sum();
            let n: f64 = cb.iter().map(|y| y.norm_sqr() as f64).sum();
            (d / n).sqrt()
        })
        .collect()
}

/// Two XB-engines (64 channels each) give the visibilities of one, channel by channel,
/// within the F-engines' dither: every channel of every dump of one run within 1 % of
/// every dump of the other (the dither makes about 0.3 %), while a one-channel
/// misplacement moves every channel by more than 1 %.
#[test]
fn two_x_engines_give_the_visibilities_of_one() {
    let (o1, o2) = (out_dir("one"), out_dir("two"));
    let s1 = run_array(&o1, 1, 27910);
    let s2 = run_array(&o2, 2, 27930);
    // Same shape of run; every dump complete in both. The only loss allowed is an
    // accumulation skipped at the start or the end (the data begin and end in the middle
    // of one: not dumped).
    for s in [&s1, &s2] {
        for (engine, counters) in s["lost"].as_object().unwrap() {
            for (k, v) in counters.as_object().unwrap() {
                assert!(
                    engine.starts_with("xbgpu")
                        && k.ends_with("_skipped_accs")
                        && v.as_u64() <= Some(2),
                    "lost: {engine} {k} {v}\n{s:#}"
                );
            }
        }
        assert_eq!(s["dump_batches"], 8);
        assert_eq!(s["core_plan"]["pinned"], false);
        // The host kernel's drop counters over the run (host-wide, so not asserted zero).
        for k in [
            "backlog_drops",
            "time_squeezes",
            "udp_in_errors",
            "udp_rcvbuf_errors",
        ] {
            assert!(s["kernel_drops"][k].is_u64(), "kernel_drops.{k}\n{s:#}");
        }
    }
    assert_eq!(s1["x_engines"], 1);
    assert_eq!(s1["engines"]["xbgpu"]["name"], "xbgpu");
    assert_eq!(s2["x_engines"], 2);
    let names: Vec<_> = s2["engines"]["xbgpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["xbgpu0", "xbgpu1"]);
    // Each XB-engine sent its share of the data: a dump heap per accumulation.
    for x in s2["engines"]["xbgpu"].as_array().unwrap() {
        assert!(
            x["summary"]["corrprods"][0]["heaps"].as_u64().unwrap() >= 2,
            "{x:#}"
        );
    }
    let (d1, d2) = (dumps(&o1), dumps(&o2));
    assert!(
        d1.len() >= 2 && d2.len() >= 2,
        "{} and {} dumps",
        d1.len(),
        d2.len()
    );
    assert_eq!(s2["dumps_produced"], d2.len());
    for (i, a) in d2.iter().enumerate() {
        for (j, b) in d1.iter().enumerate() {
            let same = channel_differences(a, b, 0);
            let worst = same.iter().cloned().fold(0.0, f64::max);
            assert!(worst < 0.01, "dump {i} of 2 vs {j} of 1: {worst}");
            let moved = channel_differences(a, b, 1);
            let least = moved.iter().cloned().fold(f64::INFINITY, f64::min);
            assert!(least > 0.01, "a channel shift is not seen: {least}");
        }
    }
    let _ = std::fs::remove_dir_all(&o1);
    let _ = std::fs::remove_dir_all(&o2);
}

/// Per channel, the coherence |V01| / sqrt(V00 V11) of pol 0 (baselines in ICD order:
/// (0,0), (0,1), (1,1); product 0), averaged over the channels but DC.
fn mean_coherence(d: &[Complex32]) -> f64 {
    let w = BASELINES * 4;
    let c: f64 = (1..CHANNELS)
        .map(|k| {
            let ch = &d[k * w..][..w];
            let (v00, v01, v11) = (ch[0].re as f64, ch[4].norm() as f64, ch[8].re as f64);
            v01 / (v00 * v11).sqrt()
        })
        .sum();
    c / (CHANNELS - 1) as f64
}

/// One dsim per antenna (`--dsims per-antenna`) feeds the same sky as one dsim for all:
/// the sources are seeded noise keyed by the sample's timestamp, so separate processes
/// still correlate, while each antenna's own noise stays its own (each dsim its own seed).
/// Measured by the baseline's coherence, equal within 5 % in both runs and far from
/// both 0 (a sky that no longer correlates) and 1 (noise repeated across dsims).
#[test]
fn one_dsim_per_antenna_gives_the_sky_of_one_dsim() {
    let (o1, o2) = (out_dir("dsim1"), out_dir("dsims"));
    let s1 = run_array(&o1, 1, 27970);
    let s2 = run_array_with(&o2, 1, 27990, &["--dsims", "per-antenna"]);
    let dsims = s2["engines"]["dsim"]
        .as_array()
        .unwrap_or_else(|| panic!("two dsims: {s2:#}"));
    assert_eq!(dsims.len(), 2, "{s2:#}");
    // Each sent every heap of its two streams.
    for d in dsims {
        assert_eq!(
            d["summary"]["heaps_per_stream"],
            s1["engines"]["dsim"]["summary"]["heaps_per_stream"]
        );
    }
    assert!(s1["engines"]["dsim"].is_object());
    let (d1, d2) = (dumps(&o1), dumps(&o2));
    assert!(d1.len() >= 2 && d2.len() >= 2);
    let c1: Vec<f64> = d1.iter().map(|d| mean_coherence(d)).collect();
    let c2: Vec<f64> = d2.iter().map(|d| mean_coherence(d)).collect();
    eprintln!("coherence: one dsim {c1:?}, per antenna {c2:?}");
    for &a in &c1 {
        assert!(a > 0.05 && a < 0.9, "one dsim: coherence {a}");
        for &b in &c2 {
            assert!((b - a).abs() < 0.05 * a, "per antenna {b} vs one dsim {a}");
        }
    }
    let _ = std::fs::remove_dir_all(&o1);
    let _ = std::fs::remove_dir_all(&o2);
}

/// `--x-engines` values that do not split the channels are refused, naming the option,
/// before any engine starts.
#[test]
fn bad_x_engine_counts_are_refused() {
    for (channels, x) in [("128", "0"), ("128", "3"), ("128", "4"), ("1024", "32")] {
        let out = out_dir(&format!("bad{x}"));
        let o = Command::new(EXE)
            .args(["array", "--backend", "cpu", "--channels", channels])
            .args(["--x-engines", x, "--base-port", "27950"])
            .arg("--output")
            .arg(&out)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "--x-engines {x} was taken");
        assert!(
            err.contains(&format!("--x-engines {x} must be a power of two")),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        // Nothing ran: no engine logs.
        assert!(!out.join("logs").exists());
        let _ = std::fs::remove_dir_all(&out);
    }
}
