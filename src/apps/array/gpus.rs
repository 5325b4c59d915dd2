//! `--gpus N`: the array's engines spread over the host's GPUs. Each engine process sees
//! one device through `CUDA_VISIBLE_DEVICES` (every engine opens device 0 of what it
//! sees), so F-engine `a` runs on GPU `a mod N` and XB-engine `k` on GPU `k mod N`. Where
//! the array itself was given `CUDA_VISIBLE_DEVICES`, the indices count within that list.

use crate::engines::common::ConfigError;

/// Most GPUs the array spreads over.
pub const MAX_GPUS: usize = 16;

/// Which GPU each engine uses (none: one GPU, every engine on the device it would open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    /// GPUs the engines spread over.
    pub gpus: usize,
    /// `CUDA_VISIBLE_DEVICES` entries, one per GPU index (the array's own list, or 0..N).
    visible: Vec<String>,
}

impl GpuPlan {
    /// The plan for `gpus` GPUs, with the array's own `CUDA_VISIBLE_DEVICES` (if set).
    /// Refused: 0 or more than [`MAX_GPUS`], or more than the array's visible list holds.
    pub fn new(gpus: usize, visible: Option<&str>) -> Result<GpuPlan, ConfigError> {
        if !(1..=MAX_GPUS).contains(&gpus) {
            return Err(ConfigError::rule(
                format!("--gpus {gpus}"),
                format!("must be in 1..={MAX_GPUS}"),
            ));
        }
        let visible: Vec<String> = match visible.map(str::trim).filter(|v| !v.is_empty()) {
            Some(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
            None => (0..gpus).map(|g| g.to_string()).collect(),
        };
        if visible.len() < gpus {
            return Err(ConfigError::rule(
                format!("--gpus {gpus}"),
                format!(
                    "needs {gpus} devices but CUDA_VISIBLE_DEVICES lists {} ({})",
                    visible.len(),
                    visible.join(",")
                ),
            ));
        }
        Ok(GpuPlan { gpus, visible })
    }

    /// The GPU index of F-engine `i` or XB-engine `i` (each kind counted on its own;
    /// `None` with one GPU).
    pub fn engine(&self, i: usize) -> Option<usize> {
        (self.gpus > 1).then_some(i % self.gpus)
    }

    /// The environment that puts a child on GPU `gpu` (empty for `None`).
    pub fn env(&self, gpu: Option<usize>) -> Vec<(String, String)> {
        gpu.map(|g| vec![("CUDA_VISIBLE_DEVICES".to_string(), self.visible[g].clone())])
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One GPU changes nothing; two alternate the engines; a visible list is respected;
    /// bad counts are refused by name.
    #[test]
    fn engines_alternate_over_the_gpus() {
        let one = GpuPlan::new(1, None).unwrap();
        assert_eq!((one.engine(3), one.engine(1)), (None, None));
        assert!(one.env(one.engine(0)).is_empty());
        let two = GpuPlan::new(2, None).unwrap();
        let f: Vec<_> = (0..4).map(|a| two.engine(a)).collect();
        assert_eq!(f, [Some(0), Some(1), Some(0), Some(1)]);
        assert_eq!(two.engine(1), Some(1));
        assert_eq!(
            two.env(Some(1)),
            [("CUDA_VISIBLE_DEVICES".to_string(), "1".to_string())]
        );
        let listed = GpuPlan::new(2, Some("3, 5")).unwrap();
        assert_eq!(listed.env(listed.engine(1))[0].1, "5");
        for (n, vis) in [(0, None), (17, None), (3, Some("0,1"))] {
            let e = GpuPlan::new(n, vis).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--gpus {n} ")), "{e}");
        }
    }
}
