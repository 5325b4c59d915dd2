//! The array summary's `lost`: every loss counter of every engine that moved, by engine.

use serde_json::json;

/// The losses in the engines' summaries, by engine and counter (non-zero ones only):
/// F-engine input heaps missing and receive rejections, heaps the dsim sent (`sent` per
/// stream) that an F-engine neither received nor counted as missing
/// (`input_heaps_unaccounted_polP`: dropped before its window reached them, rejected, or
/// not read when it stopped), output heaps skipped; each
/// XB-engine's (named by `x_names`) input heaps missing and incomplete, rejections,
/// accumulations skipped or incomplete, and the dumps of timestamps that other XB-engines
/// sent but it did not (`dumps_not_received`, from `x_missing`); packets the array's
/// receiver dropped.
pub(crate) fn losses(
    fsum: &[serde_json::Value],
    xsum: &[serde_json::Value],
    x_names: &[String],
    x_missing: &[u64],
    sent: Option<u64>,
    dropped: u64,
) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    let mut note = |engine: &str, what: String, v: u64| {
        if v > 0 {
            let e = out.entry(engine.to_string()).or_insert_with(|| json!({}));
            e[what] = json!(v);
        }
    };
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let rejected = |s: &serde_json::Value, note: &mut dyn FnMut(String, u64)| {
        if let Some(m) = s["recv_rejected"].as_object() {
            for (k, v) in m {
                if k != "metadata_heaps" {
                    note(format!("rejected_{k}"), n(v));
                }
            }
        }
    };
    for (a, f) in fsum.iter().enumerate() {
        let s = &f["summary"];
        let name = format!("fgpu{a}");
        for p in 0..2 {
            note(
                &name,
                format!("input_missing_heaps_pol{p}"),
                n(&s["input_missing_heaps"][p]),
            );
            if let Some(sent) = sent {
                let seen = n(&s["input_heaps"][p]) + n(&s["input_missing_heaps"][p]);
                note(
                    &name,
                    format!("input_heaps_unaccounted_pol{p}"),
                    sent.saturating_sub(seen),
                );
            }
        }
        rejected(s, &mut |k, v| note(&name, k, v));
        for o in s["outputs"].as_array().into_iter().flatten() {
            let stream = o["name"].as_str().unwrap_or("output");
            note(
                &name,
                format!("{stream}_skipped_heaps"),
                n(&o["skipped_heaps"]),
            );
        }
    }
    for (k, (x, name)) in xsum.iter().zip(x_names).enumerate() {
        let s = &x["summary"];
        note(
            name,
            "input_missing_heaps".into(),
            n(&s["input_missing_heaps"]),
        );
        note(
            name,
            "input_incomplete_heaps".into(),
            n(&s["input_incomplete_heaps"]),
        );
        rejected(s, &mut |k, v| note(name, k, v));
        for c in s["corrprods"].as_array().into_iter().flatten() {
            let stream = c["name"].as_str().unwrap_or("corrprod");
            note(
                name,
                format!("{stream}_skipped_accs"),
                n(&c["skipped_accs"]),
            );
            note(
                name,
                format!("{stream}_incomplete_accs"),
                n(&c["incomplete_accs"]),
            );
        }
        note(
            name,
            "dumps_not_received".into(),
            x_missing.get(k).copied().unwrap_or(0),
        );
    }
    note("receiver", "dropped_packets".into(), dropped);
    serde_json::Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary's `lost` names every non-zero loss counter by engine, and nothing else
    /// (metadata heaps are not losses).
    #[test]
    fn losses_name_each_nonzero_counter_by_engine() {
        let f0 = json!({"summary": {"input_heaps": [10, 10], "input_missing_heaps": [0, 0], "recv_rejected": {"metadata_heaps": 3},
            "outputs": [{"name": "wideband", "skipped_heaps": 0}]}});
        let f1 = json!({"summary": {"input_heaps": [5, 7], "input_missing_heaps": [5, 0], "recv_rejected": {"too_old_heaps": 2},
            "outputs": [{"name": "wideband", "skipped_heaps": 4}]}});
        let x = json!({"summary": {"input_missing_heaps": 0, "input_incomplete_heaps": 1,
            "recv_rejected": {}, "corrprods": [{"name": "bc", "skipped_accs": 2, "incomplete_accs": 0}]}});
        let one = ["xbgpu".to_string()];
        let lost = losses(
            &[f0.clone(), f1],
            std::slice::from_ref(&x),
            &one,
            &[0],
            Some(10),
            7,
        );
        assert_eq!(
            lost,
            json!({
                "fgpu1": {"input_missing_heaps_pol0": 5, "input_heaps_unaccounted_pol1": 3,
                    "rejected_too_old_heaps": 2, "wideband_skipped_heaps": 4},
                "xbgpu": {"input_incomplete_heaps": 1, "bc_skipped_accs": 2},
                "receiver": {"dropped_packets": 7},
            })
        );
        let clean = json!({"summary": {"input_missing_heaps": 0, "input_incomplete_heaps": 0,
            "corrprods": [{"name": "bc", "skipped_accs": 0, "incomplete_accs": 0}]}});
        assert_eq!(
            losses(
                std::slice::from_ref(&f0),
                std::slice::from_ref(&clean),
                &one,
                &[0],
                Some(10),
                0
            ),
            json!({})
        );
        // Several XB-engines: each by its name, with the dumps the receiver lacked from it.
        let two = ["xbgpu0".to_string(), "xbgpu1".to_string()];
        let xs = [clean, x];
        let lost = losses(std::slice::from_ref(&f0), &xs, &two, &[3, 0], Some(12), 0);
        assert_eq!(
            lost["fgpu0"],
            json!({"input_heaps_unaccounted_pol0": 2, "input_heaps_unaccounted_pol1": 2})
        );
        // Without the dsim's count, nothing is compared with it.
        let lost = losses(&[f0], &xs, &two, &[3, 0], None, 0);
        assert_eq!(
            lost,
            json!({
                "xbgpu0": {"dumps_not_received": 3},
                "xbgpu1": {"input_incomplete_heaps": 1, "bc_skipped_accs": 2},
            })
        );
    }
}
