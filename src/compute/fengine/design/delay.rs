//! Linear delay model and its evaluation on the regular output-spectrum grid (dsp.md §6,
//! katgpucbf `LinearDelayModel`).
//!
//! For an output timestamp T with r = T − start: d = d0 + r·delay_rate (ADC samples),
//! coarse = rint(d) (narrowband: rounded to a multiple of the subsampling factor S),
//! fine = d − coarse, input timestamp = T − coarse, φ = wrap(φ0 + r·phase_rate). Output
//! spectra stay on the regular grid; each gets one delay for all its samples, and a block
//! is cut wherever the coarse delay changes.

use crate::compute::fengine::FError;
use std::f64::consts::PI;

/// Wraps an angle into [−π, π).
pub(crate) fn wrap_angle(a: f64) -> f64 {
    (a + PI).rem_euclid(2.0 * PI) - PI
}

/// One piece of a delay model (katcp `?delays` entry converted to samples).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearDelayModel {
    /// ADC timestamp at which the model applies.
    pub start: u64,
    /// Delay at `start`, ADC samples (seconds × adc_rate).
    pub delay: f64,
    /// Delay rate, samples per sample (s/s); |rate| < 1.
    pub delay_rate: f64,
    /// Phase at `start`, radians.
    pub phase: f64,
    /// Phase rate, radians per ADC sample (rad/s ÷ adc_rate); |rate| ≤ π.
    pub phase_rate: f64,
}

/// The largest |delay| a model takes, ADC samples: 2^53, where every whole number of
/// samples is still an exact f64 and the coarse delay an exact i64 (61 days at 1712 MHz,
/// far beyond any engine's `--max-delay-diff`).
pub(crate) const MAX_MODEL_DELAY: f64 = (1u64 << 53) as f64;

/// A run of output spectra sharing one coarse delay.
#[derive(Debug, Clone, PartialEq)]
pub struct DelaySegment {
    /// Index of the first spectrum within the requested range.
    pub first: usize,
    /// Coarse delay, ADC samples (a multiple of the coarse unit).
    pub coarse: i64,
    /// Output timestamp of the first spectrum.
    pub timestamp: u64,
    /// Per spectrum fine delay (ADC samples) and phase (radians, wrapped; wideband
    /// including the π/2·(coarse mod 4) term).
    pub fine_delay: Vec<f64>,
    /// See `fine_delay`.
    pub phase: Vec<f64>,
}

impl DelaySegment {
    /// Spectra in the segment.
    pub fn len(&self) -> usize {
        self.fine_delay.len()
    }

    /// True if the segment has no spectra.
    pub fn is_empty(&self) -> bool {
        self.fine_delay.is_empty()
    }

    /// ADC timestamp of the first input sample of the first spectrum's window,
    /// T − coarse; `None` when that lies before timestamp 0 (a positive delay at the start
    /// of the timeline): no input exists there, so these spectra cannot be made.
    pub fn input_start(&self) -> Option<u64> {
        u64::try_from(self.timestamp as i128 - self.coarse as i128).ok()
    }

    /// Input sample index (relative to a buffer whose first sample has timestamp
    /// `buffer_timestamp`) of the first window: T − coarse − buffer_timestamp; `None` when
    /// the window starts before the buffer (or before timestamp 0).
    pub fn input_offset(&self, buffer_timestamp: u64) -> Option<usize> {
        let off = self.input_start()?.checked_sub(buffer_timestamp)?;
        usize::try_from(off).ok()
    }
}

/// The input span [start, end) that the spectra of `segs` read, `window(n)` samples from
/// each segment's [`DelaySegment::input_start`] for its n spectra. `None` when there is no
/// segment or some window would start before timestamp 0: such spectra cannot be made,
/// and the caller leaves them out (the F-engine skips their batch and counts it) rather
/// than clamp the start, which would read the wrong samples.
pub fn input_span(segs: &[DelaySegment], window: impl Fn(usize) -> usize) -> Option<(u64, u64)> {
    let mut span: Option<(u64, u64)> = None;
    for s in segs {
        let start = s.input_start()?;
        let end = start.checked_add(window(s.len()) as u64)?;
        span = Some(span.map_or((start, end), |(lo, hi)| (lo.min(start), hi.max(end))));
    }
    span
}

impl LinearDelayModel {
    /// Checks that every term is finite, |delay| ≤ [`MAX_MODEL_DELAY`], |delay_rate| < 1
    /// and |phase_rate| ≤ π rad per sample (a faster phase aliases; a rate near f64::MAX
    /// would make r·rate infinite and the phase NaN at a distant timestamp).
    pub fn validate(&self) -> Result<(), FError> {
        for (what, value) in [
            ("delay", self.delay),
            ("delay_rate", self.delay_rate),
            ("phase", self.phase),
            ("phase_rate", self.phase_rate),
        ] {
            if !value.is_finite() {
                return Err(FError::NotFinite { what, value });
            }
        }
        if self.delay_rate.abs() >= 1.0 {
            return Err(FError::BadParameter {
                what: "delay_rate",
                why: format!("|{}| must be < 1", self.delay_rate),
            });
        }
        if self.delay.abs() > MAX_MODEL_DELAY {
            return Err(FError::BadParameter {
                what: "delay",
                why: format!("|{}| samples must be at most 2^53", self.delay),
            });
        }
        if self.phase_rate.abs() > PI {
            return Err(FError::BadParameter {
                what: "phase_rate",
                why: format!("|{}| rad per sample must be at most π", self.phase_rate),
            });
        }
        Ok(())
    }

    /// (coarse, fine, phase) at output timestamp `t`; coarse a multiple of `unit`.
    pub fn at(&self, t: u64, unit: u64) -> (i64, f64, f64) {
        let r = t as i128 - self.start as i128;
        // Clamped to ±2^53 samples: a model drifted that far (a rate near 1 over years of
        // timestamps) is beyond any engine's delay window, which then skips its spectra;
        // the clamp keeps the coarse delay an exact i64 and the fine delay within a unit.
        let d = (self.delay + r as f64 * self.delay_rate).clamp(-MAX_MODEL_DELAY, MAX_MODEL_DELAY);
        let u = unit.max(1) as f64;
        let coarse = ((d / u).round_ties_even() * u) as i64;
        let fine = d - coarse as f64;
        // Reduce the phase-rate product exactly enough: r·rate computed in f64 is fine
        // for the spans of a delay model (r < 2^53).
        let phase = wrap_angle(self.phase + wrap_angle(r as f64 * self.phase_rate));
        (coarse, fine, phase)
    }

    /// Evaluates the model for `spectra` output spectra starting at timestamp `first`,
    /// `step` ADC samples apart, splitting where the coarse delay changes. `unit` is the
    /// coarse-delay resolution (1 wideband, S narrowband); `wideband` adds the
    /// π/2·(coarse mod 4) term referencing the phase to the centre frequency.
    pub fn segments(
        &self,
        first: u64,
        spectra: usize,
        step: u64,
        unit: u64,
        wideband: bool,
    ) -> Result<Vec<DelaySegment>, FError> {
        self.validate()?;
        let mut out: Vec<DelaySegment> = vec![];
        let last = (spectra as u64)
            .checked_mul(step)
            .and_then(|span| first.checked_add(span));
        if last.is_none() {
            return Err(FError::BadParameter {
                what: "spectra",
                why: "timestamps overflow".into(),
            });
        }
        for s in 0..spectra {
            let t = first + s as u64 * step;
            let (coarse, fine, mut phase) = self.at(t, unit);
            if wideband {
                phase = wrap_angle(phase + PI / 2.0 * coarse.rem_euclid(4) as f64);
            }
            match out.last_mut() {
                Some(seg) if seg.coarse == coarse => {
                    seg.fine_delay.push(fine);
                    seg.phase.push(phase);
                }
                _ => out.push(DelaySegment {
                    first: s,
                    coarse,
                    timestamp: t,
                    fine_delay: vec![fine],
                    phase: vec![phase],
                }),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_fine_split_and_segments() {
        let m = LinearDelayModel {
            start: 1000,
            delay: 10.3,
            delay_rate: 0.001,
            phase: 0.5,
            phase_rate: 0.0,
        };
        // d = 10.3 + 0.001·r; coarse changes from 10 to 11 when d crosses 10.5 (r = 200).
        let segs = m.segments(1000, 10, 64, 1, true).unwrap();
        assert_eq!(segs.len(), 2);
        assert_eq!(segs[0].coarse, 10);
        assert_eq!(segs[0].len(), 4); // r = 0, 64, 128, 192
        assert_eq!(segs[1].first, 4);
        assert_eq!(segs[1].coarse, 11);
        assert_eq!(segs[1].timestamp, 1000 + 4 * 64);
        assert!((segs[0].fine_delay[1] - (0.3 + 0.064)).abs() < 1e-12);
        assert!((segs[1].fine_delay[0] - (10.3 + 0.256 - 11.0)).abs() < 1e-12);
        // π/2·(coarse mod 4): 10 mod 4 = 2 ⇒ +π; 11 mod 4 = 3 ⇒ +3π/2.
        assert!((segs[0].phase[0] - wrap_angle(0.5 + PI)).abs() < 1e-12);
        assert!((segs[1].phase[0] - wrap_angle(0.5 + 1.5 * PI)).abs() < 1e-12);
        assert_eq!(segs[0].input_offset(900), Some(90));
        assert_eq!(segs[0].input_offset(995), None);
        assert_eq!(segs[1].input_start(), Some(1000 + 256 - 11));
        // Each segment's window from its own start: 990 + 4·64 + 8 and 1245 + 6·64 + 8.
        let window = |n: usize| n * 64 + 8;
        assert_eq!(input_span(&segs, window), Some((990, 1245 + 6 * 64 + 8)));
        assert_eq!(input_span(&[], window), None);
    }

    /// A positive delay reaching before timestamp 0: the spectra whose window would start
    /// there have no input start (their span is `None`, never a clamped one); the first
    /// spectrum whose window starts at or after 0 has one.
    #[test]
    fn windows_before_timestamp_zero_have_no_input() {
        let m = LinearDelayModel {
            start: 0,
            delay: 100.0,
            delay_rate: 0.0,
            phase: 0.0,
            phase_rate: 0.0,
        };
        let early = m.segments(0, 2, 64, 1, true).unwrap();
        assert_eq!(early[0].input_start(), None);
        assert_eq!(early[0].input_offset(0), None);
        assert_eq!(input_span(&early, |n| n * 64), None);
        let later = m.segments(128, 2, 64, 1, true).unwrap();
        assert_eq!(later[0].input_start(), Some(28));
        assert_eq!(input_span(&later, |n| n * 64), Some((28, 28 + 128)));
        // Exactly at 0 is fine.
        let edge = m.segments(100, 1, 64, 1, true).unwrap();
        assert_eq!(edge[0].input_start(), Some(0));
    }

    #[test]
    fn negative_coarse_and_narrowband_unit() {
        let m = LinearDelayModel {
            start: 0,
            delay: -13.0,
            delay_rate: 0.0,
            phase: 0.0,
            phase_rate: 0.25,
        };
        let s = m.segments(0, 3, 8, 1, true).unwrap();
        assert_eq!(s[0].coarse, -13);
        // −13 mod 4 = 3 ⇒ +3π/2 ≡ −π/2.
        assert!((s[0].phase[0] + PI / 2.0).abs() < 1e-12);
        assert!((s[0].phase[1] - wrap_angle(2.0 - PI / 2.0)).abs() < 1e-12);
        let n = m.segments(0, 1, 8, 8, false).unwrap();
        assert_eq!(n[0].coarse, -16);
        assert!((n[0].fine_delay[0] - 3.0).abs() < 1e-12);
        assert_eq!(n[0].phase[0], 0.0);
    }

    #[test]
    fn rejects_bad_models() {
        let mut m = LinearDelayModel {
            start: 0,
            delay: f64::NAN,
            delay_rate: 0.0,
            phase: 0.0,
            phase_rate: 0.0,
        };
        assert!(m.segments(0, 1, 8, 1, true).is_err());
        m.delay = 0.0;
        m.delay_rate = 1.0;
        assert!(m.segments(0, 1, 8, 1, true).is_err());
        assert!((wrap_angle(3.0 * PI) + PI).abs() < 1e-12);
        m.delay_rate = 0.0;
        // CI's fuzz find: a phase rate of 3.35e303 rad/sample made r·rate infinite and
        // the phase NaN; a delay of 5e302 samples saturated the coarse delay.
        for (delay, phase_rate) in [(5e302, 0.0), (0.0, 3.35e303), (0.0, -3.2), (-9.1e15, 0.0)] {
            m.delay = delay;
            m.phase_rate = phase_rate;
            assert!(m.validate().is_err(), "{m:?}");
        }
        // The bounds themselves are taken and evaluate finitely at the far end of time.
        m.delay = -MAX_MODEL_DELAY;
        m.phase_rate = PI;
        m.delay_rate = 0.999;
        m.validate().unwrap();
        let (coarse, fine, phase) = m.at(u64::MAX, 1);
        assert_eq!(coarse, 1 << 53);
        assert!(fine.abs() <= 0.5 && phase.is_finite(), "{fine} {phase}");
    }
}
