//! Narrowband (DDC + complex PFB) tests: tone placement, leakage and alias rejection,
//! delay phase, the float64 reference, and error handling.

use crate::compute::fengine::cpu::ddc::ddc_weights;
use crate::compute::fengine::design::delay;
use crate::compute::fengine::reference::*;
use crate::compute::fengine::*;
use num_complex::{Complex32, Complex64};
use rand::RngExt;
use std::f64::consts::PI;

const BITS: u32 = 10;
/// Integral rates so that the mixer is exact: channel width = ADC / (2·C·D).
const ADC: f64 = 1_048_576.0;

fn nb_cfg(channels: usize, decimation: usize, centre: f64, mode: NarrowbandMode) -> FConfig {
    FConfig {
        dither: Dither::None,
        spectra_per_heap: 4,
        narrowband: Some(Narrowband {
            decimation,
            centre_frequency: centre,
            adc_rate: ADC,
            ddc_taps: None,
            weight_pass: 0.005,
            mode,
        }),
        ..FConfig::wideband(channels, 4)
    }
}

/// Zero-phase-referenced DDC response Σ_k h_k e^{2πjΔk} at Δ cycles per ADC sample.
fn ddc_response(h: &[f32], delta: f64) -> Complex64 {
    h.iter()
        .enumerate()
        .map(|(k, &v)| Complex64::from_polar(v as f64, 2.0 * PI * delta * k as f64))
        .sum()
}

struct Run {
    cfg: FConfig,
    out: Vec<u8>,
    expect: Complex64,
}

/// Runs a real tone of frequency `freq` Hz through the narrowband pipeline with delay
/// `delay` (ADC samples, coarse a multiple of S) and phase `phi`; returns the output and
/// the predicted value for the channel at the tone (for spectrum 0; later spectra advance
/// by 2π·Δ·2C·D per spectrum, which is whole cycles at a channel centre). The gain is set
/// so that a tone at `cal` Hz would give |X| = 100.
fn run_tone(mut cfg: FConfig, freq: f64, cal: f64, delay: f64, phi: f64, spectra: usize) -> Run {
    cfg.spectra_per_heap = spectra;
    let nb = cfg.narrowband.unwrap();
    let s = cfg.subsampling();
    let mut be = CpuBackend::new(cfg.clone()).unwrap();
    let h = ddc_weights(&nb, s, cfg.ddc_taps()).unwrap();
    let sum_w: f64 = be.weights().iter().map(|&w| w as f64).sum();
    let buf_ts = 10_000_000u64;
    let step = cfg.samples_between_spectra() as u64;
    let first_out = buf_ts + 4 * step;
    let n = cfg.input_samples_needed(spectra) + 8 * step as usize;
    let (amp, theta) = (400.0, 0.9);
    let f = freq / ADC;
    let x = tone(n, buf_ts, f, amp, theta);
    let buf = pack(&x, BITS);
    let model = LinearDelayModel {
        start: 0,
        delay,
        delay_rate: 0.0,
        phase: phi,
        phase_rate: 0.0,
    };
    let segs = model
        .segments(first_out, spectra, step, s as u64, false)
        .unwrap();
    assert_eq!(segs.len(), 1);
    let seg = &segs[0];
    // Δ: tone offset from the band centre, cycles per ADC sample.
    let delta = f - nb.centre_frequency / ADC;
    let hd = ddc_response(&h, delta);
    let a = amp / 2.0 * ddc_response(&h, (cal - nb.centre_frequency) / ADC).norm() * sum_w;
    let g = (100.0 / a) as f32;
    let gains = vec![Complex32::new(g, 0.0); cfg.channels];
    let mut pb = pol(
        packed(&buf, BITS, n),
        seg.input_offset(buf_ts).unwrap(),
        &seg.fine_delay,
        &seg.phase,
        &gains,
    );
    pb.timestamp = buf_ts;
    let block = Block {
        spectra,
        first_spectrum: 0,
        out_first: 0,
        pols: [pb, pb],
    };
    let mut out = vec![0u8; cfg.output_len(spectra)];
    be.process(&block, &mut out).unwrap();
    // Phase: θ + 2π·Δ·T + arg H(Δ) − 2π·Δ·d + φ (phase referenced to the centre).
    let t = first_out as f64;
    let ph = theta + 2.0 * PI * (delta * t).fract() + hd.arg() - 2.0 * PI * delta * delay + phi;
    Run {
        cfg,
        out,
        expect: Complex64::from_polar(100.0, ph),
    }
}

fn check_tone(r: &Run, chan: usize, spectra: usize) {
    for sp in 0..spectra {
        for p in 0..2 {
            for c in 0..r.cfg.channels {
                let (re, im) = value8(&r.out, &r.cfg, c, sp, p);
                let v = Complex64::new(re as f64, im as f64);
                if c == chan {
                    assert!((v.norm() - 100.0).abs() <= 1.5, "|X| {}", v.norm());
                    let e = delay::wrap_angle(v.arg() - r.expect.arg()).abs();
                    assert!(e < 0.02, "channel {c} spectrum {sp}: phase error {e}");
                } else {
                    assert!(v.norm() <= 1.5, "leakage into {c}: {v}");
                }
            }
        }
    }
}

fn channel_freq(cfg: &FConfig, c: usize) -> f64 {
    let nb = cfg.narrowband.unwrap();
    let width = ADC / (2 * cfg.channels * nb.decimation) as f64;
    nb.centre_frequency + (c as f64 - (cfg.channels / 2) as f64) * width
}

#[test]
fn discard_tone_lands_in_its_channel() {
    // C = 64, D = 8: channel width 1024 Hz; centre 300 032 Hz.
    for c in [3usize, 20, 32, 61] {
        let cfg = nb_cfg(64, 8, 300_032.0, NarrowbandMode::Discard);
        let f = channel_freq(&cfg, c);
        let r = run_tone(cfg, f, f, 0.0, 0.0, 3);
        check_tone(&r, c, 3);
    }
}

#[test]
fn no_discard_tone_lands_in_its_channel() {
    // VLBI mode: D = 4 (S = 8), pass band 80 % of the output bandwidth.
    let bw = ADC / 2.0 / 4.0;
    for c in [8usize, 40, 55] {
        let cfg = nb_cfg(
            64,
            4,
            200_000.0,
            NarrowbandMode::NoDiscard {
                pass_bandwidth: 0.8 * bw,
            },
        );
        let f = channel_freq(&cfg, c);
        let r = run_tone(cfg, f, f, 0.0, 0.0, 3);
        check_tone(&r, c, 3);
    }
}

#[test]
fn narrowband_delay_and_phase_move_tone_phase() {
    // Coarse delays are multiples of S = 8; the remainder is a per-channel phase slope.
    let modes = [
        NarrowbandMode::Discard,
        NarrowbandMode::NoDiscard {
            pass_bandwidth: 0.8 * ADC / 16.0,
        },
    ];
    for mode in modes {
        for (delay, phi) in [(3.0, 0.0), (-21.0, 0.5), (130.7, -1.2), (4.0, 2.0)] {
            let cfg = nb_cfg(64, 8, 300_032.0, mode);
            let f = channel_freq(&cfg, 11);
            let r = run_tone(cfg, f, f, delay, phi, 2);
            check_tone(&r, 11, 2);
        }
    }
}

#[test]
fn alias_band_tone_is_rejected() {
    // A tone 0.9 output-sample-rates above the centre aliases onto −0.1 (a kept channel)
    // unless the DDC filter removes it; a tone in the discarded half appears nowhere.
    let cfg = nb_cfg(64, 8, 300_032.0, NarrowbandMode::Discard);
    let out_rate = ADC / 8.0;
    for off in [0.9 * out_rate, 0.4 * out_rate, -0.35 * out_rate] {
        let freq = 300_032.0 + off;
        let r = run_tone(cfg.clone(), freq, 300_032.0, 0.0, 0.0, 2);
        for c in 0..64 {
            for p in 0..2 {
                let (re, im) = value8(&r.out, &r.cfg, c, 0, p);
                let v = Complex64::new(re as f64, im as f64).norm();
                assert!(v <= 1.5, "tone at {off} Hz leaks into channel {c}: {v}");
            }
        }
    }
}

/// Noise through the whole narrowband chain against the float64 reference (exact mixer,
/// direct DDC, complex PFB and DFT).
#[test]
fn narrowband_noise_matches_f64_reference() {
    for mode in [
        NarrowbandMode::Discard,
        NarrowbandMode::NoDiscard {
            pass_bandwidth: 0.8 * ADC / 8.0,
        },
    ] {
        let channels = 32;
        let spectra = 3;
        let cfg = nb_cfg(channels, 4, 131_072.0 + 4096.0, mode);
        let nb = cfg.narrowband.unwrap();
        let s = cfg.subsampling();
        let n_pfb = cfg.pfb_channels();
        let mut be = CpuBackend::new(cfg.clone()).unwrap();
        let h = ddc_weights(&nb, s, cfg.ddc_taps()).unwrap();
        let n = cfg.input_samples_needed(spectra) + 3 * s;
        let x = noise(n, 80.0, BITS, 21);
        let buf = pack(&x, BITS);
        let mut r = rng(77);
        let fine: Vec<f64> = (0..spectra)
            .map(|_| (r.random::<f64>() - 0.5) * s as f64)
            .collect();
        let phase: Vec<f64> = (0..spectra).map(|_| r.random::<f64>() * 6.0).collect();
        let gains: Vec<Complex32> = (0..channels)
            .map(|_| Complex32::from_polar(0.4, r.random::<f32>() * 6.0))
            .collect();
        let (ts, off) = (123_456_789u64, 2 * s);
        let mut pb = pol(packed(&buf, BITS, n), off, &fine, &phase, &gains);
        pb.timestamp = ts;
        let block = Block {
            spectra,
            first_spectrum: 0,
            out_first: 0,
            pols: [pb, pb],
        };
        let mut out = vec![0u8; cfg.output_len(spectra + 1)];
        be.process(&block, &mut out).unwrap();
        let xf: Vec<f64> = x[off..].iter().map(|&v| v as f64).collect();
        let n_post = (spectra + cfg.taps - 1) * n_pfb;
        let u = ref_ddc(&xf, &h, s, ts + off as u64, (135_168, ADC as i128), n_post);
        let (mut total, mut close) = (0, 0);
        for sp in 0..spectra {
            let spec = ref_narrowband(&u, be.weights(), n_pfb, channels, sp);
            for c in 0..channels {
                let div = cfg.internal_decimation();
                let v = ref_post(
                    spec[c], c, channels, n_pfb, fine[sp], div, phase[sp], gains[c],
                );
                for p in 0..2 {
                    let (re, im) = value8(&out, &cfg, c, sp, p);
                    for (got, want) in [(re, v.re), (im, v.im)] {
                        total += 1;
                        close += ((got as i32 - ref_quant(want, 127.0)).abs() <= 1) as usize;
                    }
                }
            }
        }
        assert!(
            close as f64 >= 0.99 * total as f64,
            "{mode:?}: {close}/{total}"
        );
    }
}

#[test]
fn bad_input_is_an_error() {
    let mut bad = nb_cfg(64, 7, 1000.0, NarrowbandMode::Discard);
    assert!(CpuBackend::new(bad.clone()).is_err());
    bad.narrowband = None;
    bad.channels = 96;
    assert!(matches!(
        CpuBackend::new(bad.clone()),
        Err(FError::BadChannels { .. })
    ));
    bad.channels = 64;
    bad.out_bits = 6;
    assert_eq!(
        CpuBackend::new(bad.clone()).err(),
        Some(FError::BadOutputBits(6))
    );
    bad.out_bits = 8;
    bad.taps = 0;
    assert!(CpuBackend::new(bad.clone()).is_err());
    let cfg = nb_cfg(64, 8, 300_032.0, NarrowbandMode::Discard);
    let mut be = CpuBackend::new(cfg.clone()).unwrap();
    let n = cfg.input_samples_needed(2) + 8;
    let x = vec![0i16; n];
    let d = Samples::Decoded {
        data: &x,
        bits: BITS,
    };
    let z = vec![0.0; 2];
    let g = vec![Complex32::new(1.0, 0.0); 64];
    let mut out = vec![0u8; cfg.output_len(4)];
    let mut run = |p: PolBlock, spectra: usize, out: &mut [u8]| {
        be.process(
            &Block {
                spectra,
                first_spectrum: 0,
                out_first: 0,
                pols: [p, p],
            },
            out,
        )
    };
    assert!(run(pol(d, 0, &z, &z, &g), 2, &mut out).is_ok());
    assert!(matches!(
        run(pol(d, 3, &z, &z, &g), 2, &mut out),
        Err(FError::BadParameter { what: "offset", .. })
    ));
    assert!(matches!(
        run(pol(d, 16, &z, &z, &g), 2, &mut out),
        Err(FError::InputTooShort { .. })
    ));
    assert!(matches!(
        run(pol(d, 0, &z[..1], &z, &g), 2, &mut out),
        Err(FError::BadLength { .. })
    ));
    assert!(matches!(
        run(pol(d, 0, &z, &z, &g[..63]), 2, &mut out),
        Err(FError::BadLength { what: "gains", .. })
    ));
    let mut nan = g.clone();
    nan[5] = Complex32::new(f32::NAN, 0.0);
    assert!(matches!(
        run(pol(d, 0, &z, &z, &nan), 2, &mut out),
        Err(FError::NotFinite { .. })
    ));
    let inf = vec![f64::INFINITY; 2];
    assert!(run(pol(d, 0, &inf, &z, &g), 2, &mut out).is_err());
    assert!(run(pol(d, 0, &z, &z, &g), 0, &mut out).is_err());
    assert!(matches!(
        run(pol(d, 0, &z, &z, &g), 2, &mut out[..100]),
        Err(FError::BadOutputLength { .. })
    ));
    let d17 = Samples::Decoded { data: &x, bits: 17 };
    assert_eq!(
        run(pol(d17, 0, &z, &z, &g), 2, &mut out),
        Err(FError::BadInputBits(17))
    );
    let short = [0u8; 10];
    let p = pol(packed(&short, BITS, n), 0, &z, &z, &g);
    assert!(matches!(
        run(p, 2, &mut out),
        Err(FError::InputTooShort { .. })
    ));
}
