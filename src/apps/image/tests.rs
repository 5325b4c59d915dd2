use std::f64::consts::PI;
use std::path::PathBuf;

use num_complex::Complex32;

use super::geometry::lst_rad;
use super::*;

const T0: f64 = 1.7e9;

/// Deterministic pseudo-random layout: `n` antennas within ±`half` metres (east, north),
/// heights within ±`up` metres.
fn layout(n: usize, half: f64, up: f64, seed: u64) -> Vec<[f64; 3]> {
    let mut s = seed;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    (0..n)
        .map(|_| [half * next(), half * next(), up * next()])
        .collect()
}

fn obs(positions: Vec<[f64; 3]>, freqs: Vec<f64>, centre: Option<(f64, f64)>) -> Observation {
    Observation {
        positions_enu: positions,
        latitude_rad: MEERKAT_LAT_RAD,
        longitude_rad: MEERKAT_LON_RAD,
        time_unix: T0,
        phase_centre: centre,
        freqs_hz: freqs,
    }
}

/// Visibilities of point sources `(l, m, flux)` from the module's conventions, all four
/// products equal.
fn simulate(o: &Observation, sources: &[(f64, f64, f64)]) -> Visibilities {
    let n = o.positions_enu.len();
    let mut v = Visibilities::zeros(n, o.freqs_hz.len());
    for (ch, f) in o.freqs_hz.iter().enumerate() {
        let inv_lambda = f / SPEED_OF_LIGHT;
        for a2 in 0..n {
            for a1 in 0..=a2 {
                let [u, vv, w] = uvw(o, a1, a2).map(|x| x * inv_lambda);
                let mut acc = num_complex::Complex64::new(0.0, 0.0);
                for &(l, m, flux) in sources {
                    let nn = (1.0 - l * l - m * m).sqrt();
                    let ph = 2.0 * PI * (u * l + vv * m + w * (nn - 1.0));
                    acc += num_complex::Complex64::from_polar(flux, ph);
                }
                let bl = baseline_index(a1, a2);
                for p in 0..4 {
                    v.data[(ch * n_baselines(n) + bl) * 4 + p] =
                        Complex32::new(acc.re as f32, acc.im as f32);
                }
            }
        }
    }
    v
}

fn params(size: usize, cell: Option<f64>, weighting: Weighting) -> ImagingParams {
    ImagingParams {
        size,
        cell_rad: cell,
        weighting,
        w_planes: 0,
    }
}

fn freqs3() -> Vec<f64> {
    vec![1.30e9, 1.35e9, 1.40e9]
}

#[test]
fn source_at_phase_centre_peaks_at_centre_with_unit_flux() {
    let o = obs(layout(16, 500.0, 5.0, 1), freqs3(), None);
    let v = simulate(&o, &[(0.0, 0.0, 1.0)]);
    let img = dirty_image(&o, &v, &params(64, None, Weighting::Natural), 0).unwrap();
    let (peak, col, row) = img.peak();
    assert_eq!((col, row), (32, 32));
    assert!((peak - 1.0).abs() < 1e-4, "peak {peak}");
    assert_eq!(img.lm_of(col, row), (0.0, 0.0));
    // 16 antennas → 120 cross baselines × 3 channels × 2 (Hermitian pairs).
    assert_eq!(img.sum_weights, 720.0);
}

#[test]
fn offset_point_source_lands_on_its_pixel_for_all_weightings() {
    let o = obs(layout(16, 500.0, 5.0, 2), freqs3(), None);
    let centre = dirty_image(
        &o,
        &simulate(&o, &[(0.0, 0.0, 1.0)]),
        &params(128, None, Weighting::Natural),
        0,
    )
    .unwrap();
    let cell = centre.cell_rad;
    let (col0, row0) = (64 + 13, 64 - 9);
    let (l0, m0) = centre.lm_of(col0, row0);
    assert!(l0 > 0.0 && m0 < 0.0);
    let v = simulate(&o, &[(l0, m0, 1.0)]);
    for wt in [
        Weighting::Natural,
        Weighting::Uniform,
        Weighting::Briggs(0.0),
        Weighting::Briggs(-1.0),
    ] {
        let img = dirty_image(&o, &v, &params(128, Some(cell), wt), 3).unwrap();
        let (peak, col, row) = img.peak();
        assert_eq!((col, row), (col0, row0), "{wt:?}");
        if wt == Weighting::Natural {
            assert!((peak - 1.0).abs() < 0.02, "natural peak {peak}");
        }
        assert!((peak - 1.0).abs() < 0.05, "{wt:?} peak {peak}");
    }
    // Uniform weighting narrows the beam: the first sidelobe ring is lower than for natural.
    let nat = dirty_image(&o, &v, &params(128, Some(cell), Weighting::Natural), 0).unwrap();
    let uni = dirty_image(&o, &v, &params(128, Some(cell), Weighting::Uniform), 0).unwrap();
    assert!(nat.at(col0 + 1, row0).unwrap() > uni.at(col0 + 1, row0).unwrap());
}

#[test]
fn w_stacking_recovers_a_wide_field_source() {
    // Compact array, pointing 30° off the zenith (large w), source far from the centre.
    let lst = lst_rad(T0, MEERKAT_LON_RAD);
    let centre = Some((lst - 15f64.to_radians(), -60f64.to_radians()));
    let o = obs(layout(16, 150.0, 0.0, 3), vec![1.0e9], centre);
    let size = 256;
    let probe = dirty_image(
        &o,
        &simulate(&o, &[(0.0, 0.0, 1.0)]),
        &params(size, None, Weighting::Natural),
        0,
    )
    .unwrap();
    let (col0, row0) = (128 + 100, 128 + 80);
    let (l0, m0) = probe.lm_of(col0, row0);
    let v = simulate(&o, &[(l0, m0, 1.0)]);
    let cell = Some(probe.cell_rad);
    let stacked = dirty_image(&o, &v, &params(size, cell, Weighting::Natural), 0).unwrap();
    let (peak, col, row) = stacked.peak();
    assert_eq!((col, row), (col0, row0));
    assert!((peak - 1.0).abs() < 0.02, "w-stacked peak {peak}");
    let mut flat = params(size, cell, Weighting::Natural);
    flat.w_planes = 1;
    let flat = dirty_image(&o, &v, &flat, 0).unwrap();
    assert!(
        flat.at(col0, row0).unwrap() < 0.9,
        "without w-correction the source should smear: {}",
        flat.at(col0, row0).unwrap()
    );
}

#[test]
fn flagged_baselines_are_skipped() {
    let o = obs(layout(12, 400.0, 3.0, 4), freqs3(), None);
    let clean = simulate(&o, &[(0.0, 0.0, 1.0)]);
    let p = params(64, Some(1e-3), Weighting::Natural);
    let mut flagged_clean = clean.clone();
    let mut garbage = clean.clone();
    let nb = n_baselines(12);
    for (ch, bl) in [
        (0, baseline_index(1, 5)),
        (2, baseline_index(0, 11)),
        (1, 40),
    ] {
        flagged_clean.flagged[ch * nb + bl] = true;
        garbage.flagged[ch * nb + bl] = true;
        for k in 0..4 {
            garbage.data[(ch * nb + bl) * 4 + k] = Complex32::new(1e6, -3e5);
        }
    }
    let a = dirty_image(&o, &flagged_clean, &p, 0).unwrap();
    let b = dirty_image(&o, &garbage, &p, 0).unwrap();
    assert_eq!(a.pixels, b.pixels);
    assert_eq!(a.sum_weights, 2.0 * (66.0 * 3.0 - 3.0));
    // The same garbage unflagged does change the image.
    let mut unflagged = garbage.clone();
    unflagged.flagged.fill(false);
    let c = dirty_image(&o, &unflagged, &p, 0).unwrap();
    assert!(c
        .pixels
        .iter()
        .zip(&b.pixels)
        .any(|(x, y)| (x - y).abs() > 1.0));
    // Everything flagged: an error, not a panic or a NaN image.
    let mut all = clean.clone();
    all.flagged.fill(true);
    assert_eq!(dirty_image(&o, &all, &p, 0), Err(ImagingError::NoData));
}

#[test]
fn xeng_raw_decodes_icd_layout_and_missing() {
    let (n, channels) = (3, 2);
    let nb = n_baselines(n);
    let mut raw = vec![0i32; channels * nb * 8];
    let val = |ch: usize, a1: usize, a2: usize, p1: usize, p2: usize| {
        (ch * 10000 + a1 * 1000 + a2 * 100 + p1 * 10 + p2) as i32
    };
    for ch in 0..channels {
        for a2 in 0..n {
            for a1 in 0..=a2 {
                for p1 in 0..2 {
                    for p2 in 0..2 {
                        let i = ((ch * nb + a2 * (a2 + 1) / 2 + a1) * 4 + p1 + 2 * p2) * 2;
                        raw[i] = val(ch, a1, a2, p1, p2);
                        raw[i + 1] = -val(ch, a1, a2, p1, p2) - 7;
                    }
                }
            }
        }
    }
    // Antenna 2 missing in channel 1: baselines (0,2), (1,2), (2,2).
    for a1 in 0..3 {
        for p in 0..4 {
            let i = ((nb + baseline_index(a1, 2)) * 4 + p) * 2;
            raw[i] = i32::MIN;
            raw[i + 1] = 1;
        }
    }
    let v = Visibilities::from_xeng_raw(n, channels, &raw).unwrap();
    for ch in 0..channels {
        for a2 in 0..n {
            for a1 in 0..=a2 {
                let bl = baseline_index(a1, a2);
                let missing = ch == 1 && a2 == 2;
                assert_eq!(v.flagged[ch * nb + bl], missing, "{ch} {a1} {a2}");
                for (p1, p2) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                    let x = v.get(ch, bl, p1 + 2 * p2).unwrap();
                    let want = if missing {
                        Complex32::new(0.0, 0.0)
                    } else {
                        let r = val(ch, a1, a2, p1, p2) as f32;
                        Complex32::new(r, -r - 7.0)
                    };
                    assert_eq!(x, want);
                }
            }
        }
    }
    // A genuine i32::MIN real part with another imaginary part is data, not MISSING.
    let mut raw2 = raw.clone();
    raw2[1] = 5;
    raw2[0] = i32::MIN;
    let v2 = Visibilities::from_xeng_raw(n, channels, &raw2).unwrap();
    assert!(!v2.flagged[0]);
    assert_eq!(v2.get(0, 0, 0), Some(Complex32::new(i32::MIN as f32, 5.0)));

    // Summing dumps: data add, flags OR.
    let mut sum = v.clone();
    sum.add(&v2).unwrap();
    assert_eq!(sum.get(0, 1, 2).unwrap(), v.get(0, 1, 2).unwrap() * 2.0);
    assert!(sum.flagged[nb + baseline_index(0, 2)]);
    assert!(sum.add(&Visibilities::zeros(4, 2)).is_err());

    assert!(Visibilities::from_xeng_raw(n, channels, &raw[1..]).is_err());
    assert!(Visibilities::from_xeng_raw(0, channels, &[]).is_err());
    assert!(Visibilities::from_xeng_raw(n, 0, &[]).is_err());
}

#[test]
fn uvw_at_zenith_is_enu_and_antisymmetric() {
    let o = obs(vec![[0.0; 3], [100.0, -250.0, 3.0]], vec![1e9], None);
    let [u, v, w] = uvw(&o, 1, 0);
    assert!((u - 100.0).abs() < 1e-9 && (v + 250.0).abs() < 1e-9 && (w - 3.0).abs() < 1e-9);
    let back = uvw(&o, 0, 1);
    assert!((back[0] + u).abs() < 1e-12 && (back[1] + v).abs() < 1e-12);
    // Pointing elsewhere keeps the baseline length.
    let o2 = Observation {
        phase_centre: Some((1.0, -0.3)),
        ..o.clone()
    };
    let b = uvw(&o2, 1, 0);
    let len = (b[0] * b[0] + b[1] * b[1] + b[2] * b[2]).sqrt();
    assert!((len - (100f64.powi(2) + 250f64.powi(2) + 9.0).sqrt()).abs() < 1e-9);
    assert!(uvw(&o, 0, 7)[0].is_nan());
    // GMST at J2000.0 (2000-01-01 12:00 UT) is 280.4606°.
    assert!((gmst_rad(946_728_000.0).to_degrees() - 280.460_618).abs() < 1e-4);
}

#[test]
fn default_layout_is_meerkat_like() {
    let l = default_layout();
    assert_eq!(l.len(), 64);
    let r: Vec<f64> = l.iter().map(|p| p[0].hypot(p[1])).collect();
    assert!(r.iter().filter(|&&x| x < 600.0).count() >= 40);
    let rmax = r.iter().cloned().fold(0.0, f64::max);
    assert!((6000.0..9000.0).contains(&rmax), "{rmax}");
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gpucbf-imaging-{}-{name}", std::process::id()))
}

/// Tiny FITS header reader: (key → raw value string) up to END, and the header length.
fn read_fits_header(bytes: &[u8]) -> (std::collections::HashMap<String, String>, usize) {
    let mut keys = std::collections::HashMap::new();
    for (i, c) in bytes.chunks(80).enumerate() {
        let card = std::str::from_utf8(c).unwrap();
        let key = card[..8].trim().to_string();
        if key == "END" {
            return (keys, (i + 1).div_ceil(36) * 2880);
        }
        if &card[8..10] == "= " {
            let v = card[10..].split(" /").next().unwrap().trim();
            keys.insert(key, v.trim_matches('\'').trim().to_string());
        }
    }
    panic!("no END card");
}

#[test]
fn fits_header_and_data_parse_back() {
    let o = obs(layout(10, 300.0, 2.0, 5), freqs3(), Some((1.2, -0.5)));
    let v = simulate(&o, &[(0.0, 0.0, 1.0)]);
    let img = dirty_image(&o, &v, &params(48, Some(2e-4), Weighting::Natural), 0).unwrap();
    let path = tmp("img.fits");
    write_fits(&path, &img).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(bytes.len() % 2880, 0);
    let (h, hlen) = read_fits_header(&bytes);
    let num = |k: &str| h[k].parse::<f64>().unwrap();
    assert_eq!(h["SIMPLE"], "T");
    assert_eq!(num("BITPIX"), -32.0);
    assert_eq!(num("NAXIS"), 4.0);
    assert_eq!((num("NAXIS1"), num("NAXIS2")), (48.0, 48.0));
    assert_eq!(h["CTYPE1"], "RA---SIN");
    assert_eq!(h["CTYPE2"], "DEC--SIN");
    assert_eq!(h["RADESYS"], "ICRS");
    assert!((num("CDELT1") + 2e-4f64.to_degrees()).abs() < 1e-14);
    assert!((num("CDELT2") - 2e-4f64.to_degrees()).abs() < 1e-14);
    assert!((num("CRVAL1") - 1.2f64.to_degrees()).abs() < 1e-12);
    assert!((num("CRVAL2") + 0.5f64.to_degrees()).abs() < 1e-12);
    assert!((num("CRVAL3") - 1.35e9).abs() < 1.0);
    assert_eq!(num("CRPIX2"), 25.0);
    assert_eq!(h["DATE-OBS"], "2023-11-14T22:13:20.000");
    assert_eq!(bytes.len(), hlen + (48 * 48 * 4usize).div_ceil(2880) * 2880);
    // The reference pixel holds the phase centre (the peak); one FITS pixel to the right is
    // one cell west (column − 1 in memory).
    let px = |i: usize, j: usize| {
        let k = hlen + ((j - 1) * 48 + (i - 1)) * 4;
        f32::from_be_bytes(bytes[k..k + 4].try_into().unwrap())
    };
    let (c1, c2) = (num("CRPIX1") as usize, num("CRPIX2") as usize);
    assert_eq!(px(c1, c2), img.at(24, 24).unwrap());
    assert_eq!(px(c1 + 1, c2), img.at(23, 24).unwrap());
    assert_eq!(px(c1, c2 + 1), img.at(24, 25).unwrap());
    assert!((px(c1, c2) - 1.0).abs() < 1e-4);
}

fn png_size(path: &std::path::Path) -> (u32, u32, Vec<u8>) {
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

#[test]
fn pngs_decode_with_expected_sizes() {
    let o = obs(layout(10, 300.0, 2.0, 6), freqs3(), None);
    let v = simulate(&o, &[(0.0, 0.0, 1.0)]);
    let img = dirty_image(&o, &v, &params(64, None, Weighting::Natural), 0).unwrap();
    let path = tmp("img.png");
    write_image_png(&path, &img, "Dirty image, test").unwrap();
    let (w, h, rgb) = png_size(&path);
    std::fs::remove_file(&path).ok();
    assert_eq!((w, h), (90 + 256 + 20 + 24 + 90, 40 + 256 + 60));
    // The brightest colour-map colour appears (the peak) and so does black (labels).
    let px: Vec<&[u8]> = rgb.chunks(3).collect();
    assert!(px.contains(&&[253u8, 231, 37][..]));
    assert!(px.contains(&&[0u8, 0, 0][..]));

    let spath = tmp("spec.png");
    let f: Vec<f64> = (0..64).map(|i| 856e6 + i as f64 * 13.375e6).collect();
    let p: Vec<f64> = (0..64)
        .map(|i| 10f64.powf(1.0 + (i as f64 / 10.0).sin()))
        .collect();
    write_spectrum_png(&spath, &f, &p, "Spectrum").unwrap();
    let (w, h, rgb) = png_size(&spath);
    std::fs::remove_file(&spath).ok();
    assert_eq!((w, h), (900, 520));
    assert!(rgb.chunks(3).any(|c| c == [31, 90, 180]));
    assert!(write_spectrum_png(&spath, &f, &p[1..], "x").is_err());
    assert!(write_spectrum_png(&spath, &[], &[], "x").is_err());
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let o = obs(layout(8, 300.0, 2.0, 7), freqs3(), None);
    let v = simulate(&o, &[(0.0, 0.0, 1.0)]);
    let p = params(32, None, Weighting::Natural);
    assert!(dirty_image(&o, &v, &p, 0).is_ok());
    let mut o2 = o.clone();
    o2.freqs_hz.pop();
    assert!(dirty_image(&o2, &v, &p, 0).is_err());
    let mut o3 = o.clone();
    o3.positions_enu.pop();
    assert!(dirty_image(&o3, &v, &p, 0).is_err());
    let mut o4 = o.clone();
    o4.positions_enu[3][1] = f64::NAN;
    assert!(dirty_image(&o4, &v, &p, 0).is_err());
    let mut o5 = o.clone();
    o5.freqs_hz[0] = -1.0;
    assert!(dirty_image(&o5, &v, &p, 0).is_err());
    assert!(dirty_image(&o, &v, &params(0, None, Weighting::Natural), 0).is_err());
    assert!(dirty_image(&o, &v, &params(32, Some(f64::NAN), Weighting::Natural), 0).is_err());
    assert!(dirty_image(&o, &v, &params(32, None, Weighting::Briggs(f64::NAN)), 0).is_err());
    assert!(dirty_image(&o, &v, &p, 4).is_err());
    let mut v2 = v.clone();
    v2.data.pop();
    assert!(dirty_image(&o, &v2, &p, 0).is_err());
    let zero = Visibilities {
        n_ants: 0,
        channels: 3,
        data: vec![],
        flagged: vec![],
    };
    let o0 = obs(vec![], freqs3(), None);
    assert!(dirty_image(&o0, &zero, &p, 0).is_err());
    // One antenna: no cross-correlations.
    let o1 = obs(vec![[0.0; 3]], freqs3(), None);
    let v1 = simulate(&o1, &[(0.0, 0.0, 1.0)]);
    assert_eq!(dirty_image(&o1, &v1, &p, 0), Err(ImagingError::NoData));
    // Co-located antennas: zero baseline length, auto cell impossible.
    let oc = obs(vec![[1.0, 2.0, 3.0]; 3], freqs3(), None);
    let vc = simulate(&oc, &[(0.0, 0.0, 1.0)]);
    assert!(dirty_image(&oc, &vc, &p, 0).is_err());
    let bad = DirtyImage {
        pixels: vec![0.0; 5],
        ..dirty_image(&o, &v, &p, 0).unwrap()
    };
    assert!(write_fits(&tmp("bad.fits"), &bad).is_err());
    assert!(write_image_png(&tmp("bad.png"), &bad, "x").is_err());
    assert!(parse_layout("1 2\n").is_err());
    assert!(parse_layout("1 2 nan\n").is_err());
}

#[test]
fn image_matches_direct_fourier_sum() {
    // Coplanar array at the zenith: w = 0, so the gridded image must equal the direct sum
    // over both halves of every Hermitian pair to NUFFT accuracy, for arbitrary data.
    let o = obs(layout(6, 200.0, 0.0, 8), vec![1.1e9, 1.3e9], None);
    let n = 6;
    let mut v = Visibilities::zeros(n, 2);
    for (i, x) in v.data.iter_mut().enumerate() {
        let t = i as f32;
        *x = Complex32::new((t * 0.37).sin(), (t * 0.91).cos());
    }
    v.flagged[n_baselines(n) + baseline_index(1, 4)] = true;
    let size = 24;
    let img = dirty_image(&o, &v, &params(size, Some(4e-3), Weighting::Natural), 2).unwrap();
    let mut worst = 0.0f64;
    for row in 0..size {
        for col in 0..size {
            let (l, m) = img.lm_of(col, row);
            let (mut acc, mut wsum) = (0.0f64, 0.0f64);
            for (ch, f) in o.freqs_hz.iter().enumerate() {
                for a2 in 0..n {
                    for a1 in 0..a2 {
                        let bl = baseline_index(a1, a2);
                        if v.flagged[ch * n_baselines(n) + bl] {
                            continue;
                        }
                        let [u, vv, _] = uvw(&o, a1, a2).map(|x| x * f / SPEED_OF_LIGHT);
                        let x = v.get(ch, bl, 2).unwrap();
                        let x = num_complex::Complex64::new(x.re as f64, x.im as f64);
                        let e =
                            num_complex::Complex64::from_polar(1.0, -2.0 * PI * (u * l + vv * m));
                        // The baseline and its conjugate (−u, −v, V*).
                        acc += (x * e).re + (x.conj() * e.conj()).re;
                        wsum += 2.0;
                    }
                }
            }
            worst = worst.max((acc / wsum - img.at(col, row).unwrap() as f64).abs());
        }
    }
    assert!(worst < 1e-5, "max deviation from the direct sum {worst}");
}
