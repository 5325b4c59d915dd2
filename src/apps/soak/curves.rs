//! The curves `soak.png` draws, computed from an engine's samples: (seconds since the
//! start, value) points. Rates and cumulative sums follow counters across resets as
//! [`super::summary::increase`] does; failed scrapes leave gaps, not zeros.

use super::sampler::{EngineLog, Sample};
use super::series::Kind;

/// A curve: (seconds since the start, value).
pub type Curve = Vec<(f64, f64)>;

/// Sum of the series `ids` in a sample (`None` where none is present).
fn sum(s: &Sample, ids: &[u32]) -> Option<f64> {
    let vals: Vec<f64> = ids.iter().filter_map(|&id| s.get(id)).collect();
    (!vals.is_empty()).then(|| vals.iter().sum())
}

/// Per second rate of the summed counters `ids`, each point over at least `min_dt` seconds
/// (from the latest earlier sample that far back): steadier than sample to sample, and a
/// last sample taken just after the previous one makes no spike. A counter that went down
/// (reset) starts the history again.
pub fn rate(samples: &[Sample], ids: &[u32], min_dt: f64) -> Curve {
    let mut out = Vec::new();
    let mut history: Vec<(f64, f64)> = Vec::new();
    for s in samples {
        let Some(v) = sum(s, ids) else { continue };
        if history.last().is_some_and(|&(_, last)| v < last) {
            history.clear();
        }
        let t = s.elapsed;
        if let Some(&(t0, v0)) = history.iter().rev().find(|(t0, _)| t - t0 >= min_dt) {
            if t > t0 {
                out.push((t, (v - v0) / (t - t0)));
            }
        }
        history.push((t, v));
    }
    out
}

/// Running total of the increases of the counters `ids` since the first sample (a series
/// absent there counts from zero; a drop is a reset).
pub fn cumulative(samples: &[Sample], ids: &[u32]) -> Curve {
    let mut last: Vec<Option<f64>> = vec![None; ids.len()];
    let mut total = 0.0;
    let mut out: Curve = Vec::new();
    for s in samples.iter().filter(|s| s.up) {
        for (k, &id) in ids.iter().enumerate() {
            let Some(v) = s.get(id).filter(|v| v.is_finite()) else {
                continue;
            };
            // The first successful sample is the reference; a series first seen later
            // counts from 0.
            let prev = last[k].unwrap_or(if out.is_empty() { v } else { 0.0 });
            total += if v >= prev { v - prev } else { v };
            last[k] = Some(v);
        }
        out.push((s.elapsed, total));
    }
    out
}

/// Per sample maximum (or minimum, with `f64::min`) of the gauges `ids`.
pub fn gauge(samples: &[Sample], ids: &[u32], pick: fn(f64, f64) -> f64) -> Curve {
    samples
        .iter()
        .filter_map(|s| {
            let v = ids
                .iter()
                .filter_map(|&id| s.get(id))
                .filter(|v| v.is_finite())
                .reduce(pick)?;
            Some((s.elapsed, v))
        })
        .collect()
}

/// The engine's heap rate: input heaps per second, or output heaps for an engine without
/// input (dsim); each point over at least `min_dt` seconds ([`rate`]).
pub fn heap_rate(l: &EngineLog, min_dt: f64) -> Curve {
    let input: Vec<u32> = l.ids_of(Kind::InputHeaps).collect();
    if !input.is_empty() {
        return rate(&l.samples, &input, min_dt);
    }
    let output: Vec<u32> = l.ids_of(Kind::OutputHeaps).collect();
    rate(&l.samples, &output, min_dt)
}

/// Everything lost (every [`Kind::is_loss`] counter), cumulative since the first sample.
pub fn losses(l: &EngineLog) -> Curve {
    let ids: Vec<u32> = (0..l.series.len() as u32)
        .filter(|&id| l.series[id as usize].1.is_loss())
        .collect();
    cumulative(&l.samples, &ids)
}

/// Output lag (or dsim time error), the largest over the engine's streams, in seconds.
pub fn lag(l: &EngineLog) -> Curve {
    let ids: Vec<u32> = l
        .ids_of(Kind::OutputLag)
        .chain(l.ids_of(Kind::TimeError))
        .collect();
    gauge(&l.samples, &ids, f64::max)
}

/// Resident memory in MiB.
pub fn rss_mib(l: &EngineLog) -> Curve {
    let ids: Vec<u32> = l.ids_of(Kind::Rss).collect();
    let mut c = gauge(&l.samples, &ids, f64::max);
    c.iter_mut().for_each(|p| p.1 /= (1u64 << 20) as f64);
    c
}

/// Sum of the gauges of `kind` (ready or free chunks over the engine's receivers).
pub fn queue(l: &EngineLog, kind: Kind) -> Curve {
    let ids: Vec<u32> = l.ids_of(kind).collect();
    l.samples
        .iter()
        .filter_map(|s| Some((s.elapsed, sum(s, &ids)?)))
        .collect()
}

/// CPU use per thread name in percent of a core, each point over at least `min_dt` seconds:
/// (thread, curve, CPU seconds in all).
pub fn thread_cpu(l: &EngineLog, min_dt: f64) -> Vec<(String, Curve, f64)> {
    l.ids_of(Kind::ThreadCpu)
        .map(|id| {
            let name = l.series[id as usize]
                .0
                .labels
                .first()
                .map_or(String::new(), |(_, v)| v.clone());
            let c: Curve = rate(&l.samples, &[id], min_dt)
                .into_iter()
                .map(|(t, r)| (t, r * 100.0))
                .collect();
            let first = l.samples.iter().find_map(|s| s.get(id)).unwrap_or(0.0);
            let last = l
                .samples
                .iter()
                .rev()
                .find_map(|s| s.get(id))
                .unwrap_or(0.0);
            (name, c, last - first)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: f64, up: bool, values: &[(u32, f64)]) -> Sample {
        Sample {
            elapsed: t,
            unix: 1e9 + t,
            up,
            values: values.to_vec(),
        }
    }

    #[test]
    fn rates_skip_gaps_and_resets() {
        let samples = [
            s(0.0, true, &[(0, 100.0), (1, 0.0)]),
            s(1.0, true, &[(0, 150.0), (1, 50.0)]),
            s(2.0, false, &[]),
            s(3.0, true, &[(0, 250.0), (1, 150.0)]),
            s(4.0, true, &[(0, 10.0), (1, 0.0)]),
            s(5.0, true, &[(0, 20.0), (1, 0.0)]),
            // A last sample just after the previous one: measured from 5.0, no spike.
            s(6.0, true, &[(0, 30.0), (1, 0.0)]),
            s(6.01, true, &[(0, 40.0), (1, 0.0)]),
        ];
        let close = |got: Curve, want: &[(f64, f64)]| {
            assert_eq!(got.len(), want.len(), "{got:?}");
            for (g, w) in got.iter().zip(want) {
                assert!(
                    (g.0 - w.0).abs() < 1e-9 && (g.1 - w.1).abs() < 1e-9,
                    "{got:?}"
                );
            }
        };
        close(
            rate(&samples, &[0, 1], 0.9),
            &[
                (1.0, 100.0),
                (3.0, 100.0),
                (5.0, 10.0),
                (6.0, 10.0),
                (6.01, 20.0 / 1.01),
            ],
        );
        // Over two seconds: the mean of the two intervals before.
        close(
            rate(&samples, &[0, 1], 2.0),
            &[(3.0, 100.0), (6.0, 10.0), (6.01, 30.0 / 2.01)],
        );
    }

    #[test]
    fn cumulative_counts_from_the_first_sample_and_late_series_from_zero() {
        let samples = [
            s(0.0, false, &[]),
            s(0.5, true, &[(0, 5.0)]),
            s(1.0, true, &[(0, 5.0)]),
            s(2.0, true, &[(0, 7.0), (1, 3.0)]),
            s(3.0, false, &[]),
            s(4.0, true, &[(0, 1.0), (1, 3.0)]),
        ];
        assert_eq!(
            cumulative(&samples, &[0, 1]),
            [(0.5, 0.0), (1.0, 0.0), (2.0, 5.0), (4.0, 6.0)]
        );
    }

    #[test]
    fn gauges_pick_across_streams() {
        let samples = [
            s(0.0, true, &[(0, 0.5), (1, 0.25)]),
            s(1.0, true, &[(1, f64::NAN)]),
            s(2.0, true, &[(0, -1.0), (1, 2.0)]),
        ];
        assert_eq!(gauge(&samples, &[0, 1], f64::max), [(0.0, 0.5), (2.0, 2.0)]);
        assert_eq!(
            gauge(&samples, &[0, 1], f64::min),
            [(0.0, 0.25), (2.0, -1.0)]
        );
    }
}
