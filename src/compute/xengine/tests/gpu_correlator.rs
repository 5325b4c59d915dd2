//! The GPU correlators (mma.sync and, on Hopper, wgmma) against the CPU: bit-exact dumps and
//! saturation counts for every kernel variant, 8- and 4-bit input.

use super::{random_batches, saturating_input, shape4, Rng};
use crate::compute::xengine::{
    CorrKernel, CorrVariant, CpuX, GpuX, WgmmaVariant, XBackend, XShape,
};
use crate::gpu::gpu_test_guard;

/// A correlator kernel under test: the mma.sync kernel with its variant, or the wgmma kernel.
#[derive(Clone, Copy, Debug)]
enum Kern {
    Mma(CorrVariant),
    Wg(WgmmaVariant),
}

/// The kernels' defaults where the device runs them (wgmma: Hopper only, with a notice):
/// mma.sync, the single-role wgmma kernel and the warp-specialised one.
fn kernels_under_test(test: &str) -> Vec<Kern> {
    let mut k = vec![Kern::Mma(CorrVariant::default())];
    let g = GpuX::new(XShape::new(1, 1, 16).unwrap()).expect("GpuX::new");
    if g.wgmma_supported() {
        if std::env::var(crate::compute::xengine::CORRELATOR_ENV).is_err() {
            // the measured fastest kernel (compute/xengine/gpu/wgmma.rs); this probe shape has 16
            // spectra per batch, which the sparse kernel cannot tile, so it gets ws there
            let want = if crate::compute::xengine::AUTO_WS_ON_SM90
                || crate::compute::xengine::AUTO_SPARSE_ON_SM90
            {
                CorrKernel::Wgmma
            } else {
                CorrKernel::MmaSync
            };
            assert_eq!(g.correlator_kernel(), want, "default kernel");
            if crate::compute::xengine::AUTO_WS_ON_SM90 {
                assert_eq!(
                    g.wgmma_variant(),
                    Some(WgmmaVariant::warp_specialized(2, 4)),
                    "default wgmma variant for 16 spectra per batch"
                );
            }
            if crate::compute::xengine::AUTO_SPARSE_ON_SM90 {
                let g = GpuX::new(XShape::new(3, 1, 256).unwrap()).expect("GpuX::new");
                assert_eq!(
                    g.wgmma_variant(),
                    Some(WgmmaVariant::sparse(4, 5)),
                    "default wgmma variant for 256 spectra per batch"
                );
            }
        }
        k.push(Kern::Wg(WgmmaVariant::default()));
        k.push(Kern::Wg(WgmmaVariant::warp_specialized(2, 4)));
        k.push(Kern::Wg(WgmmaVariant::warp_specialized_cluster(2, 4)));
        k.push(Kern::Wg(WgmmaVariant::sparse(4, 5)));
        k.push(Kern::Wg(WgmmaVariant::sparse(2, 3)));
    } else {
        eprintln!("{test}: wgmma kernel not tested (device is not compute capability 9.x)");
    }
    k
}

/// Spectra per batch for `kern`: the sparse-operand kernel takes multiples of 32 only (the
/// others any multiple of 16), so its cases round up.
fn spectra_for(kern: Kern, ns: usize) -> usize {
    match kern {
        Kern::Wg(v) if v.sparse => ns.div_ceil(32) * 32,
        _ => ns,
    }
}

fn gpu_vs_cpu_correlator(shape: XShape, batches: &[Vec<i8>], present: &[bool], kern: Kern) {
    let mut cpu = CpuX::new(shape);
    let mut gpu = GpuX::new(shape).expect("GpuX::new");
    match kern {
        Kern::Mma(v) => gpu.set_correlator_variant(v).unwrap(),
        Kern::Wg(v) if v.sparse && !shape.spectra_per_batch.is_multiple_of(32) => {
            // refused with a clear error, never run on a shape it cannot tile
            let e = gpu.set_wgmma_variant(v).unwrap_err().to_string();
            assert!(e.contains("multiple of 32"), "{e}");
            return;
        }
        Kern::Wg(v) => gpu.set_wgmma_variant(v).unwrap(),
    }
    for b in batches {
        cpu.accumulate(b).unwrap();
        gpu.accumulate(b).unwrap();
    }
    let mut want = vec![0i32; shape.output_len()];
    let mut got = vec![0x5a5a5a5ai32; shape.output_len()];
    let s_cpu = cpu.dump(present, &mut want).unwrap();
    let s_gpu = gpu.dump(present, &mut got).unwrap();
    if got != want {
        let i = got.iter().zip(&want).position(|(a, b)| a != b).unwrap();
        panic!(
            "{kern:?} {shape:?}: first mismatch at {i}: gpu {} cpu {} ({} differ)",
            got[i],
            want[i],
            got.iter().zip(&want).filter(|(a, b)| a != b).count()
        );
    }
    assert_eq!(s_gpu, s_cpu, "{kern:?} {shape:?} saturation count");
    // accumulator reset: a second dump of one more batch must match again
    cpu.accumulate(&batches[0]).unwrap();
    gpu.accumulate(&batches[0]).unwrap();
    cpu.dump(present, &mut want).unwrap();
    gpu.dump(present, &mut got).unwrap();
    assert!(got == want, "{kern:?} {shape:?}: second dump differs");
}

#[test]
fn gpu_correlator_bit_exact() {
    if !gpu_test_guard("gpu_correlator_bit_exact") {
        return;
    }
    let cases = [
        (1, 3, 32),
        (3, 4, 48),
        (4, 2, 16),
        (19, 5, 32),
        (33, 3, 48),
        (64, 2, 64),
        (80, 4, 32),
        (130, 2, 48),
        (576, 1, 32),
    ];
    for kern in kernels_under_test("gpu_correlator_bit_exact") {
        for (na, nc, ns) in cases {
            let shape = XShape::new(na, nc, spectra_for(kern, ns)).unwrap();
            let batches = vec![
                random_batches(&shape, 1, 3 + na as u64),
                random_batches(&shape, 3, 1000 + na as u64),
            ];
            let mut present = vec![true; na];
            if na > 2 {
                present[na / 3] = false;
            }
            gpu_vs_cpu_correlator(shape, &batches, &present, kern);
            eprintln!("gpu == cpu ({kern:?}): n_ants={na} channels={nc} spectra={ns}");
        }
    }
}

#[test]
fn gpu_correlator_variants_bit_exact() {
    if !gpu_test_guard("gpu_correlator_variants_bit_exact") {
        return;
    }
    let mut kerns = vec![
        Kern::Mma(CorrVariant {
            direct: false,
            stages: 3,
            probe: 0,
        }),
        Kern::Mma(CorrVariant {
            direct: true,
            stages: 3,
            probe: 0,
        }),
        Kern::Mma(CorrVariant {
            direct: true,
            stages: 6,
            probe: 0,
        }),
    ];
    if kernels_under_test("gpu_correlator_variants_bit_exact").len() > 1 {
        kerns.push(Kern::Wg(WgmmaVariant::sparse(4, 2)));
        kerns.push(Kern::Wg(WgmmaVariant::sparse(2, 2)));
        for (nc, nr) in [(2, 2), (2, 3), (3, 2)] {
            kerns.push(Kern::Wg(WgmmaVariant::warp_specialized(nc, nr)));
            kerns.push(Kern::Wg(WgmmaVariant::warp_specialized_cluster(nc, nr)));
        }
        for (stage_times, ready_bufs, raw_bufs, reg_stages, swizzle) in [
            (32, 3, 0, 1, false),
            (64, 2, 0, 1, false),
            (64, 2, 4, 1, false),
            (32, 3, 8, 1, false),
            (64, 3, 2, 1, false),
            (64, 3, 0, 2, false),
            (32, 3, 0, 2, false),
            (64, 2, 0, 2, false),
            (64, 3, 0, 1, true),
            (64, 2, 4, 1, true),
            (64, 3, 0, 2, true),
        ] {
            kerns.push(Kern::Wg(WgmmaVariant {
                stage_times,
                ready_bufs,
                raw_bufs,
                reg_stages,
                swizzle,
                probe: 0,
                ws: false,
                cluster: false,
                sparse: false,
            }));
        }
    }
    for variant in kerns {
        for (na, nc, ns) in [(19, 3, 48), (130, 2, 272), (300, 2, 32)] {
            let shape = XShape::new(na, nc, spectra_for(variant, ns)).unwrap();
            let batches = vec![random_batches(&shape, 2, 7 + na as u64)];
            let mut present = vec![true; na];
            present[na / 2] = false;
            gpu_vs_cpu_correlator(shape, &batches, &present, variant);
        }
        eprintln!("gpu == cpu: {variant:?}");
    }
}

#[test]
fn gpu_correlator_saturation_and_long_integration() {
    if !gpu_test_guard("gpu_correlator_saturation_and_long_integration") {
        return;
    }
    for kern in kernels_under_test("gpu_correlator_saturation_and_long_integration") {
        let (shape, buf) = saturating_input();
        gpu_vs_cpu_correlator(shape, &[buf], &[true, true], kern);
        // long random integration: > 65536 samples per channel in one call (several time splits)
        let shape = XShape::new(37, 2, 1024).unwrap();
        let big = random_batches(&shape, 80, 5);
        gpu_vs_cpu_correlator(shape, &[big], &[true; 37], kern);
        eprintln!("gpu == cpu ({kern:?}): saturation, long integration");
    }
}

/// One wgmma m64n8k32 through the descriptor and accumulator layouts the wgmma correlator
/// assumes, against a CPU product (Hopper only).
#[test]
fn gpu_wgmma_probe_layout() {
    if !gpu_test_guard("gpu_wgmma_probe_layout") {
        return;
    }
    let g = GpuX::new(XShape::new(1, 1, 16).unwrap()).expect("GpuX::new");
    if !g.wgmma_supported() {
        eprintln!("gpu_wgmma_probe_layout: not compute capability 9.x, nothing to test");
        return;
    }
    let mut r = Rng(99);
    let a: Vec<i8> = (0..64 * 32).map(|_| r.sample()).collect();
    let b: Vec<i8> = (0..8 * 32).map(|_| r.sample()).collect();
    let want: Vec<i32> = (0..64 * 8)
        .map(|e| {
            let (m, n) = (e / 8, e % 8);
            (0..32)
                .map(|k| a[m * 32 + k] as i32 * b[n * 32 + k] as i32)
                .sum()
        })
        .collect();
    let got = g.wgmma_probe(&a, &b).unwrap();
    eprintln!(
        "wgmma probe: {} of 512 match",
        got.iter().zip(&want).filter(|(x, y)| x == y).count()
    );
    if got != want {
        for m in 0..64 {
            eprintln!(
                "row {m:2}: got {:?} want {:?}",
                &got[m * 8..m * 8 + 8],
                &want[m * 8..m * 8 + 8]
            );
        }
    }
    assert_eq!(got, want);
}

#[test]
fn gpu_correlator_4bit_bit_exact() {
    if !gpu_test_guard("gpu_correlator_4bit_bit_exact") {
        return;
    }
    for (na, nc, ns) in [
        (1, 3, 32),
        (3, 4, 48),
        (19, 5, 32),
        (33, 3, 48),
        (64, 2, 64),
        (80, 4, 32),
        (130, 2, 272),
        (576, 1, 32),
    ] {
        let shape = shape4(na, nc, ns);
        let batches = vec![
            random_batches(&shape, 1, 3 + na as u64),
            random_batches(&shape, 3, 1000 + na as u64),
        ];
        let mut present = vec![true; na];
        if na > 2 {
            present[na / 3] = false;
        }
        for stages in [4, 3, 6] {
            let v = CorrVariant {
                direct: true,
                stages,
                probe: 0,
            };
            gpu_vs_cpu_correlator(shape, &batches, &present, Kern::Mma(v));
        }
        eprintln!("gpu == cpu (4-bit): n_ants={na} channels={nc} spectra={ns}");
    }
    // the ready-buffer variant and the wgmma kernel have no 4-bit path: a clear error
    let mut gpu = GpuX::new(shape4(4, 1, 16)).unwrap();
    if gpu.wgmma_supported() {
        assert!(gpu.set_wgmma_variant(WgmmaVariant::default()).is_err());
    }
    assert!(gpu
        .set_correlator_variant(CorrVariant {
            direct: false,
            stages: 3,
            probe: 0,
        })
        .is_err());
}

/// Several batches in one call copied straight from registered host memory (one DMA and one
/// launch per call, as the engine hands a chunk's run of batches) equal the same batches one
/// call each from pageable memory and the CPU, bit for bit; the upload counters tell the two
/// paths apart, and once fenced the host memory may change without touching the result.
#[test]
fn gpu_multi_batch_from_registered_memory_equals_per_batch() {
    if !gpu_test_guard("gpu_multi_batch_from_registered_memory_equals_per_batch") {
        return;
    }
    use crate::compute::xengine::Uploads;
    use crate::mem::{ChunkMem, MemPolicy};
    for (na, nc, ns) in [(1, 8, 256), (4, 4, 256), (5, 3, 32)] {
        let shape = XShape::new(na, nc, ns).unwrap();
        let (n, bb) = (7, shape.batch_bytes());
        let input = random_batches(&shape, n, 77 + na as u64);
        let mut one = GpuX::new(shape).expect("GpuX::new");
        for b in 0..n {
            one.accumulate(&input[b * bb..(b + 1) * bb]).unwrap();
        }
        one.fence_input().unwrap();
        assert_eq!(
            one.uploads(),
            Uploads {
                direct: 0,
                staged: n as u64
            }
        );
        let mut many = GpuX::new(shape).expect("GpuX::new");
        let policy = MemPolicy {
            hugepages: false,
            cuda: Some(many.context().clone()),
            vkgdr: None,
        };
        // the batches 64 bytes into a registered range, as a run of batches inside a chunk
        let mut mem = ChunkMem::alloc(input.len() + 128, &policy).unwrap();
        assert!(mem.cuda_pinned(), "{:?}", mem.pin_note);
        for (d, &s) in mem[64..].iter_mut().zip(&input) {
            *d = s as u8;
        }
        {
            // SAFETY: `input.len()` bytes from offset 64 of `mem`, read as int8 while `mem`
            // is only read.
            let reg = unsafe {
                std::slice::from_raw_parts(mem.as_ptr().add(64) as *const i8, input.len())
            };
            many.accumulate(&reg[..3 * bb]).unwrap();
            many.accumulate(&reg[3 * bb..]).unwrap();
        }
        assert_eq!(
            many.uploads(),
            Uploads {
                direct: 2,
                staged: 0
            }
        );
        many.fence_input().unwrap();
        mem.fill(0x55);
        let mut cpu = CpuX::new(shape);
        cpu.accumulate(&input).unwrap();
        let present: Vec<bool> = (0..na).map(|a| na < 3 || a != 2).collect();
        let mut want = vec![0i32; shape.output_len()];
        let s_cpu = cpu.dump(&present, &mut want).unwrap();
        for (what, g) in [
            ("per batch", &mut one),
            ("multi-batch, registered", &mut many),
        ] {
            let mut got = vec![0x5a5a5a5ai32; shape.output_len()];
            let s = g.dump(&present, &mut got).unwrap();
            assert!(got == want, "{what} {shape:?}: dump differs from the CPU");
            assert_eq!(s, s_cpu, "{what} {shape:?}");
        }
        eprintln!("multi-batch from registered memory == per batch: {shape:?}");
    }
}
