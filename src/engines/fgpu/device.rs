//! fgpu's katcp interface (`?gain`, `?gain-all`, `?delays`) and its sensors and metrics.

use super::control::{format_complex, parse_complex, parse_delay, SharedControl};
use crate::control::{Device, SensorSet, SensorType, Status};

/// One output as the device sees it.
pub struct OutputHandle {
    pub name: String,
    pub channels: usize,
    pub batch_step: u64,
    /// ADC samples between output spectra.
    pub spectrum_step: u64,
    pub control: SharedControl,
}

pub struct FgpuDevice {
    pub sensors: SensorSet,
    outputs: Vec<OutputHandle>,
    adc_rate: f64,
    sync_time: f64,
    default_gain: f64,
}

impl FgpuDevice {
    pub fn new(
        outputs: Vec<OutputHandle>,
        adc_rate: f64,
        sync_time: f64,
        default_gain: f64,
        dither_seed: u64,
    ) -> Self {
        let s = SensorSet::default();
        s.add(
            "steady-state-timestamp",
            "Data at or after this timestamp reflects all earlier requests",
            "",
            SensorType::Integer,
            "0",
        );
        s.set("steady-state-timestamp", 0, Status::Nominal);
        for p in 0..2 {
            s.add(
                &format!("input{p}.dig-clip-cnt"),
                "Digitiser samples that clipped",
                "",
                SensorType::Integer,
                "0",
            );
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
                SensorType::Integer,
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
                    "(0, 0.0, 0.0, 0.0, 0.0)",
                );
                s.add(
                    &format!("{}.input{p}.feng-clip-cnt", o.name),
                    "Output values that saturated",
                    "",
                    SensorType::Integer,
                    "0",
                );
            }
        }
        FgpuDevice {
            sensors: s,
            outputs,
            adc_rate,
            sync_time,
            default_gain,
        }
    }

    fn output(&self, name: Option<&String>) -> Result<&OutputHandle, String> {
        let name = name.ok_or("which stream?")?;
        self.outputs
            .iter()
            .find(|o| &o.name == name)
            .ok_or_else(|| format!("unknown stream {name:?}"))
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
    ) -> Result<Vec<String>, String> {
        let vals = if values.len() == 1 && values[0] == "default" {
            vec![num_complex::Complex32::new(self.default_gain as f32, 0.0)]
        } else {
            values
                .iter()
                .map(|v| parse_complex(v))
                .collect::<Result<Vec<_>, _>>()?
        };
        if vals.len() != 1 && vals.len() != o.channels {
            return Err(format!(
                "give 1 or {} gains, not {}",
                o.channels,
                vals.len()
            ));
        }
        let mut ctl = o.control.lock().map_err(|_| "control lock poisoned")?;
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

    fn request(&self, name: &str, args: &[String]) -> Result<Vec<String>, String> {
        match name {
            "gain" => {
                let o = self.output(args.first())?;
                let p: usize = match args.get(1).map(String::as_str) {
                    Some("0") => 0,
                    Some("1") => 1,
                    Some(x) => return Err(format!("input {x:?} must be 0 or 1")),
                    None => return Err("usage: ?gain stream input [values]".into()),
                };
                if args.len() == 2 {
                    let ctl = o.control.lock().map_err(|_| "control lock poisoned")?;
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
                    return Err("usage: ?gain-all stream values… | default".into());
                }
                self.gains(o, &[0, 1], &args[1..])
            }
            "delays" => {
                let o = self.output(args.first())?;
                if args.len() != 4 {
                    return Err(
                        "usage: ?delays stream start-time d,dr:p,pr d,dr:p,pr (exactly two models)"
                            .into(),
                    );
                }
                let t: f64 = args[1]
                    .parse()
                    .map_err(|_| format!("start time {:?} is not a number", args[1]))?;
                if !t.is_finite() || t < self.sync_time {
                    return Err("start time must not precede the sync time".into());
                }
                let start = ((t - self.sync_time) * self.adc_rate).round() as u64;
                let models = [
                    parse_delay(&args[2], start, self.adc_rate)?,
                    parse_delay(&args[3], start, self.adc_rate)?,
                ];
                let mut ctl = o.control.lock().map_err(|_| "control lock poisoned")?;
                for (p, m) in models.iter().enumerate() {
                    ctl.push_model(p, *m);
                    let text = format!(
                        "({start}, {}, {}, {}, {})",
                        m.delay / self.adc_rate,
                        m.delay_rate,
                        m.phase,
                        m.phase_rate * self.adc_rate
                    );
                    self.sensors.set(
                        &format!("{}.input{p}.delay", o.name),
                        &text,
                        Status::Nominal,
                    );
                }
                let taken = ctl.taken_through;
                drop(ctl);
                // The first spectrum at or after the load time is the first to use it.
                self.steady(o, taken, start.div_ceil(o.spectrum_step) * o.spectrum_step);
                Ok(vec![])
            }
            _ => Err(format!("unknown request {name}")),
        }
    }

    fn sensors(&self) -> &SensorSet {
        &self.sensors
    }
}
