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
                    assert_eq!(v.get(ch, bl, 1), Complex32::new(3000.0 + 2.0 * k, -2.0 * k));
                }
            }
        }
    }
    assert!(load_pcap(&tmp("none.pcap"), n).is_err());
}
