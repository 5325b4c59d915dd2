//! Gain checks (acv/test_gain.py, test_steady_state.py): random complex gains on every
//! input, and gains set just before `?capture-start`.

use std::time::Instant;

use num_complex::Complex64;
use rand::{RngExt, SeedableRng};
use serde_json::json;

use super::channel::noise_gain;
use super::harness::Harness;
use super::result::{Check, CheckResult, Plot};

fn fmt_gain(g: Complex64) -> String {
    format!("{}{:+}j", g.re, g.im)
}

fn test_gains(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[0];
    let sh = h.shape(0).clone();
    let inputs = 2 * h.n;
    let std = 0.1;
    let g0 = noise_gain(h, std, 6.0);
    h.signal_all(&format!("wgn({std}, 11)"))?;
    h.gain_all_real(&sh.output, g0)?;
    let base = h.dump()?;
    // Random gains: magnitude 0.5–2 (log-uniform), random phase, one per input.
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(h.seed ^ 0x6a1e);
    let gains: Vec<Complex64> = (0..inputs)
        .map(|_| {
            let mag = 2f64.powf(rng.random_range(-1.0..1.0));
            let ph = rng.random_range(-std::f64::consts::PI..std::f64::consts::PI);
            Complex64::from_polar(mag, ph)
        })
        .collect();
    let t0 = Instant::now();
    for (i, g) in gains.iter().enumerate() {
        h.gain(&sh.output, i / 2, i % 2, &[fmt_gain(g * g0)])?;
    }
    let set_s = t0.elapsed().as_secs_f64();
    let d = h.dump()?;
    let (k0, k1) = (sh.channels / 16, sh.channels - sh.channels / 16);
    let mut worst: f64 = 0.0;
    let mut where_ = (0, 0, 0);
    let mut curve = Vec::new();
    for i in 0..inputs {
        for j in i..inputs {
            let expect = gains[i] * gains[j].conj();
            for k in k0..k1 {
                let b = base.vis(k, i, j);
                if b.norm() == 0.0 {
                    anyhow::bail!("no signal in channel {k} of inputs {i},{j} before the gains");
                }
                let err = ((d.vis(k, i, j) / b) / expect - 1.0).norm();
                if err > worst {
                    worst = err;
                    where_ = (k, i, j);
                }
                if i == 0 && j == 1 {
                    curve.push((k as f64, err));
                }
            }
        }
    }
    let passed = worst < 0.1 && set_s < 30.0;
    let mut msg = Vec::new();
    if worst >= 0.1 {
        msg.push(format!(
            "relative error {worst:.3} in channel {} of inputs {},{} (gains {} and {})",
            where_.0,
            where_.1,
            where_.2,
            fmt_gain(gains[where_.1]),
            fmt_gain(gains[where_.2])
        ));
    }
    if set_s >= 30.0 {
        msg.push(format!("setting every gain took {set_s:.1} s"));
    }
    Ok(
        CheckResult::new(c, worst, "relative error", passed, msg.join("; "))
            .details(json!({
                "gains": gains.iter().map(|g| fmt_gain(*g)).collect::<Vec<_>>(),
                "set_seconds": set_s,
                "base_gain": g0,
            }))
            .plot(
                Plot::line(
                    "Relative error of the gain ratio, inputs 0 × 1",
                    "channel",
                    "|measured/expected − 1|",
                    "error",
                    curve,
                )
                .hline(0.1, "0.1"),
            ),
    )
}

fn test_gains_capture_start(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[1];
    let sh = h.shape(0).clone();
    let std = 0.1;
    let g = noise_gain(h, std, 6.0);
    let noise = h.noise(std);
    h.signal_all(&noise)?;
    h.capture_stop(0, &sh.corrprod)?;
    h.drain(h.corrprod_stream(0))?;
    // Upper half zero, lower half g, set just before capture-start.
    let half = sh.channels / 2;
    let values: Vec<String> = (0..sh.channels)
        .map(|k| if k < half { format!("{g}") } else { "0".into() })
        .collect();
    h.gain_all(&sh.output, &values)?;
    let start = h.steady;
    h.capture_start(0, &sh.corrprod, start)?;
    let d = h.dumps_from(0, 0, 1)?.remove(0);
    let mut upper_nonzero = 0;
    let mut lower_zero = 0;
    for k in 0..sh.channels {
        for i in 0..2 * h.n {
            let v = d.auto(k, i);
            if k >= half && v != 0.0 {
                upper_nonzero += 1;
            }
            if k < half && v <= 0.0 {
                lower_zero += 1;
            }
        }
    }
    let bad = upper_nonzero + lower_zero;
    let passed = bad == 0 && d.timestamp >= start;
    let mut msg = Vec::new();
    if upper_nonzero > 0 {
        msg.push(format!(
            "{upper_nonzero} upper-half autos are not 0 in the first dump"
        ));
    }
    if lower_zero > 0 {
        msg.push(format!("{lower_zero} lower-half autos are not > 0"));
    }
    if d.timestamp < start {
        msg.push(format!(
            "first dump at {} precedes capture-start {start}",
            d.timestamp
        ));
    }
    let spectrum: Vec<(f64, f64)> = (0..sh.channels).map(|k| (k as f64, d.auto(k, 0))).collect();
    Ok(
        CheckResult::new(c, bad as f64, "wrong autos", passed, msg.join("; "))
            .details(json!({"capture_start": start, "first_dump": d.timestamp}))
            .plot(Plot::line(
                "First dump after capture-start: auto power, input 0",
                "channel",
                "power",
                "input 0",
                spectrum,
            )),
    )
}

/// The gain checks.
pub fn checks() -> Vec<Check> {
    vec![
        Check {
            name: "test_gains",
            requirement: "CBF-REQ-0119",
            text: "Complex gains (0.5–2 in magnitude, any phase) are applied per input.",
            method: "Correlated noise; a dump at a common gain, then a random complex gain per input (?gain); per channel in the pass band, visibility ratio vs g_i·conj(g_j).",
            threshold: "max relative error < 0.1; setting every gain < 30 s",
            quick: true,
            narrowband: false,
            run: test_gains,
        },
        Check {
            name: "test_gains_capture_start",
            requirement: "",
            text: "Gains set just before capture-start apply to the first dump sent.",
            method: "?capture-stop; gains zeroing the upper half; ?capture-start at the F-engines' steady-state timestamp; first dump received.",
            threshold: "first dump: upper half exactly 0, lower half > 0",
            quick: true,
            narrowband: false,
            run: test_gains_capture_start,
        },
    ]
}
