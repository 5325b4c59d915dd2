//! xbgpu's katcp interface: `?capture-start` / `?capture-stop` per stream, and a beam's
//! weights, delays and quantiser gain.

use super::corrprod::CaptureGate;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::compute::xengine::BeamSet;
use crate::control::sampling::float_repr;
use crate::control::{Device, SensorSet, Status};

/// Why a katcp request failed (its text is the `!fail` message).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The request names no stream.
    #[error("which stream?")]
    NoStream,
    /// The request names a stream this engine does not have.
    #[error("unknown stream {0:?}")]
    UnknownStream(String),
    /// The request names no beam.
    #[error("which beam?")]
    NoBeam,
    /// The request names a beam this engine does not form.
    #[error("unknown beam {0:?}")]
    UnknownBeam(String),
    /// Arguments that do not fit the request.
    #[error("usage: {0}")]
    Usage(String),
    /// A value that is not a number.
    #[error("{0:?} is not a number")]
    NotANumber(String),
    /// A value that is not finite.
    #[error("values must be finite")]
    NotFinite,
    /// A weight or gain the beamformer's f32 arithmetic cannot hold (it would become
    /// infinite and zero the beam).
    #[error("{what} {value:e} is beyond the f32 range (±{max:e})")]
    BeyondF32 {
        /// What it is (`weight`, `quantiser gain`).
        what: &'static str,
        /// The value.
        value: f64,
        /// The largest magnitude taken.
        max: f32,
    },
    /// Not one value per antenna.
    #[error("{given} {what} given, {n_ants} antennas")]
    Count {
        /// Values given.
        given: usize,
        /// What they are (`weights`, `delays`).
        what: &'static str,
        /// Antennas.
        n_ants: usize,
    },
    /// Not exactly one quantiser gain.
    #[error("give one gain")]
    OneGain,
    /// A beam delay that is not `delay:phase`.
    #[error("{0:?}: expected delay:phase")]
    DelayPhase(String),
    /// The beam set was poisoned by a panic elsewhere.
    #[error("lock poisoned")]
    LockPoisoned,
    /// A request this engine does not serve.
    #[error("unknown request {0}")]
    Unknown(String),
}

/// xbgpu's katcp device: capture start and stop per stream, beam weights, delays and
/// quantiser gains.
pub struct XbDevice {
    /// The sensors.
    pub sensors: SensorSet,
    /// Every stream (correlation products and beams) and its sending switch.
    pub outputs: Vec<(String, Arc<CaptureGate>)>,
    /// Beam names, in the beam set's order.
    pub beams: Vec<String>,
    /// The beam set the beamformer reads.
    pub set: Arc<Mutex<BeamSet>>,
    /// Antennas.
    pub n_ants: usize,
    /// ADC timestamp just past the input chunk most recently taken for beamforming
    /// ([`super::beams::BPipeline::steady`]).
    pub steady: Arc<AtomicU64>,
}

impl XbDevice {
    fn output(&self, name: Option<&String>) -> Result<&Arc<CaptureGate>, RequestError> {
        let name = name.ok_or(RequestError::NoStream)?;
        self.outputs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| e)
            .ok_or_else(|| RequestError::UnknownStream(name.clone()))
    }

    fn beam(&self, name: Option<&String>) -> Result<usize, RequestError> {
        let name = name.ok_or(RequestError::NoBeam)?;
        self.beams
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| RequestError::UnknownBeam(name.clone()))
    }

    fn floats(&self, args: &[String]) -> Result<Vec<f64>, RequestError> {
        let v = args
            .iter()
            .map(|a| {
                a.parse::<f64>()
                    .map_err(|_| RequestError::NotANumber(a.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if v.iter().any(|x| !x.is_finite()) {
            return Err(RequestError::NotFinite);
        }
        Ok(v)
    }

    /// `v` unless some value's magnitude is beyond f32 (`what`: `weight`).
    fn within_f32(what: &'static str, v: Vec<f64>) -> Result<Vec<f64>, RequestError> {
        match v.iter().find(|x| x.abs() > f64::from(f32::MAX)) {
            Some(&value) => Err(RequestError::BeyondF32 {
                what,
                value,
                max: f32::MAX,
            }),
            None => Ok(v),
        }
    }

    fn set(&self) -> Result<std::sync::MutexGuard<'_, BeamSet>, RequestError> {
        self.set.lock().map_err(|_| RequestError::LockPoisoned)
    }

    /// After a change to the beam set (its lock released): T, the end of the input chunk
    /// most recently taken for beamforming (0 before any), from which the beams have the
    /// change; `steady-state-timestamp` moves to it if that is later. The chunk after the one
    /// seen here reads the set after the change (see [`super::beams::BPipeline::taken`]).
    fn steady_after_change(&self) -> u64 {
        let t = self.steady.load(Ordering::SeqCst);
        let name = super::sensors::STEADY_STATE;
        let old = self
            .sensors
            .get(name)
            .and_then(|s| s.value.parse::<u64>().ok())
            .unwrap_or(0);
        if t > old {
            self.sensors.set(name, t, Status::Nominal);
        }
        t
    }

    /// Sets beam `b`'s sensor `key` to `value` with upstream's timestamp quirk: the katcp
    /// timestamp is T, the steady-state ADC sample count, not UNIX seconds.
    fn beam_sensor(&self, b: usize, key: &str, value: String, t: u64) {
        let name = format!("{}.{key}", self.beams[b]);
        self.sensors.set_at(&name, value, Status::Nominal, t as f64);
    }

    /// Serves one request.
    fn handle(&self, name: &str, args: &[String]) -> Result<Vec<String>, RequestError> {
        match name {
            "capture-start" | "capture-stop" => {
                let most = if name == "capture-start" { 2 } else { 1 };
                if args.len() > most {
                    return Err(RequestError::Usage(format!(
                        "?{name} stream{}",
                        if most == 2 { " [timestamp]" } else { "" }
                    )));
                }
                let e = self.output(args.first())?;
                if name == "capture-stop" {
                    e.stop();
                    return Ok(vec![]);
                }
                // The ADC timestamp from which data go out (katgpucbf's int argument).
                let ts = match args.get(1) {
                    None => 0,
                    Some(t) => t
                        .parse::<u64>()
                        .map_err(|_| RequestError::Usage(format!("?{name} stream [timestamp]: timestamp {t:?} is not a non-negative integer")))?,
                };
                e.start(ts);
                Ok(vec![])
            }
            "beam-weights" => {
                let b = self.beam(args.first())?;
                let w = Self::within_f32("weight", self.floats(&args[1..])?)?;
                if w.len() != self.n_ants {
                    return Err(RequestError::Count {
                        given: w.len(),
                        what: "weights",
                        n_ants: self.n_ants,
                    });
                }
                self.set()?.beams[b].weights = w.clone();
                let t = self.steady_after_change();
                self.beam_sensor(b, "weight", float_list(&w), t);
                Ok(vec![])
            }
            "beam-quant-gains" => {
                let b = self.beam(args.first())?;
                let g = Self::within_f32("quantiser gain", self.floats(&args[1..])?)?;
                if g.len() != 1 {
                    return Err(RequestError::OneGain);
                }
                self.set()?.beams[b].quant_gain = g[0];
                let t = self.steady_after_change();
                self.beam_sensor(b, "quantiser-gain", float_repr(g[0]), t);
                Ok(vec![])
            }
            "beam-delays" => {
                let b = self.beam(args.first())?;
                if args.len() - 1 != self.n_ants {
                    return Err(RequestError::Count {
                        given: args.len() - 1,
                        what: "delays",
                        n_ants: self.n_ants,
                    });
                }
                let mut d = Vec::new();
                let mut p = Vec::new();
                for a in &args[1..] {
                    let (x, y) = a
                        .split_once(':')
                        .ok_or_else(|| RequestError::DelayPhase(a.clone()))?;
                    let v = self.floats(&[x.to_string(), y.to_string()])?;
                    d.push(v[0]);
                    p.push(v[1]);
                }
                let value = delay_value(&d, &p);
                {
                    let mut set = self.set()?;
                    set.beams[b].delays = d;
                    set.beams[b].phases = p;
                }
                let t = self.steady_after_change();
                self.beam_sensor(b, "delay", format!("({t}, {value})"), t);
                Ok(vec![])
            }
            _ => Err(RequestError::Unknown(name.to_string())),
        }
    }
}

/// A list of floats as Python's `str(list)` writes it: `[1.0, 0.5, 1e-09]`.
pub fn float_list(v: &[f64]) -> String {
    let items: Vec<String> = v.iter().map(|&x| float_repr(x)).collect();
    format!("[{}]", items.join(", "))
}

/// The `delay` sensor's fields after T: `d0, p0, d1, p1, ...` as Python's `str()` writes
/// floats.
pub fn delay_value(delays: &[f64], phases: &[f64]) -> String {
    let items: Vec<String> = delays
        .iter()
        .zip(phases)
        .flat_map(|(&d, &p)| [float_repr(d), float_repr(p)])
        .collect();
    items.join(", ")
}

impl Device for XbDevice {
    fn api_version(&self) -> String {
        "katgpucbf-xbgpu-1.0".into()
    }

    fn requests(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            (
                "capture-start",
                "Start transmitting a stream: ?capture-start stream",
            ),
            (
                "capture-stop",
                "Stop transmitting a stream: ?capture-stop stream",
            ),
            (
                "beam-weights",
                "Set a beam's antenna weights: ?beam-weights beam w0 … w(n−1)",
            ),
            (
                "beam-delays",
                "Set a beam's delays and phases: ?beam-delays beam d0:φ0 … (seconds:radians)",
            ),
            (
                "beam-quant-gains",
                "Set a beam's quantisation gain: ?beam-quant-gains beam g",
            ),
        ]
    }

    fn request(
        &self,
        name: &str,
        args: &[String],
    ) -> Result<Vec<String>, crate::control::RequestError> {
        Ok(self.handle(name, args)?)
    }

    fn sensors(&self) -> &SensorSet {
        &self.sensors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::xengine::Beam;

    fn device() -> XbDevice {
        let beam = Beam {
            pol: 0,
            quant_gain: 1.0,
            weights: vec![1.0; 2],
            delays: vec![0.0; 2],
            phases: vec![0.0; 2],
        };
        XbDevice {
            sensors: SensorSet::default(),
            outputs: vec![("bcp".into(), Arc::new(CaptureGate::new(false)))],
            beams: vec!["b0".into()],
            set: Arc::new(Mutex::new(BeamSet {
                beams: vec![beam],
                channel_offset: 0,
                n_channels_total: 64,
                bandwidth: 856e6,
                dither: true,
                seed: 1,
            })),
            n_ants: 2,
            steady: Arc::new(AtomicU64::new(0)),
        }
    }

    fn req(d: &XbDevice, name: &str, args: &[&str]) -> Result<Vec<String>, RequestError> {
        d.handle(
            name,
            &args.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        )
    }

    /// Weights and gains beyond f32 (1e39 became inf and zeroed the beam) fail naming the
    /// value, and the beam keeps its previous ones; the largest f32 is taken.
    #[test]
    fn weights_and_gains_beyond_f32_fail_and_change_nothing() {
        let d = device();
        req(&d, "beam-weights", &["b0", "0.5", "2"]).unwrap();
        let e = req(&d, "beam-weights", &["b0", "1", "1e39"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "weight 1e39 is beyond the f32 range (±3.4028235e38)"
        );
        assert!(req(&d, "beam-weights", &["b0", "-1e39", "1"]).is_err());
        assert_eq!(d.set.lock().unwrap().beams[0].weights, vec![0.5, 2.0]);
        let e = req(&d, "beam-quant-gains", &["b0", "1e39"]).unwrap_err();
        assert!(
            e.to_string().starts_with("quantiser gain 1e39 is beyond"),
            "{e}"
        );
        assert_eq!(d.set.lock().unwrap().beams[0].quant_gain, 1.0);
        let max = (f32::MAX as f64).to_string();
        req(&d, "beam-quant-gains", &["b0", &max]).unwrap();
        assert_eq!(d.set.lock().unwrap().beams[0].quant_gain, f32::MAX as f64);
    }

    /// `?capture-start bcp x` took the extra argument silently.
    #[test]
    fn capture_requests_take_a_stream_and_a_start_timestamp() {
        let d = device();
        let e = req(&d, "capture-stop", &["bcp", "x"]).unwrap_err();
        assert_eq!(e.to_string(), "usage: ?capture-stop stream");
        let e = req(&d, "capture-start", &["bcp", "1", "2"]).unwrap_err();
        assert_eq!(e.to_string(), "usage: ?capture-start stream [timestamp]");
        for bad in ["x", "-1", "1.5"] {
            assert!(req(&d, "capture-start", &["bcp", bad]).is_err(), "{bad}");
        }
        let gate = &d.outputs[0].1;
        assert!(!gate.is_on());
        req(&d, "capture-start", &["bcp"]).unwrap();
        assert!(gate.is_on() && gate.sends(0));
        // From a timestamp: data stamped before it stay home.
        req(&d, "capture-start", &["bcp", "8192"]).unwrap();
        assert!(!gate.sends(8191) && gate.sends(8192));
        // Stop resets the timestamp: a later start without one sends at once.
        req(&d, "capture-stop", &["bcp"]).unwrap();
        assert!(!gate.sends(1 << 40));
        req(&d, "capture-start", &["bcp"]).unwrap();
        assert!(gate.sends(0));
    }

    /// A beam request moves `steady-state-timestamp` to the end of the chunk most recently
    /// taken (never back), and sets the beam sensor in upstream's format with katcp
    /// timestamp T (ADC samples); a failed request moves nothing.
    #[test]
    fn beam_requests_set_steady_state_and_upstream_formats() {
        let d = device();
        for n in [
            "steady-state-timestamp",
            "b0.delay",
            "b0.weight",
            "b0.quantiser-gain",
        ] {
            d.sensors
                .add(n, "", "", crate::control::SensorType::String, "");
        }
        d.sensors.set("steady-state-timestamp", 0, Status::Nominal);
        let get = |n: &str| {
            let s = d.sensors.get(n).unwrap();
            (s.value, s.timestamp)
        };
        // Before any data: T = 0.
        req(&d, "beam-quant-gains", &["b0", "2"]).unwrap();
        assert_eq!(get("b0.quantiser-gain"), ("2.0".into(), 0.0));
        assert_eq!(get("steady-state-timestamp").0, "0");
        d.steady.store(1 << 21, Ordering::SeqCst);
        req(&d, "beam-delays", &["b0", "1e-9:0.5", "-2.5e-10:0"]).unwrap();
        let t = (1u64 << 21) as f64;
        assert_eq!(
            get("b0.delay"),
            ("(2097152, 1e-09, 0.5, -2.5e-10, 0.0)".into(), t)
        );
        assert_eq!(get("steady-state-timestamp").0, "2097152");
        assert_eq!(d.set.lock().unwrap().beams[0].delays, vec![1e-9, -2.5e-10]);
        req(&d, "beam-weights", &["b0", "1", "0.25"]).unwrap();
        assert_eq!(get("b0.weight"), ("[1.0, 0.25]".into(), t));
        // Malformed: nothing moves.
        d.steady.store(1 << 22, Ordering::SeqCst);
        assert!(req(&d, "beam-delays", &["b0", "1e-9", "0:0"]).is_err());
        assert!(req(&d, "beam-weights", &["b0", "1"]).is_err());
        assert_eq!(get("steady-state-timestamp").0, "2097152");
        assert_eq!(get("b0.weight").0, "[1.0, 0.25]");
    }
}
