//! Which series the soak report records, and what each one means: the engines' metric names
//! (`fgpu_`, `xbgpu_`, `dsim_` namespaces; counters end in `_total`) sorted into kinds, plus
//! the report's own series (scrape success, RSS, CPU per thread).

use serde::Serialize;

/// What a recorded series tells the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Heaps received (`*_input_heaps_total`).
    InputHeaps,
    /// Heaps missing inside the received span (`*_input_missing_heaps_total`).
    Missing,
    /// Heaps older than the chunk window (`*_input_too_old_heaps_total`).
    TooOld,
    /// Input rejected as bad: `*_input_bad_*_total` (stream id, timestamp, offset) and
    /// `*_input_malformed_packets_total`.
    Rejected,
    /// Heaps or accumulations only partly received (`*_input_incomplete_heaps_total`,
    /// `xbgpu_output_x_incomplete_accs_total`).
    Incomplete,
    /// Output not sent: `*_output_skipped_heaps_total`, `*_output_x_skipped_accs_total`,
    /// `*_output_b_skipped_heaps_total`, `fgpu_output_before_input_heaps_total`,
    /// `fgpu_output_delay_error_heaps_total`.
    Skipped,
    /// Dropped input that loses no data: descriptor heaps (`*_input_metadata_heaps_total`,
    /// sent periodically by design) and packets whose payload had already arrived
    /// (`*_input_duplicate_packets_total`). Recorded, never a loss.
    Dropped,
    /// Received chunks waiting for the engine (`*_input_ready_chunks`).
    ReadyChunks,
    /// Chunk buffers free for the receiver (`*_input_free_chunks`).
    FreeChunks,
    /// Heaps sent (`*_output_heaps_total`, `*_output_x_heaps_total`, `*_output_b_heaps_total`).
    OutputHeaps,
    /// Wall clock minus the data timestamp of the last output sent (`*_output_lag_seconds`).
    OutputLag,
    /// dsim's elapsed time minus expected time (`dsim_time_error_s`): its output lag.
    TimeError,
    /// 1 where the scrape succeeded, 0 where it failed (the report's own `up`).
    Up,
    /// Resident set size of the engine process in bytes (`rss_bytes`, from `/proc`).
    Rss,
    /// CPU seconds (user + system) of the engine's threads of one name
    /// (`thread_cpu_seconds{thread=...}`, from `/proc`).
    ThreadCpu,
}

/// The metric namespaces of the engines, stripped before matching.
const NAMESPACES: [&str; 3] = ["fgpu_", "xbgpu_", "dsim_"];

impl Kind {
    /// The kind of an engine metric, or `None` for series the report does not record.
    pub fn of_metric(name: &str) -> Option<Kind> {
        let rest = NAMESPACES
            .iter()
            .find_map(|ns| name.strip_prefix(ns))
            .unwrap_or(name);
        Some(match rest {
            "input_heaps_total" => Kind::InputHeaps,
            "input_missing_heaps_total" => Kind::Missing,
            "input_too_old_heaps_total" => Kind::TooOld,
            "input_incomplete_heaps_total" | "output_x_incomplete_accs_total" => Kind::Incomplete,
            "input_metadata_heaps_total" | "input_duplicate_packets_total" => Kind::Dropped,
            "input_malformed_packets_total" => Kind::Rejected,
            r if r.starts_with("input_bad_") && r.ends_with("_total") => Kind::Rejected,
            "input_ready_chunks" => Kind::ReadyChunks,
            "input_free_chunks" => Kind::FreeChunks,
            "output_heaps_total" | "output_x_heaps_total" | "output_b_heaps_total" => {
                Kind::OutputHeaps
            }
            "output_skipped_heaps_total"
            | "output_x_skipped_accs_total"
            | "output_b_skipped_heaps_total"
            | "output_before_input_heaps_total"
            | "output_delay_error_heaps_total" => Kind::Skipped,
            "output_lag_seconds" => Kind::OutputLag,
            "time_error_s" => Kind::TimeError,
            _ => return None,
        })
    }

    /// True for the kinds whose increase after the warm-up fails the soak.
    pub fn is_loss(self) -> bool {
        matches!(
            self,
            Kind::Missing | Kind::TooOld | Kind::Rejected | Kind::Incomplete | Kind::Skipped
        )
    }

    /// True for the lag gauges (output lag, dsim time error).
    pub fn is_lag(self) -> bool {
        matches!(self, Kind::OutputLag | Kind::TimeError)
    }

    /// True for monotonic counters (an increase is computed across resets).
    pub fn is_counter(self) -> bool {
        matches!(
            self,
            Kind::InputHeaps
                | Kind::Missing
                | Kind::TooOld
                | Kind::Rejected
                | Kind::Incomplete
                | Kind::Skipped
                | Kind::Dropped
                | Kind::OutputHeaps
                | Kind::ThreadCpu
        )
    }

    /// The kind's name in `soak.csv` and `soak.json` (snake case).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::InputHeaps => "input_heaps",
            Kind::Missing => "missing",
            Kind::TooOld => "too_old",
            Kind::Rejected => "rejected",
            Kind::Incomplete => "incomplete",
            Kind::Skipped => "skipped",
            Kind::Dropped => "dropped",
            Kind::ReadyChunks => "ready_chunks",
            Kind::FreeChunks => "free_chunks",
            Kind::OutputHeaps => "output_heaps",
            Kind::OutputLag => "output_lag",
            Kind::TimeError => "time_error",
            Kind::Up => "up",
            Kind::Rss => "rss",
            Kind::ThreadCpu => "thread_cpu",
        }
    }
}

/// One recorded series of an engine: the metric name as exported and its labels, sorted by
/// label name (`thread` for [`Kind::ThreadCpu`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    /// Metric name (`fgpu_input_heaps_total`, or the report's `up`, `rss_bytes`,
    /// `thread_cpu_seconds`).
    pub name: String,
    /// Label pairs sorted by name.
    pub labels: Vec<(String, String)>,
}

impl SeriesKey {
    /// A key with its labels sorted.
    pub fn new(name: &str, mut labels: Vec<(String, String)>) -> Self {
        labels.sort();
        SeriesKey {
            name: name.to_string(),
            labels,
        }
    }

    /// `k=v;k=v` (the `labels` column of `soak.csv`; empty without labels).
    pub fn labels_text(&self) -> String {
        let pairs: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        pairs.join(";")
    }

    /// `name{k="v",...}` as Prometheus writes it (for messages and `soak.json` keys).
    pub fn display(&self) -> String {
        if self.labels.is_empty() {
            return self.name.clone();
        }
        let pairs: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect();
        format!("{}{{{}}}", self.name, pairs.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::Reject;
    use crate::telemetry::recv::{reject_metric, RecvFlavour};

    #[test]
    fn every_receive_drop_reason_has_a_kind() {
        for flavour in [RecvFlavour::Digitiser, RecvFlavour::Feng] {
            for ns in ["fgpu", "xbgpu"] {
                for &r in Reject::ALL.iter() {
                    let name = format!("{ns}_{}_total", reject_metric(r, flavour));
                    let want = match r {
                        Reject::TooOld => Kind::TooOld,
                        Reject::MetadataHeap | Reject::Duplicate => Kind::Dropped,
                        _ => Kind::Rejected,
                    };
                    assert_eq!(Kind::of_metric(&name), Some(want), "{name}");
                }
            }
        }
    }

    #[test]
    fn engine_names_sort_into_kinds() {
        let cases = [
            ("fgpu_input_heaps_total", Some(Kind::InputHeaps)),
            ("xbgpu_input_heaps_total", Some(Kind::InputHeaps)),
            ("fgpu_input_missing_heaps_total", Some(Kind::Missing)),
            ("xbgpu_input_incomplete_heaps_total", Some(Kind::Incomplete)),
            (
                "xbgpu_output_x_incomplete_accs_total",
                Some(Kind::Incomplete),
            ),
            ("fgpu_input_ready_chunks", Some(Kind::ReadyChunks)),
            ("fgpu_input_free_chunks", Some(Kind::FreeChunks)),
            ("dsim_output_heaps_total", Some(Kind::OutputHeaps)),
            ("xbgpu_output_b_heaps_total", Some(Kind::OutputHeaps)),
            ("fgpu_output_skipped_heaps_total", Some(Kind::Skipped)),
            ("fgpu_output_before_input_heaps_total", Some(Kind::Skipped)),
            ("xbgpu_output_x_skipped_accs_total", Some(Kind::Skipped)),
            ("fgpu_output_lag_seconds", Some(Kind::OutputLag)),
            ("dsim_time_error_s", Some(Kind::TimeError)),
            ("fgpu_input_bytes_total", None),
            ("xbgpu_output_x_unsent_accs_total", None),
            ("fgpu_input_heaps_created", None),
            ("input_too_old_heaps_total", Some(Kind::TooOld)),
        ];
        for (name, want) in cases {
            assert_eq!(Kind::of_metric(name), want, "{name}");
        }
        assert!(Kind::TooOld.is_loss() && Kind::Skipped.is_loss());
        assert!(!Kind::Dropped.is_loss() && !Kind::InputHeaps.is_loss());
    }

    #[test]
    fn keys_sort_labels_and_render() {
        let k = SeriesKey::new(
            "m",
            vec![("stream".into(), "a\"b".into()), ("pol".into(), "0".into())],
        );
        assert_eq!(k.labels_text(), "pol=0;stream=a\"b");
        assert_eq!(k.display(), "m{pol=\"0\",stream=\"a\\\"b\"}");
        assert_eq!(SeriesKey::new("up", vec![]).display(), "up");
    }
}
