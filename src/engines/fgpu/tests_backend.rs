//! The engine's channelisers over the compute backends (`backend.rs`): backend selection,
//! packed submission against the decoded path on the CPU, and the GPU channelisers (several
//! batches in flight) against the CPU ones.

use super::backend::*;
use super::channelizer::Channelizer;
use super::config::{FgpuArgs, FgpuConfig};
use super::control::{OutputControl, SharedControl};
use super::spec::{parse_narrowband, parse_wideband};
use crate::compute::fengine::sample_noise;
use crate::compute::fengine::CpuBackend;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: FgpuArgs,
}

fn ctl() -> SharedControl {
    std::sync::Arc::new(std::sync::Mutex::new(OutputControl::new(1024, 1.0)))
}

fn args(backend: &str, dither_seed: u64) -> Result<FgpuArgs, clap::Error> {
    Cli::try_parse_from([
        "fgpu",
        "--adc-sample-rate",
        "1712e6",
        "--sync-time",
        "0",
        "--wideband",
        "name=wb,channels=1024,dst=127.0.0.1:7148",
        "--dither-seed",
        &dither_seed.to_string(),
        "--backend",
        backend,
        "x.pcap",
    ])
    .map(|c| c.args)
}

/// The configuration of `fgpu --backend backend --dither-seed dither_seed` (panics where it
/// is refused).
fn cfg(backend: &str, dither_seed: u64) -> FgpuConfig {
    args(backend, dither_seed).unwrap().validate().unwrap()
}

/// `--backend gpu` builds the GPU channeliser where there is a GPU and is a clear error
/// (before anything starts) where there is none; `cpu` and `auto` always work; other names
/// are refused.
#[test]
fn backend_selection() {
    let spec = parse_wideband("name=wb,channels=1024,dst=127.0.0.1:7148").unwrap();
    assert!(make_channelizer(&spec, &cfg("cpu", 1), ctl()).is_ok());
    assert!(make_channelizer(&spec, &cfg("auto", 1), ctl()).is_ok());
    match args("gpu", 1).unwrap().validate() {
        Ok(gpu) => {
            assert!(
                crate::gpu::gpu_available(),
                "--backend gpu without a GPU must fail"
            );
            let chan = make_channelizer(&spec, &gpu, ctl());
            assert!(chan.is_ok(), "{:?}", chan.err());
        }
        Err(e) => {
            assert!(!crate::gpu::gpu_available(), "{e}");
            assert!(e.to_string().contains("no usable CUDA device"), "{e}");
        }
    }
    let e = args("tpu", 1).expect_err("--backend tpu").to_string();
    assert!(
        e.contains("--backend") && e.contains("auto, cpu, gpu"),
        "{e}"
    );
}

/// `fgpu --backend gpu --narrowband ...`: the GPU channeliser (GpuNarrowband) gives the
/// CPU channeliser's batch on the same input (≥ 99.9 % of values within 1 LSB), for
/// discard and no-discard outputs.
#[test]
fn narrowband_gpu_channelizer_matches_cpu() {
    if !crate::gpu::gpu_test_guard("narrowband_gpu_channelizer_matches_cpu") {
        return;
    }
    for extra in ["", ",pass_bandwidth=40e6"] {
        let spec = parse_narrowband(&format!(
            "name=nb,channels=256,centre_frequency=300e6,decimation=8,jones_per_batch=8192,dst=127.0.0.1:7148{extra}"
        ))
        .unwrap();
        let ctl = || std::sync::Arc::new(std::sync::Mutex::new(OutputControl::new(256, 0.5)));
        let mut cpu = make_channelizer(&spec, &cfg("cpu", 7), ctl()).unwrap();
        let mut gpu = make_channelizer(&spec, &cfg("gpu", 7), ctl()).unwrap();
        let batch_ts = 1u64 << 36;
        let ranges = cpu.input_range(batch_ts).unwrap().unwrap();
        assert_eq!(Some(ranges), gpu.input_range(batch_ts).unwrap());
        let input = [0, 1]
            .map(|p| sample_noise((ranges[p].1 - ranges[p].0) as usize, 0x1234 + 2 * p as u64));
        let len = 256 * spec.spectra_per_heap() * 4;
        let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
        let sa = cpu
            .process(batch_ts, [&input[0], &input[1]], &mut a)
            .unwrap();
        let sb = gpu
            .process(batch_ts, [&input[0], &input[1]], &mut b)
            .unwrap();
        let close = within_1_lsb(&a, &b);
        assert!(close as f64 >= 0.999 * len as f64, "{extra}: {close}/{len}");
        assert!(a.iter().any(|&v| v != 0), "{extra}: all-zero output");
        for p in 0..2 {
            assert!(
                sa[p].abs_diff(sb[p]) <= 2 + len as u64 / 1000,
                "{sa:?} {sb:?}"
            );
        }
    }
}

/// How many int8 output values of `a` are within 1 LSB of `b`'s.
fn within_1_lsb(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .zip(b)
        .filter(|(p, q)| (**p as i8 as i32 - **q as i8 as i32).abs() <= 1)
        .count()
}

/// Controls whose delay model makes pol 0's coarse delay step several times inside
/// every batch (so a batch is several blocks) and keeps pol 1's constant.
fn stepping_ctl(channels: usize, gain: f32, unit: f64) -> SharedControl {
    let mut c = OutputControl::new(channels, gain);
    c.push_model(
        0,
        crate::compute::fengine::LinearDelayModel {
            start: 0,
            delay: 37.0 * unit,
            delay_rate: 3e-4,
            phase: 0.5,
            phase_rate: 1e-3,
        },
    );
    c.push_model(
        1,
        crate::compute::fengine::LinearDelayModel {
            start: 0,
            delay: 3.0 * unit,
            delay_rate: 0.0,
            phase: -0.2,
            phase_rate: 0.0,
        },
    );
    std::sync::Arc::new(std::sync::Mutex::new(c))
}

/// One batch's input per pol: the decoded range, and the range packed after `skip`
/// extra samples.
fn batch_input(
    ranges: [(u64, u64); 2],
    skip: [usize; 2],
    seed: u64,
) -> ([Vec<i16>; 2], [Vec<u8>; 2]) {
    let dec = [0, 1].map(|p| {
        let (lo, hi) = ranges[p];
        sample_noise((hi - lo) as usize, seed + p as u64)
    });
    let packed = [0, 1].map(|p| {
        let mut all = sample_noise(skip[p], 99);
        all.extend_from_slice(&dec[p]);
        let mut b = vec![0u8; crate::spead::bitpack::packed_len(all.len(), 10)];
        crate::spead::bitpack::pack(&all, 10, &mut b);
        b
    });
    (dec, packed)
}

/// Packed submission (submit_packed / complete) gives what the decoded path (process)
/// gives, on the CPU backend: a coarse delay stepping inside the batch (several blocks
/// per batch), input that starts off the range (skip), one batch in flight at a time.
#[test]
fn packed_submission_matches_process_on_cpu() {
    let spec =
        parse_wideband("name=wb,channels=256,jones_per_batch=8192,dst=127.0.0.1:7148").unwrap();
    let cfg = fconfig(&spec, &cfg("cpu", 7));
    let mut dec = BackendChannelizer::new(
        CpuBackend::new(cfg.clone()).unwrap(),
        10,
        stepping_ctl(256, 0.5, 1.0),
    );
    let mut pk = BackendChannelizer::new(
        CpuBackend::new(cfg.clone()).unwrap(),
        10,
        stepping_ctl(256, 0.5, 1.0),
    )
    .with_packed_input(true);
    assert!(!dec.pipelined() && pk.pipelined());
    let len = cfg.output_len(spec.spectra_per_heap());
    let mut got = vec![0u8; len];
    assert!(pk.complete(&mut got, true).unwrap().is_none());
    let step = spec.batch_step();
    for (i, skip) in [[3usize, 0], [7, 5], [0, 1]].into_iter().enumerate() {
        let ts = (1u64 << 30) + i as u64 * step;
        let ranges = dec.input_range(ts).unwrap().unwrap();
        assert_eq!(Some(ranges), pk.input_range(ts).unwrap());
        let (d, p) = batch_input(ranges, skip, 10 * i as u64);
        let mut want = vec![0u8; len];
        let sat = dec.process(ts, [&d[0], &d[1]], &mut want).unwrap();
        pk.submit_packed(ts, [&p[0], &p[1]], skip).unwrap();
        assert_eq!(pk.in_flight(), 1);
        // One in flight is all a backend without depth holds.
        assert!(pk.submit_packed(ts + step, [&p[0], &p[1]], skip).is_err());
        let c = pk.complete(&mut got, false).unwrap().unwrap();
        assert_eq!((c.batch_ts, c.clipped), (ts, sat));
        assert_eq!(got, want, "batch {i}");
        assert!(want.iter().any(|&v| v != 0));
        assert_eq!(pk.in_flight(), 0);
    }
    let segs = dec
        .segments(&dec.control.lock().unwrap().clone(), 0, 1 << 30)
        .unwrap();
    assert!(
        segs.len() >= 3,
        "the delay model should cut batches: {}",
        segs.len()
    );
}

/// `fgpu --backend gpu` channelisers (packed input, several batches in flight on the
/// GPU) give the CPU channeliser's batches on the same input (≥ 99.9 % of values within
/// 1 LSB, saturation counts within 0.1 %), wideband and narrowband (discard and
/// no-discard), with coarse delays stepping inside batches and input off the range.
#[test]
fn gpu_channelizer_in_flight_matches_cpu() {
    if !crate::gpu::gpu_test_guard("gpu_channelizer_in_flight_matches_cpu") {
        return;
    }
    let specs = [
        ("wb", "name=wb,channels=1024,jones_per_batch=65536,dst=127.0.0.1:7148", 1.0),
        (
            "nb",
            "name=nb,channels=256,centre_frequency=300e6,decimation=8,jones_per_batch=8192,dst=127.0.0.1:7148",
            8.0,
        ),
        (
            "nb no-discard",
            "name=nb,channels=256,centre_frequency=300e6,decimation=8,jones_per_batch=8192,pass_bandwidth=40e6,dst=127.0.0.1:7148",
            16.0,
        ),
    ];
    for (what, s, unit) in specs {
        let spec = if what == "wb" {
            parse_wideband(s).unwrap()
        } else {
            parse_narrowband(s).unwrap()
        };
        let gain = if what == "wb" { 0.02 } else { 0.5 };
        let mut cpu = make_channelizer(
            &spec,
            &cfg("cpu", 7),
            stepping_ctl(spec.channels, gain, unit),
        )
        .unwrap();
        let mut gpu = make_channelizer(
            &spec,
            &cfg("gpu", 7),
            stepping_ctl(spec.channels, gain, unit),
        )
        .unwrap();
        assert!(gpu.pipelined() && gpu.depth() >= 3, "{what}");
        let len = spec.channels * spec.spectra_per_heap() * 4;
        let step = spec.batch_step();
        let n = 3;
        let mut want = Vec::new();
        let mut inputs = Vec::new();
        for i in 0..n {
            let ts = (1u64 << 36) + i as u64 * step;
            let ranges = cpu.input_range(ts).unwrap().unwrap();
            assert_eq!(Some(ranges), gpu.input_range(ts).unwrap(), "{what}");
            let skip = if what == "wb" { [3, 6] } else { [0, 0] };
            let (d, p) = batch_input(ranges, skip, 100 + 10 * i as u64);
            let mut w = vec![0u8; len];
            let sat = cpu.process(ts, [&d[0], &d[1]], &mut w).unwrap();
            want.push((ts, w, sat));
            inputs.push((ts, p, skip));
        }
        for (ts, p, skip) in &inputs {
            // input_range prepares the batch's controls; submit uses them.
            gpu.input_range(*ts).unwrap();
            gpu.submit_packed(*ts, [&p[0], &p[1]], *skip).unwrap();
        }
        drop(inputs); // the input was staged at submission
        assert_eq!(gpu.in_flight(), n, "{what}");
        let mut got = vec![0u8; len];
        for (ts, w, sat) in &want {
            let c = gpu.complete(&mut got, true).unwrap().unwrap();
            assert_eq!(c.batch_ts, *ts, "{what}");
            let close = within_1_lsb(&got, w);
            assert!(close as f64 >= 0.999 * len as f64, "{what}: {close}/{len}");
            assert!(w.iter().any(|&v| v != 0), "{what}: all-zero output");
            for p in 0..2 {
                assert!(
                    c.clipped[p].abs_diff(sat[p]) <= 2 + len as u64 / 1000,
                    "{what}: {:?} {sat:?}",
                    c.clipped
                );
            }
            assert_eq!(c.input.is_some(), what == "wb", "{what}: input statistics");
        }
        assert!(gpu.complete(&mut got, true).unwrap().is_none());
    }
}

/// The GPU channeliser uploads input that lies in chunk memory (page-locked for CUDA)
/// straight from it, and its batches are byte-identical to those of the same input from
/// ordinary memory (staged through pinned buffers); the fence returns once no upload reads
/// the chunk.
#[test]
fn gpu_upload_straight_from_chunk_memory_equals_staged() {
    if !crate::gpu::gpu_test_guard("gpu_upload_straight_from_chunk_memory_equals_staged") {
        return;
    }
    use crate::compute::fengine::gpu::batches::page_locked;
    use crate::mem::{ChunkMem, MemPolicy};
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let spec =
        parse_wideband("name=wb,channels=1024,jones_per_batch=65536,dst=127.0.0.1:7148").unwrap();
    let mk = || {
        make_channelizer(
            &spec,
            &cfg("gpu", 7),
            stepping_ctl(spec.channels, 0.02, 1.0),
        )
    };
    let (mut staged, mut direct) = (mk().unwrap(), mk().unwrap());
    let len = spec.channels * spec.spectra_per_heap() * 4;
    let step = spec.batch_step();
    for i in 0..3u64 {
        let ts = (1u64 << 36) + i * step;
        let ranges = staged.input_range(ts).unwrap().unwrap();
        direct.input_range(ts).unwrap();
        let skip = [3, 6];
        let (_, p) = batch_input(ranges, skip, 300 + i);
        let mut mem = [0, 1].map(|k| ChunkMem::alloc(p[k].len(), MemPolicy::shared()).unwrap());
        for k in 0..2 {
            mem[k][..p[k].len()].copy_from_slice(&p[k]);
            assert!(mem[k].cuda_pinned(), "{:?}", mem[k].pin_note);
            assert!(page_locked(&ctx, &mem[k][..p[k].len()]));
            assert!(!page_locked(&ctx, &p[k]), "a Vec is not page-locked");
        }
        staged.submit_packed(ts, [&p[0], &p[1]], skip).unwrap();
        direct
            .submit_packed(ts, [&mem[0][..p[0].len()], &mem[1][..p[1].len()]], skip)
            .unwrap();
        direct.fence_input().unwrap();
        drop(mem); // no upload reads it after the fence
        let (mut a, mut b) = (vec![0u8; len], vec![1u8; len]);
        let ca = staged.complete(&mut a, true).unwrap().unwrap();
        let cb = direct.complete(&mut b, true).unwrap().unwrap();
        assert_eq!((ca.batch_ts, ca.clipped), (cb.batch_ts, cb.clipped));
        assert!(a == b, "batch {i}: direct upload differs from staged");
        assert!(a.iter().any(|&v| v != 0));
    }
}
