//! The one table of NVRTC targets: which virtual architecture every kernel is compiled for on
//! a device of a given compute capability.
//!
//! Before this table the F-engine, X-engine and NUFFT backends each had their own, which
//! agreed on the A100 (8.0: `compute_80`) and the H100 (9.0: `compute_90`), as this one does,
//! and differed elsewhere; this table takes, for each case, the choice that compiles and runs
//! every kernel:
//! * 8.6, 8.7, 8.9: the device's own target (the NUFFT used `compute_80` on all 8.x, the
//!   F-engine `compute_80` on 8.7);
//! * newer than 9.0 (10.x, 12.x): `compute_90`, whose PTX the driver compiles for the newer
//!   device, as the NUFFT did (it has a faster sm_90 path); the F- and X-engines used
//!   `compute_80`, which also runs there;
//! * older than 8.0: refused with [`GpuError::TooOld`]. NVRTC 13 (CUDA 13, which gpucbf
//!   builds against) has no target below `compute_75`, so the F-engine's `compute_60` and the
//!   NUFFT's `compute_70` never compiled, and the correlator needs sm_80 (cp.async, mma.sync
//!   s8).
//!
//! The Hopper-only kernels (wgmma, tensor copies) are compiled for [`SM90A`] whatever the
//! device; their backends run them on 9.0 only.

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::CudaContext;

use super::GpuError;

/// Arch-specific PTX for Hopper (`wgmma`, the bulk tensor copies): runs on 9.0 only.
pub const SM90A: &str = "compute_90a";

/// The compute capabilities with a target of their own.
const TARGETS: [((i32, i32), &str); 5] = [
    ((8, 0), "compute_80"),
    ((8, 6), "compute_86"),
    ((8, 7), "compute_87"),
    ((8, 9), "compute_89"),
    ((9, 0), "compute_90"),
];

/// The NVRTC virtual architecture for a device of compute capability `major.minor` (see the
/// module notes): its own target where the table has one, `compute_80` for another 8.x,
/// `compute_90` for anything newer, [`GpuError::TooOld`] below 8.0.
pub fn nvrtc_arch(major: i32, minor: i32) -> Result<&'static str, GpuError> {
    if let Some(&(_, arch)) = TARGETS.iter().find(|(cc, _)| *cc == (major, minor)) {
        return Ok(arch);
    }
    match major {
        8 => Ok("compute_80"),
        m if m >= 9 => Ok("compute_90"),
        _ => Err(GpuError::TooOld { major, minor }),
    }
}

/// The compute capability (major, minor) of the device of `ctx`.
pub fn compute_capability(ctx: &CudaContext) -> Result<(i32, i32), GpuError> {
    let major = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    Ok((major, minor))
}

/// The NVRTC target of the device of `ctx` ([`nvrtc_arch`] of its compute capability).
pub fn device_arch(ctx: &CudaContext) -> Result<&'static str, GpuError> {
    let (major, minor) = compute_capability(ctx)?;
    nvrtc_arch(major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a100_and_h100_keep_their_targets() {
        assert_eq!(nvrtc_arch(8, 0), Ok("compute_80"));
        assert_eq!(nvrtc_arch(9, 0), Ok("compute_90"));
    }

    #[test]
    fn every_capability_has_one_answer() {
        for ((major, minor), arch) in TARGETS {
            assert_eq!(nvrtc_arch(major, minor), Ok(arch));
        }
        assert_eq!(nvrtc_arch(8, 8), Ok("compute_80"));
        for cc in [(10, 0), (10, 3), (12, 0), (12, 1)] {
            assert_eq!(nvrtc_arch(cc.0, cc.1), Ok("compute_90"), "{cc:?}");
        }
        for (major, minor) in [(7, 5), (7, 0), (6, 1), (0, 0)] {
            let e = nvrtc_arch(major, minor).unwrap_err();
            assert_eq!(e, GpuError::TooOld { major, minor });
            assert!(e.to_string().contains(&format!("{major}.{minor}")), "{e}");
        }
    }
}
