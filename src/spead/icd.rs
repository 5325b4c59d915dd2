//! Facts of the correlator's output format (icd.md §4.3) that the X-engine, its compute
//! backends and the imager all need, defined once here.

/// A visibility whose baseline lacks an antenna's data: real part `i32::MIN`, imaginary part
/// 1 (as `[re, im]`). A genuine `i32::MIN` real part with another imaginary part is data.
pub const MISSING: [i32; 2] = [i32::MIN, 1];

/// Baselines (auto-correlations included) of `n_ants` antennas: `n (n + 1) / 2`.
pub fn n_baselines(n_ants: usize) -> usize {
    n_ants * (n_ants + 1) / 2
}

/// Index of baseline `(a1, a2)`, `a1 <= a2`, in the correlator's output order: baselines
/// are ordered by the second antenna, then the first (`a2 (a2 + 1) / 2 + a1`).
pub fn baseline_index(a1: usize, a2: usize) -> usize {
    debug_assert!(a1 <= a2);
    a2 * (a2 + 1) / 2 + a1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_are_numbered_in_icd_order_without_gaps() {
        let n = 5;
        let mut seen = vec![false; n_baselines(n)];
        let mut expect = 0;
        for a2 in 0..n {
            for a1 in 0..=a2 {
                let i = baseline_index(a1, a2);
                assert_eq!(i, expect, "({a1}, {a2})");
                assert!(!seen[i]);
                seen[i] = true;
                expect += 1;
            }
        }
        assert!(seen.iter().all(|&s| s));
    }
}
