//! A built-in 5×7 bitmap font (ASCII digits, capitals, a little punctuation; lower case is
//! drawn as capitals) for plot labels, so no system fonts are needed.

/// Glyph width in font pixels.
pub(crate) const GLYPH_W: usize = 5;
/// Glyph height in font pixels.
pub(crate) const GLYPH_H: usize = 7;
/// Horizontal advance per character in font pixels (the glyph plus one blank column).
pub(crate) const ADVANCE: usize = 6;

/// Seven rows of five bits (bit 4 = leftmost column).
fn glyph(c: char) -> [u8; 7] {
    match c.to_ascii_uppercase() {
        '0' => [14, 17, 19, 21, 25, 17, 14],
        '1' => [4, 12, 4, 4, 4, 4, 14],
        '2' => [14, 17, 1, 2, 4, 8, 31],
        '3' => [31, 2, 4, 2, 1, 17, 14],
        '4' => [2, 6, 10, 18, 31, 2, 2],
        '5' => [31, 16, 30, 1, 1, 17, 14],
        '6' => [6, 8, 16, 30, 17, 17, 14],
        '7' => [31, 1, 2, 4, 8, 8, 8],
        '8' => [14, 17, 17, 14, 17, 17, 14],
        '9' => [14, 17, 17, 15, 1, 2, 12],
        'A' => [14, 17, 17, 31, 17, 17, 17],
        'B' => [30, 17, 17, 30, 17, 17, 30],
        'C' => [14, 17, 16, 16, 16, 17, 14],
        'D' => [28, 18, 17, 17, 17, 18, 28],
        'E' => [31, 16, 16, 30, 16, 16, 31],
        'F' => [31, 16, 16, 30, 16, 16, 16],
        'G' => [14, 17, 16, 23, 17, 17, 15],
        'H' => [17, 17, 17, 31, 17, 17, 17],
        'I' => [14, 4, 4, 4, 4, 4, 14],
        'J' => [7, 2, 2, 2, 2, 18, 12],
        'K' => [17, 18, 20, 24, 20, 18, 17],
        'L' => [16, 16, 16, 16, 16, 16, 31],
        'M' => [17, 27, 21, 21, 17, 17, 17],
        'N' => [17, 17, 25, 21, 19, 17, 17],
        'O' => [14, 17, 17, 17, 17, 17, 14],
        'P' => [30, 17, 17, 30, 16, 16, 16],
        'Q' => [14, 17, 17, 17, 21, 18, 13],
        'R' => [30, 17, 17, 30, 20, 18, 17],
        'S' => [15, 16, 16, 14, 1, 1, 30],
        'T' => [31, 4, 4, 4, 4, 4, 4],
        'U' => [17, 17, 17, 17, 17, 17, 14],
        'V' => [17, 17, 17, 17, 17, 10, 4],
        'W' => [17, 17, 17, 21, 21, 21, 10],
        'X' => [17, 17, 10, 4, 10, 17, 17],
        'Y' => [17, 17, 10, 4, 4, 4, 4],
        'Z' => [31, 1, 2, 4, 8, 16, 31],
        '.' => [0, 0, 0, 0, 0, 12, 12],
        ',' => [0, 0, 0, 0, 12, 4, 8],
        ':' => [0, 12, 12, 0, 12, 12, 0],
        '-' => [0, 0, 0, 31, 0, 0, 0],
        '+' => [0, 4, 4, 31, 4, 4, 0],
        '=' => [0, 0, 31, 0, 31, 0, 0],
        '/' => [1, 1, 2, 4, 8, 16, 16],
        '(' => [2, 4, 8, 8, 8, 4, 2],
        ')' => [8, 4, 2, 2, 2, 4, 8],
        '[' => [14, 8, 8, 8, 8, 8, 14],
        ']' => [14, 2, 2, 2, 2, 2, 14],
        '_' => [0, 0, 0, 0, 0, 0, 31],
        '%' => [24, 25, 2, 4, 8, 19, 3],
        '*' => [0, 4, 21, 14, 21, 4, 0],
        '\'' => [4, 4, 8, 0, 0, 0, 0],
        '<' => [2, 4, 8, 16, 8, 4, 2],
        '>' => [8, 4, 2, 1, 2, 4, 8],
        ' ' => [0; 7],
        _ => [31, 17, 17, 17, 17, 17, 31],
    }
}

/// An RGB canvas.
pub(crate) struct Canvas {
    /// Width in pixels.
    pub(crate) w: usize,
    /// Height in pixels.
    pub(crate) h: usize,
    /// `[row][column][r, g, b]`, row 0 at the top.
    pub(crate) rgb: Vec<u8>,
}

impl Canvas {
    /// A canvas filled with one colour.
    pub(crate) fn new(w: usize, h: usize, bg: [u8; 3]) -> Self {
        let mut rgb = Vec::with_capacity(w * h * 3);
        for _ in 0..w * h {
            rgb.extend_from_slice(&bg);
        }
        Canvas { w, h, rgb }
    }

    /// Sets one pixel; out-of-range coordinates are ignored.
    pub(crate) fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            let i = (y as usize * self.w + x as usize) * 3;
            self.rgb[i..i + 3].copy_from_slice(&c);
        }
    }

    /// Filled rectangle.
    pub(crate) fn rect(&mut self, x0: i64, y0: i64, w: i64, h: i64, c: [u8; 3]) {
        for y in y0..y0 + h {
            for x in x0..x0 + w {
                self.set(x, y, c);
            }
        }
    }

    /// Straight line (DDA).
    pub(crate) fn line(&mut self, x0: f64, y0: f64, x1: f64, y1: f64, c: [u8; 3]) {
        let steps = (x1 - x0).abs().max((y1 - y0).abs()).ceil().max(1.0) as usize;
        if steps > 100_000 {
            return;
        }
        for i in 0..=steps {
            let t = i as f64 / steps as f64;
            let x = x0 + t * (x1 - x0);
            let y = y0 + t * (y1 - y0);
            self.set(x.round() as i64, y.round() as i64, c);
        }
    }

    /// Text with its top-left corner at `(x, y)`, each font pixel `scale`×`scale`.
    pub(crate) fn text(&mut self, x: i64, y: i64, s: &str, scale: usize, c: [u8; 3]) {
        let sc = scale as i64;
        for (k, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            let gx = x + (k * ADVANCE * scale) as i64;
            for (r, bits) in g.iter().enumerate() {
                for col in 0..GLYPH_W {
                    if bits & (1 << (GLYPH_W - 1 - col)) != 0 {
                        self.rect(gx + col as i64 * sc, y + r as i64 * sc, sc, sc, c);
                    }
                }
            }
        }
    }

    /// Text rotated 90° anticlockwise (reads bottom to top): the glyph tops on column `x`,
    /// the first character starting at row `y` and the text running upwards from there.
    pub(crate) fn text_vertical(&mut self, x: i64, y: i64, s: &str, scale: usize, c: [u8; 3]) {
        let sc = scale as i64;
        for (k, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            let gy = y - (k * ADVANCE * scale) as i64;
            for (r, bits) in g.iter().enumerate() {
                for col in 0..GLYPH_W {
                    if bits & (1 << (GLYPH_W - 1 - col)) != 0 {
                        self.rect(x + r as i64 * sc, gy - col as i64 * sc, sc, sc, c);
                    }
                }
            }
        }
    }

    /// Width in pixels of a text string.
    pub(crate) fn text_width(s: &str, scale: usize) -> usize {
        s.chars().count() * ADVANCE * scale
    }

    /// Encodes the canvas as an 8-bit RGB PNG.
    pub(crate) fn write_png(&self, path: &std::path::Path) -> std::io::Result<()> {
        // Every error names the file and the step.
        let named = |op: &str, e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("{op} PNG {}: {e}", path.display()))
        };
        let encoding = |e: png::EncodingError| match e {
            png::EncodingError::IoError(e) => named("writing", e),
            other => named("writing", std::io::Error::other(other)),
        };
        let f =
            std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| named("creating", e))?);
        let mut enc = png::Encoder::new(f, self.w as u32, self.h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header().map_err(encoding)?;
        wr.write_image_data(&self.rgb).map_err(encoding)?;
        wr.finish().map_err(encoding)
    }
}
