//! Minimal `.npy` reader and writer: little-endian float32/64, complex64/128, int32, uint64
//! and bool, C order, format versions 1.0–3.0 on input, 1.0 on output.

use std::io::{Read, Write};
use std::path::Path;

use num_complex::Complex;

/// Typed array contents.
#[derive(Clone, Debug, PartialEq)]
pub enum NpyData {
    /// `<f4`: float32.
    F32(Vec<f32>),
    /// `<f8`: float64.
    F64(Vec<f64>),
    /// `<c8`: complex64 (float32 real, then imaginary).
    C64(Vec<Complex<f32>>),
    /// `<c16`: complex128 (float64 real, then imaginary).
    C128(Vec<Complex<f64>>),
    /// `<i4`: int32.
    I32(Vec<i32>),
    /// `<u8`: uint64.
    U64(Vec<u64>),
    /// `|b1`: bool (one byte, 0 or 1).
    Bool(Vec<bool>),
}

impl NpyData {
    fn descr(&self) -> &'static str {
        match self {
            NpyData::F32(_) => "<f4",
            NpyData::F64(_) => "<f8",
            NpyData::C64(_) => "<c8",
            NpyData::C128(_) => "<c16",
            NpyData::I32(_) => "<i4",
            NpyData::U64(_) => "<u8",
            NpyData::Bool(_) => "|b1",
        }
    }

    /// Bytes per element.
    fn width(&self) -> usize {
        match self {
            NpyData::Bool(_) => 1,
            NpyData::F32(_) | NpyData::I32(_) => 4,
            NpyData::F64(_) | NpyData::C64(_) | NpyData::U64(_) => 8,
            NpyData::C128(_) => 16,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            NpyData::F32(v) => v.len(),
            NpyData::F64(v) => v.len(),
            NpyData::C64(v) => v.len(),
            NpyData::C128(v) => v.len(),
            NpyData::I32(v) => v.len(),
            NpyData::U64(v) => v.len(),
            NpyData::Bool(v) => v.len(),
        }
    }

    /// True if there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dtype name as numpy spells it.
    pub fn dtype(&self) -> &'static str {
        match self {
            NpyData::F32(_) => "float32",
            NpyData::F64(_) => "float64",
            NpyData::C64(_) => "complex64",
            NpyData::C128(_) => "complex128",
            NpyData::I32(_) => "int32",
            NpyData::U64(_) => "uint64",
            NpyData::Bool(_) => "bool",
        }
    }
}

/// An array: shape (C order) and data.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray {
    /// Length of each axis, slowest first; empty for a scalar.
    pub shape: Vec<usize>,
    /// The elements in C order (last axis fastest).
    pub data: NpyData,
}

/// Reading or writing failed.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// The file could not be opened, read, created or written.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`reading`, `writing`).
        op: &'static str,
        /// The file, as given.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is not a `.npy` file this reader supports (bad magic, version, header,
    /// dtype, Fortran order, or a data size that does not match the shape).
    #[error("{path}: not a .npy file or unsupported header: {why}")]
    Format {
        /// The file, as given.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// [`write_npy`] was given a shape whose element count differs from the data's.
    #[error("shape {shape:?} holds {expected} elements but data has {got}")]
    ShapeMismatch {
        /// The shape given.
        shape: Vec<usize>,
        /// The product of the shape.
        expected: usize,
        /// The number of elements in the data.
        got: usize,
    },
}

fn fmt_err(path: &Path, why: impl Into<String>) -> NpyError {
    NpyError::Format {
        path: path.display().to_string(),
        why: why.into(),
    }
}

/// Value of `'key':` in a header dict, up to the next top-level comma or closing brace.
fn dict_value<'a>(h: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("'{key}'");
    let start = h.find(&pat)? + pat.len();
    let rest = h[start..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    Some(rest[..end].trim())
}

/// Reads a `.npy` file (format 1.0, 2.0 or 3.0; little-endian `<f4`, `<f8`, `<c8`, `<c16`,
/// `<i4`, `<u8` or `|b1`; C order) whole into memory.
pub fn read_npy(path: &Path) -> Result<NpyArray, NpyError> {
    let io = |source| NpyError::Io {
        op: "reading",
        path: path.display().to_string(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(io)?;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(fmt_err(path, "missing magic string"));
    }
    let (hlen, hstart) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(fmt_err(path, format!("format version {v}"))),
    };
    let header = bytes
        .get(hstart..hstart + hlen)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| fmt_err(path, "truncated header"))?;
    let descr = dict_value(header, "descr")
        .ok_or_else(|| fmt_err(path, "no descr"))?
        .trim_matches(|c| c == '\'' || c == '"');
    match dict_value(header, "fortran_order") {
        Some("False") => {}
        Some("True") => return Err(fmt_err(path, "Fortran order is not supported")),
        _ => return Err(fmt_err(path, "no fortran_order")),
    }
    let shape_s = dict_value(header, "shape").ok_or_else(|| fmt_err(path, "no shape"))?;
    let shape = shape_s
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fmt_err(path, format!("bad shape {shape_s}: {e}")))?;
    let body = &bytes[hstart + hlen..];
    let width = match descr {
        "|b1" => 1,
        "<f4" | "<i4" => 4,
        "<f8" | "<c8" | "<u8" => 8,
        "<c16" => 16,
        d => {
            return Err(fmt_err(
                path,
                format!(
                    "dtype {d} (need little-endian float32/64, complex64/128, int32, uint64 \
                     or bool)"
                ),
            ))
        }
    };
    // Checked: a crafted shape whose product wraps would otherwise pass for a small array.
    let need = shape
        .iter()
        .try_fold(width, |acc: usize, &d| acc.checked_mul(d))
        .ok_or_else(|| fmt_err(path, format!("shape {shape_s} is too large to address")))?;
    if body.len() != need {
        return Err(fmt_err(
            path,
            format!(
                "data has {} bytes, shape {shape_s} needs {need}",
                body.len()
            ),
        ));
    }
    let f4 = |c: &[u8]| f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    let f8 = |c: &[u8]| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
    let data = match descr {
        "<f4" => NpyData::F32(body.chunks_exact(4).map(f4).collect()),
        "<f8" => NpyData::F64(body.chunks_exact(8).map(f8).collect()),
        "<c8" => NpyData::C64(
            body.chunks_exact(8)
                .map(|c| Complex::new(f4(&c[..4]), f4(&c[4..])))
                .collect(),
        ),
        "<i4" => NpyData::I32(
            body.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        "<u8" => NpyData::U64(
            body.chunks_exact(8)
                .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        ),
        "|b1" => NpyData::Bool(body.iter().map(|&b| b != 0).collect()),
        _ => NpyData::C128(
            body.chunks_exact(16)
                .map(|c| Complex::new(f8(&c[..8]), f8(&c[8..])))
                .collect(),
        ),
    };
    Ok(NpyArray { shape, data })
}

/// Writes a `.npy` file (version 1.0, C order, little-endian; the header padded so the data
/// start at a multiple of 64 bytes, as numpy writes it).
pub fn write_npy(path: &Path, shape: &[usize], data: &NpyData) -> Result<(), NpyError> {
    let expected: usize = shape.iter().product();
    if expected != data.len() {
        return Err(NpyError::ShapeMismatch {
            shape: shape.to_vec(),
            expected,
            got: data.len(),
        });
    }
    let shape_s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        data.descr(),
        shape_s
    );
    // Pad so that magic + version + length + header is a multiple of 64, ending in '\n'.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len() * data.width());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    match data {
        NpyData::F32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        NpyData::F64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        NpyData::C64(v) => v.iter().for_each(|x| {
            out.extend_from_slice(&x.re.to_le_bytes());
            out.extend_from_slice(&x.im.to_le_bytes());
        }),
        NpyData::C128(v) => v.iter().for_each(|x| {
            out.extend_from_slice(&x.re.to_le_bytes());
            out.extend_from_slice(&x.im.to_le_bytes());
        }),
        NpyData::I32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        NpyData::U64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        NpyData::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
    }
    std::fs::File::create(path)
        .and_then(|mut f| f.write_all(&out))
        .map_err(|source| NpyError::Io {
            op: "writing",
            path: path.display().to_string(),
            source,
        })
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn round_trip_all_dtypes() {
        let dir = std::env::temp_dir().join(format!("gpucbf-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            (vec![3], NpyData::F32(vec![1.0, -2.5, 3.25])),
            (vec![2, 2], NpyData::F64(vec![1.0, 2.0, 3.0, 4.0])),
            (vec![1], NpyData::C64(vec![Complex::new(1.0, -1.0)])),
            (
                vec![2, 1, 1],
                NpyData::C128(vec![Complex::new(0.5, 2.0), Complex::new(-3.0, 1e-300)]),
            ),
            (vec![2, 2], NpyData::I32(vec![i32::MIN, 1, -7, i32::MAX])),
            (vec![2], NpyData::U64(vec![0, u64::MAX])),
            (vec![3], NpyData::Bool(vec![true, false, true])),
        ];
        for (i, (shape, data)) in cases.into_iter().enumerate() {
            let p = dir.join(format!("a{i}.npy"));
            write_npy(&p, &shape, &data).unwrap();
            let bytes = std::fs::read(&p).unwrap();
            let hl = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!((10 + hl) % 64, 0);
            let back = read_npy(&p).unwrap();
            assert_eq!(back.shape, shape);
            assert_eq!(back.data, data);
        }
        assert!(write_npy(&dir.join("bad.npy"), &[2], &NpyData::F32(vec![1.0])).is_err());
        std::fs::write(dir.join("junk.npy"), b"hello world").unwrap();
        assert!(read_npy(&dir.join("junk.npy")).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A `.npy` file with this header dict and body.
    fn raw_npy(path: &Path, dict: &str, body: &[u8]) {
        let mut h = dict.to_string();
        h.push_str(&" ".repeat((64 - (10 + h.len() + 1) % 64) % 64));
        h.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(h.len() as u16).to_le_bytes());
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(body);
        std::fs::write(path, out).unwrap();
    }

    /// A shape whose element count overflows (wrapping to 0 or to the body's size) is
    /// refused, not taken for a small array; so is one that does not match the data.
    #[test]
    fn crafted_shapes_are_refused() {
        let p = std::env::temp_dir().join(format!("gpucbf-npy-craft-{}.npy", std::process::id()));
        for (shape, body) in [
            // 2^61 × 12 × 8 bytes wraps to 0.
            (format!("(1, {}, 3, 4)", 1u64 << 61), vec![]),
            // 2^62 × 12 × 8 wraps to 0 as well, with the dumps axis.
            (format!("({}, 1, 3, 4)", 1u64 << 62), vec![]),
            // 2^62 × 2 × 4 × 8 + 16 elements' bytes: wraps to the 128 given.
            (format!("(2, {}, 1, 4)", (1u64 << 61) + 2), vec![0u8; 128]),
        ] {
            let dict = format!("{{'descr': '<c8', 'fortran_order': False, 'shape': {shape}, }}");
            raw_npy(&p, &dict, &body);
            let e = read_npy(&p).expect_err(&shape).to_string();
            assert!(
                e.contains("too large") || e.contains("needs"),
                "{shape}: {e}"
            );
            assert!(e.contains(&*p.to_string_lossy()), "{e}");
        }
        raw_npy(
            &p,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
            &[0u8; 8],
        );
        let e = read_npy(&p).unwrap_err().to_string();
        assert!(e.contains("data has 8 bytes, shape (3,) needs 12"), "{e}");
        std::fs::remove_file(&p).ok();
        // I/O errors say what was being done, and to which file.
        let dir = std::env::temp_dir();
        let e = read_npy(&dir).unwrap_err().to_string();
        assert!(e.starts_with(&format!("reading {}", dir.display())), "{e}");
        let e = write_npy(&dir, &[1], &NpyData::F32(vec![1.0]))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(&format!("writing {}", dir.display())), "{e}");
    }
}
