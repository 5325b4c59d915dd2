//! The checks in run order ([`all`]) and the choice of them by `--only` ([`select`]).

use super::result::Check;
use super::{analysis, beams, channel, delay, gains};

/// Every check, in run order.
pub fn all() -> Vec<Check> {
    let mut v = Vec::new();
    v.extend(channel::checks());
    v.extend(gains::checks());
    v.extend(delay::checks());
    v.extend(beams::checks());
    v.extend(analysis::checks());
    v
}

/// The checks `--only` selects (all without it; `quick` selects the quick subset; words
/// separated by commas, each matching names that contain it). Narrowband checks need
/// `--narrowband`. A pattern that selects nothing is an error naming the checks.
pub fn select(only: Option<&str>, narrowband: bool) -> anyhow::Result<Vec<Check>> {
    let all: Vec<Check> = all()
        .into_iter()
        .filter(|c| narrowband || !c.narrowband)
        .collect();
    let Some(only) = only else { return Ok(all) };
    let words: Vec<&str> = only
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    let names: Vec<&str> = all.iter().map(|c| c.name).collect();
    let names = names.join(", ");
    let chosen: Vec<Check> = all
        .into_iter()
        .filter(|c| {
            words
                .iter()
                .any(|w| (*w == "quick" && c.quick) || c.name.contains(w))
        })
        .collect();
    if chosen.is_empty() {
        anyhow::bail!("--only {only:?} selects no check; the checks are: {names}");
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are unique upstream test names; `--only` picks by substring and `quick`, and
    /// a pattern matching nothing is an error listing the checks.
    #[test]
    fn selection_by_pattern() {
        let all = select(None, true).unwrap();
        let mut names: Vec<_> = all.iter().map(|c| c.name).collect();
        assert!(names.iter().all(|n| n.starts_with("test_")));
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate check names");
        let wb = select(None, false).unwrap();
        assert!(wb.len() < all.len() && wb.iter().all(|c| !c.narrowband));
        let quick = select(Some("quick"), false).unwrap();
        assert!(!quick.is_empty() && quick.iter().all(|c| c.quick));
        let two = select(Some("test_gains,accum_length"), false).unwrap();
        let got: Vec<_> = two.iter().map(|c| c.name).collect();
        assert!(got.contains(&"test_accum_length") && got.contains(&"test_gains"));
        let e = select(Some("nope"), false).err().unwrap().to_string();
        assert!(
            e.contains("selects no check") && e.contains("test_gains"),
            "{e}"
        );
    }
}
