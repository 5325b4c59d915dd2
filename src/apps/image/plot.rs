//! PNG plots: the dirty image with a colour bar, and a power spectrum on a log axis.

use std::path::Path;

use super::font::{Canvas, GLYPH_H};
use super::DirtyImage;

const WHITE: [u8; 3] = [255, 255, 255];
const BLACK: [u8; 3] = [0, 0, 0];
const GREY: [u8; 3] = [200, 200, 200];
const BLUE: [u8; 3] = [31, 90, 180];

fn bad_input(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg)
}

/// Viridis-like colour map, `t` in [0, 1].
pub(crate) fn colour(t: f64) -> [u8; 3] {
    const STOPS: [[f64; 3]; 6] = [
        [68.0, 1.0, 84.0],
        [65.0, 68.0, 135.0],
        [42.0, 120.0, 142.0],
        [34.0, 168.0, 132.0],
        [122.0, 209.0, 81.0],
        [253.0, 231.0, 37.0],
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let x = t * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f64;
    let mut c = [0u8; 3];
    for k in 0..3 {
        c[k] = (STOPS[i][k] + f * (STOPS[i + 1][k] - STOPS[i][k])).round() as u8;
    }
    c
}

/// Compact number label: 3 significant digits, exponent form when very large or small.
pub(crate) fn fmt_num(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let a = x.abs();
    if !(1e-3..1e4).contains(&a) {
        return format!("{x:.1E}");
    }
    let decimals = (2 - a.log10().floor() as i64).clamp(0, 4) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// "Nice" tick positions covering `[lo, hi]` (about `n` of them).
fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = hi - lo;
    if !(span.is_finite() && span > 0.0) {
        return vec![lo];
    }
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 && out.len() < 50 {
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

/// Writes the image (east to the left, north up) with a colour bar, axes in degrees and a title.
pub fn write_image_png(path: &Path, img: &DirtyImage, title: &str) -> std::io::Result<()> {
    let n = img.size;
    if n == 0 || img.pixels.len() != n * n {
        return Err(bad_input(format!(
            "image has {} pixels, expected {n}²",
            img.pixels.len()
        )));
    }
    let d = n.clamp(256, 1024);
    let (ml, mt, bar_gap, bar_w, mr, mb) = (90usize, 40usize, 20usize, 24usize, 90usize, 60usize);
    let (w, h) = (ml + d + bar_gap + bar_w + mr, mt + d + mb);
    let mut cv = Canvas::new(w, h, WHITE);

    let finite = img.pixels.iter().filter(|p| p.is_finite());
    let lo = finite.clone().fold(f32::INFINITY, |a, &b| a.min(b)) as f64;
    let hi = finite.fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo, hi)
    } else if lo.is_finite() {
        (lo - 0.5, lo + 0.5)
    } else {
        (0.0, 1.0)
    };

    for y in 0..d {
        let row = n - 1 - (y * n / d);
        for x in 0..d {
            let col = n - 1 - (x * n / d);
            let p = img.pixels[row * n + col] as f64;
            let c = if p.is_finite() {
                colour((p - lo) / (hi - lo))
            } else {
                GREY
            };
            cv.set((ml + x) as i64, (mt + y) as i64, c);
        }
    }
    // Frame.
    let (x0, y0, x1, y1) = (
        ml as f64 - 1.0,
        mt as f64 - 1.0,
        (ml + d) as f64,
        (mt + d) as f64,
    );
    cv.line(x0, y0, x1, y0, BLACK);
    cv.line(x0, y1, x1, y1, BLACK);
    cv.line(x0, y0, x0, y1, BLACK);
    cv.line(x1, y0, x1, y1, BLACK);

    // Axes: l, m in degrees. Display x = 0 is column n−1 (most positive l).
    let c0 = (n / 2) as f64;
    let cell_deg = img.cell_rad.to_degrees();
    let l_hi = (n as f64 - 1.0 - c0 + 0.5) * cell_deg;
    let l_lo = (-c0 - 0.5) * cell_deg;
    let to_x = |l: f64| ml as f64 + (l_hi - l) / (l_hi - l_lo) * d as f64;
    let to_y = |m: f64| mt as f64 + (l_hi - m) / (l_hi - l_lo) * d as f64;
    for t in ticks(l_lo, l_hi, 5) {
        let x = to_x(t);
        cv.line(x, y1, x, y1 + 5.0, BLACK);
        let s = fmt_num(t);
        let tw = Canvas::text_width(&s, 1) as f64;
        cv.text((x - tw / 2.0) as i64, (y1 + 8.0) as i64, &s, 1, BLACK);
        let y = to_y(t);
        cv.line(x0 - 5.0, y, x0, y, BLACK);
        let tw = Canvas::text_width(&s, 1) as f64;
        cv.text((x0 - 8.0 - tw) as i64, (y - 3.0) as i64, &s, 1, BLACK);
    }
    let xl = "L [DEG] (EAST LEFT)";
    let xw = Canvas::text_width(xl, 2) as f64;
    cv.text(
        (ml as f64 + d as f64 / 2.0 - xw / 2.0) as i64,
        (y1 + 26.0) as i64,
        xl,
        2,
        BLACK,
    );
    let yl = "M [DEG]";
    let yw = Canvas::text_width(yl, 2) as f64;
    cv.text_vertical(
        12,
        (mt as f64 + d as f64 / 2.0 + yw / 2.0) as i64,
        yl,
        2,
        BLACK,
    );
    let tw = Canvas::text_width(title, 2) as f64;
    cv.text(((w as f64 - tw) / 2.0).max(2.0) as i64, 12, title, 2, BLACK);

    // Colour bar.
    let bx = (ml + d + bar_gap) as i64;
    for y in 0..d {
        let t = 1.0 - y as f64 / (d - 1) as f64;
        cv.rect(bx, (mt + y) as i64, bar_w as i64, 1, colour(t));
    }
    for t in ticks(lo, hi, 6) {
        let y = mt as f64 + (hi - t) / (hi - lo) * (d - 1) as f64;
        let xe = (bx + bar_w as i64) as f64;
        // Tick inside the bar so it does not read as a minus sign next to the label.
        cv.line(xe - 5.0, y, xe - 1.0, y, BLACK);
        cv.text(
            xe as i64 + 5,
            (y - GLYPH_H as f64 / 2.0) as i64,
            &fmt_num(t),
            1,
            BLACK,
        );
    }
    cv.text(bx, (mt + d + 8) as i64, "JY/BEAM", 1, BLACK);
    cv.write_png(path)
}

/// Writes a line plot of `power` against frequency (MHz) with a log10 power axis.
/// Non-positive or non-finite powers are left out of the line.
pub fn write_spectrum_png(
    path: &Path,
    freqs_hz: &[f64],
    power: &[f64],
    title: &str,
) -> std::io::Result<()> {
    if freqs_hz.is_empty() || freqs_hz.len() != power.len() {
        return Err(bad_input(format!(
            "spectrum needs equal, non-zero lengths (freqs {}, power {})",
            freqs_hz.len(),
            power.len()
        )));
    }
    if freqs_hz.iter().any(|f| !f.is_finite()) {
        return Err(bad_input("frequencies must be finite".into()));
    }
    let (w, h) = (900usize, 520usize);
    let (ml, mr, mt, mb) = (90usize, 30usize, 40usize, 60usize);
    let (pw, ph) = ((w - ml - mr) as f64, (h - mt - mb) as f64);
    let mut cv = Canvas::new(w, h, WHITE);

    let f_mhz: Vec<f64> = freqs_hz.iter().map(|f| f / 1e6).collect();
    let fmin = f_mhz.iter().cloned().fold(f64::INFINITY, f64::min);
    let fmax = f_mhz.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let (fmin, fmax) = if fmax > fmin {
        (fmin, fmax)
    } else {
        (fmin - 0.5, fmin + 0.5)
    };
    let logs: Vec<Option<f64>> = power
        .iter()
        .map(|&p| (p.is_finite() && p > 0.0).then(|| p.log10()))
        .collect();
    let lmin = logs.iter().flatten().cloned().fold(f64::INFINITY, f64::min);
    let lmax = logs
        .iter()
        .flatten()
        .cloned()
        .fold(f64::NEG_INFINITY, f64::max);
    let (lmin, lmax) = if lmin.is_finite() {
        let lo = lmin.floor();
        let hi = lmax.ceil().max(lo + 1.0);
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    let to_x = |f: f64| ml as f64 + (f - fmin) / (fmax - fmin) * pw;
    let to_y = |l: f64| mt as f64 + (lmax - l) / (lmax - lmin) * ph;

    // Grid, ticks and labels.
    let (x0, y0, x1, y1) = (ml as f64, mt as f64, ml as f64 + pw, mt as f64 + ph);
    let decade_step = ((lmax - lmin) / 8.0).ceil().max(1.0);
    let mut e = lmin;
    while e <= lmax + 1e-9 {
        let y = to_y(e);
        cv.line(x0, y, x1, y, GREY);
        cv.line(x0 - 5.0, y, x0, y, BLACK);
        let s = format!("1E{}", e as i64);
        let tw = Canvas::text_width(&s, 1) as f64;
        cv.text((x0 - 8.0 - tw) as i64, (y - 3.0) as i64, &s, 1, BLACK);
        e += decade_step;
    }
    for t in ticks(fmin, fmax, 8) {
        let x = to_x(t);
        cv.line(x, y0, x, y1, GREY);
        cv.line(x, y1, x, y1 + 5.0, BLACK);
        let s = fmt_num(t);
        let tw = Canvas::text_width(&s, 1) as f64;
        cv.text((x - tw / 2.0) as i64, (y1 + 8.0) as i64, &s, 1, BLACK);
    }
    cv.line(x0, y0, x1, y0, BLACK);
    cv.line(x0, y1, x1, y1, BLACK);
    cv.line(x0, y0, x0, y1, BLACK);
    cv.line(x1, y0, x1, y1, BLACK);

    // The line (broken at missing points); a lone point gets a small square.
    let mut prev: Option<(f64, f64)> = None;
    for (f, l) in f_mhz.iter().zip(&logs) {
        match l {
            Some(l) => {
                let p = (to_x(*f), to_y(*l));
                if let Some(q) = prev {
                    cv.line(q.0, q.1, p.0, p.1, BLUE);
                    cv.line(q.0, q.1 + 1.0, p.0, p.1 + 1.0, BLUE);
                } else {
                    cv.rect(p.0 as i64 - 1, p.1 as i64 - 1, 3, 3, BLUE);
                }
                prev = Some(p);
            }
            None => prev = None,
        }
    }

    let xl = "FREQUENCY [MHZ]";
    let xw = Canvas::text_width(xl, 2) as f64;
    cv.text(
        (x0 + pw / 2.0 - xw / 2.0) as i64,
        (y1 + 26.0) as i64,
        xl,
        2,
        BLACK,
    );
    let yl = "POWER (LOG SCALE)";
    let yw = Canvas::text_width(yl, 2) as f64;
    cv.text_vertical(12, (y0 + ph / 2.0 + yw / 2.0) as i64, yl, 2, BLACK);
    let tw = Canvas::text_width(title, 2) as f64;
    cv.text(((w as f64 - tw) / 2.0).max(2.0) as i64, 12, title, 2, BLACK);
    cv.write_png(path)
}
