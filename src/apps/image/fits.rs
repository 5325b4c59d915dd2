//! Minimal FITS writer: one primary HDU, BITPIX −32, SIN-projected RA/Dec plus FREQ and
//! STOKES axes.

use std::io::Write;
use std::path::Path;

use super::DirtyImage;

const BLOCK: usize = 2880;
const CARD: usize = 80;

/// Formats one 80-character header card.
fn card(key: &str, value: &str, comment: &str) -> String {
    // Fixed format: strings start in column 11, numbers and logicals end in column 30.
    let mut s = if value.starts_with('\'') {
        format!("{key:<8}= {value:<20}")
    } else {
        format!("{key:<8}= {value:>20}")
    };
    if !comment.is_empty() {
        s.push_str(" / ");
        s.push_str(comment);
    }
    s.truncate(CARD);
    format!("{s:<80}")
}

fn fstr(s: &str) -> String {
    format!("'{:<8}'", s.replace('\'', "''"))
}

fn freal(x: f64) -> String {
    format!("{x:.13E}")
}

/// `YYYY-MM-DDThh:mm:ss.sss` (UTC) of a UNIX time.
pub(crate) fn iso_date(time_unix: f64) -> String {
    let t = if time_unix.is_finite() {
        time_unix
    } else {
        0.0
    };
    let days = (t / 86400.0).floor();
    let secs = t - days * 86400.0;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let h = (secs / 3600.0).floor();
    let mi = ((secs - h * 3600.0) / 60.0).floor();
    let s = secs - h * 3600.0 - mi * 60.0;
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:06.3}")
}

/// FITS Stokes code of an ICD correlation product (linear feeds: XX −5, YY −6, XY −7, YX −8;
/// product p = p1 + 2·p2 with p1 the first antenna's pol: 0 = XX, 1 = YX, 2 = XY, 3 = YY).
fn stokes_code(pol_product: usize) -> f64 {
    match pol_product {
        0 => -5.0,
        1 => -8.0,
        2 => -7.0,
        _ => -6.0,
    }
}

/// Header cards of an image (without END padding).
pub(crate) fn header_cards(img: &DirtyImage) -> Vec<String> {
    let n = img.size;
    let cell_deg = img.cell_rad.to_degrees();
    // Column order is reversed on output so RA increases to the left (CDELT1 < 0); the phase
    // centre, column ⌊N/2⌋ in memory, lands on FITS pixel N − ⌊N/2⌋.
    let crpix1 = (n - n / 2) as f64;
    let crpix2 = (n / 2 + 1) as f64;
    vec![
        card("SIMPLE", "T", "conforms to FITS standard"),
        card("BITPIX", "-32", "IEEE single precision"),
        card("NAXIS", "4", ""),
        card("NAXIS1", &n.to_string(), ""),
        card("NAXIS2", &n.to_string(), ""),
        card("NAXIS3", "1", ""),
        card("NAXIS4", "1", ""),
        card("EXTEND", "T", ""),
        card("BSCALE", "1.0", ""),
        card("BZERO", "0.0", ""),
        card(
            "BUNIT",
            &fstr("JY/BEAM"),
            "dirty image, unit-flux normalised",
        ),
        card("CTYPE1", &fstr("RA---SIN"), ""),
        card("CRPIX1", &freal(crpix1), ""),
        card("CRVAL1", &freal(img.ra.to_degrees().rem_euclid(360.0)), ""),
        card("CDELT1", &freal(-cell_deg), ""),
        card("CUNIT1", &fstr("deg"), ""),
        card("CTYPE2", &fstr("DEC--SIN"), ""),
        card("CRPIX2", &freal(crpix2), ""),
        card("CRVAL2", &freal(img.dec.to_degrees()), ""),
        card("CDELT2", &freal(cell_deg), ""),
        card("CUNIT2", &fstr("deg"), ""),
        card("CTYPE3", &fstr("FREQ"), ""),
        card("CRPIX3", &freal(1.0), ""),
        card("CRVAL3", &freal(img.freq_hz), "mean channel frequency"),
        card("CDELT3", &freal(1.0), ""),
        card("CUNIT3", &fstr("Hz"), ""),
        card("CTYPE4", &fstr("STOKES"), ""),
        card("CRPIX4", &freal(1.0), ""),
        card("CRVAL4", &freal(stokes_code(img.pol_product)), ""),
        card("CDELT4", &freal(1.0), ""),
        card("CUNIT4", &fstr(""), ""),
        card("RADESYS", &fstr("ICRS"), ""),
        card("EQUINOX", &freal(2000.0), ""),
        card("DATE-OBS", &fstr(&iso_date(img.time_unix)), "UTC"),
        card("TELESCOP", &fstr("gpucbf"), ""),
        card("ORIGIN", &fstr("gpucbf image"), ""),
        card("SUMWT", &freal(img.sum_weights), "sum of imaging weights"),
    ]
}

/// Writes the image as a FITS primary HDU (big-endian float32, 2880-byte blocks).
pub fn write_fits(path: &Path, img: &DirtyImage) -> std::io::Result<()> {
    let n = img.size;
    if n == 0 || img.pixels.len() != n * n {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("image has {} pixels, expected {n}²", img.pixels.len()),
        ));
    }
    let mut head: String = header_cards(img).concat();
    head.push_str(&format!("{:<80}", "END"));
    while !head.len().is_multiple_of(BLOCK) {
        head.push(' ');
    }
    let mut data = Vec::with_capacity((n * n * 4).div_ceil(BLOCK) * BLOCK);
    for row in 0..n {
        for col in (0..n).rev() {
            data.extend_from_slice(&img.pixels[row * n + col].to_be_bytes());
        }
    }
    data.resize(data.len().div_ceil(BLOCK) * BLOCK, 0);
    // Every error names the file and the step (the operating system's message alone
    // names neither).
    let named = |op: &str, e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("{op} FITS {}: {e}", path.display()))
    };
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| named("creating", e))?);
    f.write_all(head.as_bytes())
        .and_then(|()| f.write_all(&data))
        .and_then(|()| f.flush())
        .map_err(|e| named("writing", e))
}
