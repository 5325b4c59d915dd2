//! dsim's katcp interface: `?signals spec [period]` (new signal from the next heap
//! boundary, generated off the send path and swapped in whole), `?time`, and the sensors
//! katgpucbf's dsim exposes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::generate::{generate, HeapFormat, Span, Window};
use super::signal::{self, SignalError, Timebase};
use crate::control::{Device, SensorSet, SensorType, Status};

/// Why a katcp request failed (its text is the `!fail` message).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Arguments that do not fit the request.
    #[error("usage: ?signals spec [period]")]
    Usage,
    /// A period that is not an integer.
    #[error("period {0:?} is not an integer")]
    Period(String),
    /// A period that does not divide the ring (`--max-period`).
    #[error("period {given} must be positive and divide max-period {max}")]
    BadPeriod {
        /// The period asked for.
        given: u64,
        /// The ring's length (`--max-period`).
        max: u64,
    },
    /// A signal program that does not parse.
    #[error(transparent)]
    Signal(#[from] SignalError),
    /// The send loop has stopped.
    #[error("the sender has stopped")]
    SenderStopped,
    /// The send loop did not take the new signal in time.
    #[error("the sender did not take the new signal")]
    NotTaken,
    /// A request dsim does not serve.
    #[error("unknown request {0}")]
    Unknown(String),
}

/// A replacement signal on its way to the send loop; it answers with the first timestamp
/// that carries it.
pub struct SignalSwap {
    /// The new signal's windows, one per stream.
    pub windows: Vec<Window>,
    /// Where the send loop answers with the first timestamp carrying them.
    pub reply: crossbeam_channel::Sender<u64>,
    /// The heap index the new signal starts at (several send threads switch together);
    /// `None`: the next heap boundary.
    pub at_heap: Option<u64>,
}

/// What the device needs to generate windows exactly as the send loop expects them.
#[derive(Debug, Clone)]
pub struct GenContext {
    /// Sample rate and the period of the signal at start (`--period`).
    pub tb: Timebase,
    /// Sample width and heap length.
    pub fmt: HeapFormat,
    /// The window of the ring (`--max-period`) the send loop replays.
    pub span: Span,
    /// Dither seed.
    pub dither_seed: u64,
    /// Streams.
    pub n_streams: usize,
}

impl GenContext {
    /// The ring's length in samples (`--max-period`).
    pub fn max_period(&self) -> u64 {
        self.span.ring_heaps * self.fmt.heap_samples as u64
    }
}

/// dsim's katcp device.
pub struct DsimDevice {
    sensors: SensorSet,
    ctx: GenContext,
    tx: crossbeam_channel::Sender<SignalSwap>,
    entropy: AtomicU64,
}

impl DsimDevice {
    /// The device of a running dsim: new signals go to the send loop through `tx`.
    /// `signals` is the program as given, `canonical` its canonical text (entropies filled
    /// in, [`signal::canonical`]).
    pub fn new(
        ctx: GenContext,
        tx: crossbeam_channel::Sender<SignalSwap>,
        signals: &str,
        canonical: &str,
        sync_time: f64,
    ) -> Self {
        let s = SensorSet::default();
        crate::control::common::add_common_sensors(&s);
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
            canonical,
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
            &ctx.max_period().to_string(),
        );
        s.add(
            "dither-seed",
            "Seed for the dither",
            "",
            SensorType::String,
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

    fn signals(&self, args: &[String]) -> Result<Vec<String>, RequestError> {
        let spec = args.first().ok_or(RequestError::Usage)?;
        if args.len() > 2 {
            return Err(RequestError::Usage);
        }
        let c = &self.ctx;
        // The ring holds max-period samples: a signal of a period dividing it repeats
        // seamlessly in it. No period: the whole ring (katgpucbf's default).
        let max = c.max_period();
        let period = match args.get(1) {
            None => max,
            Some(p) => {
                let p: u64 = p.parse().map_err(|_| RequestError::Period(p.clone()))?;
                if p == 0 || !max.is_multiple_of(p) {
                    return Err(RequestError::BadPeriod { given: p, max });
                }
                p
            }
        };
        let tb = Timebase { period, ..c.tb };
        // Entropies within f64's exact integers, so that the canonical text read back
        // gives the same noise.
        let mut next = || signal::mix64(self.entropy.fetch_add(1, Ordering::Relaxed)) >> 11;
        let parsed = signal::parse(spec, &mut next)?;
        let canonical = signal::canonical(&parsed);
        let sigs = signal::per_stream(parsed, c.n_streams)?;
        let windows = sigs
            .iter()
            .enumerate()
            .map(|(s, sig)| generate(sig, &tb, c.fmt, c.span, c.dither_seed, s as u64))
            .collect();
        let (rtx, rrx) = crossbeam_channel::bounded(1);
        self.tx
            .send(SignalSwap {
                windows,
                reply: rtx,
                at_heap: None,
            })
            .map_err(|_| RequestError::SenderStopped)?;
        let ts = rrx
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| RequestError::NotTaken)?;
        self.sensors.set("signals-orig", spec, Status::Nominal);
        self.sensors.set("signals", canonical, Status::Nominal);
        self.sensors.set("period", period, Status::Nominal);
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

    fn request(
        &self,
        name: &str,
        args: &[String],
    ) -> Result<Vec<String>, crate::control::RequestError> {
        let reply = match name {
            "signals" => self.signals(args),
            "time" => Ok(vec![format!("{:.6}", crate::control::sensors::now())]),
            _ => Err(RequestError::Unknown(name.to_string())),
        };
        Ok(reply?)
    }

    fn sensors(&self) -> &SensorSet {
        &self.sensors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device() -> (DsimDevice, crossbeam_channel::Receiver<SignalSwap>) {
        device_with_period(4 * 4096)
    }

    /// A device of 2 streams, 10-bit heaps of 4096 samples, a ring of 4 heaps (max-period
    /// 16384) and a signal of `period` at start.
    fn device_with_period(period: u64) -> (DsimDevice, crossbeam_channel::Receiver<SignalSwap>) {
        let ctx = GenContext {
            tb: Timebase {
                adc_rate: 1712e6,
                period,
            },
            fmt: HeapFormat {
                bits: 10,
                heap_samples: 4096,
            },
            span: Span {
                first_heap: 0,
                n_heaps: 4,
                ring_heaps: 4,
            },
            dither_seed: 1,
            n_streams: 2,
        };
        let (tx, rx) = crossbeam_channel::bounded(1);
        (
            DsimDevice::new(ctx, tx, "cw(0.5, 1e8);", "cw(0.5, 100000000.0);", 0.0),
            rx,
        )
    }

    /// Hostile `?signals` specs get a `fail` reply naming the limit and reach neither the
    /// generator nor the sender: the running signal keeps playing and the device keeps
    /// serving.
    #[test]
    fn hostile_signals_fail_and_keep_the_running_signal() {
        let (dev, swaps) = device();
        let mut doubling = String::from("a0 = cw(0.5, 1e6);");
        for k in 1..=40 {
            doubling += &format!(" a{k} = a{} + a{};", k - 1, k - 1);
        }
        doubling += " a40;";
        let cases = [
            (
                format!("{}1{};", "(".repeat(10_000), ")".repeat(10_000)),
                "nesting deeper than 64",
            ),
            (
                format!("1{};", " + 1".repeat(10_000)),
                "deeper than 256 operators",
            ),
            (doubling, "more than 4096 operations per sample"),
        ];
        for (spec, why) in cases {
            let err = dev
                .request("signals", &[spec])
                .expect_err("a hostile spec must fail");
            assert!(err.to_string().contains(why), "{err}");
            assert!(swaps.try_recv().is_err(), "nothing may reach the sender");
            let s = dev.sensors().get("signals-orig").unwrap();
            assert_eq!(s.value, "cw(0.5, 1e8);");
        }
        // The device still takes a good signal afterwards.
        let sender = std::thread::spawn(move || {
            let sw = swaps.recv().unwrap();
            assert_eq!(sw.windows.len(), 2);
            sw.reply.send(8192).unwrap();
        });
        let reply = dev.request("signals", &["cw(0.25, 2e8);".into()]).unwrap();
        sender.join().unwrap();
        assert_eq!(reply, vec!["8192".to_string()]);
        assert_eq!(
            dev.sensors().get("signals").unwrap().value,
            "cw(0.25, 200000000.0);"
        );
    }

    /// `?signals SPEC PERIOD`: any period dividing max-period into whole heaps is taken
    /// (the signal then repeats with it in the ring), others fail and change nothing; the
    /// `signals` sensor holds the canonical text with the wgn entropies filled in, which
    /// read back gives the same program.
    #[test]
    fn signals_with_a_period_dividing_max_period_and_canonical_sensor() {
        let (dev, swaps) = device();
        for bad in ["3", "4096x", "0", "12288", "32768", "-4096", "6000"] {
            assert!(
                dev.request("signals", &["1.0;".into(), bad.into()])
                    .is_err(),
                "{bad}"
            );
            assert!(swaps.try_recv().is_err());
        }
        assert_eq!(dev.sensors().get("period").unwrap().value, "16384");
        let sender = std::thread::spawn(move || {
            let sw = swaps.recv().unwrap();
            sw.reply.send(4096).unwrap();
            sw.windows
        });
        let spec = "a = wgn(0.1); nodither(cw(0.25, 2e8) - a * 0.5); a + 1e-3 * (a + 2) ;";
        dev.request("signals", &[spec.into(), "8192".into()])
            .unwrap();
        let windows = sender.join().unwrap();
        assert_eq!(dev.sensors().get("period").unwrap().value, "8192");
        // A period of 2 heaps in a ring of 4: heaps 2 and 3 repeat heaps 0 and 1 in the
        // undithered stream; the dithered one repeats within a code (the dither runs over
        // the whole ring).
        let codes = |w: &Window, h: usize| {
            let mut x = vec![0i16; 4096];
            crate::spead::bitpack::unpack(w.heap(h), 10, &mut x);
            x
        };
        assert!(windows.iter().all(|w| w.n_heaps() == 4));
        assert_eq!(windows[0].heap(0), windows[0].heap(2));
        assert_eq!(windows[0].heap(1), windows[0].heap(3));
        assert_ne!(windows[0].heap(0), windows[0].heap(1));
        assert_ne!(windows[1].heap(0), windows[1].heap(2));
        for h in 0..2 {
            let (a, b) = (codes(&windows[1], h), codes(&windows[1], h + 2));
            assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1));
        }
        let text = dev.sensors().get("signals").unwrap().value;
        // The variable is one noise source: one entropy, filled in at all three uses.
        let e = text
            .split("wgn(0.1, ")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .unwrap();
        let n: u64 = e.parse().unwrap();
        assert!(n < 1 << 53, "{text}");
        assert_eq!(
            text,
            format!(
                "nodither(cw(0.25, 200000000.0) - wgn(0.1, {n}) * 0.5); \
                 wgn(0.1, {n}) + 0.001 * (wgn(0.1, {n}) + 2.0);"
            )
        );
        let reparsed = signal::parse(&text, &mut || panic!("entropies are filled in")).unwrap();
        assert_eq!(signal::canonical(&reparsed), text);
        let mut same = || n;
        assert_eq!(reparsed, signal::parse(spec, &mut same).unwrap());
    }

    /// `--period` below `--max-period`: the sensors show both; `?signals` without a period
    /// takes the whole ring (katgpucbf's default); a period that is not a whole number of
    /// heaps but divides the ring is taken and the signal repeats with it across heap
    /// boundaries.
    #[test]
    fn period_below_max_period_and_the_default_period() {
        let (dev, swaps) = device_with_period(8192);
        let value = |n: &str| dev.sensors().get(n).unwrap().value;
        assert_eq!(value("period"), "8192");
        assert_eq!(value("max-period"), "16384");
        let sender = std::thread::spawn(move || {
            let mut got = Vec::new();
            for _ in 0..2 {
                let sw = swaps.recv().unwrap();
                sw.reply.send(0).unwrap();
                got.push(sw.windows);
            }
            got
        });
        dev.request("signals", &["nodither(cw(0.5, 1e8));".into()])
            .unwrap();
        assert_eq!(value("period"), "16384");
        // 2048 samples: half a heap, 8 periods in the ring.
        dev.request(
            "signals",
            &[
                "nodither(cw(0.5, 1e8) + comb(0.25, 1e6));".into(),
                "2048".into(),
            ],
        )
        .unwrap();
        assert_eq!(value("period"), "2048");
        let got = sender.join().unwrap();
        let w = &got[1][0];
        let mut x = vec![0i16; 4 * 4096];
        for h in 0..4 {
            crate::spead::bitpack::unpack(w.heap(h), 10, &mut x[h * 4096..(h + 1) * 4096]);
        }
        for (i, v) in x.iter().enumerate().skip(2048) {
            assert_eq!(*v, x[i % 2048], "sample {i}");
        }
        // A cw at 1e8 Hz snapped to a 16384-sample period is not periodic in 2048.
        let whole = &got[0][0];
        let mut y = vec![0i16; 4096];
        crate::spead::bitpack::unpack(whole.heap(0), 10, &mut y);
        assert_ne!(y[..2048], y[2048..]);
    }
}
