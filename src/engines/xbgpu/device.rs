//! xbgpu's katcp interface: `?capture-start` / `?capture-stop` per stream, and a beam's
//! weights, delays and quantiser gain.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::compute::xengine::BeamSet;
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
    pub outputs: Vec<(String, Arc<AtomicBool>)>,
    /// Beam names, in the beam set's order.
    pub beams: Vec<String>,
    /// The beam set the beamformer reads.
    pub set: Arc<Mutex<BeamSet>>,
    /// Antennas.
    pub n_ants: usize,
}

impl XbDevice {
    fn output(&self, name: Option<&String>) -> Result<&Arc<AtomicBool>, RequestError> {
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

    fn set(&self) -> Result<std::sync::MutexGuard<'_, BeamSet>, RequestError> {
        self.set.lock().map_err(|_| RequestError::LockPoisoned)
    }

    /// Serves one request.
    fn handle(&self, name: &str, args: &[String]) -> Result<Vec<String>, RequestError> {
        match name {
            "capture-start" | "capture-stop" => {
                if args.len() > 2 {
                    return Err(RequestError::Usage(format!("?{name} stream")));
                }
                let e = self.output(args.first())?;
                e.store(name == "capture-start", Ordering::Relaxed);
                Ok(vec![])
            }
            "beam-weights" => {
                let b = self.beam(args.first())?;
                let w = self.floats(&args[1..])?;
                if w.len() != self.n_ants {
                    return Err(RequestError::Count {
                        given: w.len(),
                        what: "weights",
                        n_ants: self.n_ants,
                    });
                }
                let mut set = self.set()?;
                set.beams[b].weights = w;
                self.sensors.set(
                    &format!("{}.weight", self.beams[b]),
                    format!("{:?}", set.beams[b].weights),
                    Status::Nominal,
                );
                Ok(vec![])
            }
            "beam-quant-gains" => {
                let b = self.beam(args.first())?;
                let g = self.floats(&args[1..])?;
                if g.len() != 1 {
                    return Err(RequestError::OneGain);
                }
                self.set()?.beams[b].quant_gain = g[0];
                self.sensors.set(
                    &format!("{}.quantiser-gain", self.beams[b]),
                    g[0],
                    Status::Nominal,
                );
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
                let mut set = self.set()?;
                set.beams[b].delays = d;
                set.beams[b].phases = p;
                self.sensors.set(
                    &format!("{}.delay", self.beams[b]),
                    args[1..].join(" "),
                    Status::Nominal,
                );
                Ok(vec![])
            }
            _ => Err(RequestError::Unknown(name.to_string())),
        }
    }
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
