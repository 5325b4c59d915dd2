//! `gpucbf replay` against the engines (CPU backend, and the GPU backends where a GPU is): a dsim capture is replayed clean and
//! with seeded faults into fgpu, and fgpu's output clean and with faults into xbgpu (the
//! replayed stream written with `--pcap-out`, which the engines read as they read UDP, so
//! that the runs are exact). Each engine's counters equal what the replay says it injected;
//! every output heap that no fault touched is byte-identical to the clean run's, and every
//! touched one is skipped or flagged as the ICD says (fgpu: not sent; xbgpu: MISSING).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::Parser;
use gpucbf::apps::replay::{self, Injected, ReplayArgs};
use gpucbf::engines::dsim::DsimArgs;
use gpucbf::engines::fgpu::FgpuArgs;
use gpucbf::engines::xbgpu::XbgpuArgs;
use gpucbf::net::recv::pcap::PcapSource;
use gpucbf::spead::{ids, Assembler};

#[derive(Parser)]
struct D {
    #[command(flatten)]
    a: DsimArgs,
}
#[derive(Parser)]
struct F {
    #[command(flatten)]
    a: FgpuArgs,
}
#[derive(Parser)]
struct X {
    #[command(flatten)]
    a: XbgpuArgs,
}
#[derive(Parser)]
struct R {
    #[command(flatten)]
    a: ReplayArgs,
}

const C: usize = 256;
const JONES: usize = 65536;
/// ADC samples per output batch: JONES / C spectra of 2C samples.
const BATCH: u64 = (JONES / C * 2 * C) as u64;
const TAPS: u64 = 16;
const HEAP: u64 = 4096;

fn dir(backend: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpucbf-replay-{backend}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Replays `input` into `out` with `faults` (flags); the injected log.
fn replay(input: &Path, out: &Path, faults: &[&str]) -> Injected {
    let inj = out.with_extension("json");
    let mut argv = vec!["replay".to_string(), s(input)];
    argv.extend(["--pcap-out", &s(out), "--injected", &s(&inj)].map(String::from));
    argv.extend(faults.iter().map(|f| f.to_string()));
    let args = R::try_parse_from(&argv).unwrap().a;
    let summary = replay::run(&args).unwrap();
    let log: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&inj).unwrap()).unwrap();
    assert_eq!(log["packets_out"], summary.packets_out);
    assert_eq!(summary.send_errors, 0);
    // The Rust log and its JSON agree; the tests read the Rust one.
    let drops = log["drop"]["count"].as_u64().unwrap();
    let injected = rerun_log(&args);
    assert_eq!(drops, injected.drop.count);
    injected
}

/// The injected log of `args` again, straight from the injector (the same seed gives the
/// same faults).
fn rerun_log(args: &ReplayArgs) -> Injected {
    let mut inj = replay::Injector::new(args.faults().unwrap());
    let mut src = PcapSource::open(&args.pcap).unwrap();
    let (mut out, mut i) = (Vec::new(), 0);
    while let Some(d) = src.next_datagram().unwrap() {
        inj.push(i, 0.0, d.dst, d.payload, &mut out);
        i += 1;
    }
    inj.finish(&mut out)
}

/// The data heaps of a capture by (timestamp, frequency or digitiser id): their payloads.
fn heaps(path: &Path) -> BTreeMap<(u64, u64), Vec<u8>> {
    let mut src = PcapSource::open(path).unwrap();
    let mut asm = Assembler::new(64);
    let mut out = Vec::new();
    while let Some(d) = src.next_datagram().unwrap() {
        let _ = asm.push(&d.payload, &mut out);
    }
    asm.flush(&mut out);
    out.into_iter()
        .filter_map(|h| {
            let ts = h.u64_item(ids::TIMESTAMP)?;
            let sub = h.u64_item(ids::FREQUENCY).or(h.u64_item(ids::DIGITISER_ID));
            Some(((ts, sub.unwrap_or(0)), h.payload))
        })
        .collect()
}

fn fgpu(backend: &str, input: &Path, out: &Path) -> gpucbf::engines::fgpu::FgpuSummary {
    let wb = format!("name=wb,channels={C},dst=127.0.0.1:7150,jones_per_batch={JONES}");
    let argv = [
        "fgpu",
        "--adc-sample-rate",
        "1712e6",
        "--sync-time",
        "0",
        "--array-size",
        "1",
        "--wideband",
        &wb,
        "--backend",
        backend,
        "--dither-seed",
        "3",
        "--recv-chunk-samples",
        "262144",
        "--send-pcap",
        &s(out),
        &s(input),
    ];
    let cfg = F::try_parse_from(argv).unwrap().a.validate().unwrap();
    gpucbf::engines::fgpu::run(&cfg).unwrap()
}

fn xbgpu(backend: &str, input: &Path, out: &Path) -> gpucbf::engines::xbgpu::XbgpuSummary {
    let (c, sbs, jones) = (C.to_string(), (2 * C).to_string(), JONES.to_string());
    let argv = [
        "xbgpu",
        "--adc-sample-rate",
        "1712e6",
        "--sync-time",
        "0",
        "--array-size",
        "1",
        "--channels",
        &c,
        "--channels-per-substream",
        &c,
        "--samples-between-spectra",
        &sbs,
        "--jones-per-batch",
        &jones,
        "--heaps-per-fengine-per-chunk",
        "4",
        "--send-enabled",
        "--corrprod",
        "name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=1",
        "--backend",
        backend,
        "--send-pcap",
        &s(out),
        &s(input),
    ];
    let cfg = X::try_parse_from(argv).unwrap().a.validate().unwrap();
    gpucbf::engines::xbgpu::run(&cfg).unwrap()
}

/// Timestamps of the heaps a fault log names.
fn stamps(logs: &[&replay::FaultLog]) -> BTreeSet<u64> {
    logs.iter()
        .flat_map(|l| l.packets.iter().filter_map(|h| h.timestamp))
        .collect()
}

fn rejected(m: &BTreeMap<String, u64>, k: &str) -> u64 {
    m.get(k).copied().unwrap_or(0)
}

#[test]
fn fgpu_and_xbgpu_count_and_confine_what_replay_injects() {
    count_and_confine("cpu");
}

/// The same on the GPU backends: skipped with a notice without a GPU, required with
/// `GPUCBF_REQUIRE_GPU=1`.
#[test]
fn gpu_fgpu_and_xbgpu_count_and_confine_what_replay_injects() {
    if gpucbf::gpu::gpu_test_guard("gpu_fgpu_and_xbgpu_count_and_confine_what_replay_injects") {
        count_and_confine("gpu");
    }
}

fn count_and_confine(backend: &str) {
    let d = dir(backend);
    let dig = d.join("dig.pcap");
    let dsim = D::try_parse_from([
        "dsim",
        "--adc-sample-rate",
        "1712e6",
        "--heaps",
        "512",
        "--dither-seed",
        "1",
        "--signals",
        "cw(0.2, 300e6) + wgn(0.05, 1);",
        "--pcap",
        &s(&dig),
        "127.0.0.1:7148",
        "127.0.0.1:7149",
    ])
    .unwrap()
    .a;
    gpucbf::engines::dsim::run(&dsim.validate().unwrap()).unwrap();

    // fgpu: the clean replay is the capture itself; with faults, each counter is the log's.
    let (d0, d1) = (d.join("d0.pcap"), d.join("d1.pcap"));
    let clean = replay(&dig, &d0, &[]);
    assert_eq!(clean.packets_out, clean.packets_in);
    assert_eq!(heaps(&d0), heaps(&dig));
    let faults = [
        "--drop",
        "0.01",
        "--truncate",
        "0.01",
        "--duplicate",
        "0.02",
        "--corrupt",
        "0.01",
        "--reorder",
        "4",
        "--seed",
        "5",
    ];
    let inj = replay(&dig, &d1, &faults);
    for l in [
        &inj.drop,
        &inj.truncate,
        &inj.duplicate,
        &inj.corrupt,
        &inj.reorder,
    ] {
        assert!(l.count > 0, "the seed injects every fault: {inj:?}");
    }
    let (f0, f1) = (d.join("f0.pcap"), d.join("f1.pcap"));
    let s0 = fgpu(backend, &d0, &f0);
    let s1 = fgpu(backend, &d1, &f1);
    assert!(
        s0.recv_rejected.is_empty() && s0.input_missing_heaps == [0, 0],
        "{s0:?}"
    );
    assert_eq!(
        rejected(&s1.recv_rejected, "malformed_packets"),
        inj.truncate.count,
        "{s1:?}"
    );
    assert_eq!(
        rejected(&s1.recv_rejected, "duplicate_packets"),
        inj.duplicate.count,
        "{s1:?}"
    );
    assert_eq!(
        rejected(&s1.recv_rejected, "too_old_heaps"),
        0,
        "reordering by 4 is in time"
    );
    // One packet per digitiser heap: a dropped or cut packet is a missing heap of its pol,
    // except before the first or after the last heap the engine received at all.
    let lost = |pol: u64| -> BTreeSet<u64> {
        [&inj.drop, &inj.truncate]
            .iter()
            .flat_map(|l| l.packets.iter())
            .filter(|h| h.stream == Some(pol))
            .filter_map(|h| h.timestamp)
            .collect()
    };
    let all_lost = stamps(&[&inj.drop, &inj.truncate]);
    let all: BTreeSet<u64> = heaps(&dig).keys().map(|k| k.0).collect();
    assert_eq!(all.len(), 512);
    let received: Vec<u64> = all
        .iter()
        .copied()
        .filter(|t| !(lost(0).contains(t) && lost(1).contains(t)))
        .collect();
    let (lo, hi) = (received[0], *received.last().unwrap());
    for pol in 0..2u64 {
        let want = lost(pol).iter().filter(|&&t| t > lo && t < hi).count() as u64;
        assert_eq!(
            s1.input_missing_heaps[pol as usize], want,
            "pol {pol}: {s1:?}"
        );
    }
    assert_eq!(s0.input_heaps[0] + s0.input_heaps[1], 1024);
    assert_eq!(
        s1.input_heaps[0] + s1.input_heaps[1],
        1024 - (lost(0).len() + lost(1).len()) as u64,
        "{s1:?}"
    );
    // Output heaps: a batch whose input span (the PFB's taps before it, a heap's slack
    // each side) holds no faulty heap is byte-identical; one that lost input is not sent.
    let (h0, h1) = (heaps(&f0), heaps(&f1));
    assert!(h0.len() >= 8, "{s0:?}");
    let corrupt = stamps(&[&inj.corrupt]);
    let span = |t: u64| {
        (
            t.saturating_sub(TAPS * 2 * C as u64 + HEAP),
            t + BATCH + HEAP,
        )
    };
    let mut skipped = 0;
    for (key, payload) in &h0 {
        let (a, b) = span(key.0);
        let hit = |set: &BTreeSet<u64>| set.iter().any(|&t| t + HEAP > a && t < b);
        match h1.get(key) {
            Some(p) if p == payload => {}
            Some(_) => assert!(hit(&corrupt), "batch {key:?} changed with no fault near it"),
            None => {
                assert!(
                    hit(&all_lost),
                    "batch {key:?} skipped with no lost heap near it"
                );
                skipped += 1;
            }
        }
        if !hit(&all_lost) && !hit(&corrupt) {
            assert_eq!(
                h1.get(key),
                Some(payload),
                "untouched batch {key:?} differs"
            );
        }
    }
    assert!(skipped > 0, "the drops cost some batches");
    assert_eq!(h1.keys().filter(|k| !h0.contains_key(k)).count(), 0);
    assert_eq!(
        s1.outputs[0].skipped_heaps - s0.outputs[0].skipped_heaps,
        skipped as u64,
        "{s1:?}"
    );

    // xbgpu on fgpu's clean output: F-engine heaps are many packets each.
    let (e0, e1) = (d.join("e0.pcap"), d.join("e1.pcap"));
    replay(&f0, &e0, &[]);
    let faults = [
        "--drop",
        "0.02",
        "--truncate",
        "0.01",
        "--duplicate",
        "0.02",
        "--corrupt",
        "0.02",
        "--reorder",
        "4",
        "--seed",
        "9",
    ];
    let inj = replay(&f0, &e1, &faults);
    let (x0, x1) = (d.join("x0.pcap"), d.join("x1.pcap"));
    let t0 = xbgpu(backend, &e0, &x0);
    let t1 = xbgpu(backend, &e1, &x1);
    // fgpu's descriptor heaps are metadata heaps; a duplicate of one is one more (not a
    // duplicate packet: it is rejected before placement), a lost one one less.
    let meta =
        |l: &replay::FaultLog| l.packets.iter().filter(|h| h.timestamp.is_none()).count() as u64;
    let meta0 = rejected(&t0.recv_rejected, "metadata_heaps");
    assert!(meta0 >= 1, "{t0:?}");
    assert_eq!(t0.recv_rejected.len(), 1, "{t0:?}");
    assert_eq!(t0.input_missing_heaps, 0, "{t0:?}");
    assert_eq!(
        rejected(&t1.recv_rejected, "metadata_heaps"),
        meta0 + meta(&inj.duplicate) - meta(&inj.drop) - meta(&inj.truncate),
        "{t1:?}"
    );
    assert_eq!(
        rejected(&t1.recv_rejected, "malformed_packets"),
        inj.truncate.count,
        "{t1:?}"
    );
    assert_eq!(
        rejected(&t1.recv_rejected, "duplicate_packets"),
        inj.duplicate.count - meta(&inj.duplicate),
        "{t1:?}"
    );
    // A heap that lost packets arrives incomplete (some of it came) or not at all.
    let lost: BTreeSet<u64> = stamps(&[&inj.drop, &inj.truncate]);
    assert_eq!(
        t1.input_incomplete_heaps + t1.input_missing_heaps,
        lost.len() as u64,
        "{t1:?}"
    );
    let (g0, g1) = (heaps(&x0), heaps(&x1));
    assert!(g0.len() >= 8);
    let corrupt = stamps(&[&inj.corrupt]);
    let missing = {
        let mut m = Vec::new();
        for _ in 0..g0.values().next().unwrap().len() / 8 {
            m.extend_from_slice(&i32::MIN.to_le_bytes());
            m.extend_from_slice(&1i32.to_le_bytes());
        }
        m
    };
    let mut flagged = 0;
    for (key, payload) in &g0 {
        // One F-engine heap per dump (one antenna, one batch per accumulation).
        match g1.get(key) {
            Some(p) if p == payload => assert!(!lost.contains(&key.0), "dump {key:?}"),
            Some(p) if lost.contains(&key.0) => {
                assert_eq!(p, &missing, "dump {key:?} lost input: flagged MISSING");
                flagged += 1;
            }
            Some(_) => assert!(
                corrupt.contains(&key.0),
                "dump {key:?} changed with no fault"
            ),
            None => assert!(lost.contains(&key.0), "dump {key:?} skipped with no fault"),
        }
    }
    // Every dump whose heap lost packets is flagged or not sent, and some are.
    let dropped = g0.keys().filter(|k| !g1.contains_key(k)).count();
    let touched = g0.keys().filter(|k| lost.contains(&k.0)).count();
    assert_eq!(flagged + dropped, touched);
    assert!(touched > 0 && !corrupt.is_empty(), "{inj:?}");
    std::fs::remove_dir_all(&d).ok();
}
