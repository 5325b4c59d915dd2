//! Beam checks (tacv/): tone channels in every beam, quantiser gains, precision, the
//! steady-state checks around `?capture-start`, and the mapping of weights to inputs.

use rand::{RngExt, SeedableRng};
use serde_json::json;

use super::channel::{noise_gain, tone_freq, tone_gain};
use super::harness::{BeamData, Harness};
use super::launch::BEAMS;
use super::result::{Check, CheckResult, Plot};

/// The beams of pol 0 (`0x`, `1x`, `2x`).
const POL0: [usize; 3] = [0, 1, 2];

fn channels_above_half(p: &[f64]) -> Vec<usize> {
    let max = p.iter().copied().fold(0.0, f64::max);
    (0..p.len()).filter(|&k| p[k] > 0.5 * max).collect()
}

fn test_channels(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[0];
    let sh = h.shape(0).clone();
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(h.seed ^ 0xbea3);
    let m = 8usize;
    let mut chans: Vec<usize> = Vec::new();
    while chans.len() < m {
        let k = rng.random_range(sh.channels / 16..sh.channels - sh.channels / 16);
        if chans.iter().all(|&x| x.abs_diff(k) > 4) {
            chans.push(k);
        }
    }
    chans.sort_unstable();
    let amp = 0.6 / m as f64;
    // Coherent sum of n antennas: each tone at 90/n in the F-engine output.
    h.gain_all_real(&sh.output, tone_gain(h, 0, amp, 90.0 / h.n as f64))?;
    let expr: Vec<String> = chans
        .iter()
        .map(|&k| format!("cw({amp}, {})", tone_freq(h, 0, k as f64)))
        .collect();
    h.signal_all(&expr.join(" + "))?;
    let count = h.beam_heaps_per_dump();
    let mut problems = Vec::new();
    let mut plot = Plot::line("Beam power per channel", "channel", "power", "", Vec::new());
    plot.series.clear();
    let mut detected_all = Vec::new();
    for (b, (name, _)) in BEAMS.iter().enumerate() {
        let p = h.beam(b, count)?.power();
        let det = channels_above_half(&p);
        if det != chans {
            problems.push(format!("{name}: tones detected in channels {det:?}"));
        }
        plot = plot.with(
            name,
            p.iter().enumerate().map(|(k, v)| (k as f64, *v)).collect(),
            false,
        );
        detected_all.push(json!({"beam": name, "channels": det}));
    }
    let passed = problems.is_empty();
    let msg = if passed {
        String::new()
    } else {
        format!("tones in channels {chans:?}; {}", problems.join("; "))
    };
    Ok(
        CheckResult::new(c, problems.len() as f64, "beams wrong", passed, msg)
            .details(json!({"tone_channels": chans, "detected": detected_all}))
            .plot(plot),
    )
}

/// Expected beam power per complex sample of a unit-weight, unit-gain pol-0 beam: the sum
/// of every pol-0 visibility (the correlator's measure of the inputs), per spectrum,
/// averaged over the pass band, plus the beam's own quantisation (1/6 per component).
fn expected_beam_power(h: &mut Harness) -> anyhow::Result<f64> {
    let d = h.dump()?;
    let sh = h.shape(0).clone();
    let (k0, k1) = (sh.channels / 16, sh.channels - sh.channels / 16);
    let mut total = 0.0;
    for k in k0..k1 {
        for a in 0..h.n {
            for b in 0..h.n {
                total += d.vis(k, 2 * a, 2 * b).re;
            }
        }
    }
    Ok(total / ((k1 - k0) as f64 * sh.acc_len() as f64) + 1.0 / 3.0)
}

fn band_power(d: &BeamData) -> f64 {
    let p = d.power();
    let c = p.len();
    p[c / 16..c - c / 16].iter().sum::<f64>() / (c - c / 8) as f64
}

fn test_gain(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[1];
    let sh = h.shape(0).clone();
    let std = 0.1;
    let level = (20.0 / h.n as f64).max(2.0);
    h.gain_all_real(&sh.output, noise_gain(h, std, level))?;
    h.signal_all(&format!("wgn({std}, 3)"))?;
    let gains = [0.5, 1.0, 2.0];
    for (b, g) in POL0.iter().zip(gains) {
        h.beam_quant_gain(*b, g)?;
    }
    let unit = expected_beam_power(h)?;
    let count = h.beam_heaps_per_dump();
    let mut worst: f64 = 0.0;
    let mut trials = Vec::new();
    let mut pts = Vec::new();
    let mut ideal = Vec::new();
    for (b, g) in POL0.iter().zip(gains) {
        let p = band_power(&h.beam(*b, count)?);
        let expect = (unit - 1.0 / 3.0) * g * g + 1.0 / 3.0;
        let err = p / expect - 1.0;
        if err.abs() > worst.abs() {
            worst = err;
        }
        trials.push(json!({"beam": BEAMS[*b].0, "quant_gain": g, "power": p, "expected": expect, "relative_error": err}));
        pts.push((g, p));
        ideal.push((g, expect));
    }
    let passed = worst.abs() <= 0.05;
    let msg = if passed {
        String::new()
    } else {
        format!("beam power {:.1} % from expected", worst * 100.0)
    };
    Ok(
        CheckResult::new(c, worst.abs() * 100.0, "% error", passed, msg)
            .details(json!({"trials": trials}))
            .plot(
                Plot::line(
                    "Beam power vs quantiser gain",
                    "quant gain",
                    "power per sample",
                    "expected",
                    ideal,
                )
                .with("measured", pts, true),
            ),
    )
}

fn test_precision(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[2];
    let sh = h.shape(0).clone();
    let std = 0.1;
    // Strong noise: 60 levels rms in the F-engine output, a single-input beam.
    h.gain_all_real(&sh.output, noise_gain(h, std, 60.0))?;
    let noise = h.noise(std);
    h.signal_all(&noise)?;
    let mut w = vec![0.0; h.n];
    w[0] = 1.0;
    h.beam_weights(0, &w)?;
    let d = h.beam(0, h.beam_heaps_per_dump())?;
    let mut seen = [0u64; 256];
    for (_, heap) in &d.heaps {
        for &v in heap {
            seen[(i16::from(v) + 128) as usize] += 1;
        }
    }
    let distinct = seen.iter().filter(|&&n| n > 0).count();
    let min = (0..256).find(|&i| seen[i] > 0).map(|i| i as i32 - 128);
    let max = (0..256)
        .rev()
        .find(|&i| seen[i] > 0)
        .map(|i| i as i32 - 128);
    let passed = distinct == 255 && min == Some(-127) && max == Some(127);
    let msg = if passed {
        String::new()
    } else {
        format!("{distinct} distinct values from {min:?} to {max:?}")
    };
    let hist: Vec<(f64, f64)> = (0..256)
        .map(|i| (i as f64 - 128.0, seen[i] as f64))
        .collect();
    Ok(
        CheckResult::new(c, distinct as f64, "distinct values", passed, msg).plot(Plot::line(
            "Histogram of single-input beam values",
            "value",
            "count",
            BEAMS[0].0,
            hist,
        )),
    )
}

/// What is set on beam 0 just before capture-start.
#[derive(Clone, Copy)]
enum Before {
    QuantGain,
    Weights,
    Delays,
}

fn capture_start(h: &mut Harness, c: &Check, what: Before) -> anyhow::Result<CheckResult> {
    let sh = h.shape(0).clone();
    let std = 0.1;
    h.gain_all_real(&sh.output, noise_gain(h, std, 20.0 / h.n as f64))?;
    h.signal_all(&format!("wgn({std}, 5)"))?;
    // Beam 0 and the beam compared with it (2x for the delays, 1x otherwise).
    let other = match what {
        Before::Delays => 2,
        _ => 1,
    };
    for b in [0, other] {
        h.capture_stop(0, BEAMS[b].0)?;
    }
    for b in [0, other] {
        h.drain(h.beam_stream(b))?;
    }
    match what {
        Before::QuantGain => h.beam_quant_gain(0, 0.0)?,
        Before::Weights => h.beam_weights(0, &vec![0.0; h.n])?,
        Before::Delays => h.beam_delays(0, &vec![(0.0, std::f64::consts::PI); h.n])?,
    }
    let t = h.steady;
    for b in [0, other] {
        h.capture_start(0, BEAMS[b].0, t)?;
    }
    let b0 = h.beam_from(0, 0, 1)?;
    let first = b0.heaps[0].0;
    let bo = h.beam_from(other, first, 1)?;
    let (x0, xo) = (&b0.heaps[0].1, &bo.heaps[0].1);
    let nonzero = |x: &[i8]| x.iter().filter(|&&v| v != 0).count() as f64 / x.len().max(1) as f64;
    let mut problems = Vec::new();
    if first < t {
        problems.push(format!("first heap at {first} precedes capture-start {t}"));
    }
    if bo.heaps[0].0 != first {
        problems.push(format!(
            "{} has no heap at {first} (first: {})",
            BEAMS[other].0, bo.heaps[0].0
        ));
    }
    let measured = match what {
        Before::QuantGain | Before::Weights => {
            let nz0 = x0.iter().filter(|&&v| v != 0).count();
            if nz0 > 0 {
                problems.push(format!(
                    "{} has {nz0} non-zero values in its first heap",
                    BEAMS[0].0
                ));
            }
            let f = nonzero(xo);
            if f < 0.5 {
                problems.push(format!(
                    "{} is only {:.0} % non-zero",
                    BEAMS[other].0,
                    f * 100.0
                ));
            }
            nz0 as f64
        }
        Before::Delays => {
            let worst = x0
                .iter()
                .zip(xo.iter())
                .map(|(a, b)| (i16::from(*a) + i16::from(*b)).abs())
                .max()
                .unwrap_or(0);
            if worst > 2 {
                problems.push(format!(
                    "{} differs from −{} by up to {worst}",
                    BEAMS[0].0, BEAMS[other].0
                ));
            }
            let f = nonzero(x0);
            if f < 0.5 {
                problems.push(format!(
                    "{} is only {:.0} % non-zero",
                    BEAMS[0].0,
                    f * 100.0
                ));
            }
            f64::from(worst)
        }
    };
    let passed = problems.is_empty();
    let unit = match what {
        Before::Delays => "max |b0 + b2|",
        _ => "non-zero values",
    };
    Ok(
        CheckResult::new(c, measured, unit, passed, problems.join("; "))
            .details(json!({"capture_start": t, "first_heap": first,
            "nonzero_fraction_beam0": nonzero(x0), "nonzero_fraction_other": nonzero(xo)})),
    )
}

fn test_beam_quant_gains_capture_start(h: &mut Harness) -> anyhow::Result<CheckResult> {
    capture_start(h, &checks()[3], Before::QuantGain)
}

fn test_beam_weights_capture_start(h: &mut Harness) -> anyhow::Result<CheckResult> {
    capture_start(h, &checks()[4], Before::Weights)
}

fn test_beam_delays_capture_start(h: &mut Harness) -> anyhow::Result<CheckResult> {
    capture_start(h, &checks()[5], Before::Delays)
}

fn test_weight_mapping(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[6];
    let sh = h.shape(0).clone();
    let std = 0.1;
    let g = noise_gain(h, std, 20.0);
    let noise = h.noise(std);
    h.signal_all(&noise)?;
    // Antenna a's pol 0 is on in channel ch(a) only; pol 1 is off.
    let ch = |a: usize| sh.channels / 8 + 8 * a;
    for a in 0..h.n {
        let mut v = vec!["0".to_string(); sh.channels];
        v[ch(a)] = format!("{g}");
        h.gain(&sh.output, a, 0, &v)?;
        h.gain(&sh.output, a, 1, &["0".to_string()])?;
    }
    let tested = h.n.min(16);
    let mut problems = Vec::new();
    let mut pts = Vec::new();
    for a in 0..tested {
        let mut w = vec![0.0; h.n];
        w[a] = 1.0;
        h.beam_weights(0, &w)?;
        let p = h.beam(0, 2)?.power();
        let on = p[ch(a)];
        let off = (0..h.n)
            .filter(|&b| b != a)
            .map(|b| p[ch(b)])
            .fold(0.0, f64::max);
        if on <= 0.0 {
            problems.push(format!("antenna {a}: no signal in its channel {}", ch(a)));
        }
        if off > 0.0 {
            problems.push(format!("antenna {a}: signal in another antenna's channel"));
        }
        pts.push((a as f64, on));
    }
    let passed = problems.is_empty();
    Ok(CheckResult::new(
        c,
        problems.len() as f64,
        "antennas wrong",
        passed,
        problems.join("; "),
    )
    .details(json!({"antennas_tested": tested}))
    .plot(Plot::line(
        "Power in the selected antenna's channel",
        "antenna",
        "power",
        BEAMS[0].0,
        pts,
    )))
}

/// The beam checks.
pub fn checks() -> Vec<Check> {
    vec![
        Check {
            name: "test_channels",
            requirement: "",
            text: "Tones appear in the same channels in every beam.",
            method: "8 random tones (upstream: 30), same on every input; beam power per channel; channels above half the maximum.",
            threshold: "detected channels identical in every beam (and equal to the tones')",
            quick: true,
            narrowband: false,
            run: test_channels,
        },
        Check {
            name: "test_gain",
            requirement: "CBF-REQ-0117",
            text: "Beam quantiser gains scale the beam's power.",
            method: "Correlated noise; quant gains 0.5, 1, 2 on beams 0x, 1x, 2x; pass-band power vs g² × the sum of the pol-0 visibilities (correlator) + quantisation.",
            threshold: "power within 5 % of expected",
            quick: true,
            narrowband: false,
            run: test_gain,
        },
        Check {
            name: "test_precision",
            requirement: "CBF-REQ-0118",
            text: "Beams carry 8 bits: every value −127…127.",
            method: "Single-input beam (weights 1, 0, …) of strong noise (F-engine output 60 rms); distinct values over a dump's worth of heaps.",
            threshold: "exactly 255 distinct values, −127…127",
            quick: true,
            narrowband: false,
            run: test_precision,
        },
        Check {
            name: "test_beam_quant_gains_capture_start",
            requirement: "",
            text: "A quantiser gain set just before capture-start applies to the first heap.",
            method: "?capture-stop; quant gain 0 on beam 0x; ?capture-start at the XB-engine's steady-state timestamp; first heaps of 0x and 1x.",
            threshold: "beam 0 all zero; beam 1 ≥ 50 % non-zero",
            quick: true,
            narrowband: false,
            run: test_beam_quant_gains_capture_start,
        },
        Check {
            name: "test_beam_weights_capture_start",
            requirement: "",
            text: "Weights set just before capture-start apply to the first heap.",
            method: "As the quant-gain check, with weights 0 on beam 0x.",
            threshold: "beam 0 all zero; beam 1 ≥ 50 % non-zero",
            quick: false,
            narrowband: false,
            run: test_beam_weights_capture_start,
        },
        Check {
            name: "test_beam_delays_capture_start",
            requirement: "",
            text: "Beam delays set just before capture-start apply to the first heap.",
            method: "Phase π on every antenna of beam 0x before ?capture-start; first heaps of 0x and 2x at the same timestamp.",
            threshold: "beam0 ≈ −beam2 (atol 2), ≥ 50 % non-zero",
            quick: false,
            narrowband: false,
            run: test_beam_delays_capture_start,
        },
        Check {
            name: "test_weight_mapping",
            requirement: "CBF-REQ-0123",
            text: "Each beam weight applies to its own input.",
            method: "EQ gives antenna a's pol 0 one channel of its own; single-input weights for each antenna in turn (≤ 16).",
            threshold: "signal in the chosen antenna's channel only",
            quick: false,
            narrowband: false,
            run: test_weight_mapping,
        },
    ]
}
