//! When katcp control changes land in the F-engine output: a delay model from the first
//! spectrum whose timestamp is at or after its start (inside a batch too), gains from the
//! first batch prepared after the request, and `steady-state-timestamp` saying so. Run on
//! the CPU backend, and on the GPU backend where a GPU exists.

use std::sync::{Arc, Mutex};

use num_complex::Complex32;

use super::backend::BackendChannelizer;
use super::channelizer::Channelizer;
use super::control::{OutputControl, SharedControl};
use super::device::{FgpuDevice, OutputHandle};
use crate::compute::fengine::{
    CpuBackend, Dither, FBackend, FConfig, GpuBackend, LinearDelayModel,
};
use crate::control::Device;

const C: usize = 256;
const SPH: usize = 8;
const BITS: u32 = 10;
const SBS: u64 = 2 * C as u64;
const STEP: u64 = SPH as u64 * SBS;
/// The batch under test (far enough from 0 for any coarse delay used here).
const BATCH: u64 = 4 * STEP;

fn cfg() -> FConfig {
    let mut c = FConfig::wideband(C, SPH);
    c.taps = 4;
    c.dither = Dither::None;
    c
}

/// Deterministic noise, σ ≈ 100 (a sum of uniforms from a 64-bit LCG), one stream per pol.
fn signal(pol: usize, n: usize) -> Vec<i16> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ pol as u64;
    (0..n)
        .map(|_| {
            let mut acc = 0.0;
            for _ in 0..12 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                acc += (x >> 11) as f64 / (1u64 << 53) as f64;
            }
            ((acc - 6.0) * 100.0).round() as i16
        })
        .collect()
}

fn model(start: u64) -> LinearDelayModel {
    LinearDelayModel {
        start,
        delay: 3.0,
        delay_rate: 0.0,
        phase: 1.0,
        phase_rate: 0.0,
    }
}

fn control(models: &[LinearDelayModel]) -> SharedControl {
    let mut c = OutputControl::new(C, 0.5);
    for m in models {
        c.push_model(0, *m);
        c.push_model(1, *m);
    }
    Arc::new(Mutex::new(c))
}

/// Channelises the batch at `ts` as the engine does: input range, then process with the
/// samples of that range. `between` runs after the range is taken (a katcp request racing
/// the batch).
fn channelise<B: FBackend + Send>(
    backend: B,
    ctl: SharedControl,
    ts: u64,
    between: &dyn Fn(&SharedControl),
) -> Vec<u8> {
    let sig = [signal(0, 16 * STEP as usize), signal(1, 16 * STEP as usize)];
    let mut ch = BackendChannelizer::new(backend, BITS, ctl.clone());
    let r = ch.input_range(ts).unwrap().unwrap();
    between(&ctl);
    let input = [0, 1].map(|p| &sig[p][r[p].0 as usize..r[p].1 as usize]);
    let mut out = vec![0u8; C * SPH * 2 * 2];
    ch.process(ts, input, &mut out).unwrap();
    out
}

/// Output values of spectrum `s` (all channels, both pols), from the (channel, spectrum,
/// pol, re/im) layout.
fn spectrum(out: &[u8], s: usize) -> Vec<u8> {
    (0..C)
        .flat_map(|c| out[(c * SPH + s) * 4..(c * SPH + s) * 4 + 4].to_vec())
        .collect()
}

fn max_diff(a: &[u8], b: &[u8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as i8 as i32 - y as i8 as i32).abs())
        .max()
        .unwrap_or(0)
}

/// A model starting one sample after spectrum 5 of the batch takes effect at spectrum 6: the
/// spectra before it match the output with no model, those from it on the output with the
/// model in force for the whole batch. `tol` is 0 on the CPU (bit-exact), 1 LSB on the GPU.
fn delay_lands_on_the_right_spectrum<B: FBackend + Send>(make: &dyn Fn() -> B, tol: i32) {
    let none = |_: &SharedControl| {};
    let zero = channelise(make(), control(&[]), BATCH, &none);
    let full = channelise(make(), control(&[model(0)]), BATCH, &none);
    let start = BATCH + 5 * SBS + 1;
    let mid = channelise(make(), control(&[model(start)]), BATCH, &none);
    for s in 0..SPH {
        let (want, other) = if s < 6 {
            (&zero, &full)
        } else {
            (&full, &zero)
        };
        let got = spectrum(&mid, s);
        assert!(
            max_diff(&got, &spectrum(want, s)) <= tol,
            "spectrum {s}: expected the {} output",
            if s < 6 { "old" } else { "new" }
        );
        // The two references really differ there (1 rad of phase and 3 samples of delay).
        assert!(max_diff(&got, &spectrum(other, s)) > 8, "spectrum {s}");
    }
    // A model starting exactly on spectrum 6's timestamp also takes over at spectrum 6.
    let exact = channelise(make(), control(&[model(BATCH + 6 * SBS)]), BATCH, &none);
    assert!(max_diff(&exact, &mid) <= tol);
}

/// Requests that land after the batch's controls were copied (between its input range and
/// its processing) do not touch it, and do not break it (a new coarse delay would move its
/// input range); `taken_through` tells the device which batch was copied.
fn late_requests_wait_for_the_next_batch<B: FBackend + Send>(make: &dyn Fn() -> B, tol: i32) {
    let none = |_: &SharedControl| {};
    let zero = channelise(make(), control(&[]), BATCH, &none);
    let late = channelise(make(), control(&[]), BATCH, &|ctl: &SharedControl| {
        let mut c = ctl.lock().unwrap();
        assert_eq!(c.taken_through, Some(BATCH));
        c.push_model(0, model(0));
        c.push_model(1, model(0));
        c.gains[0] = vec![Complex32::new(2.0, 0.0); C];
    });
    assert!(max_diff(&late, &zero) <= tol);
    // The same requests before the batch's controls are copied change it.
    let early = control(&[model(0)]);
    early.lock().unwrap().gains[0] = vec![Complex32::new(2.0, 0.0); C];
    let changed = channelise(make(), early, BATCH, &none);
    assert!(max_diff(&changed, &zero) > 8);
}

#[test]
fn cpu_delay_model_takes_effect_at_its_spectrum() {
    let make = || CpuBackend::new(cfg()).unwrap();
    delay_lands_on_the_right_spectrum(&make, 0);
    late_requests_wait_for_the_next_batch(&make, 0);
}

#[test]
fn gpu_delay_model_takes_effect_at_its_spectrum() {
    if !crate::gpu::gpu_test_guard("gpu_delay_model_takes_effect_at_its_spectrum") {
        return;
    }
    let make = || GpuBackend::new(cfg()).unwrap();
    delay_lands_on_the_right_spectrum(&make, 1);
    late_requests_wait_for_the_next_batch(&make, 1);
}

/// `steady-state-timestamp` after `?gain` is the batch after the last one copied; after
/// `?delays` it is also at least the first spectrum at or after the load time.
#[test]
fn steady_state_timestamp_follows_the_copied_batches() {
    let ctl = control(&[]);
    let dev = FgpuDevice::new(
        vec![OutputHandle {
            name: "wb".into(),
            channels: C,
            batch_step: STEP,
            spectrum_step: SBS,
            control: ctl.clone(),
        }],
        1e6,
        0.0,
        0.5,
        1,
        1 << 20,
    );
    let steady = || -> u64 {
        dev.sensors()
            .get("steady-state-timestamp")
            .unwrap()
            .value
            .parse()
            .unwrap()
    };
    let req = |name: &str, args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        dev.request(name, &args)
    };
    req("gain", &["wb", "0", "0.25"]).unwrap();
    assert_eq!(
        steady(),
        0,
        "nothing copied yet: the next batch has the gain"
    );
    ctl.lock().unwrap().mark_taken(BATCH);
    req("gain-all", &["wb", "0.5"]).unwrap();
    assert_eq!(steady(), BATCH + STEP);
    // Load time 1.5 s after sync at 1 MS/s: sample 1_500_000, rounded up to a spectrum.
    req("delays", &["wb", "1.5", "0,0:0,0", "0,0:0,0"]).unwrap();
    assert_eq!(steady(), 1_500_000u64.div_ceil(SBS) * SBS);
    // A load time in the past: from the batch after the copied ones (never decreasing).
    ctl.lock().unwrap().mark_taken(1 << 30);
    req("delays", &["wb", "0.5", "0,0:0,0", "0,0:0,0"]).unwrap();
    assert_eq!(steady(), (1 << 30) + STEP);
    assert!(req("delays", &["wb", "0.5", "0,0:0,0"]).is_err());
    assert_eq!(steady(), (1 << 30) + STEP);
}

/// An F-engine device of one wideband output `wb` on `ctl` at 1 MS/s with
/// `default_gain`.
fn wideband_device(ctl: &SharedControl, default_gain: f64) -> FgpuDevice {
    FgpuDevice::new(
        vec![OutputHandle {
            name: "wb".into(),
            channels: C,
            batch_step: STEP,
            spectrum_step: SBS,
            control: ctl.clone(),
        }],
        1e6,
        0.0,
        default_gain,
        1,
        1 << 20,
    )
}

/// `?delays ARGS…` on `dev`.
fn delays(dev: &FgpuDevice, args: &[&str]) -> Result<Vec<String>, crate::control::RequestError> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    dev.request("delays", &args)
}

/// `?delays` with a delay the engine cannot buffer (-1e6 s stalled the output) or a load
/// time past the 48-bit timestamps (1e300 saturated the load count and wrapped
/// `steady-state-timestamp` to 0) fails, naming the limit, and changes nothing.
#[test]
fn delays_out_of_range_fail_and_change_nothing() {
    let ctl = control(&[]);
    let dev = wideband_device(&ctl, 0.5);
    let req = |args: &[&str]| delays(&dev, args);
    let sensor = |n: &str| dev.sensors().get(n).unwrap().value;
    req(&["wb", "1.5", "0.5,0:0,0", "-0.5,0:0,0"]).unwrap();
    let (steady, d0) = (sensor("steady-state-timestamp"), sensor("wb.input0.delay"));
    let models = ctl.lock().unwrap().delays.clone();
    // At 1 MS/s the engine buffers 2^20 samples: ±1.048576 s.
    for (args, why) in [
        (
            ["wb", "2", "-1e6,0:0,0", "0,0:0,0"],
            "input0 delay -1000000 s is beyond ±1.048576 s",
        ),
        (
            ["wb", "2", "0,0:0,0", "1.1,0:0,0"],
            "input1 delay 1.1 s is beyond",
        ),
        (
            ["wb", "1e300", "0,0:0,0", "0,0:0,0"],
            "start time 1e300 is past the 48-bit",
        ),
        // 2^48 samples at 1 MS/s: 281474976.710656 s.
        (
            ["wb", "281474977", "0,0:0,0", "0,0:0,0"],
            "past the 48-bit timestamp space",
        ),
    ] {
        let e = req(&args).unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
        assert_eq!(sensor("steady-state-timestamp"), steady);
        assert_eq!(sensor("wb.input0.delay"), d0);
        assert_eq!(ctl.lock().unwrap().delays, models);
    }
    req(&["wb", "281474976", "1.048576,0:0,0", "-1.048576,0:0,0"]).unwrap();
    assert_eq!(
        sensor("steady-state-timestamp"),
        (281_474_976_000_000_u64.div_ceil(SBS) * SBS).to_string()
    );
}

/// The delay sensor shows a model from its load time on (katgpucbf's rule): before the
/// channeliser reaches the load time it still shows the model in force; a model whose load
/// time was already reached shows at once.
#[test]
fn delay_sensor_changes_at_the_load_time() {
    let ctl = control(&[]);
    let dev = wideband_device(&ctl, 1.0);
    let req = |args: &[&str]| delays(&dev, args);
    let sensor = |n: &str| dev.sensors().get(n).unwrap().value;
    assert_eq!(sensor("wb.input0.delay"), "(-1, 0.0, 0.0, 0.0, 0.0)");
    req(&["wb", "1.5", "0.5,0:0.25,0", "0,0:0,0"]).unwrap();
    dev.apply_due_delays();
    assert_eq!(sensor("wb.input0.delay"), "(-1, 0.0, 0.0, 0.0, 0.0)");
    // The channeliser takes the batch before the load time: still not in force.
    ctl.lock().unwrap().taken_through = Some(1_500_000 - STEP);
    dev.apply_due_delays();
    assert_eq!(sensor("wb.input0.delay"), "(-1, 0.0, 0.0, 0.0, 0.0)");
    // The batch that reaches it.
    ctl.lock().unwrap().taken_through = Some(1_500_000 - STEP + 1);
    dev.apply_due_delays();
    assert_eq!(sensor("wb.input0.delay"), "(1500000, 0.5, 0.0, 0.25, 0.0)");
    assert_eq!(sensor("wb.input1.delay"), "(1500000, 0.0, 0.0, 0.0, 0.0)");
    // A model whose load time is already past shows at once.
    req(&["wb", "1.0", "0.25,0:0,0", "0,0:0,0"]).unwrap();
    assert_eq!(sensor("wb.input0.delay"), "(1000000, 0.25, 0.0, 0.0, 0.0)");
}

/// `?delays` takes delays up to `--max-delay-diff` samples (here 1000 at 1 MS/s).
#[test]
fn delays_are_bounded_by_max_delay_diff() {
    let ctl = control(&[]);
    let dev = wideband_device(&ctl, 0.5).with_max_delay(1000);
    let e = delays(&dev, &["wb", "2", "0.0011,0:0,0", "0,0:0,0"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("beyond ±0.001 s (1000 samples, --max-delay-diff)"),
        "{e}"
    );
    delays(&dev, &["wb", "2", "0.001,0:0,0", "-0.0009,0:0,0"]).unwrap();
}
