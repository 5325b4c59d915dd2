//! The GPU beamformers (mma.sync and, on Hopper, wgmma) against the CPU: within 1 LSB, the
//! same statistics, per batch and per chunk of batches, 8- and 4-bit input.

use super::{beam_set, random_batches, shape4};
use crate::compute::xengine::{BeamKernel, BeamTuning, CpuX, GpuX, XBackend, XShape};
use crate::gpu::gpu_test_guard;

fn gpu_vs_cpu_beams(
    na: usize,
    nc: usize,
    ns: usize,
    nb: usize,
    batch_beams: usize,
    expect_saturation: bool,
) {
    let shape = XShape::new(na, nc, ns).unwrap();
    let batch = random_batches(&shape, 1, 9 + na as u64);
    let bs = beam_set(&shape, nb, 123 + nb as u64);
    let mut present = vec![true; na];
    present[0] = false;
    let mut cpu = CpuX::new(shape);
    let mut gpu = GpuX::new(shape).unwrap();
    gpu.set_beam_batch(batch_beams).unwrap();
    let mut want = vec![0i8; shape.beam_output_len(nb)];
    let sc = cpu.beamform(&batch, &present, &bs, 17, &mut want).unwrap();
    if expect_saturation {
        assert!(
            sc.saturated.iter().any(|&s| s > 0),
            "test should saturate some samples"
        );
    }
    // the default kernel (wgmma on Hopper where it applies) and the mma.sync kernel
    for kernel in [BeamKernel::Auto, BeamKernel::Mma] {
        gpu.set_beam_tuning(BeamTuning {
            kernel,
            ..Default::default()
        })
        .unwrap();
        let mut got = vec![0x55i8; shape.beam_output_len(nb)];
        let sg = gpu.beamform(&batch, &present, &bs, 17, &mut got).unwrap();
        let off = one_lsb_diffs(&got, &want, &format!("beams {na}x{nb} {kernel:?}"));
        assert!(off * 100 < got.len(), "too many 1-LSB differences: {off}");
        assert_eq!(sg.beam_ants, sc.beam_ants);
        for b in 0..nb {
            let d = sg.saturated[b].abs_diff(sc.saturated[b]);
            assert!(
                d * 100 <= (nc * ns) as u64,
                "beam {b} {kernel:?}: {} vs {}",
                sg.saturated[b],
                sc.saturated[b]
            );
        }
    }
}

/// Asserts that every GPU beam value is within 1 of the CPU's (`what` names the case) and
/// returns how many differ at all.
fn one_lsb_diffs(got: &[i8], want: &[i8], what: &str) -> usize {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let mut off = 0;
    for (i, (&g, &c)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as i32 - c as i32).abs() <= 1,
            "{what}: i={i}: gpu {g} cpu {c}"
        );
        off += usize::from(g != c);
    }
    off
}

#[test]
fn gpu_beamformer_within_one_lsb() {
    if !gpu_test_guard("gpu_beamformer_within_one_lsb") {
        return;
    }
    for batch in [16, 32] {
        gpu_vs_cpu_beams(80, 8, 48, 64, batch, true);
        gpu_vs_cpu_beams(80, 4, 512, 65, batch, true);
        gpu_vs_cpu_beams(3, 2, 16, 1, batch, false);
        gpu_vs_cpu_beams(33, 3, 160, 40, batch, true);
        gpu_vs_cpu_beams(144, 3, 64, 20, batch, true); // several stages per item
        gpu_vs_cpu_beams(96, 2, 64, 24, batch, true); // a 64-byte last weight block
        gpu_vs_cpu_beams(20, 2, 32, 8, batch, false); // the 64-byte block alone
        eprintln!("gpu beams within 1 LSB of cpu: batch {batch}");
    }
}

#[test]
fn gpu_beamformer_4bit_within_one_lsb() {
    if !gpu_test_guard("gpu_beamformer_4bit_within_one_lsb") {
        return;
    }
    for (na, nc, ns, nb) in [(80, 4, 256, 64), (3, 2, 16, 1), (33, 3, 160, 17)] {
        let shape = shape4(na, nc, ns);
        let batch = random_batches(&shape, 1, 9 + na as u64);
        let mut bs = beam_set(&shape, nb, 123 + nb as u64);
        for b in &mut bs.beams {
            b.quant_gain *= 8.0; // 4-bit input is ~16x smaller
        }
        let mut present = vec![true; na];
        present[0] = na == 1;
        let mut cpu = CpuX::new(shape);
        let mut gpu = GpuX::new(shape).unwrap();
        let mut want = vec![0i8; shape.beam_output_len(nb)];
        let mut got = vec![0x55i8; shape.beam_output_len(nb)];
        let sc = cpu.beamform(&batch, &present, &bs, 5, &mut want).unwrap();
        let sg = gpu.beamform(&batch, &present, &bs, 5, &mut got).unwrap();
        let off = one_lsb_diffs(&got, &want, &format!("4-bit beams {na}x{nb}"));
        assert!(off * 100 < got.len(), "too many 1-LSB differences: {off}");
        assert!(want.iter().filter(|&&v| v != 0).count() * 2 > want.len());
        assert_eq!(sg.beam_ants, sc.beam_ants);
        eprintln!("gpu beams within 1 LSB of cpu (4-bit): {na} antennas, {nb} beams");
    }
}

/// One launch over a chunk of batches equals the CPU per batch (within 1 LSB): antenna
/// presence differing per batch (including a batch with none), dither keyed per batch, beams of
/// uneven pol counts sharing tiles, per-batch `beam_ants` and saturation; 8- and 4-bit input.
#[test]
fn gpu_beamformer_chunk_within_one_lsb() {
    if !gpu_test_guard("gpu_beamformer_chunk_within_one_lsb") {
        return;
    }
    for (bits, na, nc, ns, nb, n) in [
        (8, 80, 3, 64, 19, 5),
        (8, 33, 2, 48, 64, 3),
        (4, 40, 2, 96, 24, 4),
        (8, 5, 1, 16, 3, 130), // more batches than the wgmma kernel's shared tables hold
        (8, 80, 64, 256, 64, 4), // several items per block: the wgmma kernel steals work
    ] {
        let shape = XShape::new(na, nc, ns)
            .unwrap()
            .with_sample_bits(bits)
            .unwrap();
        let chunk = random_batches(&shape, n, 77 + na as u64);
        let mut bs = beam_set(&shape, nb, 5 + nb as u64);
        for (b, beam) in bs.beams.iter_mut().enumerate() {
            // 1/3 of the beams on pol 0: pol groups that do not fill whole tiles
            beam.pol = usize::from(b % 3 != 0);
            if bits == 4 {
                beam.quant_gain *= 8.0;
            }
        }
        let mut present = vec![true; n * na];
        present[0] = false; // batch 0: antenna 0 missing
        present[na + na / 2] = false; // batch 1: another one
        present[2 * na..3 * na].iter_mut().for_each(|p| *p = false); // batch 2: none
        let mut cpu = CpuX::new(shape);
        let mut gpu = GpuX::new(shape).unwrap();
        let per = shape.beam_output_len(nb);
        let mut got = vec![0x55i8; n * per];
        let first = 1000;
        // the default kernel, the wgmma kernel where it applies (Hopper, 8-bit), and every warp
        // layout of the mma.sync kernel: one or two m16 fragments per warp in blocks of 4, 8
        // or 16 warps (the 4-bit case without the register cap of two blocks per SM); the wgmma
        // kernel with work stealing where it applies and with static item ranges
        let mut runs = vec![(0, 0, BeamKernel::Auto, None, None, 0)];
        if gpu.wgmma_supported() && bits == 8 {
            // stealing or not, with the planned parameter cache and without, with the planned
            // channel interleave and with one of 4 or 16 where the channels allow (every
            // channel once: the items' channels permuted)
            for (steal, pcache, cperm) in [
                (true, None, 0),
                (false, None, 0),
                (true, Some(false), 4),
                (false, Some(false), 16),
                (false, None, 4),
            ] {
                runs.push((0, 0, BeamKernel::Wgmma, Some(steal), pcache, cperm));
            }
        } else {
            let t = BeamTuning {
                kernel: BeamKernel::Wgmma,
                ..Default::default()
            };
            gpu.set_beam_tuning(t).unwrap();
            let e = gpu.beamform_chunk(&chunk, &present, &bs, first, &mut got);
            assert!(e.is_err(), "the wgmma beamformer where it does not apply");
        }
        for (mw, warps) in [(0, 0), (1, 4), (2, 4), (1, 8), (2, 8), (1, 16)] {
            runs.push((mw, warps, BeamKernel::Mma, None, None, 0));
        }
        for (mw, warps, kernel, wg_steal, wg_pcache, wg_cperm) in runs {
            gpu.set_beam_tuning(BeamTuning {
                min_blocks: if bits == 4 { 1 } else { 0 },
                mw,
                warps,
                kernel,
                wg_steal,
                wg_pcache,
                wg_cperm,
                ..Default::default()
            })
            .unwrap();
            got.fill(0x55);
            let sg = gpu
                .beamform_chunk(&chunk, &present, &bs, first, &mut got)
                .unwrap();
            assert_eq!(sg.len(), n);
            let bb = shape.batch_bytes();
            let mut off = 0;
            for k in 0..n {
                let mut want = vec![0i8; per];
                let p = &present[k * na..(k + 1) * na];
                let sc = cpu
                    .beamform(
                        &chunk[k * bb..(k + 1) * bb],
                        p,
                        &bs,
                        first + k as u64,
                        &mut want,
                    )
                    .unwrap();
                let what = format!(
                    "{bits}-bit chunk {na}x{nb}, batch {k}, {kernel:?} mw {mw} warps {warps} steal {wg_steal:?} pcache {wg_pcache:?} cperm {wg_cperm}"
                );
                off += one_lsb_diffs(&got[k * per..(k + 1) * per], &want, &what);
                if k == 2 {
                    // no antenna: only dither, which rounds to 0
                    assert!(want.iter().all(|&v| v == 0));
                } else {
                    assert!(want.iter().filter(|&&v| v != 0).count() * 2 > want.len());
                }
                assert_eq!(sg[k].beam_ants, sc.beam_ants, "batch {k}");
                for b in 0..nb {
                    let d = sg[k].saturated[b].abs_diff(sc.saturated[b]);
                    assert!(d * 100 <= (nc * ns) as u64, "batch {k} beam {b}");
                }
            }
            assert!(off * 100 < got.len(), "too many 1-LSB differences: {off}");
        }
        // wrong sizes are errors
        assert!(gpu
            .beamform_chunk(&chunk, &present[1..], &bs, first, &mut got)
            .is_err());
        assert!(gpu
            .beamform_chunk(&chunk, &present, &bs, first, &mut got[1..])
            .is_err());
        assert!(gpu
            .beamform_chunk(&chunk[1..], &present, &bs, first, &mut got)
            .is_err());
        eprintln!(
            "gpu chunk beams within 1 LSB of cpu: {bits}-bit {na} antennas {nb} beams {n} batches"
        );
    }
}
