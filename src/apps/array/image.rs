//! The array's products: spectrum plot, dirty image (FITS and PNG) from the dumps.

use std::path::Path;

use serde_json::json;

use super::receive::Dump;
use crate::apps::image::{self, ImagingParams, Observation, Visibilities, Weighting};

/// Writes `spectrum.png`, `image.png` and `image.fits`; returns a description.
pub fn write_products(
    dir: &Path,
    dumps: &[Dump],
    n: usize,
    c: usize,
    adc_rate: f64,
    positions: &[[f64; 3]],
) -> anyhow::Result<serde_json::Value> {
    if dumps.is_empty() {
        return Ok(json!({"error": "no dumps"}));
    }
    let mut total: Option<Visibilities> = None;
    for d in dumps {
        let v = Visibilities::from_xeng_raw(n, c, &d.raw).map_err(|e| anyhow::anyhow!("{e}"))?;
        match total.as_mut() {
            None => total = Some(v),
            Some(t) => t.add(&v).map_err(|e| anyhow::anyhow!("{e}"))?,
        }
    }
    let mut vis = total.ok_or_else(|| anyhow::anyhow!("no visibilities"))?;
    let df = adc_rate / (2 * c) as f64;
    let freqs: Vec<f64> = (0..c).map(|k| k as f64 * df).collect();
    // Autocorrelation of antenna 0, pol 0 (baseline 0, product 0) per channel.
    let power: Vec<f64> = (0..c)
        .map(|k| vis.data[k * (n * (n + 1) / 2) * 4].re as f64 / dumps.len() as f64)
        .collect();
    image::write_spectrum_png(
        &dir.join("spectrum.png"),
        &freqs,
        &power,
        "Antenna 0 pol 0 autocorrelation",
    )?;
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    let obs = Observation {
        positions_enu: positions.to_vec(),
        latitude_rad: image::MEERKAT_LAT_RAD,
        longitude_rad: image::MEERKAT_LON_RAD,
        time_unix: time,
        phase_centre: None,
        freqs_hz: freqs.clone(),
    };
    // The DC channel has no sky frequency to image at: flag it.
    let nbl = n * (n + 1) / 2;
    vis.flagged[..nbl].iter_mut().for_each(|f| *f = true);
    let mut obs = obs;
    obs.freqs_hz[0] = df / 2.0;
    // Cell: Nyquist-sample the longest baseline at the highest frequency, but keep the
    // field inside the visible sky (|l|, |m| < 1).
    let size = 256;
    let mut bmax: f64 = 0.0;
    for a in positions {
        for b in positions {
            bmax = bmax.max(((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)).sqrt());
        }
    }
    let umax = bmax * freqs[c - 1] / 299_792_458.0;
    let cell = (1.0 / (3.0 * umax.max(1e-9))).min(1.9 / size as f64);
    let params = ImagingParams {
        size,
        cell_rad: Some(cell),
        weighting: Weighting::Natural,
        w_planes: 0,
    };
    let img = image::dirty_image(&obs, &vis, &params, 0).map_err(|e| anyhow::anyhow!("{e}"))?;
    image::write_fits(&dir.join("image.fits"), &img)?;
    image::write_image_png(
        &dir.join("image.png"),
        &img,
        "Dirty image (pol 0, natural weighting)",
    )?;
    let (peak, col, row) = img.peak();
    let (l, m) = img.lm_of(col, row);
    Ok(json!({
        "spectrum_png": "spectrum.png",
        "image_png": "image.png",
        "image_fits": "image.fits",
        "image_size": img.size,
        "cell_arcsec": img.cell_rad.to_degrees() * 3600.0,
        "peak": {"value": peak, "l": l, "m": m},
        "tone_channel_power_ratio": power[c / 4] / median(&power[1..]),
    }))
}

fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}
