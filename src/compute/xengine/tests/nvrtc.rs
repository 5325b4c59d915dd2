//! Every X-engine kernel (and a NUFFT one) compiles with NVRTC for sm_80 and sm_90 on the
//! CPU, with the instructions it is written for in the PTX.

use crate::compute::xengine::{BeamWgPlan, WgmmaVariant, XShape};
use crate::gpu::{compile_ptx, nvrtc_test_guard};

#[test]
fn nvrtc_compiles_all_kernels() {
    if !nvrtc_test_guard("nvrtc_compiles_all_kernels") {
        return;
    }
    for arch in ["compute_80", "compute_90"] {
        for (na, nc, ns, bits) in [
            (1, 1, 16, 8),
            (80, 16, 256, 8),
            (1024, 4, 32, 8),
            (3, 2, 16, 4),
            (80, 16, 256, 4),
        ] {
            let shape = XShape::new(na, nc, ns)
                .unwrap()
                .with_sample_bits(bits)
                .unwrap();
            let d = crate::compute::xengine::correlate_defines(&shape);
            let ptx = compile_ptx(
                "correlate.cu",
                crate::compute::xengine::CORRELATE_SRC,
                &d,
                arch,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let text = ptx.to_src();
            assert!(text.contains("mma.sync.aligned.m16n8k32"), "{arch}");
            assert!(text.contains("cp.async"), "{arch}");
            for nb in [1, 64] {
                for tiles in [1, 2, 4, 8] {
                    let plan =
                        crate::compute::xengine::BeamPlan::new(&shape, tiles, 227 << 10).unwrap();
                    let d = crate::compute::xengine::beamform_defines(&shape, nb, &plan);
                    let ptx = compile_ptx(
                        "beamform.cu",
                        crate::compute::xengine::BEAMFORM_SRC,
                        &d,
                        arch,
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                    assert!(ptx.to_src().contains("mma.sync.aligned.m16n8k32"), "{arch}");
                }
            }
            // the tuning space of the benchmark: every (ts, nr) and the probes
            if na == 80 && arch == "compute_90" {
                for (ts, nr, probe) in [
                    (32, 3, 0),
                    (32, 6, 0),
                    (128, 2, 0),
                    (128, 3, 0),
                    (64, 3, 3),
                    (64, 2, 0),
                    (64, 3, 0),
                    (64, 6, 0),
                    (64, 4, 1),
                    (64, 4, 2),
                ] {
                    let mut plan =
                        crate::compute::xengine::BeamPlan::with(&shape, 2, ts, nr).unwrap();
                    plan.probe = probe;
                    plan.min_blocks = if ts == 128 { 1 } else { 2 };
                    let d = crate::compute::xengine::beamform_defines(&shape, 16, &plan);
                    compile_ptx(
                        "beamform.cu",
                        crate::compute::xengine::BEAMFORM_SRC,
                        &d,
                        arch,
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                }
                // the warp layouts: (tiles, spectra per tile, fragments per warp, warps)
                for (btb, ts, mw, warps) in [
                    (1, 128, 1, 8),
                    (4, 32, 1, 8),
                    (4, 64, 1, 16),
                    (2, 128, 2, 16),
                    (1, 64, 1, 4),
                    (4, 32, 2, 4),
                ] {
                    let plan = crate::compute::xengine::BeamPlan::with_layout(
                        &shape, btb, ts, 3, mw, warps,
                    )
                    .unwrap();
                    let d = crate::compute::xengine::beamform_defines(&shape, 64, &plan);
                    compile_ptx(
                        "beamform.cu",
                        crate::compute::xengine::BEAMFORM_SRC,
                        &d,
                        arch,
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                }
                assert!(
                    crate::compute::xengine::BeamPlan::with_layout(&shape, 4, 64, 3, 1, 8)
                        .is_none()
                );
            }
        }
        // The wgmma correlator is sm_90a only (arch-specific PTX).
        if arch == "compute_90" {
            for (v, (na, nc, ns)) in [
                WgmmaVariant {
                    reg_stages: 2,
                    ..WgmmaVariant::default()
                },
                WgmmaVariant {
                    stage_times: 32,
                    ready_bufs: 3,
                    raw_bufs: 8,
                    reg_stages: 1,
                    swizzle: false,
                    probe: 0,
                    ws: false,
                    cluster: false,
                    sparse: false,
                },
                WgmmaVariant {
                    stage_times: 64,
                    ready_bufs: 2,
                    raw_bufs: 4,
                    reg_stages: 1,
                    swizzle: true,
                    probe: 0,
                    ws: false,
                    cluster: false,
                    sparse: false,
                },
                // the warp-specialised kernel: the engine's choice, other ring depths, probes
                WgmmaVariant::warp_specialized(2, 4),
                WgmmaVariant::warp_specialized(3, 2),
                WgmmaVariant {
                    probe: 1,
                    ..WgmmaVariant::warp_specialized(2, 3)
                },
                WgmmaVariant {
                    probe: 3,
                    ..WgmmaVariant::warp_specialized(2, 4)
                },
                WgmmaVariant::warp_specialized_cluster(2, 4),
                WgmmaVariant {
                    probe: 1,
                    ..WgmmaVariant::warp_specialized_cluster(3, 2)
                },
                // the sparse-operand kernel and its probes
                WgmmaVariant::sparse(4, 5),
                WgmmaVariant::sparse(2, 3),
                WgmmaVariant {
                    probe: 1,
                    ..WgmmaVariant::sparse(4, 2)
                },
                WgmmaVariant {
                    probe: 2,
                    ..WgmmaVariant::sparse(2, 2)
                },
            ]
            .into_iter()
            .zip([
                (1, 1, 16),
                (80, 16, 256),
                (1024, 4, 32),
                (576, 28, 256),
                (1, 1, 16),
                (130, 3, 48),
                (1024, 16, 256),
                (576, 28, 256),
                (33, 2, 32),
                (576, 28, 256),
                (1, 1, 32),
                (130, 3, 96),
                (1024, 16, 256),
            ]) {
                let shape = XShape::new(na, nc, ns).unwrap();
                let d = crate::compute::xengine::correlate_wgmma_defines(&shape, v);
                let ptx = compile_ptx(
                    "correlate_wgmma.cu",
                    crate::compute::xengine::CORRELATE_WGMMA_SRC,
                    &d,
                    crate::compute::xengine::WGMMA_ARCH,
                )
                .unwrap_or_else(|e| panic!("{e}"));
                let text = ptx.to_src();
                assert!(text.contains(".target sm_90a"), "{v:?}");
                assert!(
                    text.contains("wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8"),
                    "{v:?}"
                );
                assert!(text.contains("fence.proxy.async.shared::cta"), "{v:?}");
                if v.cluster {
                    assert!(text.contains(".multicast::cluster"), "{v:?}");
                    assert!(text.contains(".reqnctapercluster 2, 1, 1"), "{v:?}");
                }
                if v.ws {
                    assert!(
                        text.contains("cp.async.bulk.shared::cluster.global"),
                        "{v:?}"
                    );
                    assert!(text.contains("setmaxnreg.inc.sync.aligned"), "{v:?}");
                    assert!(text.contains(".entry correlate_ws"), "{v:?}");
                }
                if v.sparse {
                    // (probe 1 leaves the wgmma out)
                    let widths: &[usize] = if v.ready_bufs == 4 {
                        &[32, 64, 96, 128]
                    } else {
                        &[64, 128, 192, 256]
                    };
                    for w in widths.iter().filter(|_| v.probe != 1) {
                        let op = format!("wgmma.mma_async.sp.sync.aligned.m64n{w}k64.s32.s8.s8");
                        assert!(text.contains(&op), "{v:?}: {op}");
                    }
                    if v.probe != 2 {
                        assert!(text.contains("cp.async.bulk.tensor.4d"), "{v:?}");
                    }
                    assert!(text.contains(".entry correlate_sp"), "{v:?}");
                }
            }
        }
        // The wgmma beamformer (sm_90a): beam sets of one or both pols, small and large arrays,
        // antennas in one stage or several.
        if arch == "compute_90" {
            for (na, nc, ns, nb, split) in [
                (80, 512, 256, 64, 2),
                (80, 512, 256, 16, 2),
                (3, 2, 16, 1, 1),
                (33, 3, 160, 40, 3),
                (256, 4, 64, 100, 2),
                (130, 2, 48, 7, 1),
                (144, 4, 256, 20, 2),
                (208, 2, 64, 32, 2),
                (96, 2, 64, 24, 2),
                (20, 2, 32, 8, 1),
            ] {
                let shape = XShape::new(na, nc, ns).unwrap();
                let pol: Vec<i32> = (0..nb).map(|b| (b % split != 0) as i32).collect();
                let planned = BeamWgPlan::new(&shape, &pol, 227 << 10).unwrap();
                // work stealing (where an item is one stage) and static item ranges, with the
                // parameter cache (where planned) and without
                let one_stage = planned.kch >= na.div_ceil(16) * 16;
                let mut variants: Vec<(bool, bool)> = [true, false]
                    .into_iter()
                    .filter(|&s| one_stage || !s)
                    .flat_map(|s| [(s, planned.pcache), (s, false)])
                    .collect();
                variants.dedup();
                for (steal, pcache) in variants {
                    // (the shared memory is the launch's business: only compiled here; a channel
                    // interleave of 3 where the channels allow)
                    let plan = BeamWgPlan {
                        steal,
                        pcache,
                        cperm: if nc % 4 == 0 { 4 } else { 1 },
                        ..planned
                    };
                    let d = plan.defines(&shape, nb);
                    let ptx = compile_ptx(
                        "beamform_wgmma.cu",
                        crate::compute::xengine::BEAMFORM_WGMMA_SRC,
                        &d,
                        crate::compute::xengine::WGMMA_ARCH,
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                    let text = ptx.to_src();
                    assert!(text.contains(".entry beamform_wg"), "{plan:?}");
                    for n in [4 * plan.nb0, 4 * plan.nb1].into_iter().filter(|&n| n > 0) {
                        let op = format!("wgmma.mma_async.sync.aligned.m64n{n}k32.s32.s8.s8");
                        assert!(text.contains(&op), "{plan:?}: {op}");
                    }
                    assert!(text.contains("cp.async.bulk.tensor.4d"), "{plan:?}");
                    assert_wgmma_not_serialised(&text, &format!("beamform_wg {na} ants {plan:?}"));
                }
            }
        }
        // The NUFFT kernels (compute/nufft/tests/gpu.rs compiles more variants).
        for (dim, ns, f64) in [(2, 6, false), (3, 10, true)] {
            use crate::compute::nufft::gpu::{nufft_defines, SpreadConfig, NUFFT_SRC};
            let c = SpreadConfig::choose(dim, ns, if f64 { 8 } else { 4 }, None, None);
            let d = nufft_defines(dim, ns, ns + 4, f64, &c);
            compile_ptx("nufft_spread.cu", NUFFT_SRC, &d, arch).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// Assembles `ptx` with ptxas for sm_90a where the CUDA wheels' ptxas is at hand (next to the
/// headers of `GPUCBF_CUDA_INCLUDE`, as tools/env.sh sets it) and fails where ptxas serialises
/// the wgmma (C7520: a wgmma in a divergent path, every one then waits for the last; the
/// beamformer ran at the same speed either way on the H100, but that was a measurement, not a
/// promise).
fn assert_wgmma_not_serialised(ptx: &str, what: &str) {
    let Some(inc) = std::env::var_os("GPUCBF_CUDA_INCLUDE") else {
        eprintln!("(ptxas check skipped: GPUCBF_CUDA_INCLUDE not set)");
        return;
    };
    let ptxas = std::path::Path::new(&inc).join("../bin/ptxas");
    if !ptxas.exists() {
        eprintln!("(ptxas check skipped: no {})", ptxas.display());
        return;
    }
    let dir = std::env::temp_dir().join(format!("gpucbf-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("k.ptx");
    std::fs::write(&src, ptx).unwrap();
    let out = std::process::Command::new(&ptxas)
        .args(["-arch=sm_90a", "-v", "-o"])
        .arg(dir.join("k.cubin"))
        .arg(&src)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: ptxas failed: {log}");
    assert!(
        !log.contains("C7520"),
        "{what}: ptxas serialised the wgmma: {log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
