//! `soak.png`: six panels a person reads at a glance (heap rate, losses, lag, RSS, CPU per
//! thread, chunk queues), one colour per engine, the warm-up shaded, and the verdict in the
//! title. Drawn with plotters' bitmap backend; text through ab_glyph with DejaVu Sans
//! embedded from the `dejavu` crate, so no system font is needed; encoded with `png`.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, Context};
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::curves::{self, Curve};
use super::sampler::EngineLog;
use super::series::Kind;
use super::summary::SoakSummary;

/// Image size in pixels.
const W: u32 = 1600;
const H: u32 = 1200;
/// Height of the title and legend strip.
const HEAD: u32 = 96;
/// Samples a heap rate is averaged over.
const RATE_SAMPLES: usize = 3;
/// Threads drawn in the CPU panel (the busiest over all engines).
const MAX_THREADS: usize = 10;

/// Engine colours (matplotlib's tab10).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
const WARM_UP: RGBColor = RGBColor(228, 228, 228);
const PASS: RGBColor = RGBColor(0, 128, 0);
const FAIL: RGBColor = RGBColor(200, 0, 0);

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// Colour `k` of the palette (wrapping).
pub(crate) fn colour(k: usize) -> RGBColor {
    PALETTE[k % PALETTE.len()]
}

/// Registers the embedded font as plotters' `sans-serif` (once per process; the
/// qualification report's plots use it too).
pub(crate) fn register_font() -> anyhow::Result<()> {
    static LOADED: OnceLock<bool> = OnceLock::new();
    let ok = *LOADED.get_or_init(|| {
        let font = dejavu::sans::regular();
        plotters::style::register_font("sans-serif", FontStyle::Normal, font).is_ok()
    });
    ok.then_some(())
        .ok_or_else(|| anyhow!("the embedded DejaVu Sans font did not load"))
}

/// Draws the report of `logs` into `path`.
pub fn write_png(path: &Path, logs: &[EngineLog], summary: &SoakSummary) -> anyhow::Result<()> {
    register_font()?;
    let mut buf = vec![0u8; (W * H * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (W, H)).into_drawing_area();
        draw(&root, logs, summary).map_err(|e| anyhow!("drawing {}: {e}", path.display()))?;
        root.present()
            .map_err(|e| anyhow!("drawing {}: {e}", path.display()))?;
    }
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(f), W, H);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header()
        .and_then(|mut w| w.write_image_data(&buf))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(root: &Area, logs: &[EngineLog], summary: &SoakSummary) -> DrawResult {
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(HEAD);
    draw_head(&head, logs, summary)?;
    let panels = body.split_evenly((3, 2));
    let t_end = logs
        .iter()
        .filter_map(|l| l.samples.last())
        .map(|s| s.elapsed)
        .fold(1.0, f64::max);
    let warm = summary.limits.warm_up_s;

    let by_engine = |f: &dyn Fn(&EngineLog) -> Curve| -> Vec<(String, RGBColor, Curve, bool)> {
        logs.iter()
            .enumerate()
            .map(|(k, l)| (l.target.name.clone(), colour(k), f(l), false))
            .collect()
    };
    let any_output_rate = logs.iter().any(|l| {
        l.ids_of(Kind::InputHeaps).next().is_none() && l.ids_of(Kind::OutputHeaps).next().is_some()
    });
    // Engines count heaps per chunk: a rate over several samples reads steadier.
    let window = RATE_SAMPLES as f64 * summary.interval_s;
    let rate_title = format!(
        "Heaps received per second{}, {window:.0} s mean, log scale",
        if any_output_rate { " (dsim: sent)" } else { "" }
    );
    let x = (t_end, warm);
    let heap_rate = by_engine(&|l| curves::heap_rate(l, window * 0.99));
    panel(
        &panels[0],
        &rate_title,
        "heaps/s",
        x,
        &heap_rate,
        Scale::Log,
    )?;
    let title = "Heaps lost since the start (missing, too old, rejected, incomplete, skipped)";
    panel(
        &panels[1],
        title,
        "heaps",
        x,
        &by_engine(&curves::losses),
        Scale::Linear,
    )?;
    let title = "Output lag: wall clock - data time of last output (dsim: time error)";
    panel(
        &panels[2],
        title,
        "seconds",
        x,
        &by_engine(&curves::lag),
        Scale::Linear,
    )?;
    let rss = by_engine(&curves::rss_mib);
    panel(
        &panels[3],
        "Resident memory (RSS)",
        "MiB",
        x,
        &rss,
        Scale::Linear,
    )?;

    // CPU: the busiest threads over all engines, coloured by rank, labelled engine/thread.
    let mut threads: Vec<(String, Curve, f64)> = logs
        .iter()
        .flat_map(|l| {
            curves::thread_cpu(l, summary.interval_s * 0.9)
                .into_iter()
                .map(move |(t, c, secs)| (format!("{}/{t}", l.target.name), c, secs))
        })
        .collect();
    threads.sort_by(|a, b| b.2.total_cmp(&a.2));
    let cpu: Vec<_> = threads
        .into_iter()
        .take(MAX_THREADS)
        .enumerate()
        .map(|(k, (name, c, _))| (name, colour(k), c, false))
        .collect();
    let cpu_title = format!("CPU per thread, {MAX_THREADS} busiest (100 % = one core)");
    panel(
        &panels[4],
        &cpu_title,
        "% of a core",
        x,
        &cpu,
        Scale::Linear,
    )?;
    draw_legend_in(&panels[4], &cpu)?;

    let mut queues = Vec::new();
    for (k, l) in logs.iter().enumerate() {
        queues.push((
            l.target.name.clone(),
            colour(k),
            curves::queue(l, Kind::ReadyChunks),
            false,
        ));
        queues.push((
            l.target.name.clone(),
            colour(k),
            curves::queue(l, Kind::FreeChunks),
            true,
        ));
    }
    let title = "Chunk queues: ready for the engine (solid), free (dashed)";
    panel(&panels[5], title, "chunks", x, &queues, Scale::Linear)?;
    Ok(())
}

/// Title (verdict), the first problems and the engine colour legend.
fn draw_head(area: &Area, logs: &[EngineLog], summary: &SoakSummary) -> DrawResult {
    let v = &summary.verdict;
    let (word, c) = if v.ok { ("PASS", PASS) } else { ("FAIL", FAIL) };
    let title = format!(
        "gpucbf soak  {word}   {} engine(s), {:.0} s, warm-up {:.0} s (shaded), sampled every {} s",
        logs.len(),
        summary.duration_s,
        summary.limits.warm_up_s,
        summary.interval_s
    );
    area.draw(&Text::new(
        title,
        (16, 8),
        ("sans-serif", 30).into_font().color(&c),
    ))?;
    let detail = match v.problems.as_slice() {
        [] => "nothing lost after the warm-up".to_string(),
        [p] => p.message.clone(),
        [p, rest @ ..] => format!("{}   (+{} more in soak.json)", p.message, rest.len()),
    };
    area.draw(&Text::new(
        detail,
        (16, 44),
        ("sans-serif", 18).into_font().color(&c),
    ))?;
    let mut x = 16;
    let style: TextStyle = ("sans-serif", 18).into();
    for (k, l) in logs.iter().enumerate() {
        // Engines that raised a problem are named in red, with what failed.
        let mut failed: Vec<&str> = v
            .problems
            .iter()
            .filter(|p| p.engine == l.target.name)
            .map(|p| p.what.as_str())
            .collect();
        failed.dedup();
        let (label, text_colour) = if failed.is_empty() {
            (l.target.name.clone(), BLACK)
        } else {
            (format!("{} ({})", l.target.name, failed.join(", ")), FAIL)
        };
        area.draw(&Rectangle::new([(x, 72), (x + 24, 86)], colour(k).filled()))?;
        area.draw(&Text::new(
            label.clone(),
            (x + 30, 70),
            style.color(&text_colour),
        ))?;
        let (w, _) = area.estimate_text_size(&label, &style)?;
        x += 30 + w as i32 + 24;
        if x > W as i32 - 120 {
            break;
        }
    }
    Ok(())
}

/// (label, colour, points, dashed).
type Line = (String, RGBColor, Curve, bool);

/// How a panel's y axis is scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    /// Logarithmic; values below the axis (zero: a stall) are drawn on its floor.
    Log,
}

/// One panel: time on x, the warm-up shaded, one line per entry.
fn panel(
    area: &Area,
    title: &str,
    unit: &str,
    (t_end, warm): (f64, f64),
    lines: &[Line],
    scale: Scale,
) -> DrawResult {
    let ys = || lines.iter().flat_map(|l| l.2.iter().map(|p| p.1));
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 19))
        .margin(12)
        .x_label_area_size(34)
        .y_label_area_size(72);
    match scale {
        Scale::Linear => {
            let (lo, hi) = ys().fold((0.0f64, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
            let span = if hi > lo { hi - lo } else { hi.abs().max(1.0) };
            let y0 = lo - if lo < 0.0 { span * 0.05 } else { 0.0 };
            let y1 = lo + span * 1.08;
            let chart = builder.build_cartesian_2d(0.0..t_end, y0..y1)?;
            fill(chart, unit, (t_end, warm), (y0, y1), lines)
        }
        Scale::Log => {
            let pos = ys().filter(|y| *y > 0.0);
            let (lo, hi) = pos.fold((f64::INFINITY, 0.0f64), |(lo, hi), y| {
                (lo.min(y), hi.max(y))
            });
            let (y0, y1) = if hi > 0.0 {
                (lo / 4.0, hi * 4.0)
            } else {
                (0.1, 10.0)
            };
            let floored: Vec<Line> = lines
                .iter()
                .map(|(n, c, pts, d)| {
                    let pts = pts.iter().map(|&(t, v)| (t, v.max(y0))).collect();
                    (n.clone(), *c, pts, *d)
                })
                .collect();
            let chart = builder.build_cartesian_2d(0.0..t_end, (y0..y1).log_scale())?;
            fill(chart, unit, (t_end, warm), (y0, y1), &floored)
        }
    }
}

/// Draws the mesh, the warm-up and the lines of a panel's chart.
fn fill<Y>(
    mut chart: ChartContext<'_, BitMapBackend<'_>, Cartesian2d<RangedCoordf64, Y>>,
    unit: &str,
    (t_end, warm): (f64, f64),
    (y0, y1): (f64, f64),
    lines: &[Line],
) -> DrawResult
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("seconds since start")
        .y_desc(unit)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .light_line_style(RGBColor(240, 240, 240))
        .y_label_formatter(&|v| short(*v))
        .draw()?;
    if warm > 0.0 {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y0), (warm.min(t_end), y1)],
            WARM_UP.mix(0.6).filled(),
        )))?;
    }
    for (_, c, pts, dashed) in lines {
        let style = c.stroke_width(2);
        if *dashed {
            chart.draw_series(DashedLineSeries::new(pts.iter().copied(), 6, 4, style))?;
        } else {
            chart.draw_series(LineSeries::new(pts.iter().copied(), style))?;
        }
    }
    if lines.iter().all(|l| l.2.is_empty()) {
        let (w, h) = chart.plotting_area().dim_in_pixel();
        chart.plotting_area().strip_coord_spec().draw(&Text::new(
            "no data",
            (w as i32 / 2 - 30, h as i32 / 2),
            ("sans-serif", 20)
                .into_font()
                .color(&RGBColor(150, 150, 150)),
        ))?;
    }
    Ok(())
}

/// A legend box in the panel's upper right (the CPU panel, whose lines are threads).
fn draw_legend_in(area: &Area, lines: &[Line]) -> DrawResult {
    let style: TextStyle = ("sans-serif", 13).into();
    let widest = lines
        .iter()
        .map(|l| area.estimate_text_size(&l.0, &style).map(|(w, _)| w))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .max()
        .unwrap_or(0) as i32;
    let (w, _) = area.dim_in_pixel();
    let x0 = w as i32 - widest - 60;
    let y0 = 50;
    let h = 17 * lines.len() as i32 + 8;
    area.draw(&Rectangle::new(
        [(x0, y0), (x0 + widest + 40, y0 + h)],
        WHITE.mix(0.85).filled(),
    ))?;
    for (k, (name, c, _, _)) in lines.iter().enumerate() {
        let y = y0 + 6 + 17 * k as i32;
        area.draw(&Rectangle::new(
            [(x0 + 6, y + 4), (x0 + 26, y + 8)],
            c.filled(),
        ))?;
        area.draw(&Text::new(name.clone(), (x0 + 32, y), style.clone()))?;
    }
    Ok(())
}

/// A tick label: large values with k/M/G, others with at most 3 decimals, trailing zeros
/// dropped (`3.5`, not `3.500`).
fn short(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if a >= 1e9 {
        trim(format!("{:.2}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e4 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else {
        trim(format!("{v:.3}"))
    }
}

#[cfg(test)]
mod tests {
    use super::short;

    #[test]
    fn tick_labels() {
        let got: Vec<String> = [0.0, 3.5, 0.1, 0.125, 4.0, 250.0, 12500.0, 2.5e6, 3e9, -0.05]
            .iter()
            .map(|&v| short(v))
            .collect();
        assert_eq!(
            got,
            ["0", "3.5", "0.1", "0.125", "4", "250", "12.5k", "2.5M", "3G", "-0.05"]
        );
    }
}
