//! X-engine compute core: CPU correlator against a naive reference, CPU beamformer against an
//! f64 reference, GPU == CPU (bit-exact correlator, ≤ 1 LSB beamformer), NVRTC compilation.

use gpucbf::compute::xengine::{
    baseline_index, beam_dither, output_offset, unpack4, Beam, BeamKernel, BeamSet, BeamTuning,
    BeamWgPlan, CorrKernel, CorrVariant, CpuX, GpuX, WgmmaVariant, XBackend, XShape, MISSING,
};
use gpucbf::gpu::{compile_ptx, gpu_test_guard, nvrtc_available};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn sample(&mut self) -> i8 {
        (((self.next() >> 33) % 255) as i32 - 127) as i8
    }
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn random_batches(shape: &XShape, n: usize, seed: u64) -> Vec<i8> {
    let mut r = Rng(seed | 1);
    if shape.sample_bits == 4 {
        // one byte per complex value, re in the high nibble, both in [-7, 7]
        return (0..n * shape.batch_bytes())
            .map(|_| {
                let re = ((r.next() >> 33) % 15) as i8 - 7;
                let im = ((r.next() >> 33) % 15) as i8 - 7;
                (((re as u8 & 0xf) << 4) | (im as u8 & 0xf)) as i8
            })
            .collect();
    }
    (0..n * shape.batch_bytes()).map(|_| r.sample()).collect()
}

fn shape4(na: usize, nc: usize, ns: usize) -> XShape {
    XShape::new(na, nc, ns)
        .unwrap()
        .with_sample_bits(4)
        .unwrap()
}

/// Naive reference written straight from the ICD: int64 sums, then saturation / MISSING.
fn naive_dump(shape: &XShape, batches: &[&[i8]], present: &[bool]) -> (Vec<i32>, u64) {
    let (na, nc, ns) = (shape.n_ants, shape.n_channels, shape.spectra_per_batch);
    let nbl = na * (na + 1) / 2;
    let mut out = vec![0i32; nc * nbl * 8];
    let mut sat = 0;
    let x = |buf: &[i8], a: usize, c: usize, s: usize, p: usize| -> (i64, i64) {
        let o = (((a * nc) + c) * ns + s) * 4 + 2 * p;
        (buf[o] as i64, buf[o + 1] as i64)
    };
    for c in 0..nc {
        for a2 in 0..na {
            for a1 in 0..=a2 {
                let bl = a2 * (a2 + 1) / 2 + a1;
                for p2 in 0..2 {
                    for p1 in 0..2 {
                        let (mut re, mut im) = (0i64, 0i64);
                        for buf in batches {
                            for chunk in buf.chunks(shape.batch_bytes()) {
                                for s in 0..ns {
                                    // (ar + j ai)(br - j bi)
                                    let (ar, ai) = x(chunk, a1, c, s, p1);
                                    let (br, bi) = x(chunk, a2, c, s, p2);
                                    re += ar * br + ai * bi;
                                    im += ai * br - ar * bi;
                                }
                            }
                        }
                        let o = ((c * nbl + bl) * 4 + p1 + 2 * p2) * 2;
                        if !(present[a1] && present[a2]) {
                            out[o] = i32::MIN;
                            out[o + 1] = 1;
                            continue;
                        }
                        let lim = i32::MAX as i64;
                        if re.abs() > lim || im.abs() > lim {
                            sat += 1;
                        }
                        out[o] = re.clamp(-lim, lim) as i32;
                        out[o + 1] = im.clamp(-lim, lim) as i32;
                    }
                }
            }
        }
    }
    (out, sat)
}

#[test]
fn cpu_correlator_matches_naive_reference() {
    for (na, nc, ns) in [(1, 2, 16), (3, 3, 32), (5, 2, 48), (19, 2, 16), (7, 1, 32)] {
        let shape = XShape::new(na, nc, ns).unwrap();
        let a = random_batches(&shape, 2, 11 + na as u64);
        let b = random_batches(&shape, 1, 99 + na as u64);
        let mut present = vec![true; na];
        if na > 1 {
            present[na / 2] = false;
        }
        let mut cpu = CpuX::new(shape);
        cpu.accumulate(&a).unwrap();
        cpu.accumulate(&b).unwrap();
        let mut out = vec![7i32; shape.output_len()];
        let sat = cpu.dump(&present, &mut out).unwrap();
        let (want, want_sat) = naive_dump(&shape, &[&a, &b], &present);
        assert_eq!(out, want, "n_ants={na}");
        assert_eq!(sat, want_sat);
        if na > 1 {
            let bl = baseline_index(0, na / 2);
            let o = output_offset(&shape, 0, bl, 1, 0);
            assert_eq!([out[o], out[o + 1]], MISSING);
        }
        // the accumulator was reset by the dump
        cpu.accumulate(&b).unwrap();
        cpu.dump(&present, &mut out).unwrap();
        assert_eq!(out, naive_dump(&shape, &[&b], &present).0);
    }
}

#[test]
fn unpack4_matches_fgpu_packing() {
    // fgpu's 4-bit packing test: (3, -2) -> 0x3e, (-7, 7) -> 0x97; -8 sign-extends
    assert_eq!(
        unpack4(&[0x3e_u8 as i8, 0x97_u8 as i8, 0x88_u8 as i8, 0x70]),
        vec![3, -2, -7, 7, -8, -8, 7, 0]
    );
    assert!(XShape::new(4, 2, 16).unwrap().with_sample_bits(5).is_err());
    assert_eq!(shape4(4, 2, 16).batch_bytes(), 4 * 2 * 16 * 2);
}

#[test]
fn cpu_4bit_equals_cpu_8bit_on_unpacked_input() {
    for (na, nc, ns) in [(1, 2, 16), (5, 3, 32), (19, 2, 48)] {
        let s4 = shape4(na, nc, ns);
        let s8 = s4.unpacked();
        let packed = random_batches(&s4, 2, 31 + na as u64);
        let unpacked = unpack4(&packed);
        let mut present = vec![true; na];
        present[na / 2] = na == 1;
        let (mut c4, mut c8) = (CpuX::new(s4), CpuX::new(s8));
        c4.accumulate(&packed).unwrap();
        c8.accumulate(&unpacked).unwrap();
        let mut o4 = vec![0i32; s4.output_len()];
        let mut o8 = vec![1i32; s8.output_len()];
        c4.dump(&present, &mut o4).unwrap();
        c8.dump(&present, &mut o8).unwrap();
        assert_eq!(o4, o8, "n_ants={na}");
        assert_eq!(o8, naive_dump(&s8, &[&unpacked], &present).0);
        assert!(c4.accumulate(&packed[1..]).is_err());
        let bs = beam_set(&s4, 3, 5);
        let one4 = &packed[..s4.batch_bytes()];
        let one8 = &unpacked[..s8.batch_bytes()];
        let mut b4 = vec![0i8; s4.beam_output_len(3)];
        let mut b8 = vec![1i8; s8.beam_output_len(3)];
        let st4 = c4.beamform(one4, &present, &bs, 3, &mut b4).unwrap();
        let st8 = c8.beamform(one8, &present, &bs, 3, &mut b8).unwrap();
        assert_eq!(b4, b8);
        assert_eq!(st4, st8);
        assert!(c4.beamform(one8, &present, &bs, 3, &mut b4).is_err());
    }
}

#[test]
fn cpu_correlator_known_values() {
    // one antenna, constant (3 + 4j) on pol 0 and (1 - 2j) on pol 1, 32 spectra
    let shape = XShape::new(1, 1, 32).unwrap();
    let mut buf = Vec::new();
    for _ in 0..32 {
        buf.extend_from_slice(&[3i8, 4, 1, -2]);
    }
    let mut cpu = CpuX::new(shape);
    cpu.accumulate(&buf).unwrap();
    let mut out = vec![0; 8];
    cpu.dump(&[true], &mut out).unwrap();
    // aa = |3+4j|^2 = 25; ba = x1 conj(x0) = (1-2j)(3-4j) = -5-10j;
    // ab = x0 conj(x1) = (3+4j)(1+2j) = -5+10j; bb = 5
    assert_eq!(out, vec![800, 0, -160, -320, -160, 320, 160, 0]);
}

/// Constant large inputs over 69 632 samples so that some products pass ±(2^31 − 1).
fn saturating_input() -> (XShape, Vec<i8>) {
    let shape = XShape::new(2, 1, 4096).unwrap();
    let mut buf = Vec::new();
    for _ in 0..17 {
        for a in 0..2 {
            for _ in 0..4096 {
                if a == 0 {
                    buf.extend_from_slice(&[127i8, 127, -127, -127]);
                } else {
                    buf.extend_from_slice(&[127i8, -127, 5, 3]);
                }
            }
        }
    }
    (shape, buf)
}

#[test]
fn cpu_correlator_saturates() {
    let (shape, buf) = saturating_input();
    let mut cpu = CpuX::new(shape);
    cpu.accumulate(&buf).unwrap();
    let mut out = vec![0; shape.output_len()];
    let sat = cpu.dump(&[true, true], &mut out).unwrap();
    let (want, want_sat) = naive_dump(&shape, &[&buf], &[true, true]);
    assert_eq!(out, want);
    assert_eq!(sat, want_sat);
    assert!(sat > 0 && (sat as usize) < shape.output_len() / 2);
    let o = output_offset(&shape, 0, baseline_index(0, 0), 0, 0);
    assert_eq!(out[o], i32::MAX);
    let o = output_offset(&shape, 0, baseline_index(0, 0), 0, 1);
    assert_eq!(out[o], -i32::MAX);
}

#[test]
fn bad_input_is_an_error() {
    assert!(XShape::new(0, 1, 16).is_err());
    assert!(XShape::new(1025, 1, 16).is_err());
    assert!(XShape::new(4, 1, 24).is_err());
    let shape = XShape::new(4, 2, 16).unwrap();
    let mut cpu = CpuX::new(shape);
    assert!(cpu.accumulate(&[0i8; 3]).is_err());
    assert!(cpu.accumulate(&[]).is_err());
    let mut out = vec![0; shape.output_len()];
    assert!(cpu.dump(&[true; 3], &mut out).is_err());
    assert!(cpu.dump(&[true; 4], &mut out[1..]).is_err());
    let batch = vec![0i8; shape.batch_bytes()];
    let mut beams = beam_set(&shape, 2, 5);
    let mut bout = vec![0i8; shape.beam_output_len(2)];
    assert!(cpu
        .beamform(&batch, &[true; 4], &beams, 0, &mut bout)
        .is_ok());
    assert!(cpu
        .beamform(&batch[1..], &[true; 4], &beams, 0, &mut bout)
        .is_err());
    assert!(cpu
        .beamform(&batch, &[true; 4], &beams, 0, &mut bout[2..])
        .is_err());
    beams.beams[1].weights[2] = f64::NAN;
    assert!(cpu
        .beamform(&batch, &[true; 4], &beams, 0, &mut bout)
        .is_err());
    let mut beams = beam_set(&shape, 2, 5);
    beams.beams[0].pol = 2;
    assert!(cpu
        .beamform(&batch, &[true; 4], &beams, 0, &mut bout)
        .is_err());
    let mut beams = beam_set(&shape, 2, 5);
    beams.beams[0].delays.pop();
    assert!(cpu
        .beamform(&batch, &[true; 4], &beams, 0, &mut bout)
        .is_err());
}

fn beam_set(shape: &XShape, n_beams: usize, seed: u64) -> BeamSet {
    let mut r = Rng(seed | 1);
    let na = shape.n_ants;
    BeamSet {
        beams: (0..n_beams)
            .map(|b| Beam {
                pol: b % 2,
                quant_gain: 0.3 + 1.5 * r.uniform(),
                weights: (0..na).map(|_| r.uniform() * 1.5 - 0.25).collect(),
                delays: (0..na).map(|_| (r.uniform() - 0.5) * 2e-8).collect(),
                phases: (0..na).map(|_| (r.uniform() - 0.5) * 7.0).collect(),
            })
            .collect(),
        channel_offset: 3 * shape.n_channels,
        n_channels_total: 8 * shape.n_channels,
        bandwidth: 856e6,
        dither: true,
        seed: seed ^ 0xabcdef,
    }
}

/// f64 reference straight from dsp.md §10; returns (pre-quantisation value, quantised).
fn beam_reference(
    shape: &XShape,
    batch: &[i8],
    present: &[bool],
    bs: &BeamSet,
    batch_index: u64,
) -> Vec<(f64, i8)> {
    let (na, nc, ns) = (shape.n_ants, shape.n_channels, shape.spectra_per_batch);
    let nb = bs.beams.len();
    let df = bs.bandwidth / bs.n_channels_total as f64;
    let mut out = Vec::new();
    for (b, beam) in bs.beams.iter().enumerate() {
        for c in 0..nc {
            let cabs = (bs.channel_offset + c) as f64;
            for s in 0..ns {
                let (mut re, mut im) = (0f64, 0f64);
                for a in (0..na).filter(|&a| present[a]) {
                    let ph = beam.phases[a]
                        - 2.0
                            * std::f64::consts::PI
                            * df
                            * (cabs - bs.n_channels_total as f64 / 2.0)
                            * beam.delays[a];
                    let g = beam.quant_gain * beam.weights[a];
                    let (wr, wi) = (g * ph.cos(), g * ph.sin());
                    let o = ((a * nc + c) * ns + s) * 4 + 2 * beam.pol;
                    let (xr, xi) = (batch[o] as f64, batch[o + 1] as f64);
                    re += wr * xr - wi * xi;
                    im += wr * xi + wi * xr;
                }
                if bs.dither {
                    let (dr, di) = beam_dither(bs.seed, batch_index, c, s, b, ns, nb);
                    re += dr as f64;
                    im += di as f64;
                }
                for v in [re, im] {
                    let q = v.clamp(-127.0, 127.0).round_ties_even() as i8;
                    out.push((v, q));
                }
            }
        }
    }
    out
}

#[test]
fn cpu_beamformer_matches_f64_reference() {
    for (na, nc, ns, nb, dither) in [
        (7, 4, 32, 5, true),
        (3, 2, 16, 1, false),
        (20, 3, 48, 9, true),
    ] {
        let shape = XShape::new(na, nc, ns).unwrap();
        let batch = random_batches(&shape, 1, 5 + na as u64);
        let mut bs = beam_set(&shape, nb, 77 + na as u64);
        bs.dither = dither;
        for b in &mut bs.beams {
            b.quant_gain *= 0.25;
        }
        let mut present = vec![true; na];
        present[na - 1] = false;
        let mut cpu = CpuX::new(shape);
        let mut out = vec![0i8; shape.beam_output_len(nb)];
        let st = cpu.beamform(&batch, &present, &bs, 42, &mut out).unwrap();
        assert_eq!(st.beam_ants, na - 1);
        let want = beam_reference(&shape, &batch, &present, &bs, 42);
        let mut clamped = 0;
        for (i, (&got, &(v, q))) in out.iter().zip(&want).enumerate() {
            assert!(
                (got as i32 - q as i32).abs() <= 1,
                "n_ants={na} i={i}: {got} vs {q} ({v})"
            );
            clamped += usize::from(v.abs() > 127.0);
        }
        // saturation count lies between the counts with ±0.01 margins (complex samples)
        let per_beam = nc * ns;
        for b in 0..nb {
            let w = &want[b * per_beam * 2..][..per_beam * 2];
            let lo = w
                .chunks(2)
                .filter(|p| p[0].0.abs() > 127.01 || p[1].0.abs() > 127.01)
                .count();
            let hi = w
                .chunks(2)
                .filter(|p| p[0].0.abs() > 126.99 || p[1].0.abs() > 126.99)
                .count();
            let s = st.saturated[b] as usize;
            assert!(lo <= s && s <= hi, "beam {b}: {lo} <= {s} <= {hi}");
        }
        if na == 20 {
            // like katgpucbf's test: between 10 % and 90 % of the outputs clamp
            assert!(
                clamped * 10 > out.len() && clamped * 10 < out.len() * 9,
                "want 10-90 % clamped: {clamped} of {}",
                out.len()
            );
        }
    }
}

#[test]
fn nvrtc_compiles_all_kernels() {
    if !nvrtc_available() {
        eprintln!("SKIPPED nvrtc_compiles_all_kernels: NVRTC not available");
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
            let d = gpucbf::compute::xengine::correlate_defines(&shape);
            let ptx = compile_ptx(
                "correlate.cu",
                gpucbf::compute::xengine::CORRELATE_SRC,
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
                        gpucbf::compute::xengine::BeamPlan::new(&shape, tiles, 227 << 10).unwrap();
                    let d = gpucbf::compute::xengine::beamform_defines(&shape, nb, &plan);
                    let ptx = compile_ptx(
                        "beamform.cu",
                        gpucbf::compute::xengine::BEAMFORM_SRC,
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
                        gpucbf::compute::xengine::BeamPlan::with(&shape, 2, ts, nr).unwrap();
                    plan.probe = probe;
                    plan.min_blocks = if ts == 128 { 1 } else { 2 };
                    let d = gpucbf::compute::xengine::beamform_defines(&shape, 16, &plan);
                    compile_ptx(
                        "beamform.cu",
                        gpucbf::compute::xengine::BEAMFORM_SRC,
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
                    let plan = gpucbf::compute::xengine::BeamPlan::with_layout(
                        &shape, btb, ts, 3, mw, warps,
                    )
                    .unwrap();
                    let d = gpucbf::compute::xengine::beamform_defines(&shape, 64, &plan);
                    compile_ptx(
                        "beamform.cu",
                        gpucbf::compute::xengine::BEAMFORM_SRC,
                        &d,
                        arch,
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                }
                assert!(
                    gpucbf::compute::xengine::BeamPlan::with_layout(&shape, 4, 64, 3, 1, 8)
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
                let d = gpucbf::compute::xengine::correlate_wgmma_defines(&shape, v);
                let ptx = compile_ptx(
                    "correlate_wgmma.cu",
                    gpucbf::compute::xengine::CORRELATE_WGMMA_SRC,
                    &d,
                    gpucbf::compute::xengine::WGMMA_ARCH,
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
                        gpucbf::compute::xengine::BEAMFORM_WGMMA_SRC,
                        &d,
                        gpucbf::compute::xengine::WGMMA_ARCH,
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
        // The NUFFT kernels (src/nufft/tests_gpu.rs compiles more variants).
        for (dim, ns, f64) in [(2, 6, false), (3, 10, true)] {
            use gpucbf::compute::nufft::gpu::{nufft_defines, SpreadConfig, NUFFT_SRC};
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
        if std::env::var(gpucbf::compute::xengine::CORRELATOR_ENV).is_err() {
            // the measured fastest kernel (src/xengine/gpu/wgmma.rs); this probe shape has 16
            // spectra per batch, which the sparse kernel cannot tile, so it gets ws there
            let want = if gpucbf::compute::xengine::AUTO_WS_ON_SM90
                || gpucbf::compute::xengine::AUTO_SPARSE_ON_SM90
            {
                CorrKernel::Wgmma
            } else {
                CorrKernel::MmaSync
            };
            assert_eq!(g.correlator_kernel(), want, "default kernel");
            if gpucbf::compute::xengine::AUTO_WS_ON_SM90 {
                assert_eq!(
                    g.wgmma_variant(),
                    Some(WgmmaVariant::warp_specialized(2, 4)),
                    "default wgmma variant for 16 spectra per batch"
                );
            }
            if gpucbf::compute::xengine::AUTO_SPARSE_ON_SM90 {
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
