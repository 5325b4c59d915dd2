//! A check's plots as PNG images (plotters' bitmap backend, the embedded DejaVu Sans font,
//! encoded with `png`), base64-encoded for `report.html`'s data URIs.

use anyhow::anyhow;
use plotters::prelude::*;

use super::result::Plot;

/// Image size in pixels.
const W: u32 = 900;
const H: u32 = 420;

/// The x and y ranges of every finite point and threshold line, padded.
fn ranges(p: &Plot) -> Option<((f64, f64), (f64, f64))> {
    let pts = p
        .series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    let mut any = false;
    for &(x, y) in pts {
        any = true;
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !any {
        return None;
    }
    for (y, _) in &p.hlines {
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    let pad = |a: f64, b: f64| {
        let d = if b > a {
            (b - a) * 0.05
        } else {
            a.abs().max(1.0) * 0.1
        };
        (a - d, b + d)
    };
    Some((pad(x0, x1), pad(y0, y1)))
}

/// Draws `p` as a PNG; `None` when it has no finite point.
pub fn png(p: &Plot) -> anyhow::Result<Option<Vec<u8>>> {
    let Some(((x0, x1), (y0, y1))) = ranges(p) else {
        return Ok(None);
    };
    crate::apps::soak::plot::register_font()?;
    let mut buf = vec![0u8; (W * H * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (W, H)).into_drawing_area();
        draw(&root, p, (x0, x1), (y0, y1)).map_err(|e| anyhow!("plot {:?}: {e}", p.title))?;
        root.present()
            .map_err(|e| anyhow!("plot {:?}: {e}", p.title))?;
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, W, H);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.write_header()
            .and_then(|mut w| w.write_image_data(&buf))
            .map_err(|e| anyhow!("encoding plot {:?}: {e}", p.title))?;
    }
    Ok(Some(out))
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(
    root: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    p: &Plot,
    x: (f64, f64),
    y: (f64, f64),
) -> DrawResult {
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(&p.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x.0..x.1, y.0..y.1)?;
    chart
        .configure_mesh()
        .x_desc(p.x_label.as_str())
        .y_desc(p.y_label.as_str())
        .label_style(("sans-serif", 13))
        .draw()?;
    for (i, s) in p.series.iter().enumerate() {
        let colour = crate::apps::soak::plot::colour(i);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(a, b)| a.is_finite() && b.is_finite())
            .collect();
        let series = if s.markers {
            chart.draw_series(pts.iter().map(|&pt| Circle::new(pt, 3, colour.filled())))?
        } else {
            chart.draw_series(LineSeries::new(pts, colour.stroke_width(2)))?
        };
        if !s.name.is_empty() {
            series
                .label(s.name.as_str())
                .legend(move |(a, b)| PathElement::new(vec![(a, b), (a + 16, b)], colour));
        }
    }
    for (yv, label) in &p.hlines {
        let red = RGBColor(200, 0, 0);
        chart
            .draw_series(LineSeries::new(
                vec![(x.0, *yv), (x.1, *yv)],
                red.stroke_width(1),
            ))?
            .label(format!("threshold {label}"))
            .legend(move |(a, b)| PathElement::new(vec![(a, b), (a + 16, b)], red));
    }
    if p.series.iter().any(|s| !s.name.is_empty()) || !p.hlines.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()?;
    }
    Ok(())
}

/// Standard base64 (RFC 4648, padded).
pub fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let v = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(v >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    /// A plot with points becomes a PNG (signature and size); one without any is skipped.
    #[test]
    fn plots_render_as_png() {
        let p = Plot::line("t", "x", "y", "a", vec![(0.0, 1.0), (1.0, 3.0)]).hline(2.0, "2");
        let img = png(&p).unwrap().unwrap();
        assert_eq!(&img[..8], b"\x89PNG\r\n\x1a\n");
        let empty = Plot::line("t", "x", "y", "a", vec![(f64::NAN, 1.0)]);
        assert!(png(&empty).unwrap().is_none());
    }
}
