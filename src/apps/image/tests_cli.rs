//! Tests of `gpucbf image` input paths: .npy dumps and X-engine pcap captures.

use std::net::{Ipv4Addr, SocketAddrV4};

use num_complex::Complex32;

use super::cli::{load_pcap, run, ImageArgs, WeightingArg};
use super::*;
use crate::net::send::pcap::PcapSink;
use crate::net::PacketSink;
use crate::npy::{write_npy, NpyData};
use crate::spead::{ids, HeapBuilder};

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("gpucbf-imaging-cli-{}-{name}", std::process::id()))
}

#[test]
fn image_command_on_npy_dumps_finds_the_zenith_source() {
    // Two dumps of a unit source at the zenith on the first 8 antennas of the shipped layout.
    let n = 8;
    let (f0, df, channels) = (1.2e9, 50e6, 3);
    let o = Observation {
        positions_enu: default_layout()[..n].to_vec(),
        latitude_rad: MEERKAT_LAT_RAD,
        longitude_rad: MEERKAT_LON_RAD,
        time_unix: 1.7e9,
        phase_centre: None,
        freqs_hz: (0..channels).map(|c| f0 + c as f64 * df).collect(),
    };
    let nb = n_baselines(n);
    // A source at the phase centre has V = 1 on every baseline, channel and product.
    assert_eq!(o.freqs_hz.len(), channels);
    let mut data = vec![Complex32::new(1.0, 0.0); 2 * channels * nb * 4];
    // Poison one baseline of the second dump with NaN: it must be flagged, not summed.
    let bad = (nb + baseline_index(2, 5)) * 4;
    let second = channels * nb * 4;
    data[second + bad] = Complex32::new(f32::NAN, 0.0);
    let path = tmp("vis.npy");
    write_npy(&path, &[2, channels, nb, 4], &NpyData::C64(data)).unwrap();
    let (fits, png) = (tmp("out.fits"), tmp("out.png"));
    let args = ImageArgs {
        vis: Some(path.clone()),
        pcap: None,
        array_size: None,
        antennas: None,
        freqs_start: f0,
        freqs_step: df,
        phase_centre: None,
        time: 1.7e9,
        weighting: WeightingArg::Briggs,
        robust: 0.5,
        size: 64,
        cell: None,
        pol_product: 0,
        w_planes: 0,
        out_fits: Some(fits.clone()),
        out_png: Some(png.clone()),
    };
    let s = run(&args).unwrap();
    let fits_len = std::fs::metadata(&fits).map(|m| m.len());
    let png_ok = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()))
        .read_info()
        .is_ok();
    for p in [&path, &fits, &png] {
        std::fs::remove_file(p).ok();
    }
    assert_eq!(s["n_ants"], 8);
    assert_eq!(s["channels"], 3);
    assert_eq!(
        (s["peak_col"].as_u64(), s["peak_row"].as_u64()),
        (Some(32), Some(32))
    );
    // Two dumps of a unit source sum to 2.
    assert!((s["peak"].as_f64().unwrap() - 2.0).abs() < 1e-3, "{s}");
    assert!(s["flagged_fraction"].as_f64().unwrap() > 0.0);
    assert_eq!(fits_len.unwrap() % 2880, 0);
    assert!(png_ok);

    let mut wrong = args;
    wrong.vis = Some(tmp("does-not-exist.npy"));
    assert!(run(&wrong).is_err());
}

/// Builds one xeng_raw heap's payload with value `base + product index` per product.
fn xeng_payload(n_ants: usize, channels: usize, base: i32, missing_ant: Option<usize>) -> Vec<u8> {
    let nb = n_baselines(n_ants);
    let mut out = Vec::with_capacity(channels * nb * 32);
    for ch in 0..channels {
        for a2 in 0..n_ants {
            for a1 in 0..=a2 {
                for p in 0..4 {
                    let (re, im) = if missing_ant.is_some_and(|m| m == a1 || m == a2) {
                        (MISSING[0], MISSING[1])
                    } else {
                        let k = ((ch * nb + baseline_index(a1, a2)) * 4 + p) as i32;
                        (base + k, -k)
                    };
                    out.extend_from_slice(&re.to_le_bytes());
                    out.extend_from_slice(&im.to_le_bytes());
                }
            }
        }
    }
    out
}

#[test]
fn pcap_heaps_from_two_engines_sum_per_channel() {
    let (n, cps) = (4, 2);
    let nb = n_baselines(n);
    let path = tmp("x.pcap");
    {
        let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 7148);
        let mut sink = PcapSink::create(&path, src, 1).unwrap();
        let mut cnt = 1;
        for dump in 0..2u64 {
            for (engine, off) in [(0usize, 0u64), (1, cps as u64)] {
                // Antenna 3 is missing from engine 1's second dump.
                let missing = (dump == 1 && engine == 1).then_some(3);
                let payload = xeng_payload(n, cps, 1000 * (dump as i32 + 1), missing);
                let h = HeapBuilder::new(cnt)
                    .immediate(ids::TIMESTAMP, dump * 4096)
                    .immediate(ids::FREQUENCY, off)
                    .addressed(ids::XENG_RAW, &payload);
                cnt += 1;
                let dst = SocketAddrV4::new(Ipv4Addr::new(239, 10, 0, engine as u8), 7148);
                for p in h.packets(1500, true).unwrap() {
                    let parts: Vec<&[u8]> = std::iter::once(&p.header[..])
                        .chain(p.payload.iter().copied())
                        .collect();
                    sink.send(dst, &parts).unwrap();
                }
            }
        }
        sink.flush().unwrap();
    }
    let v = load_pcap(&path, n);
    std::fs::remove_file(&path).ok();
    let v = v.unwrap();
    assert_eq!((v.n_ants, v.channels), (4, 2 * cps));
    for ch in 0..2 * cps {
        for a2 in 0..n {
            for a1 in 0..=a2 {
                let bl = baseline_index(a1, a2);
                let flagged = ch >= cps && a2 == 3;
                assert_eq!(v.flagged[ch * nb + bl], flagged, "ch {ch} ({a1},{a2})");
                if !flagged {
                    let k = (((ch % cps) * nb + bl) * 4 + 1) as f32;
                    assert_eq!(
                        v.get(ch, bl, 1).unwrap(),
                        Complex32::new(3000.0 + 2.0 * k, -2.0 * k)
                    );
                }
            }
        }
    }
    assert!(load_pcap(&tmp("none.pcap"), n).is_err());
}

fn args_for(vis: &std::path::Path) -> ImageArgs {
    ImageArgs {
        vis: Some(vis.to_path_buf()),
        pcap: None,
        array_size: None,
        antennas: None,
        freqs_start: 1.2e9,
        freqs_step: 50e6,
        phase_centre: None,
        time: 1.7e9,
        weighting: WeightingArg::Natural,
        robust: 0.0,
        size: 16,
        cell: None,
        pol_product: 0,
        w_planes: 0,
        out_fits: None,
        out_png: None,
    }
}

/// `.npy` headers whose shape product overflows are refused with the file named (they
/// panicked with "capacity overflow", or imaged nothing and exited 0).
#[test]
fn crafted_npy_shapes_are_errors() {
    let path = tmp("crafted.npy");
    for shape in [
        format!("(1, {}, 3, 4)", 1u64 << 61),
        format!("({}, 1, 3, 4)", 1u64 << 62),
        format!("(2, {}, 1, 4)", 1u64 << 62),
    ] {
        let mut h = format!("{{'descr': '<c8', 'fortran_order': False, 'shape': {shape}, }}");
        h.push_str(&" ".repeat((64 - (10 + h.len() + 1) % 64) % 64));
        h.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
        bytes.extend_from_slice(h.as_bytes());
        std::fs::write(&path, bytes).unwrap();
        let e = format!("{:#}", run(&args_for(&path)).unwrap_err());
        assert!(e.contains(&*path.to_string_lossy()), "{shape}: {e}");
        assert!(e.contains("too large"), "{shape}: {e}");
    }
    std::fs::remove_file(&path).ok();
}

/// Antenna positions that are finite but whose baseline overflows are reported as such,
/// with the antennas and the infinite values (the NUFFT reported a "non-finite coordinate
/// NaN"); a layout file that cannot be read is named.
#[test]
fn overflowing_geometry_and_missing_layouts_are_named() {
    let (n, channels) = (2, 2);
    let path = tmp("geom.npy");
    let data = vec![Complex32::new(1.0, 0.0); channels * n_baselines(n) * 4];
    write_npy(
        &path,
        &[1, channels, n_baselines(n), 4],
        &NpyData::C64(data),
    )
    .unwrap();
    let layout = tmp("far.txt");
    std::fs::write(&layout, "1e308 0 0\n-1e308 0 0\n").unwrap();
    let mut a = args_for(&path);
    a.antennas = Some(layout.clone());
    a.cell = Some(10.0);
    let e = format!("{:#}", run(&a).unwrap_err());
    assert!(e.contains("antennas 0 and 1") && e.contains("inf"), "{e}");
    assert!(!e.contains("NaN"), "{e}");
    // Baselines fine, but (u, v, w) in wavelengths overflows.
    std::fs::write(&layout, "0 0 0\n1e300 0 0\n").unwrap();
    a.freqs_start = 1e300;
    let e = format!("{:#}", run(&a).unwrap_err());
    assert!(e.contains("wavelengths overflows"), "{e}");
    let missing = tmp("no-layout.txt");
    a.antennas = Some(missing.clone());
    let e = format!("{:#}", run(&a).unwrap_err());
    assert!(
        e.contains(&format!("reading --antennas {}", missing.display())),
        "{e}"
    );
    assert!(e.contains("No such file"), "{e}");
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&layout).ok();
}

/// Out-of-range indices give `None`, not a panic (or another baseline's value).
#[test]
fn lookups_out_of_range_are_none() {
    let mut v = Visibilities::zeros(3, 2);
    v.data[(n_baselines(3) + 1) * 4 + 3] = Complex32::new(7.0, 0.0);
    assert_eq!(v.get(1, 1, 3), Some(Complex32::new(7.0, 0.0)));
    assert_eq!(v.get(2, 0, 0), None);
    assert_eq!(v.get(0, n_baselines(3), 0), None);
    assert_eq!(v.get(0, 0, 4), None);
    v.data.truncate(3);
    assert_eq!(v.get(1, 1, 3), None);
    let img = DirtyImage {
        size: 2,
        cell_rad: 1e-3,
        pixels: vec![1.0, 2.0, 3.0, 4.0],
        ra: 0.0,
        dec: 0.0,
        freq_hz: 1e9,
        sum_weights: 1.0,
        time_unix: 0.0,
        pol_product: 0,
    };
    assert_eq!(img.at(1, 1), Some(4.0));
    assert_eq!(img.at(2, 0), None);
    assert_eq!(img.at(0, 2), None);
}

/// Image files that cannot be written name the file and the step: a full disk
/// (`/dev/full`) and a missing directory (the bare "No space left on device" reached
/// `gpucbf array`'s output).
#[test]
fn image_write_errors_name_the_file() {
    let img = DirtyImage {
        size: 64,
        cell_rad: 1e-3,
        pixels: vec![0.5; 64 * 64],
        ra: 0.0,
        dec: 0.0,
        freq_hz: 1e9,
        sum_weights: 1.0,
        time_unix: 0.0,
        pol_product: 0,
    };
    let full = std::path::Path::new("/dev/full");
    let e = write_fits(full, &img).unwrap_err().to_string();
    assert!(
        e.starts_with("writing FITS /dev/full: No space left on device"),
        "{e}"
    );
    let e = write_image_png(full, &img, "x").unwrap_err().to_string();
    assert!(
        e.starts_with("writing PNG /dev/full: No space left on device"),
        "{e}"
    );
    let missing = tmp("no-such-dir").join("x.fits");
    let e = write_fits(&missing, &img).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("creating FITS {}", missing.display())),
        "{e}"
    );
    let missing = missing.with_extension("png");
    let e = write_image_png(&missing, &img, "x")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("creating PNG {}", missing.display())),
        "{e}"
    );
}
