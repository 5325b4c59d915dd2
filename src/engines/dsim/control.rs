//! dsim's katcp interface: `?signals spec [period]` (new signal from the next heap
//! boundary, generated off the send path and swapped in whole), `?time`, and the sensors
//! katgpucbf's dsim exposes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::generate::{generate, HeapFormat, Window};
use super::signal::{self, Timebase};
use crate::control::{Device, SensorSet, SensorType, Status};

/// A replacement signal on its way to the send loop; it answers with the first timestamp
/// that carries it.
pub struct SignalSwap {
    pub windows: Vec<Window>,
    pub reply: crossbeam_channel::Sender<u64>,
}

/// What the device needs to generate windows exactly as the send loop expects them.
#[derive(Debug, Clone)]
pub struct GenContext {
    pub tb: Timebase,
    pub fmt: HeapFormat,
    pub first_heap: u64,
    pub window_heaps: usize,
    pub dither_seed: u64,
    pub n_streams: usize,
}

pub struct DsimDevice {
    sensors: SensorSet,
    ctx: GenContext,
    tx: crossbeam_channel::Sender<SignalSwap>,
    entropy: AtomicU64,
}

impl DsimDevice {
    pub fn new(
        ctx: GenContext,
        tx: crossbeam_channel::Sender<SignalSwap>,
        signals: &str,
        sync_time: f64,
    ) -> Self {
        let s = SensorSet::default();
        s.add(
            "signals-orig",
            "User-provided signal specification",
            "",
            SensorType::String,
            signals,
        );
        s.add(
            "signals",
            "Signal specification (with noise entropy filled in)",
            "",
            SensorType::String,
            signals,
        );
        s.add(
            "period",
            "Number of samples after which the signal repeats",
            "",
            SensorType::Integer,
            &ctx.tb.period.to_string(),
        );
        s.add(
            "max-period",
            "Largest period that may be requested",
            "",
            SensorType::Integer,
            &ctx.tb.period.to_string(),
        );
        s.add(
            "dither-seed",
            "Seed for the dither",
            "",
            SensorType::Integer,
            &ctx.dither_seed.to_string(),
        );
        s.add(
            "adc-sample-rate",
            "ADC sample rate",
            "Hz",
            SensorType::Float,
            &ctx.tb.adc_rate.to_string(),
        );
        s.add(
            "sample-bits",
            "Bits per sample",
            "",
            SensorType::Integer,
            &ctx.fmt.bits.to_string(),
        );
        s.add(
            "sync-time",
            "UNIX time of timestamp 0",
            "s",
            SensorType::Timestamp,
            &sync_time.to_string(),
        );
        s.add(
            "steady-state-timestamp",
            "Data at or after this timestamp reflects all earlier requests",
            "",
            SensorType::Integer,
            "0",
        );
        for n in [
            "signals-orig",
            "signals",
            "period",
            "max-period",
            "dither-seed",
            "adc-sample-rate",
            "sample-bits",
            "sync-time",
            "steady-state-timestamp",
        ] {
            let v = s.get(n).map(|x| x.value).unwrap_or_default();
            s.set(n, v, Status::Nominal);
        }
        DsimDevice {
            sensors: s,
            entropy: AtomicU64::new(ctx.dither_seed ^ 0x5EED),
            ctx,
            tx,
        }
    }

    fn signals(&self, args: &[String]) -> Result<Vec<String>, String> {
        let spec = args.first().ok_or("usage: ?signals spec [period]")?;
        if args.len() > 2 {
            return Err("usage: ?signals spec [period]".into());
        }
        if let Some(p) = args.get(1) {
            let p: u64 = p
                .parse()
                .map_err(|_| format!("period {p:?} is not an integer"))?;
            if p != self.ctx.tb.period {
                return Err(format!(
                    "period {p} differs from the running period {}: restart dsim with --period",
                    self.ctx.tb.period
                ));
            }
        }
        let mut next = || signal::mix64(self.entropy.fetch_add(1, Ordering::Relaxed));
        let parsed = signal::parse(spec, &mut next)?;
        let sigs = signal::per_stream(parsed, self.ctx.n_streams)?;
        let c = &self.ctx;
        let windows = sigs
            .iter()
            .enumerate()
            .map(|(s, sig)| {
                generate(
                    sig,
                    &c.tb,
                    c.fmt,
                    c.first_heap,
                    c.window_heaps,
                    c.dither_seed,
                    s as u64,
                )
            })
            .collect();
        let (rtx, rrx) = crossbeam_channel::bounded(1);
        self.tx
            .send(SignalSwap {
                windows,
                reply: rtx,
            })
            .map_err(|_| "the sender has stopped".to_string())?;
        let ts = rrx
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| "the sender did not take the new signal".to_string())?;
        self.sensors.set("signals-orig", spec, Status::Nominal);
        self.sensors.set("signals", spec, Status::Nominal);
        self.sensors
            .set("steady-state-timestamp", ts, Status::Nominal);
        Ok(vec![ts.to_string()])
    }
}

impl Device for DsimDevice {
    fn api_version(&self) -> String {
        "katgpucbf-dsim-1.0".into()
    }

    fn requests(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            ("signals", "Replace the signals: ?signals spec [period]; replies with the first timestamp carrying them."),
            ("time", "Current UNIX time of the server."),
        ]
    }

    fn request(&self, name: &str, args: &[String]) -> Result<Vec<String>, String> {
        match name {
            "signals" => self.signals(args),
            "time" => Ok(vec![format!("{:.6}", crate::control::sensors::now())]),
            _ => Err(format!("unknown request {name}")),
        }
    }

    fn sensors(&self) -> &SensorSet {
        &self.sensors
    }
}
