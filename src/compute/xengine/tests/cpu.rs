//! The CPU back end: correlator against the ICD reference, known values, saturation, 4-bit
//! input, bad input; beamformer against the f64 reference.

use super::{beam_set, random_batches, saturating_input, shape4};
use crate::compute::xengine::reference::{beam_reference, naive_dump};
use crate::compute::xengine::{
    baseline_index, output_offset, unpack4, CpuX, XBackend, XShape, MISSING,
};

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

/// Several batches in one accumulate call (as the engine hands a chunk's run of batches)
/// equal the same batches one call each, for 8- and 4-bit input; a partial batch is refused.
#[test]
fn cpu_multi_batch_accumulate_equals_per_batch() {
    for shape in [XShape::new(3, 5, 32).unwrap(), shape4(4, 3, 16)] {
        let n = 5;
        let input = random_batches(&shape, n, 41);
        let bb = shape.batch_bytes();
        let mut one = CpuX::new(shape);
        for b in 0..n {
            one.accumulate(&input[b * bb..(b + 1) * bb]).unwrap();
        }
        let mut many = CpuX::new(shape);
        many.accumulate(&input[..2 * bb]).unwrap();
        many.accumulate(&input[2 * bb..]).unwrap();
        assert!(one.accumulator().iter().any(|&v| v != 0));
        assert_eq!(one.accumulator(), many.accumulator(), "{shape:?}");
        let present: Vec<bool> = (0..shape.n_ants).map(|a| a != 1).collect();
        let (mut a, mut b) = (vec![0; shape.output_len()], vec![1; shape.output_len()]);
        assert_eq!(
            one.dump(&present, &mut a).unwrap(),
            many.dump(&present, &mut b).unwrap()
        );
        assert_eq!(a, b);
        assert!(many.accumulate(&input[..bb + 1]).is_err());
    }
}
