//! GPU backend tests: kernels compile for sm_80/sm_90 (NVRTC, no GPU needed); on a GPU,
//! accuracy against direct sums and agreement with the CPU backend. GPU tests skip with a
//! notice without a GPU and fail with `GPUCBF_REQUIRE_GPU=1`.

use super::*;
use crate::compute::nufft::gpu::{nufft_defines, SpreadConfig, NUFFT_SRC, SHARED_MAX};
use crate::compute::nufft::kernel::{Kernel, KernelParams};
use crate::compute::nufft::SplitMix64;
use crate::compute::nufft::*;
use crate::gpu::{compile_ptx, gpu_test_guard, nvrtc_test_guard};

/// Every (dim, ns, precision) the plans can ask for fits the shared-memory cap, and the
/// thread groups cover all ns^dim residue classes.
#[test]
fn spread_config_fits_and_covers_all_classes() {
    for dim in [2, 3] {
        for ns in 2..=MAX_NS {
            for rb in [4, 8] {
                let c = SpreadConfig::choose(dim, ns, rb, None, None);
                let nclass = ns.pow(dim as u32);
                let cpt = nclass.div_ceil(c.group_threads);
                assert!(cpt * c.group_threads >= nclass);
                assert!(c.block_threads() <= 1024, "{dim} {ns} {rb}: {c:?}");
                let sh = c.shared_bytes(dim, ns, rb, 20);
                assert!(sh <= SHARED_MAX, "{dim} {ns} {rb}: {sh} {c:?}");
                assert!(c.bin[0] >= 2 && c.batch >= 8, "{c:?}");
            }
        }
    }
    // The 2-D f32 benchmark case keeps nearly every lane busy: 7 groups of 36 threads.
    let c = SpreadConfig::choose(2, 6, 4, None, None);
    assert_eq!((c.groups, c.group_threads), (7, 36));
}

/// All kernel variants compile with NVRTC for sm_80 and sm_90.
#[test]
fn nufft_kernels_compile_with_nvrtc() {
    if !nvrtc_test_guard("nufft_kernels_compile_with_nvrtc") {
        return;
    }
    for arch in ["compute_80", "compute_90"] {
        for (dim, eps, sigma, f64) in [
            (2, 1e-5, 2.0, false),
            (3, 1e-3, 2.0, false),
            (3, 1e-9, 1.25, true),
            (2, 1e-14, 2.0, true),
        ] {
            {
                let p = KernelParams::from_eps(eps, sigma).unwrap();
                let ncoef = Kernel::<f64>::new(&p, eps).coef_flat().len() / p.ns;
                let c = SpreadConfig::choose(dim, p.ns, if f64 { 8 } else { 4 }, None, None);
                let d = nufft_defines(dim, p.ns, ncoef, f64, &c);
                let ptx = compile_ptx("nufft_spread.cu", NUFFT_SRC, &d, arch)
                    .unwrap_or_else(|e| panic!("{e}"));
                let text = ptx.to_src();
                for k in [
                    "nufft_bin_count",
                    "nufft_spread",
                    "nufft_interp",
                    "nufft_extract",
                ] {
                    assert!(
                        text.contains(k),
                        "{k} missing for {arch} dim {dim} ns {}",
                        p.ns
                    );
                }
            }
        }
    }
}

fn run_gpu<T: Real>(
    ty: NufftType,
    coords: &[Vec<f64>],
    input: &[C64],
    modes: &[usize],
    opts: &Options,
) -> Vec<C64> {
    let ct: Vec<Vec<T>> = coords.iter().map(|x| to_t::<T>(x)).collect();
    let refs: Vec<&[T]> = ct.iter().map(|v| v.as_slice()).collect();
    let mut plan = GpuPlan::<T>::new(ty, modes, opts).expect("GPU plan");
    plan.set_points(&refs).expect("set_points");
    let n_out = match ty {
        NufftType::Type1 => modes.iter().product(),
        NufftType::Type2 => coords[0].len(),
    };
    let mut out = vec![Complex::<T>::default(); n_out];
    plan.execute(&to_tc::<T>(input), &mut out).expect("execute");
    to_c64(&out)
}

/// GPU vs direct sum ≤ 10·eps and GPU vs CPU ≤ `agree` (relative ℓ2) over eps × σ × isign.
fn gpu_sweep<T: Real>(
    name: &str,
    ty: NufftType,
    modes: &[usize],
    m: usize,
    eps_list: &[f64],
    seed: u64,
) {
    if !gpu_test_guard(name) {
        return;
    }
    let agree = if T::NAME == "f64" { 1e-9 } else { 2e-4 };
    sweep_cases::<T>(ty, modes, m, eps_list, seed, |c| {
        let got = run_gpu::<T>(ty, c.coords, c.input, modes, &c.opts);
        let cpu = run_t::<T>(ty, c.coords, c.input, modes, &c.opts);
        let err = rel_l2(&got, c.exact);
        let diff = rel_l2(&got, &cpu);
        let o = &c.opts;
        eprintln!(
            "gpu {} {ty:?} {modes:?} isign={} sigma={} eps={:e}: err={err:.2e} vs cpu {diff:.2e}",
            T::NAME,
            o.isign,
            o.upsampfac,
            o.eps
        );
        (err.is_nan() || err > 10.0 * o.eps || diff.is_nan() || diff > agree)
            .then(|| format!("err={err:.3e} cpu diff={diff:.3e}"))
    });
}

#[test]
fn gpu_type1_2d_f64() {
    gpu_sweep::<f64>(
        "gpu_type1_2d_f64",
        NufftType::Type1,
        &[32, 31],
        2000,
        &EPS_F64,
        21,
    );
}

#[test]
fn gpu_type2_2d_f64() {
    gpu_sweep::<f64>(
        "gpu_type2_2d_f64",
        NufftType::Type2,
        &[32, 31],
        2000,
        &EPS_F64,
        22,
    );
}

#[test]
fn gpu_type1_3d_f64() {
    gpu_sweep::<f64>(
        "gpu_type1_3d_f64",
        NufftType::Type1,
        &[16, 15, 16],
        1500,
        &EPS_F64,
        23,
    );
}

#[test]
fn gpu_type2_3d_f64() {
    gpu_sweep::<f64>(
        "gpu_type2_3d_f64",
        NufftType::Type2,
        &[16, 15, 16],
        1500,
        &EPS_F64,
        24,
    );
}

#[test]
fn gpu_type1_2d_f32() {
    gpu_sweep::<f32>(
        "gpu_type1_2d_f32",
        NufftType::Type1,
        &[32, 32],
        2000,
        &EPS_F32,
        25,
    );
}

#[test]
fn gpu_type2_2d_f32() {
    gpu_sweep::<f32>(
        "gpu_type2_2d_f32",
        NufftType::Type2,
        &[32, 32],
        2000,
        &EPS_F32,
        26,
    );
}

#[test]
fn gpu_type1_3d_f32() {
    gpu_sweep::<f32>(
        "gpu_type1_3d_f32",
        NufftType::Type1,
        &[16, 16, 16],
        1500,
        &EPS_F32,
        27,
    );
}

#[test]
fn gpu_type2_3d_f32() {
    gpu_sweep::<f32>(
        "gpu_type2_3d_f32",
        NufftType::Type2,
        &[16, 16, 16],
        1500,
        &EPS_F32,
        28,
    );
}

/// Dense clustered points across the periodic seam: one bin split into many subproblems,
/// many batches per subproblem, tiles wrapping at both ends; points folded from far away.
#[test]
fn gpu_clustered_points_across_the_seam() {
    if !gpu_test_guard("gpu_clustered_points_across_the_seam") {
        return;
    }
    let pi = std::f64::consts::PI;
    let mut rng = SplitMix64(31);
    let m = 20_000;
    let coords: Vec<Vec<f64>> = (0..2)
        .map(|_| {
            (0..m)
                .map(|j| pi - 0.05 + rng.uniform(0.0, 0.1) + 2.0 * pi * ((j % 7) as f64 - 3.0))
                .collect()
        })
        .collect();
    let c = random_complex(&mut rng, m);
    for modes in [[32usize, 32], [200, 64]] {
        let exact = direct_type1(&coords, &c, &modes, 1);
        let got = run_gpu::<f64>(NufftType::Type1, &coords, &c, &modes, &Options::new(1e-8));
        assert!(
            rel_l2(&got, &exact) < 1e-7,
            "{modes:?}: {:e}",
            rel_l2(&got, &exact)
        );
        let f = random_complex(&mut rng, modes[0] * modes[1]);
        let o2 = Options {
            isign: -1,
            ..Options::new(1e-8)
        };
        let exact2 = direct_type2(&coords, &f, &modes, -1);
        let got2 = run_gpu::<f64>(NufftType::Type2, &coords, &f, &modes, &o2);
        assert!(
            rel_l2(&got2, &exact2) < 1e-7,
            "{modes:?}: {:e}",
            rel_l2(&got2, &exact2)
        );
    }
}

/// Plan reuse (a second execute does not see the first one's grid), new points on the same
/// plan, `Auto` picking the GPU, and bad input reported as errors.
#[test]
fn gpu_plan_reuse_and_errors() {
    if !gpu_test_guard("gpu_plan_reuse_and_errors") {
        return;
    }
    let mut rng = SplitMix64(32);
    let modes = [16, 12];
    let mut plan =
        make_plan::<f64>(Backend::Auto, NufftType::Type1, &modes, &Options::new(1e-9)).unwrap();
    assert_eq!(plan.backend_name(), "gpu");
    let mut out = vec![C64::default(); 192];
    assert_eq!(
        plan.execute(&[C64::default(); 3], &mut out),
        Err(NufftError::NoPoints)
    );
    for m in [300, 0, 1, 5000] {
        let coords = random_points(&mut rng, m, 2);
        plan.set_points(&[&coords[0], &coords[1]]).unwrap();
        for _ in 0..2 {
            let c = random_complex(&mut rng, m);
            plan.execute(&c, &mut out).unwrap();
            let exact = direct_type1(&coords, &c, &modes, 1);
            if m == 0 {
                assert!(out.iter().all(|v| *v == C64::default()));
            } else {
                assert!(rel_l2(&out, &exact) < 1e-8, "m={m}");
            }
        }
    }
    let c = random_complex(&mut rng, 4999);
    assert!(matches!(
        plan.execute(&c, &mut out),
        Err(NufftError::WrongLength { .. })
    ));
    let x = vec![0.0, f64::NAN];
    assert!(matches!(
        plan.set_points(&[&x, &x]),
        Err(NufftError::NonFiniteCoordinate { index: 1, .. })
    ));
    assert!(matches!(
        plan.set_points(&[&x[..1], &x]),
        Err(NufftError::LengthMismatch(_))
    ));
    assert!(matches!(
        GpuPlan::<f32>::new(NufftType::Type1, &[8, 8], &Options::new(1e-9)),
        Err(NufftError::EpsOutOfRange { .. })
    ));
}
