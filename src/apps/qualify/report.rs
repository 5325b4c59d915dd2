//! `report.json` (every check's numbers and plot data, the configuration, the engines'
//! exits) and `report.html`: one self-contained page (no external file: plots are PNG data
//! URIs) with a summary table and a section per check.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use super::plot;
use super::result::{fmt_value, CheckResult};
use super::QualifyArgs;

/// Escapes text for HTML.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// The configuration as the report shows it.
fn config(args: &QualifyArgs) -> serde_json::Value {
    json!({
        "backend": args.backend.name(),
        "antennas": args.antennas,
        "channels": args.channels,
        "adc_sample_rate": args.adc_sample_rate,
        "narrowband": args.narrowband,
        "int_time": args.int_time,
        "only": args.only,
        "seed": args.seed,
        "debug_break": args.debug_break.map(|d| format!("{d:?}")),
    })
}

/// What the run skipped, and its warm-up.
#[derive(Debug, Clone, Copy, Default)]
pub struct Skipped {
    /// Dumps skipped by the checks because an antenna's data were lost for part of them.
    pub incomplete_dumps: u64,
    /// Beam heaps skipped after the warm-up because they were formed from fewer antennas
    /// than the array's.
    pub incomplete_beam_heaps: u64,
    /// Seconds from the harness's start until every correlator stream sent a whole dump.
    pub warm_up_seconds: f64,
    /// Dumps with MISSING markers during the warm-up (the engines starting).
    pub warm_up_incomplete_dumps: u64,
    /// Beam heaps formed from fewer antennas during the warm-up.
    pub warm_up_incomplete_beam_heaps: u64,
}

/// Writes `report.json` and `report.html` into `dir`.
pub fn write(
    dir: &Path,
    args: &QualifyArgs,
    results: &[CheckResult],
    engines: &[serde_json::Value],
    skipped: Skipped,
) -> anyhow::Result<()> {
    let passed = results.iter().all(|r| r.passed);
    let doc = json!({
        "passed": passed,
        "checks_passed": results.iter().filter(|r| r.passed).count(),
        "checks": results,
        "config": config(args),
        "engines": engines,
        "incomplete_dumps_skipped": skipped.incomplete_dumps,
        "incomplete_beam_heaps_skipped": skipped.incomplete_beam_heaps,
        "warm_up": {
            "seconds": skipped.warm_up_seconds,
            "incomplete_dumps": skipped.warm_up_incomplete_dumps,
            "incomplete_beam_heaps": skipped.warm_up_incomplete_beam_heaps,
        },
    });
    std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(&doc)?)?;
    std::fs::write(dir.join("report.html"), html(args, results, engines)?)?;
    Ok(())
}

/// The report page.
pub fn html(
    args: &QualifyArgs,
    results: &[CheckResult],
    engines: &[serde_json::Value],
) -> anyhow::Result<String> {
    let n_pass = results.iter().filter(|r| r.passed).count();
    let verdict = if n_pass == results.len() {
        "PASSED"
    } else {
        "FAILED"
    };
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.push_str("<title>gpucbf qualification report</title>\n<style>\n");
    h.push_str(
        "body{font-family:sans-serif;margin:2em;max-width:1000px}\
         table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:3px 8px;text-align:left;vertical-align:top}\
         .pass{color:#060;font-weight:bold}.fail{color:#b00;font-weight:bold}\
         section{border-top:2px solid #444;margin-top:2em}img{max-width:100%}\
         pre{background:#f4f4f4;padding:6px;overflow-x:auto;font-size:12px}\n",
    );
    h.push_str("</style>\n</head>\n<body>\n");
    let _ = writeln!(
        h,
        "<h1>gpucbf qualification report: <span class=\"{}\">{verdict}</span></h1>",
        if verdict == "PASSED" { "pass" } else { "fail" }
    );
    let _ = writeln!(
        h,
        "<p>{n_pass} of {} checks passed. Backend {}, {} antennas, {} channels, ADC {} Hz, \
         integration {} s{}.</p>",
        results.len(),
        esc(args.backend.name()),
        args.antennas,
        args.channels,
        fmt_value(args.adc_sample_rate),
        args.int_time,
        if args.narrowband {
            ", narrowband on"
        } else {
            ""
        }
    );
    if let Some(d) = args.debug_break {
        let _ = writeln!(
            h,
            "<p class=\"fail\">Test run: the engines were broken on purpose (--debug-break {d:?}).</p>"
        );
    }
    h.push_str("<h2>Summary</h2>\n<table>\n<tr><th>check</th><th>requirement</th><th>measured</th><th>threshold</th><th>result</th></tr>\n");
    for r in results {
        let _ = writeln!(
            h,
            "<tr><td><a href=\"#{n}\">{n}</a></td><td>{}</td><td>{} {}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
            esc(&r.requirement),
            esc(&fmt_value(r.measured)),
            esc(&r.unit),
            esc(&r.threshold),
            if r.passed { "pass" } else { "fail" },
            if r.passed { "PASS" } else { "FAIL" },
            n = esc(&r.name),
        );
    }
    h.push_str("</table>\n");
    for r in results {
        let _ = writeln!(h, "<section id=\"{}\">", esc(&r.name));
        let _ = writeln!(
            h,
            "<h2>{} <span class=\"{}\">{}</span></h2>",
            esc(&r.name),
            if r.passed { "pass" } else { "fail" },
            if r.passed { "PASS" } else { "FAIL" }
        );
        h.push_str("<table>\n");
        let rows = [
            ("Requirement", r.requirement.clone()),
            ("Requirement text", r.text.clone()),
            ("Method", r.method.clone()),
            ("Measured", format!("{} {}", fmt_value(r.measured), r.unit)),
            ("Threshold", r.threshold.clone()),
            ("Message", r.message.clone()),
            ("Time", format!("{:.1} s", r.seconds)),
        ];
        for (k, v) in rows {
            if !v.is_empty() {
                let _ = writeln!(h, "<tr><th>{k}</th><td>{}</td></tr>", esc(&v));
            }
        }
        h.push_str("</table>\n");
        for p in &r.plots {
            if let Some(png) = plot::png(p)? {
                let _ = writeln!(
                    h,
                    "<p><img alt=\"{}\" src=\"data:image/png;base64,{}\"></p>",
                    esc(&p.title),
                    plot::base64(&png)
                );
            }
        }
        if !r.details.is_null() {
            let text = serde_json::to_string_pretty(&r.details)?;
            let text = if text.len() > 4000 {
                let mut end = 4000;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                format!("{}\n…", &text[..end])
            } else {
                text
            };
            let _ = writeln!(
                h,
                "<details><summary>Details</summary><pre>{}</pre></details>",
                esc(&text)
            );
        }
        h.push_str("</section>\n");
    }
    h.push_str("<section><h2>Engines</h2>\n<pre>");
    h.push_str(&esc(&serde_json::to_string_pretty(engines)?));
    h.push_str("</pre></section>\n</body>\n</html>\n");
    Ok(h)
}
