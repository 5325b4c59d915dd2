//! fgpu's katcp interface (`?gain`, `?gain-all`, `?delays`) and its sensors and metrics.

use super::control::{format_complex, parse_complex, parse_delay, SharedControl, ValueError};
use crate::control::{Device, SensorSet, SensorType, Status};
use crate::engines::common::rx_sensors::RxSensors;

/// Why a katcp request failed (its text is the `!fail` message).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The request names no stream.
    #[error("which stream?")]
    NoStream,
    /// The request names a stream this engine does not have.
    #[error("unknown stream {0:?}")]
    UnknownStream(String),
    /// An input other than 0 or 1.
    #[error("input {0:?} must be 0 or 1")]
    BadInput(String),
    /// Arguments that do not fit the request.
    #[error("usage: {0}")]
    Usage(&'static str),
    /// Neither one gain nor one per channel.
    #[error("give 1 or {channels} gains, not {given}")]
    GainCount {
        /// Channels of the output.
        channels: usize,
        /// Gains given.
        given: usize,
    },
    /// A `?delays` start time that is not a number.
    #[error("start time {0:?} is not a number")]
    StartTime(String),
    /// A `?delays` start time before the sync time.
    #[error("start time must not precede the sync time")]
    BeforeSync,
    /// A `?delays` load time whose timestamp does not fit the 48-bit timestamp space.
    #[error(
        "start time {0} is past the 48-bit timestamp space (2^48 samples after the sync time)"
    )]
    LoadTime(String),
    /// A delay the engine cannot buffer input for.
    #[error(
        "input{input} delay {delay} s is beyond ±{max} s ({max_samples} samples, \
         --max-delay-diff), what the engine buffers"
    )]
    DelayRange {
        /// The input (polarisation).
        input: usize,
        /// The delay asked for (s).
        delay: f64,
        /// The largest magnitude taken (s).
        max: f64,
        /// The same in samples.
        max_samples: u64,
    },
    /// The output's controls were poisoned by a panic elsewhere.
    #[error("control lock poisoned")]
    LockPoisoned,
    /// A request this engine does not serve.
    #[error("unknown request {0}")]
    Unknown(String),
    /// A gain or delay value that does not parse.
    #[error(transparent)]
    Value(#[from] ValueError),
}

/// Largest delay magnitude `?delays` takes by default, in ADC samples: katgpucbf's
/// `--max-delay-diff` default, the input the engine keeps for delays
/// ([`FgpuDevice::with_max_delay`] sets the engine's). A larger delay would make the engine
/// wait for input that never comes in time (negative: the output stalls) or skip every batch
/// (positive); it is refused instead.
pub const MAX_DELAY_SAMPLES: u64 = 1 << 20;

/// One output as the device sees it.
pub struct OutputHandle {
    /// Stream name.
    pub name: String,
    /// Output channels.
    pub channels: usize,
    /// ADC samples between output batches.
    pub batch_step: u64,
    /// ADC samples between output spectra.
    pub spectrum_step: u64,
    /// Gains and delay models.
    pub control: SharedControl,
}

/// fgpu's katcp device: its requests act on the outputs' controls, its sensors show them
/// and the input and output counters.
pub struct FgpuDevice {
    /// The sensors (updated by the requests and by the engine's counters).
    pub sensors: SensorSet,
    outputs: Vec<OutputHandle>,
    adc_rate: f64,
    sync_time: f64,
    default_gain: f64,
    /// The receive sensors (`input{p}.rx.*`, `rx.device-status`).
    pub rx: std::sync::Arc<RxSensors>,
    /// Delay sensor readings waiting for their model's load time: (output index, sensor
    /// name, load timestamp, value).
    pending_delays: std::sync::Mutex<Vec<(usize, String, u64, String)>>,
    /// Largest delay magnitude `?delays` takes, samples (`--max-delay-diff`).
    max_delay: u64,
}

impl FgpuDevice {
    /// The device of `outputs`, with every sensor at its initial value; receive chunks
    /// span `chunk_samples` ADC samples (the receive sensors' T_rx).
    pub fn new(
        outputs: Vec<OutputHandle>,
        adc_rate: f64,
        sync_time: f64,
        default_gain: f64,
        dither_seed: u64,
        chunk_samples: u64,
    ) -> Self {
        let s = SensorSet::default();
        crate::control::common::add_common_sensors(&s);
        s.add(
            "steady-state-timestamp",
            "Data at or after this timestamp reflects all earlier requests",
            "",
            SensorType::Integer,
            "0",
        );
        s.set("steady-state-timestamp", 0, Status::Nominal);
        let rx = RxSensors::add(
            &s,
            &["input0.", "input1."],
            sync_time,
            adc_rate,
            chunk_samples,
        );
        for p in 0..2 {
            s.add(
                &format!("input{p}.dig-clip-cnt"),
                "Digitiser samples that clipped",
                "",
                SensorType::Integer,
                "0",
            );
            s.rate_limit(&format!("input{p}.dig-clip-cnt"), 1.0);
            s.add(
                &format!("input{p}.dig-rms-dbfs"),
                "Digitiser input power relative to a full-scale sine",
                "dBFS",
                SensorType::Float,
                "0",
            );
        }
        for o in &outputs {
            s.add(
                &format!("{}.dither-seed", o.name),
                "Dither seed",
                "",
                SensorType::String,
                &dither_seed.to_string(),
            );
            s.set(
                &format!("{}.dither-seed", o.name),
                dither_seed,
                Status::Nominal,
            );
            for p in 0..2 {
                s.add(
                    &format!("{}.input{p}.eq", o.name),
                    "Complex gains",
                    "",
                    SensorType::String,
                    &format!(
                        "[{}]",
                        format_complex(num_complex::Complex32::new(default_gain as f32, 0.0))
                    ),
                );
                s.add(
                    &format!("{}.input{p}.delay", o.name),
                    "(loadmcnt, delay, delay-rate, phase, phase-rate)",
                    "",
                    SensorType::String,
                    "(-1, 0.0, 0.0, 0.0, 0.0)",
                );
                s.add(
                    &format!("{}.input{p}.feng-clip-cnt", o.name),
                    "Output values that saturated",
                    "",
                    SensorType::Integer,
                    "0",
                );
                s.rate_limit(&format!("{}.input{p}.feng-clip-cnt", o.name), 1.0);
            }
        }
        FgpuDevice {
            sensors: s,
            rx,
            outputs,
            adc_rate,
            sync_time,
            default_gain,
            pending_delays: std::sync::Mutex::new(Vec::new()),
            max_delay: MAX_DELAY_SAMPLES,
        }
    }

    /// The device taking delays up to `samples` in magnitude (`--max-delay-diff`; default
    /// [`MAX_DELAY_SAMPLES`]).
    pub fn with_max_delay(mut self, samples: u64) -> Self {
        self.max_delay = samples;
        self
    }

    fn output(&self, name: Option<&String>) -> Result<&OutputHandle, RequestError> {
        let name = name.ok_or(RequestError::NoStream)?;
        self.outputs
            .iter()
            .find(|o| &o.name == name)
            .ok_or_else(|| RequestError::UnknownStream(name.clone()))
    }

    /// Sets the delay sensors whose model's load time processing has reached (the
    /// channeliser took a batch reaching it); called as the engine's counters update.
    pub(crate) fn apply_due_delays(&self) {
        let Ok(mut pending) = self.pending_delays.lock() else {
            return;
        };
        pending.retain(|(k, name, start, text)| {
            let Some(o) = self.outputs.get(*k) else {
                return false;
            };
            let taken = o.control.lock().map(|c| c.taken_through).unwrap_or(None);
            if taken.is_some_and(|t| t + o.batch_step > *start) {
                self.sensors.set(name, text, Status::Nominal);
                false
            } else {
                true
            }
        });
    }

    /// Updates `steady-state-timestamp` after a change to `o`'s controls: data from the batch
    /// after the latest one whose controls were already copied (`taken`, read under the same
    /// lock as the change) reflects it, and nothing before `at_least`.
    fn steady(&self, o: &OutputHandle, taken: Option<u64>, at_least: u64) -> u64 {
        let next = taken.map_or(0, |t| t + o.batch_step);
        let t = next.max(at_least);
        let prev = self
            .sensors
            .get("steady-state-timestamp")
            .and_then(|s| s.value.parse::<u64>().ok())
            .unwrap_or(0);
        let t = t.max(prev);
        self.sensors
            .set("steady-state-timestamp", t, Status::Nominal);
        t
    }

    fn gains(
        &self,
        o: &OutputHandle,
        pols: &[usize],
        values: &[String],
    ) -> Result<Vec<String>, RequestError> {
        let vals = if values.len() == 1 && values[0] == "default" {
            vec![num_complex::Complex32::new(self.default_gain as f32, 0.0)]
        } else {
            values
                .iter()
                .map(|v| parse_complex(v))
                .collect::<Result<Vec<_>, _>>()?
        };
        if vals.len() != 1 && vals.len() != o.channels {
            return Err(RequestError::GainCount {
                channels: o.channels,
                given: vals.len(),
            });
        }
        let mut ctl = o.control.lock().map_err(|_| RequestError::LockPoisoned)?;
        for &p in pols {
            for (k, g) in ctl.gains[p].iter_mut().enumerate() {
                *g = vals[if vals.len() == 1 { 0 } else { k }];
            }
            let text: Vec<String> = vals.iter().map(|g| format_complex(*g)).collect();
            self.sensors.set(
                &format!("{}.input{p}.eq", o.name),
                format!("[{}]", text.join(", ")),
                Status::Nominal,
            );
        }
        let taken = ctl.taken_through;
        drop(ctl);
        self.steady(o, taken, 0);
        Ok(vec![])
    }

    /// Serves one request.
    fn handle(&self, name: &str, args: &[String]) -> Result<Vec<String>, RequestError> {
        match name {
            "gain" => {
                let o = self.output(args.first())?;
                let p: usize = match args.get(1).map(String::as_str) {
                    Some("0") => 0,
                    Some("1") => 1,
                    Some(x) => return Err(RequestError::BadInput(x.to_string())),
                    None => return Err(RequestError::Usage("?gain stream input [values]")),
                };
                if args.len() == 2 {
                    let ctl = o.control.lock().map_err(|_| RequestError::LockPoisoned)?;
                    let g = &ctl.gains[p];
                    return Ok(if g.iter().all(|x| *x == g[0]) {
                        vec![format_complex(g[0])]
                    } else {
                        g.iter().map(|x| format_complex(*x)).collect()
                    });
                }
                self.gains(o, &[p], &args[2..])
            }
            "gain-all" => {
                let o = self.output(args.first())?;
                if args.len() < 2 {
                    return Err(RequestError::Usage("?gain-all stream values… | default"));
                }
                self.gains(o, &[0, 1], &args[1..])
            }
            "delays" => {
                let o = self.output(args.first())?;
                if args.len() != 4 {
                    return Err(RequestError::Usage(
                        "?delays stream start-time d,dr:p,pr d,dr:p,pr (exactly two models)",
                    ));
                }
                let t: f64 = args[1]
                    .parse()
                    .map_err(|_| RequestError::StartTime(args[1].clone()))?;
                if !t.is_finite() || t < self.sync_time {
                    return Err(RequestError::BeforeSync);
                }
                let start = ((t - self.sync_time) * self.adc_rate).round();
                if start >= (1u64 << 48) as f64 {
                    return Err(RequestError::LoadTime(args[1].clone()));
                }
                let start = start as u64;
                let models = [
                    parse_delay(&args[2], start, self.adc_rate)?,
                    parse_delay(&args[3], start, self.adc_rate)?,
                ];
                // Every model is checked before any is applied.
                for (input, m) in models.iter().enumerate() {
                    if m.delay.abs() > self.max_delay as f64 {
                        return Err(RequestError::DelayRange {
                            input,
                            delay: m.delay / self.adc_rate,
                            max: self.max_delay as f64 / self.adc_rate,
                            max_samples: self.max_delay,
                        });
                    }
                }
                let mut ctl = o.control.lock().map_err(|_| RequestError::LockPoisoned)?;
                let reached = |t: Option<u64>| t.is_some_and(|t| t + o.batch_step > start);
                let now = reached(ctl.taken_through);
                let k = self
                    .outputs
                    .iter()
                    .position(|x| std::ptr::eq(x, o))
                    .unwrap_or(0);
                let mut pending = self
                    .pending_delays
                    .lock()
                    .map_err(|_| RequestError::LockPoisoned)?;
                for (p, m) in models.iter().enumerate() {
                    ctl.push_model(p, *m);
                    let f = crate::control::sampling::float_repr;
                    let text = format!(
                        "({start}, {}, {}, {}, {})",
                        f(m.delay / self.adc_rate),
                        f(m.delay_rate),
                        f(m.phase),
                        f(m.phase_rate * self.adc_rate)
                    );
                    let name = format!("{}.input{p}.delay", o.name);
                    // A new model discards the queued ones that start at or after it.
                    pending.retain(|(_, n, s, _)| !(*n == name && *s >= start));
                    if now {
                        self.sensors.set(&name, &text, Status::Nominal);
                    } else {
                        // The sensor shows the model from its load time, as upstream's.
                        pending.push((k, name, start, text));
                    }
                }
                drop(pending);
                let taken = ctl.taken_through;
                drop(ctl);
                // The first spectrum at or after the load time is the first to use it.
                self.steady(o, taken, start.div_ceil(o.spectrum_step) * o.spectrum_step);
                Ok(vec![])
            }
            _ => Err(RequestError::Unknown(name.to_string())),
        }
    }
}

impl Device for FgpuDevice {
    fn api_version(&self) -> String {
        "katgpucbf-fgpu-1.0".into()
    }

    fn requests(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            (
                "gain",
                "Query or set gains: ?gain stream input [value | one value per channel]",
            ),
            (
                "gain-all",
                "Set the gains of both inputs: ?gain-all stream value… | default",
            ),
            (
                "delays",
                "Load delay models: ?delays stream start-time d,dr:p,pr d,dr:p,pr",
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
