//! The Prometheus text exposition format (0.0.4) and OpenMetrics text, as served at
//! `/metrics`: one sample per line, `name{label="value",...} value [timestamp]`. Comments
//! (`# HELP`, `# TYPE`, `# EOF`) and blank lines are skipped; a line that is none of these
//! and does not parse is counted, never fatal.

/// One sample line of a page.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpoSample {
    /// Metric name as exported (counters with their `_total` suffix).
    pub name: String,
    /// Label pairs in page order, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value (`+Inf`, `-Inf` and `NaN` included).
    pub value: f64,
}

/// The samples of one page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    /// Every sample line that parsed, in page order.
    pub samples: Vec<ExpoSample>,
    /// Lines that were neither blank, a comment nor a valid sample.
    pub malformed: usize,
}

/// Parses a page. Never fails: lines that do not parse are counted in
/// [`Exposition::malformed`].
pub fn parse(text: &str) -> Exposition {
    let mut out = Exposition::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_line(line) {
            Some(s) => out.samples.push(s),
            None => out.malformed += 1,
        }
    }
    out
}

/// A sample value: a float, `+Inf`/`Inf`/`-Inf` or `NaN` (any case).
pub fn parse_value(tok: &str) -> Option<f64> {
    match tok.to_ascii_lowercase().as_str() {
        "+inf" | "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        // Rust's parser also takes "infinity" and friends; the format has no such words.
        t if t.contains("inf") || t.contains("nan") => None,
        t => t.parse().ok(),
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// A name at the start of `s` (`[a-zA-Z_:][a-zA-Z0-9_:]*`) and the rest.
fn take_name(s: &str) -> Option<(&str, &str)> {
    if !s.starts_with(is_name_start) {
        return None;
    }
    let end = s.find(|c| !is_name_char(c)).unwrap_or(s.len());
    Some(s.split_at(end))
}

fn parse_line(line: &str) -> Option<ExpoSample> {
    let (name, after_name) = take_name(line)?;
    let (labels, rest) = match after_name.trim_start().strip_prefix('{') {
        Some(r) => parse_labels(r)?,
        None => (Vec::new(), after_name),
    };
    // The value must be separated from the name or label set by white space.
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    // Value, then an optional timestamp and an optional OpenMetrics exemplar (`# {...} v`).
    let mut toks = rest.split_whitespace();
    let value = parse_value(toks.next()?)?;
    match toks.next() {
        None => {}
        Some("#") => {}
        Some(ts) => {
            parse_value(ts)?;
            if !matches!(toks.next(), None | Some("#")) {
                return None;
            }
        }
    }
    Some(ExpoSample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `name="value",...}` (after the `{`); returns the pairs and what follows the `}`.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(r) = s.strip_prefix('}') {
            return Some((labels, r));
        }
        let (key, r) = take_name(s)?;
        let r = r.trim_start().strip_prefix('=')?.trim_start();
        let (value, r) = parse_quoted(r.strip_prefix('"')?)?;
        labels.push((key.to_string(), value));
        let r = r.trim_start();
        s = match r.strip_prefix(',') {
            Some(r) => r,
            None if r.starts_with('}') => r,
            None => return None,
        };
    }
}

/// A label value after its opening quote, with `\\`, `\"` and `\n` unescaped; returns the
/// value and what follows the closing quote.
fn parse_quoted(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &s[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                '\\' => out.push('\\'),
                '"' => out.push('"'),
                other => {
                    // Prometheus keeps an unknown escape as written.
                    out.push('\\');
                    out.push(other);
                }
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> ExpoSample {
        let e = parse(line);
        assert_eq!(e.malformed, 0, "{line}");
        assert_eq!(e.samples.len(), 1, "{line}");
        e.samples[0].clone()
    }

    #[test]
    fn names_labels_and_values() {
        let s = one("fgpu_input_heaps_total{pol=\"0\"} 1234");
        assert_eq!(s.name, "fgpu_input_heaps_total");
        assert_eq!(s.labels, vec![("pol".into(), "0".into())]);
        assert_eq!(s.value, 1234.0);
        let s = one("xbgpu_input_ready_chunks 3");
        assert!(s.labels.is_empty());
        assert_eq!(s.value, 3.0);
        let s = one("dsim_time_error_s -1.5e-3 1700000000000");
        assert_eq!(s.value, -1.5e-3);
        let s = one("a:b_c { x = \"1\" , y=\"2\", } 7\r");
        assert_eq!(s.name, "a:b_c");
        assert_eq!(
            s.labels,
            vec![("x".into(), "1".into()), ("y".into(), "2".into())]
        );
        assert_eq!(s.value, 7.0);
    }

    #[test]
    fn special_values() {
        assert_eq!(one("h_bucket{le=\"+Inf\"} +Inf").value, f64::INFINITY);
        assert_eq!(one("g -Inf").value, f64::NEG_INFINITY);
        assert!(one("g NaN").value.is_nan());
        assert_eq!(one("g inf").value, f64::INFINITY);
        assert_eq!(parse_value("infinity"), None);
        assert_eq!(parse_value("0x10"), None);
        assert_eq!(parse_value("1e3"), Some(1000.0));
    }

    #[test]
    fn escapes_and_separators_inside_label_values() {
        let s = one(r#"m{stream="a,b}c",path="C:\\x",q="say \"hi\"\n"} 1"#);
        assert_eq!(s.labels[0].1, "a,b}c");
        assert_eq!(s.labels[1].1, "C:\\x");
        assert_eq!(s.labels[2].1, "say \"hi\"\n");
    }

    #[test]
    fn comments_blank_lines_and_exemplars() {
        let page = "# HELP fgpu_input_heaps Digitiser heaps received.\n\
                    # TYPE fgpu_input_heaps counter\n\
                    \n\
                    fgpu_input_heaps_total{pol=\"1\"} 10 # {trace_id=\"x\"} 1.0\n\
                    fgpu_input_heaps_created{pol=\"1\"} 1.7e9\n\
                    # EOF\n";
        let e = parse(page);
        assert_eq!(e.malformed, 0);
        assert_eq!(e.samples.len(), 2);
        assert_eq!(e.samples[0].value, 10.0);
    }

    #[test]
    fn malformed_lines_are_counted_and_skipped() {
        let page = "good 1\n\
                    9bad 1\n\
                    novalue\n\
                    nospace{a=\"1\"}1\n\
                    unterminated{a=\"1} 2\n\
                    nolabelquote{a=1} 2\n\
                    trailing 1 2 3\n\
                    text abc\n\
                    also_good{a=\"\"} 2.5\n";
        let e = parse(page);
        assert_eq!(e.malformed, 7, "{e:?}");
        let names: Vec<&str> = e.samples.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["good", "also_good"]);
    }

    #[test]
    fn parses_what_the_engines_render() {
        let m = crate::telemetry::metrics::Metrics::new("xbgpu");
        let f = m.counter_family("output_x_heaps", "heaps");
        f.get_or_create(&crate::telemetry::metrics::labels(&[("stream", "bl\"x")]))
            .inc_by(4);
        m.gauge_f64("output_lag_seconds", "lag").set(0.25);
        let e = parse(&m.render());
        assert_eq!(e.malformed, 0, "{}", m.render());
        let x = e
            .samples
            .iter()
            .find(|s| s.name == "xbgpu_output_x_heaps_total")
            .unwrap();
        assert_eq!(x.labels, vec![("stream".into(), "bl\"x".into())]);
        assert_eq!(x.value, 4.0);
        assert!(e
            .samples
            .iter()
            .any(|s| s.name == "xbgpu_output_lag_seconds" && s.value == 0.25));
    }
}
