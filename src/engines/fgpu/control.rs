//! Run-time control of an F-engine output: gains per input and channel, and delay models
//! per input (katcp `?gain`, `?gain-all`, `?delays`), shared between the katcp server and
//! the channeliser.
//!
//! When changes apply (katgpucbf semantics):
//! * gains apply immediately: from the first batch whose controls the channeliser copies
//!   after the request (every batch after [`OutputControl::taken_through`]);
//! * a delay model applies from its load time: each output spectrum uses the model in force
//!   at its own timestamp, so a model starting inside a batch changes the spectra from the
//!   first one whose timestamp is at or after its start (a model loaded too late for a batch
//!   already copied applies from the next batch on).

use std::sync::{Arc, Mutex};

use num_complex::Complex32;

use crate::compute::fengine::{FError, LinearDelayModel};

/// A katcp gain or delay value that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    /// Not `re`, `re+imj`, `re-imj` or `imj`.
    #[error("{0:?} is not a complex number (re, re+imj)")]
    NotComplex(String),
    /// A gain that is not finite.
    #[error("{0:?}: gains must be finite")]
    GainNotFinite(String),
    /// A delay model that is not `d,dr:p,pr`.
    #[error("{0:?}: expected delay,rate:phase,rate")]
    DelayFormat(String),
    /// A delay model value that is not a number.
    #[error("{0:?} is not a number")]
    NotANumber(String),
    /// A delay model value that is not finite.
    #[error("delay model values must be finite")]
    DelayNotFinite,
    /// A delay model the compute does not take.
    #[error(transparent)]
    Model(#[from] FError),
}

/// Test-only faults (`fgpu --debug-flip-delay-sign`, `--debug-ignore-gains`,
/// `--debug-fail-compute-after`, hidden options) that `gpucbf qualify --debug-break` uses to show its checks catch a broken
/// product. Applied where the channeliser copies the controls, so the katcp requests and
/// sensors behave as usual.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DebugBreak {
    /// Every delay model applied with the opposite sign (delay, rate, phase, phase rate).
    pub flip_delay_sign: bool,
    /// The gains stay at their initial value (`--gain`).
    pub ignore_gains: bool,
    /// The channeliser's compute call fails after this many batches
    /// (`--debug-fail-compute-after`).
    pub fail_compute_after: Option<u64>,
}

/// Gains and delay models of one output.
#[derive(Debug, Clone)]
pub struct OutputControl {
    /// Complex gain per channel, per input.
    pub gains: [Vec<Complex32>; 2],
    /// Delay models per input, sorted by start; each spectrum uses the last one starting at
    /// or before its timestamp.
    pub delays: [Vec<LinearDelayModel>; 2],
    /// Latest batch timestamp whose controls the channeliser has copied: a change made now
    /// reaches every batch after it.
    pub taken_through: Option<u64>,
    /// Test-only faults (none by default).
    pub debug: DebugBreak,
    /// The initial gain, kept for [`DebugBreak::ignore_gains`].
    initial_gain: f32,
}

/// An output's controls, shared by the katcp server and the channeliser.
pub type SharedControl = Arc<Mutex<OutputControl>>;

fn zero_model() -> LinearDelayModel {
    LinearDelayModel {
        start: 0,
        delay: 0.0,
        delay_rate: 0.0,
        phase: 0.0,
        phase_rate: 0.0,
    }
}

impl OutputControl {
    /// `channels` gains of `gain` for both inputs, and zero delay models.
    pub fn new(channels: usize, gain: f32) -> Self {
        OutputControl {
            gains: [
                vec![Complex32::new(gain, 0.0); channels],
                vec![Complex32::new(gain, 0.0); channels],
            ],
            delays: [vec![zero_model()], vec![zero_model()]],
            taken_through: None,
            debug: DebugBreak::default(),
            initial_gain: gain,
        }
    }

    /// The controls as the channeliser applies them: a copy, with the test-only faults of
    /// [`OutputControl::debug`] (none by default: an exact copy).
    pub fn applied(&self) -> OutputControl {
        let mut c = self.clone();
        if c.debug.ignore_gains {
            for g in c.gains.iter_mut().flatten() {
                *g = Complex32::new(self.initial_gain, 0.0);
            }
        }
        if c.debug.flip_delay_sign {
            for m in c.delays.iter_mut().flatten() {
                m.delay = -m.delay;
                m.delay_rate = -m.delay_rate;
                m.phase = -m.phase;
                m.phase_rate = -m.phase_rate;
            }
        }
        c
    }

    /// Start of the first model of input `pol` that begins after timestamp `t`.
    pub fn next_start_after(&self, pol: usize, t: u64) -> Option<u64> {
        self.delays[pol].iter().map(|m| m.start).find(|&s| s > t)
    }

    /// Records that the channeliser copied the controls for the batch at `batch_ts`.
    pub fn mark_taken(&mut self, batch_ts: u64) {
        self.taken_through = Some(self.taken_through.map_or(batch_ts, |t| t.max(batch_ts)));
    }

    /// The model in force at timestamp `t` for input `pol`.
    pub fn model_at(&self, pol: usize, t: u64) -> LinearDelayModel {
        self.delays[pol]
            .iter()
            .rev()
            .find(|m| m.start <= t)
            .copied()
            .unwrap_or_else(zero_model)
    }

    /// Adds a model, replacing any that start at or after it; keeps the 16 latest.
    pub fn push_model(&mut self, pol: usize, m: LinearDelayModel) {
        let v = &mut self.delays[pol];
        v.retain(|x| x.start < m.start);
        v.push(m);
        if v.len() > 16 {
            v.remove(0);
        }
    }
}

/// Parses a katcp gain value: `re`, `re+imj`, `re-imj`, or `imj`.
pub fn parse_complex(s: &str) -> Result<Complex32, ValueError> {
    let t = s.trim();
    let bad = || ValueError::NotComplex(s.to_string());
    let v = if let Some(body) = t.strip_suffix('j') {
        // Split at the last sign that is not an exponent sign or the leading sign.
        let b = body.as_bytes();
        let mut split = None;
        for i in (1..b.len()).rev() {
            if (b[i] == b'+' || b[i] == b'-') && b[i - 1] != b'e' && b[i - 1] != b'E' {
                split = Some(i);
                break;
            }
        }
        match split {
            Some(i) => {
                let re: f32 = body[..i].parse().map_err(|_| bad())?;
                let im: f32 = body[i..].parse().map_err(|_| bad())?;
                Complex32::new(re, im)
            }
            None => Complex32::new(0.0, body.parse().map_err(|_| bad())?),
        }
    } else {
        Complex32::new(t.parse().map_err(|_| bad())?, 0.0)
    };
    if !(v.re.is_finite() && v.im.is_finite()) {
        return Err(ValueError::GainNotFinite(s.to_string()));
    }
    Ok(v)
}

/// Formats a gain as katgpucbf does (`re+imj`).
pub fn format_complex(c: Complex32) -> String {
    format!("{}{:+}j", c.re, c.im)
}

/// Parses one `?delays` model `d,dr:p,pr` (seconds, s/s, radians, rad/s) into a model
/// starting at ADC sample `start`.
pub fn parse_delay(s: &str, start: u64, adc_rate: f64) -> Result<LinearDelayModel, ValueError> {
    let format = || ValueError::DelayFormat(s.to_string());
    let (d, p) = s.split_once(':').ok_or_else(format)?;
    let num = |x: &str| -> Result<f64, ValueError> {
        x.trim()
            .parse()
            .map_err(|_| ValueError::NotANumber(x.to_string()))
    };
    let two = |x: &str| -> Result<(f64, f64), ValueError> {
        let (a, b) = x.split_once(',').ok_or_else(format)?;
        let (a, b) = (num(a)?, num(b)?);
        if !(a.is_finite() && b.is_finite()) {
            return Err(ValueError::DelayNotFinite);
        }
        Ok((a, b))
    };
    let (delay, delay_rate) = two(d)?;
    let (phase, phase_rate) = two(p)?;
    let m = LinearDelayModel {
        start,
        delay: delay * adc_rate,
        delay_rate,
        phase,
        phase_rate: phase_rate / adc_rate,
    };
    m.validate()?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complex_and_delay_parsing() {
        assert_eq!(parse_complex("2").unwrap(), Complex32::new(2.0, 0.0));
        assert_eq!(parse_complex("1.5-2j").unwrap(), Complex32::new(1.5, -2.0));
        assert_eq!(
            parse_complex("-1e-3+4e2j").unwrap(),
            Complex32::new(-1e-3, 4e2)
        );
        assert_eq!(parse_complex("3j").unwrap(), Complex32::new(0.0, 3.0));
        for bad in ["", "x", "1+", "nan", "inf", "1+nanj"] {
            assert!(parse_complex(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_complex(&format_complex(Complex32::new(0.5, -0.25))).unwrap(),
            Complex32::new(0.5, -0.25)
        );
        let m = parse_delay("1e-6,0:0.5,2", 100, 1e6).unwrap();
        assert!(
            (m.delay - 1.0).abs() < 1e-12 && (m.phase_rate - 2e-6).abs() < 1e-18 && m.start == 100
        );
        for bad in ["1,0", "a,0:0,0", "1,2:0,0", "nan,0:0,0", "1,0:0"] {
            assert!(parse_delay(bad, 0, 1e6).is_err(), "{bad}");
        }
    }

    /// The test-only faults: none by default (an exact copy); with them, the applied gains
    /// stay at the initial gain and every model term changes sign, while the requested
    /// values stay as they were.
    #[test]
    fn debug_breaks_change_only_what_is_applied() {
        let mut c = OutputControl::new(4, 0.5);
        c.gains[1][2] = Complex32::new(0.0, 2.0);
        c.push_model(0, parse_delay("1e-6,1e-9:0.5,2", 100, 1e6).unwrap());
        let a = c.applied();
        assert_eq!(a.gains, c.gains);
        assert_eq!(a.delays, c.delays);
        c.debug = DebugBreak {
            flip_delay_sign: true,
            ignore_gains: true,
            fail_compute_after: None,
        };
        let a = c.applied();
        assert!(a
            .gains
            .iter()
            .flatten()
            .all(|g| *g == Complex32::new(0.5, 0.0)));
        let (m, r) = (a.model_at(0, 200), c.model_at(0, 200));
        assert_eq!(m.start, r.start);
        assert_eq!(
            [m.delay, m.delay_rate, m.phase, m.phase_rate],
            [-r.delay, -r.delay_rate, -r.phase, -r.phase_rate]
        );
        assert_eq!(c.gains[1][2], Complex32::new(0.0, 2.0));
    }
}
