//! Channelisation checks (acv/test_channel.py, test_channel_shape.py, bcp): tone
//! position and SFDR, channel shape, baseline ordering, accumulation length and power,
//! linearity.

use serde_json::json;

use super::harness::{Dump, Harness};
use super::result::{Check, CheckResult, Plot};
use crate::compute::fengine::{pfb_weights, Window};

/// Lowest dB drawn (an exactly zero cross-power would be −300 dB).
const PLOT_FLOOR_DB: f64 = -120.0;

/// Target tone magnitude in the F-engine output (of 127).
const TONE_LEVEL: f64 = 100.0;

/// Σw of the wideband PFB of `channels` (Σw² = 1): a tone of amplitude A ADC units at a
/// channel centre gives |X| = A · Σw / 2 · gain (dsp.md).
pub fn pfb_sum(channels: usize) -> f64 {
    pfb_weights(2 * channels, 16, 1.0, Window::Hann)
        .map(|w| w.iter().map(|&v| f64::from(v)).sum())
        .unwrap_or(f64::NAN)
}

/// F-engine gain giving a tone of `amp` (of full scale) magnitude `level` in its channel.
pub fn tone_gain(h: &Harness, s: usize, amp: f64, level: f64) -> f64 {
    let c = h.shape(s).channels;
    level / (amp * h.adc_full_scale() * pfb_sum(c) / 2.0)
}

/// F-engine gain giving white noise of `std` (of full scale) an rms of `level` per complex
/// channel value (E|X|² = σ²·g², Σw² = 1).
pub fn noise_gain(h: &Harness, std: f64, level: f64) -> f64 {
    level / (std * h.adc_full_scale())
}

/// A tone frequency of stream `s` at channel `k` (fractional: offsets within it), on the
/// dsim's frequency grid.
pub fn tone_freq(h: &Harness, s: usize, k: f64) -> f64 {
    let grid = h.fs / super::launch::DSIM_PERIOD as f64;
    (h.shape(s).freq(k) / grid).round() * grid
}

/// |cross-correlation| of inputs 0 and 1 (one antenna's two pols) per channel: the
/// F-engines' dither and quantisation noise are independent between inputs and average
/// out of it, leaving the channel response.
fn cross_power(d: &Dump) -> Vec<f64> {
    (0..d.channels()).map(|k| d.vis(k, 0, 1).norm()).collect()
}

fn db(v: f64) -> f64 {
    10.0 * v.max(1e-30).log10()
}

/// The channels test_channelisation_and_sfdr puts a tone in (upstream's 8, 3119, ... of
/// 4096, scaled), away from the band edges.
fn sfdr_channels(c: usize) -> Vec<usize> {
    let mut v: Vec<usize> = [8.0 / 4096.0, 3119.0 / 4096.0, 0.5 + 0.37 / 4096.0, 0.28]
        .iter()
        .map(|f| ((f * c as f64) as usize).clamp(4, c - 4))
        .collect();
    v.dedup();
    v
}

fn channelisation(h: &mut Harness, c: &Check, s: usize) -> anyhow::Result<CheckResult> {
    let sh = h.shape(s).clone();
    let amp = 0.2;
    let mut worst = f64::INFINITY;
    let mut problems = Vec::new();
    let mut trials = Vec::new();
    let mut plot = Plot::line(
        "Channel response to each tone (cross-power, dB re peak)",
        "channel",
        "dB",
        "",
        Vec::new(),
    );
    plot.series.clear();
    let mut gain = tone_gain(h, s, amp, TONE_LEVEL);
    if sfdr_channels(sh.channels).is_empty() {
        anyhow::bail!("no channel to test");
    }
    for (i, &k) in sfdr_channels(sh.channels).iter().enumerate() {
        let f = tone_freq(h, s, k as f64);
        h.gain_all_real(&sh.output, gain)?;
        h.signal_all(&format!("cw({amp}, {f})"))?;
        let mut d = h.dumps(s, 1)?.remove(0);
        if i == 0 && sh.decimation > 1 {
            // The narrowband filter's gain is not the PFB's: scale to the level measured.
            let peak = d.auto(k, 0) / sh.acc_len() as f64;
            if peak > 0.0 {
                gain *= TONE_LEVEL / peak.sqrt();
                h.gain_all_real(&sh.output, gain)?;
                d = h.dumps(s, 1)?.remove(0);
            }
        }
        let p = cross_power(&d);
        let peak_k = (0..p.len())
            .max_by(|&a, &b| p[a].total_cmp(&p[b]))
            .unwrap_or(0);
        let spur = (0..p.len())
            .filter(|&j| j != peak_k)
            .map(|j| p[j])
            .fold(0.0, f64::max);
        let sfdr = db(p[peak_k]) - db(spur);
        if peak_k != k {
            problems.push(format!(
                "tone at {f:.1} Hz (channel {k}) peaked in channel {peak_k}"
            ));
        }
        worst = worst.min(sfdr);
        trials.push(
            json!({"channel": k, "frequency_hz": f, "peak_channel": peak_k, "sfdr_db": sfdr}),
        );
        let ref_db = db(p[peak_k]);
        plot = plot.with(
            &format!("tone in channel {k}: SFDR {sfdr:.1} dB"),
            p.iter()
                .enumerate()
                .map(|(j, &v)| (j as f64, (db(v) - ref_db).max(PLOT_FLOOR_DB)))
                .collect(),
            false,
        );
    }
    let passed = problems.is_empty() && worst > 53.0;
    if worst <= 53.0 {
        problems.push(format!("SFDR {worst:.1} dB is not above 53 dB"));
    }
    Ok(
        CheckResult::new(c, worst, "dB", passed, problems.join("; "))
            .details(json!({"trials": trials, "stream": sh.corrprod}))
            .plot(plot.hline(-53.0, "-53 dB")),
    )
}

fn test_channelisation_and_sfdr(h: &mut Harness) -> anyhow::Result<CheckResult> {
    channelisation(h, &checks()[0], 0)
}

fn test_channelisation_and_sfdr_narrowband(h: &mut Harness) -> anyhow::Result<CheckResult> {
    channelisation(h, &checks()[1], 1)
}

/// Widths (channels) where the response, sampled at `pts` (offset, dB re peak), first
/// falls below `level` dB on either side of the peak (linear interpolation).
pub fn width_at(pts: &[(f64, f64)], level: f64) -> Option<f64> {
    let peak = pts
        .iter()
        .enumerate()
        .max_by(|a, b| a.1 .1.total_cmp(&b.1 .1))?
        .0;
    let cross = |range: &mut dyn Iterator<Item = usize>| -> Option<f64> {
        let mut prev = peak;
        for i in range {
            let (x0, y0) = pts[prev];
            let (x1, y1) = pts[i];
            if y1 < level {
                return Some(x0 + (x1 - x0) * (y0 - level) / (y0 - y1));
            }
            prev = i;
        }
        None
    };
    let right = cross(&mut (peak + 1..pts.len()))?;
    let left = cross(&mut (0..peak).rev())?;
    Some(right - left)
}

fn test_channel_shape(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[2];
    let sh = h.shape(0).clone();
    let cc = sh.channels;
    // m tones 16 channels apart, tone j offset by j/m channel from its channel's centre:
    // each tone's neighbours sample the response at offsets i - j/m.
    let m = 16usize.min(cc / 32);
    let base = cc / 3 - (m / 2) * 16;
    let amp = 0.6 / m as f64;
    let gain = tone_gain(h, 0, amp, TONE_LEVEL);
    h.gain_all_real(&sh.output, gain)?;
    let grid = h.fs / super::launch::DSIM_PERIOD as f64;
    let f0 = tone_freq(h, 0, base as f64);
    let step = ((16.0 + 1.0 / m as f64) * sh.df / grid).round() * grid;
    h.signal_all(&format!("multicw({m}, {amp}, 0, {f0}, {step})"))?;
    let d = h.dump()?;
    let p = cross_power(&d);
    let mut pts = Vec::new();
    for j in 0..m {
        let f = f0 + j as f64 * step;
        let kf = (f - sh.f0) / sh.df;
        let centre = kf.round() as i64;
        for i in -7i64..=7 {
            let k = centre + i;
            if k < 0 || k as usize >= cc {
                continue;
            }
            pts.push(((k as f64) - kf, p[k as usize]));
        }
    }
    let peak = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let mut pts: Vec<(f64, f64)> = pts
        .into_iter()
        .map(|(x, v)| (x, db(v / peak).max(PLOT_FLOOR_DB)))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let w3 = width_at(&pts, -3.0);
    let w53 = width_at(&pts, -53.0);
    let (ratio, passed, msg) = match (w3, w53) {
        (Some(a), Some(b)) if a > 0.0 => {
            let r = b / a;
            let ok = r <= 2.0;
            let msg = if ok {
                String::new()
            } else {
                format!("-53 dB width {b:.3} exceeds twice the -3 dB width {a:.3} channels")
            };
            (r, ok, msg)
        }
        _ => (
            f64::NAN,
            false,
            "the response never fell below -3 dB and -53 dB on both sides".into(),
        ),
    };
    Ok(CheckResult::new(c, ratio, "× -3 dB width", passed, msg)
        .details(json!({"width_3db_channels": w3, "width_53db_channels": w53, "tones": m, "offsets_per_channel": m}))
        .plot(
            Plot::line(
                "Channel response vs tone offset from channel centre",
                "offset (channels)",
                "dB re peak",
                "response",
                pts,
            )
            .hline(-3.0, "-3 dB")
            .hline(-53.0, "-53 dB"),
        ))
}

/// Inputs i, j of pair p (i ≤ j) over `inputs` inputs, in order (0,0), (0,1), ...
fn pairs(inputs: usize) -> Vec<(usize, usize)> {
    (0..inputs)
        .flat_map(|i| (i..inputs).map(move |j| (i, j)))
        .collect()
}

fn test_baseline_correlation_products(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[3];
    let sh = h.shape(0).clone();
    let inputs = 2 * h.n;
    let pr = pairs(inputs);
    // Pair p owns channel 2p + 1: only its two inputs have a non-zero gain there.
    let chan = |p: usize| 2 * p + 1;
    let std = 0.1;
    let g = noise_gain(h, std, 8.0);
    h.signal_all(&format!("wgn({std}, 7)"))?;
    for input in 0..inputs {
        let mut gains = vec!["0".to_string(); sh.channels];
        for (p, &(i, j)) in pr.iter().enumerate() {
            if i == input || j == input {
                gains[chan(p)] = format!("{g}");
            }
        }
        h.gain(&sh.output, input / 2, input % 2, &gains)?;
    }
    let d = h.dump()?;
    let mut wrong = Vec::new();
    let mut grid = Vec::new();
    for (p, &(i, j)) in pr.iter().enumerate() {
        let k = chan(p);
        for (q, &(a, b)) in pr.iter().enumerate() {
            let expect = [a, b].iter().all(|x| *x == i || *x == j);
            let got = d.vis(k, a, b).norm() > 0.0;
            grid.push((p as f64, q as f64, got));
            if expect != got {
                wrong.push(format!(
                    "channel {k} (inputs {i},{j}): product of inputs {a},{b} is {}",
                    if got { "non-zero" } else { "zero" }
                ));
            }
        }
    }
    let n_wrong = wrong.len();
    let passed = n_wrong == 0;
    let msg = if passed {
        String::new()
    } else {
        format!(
            "{n_wrong} products do not match the gain pattern, e.g. {}",
            wrong[..wrong.len().min(3)].join("; ")
        )
    };
    let nz: Vec<(f64, f64)> = grid.iter().filter(|g| g.2).map(|g| (g.0, g.1)).collect();
    let expected: Vec<(f64, f64)> = pr
        .iter()
        .enumerate()
        .flat_map(|(p, &(i, j))| {
            pr.iter()
                .enumerate()
                .filter(move |(_, &(a, b))| [a, b].iter().all(|x| *x == i || *x == j))
                .map(move |(q, _)| (p as f64, q as f64))
        })
        .collect();
    let mut plot = Plot::line(
        "Non-zero products per test channel (x: input pair enabled, y: product)",
        "enabled input pair",
        "product (input pair)",
        "expected",
        expected,
    );
    plot.series[0].markers = true;
    Ok(
        CheckResult::new(c, n_wrong as f64, "wrong products", passed, msg)
            .details(json!({"input_pairs": pr.len(), "wrong": wrong}))
            .plot(plot.with("measured non-zero", nz, true)),
    )
}

fn test_accum_length(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[4];
    let fs = h.fs;
    let want = h.int_time();
    let d = h.dumps(0, 3)?;
    let spacing: Vec<f64> = d
        .windows(2)
        .map(|w| (w[1].timestamp - w[0].timestamp) as f64 / fs)
        .collect();
    // A longer gap is a lost dump (counted elsewhere), not the integration time.
    let t = spacing.iter().copied().fold(f64::INFINITY, f64::min);
    let (lo, hi) = (0.96 * want, 1.04 * want);
    let passed = (lo..=hi).contains(&t);
    let msg = if passed {
        String::new()
    } else {
        format!("dump spacing {t} s is outside [{lo}, {hi}] s (spacings {spacing:?})")
    };
    Ok(CheckResult::new(c, t, "s", passed, msg).details(json!({
        "requested_s": want, "spacings_s": spacing,
        "accumulation_samples": h.shape(0).acc_step(),
    })))
}

fn test_accum_power(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[5];
    let sh = h.shape(0).clone();
    let std = 0.1;
    let level = 32.0;
    h.gain_all_real(&sh.output, noise_gain(h, std, level))?;
    let noise = h.noise(std);
    h.signal_all(&noise)?;
    let d = h.dumps(0, 2)?;
    let spacing = (d[1].timestamp - d[0].timestamp) as f64;
    let step = sh.acc_step() as f64;
    let spacing_err = (spacing - step).abs() / step;
    // Pass band: the middle 7/8 of the channels.
    let (k0, k1) = (sh.channels / 16, sh.channels - sh.channels / 16);
    let expect = sh.acc_len() as f64 * (k1 - k0) as f64 * level * level;
    let mut worst: f64 = 0.0;
    let mut per_input = Vec::new();
    for i in 0..2 * h.n {
        let total: f64 = (k0..k1).map(|k| d[0].auto(k, i)).sum();
        let err = (total - expect) / expect;
        per_input.push(json!({"input": i, "power": total, "relative_error": err}));
        if err.abs() > worst.abs() {
            worst = err;
        }
    }
    let passed = worst.abs() <= 0.01 && spacing_err <= 1e-15;
    let mut msg = Vec::new();
    if worst.abs() > 0.01 {
        msg.push(format!(
            "total power is {:.2} % from acc_len × channels × 32²",
            worst * 100.0
        ));
    }
    if spacing_err > 1e-15 {
        msg.push(format!(
            "dump spacing {spacing} differs from {step} samples"
        ));
    }
    let spectrum: Vec<(f64, f64)> = (0..sh.channels)
        .map(|k| (k as f64, d[0].auto(k, 0) / sh.acc_len() as f64))
        .collect();
    Ok(
        CheckResult::new(c, worst * 100.0, "% error", passed, msg.join("; "))
            .details(json!({"expected": expect, "inputs": per_input, "spacing_samples": spacing}))
            .plot(
                Plot::line(
                    "Noise power per channel, input 0 (per spectrum)",
                    "channel",
                    "|X|²",
                    "measured",
                    spectrum,
                )
                .hline(level * level, "32²"),
            ),
    )
}

fn test_linearity(h: &mut Harness) -> anyhow::Result<CheckResult> {
    let c = &checks()[6];
    let sh = h.shape(0).clone();
    let k = sh.channels / 3;
    let amp0 = 0.5;
    h.gain_all_real(&sh.output, tone_gain(h, 0, amp0, 120.0))?;
    let f = tone_freq(h, 0, k as f64);
    let mut pts = Vec::new();
    let mut ideal = Vec::new();
    let mut ref_amp = None;
    let mut sq = 0.0;
    for e in 0..10 {
        let scale = 0.5f64.powi(e);
        h.signal_all(&format!("cw({}, {f})", amp0 * scale))?;
        let d = h.dump()?;
        let a = (d.vis(k, 0, 1).norm() / sh.acc_len() as f64).sqrt();
        let r = *ref_amp.get_or_insert(a);
        let x = 20.0 * scale.log10();
        let y = 20.0 * (a / r).max(1e-12).log10();
        sq += (y - x).powi(2);
        pts.push((x, y));
        ideal.push((x, x));
    }
    let mse = sq / pts.len() as f64;
    let ok = mse.is_finite() && ref_amp.is_some_and(|r| r > 0.0);
    Ok(
        CheckResult::new(c, mse, "dB² (MSE)", ok, "reported only".into())
            .reported()
            .details(json!({"channel": k, "points_db": pts}))
            .plot(
                Plot::line(
                    "Linearity: tone output vs input",
                    "input (dB re 2^0)",
                    "output (dB)",
                    "ideal",
                    ideal,
                )
                .with("measured", pts, true),
            ),
    )
}

/// The channelisation checks.
pub fn checks() -> Vec<Check> {
    vec![
        Check {
            name: "test_channelisation_and_sfdr",
            requirement: "CBF-REQ-0126",
            text: "A CW tone appears in the channel holding its frequency, with a spurious-free dynamic range above 53 dB.",
            method: "dsim cw(0.2, f) at channels 8, 3119, ... (of 4096, scaled); tone gain for |X| ≈ 100; |cross-power| of one antenna's two pols (dither averages out); SFDR = peak − highest other channel.",
            threshold: "peak in the tone's channel; every SFDR > 53 dB",
            quick: true,
            narrowband: false,
            run: test_channelisation_and_sfdr,
        },
        Check {
            name: "test_channelisation_and_sfdr_narrowband",
            requirement: "CBF-REQ-0126",
            text: "As test_channelisation_and_sfdr, for the narrowband output.",
            method: "As the wideband check on the narrowband correlator stream (gain scaled to the level measured).",
            threshold: "peak in the tone's channel; every SFDR > 53 dB",
            quick: false,
            narrowband: true,
            run: test_channelisation_and_sfdr_narrowband,
        },
        Check {
            name: "test_channel_shape",
            requirement: "CBF-REQ-0126",
            text: "Channel response: the −53 dB width is at most twice the −3 dB width.",
            method: "16 tones 16 channels apart around C/3, tone j offset j/16 channel: one dump samples the response at 16 offsets per channel over ±7 channels (cross-power).",
            threshold: "−53 dB width ≤ 2 × −3 dB width",
            quick: true,
            narrowband: false,
            run: test_channel_shape,
        },
        Check {
            name: "test_baseline_correlation_products",
            requirement: "CBF-REQ-0087, CBF-REQ-0104",
            text: "Every baseline product lands at its ICD position.",
            method: "Correlated noise on all inputs; per-channel gain masks: in channel 2p+1 only input pair p is on; the non-zero products of each channel must be exactly those of its pair.",
            threshold: "non-zero pattern equals the expected one for all baselines",
            quick: true,
            narrowband: false,
            run: test_baseline_correlation_products,
        },
        Check {
            name: "test_accum_length",
            requirement: "CBF-REQ-0096",
            text: "The integration time is 0.5 s (0.48–0.52 s).",
            method: "Shortest spacing of three received dumps' timestamps ÷ ADC rate (the requested --int-time, 0.5 s by default, ±4 %).",
            threshold: "0.48 ≤ t ≤ 0.52 s (×int_time/0.5)",
            quick: true,
            narrowband: false,
            run: test_accum_length,
        },
        Check {
            name: "test_accum_power",
            requirement: "CBF-REQ-0096",
            text: "Dumps are one integration apart and hold the power of every spectrum in it.",
            method: "Noise at F-engine output level 32 (gain from σ); total auto power over the pass band (middle 7/8) of each input vs acc_len × channels × 32².",
            threshold: "spacing = int_time exactly; power within 1 %",
            quick: true,
            narrowband: false,
            run: test_accum_power,
        },
        Check {
            name: "test_linearity",
            requirement: "",
            text: "Output amplitude follows input amplitude (reported only).",
            method: "CW scaled 2^0 … 2^−9 in one channel; output amplitude from the cross-power; mean square error in dB vs ideal.",
            threshold: "reported only",
            quick: false,
            narrowband: false,
            run: test_linearity,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The −3 dB width of a triangle falling 6 dB per unit either side is 1; a response that
    /// never falls below the level has no width.
    #[test]
    fn widths_interpolate() {
        let pts: Vec<(f64, f64)> = (-10..=10)
            .map(|i| (i as f64 * 0.25, -6.0 * (i as f64 * 0.25).abs()))
            .collect();
        assert!((width_at(&pts, -3.0).unwrap() - 1.0).abs() < 1e-12);
        assert!((width_at(&pts, -12.0).unwrap() - 4.0).abs() < 1e-12);
        assert!(width_at(&pts, -100.0).is_none());
    }

    #[test]
    fn pfb_sum_grows_with_channels() {
        let a = pfb_sum(256);
        let b = pfb_sum(1024);
        assert!(a > 10.0 && (b / a - 2.0).abs() < 0.01, "{a} {b}");
    }
}
