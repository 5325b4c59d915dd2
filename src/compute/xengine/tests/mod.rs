//! X-engine compute tests through the public API: the CPU correlator against the ICD
//! reference and the CPU beamformer against the f64 one ([`super::reference`]), every kernel
//! compiled with NVRTC for sm_80 and sm_90 (no GPU needed; required with
//! `GPUCBF_REQUIRE_NVRTC=1`), and the GPU against the CPU (bit-exact correlator, beamformer
//! within 1 LSB; skipped without a GPU, required with `GPUCBF_REQUIRE_GPU=1`). This module
//! holds the shared inputs.

mod cpu;
mod gpu_beamformer;
mod gpu_correlator;
mod nvrtc;

use super::{Beam, BeamSet, XShape};

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
