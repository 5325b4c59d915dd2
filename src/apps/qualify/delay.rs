//! Delay and phase checks (acv/test_delay.py): phase and delay accuracy against the
//! F-engine's delay model, the delay sensors, and when a delay model takes effect.

use std::f64::consts::PI;

use rand::{RngExt, SeedableRng};
use serde_json::json;

use super::channel::noise_gain;
use super::harness::{Dump, Harness};
use super::launch::unix_now;
use super::result::{Check, CheckResult, Plot};

/// Wraps an angle into (−π, π].
pub fn wrap(a: f64) -> f64 {
    let w = a.rem_euclid(2.0 * PI);
    if w > PI {
        w - 2.0 * PI
    } else {
        w
    }
}

/// The phase of V(input 0, input 1) in wideband channel `k` of `n` when input 1 is delayed
/// by `dsim_delay` samples at the digitiser, then by `d` samples and rotated by `phase`
/// in the F-engine (dsp.md §6: the F-engine's delay keeps the band centre's phase,
/// out = X · e^{−jπ(k − N/2)d/N} · e^{jφ}).
pub fn expected_phase(k: usize, n: usize, dsim_delay: f64, d: f64, phase: f64) -> f64 {
    let (k, n) = (k as f64, n as f64);
    wrap(PI * (k * dsim_delay + (k - n / 2.0) * d) / n - phase)
}

/// Correlated noise on every input, input 1 delayed by `dsim_delay` samples.
fn noise_with_delay(h: &mut Harness, dsim_delay: i64) -> anyhow::Result<()> {
    let std = 0.1;
    let out = h.shape(0).output.clone();
    h.gain_all_real(&out, noise_gain(h, std, 6.0))?;
    let mut exprs = vec![format!("n = wgn({std}, 21)"), "n".into()];
    exprs.push(format!("delay(n, {dsim_delay})"));
    exprs.extend((2..2 * h.n).map(|_| "n".to_string()));
    h.signal_each(&exprs)?;
    Ok(())
}

/// Points of a curve.
type Curve = Vec<(f64, f64)>;

/// Max |phase error| (degrees) over the pass band of V(0, 1) in `d` against `expect(k)`,
/// and the (channel, measured, expected) curve.
fn phase_error(d: &Dump, expect: &dyn Fn(usize) -> f64) -> (f64, Curve, Curve) {
    let c = d.channels();
    let (k0, k1) = (c / 16, c - c / 16);
    let mut worst: f64 = 0.0;
    let (mut meas, mut exp) = (Vec::new(), Vec::new());
    for k in k0..k1 {
        let m = d.vis(k, 0, 1).arg();
        let e = expect(k);
        worst = worst.max(wrap(m - e).abs().to_degrees());
        meas.push((k as f64, m.to_degrees()));
        exp.push((k as f64, e.to_degrees()));
    }
    (worst, meas, exp)
}

fn test_delay_phase(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[0];
    let out = h.shape(0).output.clone();
    let n = h.shape(0).channels;
    let sync = h.sync_time();
    noise_with_delay(h, 0)?;
    let mut worst: f64 = 0.0;
    let mut trials = Vec::new();
    let mut plot = Plot::line(
        "Phase error vs applied phase",
        "applied phase (rad)",
        "max |error| (°)",
        "",
        Vec::new(),
    );
    plot.series.clear();
    let mut errs = Vec::new();
    for phase in [-PI, PI, 2.0 * PI / 3.0, 0.01] {
        h.delays(&out, 0, sync, ["0,0:0,0", &format!("0,0:{phase},0")])?;
        let d = h.dump()?;
        let (e, _, _) = phase_error(&d, &|k| expected_phase(k, n, 0.0, 0.0, phase));
        worst = worst.max(e);
        errs.push((phase, e));
        trials.push(json!({"phase_rad": phase, "max_error_deg": e}));
    }
    plot = plot.with("measured", errs, true).hline(1.0, "1°");
    let passed = worst <= 1.0;
    let msg = if passed {
        String::new()
    } else {
        format!("phase error {worst:.2}° exceeds 1°")
    };
    Ok(CheckResult::new(c, worst, "°", passed, msg)
        .details(json!({"trials": trials}))
        .plot(plot))
}

fn test_delay(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[1];
    let out = h.shape(0).output.clone();
    let n = h.shape(0).channels;
    let fs = h.fs;
    let sync = h.sync_time();
    let mut worst: f64 = 0.0;
    let mut trials = Vec::new();
    let mut plots = Vec::new();
    // Seconds: 0, ±79.53 µs, 2.5 ps, 2.75 samples.
    for delay_s in [0.0, 79.53e-6, -79.53e-6, 2.5e-12, 2.75 / fs] {
        let d = delay_s * fs;
        // The digitiser advances input 1 by the whole samples the F-engine delays it.
        let dsim_delay = -(d.round() as i64);
        noise_with_delay(h, dsim_delay)?;
        h.delays(&out, 0, sync, ["0,0:0,0", &format!("{delay_s:e},0:0,0")])?;
        let dump = h.dump()?;
        let (e, meas, exp) =
            phase_error(&dump, &|k| expected_phase(k, n, dsim_delay as f64, d, 0.0));
        worst = worst.max(e);
        trials.push(json!({"delay_s": delay_s, "delay_samples": d, "dsim_delay_samples": dsim_delay, "max_error_deg": e}));
        if plots.len() < 2 && d.abs() > 1.0 {
            plots.push(
                Plot::line(
                    &format!("Phase vs channel, delay {:.3} µs", delay_s * 1e6),
                    "channel",
                    "phase of V(0,1) (°)",
                    "expected",
                    exp,
                )
                .with("measured", meas, true),
            );
        }
    }
    let passed = worst <= 1.0;
    let msg = if passed {
        String::new()
    } else {
        format!("phase error {worst:.2}° exceeds 1° over the pass band")
    };
    let mut r = CheckResult::new(c, worst, "°", passed, msg).details(json!({"trials": trials}));
    for p in plots {
        r = r.plot(p);
    }
    Ok(r)
}

/// Parses a delay sensor `(loadmcnt, delay, rate, phase, phase_rate)`.
pub fn parse_delay_sensor(v: &str) -> Option<(u64, [f64; 4])> {
    let body = v.trim().strip_prefix('(')?.strip_suffix(')')?;
    let parts: Vec<&str> = body.split(',').map(str::trim).collect();
    if parts.len() != 5 {
        return None;
    }
    let t: i64 = parts[0].parse().ok()?;
    let mut f = [0.0; 4];
    for (o, p) in f.iter_mut().zip(&parts[1..]) {
        *o = p.parse().ok()?;
    }
    Some((t.max(0) as u64, f))
}

fn test_delay_sensors(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[2];
    let out = h.shape(0).output.clone();
    let fs = h.fs;
    let sync = h.sync_time();
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(h.seed ^ 0xde1a);
    let mut sets = Vec::new();
    for _ in 0..2 {
        sets.push([
            rng.random_range(-79.53e-6..79.53e-6),
            rng.random_range(-2.56e-9..2.56e-9),
            rng.random_range(-PI..PI),
            rng.random_range(-49.22..49.22),
        ]);
    }
    let fmt = |s: &[f64; 4]| format!("{:e},{:e}:{:e},{:e}", s[0], s[1], s[2], s[3]);
    let start = unix_now()? + 2.0;
    let load = ((start - sync) * fs).round() as u64;
    h.delays(&out, 0, start, [&fmt(&sets[0]), &fmt(&sets[1])])?;
    let mut problems = Vec::new();
    let mut before = Vec::new();
    for p in 0..2 {
        let v = h.fgpu_sensor(0, &format!("{out}.input{p}.delay"))?;
        before.push(v.clone());
        match parse_delay_sensor(&v) {
            Some((_, f)) if f.iter().all(|x| *x == 0.0) => {}
            _ => problems.push(format!("input{p}.delay before the load time is {v}")),
        }
    }
    // Wait until the data have passed the load time.
    let step = h.shape(0).acc_step();
    h.dumps_from(0, load + step, 1)?;
    let mut after = Vec::new();
    let mut worst: f64 = 0.0;
    for (p, s) in sets.iter().enumerate() {
        let v = h.fgpu_sensor(0, &format!("{out}.input{p}.delay"))?;
        after.push(v.clone());
        let Some((t, f)) = parse_delay_sensor(&v) else {
            problems.push(format!("input{p}.delay {v:?} does not parse"));
            continue;
        };
        if t != load {
            problems.push(format!("input{p}.delay load time {t}, expected {load}"));
        }
        let want = [s[0], s[1], wrap(s[2]), s[3]];
        for (i, (got, w)) in f.iter().zip(want).enumerate() {
            let diff = if i == 2 { wrap(got - w) } else { got - w };
            let rel = diff.abs() / w.abs().max(1e-300);
            worst = worst.max(rel);
            if rel > 1e-9 {
                problems.push(format!(
                    "input{p}.delay field {} is {got}, expected {w}",
                    i + 2
                ));
            }
        }
    }
    let passed = problems.is_empty();
    Ok(
        CheckResult::new(c, worst, "relative error", passed, problems.join("; ")).details(
            json!({"load_timestamp": load, "before": before, "after": after,
               "requested": sets.iter().map(fmt).collect::<Vec<_>>()}),
        ),
    )
}

/// Fraction of an accumulation after a 90° phase step on input 1, from V(0,1) summed over
/// the pass band: before it V is real positive, after it −j times that.
fn fraction_after(d: &Dump) -> f64 {
    let c = d.channels();
    let v: num_complex::Complex64 = (c / 16..c - c / 16).map(|k| d.vis(k, 0, 1)).sum();
    let (before, after) = (v.re.max(0.0), (-v.im).max(0.0));
    after / (before + after).max(1e-300)
}

fn test_delay_application_time(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[3];
    let out = h.shape(0).output.clone();
    let fs = h.fs;
    let sync = h.sync_time();
    let step = h.shape(0).acc_step();
    noise_with_delay(h, 0)?;
    h.dump()?;
    let mut attempts = Vec::new();
    let mut best = None;
    for attempt in 0..5 {
        // Back to zero phase, then 90° loaded 0.2 s ahead.
        h.delays(&out, 0, sync, ["0,0:0,0", "0,0:0,0"])?;
        h.dump()?;
        let start = unix_now()? + 0.2;
        let load = ((start - sync) * fs).round() as u64;
        h.delays(&out, 0, start, ["0,0:0,0", &format!("0,0:{},0", PI / 2.0)])?;
        let acc = load / step * step;
        let d = h.dumps_from(0, acc, 1)?.remove(0);
        if d.timestamp != acc {
            attempts.push(
                json!({"attempt": attempt, "note": "dump holding the load time not received"}),
            );
            continue;
        }
        let frac = fraction_after(&d);
        if !(0.02..=0.98).contains(&frac) {
            // Too near a dump boundary to measure (or not applied in this dump): retry.
            attempts.push(json!({"attempt": attempt, "load_timestamp": load, "fraction_after": frac, "note": "load time not measurable in this dump"}));
            continue;
        }
        let measured = acc as f64 + (1.0 - frac) * step as f64;
        let err = (measured - load as f64) / fs;
        attempts.push(json!({"attempt": attempt, "load_timestamp": load, "dump": acc, "fraction_after": frac, "error_s": err}));
        best = Some(err);
        break;
    }
    let Some(err) = best else {
        let fracs: Vec<String> = attempts
            .iter()
            .filter_map(|a| a["fraction_after"].as_f64())
            .map(|f| format!("{f:.3}"))
            .collect();
        let msg = format!(
            "in 5 attempts the 90° step never showed as a −90° phase inside the dump holding \
             its load time (fraction after: [{}])",
            fracs.join(", ")
        );
        return Ok(
            CheckResult::new(c, f64::NAN, "s", false, msg).details(json!({"attempts": attempts}))
        );
    };
    let passed = err.abs() < 0.01;
    let msg = if passed {
        String::new()
    } else {
        format!("delay applied {:.1} ms from its load time", err * 1e3)
    };
    Ok(CheckResult::new(c, err.abs(), "s", passed, msg).details(json!({"attempts": attempts})))
}

fn test_delay_enable_disable(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[4];
    let sh = h.shape(0).clone();
    let out = sh.output.clone();
    let sync = h.sync_time();
    // A tone at 3/4 of the band, the same on every input.
    let k = 3 * sh.channels / 4;
    let f = super::channel::tone_freq(h, 0, k as f64);
    let amp = 0.2;
    h.gain_all_real(&out, super::channel::tone_gain(h, 0, amp, 60.0))?;
    h.signal_all(&format!("cw({amp}, {f})"))?;
    let fc = h.fs / 4.0;
    let half_cycle = 1.0 / (2.0 * f);
    let steps = [
        ("90° phase", format!("0,0:{},0", PI / 2.0), -PI / 2.0),
        (
            "½-cycle delay",
            format!("{half_cycle:e},0:0,0"),
            PI * (f - fc) / f,
        ),
        ("zeros", "0,0:0,0".to_string(), 0.0),
    ];
    let mut worst: f64 = 0.0;
    let mut slowest: f64 = 0.0;
    let mut trials = Vec::new();
    let mut pts = Vec::new();
    for (i, (what, set, want)) in steps.iter().enumerate() {
        let took = h.delays(&out, 0, sync, ["0,0:0,0", set])?;
        slowest = slowest.max(took.as_secs_f64());
        let d = h.dump()?;
        let got = d.vis(k, 0, 1).arg();
        let e = wrap(got - want).abs().to_degrees();
        worst = worst.max(e);
        trials.push(json!({"step": what, "measured_deg": got.to_degrees(), "expected_deg": want.to_degrees(), "error_deg": e, "request_s": took.as_secs_f64()}));
        pts.push((i as f64, got.to_degrees()));
    }
    let expected: Vec<(f64, f64)> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (i as f64, s.2.to_degrees()))
        .collect();
    let passed = worst <= 1.0 && slowest < 1.0 / 0.167;
    let mut msg = Vec::new();
    if worst > 1.0 {
        msg.push(format!("phase error {worst:.2}° exceeds 1°"));
    }
    if slowest >= 1.0 / 0.167 {
        msg.push(format!("?delays took {slowest:.2} s"));
    }
    Ok(CheckResult::new(c, worst, "°", passed, msg.join("; "))
        .details(
            json!({"channel": k, "frequency_hz": f, "steps": trials, "slowest_request_s": slowest}),
        )
        .plot(
            Plot::line(
                "Tone phase: 90° phase, ½-cycle delay, zeros",
                "step",
                "phase of V(0,1) (°)",
                "expected",
                expected,
            )
            .with("measured", pts, true),
        ))
}

fn test_delay_rate(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[5];
    let sh = h.shape(0).clone();
    let out = sh.output.clone();
    let n = sh.channels;
    let sync = h.sync_time();
    noise_with_delay(h, 0)?;
    let mut worst: f64 = 0.0;
    let mut trials = Vec::new();
    let mut curve = Vec::new();
    for rate in [2.56e-9, -2.56e-9, 2.5e-12] {
        h.delays(&out, 0, sync, ["0,0:0,0", &format!("0,{rate:e}:0,0")])?;
        let d = h.dumps(0, 2)?;
        // Between the two dumps the delay grows by rate × the samples between their starts
        // (one dump, or more where dumps with MISSING markers were skipped).
        let dd = rate * (d[1].timestamp - d[0].timestamp) as f64;
        let (k0, k1) = (n / 16, n - n / 16);
        let mut e_max: f64 = 0.0;
        for k in k0..k1 {
            let got = (d[1].vis(k, 0, 1) * d[0].vis(k, 0, 1).conj()).arg();
            let want = PI * (k as f64 - n as f64 / 2.0) * dd / n as f64;
            let e = wrap(got - want).abs().to_degrees();
            e_max = e_max.max(e);
            if rate > 1e-10 {
                curve.push((k as f64, got.to_degrees()));
            }
        }
        worst = worst.max(e_max);
        trials.push(json!({"rate": rate, "delay_change_samples": dd, "max_error_deg": e_max}));
    }
    let passed = worst <= 2.0;
    let msg = if passed {
        String::new()
    } else {
        format!("phase change between dumps off by {worst:.2}°")
    };
    Ok(CheckResult::new(c, worst, "°", passed, msg)
        .details(json!({"trials": trials}))
        .plot(
            Plot::line(
                "Phase change between two dumps, rate 2.56e-9",
                "channel",
                "Δphase (°)",
                "measured",
                curve,
            )
            .hline(2.0, "±2° (about expected)"),
        ))
}

/// The delay checks.
pub fn checks() -> Vec<Check> {
    vec![
        Check {
            name: "test_delay_phase",
            requirement: "CBF-REQ-0128, CBF-REQ-0112",
            text: "Phase offsets are applied within 1°.",
            method: "Correlated noise; phases −π, π, 2π/3, 0.01 rad on input 1 (?delays); phase of V(0,1) per channel vs −φ.",
            threshold: "≤ 1°",
            quick: true,
            narrowband: false,
            run: test_delay_phase,
        },
        Check {
            name: "test_delay",
            requirement: "CBF-REQ-0128, CBF-REQ-0185",
            text: "Delays are compensated to within 1° of phase over the pass band.",
            method: "Delays 0, ±79.53 µs, 2.5 ps, 2.75 samples on input 1, the whole samples undone by a dsim delay; phase of V(0,1) per channel vs the delay model (phase kept at the band centre).",
            threshold: "max phase error ≤ 1°",
            quick: true,
            narrowband: false,
            run: test_delay,
        },
        Check {
            name: "test_delay_sensors",
            requirement: "",
            text: "The delay sensors show a model only once it is loaded, exactly as requested.",
            method: "Random delays (≤79.53 µs, ≤2.56e-9, ±π, ≤49.22 rad/s) loaded 2 s ahead on fgpu0; input{p}.delay before, and after the data pass the load time.",
            threshold: "before: fields 2–5 zero; after: (load_ts, d, dr, p, pr), rtol 1e-9",
            quick: false,
            narrowband: false,
            run: test_delay_sensors,
        },
        Check {
            name: "test_delay_application_time",
            requirement: "CBF-REQ-0077",
            text: "A delay model is applied at its load time (within 10 ms).",
            method: "90° phase on input 1 loaded 0.2 s ahead; the fraction of the dump holding the load time after it, from V(0,1)'s real and imaginary parts, gives the applied time (≤ 5 attempts).",
            threshold: "error < 10 ms",
            quick: true,
            narrowband: false,
            run: test_delay_application_time,
        },
        Check {
            name: "test_delay_enable_disable",
            requirement: "CBF-REQ-0066, CBF-REQ-0110, CBF-REQ-0187, CBF-REQ-0188",
            text: "Delay compensation can be set and removed; requests are fast enough.",
            method: "Tone at 3/4 band on every input; on input 1: 90° phase, then a ½-cycle delay, then zeros; phase of V(0,1) in the tone's channel; time of each ?delays.",
            threshold: "within 1° of −90°, π(f−fc)/f, 0; slowest ?delays < 1/0.167 s",
            quick: false,
            narrowband: false,
            run: test_delay_enable_disable,
        },
        Check {
            name: "test_delay_rate",
            requirement: "CBF-REQ-0128, CBF-REQ-0185",
            text: "Delay rates are applied: the phase moves as the delay model says.",
            method: "Correlated noise; delay rates ±2.56e-9, 2.5e-12 on input 1; per-channel phase change of V(0,1) between two consecutive dumps vs π(k−N/2)·rate·dump/N.",
            threshold: "≤ 2°",
            quick: false,
            narrowband: false,
            run: test_delay_rate,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_and_sensor_parsing() {
        assert!((wrap(3.0 * PI) - PI).abs() < 1e-12);
        assert!((wrap(-0.5) + 0.5).abs() < 1e-12);
        let (t, f) = parse_delay_sensor("(123, 1e-06, 0.0, -0.5, 2.0)").unwrap();
        assert_eq!(t, 123);
        assert_eq!(f, [1e-6, 0.0, -0.5, 2.0]);
        assert_eq!(parse_delay_sensor("(-1, 0.0, 0.0, 0.0, 0.0)").unwrap().0, 0);
        assert!(parse_delay_sensor("(1, 2)").is_none());
    }

    /// A phase alone gives −φ everywhere; a delay's phase is 0 at the band centre.
    #[test]
    fn expected_phase_model() {
        assert!((expected_phase(10, 256, 0.0, 0.0, 0.5) + 0.5).abs() < 1e-12);
        assert!(expected_phase(128, 256, 0.0, 0.3, 0.0).abs() < 1e-12);
        // A delay undone at the digitiser leaves only the centre phase.
        let a = expected_phase(40, 256, -2.0, 2.0, 0.0);
        assert!((a - wrap(-PI)).abs() < 1e-9 || (a - PI).abs() < 1e-9, "{a}");
    }
}
