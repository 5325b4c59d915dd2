//! The engines' files and sizes: an output that is the input, captures cut short, sizes
//! past the host's memory, chunk memory that cannot be had.

use std::path::{Path, PathBuf};

use clap::Parser;

use super::test_cli::{D, F, X};
use crate::engines::fgpu::FgpuArgs;
use crate::engines::xbgpu::XbgpuArgs;

use super::common::recv::{open_source, spawn_receiver};
use super::common::sizes::MAX_HEAP_BYTES;
use crate::chunk::placement::DigitiserPlacement;
use crate::mem::HostMemory;
use crate::net::recv::{PacketSource, Poll};
use crate::spead::{ids, HeapBuilder};

fn tmp(name: &str) -> PathBuf {
    super::test_cli::tmp("files", name)
}

const C: usize = 256;
const JONES: usize = 65536;

/// `base` (flag, value pairs) without the flags `extra` gives, then `extra`, then `src`.
fn args<'a>(base: &[(&'a str, &'a str)], extra: &[&'a str], src: &'a str) -> Vec<&'a str> {
    let mut v: Vec<&str> = base
        .iter()
        .filter(|(k, _)| !extra.contains(k))
        .flat_map(|&(k, v)| [k, v])
        .filter(|s| !s.is_empty())
        .collect();
    v.extend_from_slice(extra);
    v.push(src);
    v
}

fn fgpu(extra: &[&str], src: &Path) -> FgpuArgs {
    let wb = format!("name=wb,channels={C},dst=127.0.0.1:7150,jones_per_batch={JONES}");
    let base = [
        ("fgpu", ""),
        ("--adc-sample-rate", "1712e6"),
        ("--sync-time", "0"),
        ("--array-size", "1"),
        ("--wideband", &wb),
        ("--backend", "cpu"),
        ("--dither-seed", "3"),
    ];
    let src = src.to_string_lossy();
    F::try_parse_from(args(&base, extra, &src)).unwrap().a
}

fn xbgpu(extra: &[&str], src: &Path) -> XbgpuArgs {
    let (c, sbs, jones) = (C.to_string(), (2 * C).to_string(), JONES.to_string());
    let base = [
        ("xbgpu", ""),
        ("--adc-sample-rate", "1712e6"),
        ("--sync-time", "0"),
        ("--array-size", "1"),
        ("--channels", &c),
        ("--channels-per-substream", &c),
        ("--samples-between-spectra", &sbs),
        ("--jones-per-batch", &jones),
        ("--heaps-per-fengine-per-chunk", "4"),
        ("--send-enabled", ""),
        (
            "--corrprod",
            "name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=1",
        ),
        ("--backend", "cpu"),
    ];
    let src = src.to_string_lossy();
    X::try_parse_from(args(&base, extra, &src)).unwrap().a
}

/// `--send-pcap` naming the input, by any path (itself, `./`, a symlink, a hard link), is
/// refused before the output is created, so the input is still whole; another file is
/// fine. (The output used to be created first, truncating the input.)
#[test]
fn send_pcap_naming_the_input_is_refused() {
    let input = tmp("input.pcap");
    std::fs::write(&input, b"not really a capture, but must survive").unwrap();
    let (sym, hard) = (tmp("sym.pcap"), tmp("hard.pcap"));
    let _ = std::fs::remove_file(&sym);
    let _ = std::fs::remove_file(&hard);
    std::os::unix::fs::symlink(&input, &sym).unwrap();
    std::fs::hard_link(&input, &hard).unwrap();
    let dotted = input
        .parent()
        .unwrap()
        .join(".")
        .join(input.file_name().unwrap());
    for out in [&input, &sym, &hard, &dotted] {
        let out_s = out.to_string_lossy();
        let extra = ["--send-pcap", &*out_s];
        for e in [
            fgpu(&extra, &input).validate().err(),
            xbgpu(&extra, &input).validate().err(),
        ] {
            let e = e.expect("refused").to_string();
            assert!(
                e.contains("--send-pcap") && e.contains("is the input"),
                "{e}"
            );
        }
    }
    assert_eq!(
        std::fs::read(&input).unwrap(),
        b"not really a capture, but must survive"
    );
    let other = tmp("other.pcap");
    let other_s = other.to_string_lossy();
    assert!(fgpu(&["--send-pcap", &other_s], &input).validate().is_ok());
    assert!(xbgpu(&["--send-pcap", &other_s], &input).validate().is_ok());
    for p in [&input, &sym, &hard] {
        std::fs::remove_file(p).ok();
    }
}

/// Drops the last `n` bytes of `path` (a record cut by a copy that stopped early).
fn cut_tail(path: &Path, n: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - n).unwrap();
}

/// A capture whose last record is cut: fgpu and xbgpu process the records before it and
/// finish normally (they exited 1 with no output at all).
#[test]
fn engines_process_a_capture_with_a_cut_last_record() {
    let (dig, feng, xout) = (
        tmp("cut-dsim.pcap"),
        tmp("cut-fgpu.pcap"),
        tmp("cut-x.pcap"),
    );
    super::test_cli::dsim_capture(&dig);
    cut_tail(&dig, 100);
    let feng_s = feng.to_string_lossy();
    let extra = ["--recv-chunk-samples", "262144", "--send-pcap", &feng_s];
    let cfg = fgpu(&extra, &dig).validate().unwrap();
    let f = crate::engines::fgpu::run(&cfg).expect("fgpu reads the good records");
    assert!(f.input_heaps[0] >= 254 && f.input_heaps[1] >= 254, "{f:?}");
    assert!(f.outputs[0].heaps >= 6, "{f:?}");
    cut_tail(&feng, 1000);
    let xout_s = xout.to_string_lossy();
    let cfg = xbgpu(&["--send-pcap", &xout_s], &feng).validate().unwrap();
    let x = crate::engines::xbgpu::run(&cfg).expect("xbgpu reads the good records");
    assert!(x.input_heaps >= 5, "{x:?}");
    for p in [&dig, &feng, &xout] {
        std::fs::remove_file(p).ok();
    }
}

/// A compute call that fails (`--debug-fail-compute-after 2`, standing for a failed GPU
/// call) stops fgpu with an error that says so; it is counted, `device-status` reads fail,
/// and the output capture holds the two batches made before it, whole. xbgpu stops the
/// same way when its correlator fails.
#[test]
fn a_failed_compute_call_stops_the_engine_and_says_so() {
    failed_compute_call("cpu");
}

/// The same on the GPU backends (skipped with a notice without a GPU, required with
/// `GPUCBF_REQUIRE_GPU=1`): the injected failure takes the GPU engines' own error path.
#[test]
fn gpu_a_failed_compute_call_stops_the_engine_and_says_so() {
    if crate::gpu::gpu_test_guard("gpu_a_failed_compute_call_stops_the_engine_and_says_so") {
        failed_compute_call("gpu");
    }
}

fn failed_compute_call(backend: &str) {
    use crate::control::sensors::DEVICE_STATUS;
    let (dig, feng) = (
        tmp(&format!("fault-dsim-{backend}.pcap")),
        tmp(&format!("fault-fgpu-{backend}.pcap")),
    );
    super::test_cli::dsim_capture(&dig);
    let feng_s = feng.to_string_lossy();
    let extra = [
        "--recv-chunk-samples",
        "262144",
        "--send-pcap",
        &feng_s,
        "--debug-fail-compute-after",
        "2",
        "--backend",
        backend,
    ];
    let cfg = fgpu(&extra, &dig).validate().unwrap();
    let before = crate::telemetry::faults::compute_failures();
    let sensors = std::sync::Mutex::new(None);
    let e = crate::engines::fgpu::run_observed(&cfg, &mut |s| {
        *sensors.lock().unwrap() = Some(s.clone());
    })
    .expect_err("the third batch's compute call fails");
    let msg = format!("{e:#}");
    assert!(
        msg.contains("the F-engine stopped: a compute call failed"),
        "{msg}"
    );
    assert!(msg.contains("--debug-fail-compute-after 2"), "{msg}");
    assert!(crate::telemetry::faults::compute_failures() > before);
    let s = sensors
        .lock()
        .unwrap()
        .clone()
        .expect("the sensors were shown");
    assert_eq!(s.get(DEVICE_STATUS).unwrap().value, "fail");
    // The capture is whole and holds the two batches made (one heap each).
    let mut src = crate::net::recv::pcap::PcapSource::open(&feng).unwrap();
    let mut asm = crate::spead::Assembler::new(8);
    let mut heaps = Vec::new();
    while let Some(d) = src.next_datagram().unwrap() {
        asm.push(&d.payload, &mut heaps).unwrap();
    }
    let data: Vec<_> = heaps
        .iter()
        .filter(|h| h.item(ids::FENG_RAW).is_some())
        .collect();
    assert_eq!(data.len(), 2, "{} heaps", heaps.len());
    // Without the fault the same run makes more and ends well; its output feeds xbgpu,
    // whose correlator then fails after its first batch in the same way.
    let cfg = fgpu(
        &[
            "--recv-chunk-samples",
            "262144",
            "--send-pcap",
            &feng_s,
            "--backend",
            backend,
        ],
        &dig,
    )
    .validate()
    .unwrap();
    let f = crate::engines::fgpu::run(&cfg).expect("no fault");
    assert!(f.outputs[0].heaps > 2, "{f:?}");
    let xout = tmp(&format!("fault-x-{backend}.pcap"));
    let xout_s = xout.to_string_lossy();
    let extra = [
        "--send-pcap",
        &xout_s,
        "--debug-fail-compute-after",
        "1",
        "--backend",
        backend,
    ];
    let cfg = xbgpu(&extra, &feng).validate().unwrap();
    let before = crate::telemetry::faults::compute_failures();
    let e = crate::engines::xbgpu::run(&cfg).expect_err("the second batch fails");
    let msg = format!("{e:#}");
    assert!(
        msg.contains("the X-engine stopped: a compute call failed"),
        "{msg}"
    );
    assert!(msg.contains("--debug-fail-compute-after 1"), "{msg}");
    assert!(crate::telemetry::faults::compute_failures() > before);
    assert!(crate::net::recv::pcap::PcapSource::open(&xout).is_ok());
    let cfg = xbgpu(&["--send-pcap", &xout_s, "--backend", backend], &feng)
        .validate()
        .unwrap();
    assert!(crate::engines::xbgpu::run(&cfg).is_ok());
    for p in [&dig, &feng, &xout] {
        std::fs::remove_file(p).ok();
    }
}

/// `--monitor-log FILE` on fgpu and xbgpu: a run writes JSON lines as katgpucbf's monitor
/// (`time`, `type`, `name`): the receive queues with their bounds, the first chunk, the
/// chunks counted, and a last `engine stopped` line (the file is complete when the engine
/// returns).
#[test]
fn engines_write_the_monitor_log() {
    let (dig, feng) = (tmp("mon-dsim.pcap"), tmp("mon-fgpu.pcap"));
    let (flog, xlog) = (tmp("mon-f.jsonl"), tmp("mon-x.jsonl"));
    super::test_cli::dsim_capture(&dig);
    let (feng_s, flog_s, xlog_s) = (
        feng.to_string_lossy(),
        flog.to_string_lossy(),
        xlog.to_string_lossy(),
    );
    let extra = [
        "--recv-chunk-samples",
        "262144",
        "--send-pcap",
        &feng_s,
        "--monitor-log",
        &flog_s,
    ];
    crate::engines::fgpu::run(&fgpu(&extra, &dig).validate().unwrap()).unwrap();
    let cfg = xbgpu(&["--monitor-log", &xlog_s], &feng)
        .validate()
        .unwrap();
    crate::engines::xbgpu::run(&cfg).unwrap();
    for log in [&flog, &xlog] {
        let text = std::fs::read_to_string(log).unwrap();
        let recs: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
            .collect();
        let find = |ty: &'static str, name: &'static str| {
            recs.iter()
                .filter(move |r| r["type"] == ty && r["name"] == name)
        };
        assert!(recs
            .iter()
            .all(|r| r["time"].as_f64().is_some_and(|t| t >= 0.0)));
        let ready = find("qsize", "recv-ready").next().expect("recv-ready");
        assert_eq!(ready["maxsize"], 4);
        assert!(find("qsize", "recv-free").count() >= 2);
        assert_eq!(find("state", "recv").next().unwrap()["state"], "receiving");
        let chunks = find("count", "chunks").next_back().expect("chunks counted");
        assert!(chunks["value"].as_u64().unwrap() >= 2, "{chunks}");
        let last = recs.last().unwrap();
        assert_eq!(
            (&last["name"], &last["state"]),
            (&"engine".into(), &"stopped".into())
        );
    }
    for p in [&dig, &feng, &flog, &xlog] {
        std::fs::remove_file(p).ok();
    }
}

/// A directory given as the input is named as such, not parsed as endpoints.
#[test]
fn a_directory_input_is_named() {
    let dir = std::env::temp_dir();
    let e = open_source(
        &dir.to_string_lossy(),
        std::net::Ipv4Addr::UNSPECIFIED,
        None,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains(&*dir.to_string_lossy()) && e.contains("not a regular file"),
        "{e}"
    );
}

const HOST_64G: Option<HostMemory> = Some(HostMemory {
    bytes: 64 << 30,
    source: "MemTotal",
});

/// Sizes whose buffers cannot exist are refused by name before anything is allocated
/// (they aborted: "memory allocation of … bytes failed"). Checked against a 64 GiB host,
/// and against this host with sizes past any host's memory.
#[test]
fn sizes_past_memory_are_refused_by_name() {
    let src = Path::new("x.pcap");
    // F-engine output heaps past what a heap can be.
    let wb = "name=wb,channels=256,dst=127.0.0.1:7150,jones_per_batch=4294967296";
    let a = fgpu(&["--wideband", wb], src);
    let e = a.validate().unwrap_err().to_string();
    assert!(
        e.starts_with("wb jones_per_batch=4294967296 makes output heaps"),
        "{e}"
    );
    // Many substreams keep the heaps small; the batch buffers still do not fit.
    let dsts = "name=wb,channels=65536,dst=127.0.0.1+63:7150,jones_per_batch=4294967296";
    let a = fgpu(&["--wideband", dsts], src);
    let outputs = a.wideband.clone();
    let e = a.check_sizes(&outputs, HOST_64G).unwrap_err().to_string();
    assert!(
        e.starts_with("wb jones_per_batch=4294967296 needs at least 144.0 GiB of memory"),
        "{e}"
    );
    // Receive chunks of 2^40 samples per pol.
    let a = fgpu(&["--recv-chunk-samples", "1099511627776"], src);
    let e = a
        .check_sizes(&a.wideband, HOST_64G)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("--recv-chunk-samples 1099511627776 needs at least 10.")
            && e.contains("4 receive chunks of 2.5 TiB (1 for --max-delay-diff 1048576")
            && e.contains("this host's 64.0 GiB (MemTotal)"),
        "{e}"
    );
    // An overlap (--max-delay-diff) of 2^40 samples: 2^15 more chunks of 2^25 held.
    let a = fgpu(&["--max-delay-diff", "1099511627776"], src);
    let e = a
        .check_sizes(&a.wideband, HOST_64G)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("32772 receive chunks of ")
            && e.contains("(32769 for --max-delay-diff 1099511627776"),
        "{e}"
    );
    let e = fgpu(&["--recv-chunk-samples", &(1u64 << 56).to_string()], src)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("--recv-chunk-samples 72057594037927936 needs"),
        "{e}"
    );
    let e = fgpu(&["--recv-packet-samples", &(1u64 << 40).to_string()], src)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("--recv-packet-samples 1099511627776 makes digitiser heaps"),
        "{e}"
    );
    // The defaults fit a small host.
    let small = Some(HostMemory {
        bytes: 2 << 30,
        source: "MemTotal",
    });
    let a = fgpu(&[], src);
    assert!(a.check_sizes(&a.wideband, small).is_ok());
    // Two output chunks of 2^30 Jones (2^14 batches each) are 8 GiB: not on that host.
    let a = fgpu(&["--send-chunk-jones", "1073741824"], src);
    let e = a.check_sizes(&a.wideband, small).unwrap_err().to_string();
    assert!(
        e.starts_with("--send-chunk-jones 1073741824 needs at least 8.0 GiB")
            && e.contains("two output chunks"),
        "{e}"
    );

    // xbgpu: a million batches per chunk.
    let x = xbgpu(&["--heaps-per-fengine-per-chunk", "1000000"], src);
    let shape = crate::compute::xengine::XShape::new(1, C, JONES / C).unwrap();
    let e = x.check_sizes(&shape, HOST_64G).unwrap_err().to_string();
    assert!(
        e.starts_with("--heaps-per-fengine-per-chunk 1000000 needs at least 732.5 GiB"),
        "{e}"
    );
    let e = xbgpu(&["--heaps-per-fengine-per-chunk", "10000000000000"], src)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("--heaps-per-fengine-per-chunk 10000000000000 needs"),
        "{e}"
    );
    assert!(xbgpu(&[], src).check_sizes(&shape, small).is_ok());
    let e = xbgpu(&["--jones-per-batch", "4294967296"], src)
        .check_sizes(&shape, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("--jones-per-batch 4294967296 makes F-engine heaps"),
        "{e}"
    );

    // dsim: a replay period of 2^40 samples.
    let dsim = |extra: &[&str]| {
        let mut v = vec!["dsim", "--adc-sample-rate", "1712e6"];
        v.extend_from_slice(extra);
        v.push("127.0.0.1:7148");
        D::try_parse_from(v).unwrap().a
    };
    let e = dsim(&["--period", "1099511627776"])
        .check_sizes(HOST_64G)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("--period 1099511627776 needs at least 1.3 TiB"),
        "{e}"
    );
    assert!(dsim(&["--period", "1099511627776", "--heaps", "64"])
        .check_sizes(HOST_64G)
        .is_ok());
    let e = dsim(&["--period", &(1u64 << 58).to_string()])
        .validate()
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--period 288230376151711744 needs"), "{e}");
    let e = dsim(&["--heap-samples", &(1u64 << 40).to_string()])
        .validate()
        .unwrap_err()
        .to_string();
    assert!(e.contains("makes digitiser heaps"), "{e}");
    assert!(dsim(&[]).check_sizes(small).is_ok());
    assert_eq!(MAX_HEAP_BYTES, u32::MAX as u128);
}

/// One digitiser heap (pol 0, timestamp 0) as a single packet.
struct OneHeap(Option<Vec<u8>>);

impl PacketSource for OneHeap {
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8])) -> std::io::Result<Poll> {
        Ok(match self.0.take() {
            Some(p) => {
                f(&p);
                Poll::Packets(1)
            }
            None => Poll::End,
        })
    }
}

/// Chunk memory that cannot be mapped stops the receiver with an error that names the
/// chunk (it aborted the process through `handle_alloc_error`).
#[test]
fn chunk_memory_that_cannot_be_had_is_an_error() {
    let samples = vec![0u8; 5120];
    let heap = HeapBuilder::new(1)
        .immediate(ids::TIMESTAMP, 0)
        .immediate(ids::DIGITISER_ID, 0)
        .immediate(ids::DIGITISER_STATUS, 0)
        .addressed(ids::ADC_SAMPLES, &samples);
    let packet = heap.packets(8872, true).unwrap()[0].to_bytes();
    // 2^48 heaps of 5120 bytes per pol: exabytes, which no mapping can give.
    let placement = DigitiserPlacement::new(4096, 10, 1 << 60).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(4);
    let (_back_tx, back_rx) = crossbeam_channel::bounded(4);
    let h = spawn_receiver(Box::new(OneHeap(Some(packet))), placement, tx, back_rx);
    assert_eq!(rx.iter().count(), 0);
    let e = h.join().unwrap().unwrap_err().to_string();
    assert!(
        e.contains("cannot allocate a chunk of 562949953421312 heaps × 5120 bytes"),
        "{e}"
    );
}

/// A katcp or Prometheus port already taken is named with its option (the error said only
/// "Address already in use").
#[test]
fn ports_in_use_are_named() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let input = tmp("ports-input.pcap");
    // An empty Ethernet capture: the global header alone.
    let mut header = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
    header.extend_from_slice(&[0; 8]);
    header.extend_from_slice(&[0xff, 0xff, 0, 0, 1, 0, 0, 0]);
    std::fs::write(&input, header).unwrap();
    let out = tmp("ports-out.pcap");
    let out_s = out.to_string_lossy();
    let want = |option: &str, e: String| {
        assert!(
            e.contains(&format!("{option} {port}: listening on TCP 0.0.0.0:{port}"))
                && e.contains("Address already in use"),
            "{e}"
        );
    };
    let cfg = xbgpu(&["--katcp-port", &port, "--send-pcap", &out_s], &input)
        .validate()
        .unwrap();
    want(
        "--katcp-port",
        crate::engines::xbgpu::run(&cfg).unwrap_err().to_string(),
    );
    let cfg = xbgpu(&["--prometheus-port", &port, "--send-pcap", &out_s], &input)
        .validate()
        .unwrap();
    want(
        "--prometheus-port",
        crate::engines::xbgpu::run(&cfg).unwrap_err().to_string(),
    );
    let cfg = fgpu(&["--prometheus-port", &port, "--send-pcap", &out_s], &input)
        .validate()
        .unwrap();
    want(
        "--prometheus-port",
        crate::engines::fgpu::run(&cfg).unwrap_err().to_string(),
    );
    let dsim_pcap = tmp("ports-dsim.pcap");
    for option in ["--katcp-port", "--prometheus-port"] {
        let d = D::try_parse_from([
            "dsim",
            "--adc-sample-rate",
            "1712e6",
            "--heaps",
            "4",
            "--katcp-host",
            "0.0.0.0",
            option,
            &port,
            "--pcap",
            &dsim_pcap.to_string_lossy(),
            "127.0.0.1:7148",
        ])
        .unwrap()
        .a;
        want(
            option,
            crate::engines::dsim::run(&d.validate().unwrap())
                .unwrap_err()
                .to_string(),
        );
    }
    std::fs::remove_file(&dsim_pcap).ok();
    drop(taken);
    std::fs::remove_file(&input).ok();
    std::fs::remove_file(&out).ok();
}

/// A capture whose header gives the wrong link type (an Ethernet capture marked 101, raw
/// IP) makes fgpu fail naming the file and the link type (it exited 0 with no output).
#[test]
fn a_capture_of_the_wrong_link_type_is_an_error() {
    let (dig, out) = (tmp("link101-dsim.pcap"), tmp("link101-out.pcap"));
    let d = D::try_parse_from([
        "dsim",
        "--adc-sample-rate",
        "1712e6",
        "--heaps",
        "16",
        "--pcap",
        &dig.to_string_lossy(),
        "127.0.0.1:7148",
        "127.0.0.1:7149",
    ])
    .unwrap()
    .a;
    crate::engines::dsim::run(&d.validate().unwrap()).unwrap();
    let mut bytes = std::fs::read(&dig).unwrap();
    let big_endian = bytes[..4] == [0xa1, 0xb2, 0xc3, 0xd4];
    let link = if big_endian {
        101u32.to_be_bytes()
    } else {
        101u32.to_le_bytes()
    };
    bytes[20..24].copy_from_slice(&link);
    std::fs::write(&dig, bytes).unwrap();
    let out_s = out.to_string_lossy();
    let cfg = fgpu(&["--send-pcap", &out_s], &dig).validate().unwrap();
    let e = format!("{:#}", crate::engines::fgpu::run(&cfg).unwrap_err());
    assert!(
        e.contains(&*dig.to_string_lossy()) && e.contains("link type 101"),
        "{e}"
    );
    for p in [&dig, &out] {
        std::fs::remove_file(p).ok();
    }
}
