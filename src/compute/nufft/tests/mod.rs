//! Accuracy tests against plainly written direct sums ([`super::reference`]), and error
//! handling.

mod gpu;

use num_complex::Complex;

use super::reference::{direct_type1, direct_type2};
use super::*;
use crate::compute::nufft::SplitMix64;

pub(super) type C64 = Complex<f64>;

pub(super) fn rel_l2(got: &[C64], exact: &[C64]) -> f64 {
    assert_eq!(got.len(), exact.len());
    let num: f64 = got.iter().zip(exact).map(|(a, b)| (a - b).norm_sqr()).sum();
    let den: f64 = exact.iter().map(|b| b.norm_sqr()).sum();
    (num / den).sqrt()
}

pub(super) fn random_points(rng: &mut SplitMix64, m: usize, dim: usize) -> Vec<Vec<f64>> {
    let pi = std::f64::consts::PI;
    (0..dim)
        .map(|_| (0..m).map(|_| rng.uniform(-pi, pi)).collect())
        .collect()
}

pub(super) fn random_complex(rng: &mut SplitMix64, n: usize) -> Vec<C64> {
    (0..n)
        .map(|_| C64::new(rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0)))
        .collect()
}

pub(super) fn to_t<T: Real>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::cast(x)).collect()
}

pub(super) fn to_tc<T: Real>(v: &[C64]) -> Vec<Complex<T>> {
    v.iter()
        .map(|z| Complex::new(T::cast(z.re), T::cast(z.im)))
        .collect()
}

pub(super) fn to_c64<T: Real>(v: &[Complex<T>]) -> Vec<C64> {
    v.iter()
        .map(|z| C64::new(z.re.as_f64(), z.im.as_f64()))
        .collect()
}

/// Runs the CPU NUFFT in precision T on f64 data (rounded to T).
pub(super) fn run_t<T: Real>(
    ty: NufftType,
    coords: &[Vec<f64>],
    input: &[C64],
    modes: &[usize],
    opts: &Options,
) -> Vec<C64> {
    let ct: Vec<Vec<T>> = coords.iter().map(|x| to_t::<T>(x)).collect();
    let refs: Vec<&[T]> = ct.iter().map(|v| v.as_slice()).collect();
    let inp = to_tc::<T>(input);
    let out = match ty {
        NufftType::Type1 => nufft_type1(&refs, &inp, modes, opts),
        NufftType::Type2 => nufft_type2(&refs, &inp, modes, opts),
    };
    to_c64(&out.expect("valid input must not fail"))
}

/// One case of a sweep: the points, the input and the direct sum for its isign.
pub(super) struct Case<'a> {
    pub coords: &'a [Vec<f64>],
    pub input: &'a [C64],
    pub exact: &'a [C64],
    pub opts: Options,
}

/// Sweeps eps × upsampfac × isign for one precision, dimension and type over random data
/// (`m` points, rounded to T so the f64 direct sum sees exactly the same input); `check`
/// returns what failed in a case (`None` when it passes); asserts that nothing failed (all
/// failures listed).
pub(super) fn sweep_cases<T: Real>(
    ty: NufftType,
    modes: &[usize],
    m: usize,
    eps_list: &[f64],
    seed: u64,
    mut check: impl FnMut(&Case) -> Option<String>,
) {
    let dim = modes.len();
    let mut rng = SplitMix64(seed);
    let coords: Vec<Vec<f64>> = random_points(&mut rng, m, dim)
        .iter()
        .map(|x| to_c64_real::<T>(x))
        .collect();
    let n_in = match ty {
        NufftType::Type1 => m,
        NufftType::Type2 => modes.iter().product(),
    };
    let input = to_c64(&to_tc::<T>(&random_complex(&mut rng, n_in)));
    let mut failures = Vec::new();
    for isign in [1, -1] {
        let exact = match ty {
            NufftType::Type1 => direct_type1(&coords, &input, modes, isign),
            NufftType::Type2 => direct_type2(&coords, &input, modes, isign),
        };
        for upsampfac in [2.0, 1.25] {
            for &eps in eps_list {
                let opts = Options {
                    eps,
                    isign,
                    upsampfac,
                };
                let case = Case {
                    coords: &coords,
                    input: &input,
                    exact: &exact,
                    opts,
                };
                if let Some(f) = check(&case) {
                    failures.push(format!("isign={isign} sigma={upsampfac} eps={eps:e}: {f}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} {ty:?} {modes:?}: {failures:#?}",
        T::NAME
    );
}

/// [`sweep_cases`] of the CPU NUFFT: relative ℓ2 error ≤ 10·eps everywhere.
fn sweep<T: Real>(ty: NufftType, modes: &[usize], m: usize, eps_list: &[f64], seed: u64) {
    sweep_cases::<T>(ty, modes, m, eps_list, seed, |c| {
        let got = run_t::<T>(ty, c.coords, c.input, modes, &c.opts);
        let err = rel_l2(&got, c.exact);
        let o = &c.opts;
        eprintln!(
            "{} {ty:?} {modes:?} isign={} sigma={} eps={:e}: err={err:.2e}",
            T::NAME,
            o.isign,
            o.upsampfac,
            o.eps
        );
        (err.is_nan() || err > 10.0 * o.eps).then(|| format!("err={err:.3e}"))
    });
}

pub(super) fn to_c64_real<T: Real>(x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| T::cast(v).as_f64()).collect()
}

pub(super) const EPS_F64: [f64; 7] = [1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9];
pub(super) const EPS_F32: [f64; 3] = [1e-3, 1e-4, 1e-5];

#[test]
fn type1_2d_f64() {
    sweep::<f64>(NufftType::Type1, &[32, 31], 2000, &EPS_F64, 1);
}

#[test]
fn type2_2d_f64() {
    sweep::<f64>(NufftType::Type2, &[32, 31], 2000, &EPS_F64, 2);
}

#[test]
fn type1_3d_f64() {
    sweep::<f64>(NufftType::Type1, &[16, 15, 16], 1500, &EPS_F64, 3);
}

#[test]
fn type2_3d_f64() {
    sweep::<f64>(NufftType::Type2, &[16, 15, 16], 1500, &EPS_F64, 4);
}

#[test]
fn type1_2d_f32() {
    sweep::<f32>(NufftType::Type1, &[32, 32], 2000, &EPS_F32, 5);
}

#[test]
fn type2_2d_f32() {
    sweep::<f32>(NufftType::Type2, &[32, 32], 2000, &EPS_F32, 6);
}

#[test]
fn type1_3d_f32() {
    sweep::<f32>(NufftType::Type1, &[16, 16, 16], 1500, &EPS_F32, 7);
}

#[test]
fn type2_3d_f32() {
    sweep::<f32>(NufftType::Type2, &[16, 16, 16], 1500, &EPS_F32, 8);
}

/// Points at exactly ±π and far outside [-π, π) give the transform of the folded points.
#[test]
fn periodic_folding_f64() {
    let pi = std::f64::consts::PI;
    let mut rng = SplitMix64(9);
    let base = random_points(&mut rng, 400, 2);
    let mut x = base[0].clone();
    let mut y = base[1].clone();
    x.extend([pi, -pi, pi, -pi, 0.0, pi - 1e-15]);
    y.extend([pi, -pi, -pi, pi, pi, -pi]);
    let folded = vec![x.clone(), y.clone()];
    // Shift every point by a different multiple of 2π (up to ±20π).
    let shift = |v: &[f64], s: i64| -> Vec<f64> {
        v.iter()
            .enumerate()
            .map(|(j, &a)| a + 2.0 * pi * (((j as i64 * 7 + s) % 21) - 10) as f64)
            .collect()
    };
    let shifted = vec![shift(&x, 3), shift(&y, 5)];
    let modes = [24, 20];
    let c = random_complex(&mut rng, x.len());
    for upsampfac in [2.0, 1.25] {
        let opts = Options {
            eps: 1e-9,
            isign: 1,
            upsampfac,
        };
        let exact = direct_type1(&folded, &c, &modes, 1);
        let got = run_t::<f64>(NufftType::Type1, &shifted, &c, &modes, &opts);
        let err = rel_l2(&got, &exact);
        assert!(err < 1e-8, "type 1 sigma={upsampfac}: {err:e}");
        let f = random_complex(&mut rng, 480);
        let exact2 = direct_type2(&folded, &f, &modes, -1);
        let opts2 = Options { isign: -1, ..opts };
        let got2 = run_t::<f64>(NufftType::Type2, &shifted, &f, &modes, &opts2);
        let err2 = rel_l2(&got2, &exact2);
        assert!(err2 < 1e-8, "type 2 sigma={upsampfac}: {err2:e}");
    }
}

/// f32 coordinates at ±π (rounded: just outside [-π, π]) and outside the period.
#[test]
fn periodic_folding_f32() {
    let pi = std::f32::consts::PI;
    let x: Vec<f32> = vec![pi, -pi, 7.0, -20.0, 0.0, 3.0, 100.5, -pi];
    let y: Vec<f32> = vec![-pi, pi, -7.5, 13.0, pi, -3.0, -0.25, 40.0];
    let coords: Vec<Vec<f64>> = [&x, &y]
        .iter()
        .map(|v| v.iter().map(|&a| a as f64).collect())
        .collect();
    let mut rng = SplitMix64(10);
    let c = to_c64(&to_tc::<f32>(&random_complex(&mut rng, x.len())));
    let modes = [16, 16];
    let exact = direct_type1(&coords, &c, &modes, 1);
    let got =
        to_c64(&nufft_type1(&[&x, &y], &to_tc::<f32>(&c), &modes, &Options::new(1e-5)).unwrap());
    assert!(rel_l2(&got, &exact) < 1e-4, "{:e}", rel_l2(&got, &exact));
}

/// Clustered points near the corner: several chunks per bin row and a subgrid that wraps.
#[test]
fn clustered_points_across_the_seam() {
    let pi = std::f64::consts::PI;
    let mut rng = SplitMix64(11);
    let m = 20_000;
    let coords: Vec<Vec<f64>> = (0..2)
        .map(|_| (0..m).map(|_| pi - 0.05 + rng.uniform(0.0, 0.1)).collect())
        .collect();
    let c = random_complex(&mut rng, m);
    let modes = [32, 32];
    let exact = direct_type1(&coords, &c, &modes, 1);
    let got = run_t::<f64>(NufftType::Type1, &coords, &c, &modes, &Options::new(1e-8));
    assert!(rel_l2(&got, &exact) < 1e-7, "{:e}", rel_l2(&got, &exact));
}

/// A plan is reusable: a second execute does not see the first one's grid.
#[test]
fn plan_reuse() {
    let mut rng = SplitMix64(12);
    let coords = random_points(&mut rng, 300, 2);
    let modes = [16, 12];
    let mut plan =
        make_plan::<f64>(Backend::Cpu, NufftType::Type1, &modes, &Options::new(1e-9)).unwrap();
    assert_eq!(plan.backend_name(), "cpu");
    plan.set_points(&[&coords[0], &coords[1]]).unwrap();
    let mut out = vec![C64::default(); 192];
    for _ in 0..2 {
        let c = random_complex(&mut rng, 300);
        plan.execute(&c, &mut out).unwrap();
        assert!(rel_l2(&out, &direct_type1(&coords, &c, &modes, 1)) < 1e-8);
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let o = Options::new(1e-6);
    let x = vec![0.1f64, 0.2, 0.3];
    let y2 = vec![0.1f64, 0.2];
    let c3 = vec![C64::new(1.0, 0.0); 3];
    let e = |r: Result<Vec<C64>, NufftError>| r.expect_err("must be an error");
    assert_eq!(
        e(nufft_type1(&[&x, &y2], &c3, &[8, 8], &o)),
        NufftError::LengthMismatch(vec![3, 2])
    );
    let mut xn = x.clone();
    xn[1] = f64::NAN;
    assert!(matches!(
        e(nufft_type1(&[&xn, &x], &c3, &[8, 8], &o)),
        NufftError::NonFiniteCoordinate {
            axis: 0,
            index: 1,
            ..
        }
    ));
    let mut yi = x.clone();
    yi[2] = f64::NEG_INFINITY;
    assert!(matches!(
        e(nufft_type2(&[&x, &yi], &[C64::default(); 64], &[8, 8], &o)),
        NufftError::NonFiniteCoordinate {
            axis: 1,
            index: 2,
            ..
        }
    ));
    for eps in [0.0, -1e-3, f64::NAN, 1e-20, 0.5, f64::INFINITY] {
        let r = nufft_type1(&[&x, &x], &c3, &[8, 8], &Options::new(eps));
        assert!(
            matches!(e(r), NufftError::EpsOutOfRange { .. }),
            "eps={eps}"
        );
    }
    let r32 = nufft_type1::<f32>(
        &[&[0.1], &[0.2]],
        &[Complex::new(1.0, 0.0)],
        &[8, 8],
        &Options::new(1e-9),
    );
    assert!(matches!(
        r32.unwrap_err(),
        NufftError::EpsOutOfRange {
            precision: "f32",
            ..
        }
    ));
    let too_fine = Options {
        eps: 1e-12,
        isign: 1,
        upsampfac: 1.25,
    };
    assert!(matches!(
        e(nufft_type1(&[&x, &x], &c3, &[8, 8], &too_fine)),
        NufftError::KernelTooWide { .. }
    ));
    for s in [1.0, 0.0, f64::NAN, 10.0] {
        let r = nufft_type1(&[&x, &x], &c3, &[8, 8], &Options { upsampfac: s, ..o });
        assert!(matches!(e(r), NufftError::BadUpsampfac(_)), "upsampfac={s}");
    }
    assert_eq!(
        e(nufft_type1(&[&x, &x], &c3, &[8, 0], &o)),
        NufftError::ZeroModes { axis: 1 }
    );
    assert_eq!(
        e(nufft_type1(&[&x, &x], &c3, &[0, 8, 8], &o)),
        NufftError::ZeroModes { axis: 0 }
    );
    assert_eq!(
        e(nufft_type1(&[&x], &c3, &[8], &o)),
        NufftError::BadDimension(1)
    );
    assert!(matches!(
        e(nufft_type1(&[&x, &x], &c3, &[8, 8, 8], &o)),
        NufftError::WrongCoordCount { .. }
    ));
    assert!(matches!(
        e(nufft_type1(&[&x, &x], &c3[..2], &[8, 8], &o)),
        NufftError::WrongLength { .. }
    ));
    assert!(matches!(
        e(nufft_type2(&[&x, &x], &c3, &[8, 8], &o)),
        NufftError::WrongLength { .. }
    ));
    let mut plan = CpuPlan::<f64>::new(NufftType::Type2, &[8, 8], &o).unwrap();
    let mut out = vec![C64::default(); 3];
    assert_eq!(
        plan.execute(&[C64::default(); 64], &mut out),
        Err(NufftError::NoPoints)
    );
    let huge = CpuPlan::<f32>::new(NufftType::Type1, &[1 << 23, 1 << 23], &o);
    assert!(matches!(huge.err(), Some(NufftError::GridTooLarge(_))));
    let huge = CpuPlan::<f32>::new(NufftType::Type1, &[1 << 30, 4], &o);
    assert!(matches!(huge.err(), Some(NufftError::GridTooLarge(_))));
    // Without a GPU, asking for it is a clear error (with one, tests_gpu.rs covers it).
    if !crate::gpu::gpu_available() {
        let gpu = make_plan::<f32>(Backend::Gpu, NufftType::Type1, &[8, 8], &o);
        let err = gpu.err().expect("GPU backend must not pretend to exist");
        assert!(err.to_string().starts_with("GPU NUFFT backend: "), "{err}");
    }
}

/// Degenerate but valid shapes: one mode on an axis, odd sizes, in both types.
#[test]
fn single_and_odd_mode_counts() {
    let mut rng = SplitMix64(14);
    let coords = random_points(&mut rng, 200, 3);
    for modes in [[1usize, 5, 3], [7, 1, 1], [3, 4, 5]] {
        let c = random_complex(&mut rng, 200);
        let opts = Options::new(1e-10);
        let got = run_t::<f64>(NufftType::Type1, &coords, &c, &modes, &opts);
        assert!(
            rel_l2(&got, &direct_type1(&coords, &c, &modes, 1)) < 1e-9,
            "{modes:?}"
        );
        let f = random_complex(&mut rng, modes.iter().product());
        let opts2 = Options { isign: -1, ..opts };
        let got2 = run_t::<f64>(NufftType::Type2, &coords, &f, &modes, &opts2);
        assert!(
            rel_l2(&got2, &direct_type2(&coords, &f, &modes, -1)) < 1e-9,
            "{modes:?}"
        );
    }
}

#[test]
fn fine_grid_is_even_smooth_and_large_enough() {
    assert_eq!(next_smooth_even(1), 2);
    assert_eq!(next_smooth_even(7), 8);
    assert_eq!(next_smooth_even(13), 16);
    assert_eq!(next_smooth_even(31), 32);
    assert_eq!(next_smooth_even(61), 64);
    assert_eq!(next_smooth_even(2561), 2592);
    let p = CpuPlan::<f32>::new(NufftType::Type1, &[100, 3], &Options::new(1e-5)).unwrap();
    // σN = 200 → 200; 2·ns = 12 > 6 → 12.
    assert_eq!(p.fine_grid(), [200, 12, 1]);
    let q = CpuPlan::<f64>::new(
        NufftType::Type1,
        &[32, 32],
        &Options {
            upsampfac: 1.25,
            ..Options::new(1e-6)
        },
    )
    .unwrap();
    assert_eq!(q.fine_grid(), [40, 40, 1]);
}

#[test]
fn fast_floor_and_ceil_match_libm() {
    let mut rng = SplitMix64(13);
    let mut vals = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0 - 1e-16,
        -3.0,
        1e15 + 0.5,
        -4.4e15,
        1e300,
        -1e300,
    ];
    vals.extend((0..10_000).map(|_| rng.uniform(-1e6, 1e6)));
    vals.extend((0..10_000).map(|_| rng.uniform(-3.0, 3.0)));
    for v in vals {
        assert_eq!(fast_floor(v), v.floor(), "floor({v})");
        assert_eq!(fast_ceil(v), v.ceil(), "ceil({v})");
    }
}
