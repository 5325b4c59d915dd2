//! xbgpu's data-path sensors (katgpucbf-compat.md §3.5): the receive sensors (no prefix),
//! per correlation output `rx.synchronised`, `xeng-clip-cnt` and `tx.next-timestamp` after
//! each flushed accumulation, per beam `beng-clip-cnt` and `tx.next-timestamp` after each
//! chunk; and `steady-state-timestamp`, which the beam requests move.

use std::sync::Arc;

use super::beams::BPipeline;
use super::corrprod::XPipeline;
use super::feed::ChunkInfo;
use crate::control::{SensorSet, SensorType, Status};
use crate::engines::common::rx_sensors::RxSensors;

/// The sensor that promises which data reflect the requests so far.
pub(super) const STEADY_STATE: &str = "steady-state-timestamp";

/// The data-path sensors of one XB-engine and what they last reported.
pub(crate) struct XbSensors {
    sensors: SensorSet,
    /// The receive sensors.
    pub rx: Arc<RxSensors>,
    x_names: Vec<String>,
    b_names: Vec<String>,
    seen_acc: Vec<u64>,
}

impl XbSensors {
    /// Adds the sensors of the corrprod outputs `x_names` and beams `b_names` to `sensors`
    /// at upstream's initial values (`rx.synchronised` 0/error until an accumulation with
    /// every antenna; counters and next timestamps 0/nominal); data times from `sync_time`
    /// and `adc_rate`; input chunks of `chunk_ticks` ADC samples.
    pub(crate) fn add(
        sensors: &SensorSet,
        x_names: &[String],
        b_names: &[String],
        sync_time: f64,
        adc_rate: f64,
        chunk_ticks: u64,
    ) -> Self {
        let add = |name: &str, d: &str, t: SensorType, v: &str, st: Status, limited: bool| {
            sensors.add(name, d, "", t, v);
            if limited {
                sensors.rate_limit(name, 1.0);
            }
            sensors.set(name, v, st);
        };
        add(
            STEADY_STATE,
            "Heaps with this timestamp or later are guaranteed to reflect the effects of previous katcp requests.",
            SensorType::Integer,
            "0",
            Status::Nominal,
            false,
        );
        let rx = RxSensors::add(sensors, &[""], sync_time, adc_rate, chunk_ticks);
        for x in x_names {
            add(
                &format!("{x}.rx.synchronised"),
                "For the latest accumulation, was data present from all F-Engines.",
                SensorType::Boolean,
                "0",
                Status::Error,
                false,
            );
            add(
                &format!("{x}.xeng-clip-cnt"),
                "Number of visibilities that saturated",
                SensorType::Integer,
                "0",
                Status::Nominal,
                false,
            );
            add(
                &format!("{x}.tx.next-timestamp"),
                "The timestamp immediately after the latest accumulation processed",
                SensorType::Integer,
                "0",
                Status::Nominal,
                false,
            );
        }
        for b in b_names {
            add(
                &format!("{b}.beng-clip-cnt"),
                "Number of complex samples that saturated",
                SensorType::Integer,
                "0",
                Status::Nominal,
                true,
            );
            add(
                &format!("{b}.tx.next-timestamp"),
                "The timestamp immediately after the latest chunk processed",
                SensorType::Integer,
                "0",
                Status::Nominal,
                true,
            );
        }
        XbSensors {
            sensors: sensors.clone(),
            rx,
            x_names: x_names.to_vec(),
            b_names: b_names.to_vec(),
            seen_acc: vec![0; x_names.len()],
        }
    }

    /// Updates the sensors after the chunk `info`, with the outputs' counters.
    pub(crate) fn update(&mut self, xs: &[XPipeline], bp: Option<&BPipeline>, info: &ChunkInfo) {
        let now = std::time::Instant::now();
        self.rx
            .chunk(0, info.start, info.heaps, info.missing > 0, now);
        let s = &self.sensors;
        let unix = |ts: u64| self.rx.unix(ts);
        for ((x, name), seen) in xs.iter().zip(&self.x_names).zip(&mut self.seen_acc) {
            let Some(acc) = x.stats.last_acc.filter(|a| a.seq != *seen) else {
                continue;
            };
            *seen = acc.seq;
            let (v, st) = if acc.synchronised {
                (1, Status::Nominal)
            } else {
                (0, Status::Error)
            };
            s.set_at(&format!("{name}.rx.synchronised"), v, st, unix(acc.end));
            let clipped = x.stats.clipped_visibilities;
            let nominal = Status::Nominal;
            s.set_at(
                &format!("{name}.xeng-clip-cnt"),
                clipped,
                nominal,
                unix(acc.end),
            );
            if acc.processed {
                let n = format!("{name}.tx.next-timestamp");
                s.set_at(&n, acc.end, nominal, unix(acc.start));
            }
        }
        let Some(bp) = bp.filter(|_| info.heaps) else {
            return;
        };
        for (b, name) in bp.stats.iter().zip(&self.b_names) {
            let (c, st) = (b.clipped_formed, Status::Nominal);
            s.set_at(&format!("{name}.beng-clip-cnt"), c, st, unix(info.end));
            let n = format!("{name}.tx.next-timestamp");
            s.set_at(&n, info.end, st, unix(info.start));
        }
    }
}
