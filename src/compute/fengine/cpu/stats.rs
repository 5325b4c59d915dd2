//! Digitiser input statistics (dsp.md §3.3, §7): total power for `dig-rms-dbfs` and the
//! clip count for `dig-clip-cnt`, in exact integer arithmetic.

/// Power and clip statistics of one input (polarisation) over some samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InputStats {
    /// Σ x² over the counted samples.
    pub sum_sq: u64,
    /// Number of samples counted.
    pub samples: u64,
    /// Samples at either end of the range (x = 2^(bits−1) − 1 or x = −2^(bits−1)).
    pub clipped: u64,
    /// Digitiser sample width.
    pub bits: u32,
}

impl InputStats {
    /// Empty statistics of a `bits`-wide input.
    pub fn new(bits: u32) -> Self {
        InputStats {
            bits,
            ..Default::default()
        }
    }

    /// Adds integer-valued samples (as decoded to f32). Squares (< 2^31) are summed in
    /// f64 over runs of 2^20 samples, which stays below 2^53 and is therefore exact.
    pub fn add(&mut self, x: &[f32]) {
        let hi = ((1i64 << (self.bits - 1)) - 1) as f32;
        let lo = -(1i64 << (self.bits - 1)) as f32;
        for run in x.chunks(1 << 20) {
            let mut sum = 0f64;
            let mut clipped = 0u64;
            for &v in run {
                sum += v as f64 * v as f64;
                clipped += (v >= hi || v <= lo) as u64;
            }
            self.sum_sq += sum as u64;
            self.clipped += clipped;
        }
        self.samples += x.len() as u64;
    }

    /// Combines statistics over disjoint sample sets.
    pub fn merge(&mut self, other: &InputStats) {
        self.sum_sq += other.sum_sq;
        self.samples += other.samples;
        self.clipped += other.clipped;
    }

    /// 10·log10(mean power / full-scale sine power), full-scale sine power
    /// = (2^(bits−1) − 1)² / 2. −∞ for silence, NaN with no samples.
    pub fn rms_dbfs(&self) -> f64 {
        if self.samples == 0 {
            return f64::NAN;
        }
        let mean = self.sum_sq as f64 / self.samples as f64;
        let fs = ((1u64 << (self.bits - 1)) - 1) as f64;
        10.0 * (mean / (fs * fs / 2.0)).log10()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_scale_sine_is_zero_dbfs_and_clips_are_exact() {
        // A square wave at ±511 has power 511², i.e. +3.01 dBFS; clipped are the -512 and
        // 511 samples only.
        let mut s = InputStats::new(10);
        s.add(&[511.0, -511.0, 511.0, -511.0]);
        assert!((s.rms_dbfs() - 10.0 * 2f64.log10()).abs() < 1e-12);
        assert_eq!(s.clipped, 2);
        let mut t = InputStats::new(10);
        t.add(&[-512.0, 510.0, -510.0, 0.0, 3.0]);
        assert_eq!(t.clipped, 1);
        assert_eq!(t.sum_sq, 512 * 512 + 2 * 510 * 510 + 9);
        s.merge(&t);
        assert_eq!(s.samples, 9);
        assert_eq!(s.clipped, 3);
        // A sampled full-scale sine: mean power (511²)/2 ⇒ 0 dBFS.
        let mut u = InputStats::new(10);
        let x: Vec<f32> = (0..4).map(|i| [0.0, 511.0, 0.0, -511.0][i]).collect();
        u.add(&x);
        assert!(u.rms_dbfs().abs() < 1e-12);
        assert!(InputStats::new(8).rms_dbfs().is_nan());
    }
}
