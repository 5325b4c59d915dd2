//! What a check is ([`Check`]: named after its upstream qualification test, with the
//! requirement it verifies, its method and threshold) and what it gives ([`CheckResult`]:
//! the measured value against the threshold, and the data of its plots).

use serde::Serialize;

use super::harness::Harness;

/// One curve of a plot.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
    /// Drawn as points rather than a line.
    pub markers: bool,
}

/// A plot of a check.
#[derive(Debug, Clone, Serialize)]
pub struct Plot {
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The curves.
    pub series: Vec<Series>,
    /// Horizontal threshold lines (value, label).
    pub hlines: Vec<(f64, String)>,
}

impl Plot {
    /// A plot with one line.
    pub fn line(title: &str, x: &str, y: &str, name: &str, points: Vec<(f64, f64)>) -> Plot {
        Plot {
            title: title.into(),
            x_label: x.into(),
            y_label: y.into(),
            series: vec![Series {
                name: name.into(),
                points,
                markers: false,
            }],
            hlines: Vec::new(),
        }
    }

    /// Adds a curve.
    pub fn with(mut self, name: &str, points: Vec<(f64, f64)>, markers: bool) -> Plot {
        self.series.push(Series {
            name: name.into(),
            points,
            markers,
        });
        self
    }

    /// Adds a threshold line.
    pub fn hline(mut self, y: f64, label: &str) -> Plot {
        self.hlines.push((y, label.into()));
        self
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    /// Upstream test name.
    pub name: String,
    /// CBF requirement ids (`CBF-REQ-0126`), empty where upstream names none.
    pub requirement: String,
    /// The requirement, in short.
    pub text: String,
    /// How it was measured here.
    pub method: String,
    /// The measured value (the worst case over the trials).
    pub measured: f64,
    /// Its unit.
    pub unit: String,
    /// The pass criterion, as text (`> 53 dB`).
    pub threshold: String,
    /// Passed.
    pub passed: bool,
    /// What failed (empty when passed), or a note.
    pub message: String,
    /// Reported only (upstream asserts nothing): passes when it could be measured.
    pub reported_only: bool,
    /// Extra numbers (per trial).
    pub details: serde_json::Value,
    /// Plot data.
    pub plots: Vec<Plot>,
    /// Seconds the check took.
    pub seconds: f64,
}

impl CheckResult {
    /// A result of check `c`: `measured` against `threshold`, `passed`.
    pub fn new(c: &Check, measured: f64, unit: &str, passed: bool, message: String) -> Self {
        CheckResult {
            name: c.name.into(),
            requirement: c.requirement.into(),
            text: c.text.into(),
            method: c.method.into(),
            measured,
            unit: unit.into(),
            threshold: c.threshold.into(),
            passed,
            message,
            reported_only: false,
            details: serde_json::Value::Null,
            plots: Vec::new(),
            seconds: 0.0,
        }
    }

    /// Check `c` could not run: failed with the error.
    pub fn error(c: &Check, e: &str) -> Self {
        CheckResult::new(c, f64::NAN, "", false, format!("error: {e}"))
    }

    /// With details.
    pub fn details(mut self, d: serde_json::Value) -> Self {
        self.details = d;
        self
    }

    /// With a plot.
    pub fn plot(mut self, p: Plot) -> Self {
        self.plots.push(p);
        self
    }

    /// Marked reported-only.
    pub fn reported(mut self) -> Self {
        self.reported_only = true;
        self
    }

    /// With the time taken.
    pub fn with_seconds(mut self, s: f64) -> Self {
        self.seconds = s;
        self
    }

    /// The one-line summary: `PASS name: measured unit (threshold) message`.
    pub fn line(&self) -> String {
        let verdict = if self.passed { "PASS" } else { "FAIL" };
        let mut s = format!(
            "{verdict} {}: {} {} (threshold {})",
            self.name,
            fmt_value(self.measured),
            self.unit,
            self.threshold
        );
        if !self.message.is_empty() {
            s.push_str(" - ");
            s.push_str(&self.message);
        }
        s
    }
}

/// A number as the report shows it (4 significant digits).
pub fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-3) {
        format!("{v:.4e}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A check: its names, requirement, threshold, and how it runs.
pub struct Check {
    /// Upstream test name.
    pub name: &'static str,
    /// Requirement ids.
    pub requirement: &'static str,
    /// The requirement in short.
    pub text: &'static str,
    /// How it is measured here.
    pub method: &'static str,
    /// Pass criterion.
    pub threshold: &'static str,
    /// In the quick subset (CI on the CPU backend).
    pub quick: bool,
    /// Needs `--narrowband`.
    pub narrowband: bool,
    /// Runs the check.
    pub run: fn(&mut Harness) -> anyhow::Result<CheckResult>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_format_compactly() {
        assert_eq!(fmt_value(53.25), "53.25");
        assert_eq!(fmt_value(2.0), "2");
        assert_eq!(fmt_value(1e-5), "1.0000e-5");
        assert_eq!(fmt_value(f64::NAN), "NaN");
    }
}
