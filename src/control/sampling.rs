//! Sensor sampling strategies (`?sensor-sampling`), as aiokatcp servers apply them: which
//! readings of a subscribed sensor a client is sent as `#sensor-status` informs, and when.
//! [`Sampler`] is pure state: the client's writer feeds it readings and clock ticks and
//! sends what it returns.

use std::time::{Duration, Instant};

use super::sensors::{Sensor, SensorType, Status};

/// A katcp sampling strategy with its parameters (seconds for periods).
#[derive(Debug, Clone, PartialEq)]
pub enum Strategy {
    /// No informs.
    None,
    /// The sensor's own choice: every assignment, or for a rate-limited sensor
    /// `event-rate SHORTEST inf`.
    Auto,
    /// The current reading every P seconds.
    Period(f64),
    /// Each change of value or status.
    Event,
    /// Each change of status, or of value by more than D (integer and float sensors).
    Differential(f64),
    /// Each change, at most every SHORTEST and at least every LONGEST seconds.
    EventRate(f64, f64),
    /// `differential D` with `event-rate`'s bounds.
    DifferentialRate(f64, f64, f64),
}

/// Formats a float as Python's `repr` does (`1.0`, `0.5`, `inf`, `1e-05`,
/// `-1.7976931348623157e+308`), as aiokatcp encodes float sensor values and echoes
/// strategy parameters: the shortest round-trip digits, exponents signed with at least two
/// digits.
pub fn float_repr(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    if v.is_nan() {
        return "nan".into();
    }
    let d = format!("{v:?}");
    match d.split_once('e') {
        Some((m, e)) => {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(x) => ('-', x),
                None => ('+', e),
            };
            format!("{m}e{sign}{digits:0>2}")
        }
        None => d,
    }
}

fn param(args: &[String], i: usize, what: &str) -> Result<f64, String> {
    let a = args.get(i).ok_or_else(|| format!("missing {what}"))?;
    a.parse::<f64>()
        .ok()
        .filter(|v| !v.is_nan())
        .ok_or_else(|| format!("could not parse {what} {a:?} as a float"))
}

impl Strategy {
    /// Parses `strategy [params...]` for a sensor of type `stype` (`None` when the request
    /// names several sensors: each is checked).
    pub fn parse(args: &[String], stypes: &[&SensorType]) -> Result<Strategy, String> {
        let name = args.first().map(String::as_str).unwrap_or("");
        let want = |n: usize| {
            if args.len() - 1 != n {
                Err(format!(
                    "strategy {name} takes {n} parameter(s) ({} given)",
                    args.len() - 1
                ))
            } else {
                Ok(())
            }
        };
        let numeric = || -> Result<(), String> {
            if stypes
                .iter()
                .all(|t| matches!(t, SensorType::Integer | SensorType::Float))
            {
                Ok(())
            } else {
                Err("differential strategies are only valid for integer and float sensors".into())
            }
        };
        let rates = |s: f64, l: f64| -> Result<(), String> {
            if s < 0.0 {
                return Err("shortest period must be non-negative".into());
            }
            if l <= 0.0 || l < s {
                return Err("longest period must be positive and at least the shortest".into());
            }
            Ok(())
        };
        let st = match name {
            "none" => want(0).map(|_| Strategy::None)?,
            "auto" => want(0).map(|_| Strategy::Auto)?,
            "event" => want(0).map(|_| Strategy::Event)?,
            "period" => {
                want(1)?;
                let p = param(args, 1, "period")?;
                if !(p > 0.0 && p.is_finite()) {
                    return Err("period must be positive".into());
                }
                Strategy::Period(p)
            }
            "differential" => {
                want(1)?;
                numeric()?;
                let d = param(args, 1, "difference")?;
                if d < 0.0 {
                    return Err("difference must be non-negative".into());
                }
                Strategy::Differential(d)
            }
            "event-rate" => {
                want(2)?;
                let (s, l) = (param(args, 1, "shortest")?, param(args, 2, "longest")?);
                rates(s, l)?;
                Strategy::EventRate(s, l)
            }
            "differential-rate" => {
                want(3)?;
                numeric()?;
                let d = param(args, 1, "difference")?;
                let (s, l) = (param(args, 2, "shortest")?, param(args, 3, "longest")?);
                if d < 0.0 {
                    return Err("difference must be non-negative".into());
                }
                rates(s, l)?;
                Strategy::DifferentialRate(d, s, l)
            }
            other => return Err(format!("unknown strategy {other:?}")),
        };
        Ok(st)
    }

    /// The strategy and parameters as the reply reports them.
    pub fn describe(&self) -> Vec<String> {
        let f = |v: &f64| float_repr(*v);
        match self {
            Strategy::None => vec!["none".into()],
            Strategy::Auto => vec!["auto".into()],
            Strategy::Event => vec!["event".into()],
            Strategy::Period(p) => vec!["period".into(), f(p)],
            Strategy::Differential(d) => vec!["differential".into(), f(d)],
            Strategy::EventRate(s, l) => vec!["event-rate".into(), f(s), f(l)],
            Strategy::DifferentialRate(d, s, l) => {
                vec!["differential-rate".into(), f(d), f(s), f(l)]
            }
        }
    }
}

fn secs(v: f64) -> Option<Duration> {
    (v.is_finite() && v >= 0.0).then(|| Duration::from_secs_f64(v.min(1e9)))
}

/// One client's sampling of one sensor.
#[derive(Debug, Clone)]
pub struct Sampler {
    /// The strategy asked for (what a query reports: `auto` stays `auto`).
    pub asked: Strategy,
    /// The strategy applied (`auto` of a rate-limited sensor is `event-rate`).
    pub strategy: Strategy,
    /// The value and status last sent, and when.
    last: Option<(String, Status, Instant)>,
    /// A changed reading held back by a shortest period, with when it is due.
    pending: Option<(Sensor, Instant)>,
    /// The next periodic report (period, or an event-rate's longest).
    next_periodic: Option<Instant>,
}

impl Sampler {
    /// A sampler of `strategy` for `sensor`; its first report (`None` for the `none`
    /// strategy) is sent at once, as aiokatcp does on subscribing.
    pub fn new(strategy: Strategy, sensor: &Sensor, now: Instant) -> (Sampler, Option<Sensor>) {
        let mut s = Sampler {
            asked: strategy.clone(),
            strategy: effective(strategy, sensor),
            last: None,
            pending: None,
            next_periodic: None,
        };
        if s.strategy == Strategy::None {
            return (s, None);
        }
        s.sent(sensor, now);
        (s, Some(sensor.clone()))
    }

    fn sent(&mut self, r: &Sensor, now: Instant) {
        self.last = Some((r.value.clone(), r.status, now));
        self.pending = None;
        self.next_periodic = match self.strategy {
            Strategy::Period(p) => secs(p).map(|d| now + d),
            Strategy::EventRate(_, l) | Strategy::DifferentialRate(_, _, l) => {
                secs(l).map(|d| now + d)
            }
            _ => None,
        };
    }

    fn changed(&self, r: &Sensor) -> bool {
        let Some((v, st, _)) = &self.last else {
            return true;
        };
        if *st != r.status {
            return true;
        }
        match self.strategy {
            Strategy::Differential(d) | Strategy::DifferentialRate(d, _, _) => {
                match (v.parse::<f64>(), r.value.parse::<f64>()) {
                    (Ok(a), Ok(b)) => (b - a).abs() > d,
                    _ => *v != r.value,
                }
            }
            _ => *v != r.value,
        }
    }

    /// A new reading of the sensor: the reading to send now, if any.
    pub fn update(&mut self, r: &Sensor, now: Instant) -> Option<Sensor> {
        match self.strategy {
            Strategy::None | Strategy::Period(_) => None,
            Strategy::Auto => {
                self.sent(r, now);
                Some(r.clone())
            }
            Strategy::Event | Strategy::Differential(_) => {
                if self.changed(r) {
                    self.sent(r, now);
                    Some(r.clone())
                } else {
                    None
                }
            }
            Strategy::EventRate(s, _) | Strategy::DifferentialRate(_, s, _) => {
                if !self.changed(r) {
                    // An unchanged value also cancels a held-back change back to it.
                    if self.pending.is_some() {
                        self.pending = None;
                    }
                    return None;
                }
                let earliest = self
                    .last
                    .as_ref()
                    .and_then(|(_, _, at)| secs(s).map(|d| *at + d))
                    .unwrap_or(now);
                if now >= earliest {
                    self.sent(r, now);
                    Some(r.clone())
                } else {
                    self.pending = Some((r.clone(), earliest));
                    None
                }
            }
        }
    }

    /// When [`Sampler::tick`] next has something to do.
    pub fn due(&self) -> Option<Instant> {
        match (&self.pending, self.next_periodic) {
            (Some((_, p)), Some(n)) => Some((*p).min(n)),
            (Some((_, p)), None) => Some(*p),
            (None, n) => n,
        }
    }

    /// The clock reached `now`; `current` is the sensor's latest reading: the reading to
    /// send, if one is due.
    pub fn tick(&mut self, current: &Sensor, now: Instant) -> Option<Sensor> {
        if let Some((r, at)) = &self.pending {
            if now >= *at {
                let r = r.clone();
                self.sent(&r, now);
                return Some(r);
            }
        }
        if self.next_periodic.is_some_and(|n| now >= n) {
            self.sent(current, now);
            return Some(current.clone());
        }
        None
    }
}

/// A client's subscriptions: sensor name → sampler. The client's reader sets them
/// (`?sensor-sampling`); its writer applies them to readings and clock ticks.
#[derive(Debug, Default)]
pub struct Session {
    /// The samplers, by sensor name.
    pub subs: std::sync::Mutex<std::collections::BTreeMap<String, Sampler>>,
    /// True once any strategy other than `none` was set (readings are forwarded then).
    pub active: std::sync::atomic::AtomicBool,
}

impl Session {
    /// The earliest time a sampler has something to do.
    pub fn due(&self) -> Option<Instant> {
        self.subs
            .lock()
            .ok()?
            .values()
            .filter_map(Sampler::due)
            .min()
    }
}

/// `auto` for a rate-limited sensor is `event-rate SHORTEST inf`.
fn effective(strategy: Strategy, sensor: &Sensor) -> Strategy {
    match (strategy, sensor.auto_rate) {
        (Strategy::Auto, Some(s)) => Strategy::EventRate(s, f64::INFINITY),
        (st, _) => st,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(v: &str, status: Status) -> Sensor {
        Sensor {
            name: "x".into(),
            description: String::new(),
            units: String::new(),
            stype: SensorType::Integer,
            value: v.into(),
            status,
            timestamp: 0.0,
            auto_rate: None,
        }
    }

    fn strat(a: &[&str]) -> Result<Strategy, String> {
        let v: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        Strategy::parse(&v, &[&SensorType::Integer])
    }

    #[test]
    fn floats_are_written_as_python_repr() {
        assert_eq!(float_repr(1.0), "1.0");
        assert_eq!(float_repr(0.2), "0.2");
        assert_eq!(float_repr(1e-5), "1e-05");
        assert_eq!(float_repr(f64::MIN), "-1.7976931348623157e+308");
        assert_eq!(float_repr(1e16), "1e+16");
        assert_eq!(float_repr(f64::INFINITY), "inf");
    }

    #[test]
    fn strategies_parse_and_refuse_bad_parameters() {
        assert_eq!(strat(&["auto"]), Ok(Strategy::Auto));
        assert_eq!(strat(&["period", "0.5"]), Ok(Strategy::Period(0.5)));
        assert_eq!(
            strat(&["event-rate", "1", "inf"]).unwrap().describe(),
            ["event-rate", "1.0", "inf"]
        );
        assert_eq!(
            strat(&["differential-rate", "2", "0", "10"]),
            Ok(Strategy::DifferentialRate(2.0, 0.0, 10.0))
        );
        for bad in [
            &["period", "0"][..],
            &["period"],
            &["period", "x"],
            &["period", "nan"],
            &["event", "1"],
            &["event-rate", "2", "1"],
            &["event-rate", "-1", "1"],
            &["differential", "-1"],
            &["sometimes"],
            &[],
        ] {
            assert!(strat(bad).is_err(), "{bad:?}");
        }
        let v: Vec<String> = vec!["differential".into(), "1".into()];
        assert!(Strategy::parse(&v, &[&SensorType::String]).is_err());
    }

    #[test]
    fn event_and_differential_report_changes_only() {
        let t0 = Instant::now();
        let (mut s, first) = Sampler::new(Strategy::Event, &reading("1", Status::Nominal), t0);
        assert!(first.is_some());
        assert!(s.update(&reading("1", Status::Nominal), t0).is_none());
        assert!(s.update(&reading("1", Status::Warn), t0).is_some());
        assert!(s.update(&reading("2", Status::Warn), t0).is_some());
        let (mut d, _) = Sampler::new(
            Strategy::Differential(5.0),
            &reading("10", Status::Nominal),
            t0,
        );
        assert!(d.update(&reading("14", Status::Nominal), t0).is_none());
        assert!(d.update(&reading("16", Status::Nominal), t0).is_some());
        assert!(d.update(&reading("17", Status::Error), t0).is_some());
        let (mut a, _) = Sampler::new(Strategy::Auto, &reading("1", Status::Nominal), t0);
        assert!(a.update(&reading("1", Status::Nominal), t0).is_some());
        let (mut n, first) = Sampler::new(Strategy::None, &reading("1", Status::Nominal), t0);
        assert!(first.is_none() && n.update(&reading("2", Status::Nominal), t0).is_none());
        assert_eq!(n.due(), None);
    }

    #[test]
    fn rates_hold_changes_back_and_repeat_the_value() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let r1 = reading("1", Status::Nominal);
        let (mut s, _) = Sampler::new(Strategy::EventRate(1.0, 5.0), &r1, t0);
        // A change 0.2 s after the last report waits until 1 s.
        assert!(s.update(&reading("2", Status::Nominal), ms(200)).is_none());
        assert_eq!(s.due(), Some(ms(1000)));
        assert!(s.tick(&reading("2", Status::Nominal), ms(900)).is_none());
        assert_eq!(
            s.tick(&reading("2", Status::Nominal), ms(1000))
                .unwrap()
                .value,
            "2"
        );
        // Nothing changes: the value is repeated at the longest period.
        assert_eq!(s.due(), Some(ms(6000)));
        assert!(s.tick(&reading("2", Status::Nominal), ms(6000)).is_some());
        // Period: reports on the clock only.
        let (mut p, _) = Sampler::new(Strategy::Period(0.5), &r1, t0);
        assert!(p.update(&reading("3", Status::Nominal), ms(10)).is_none());
        assert_eq!(
            p.tick(&reading("3", Status::Nominal), ms(500))
                .unwrap()
                .value,
            "3"
        );
        assert_eq!(p.due(), Some(ms(1000)));
        // auto on a rate-limited sensor is event-rate SHORTEST inf.
        let mut rl = r1.clone();
        rl.auto_rate = Some(1.0);
        let (a, _) = Sampler::new(Strategy::Auto, &rl, t0);
        assert_eq!(a.strategy, Strategy::EventRate(1.0, f64::INFINITY));
        assert_eq!(a.due(), None);
    }
}
