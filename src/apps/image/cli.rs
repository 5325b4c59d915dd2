//! `gpucbf image`: dirty image of correlator output (.npy dumps or an X-engine pcap).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use num_complex::Complex32;

use super::{
    default_layout, dirty_image, n_baselines, parse_layout, write_fits, write_image_png,
    ImagingParams, Observation, Visibilities, Weighting, MEERKAT_LAT_RAD, MEERKAT_LON_RAD,
};
use crate::npy::{read_npy, NpyData};

/// Weighting names on the command line (`--weighting`); see [`Weighting`].
///
/// The variants' docs are for rustdoc only: `help = None` keeps them out of `--help`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightingArg {
    /// [`Weighting::Natural`].
    #[value(help = None::<&'static str>)]
    Natural,
    /// [`Weighting::Uniform`].
    #[value(help = None::<&'static str>)]
    Uniform,
    /// [`Weighting::Briggs`] with `--robust`.
    #[value(help = None::<&'static str>)]
    Briggs,
}

/// Arguments of `gpucbf image`.
#[derive(clap::Args, Debug)]
pub struct ImageArgs {
    /// Visibilities: dumps × channels × baselines × 4, complex64 (as `gpucbf array` writes).
    #[arg(long, conflicts_with = "pcap", required_unless_present = "pcap")]
    pub vis: Option<PathBuf>,
    /// X-engine output heaps (baseline-correlation-products) in a pcap file.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Number of antennas (required with --pcap).
    #[arg(long)]
    pub array_size: Option<usize>,
    /// Antenna positions, one "east north up" line (metres) per antenna; default: the shipped
    /// MeerKAT-like layout (its first n_ants rows).
    #[arg(long)]
    pub antennas: Option<PathBuf>,
    /// Frequency of channel 0, Hz.
    #[arg(long, default_value_t = 856e6)]
    pub freqs_start: f64,
    /// Channel spacing, Hz.
    #[arg(long, default_value_t = 856e6 / 4096.0)]
    pub freqs_step: f64,
    /// Phase centre "RA_DEG,DEC_DEG"; default: the zenith at --time.
    #[arg(long)]
    pub phase_centre: Option<String>,
    /// Observation time, UNIX seconds.
    #[arg(long, default_value_t = 1.7e9)]
    pub time: f64,
    /// Visibility weighting.
    #[arg(long, value_enum, default_value = "natural")]
    pub weighting: WeightingArg,
    /// Briggs robustness.
    #[arg(long, default_value_t = 0.0)]
    pub robust: f64,
    /// Pixels per side.
    #[arg(long, default_value_t = 512)]
    pub size: usize,
    /// Pixel size in arcseconds; default 1/(3·u_max).
    #[arg(long)]
    pub cell: Option<f64>,
    /// Correlation product to image (0..4: aa, ba, ab, bb).
    #[arg(long, default_value_t = 0)]
    pub pol_product: usize,
    /// Number of w-planes (0 = automatic).
    #[arg(long, default_value_t = 0)]
    pub w_planes: usize,
    /// Write a FITS image here.
    #[arg(long)]
    pub out_fits: Option<PathBuf>,
    /// Write a PNG rendering here.
    #[arg(long)]
    pub out_png: Option<PathBuf>,
}

/// Antenna count from a baseline count (with autocorrelations).
fn ants_from_baselines(nb: usize) -> Option<usize> {
    let n = ((nb.checked_mul(8)?.checked_add(1)? as f64).sqrt() as usize).saturating_sub(1) / 2;
    (n..n + 2).find(|&k| k > 0 && n_baselines(k) == nb)
}

/// Reads `dumps × channels × baselines × 4` complex64 and sums the dumps; a baseline with a
/// non-finite product in any dump is flagged.
pub fn load_npy(path: &Path) -> anyhow::Result<Visibilities> {
    // The error names the file and what is wrong with it.
    let arr = read_npy(path)?;
    let data = match arr.data {
        NpyData::C64(v) => v,
        NpyData::C128(v) => v
            .iter()
            .map(|c| Complex32::new(c.re as f32, c.im as f32))
            .collect(),
        other => bail!(
            "{}: expected complex64, got {}",
            path.display(),
            other.dtype()
        ),
    };
    let shape: Vec<usize> = match arr.shape.len() {
        3 => [&[1], &arr.shape[..]].concat(),
        4 => arr.shape.clone(),
        _ => bail!(
            "{}: expected shape (dumps, channels, baselines, 4), got {:?}",
            path.display(),
            arr.shape
        ),
    };
    let (dumps, channels, nb) = (shape[0], shape[1], shape[2]);
    if shape[3] != 4 || dumps == 0 || channels == 0 {
        bail!(
            "{}: expected shape (dumps, channels, baselines, 4), got {:?}",
            path.display(),
            arr.shape
        );
    }
    let n_ants = ants_from_baselines(nb).with_context(|| {
        format!(
            "{}: {nb} baselines is not n(n+1)/2 for any antenna count",
            path.display()
        )
    })?;
    let mut vis = Visibilities::zeros(n_ants, channels);
    let per_dump = channels * nb * 4;
    for d in data.chunks_exact(per_dump) {
        for (i, x) in d.iter().enumerate() {
            if x.re.is_finite() && x.im.is_finite() {
                vis.data[i] += *x;
            } else {
                vis.flagged[i / 4] = true;
            }
        }
    }
    Ok(vis)
}

/// Assembles X-engine heaps from a pcap and sums every dump; channels never received are flagged.
pub fn load_pcap(path: &Path, n_ants: usize) -> anyhow::Result<Visibilities> {
    use crate::net::recv::pcap::PcapSource;
    use crate::spead::{ids, Assembler, ItemValue};
    if n_ants == 0 {
        bail!("--array-size must be positive");
    }
    let nb = n_baselines(n_ants);
    let mut src = PcapSource::open(path)?;
    let mut asms: BTreeMap<std::net::SocketAddrV4, Assembler> = BTreeMap::new();
    let mut heaps = Vec::new();
    // channel offset → summed dumps of that engine's channels.
    let mut parts: BTreeMap<usize, Visibilities> = BTreeMap::new();
    let mut absorb = |heaps: &mut Vec<crate::spead::Heap>| -> anyhow::Result<()> {
        for h in heaps.drain(..) {
            let Some(ItemValue::Bytes(raw)) = h.item(ids::XENG_RAW) else {
                continue;
            };
            if !h.complete {
                continue;
            }
            let off = h.u64_item(ids::FREQUENCY).unwrap_or(0) as usize;
            if !raw.len().is_multiple_of(nb * 32) || raw.is_empty() {
                bail!(
                    "xeng_raw of {} bytes is not a whole number of channels for {n_ants} antennas",
                    raw.len()
                );
            }
            let ints: Vec<i32> = raw
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let v = Visibilities::from_xeng_raw(n_ants, raw.len() / (nb * 32), &ints)?;
            match parts.get_mut(&off) {
                Some(acc) => acc.add(&v)?,
                None => {
                    parts.insert(off, v);
                }
            }
        }
        Ok(())
    };
    while let Some(d) = src.next_datagram()? {
        let asm = asms.entry(d.dst).or_insert_with(|| Assembler::new(64));
        let _ = asm.push(&d.payload, &mut heaps);
        absorb(&mut heaps)?;
    }
    for asm in asms.values_mut() {
        asm.flush(&mut heaps);
    }
    absorb(&mut heaps)?;
    let total = parts
        .iter()
        .map(|(off, v)| off + v.channels)
        .max()
        .context("no complete xeng_raw heaps in the capture")?;
    let mut vis = Visibilities::zeros(n_ants, total);
    vis.flagged.fill(true);
    for (off, v) in &parts {
        let (a, b) = (off * nb, (off + v.channels) * nb);
        vis.flagged[a..b].copy_from_slice(&v.flagged);
        vis.data[a * 4..b * 4].copy_from_slice(&v.data);
    }
    Ok(vis)
}

/// Parses "RA_DEG,DEC_DEG" into radians.
fn parse_radec(s: &str) -> anyhow::Result<(f64, f64)> {
    let v: Vec<f64> = s
        .split(',')
        .map(|x| x.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("--phase-centre {s:?}: expected RA_DEG,DEC_DEG"))?;
    if v.len() != 2 || !v.iter().all(|x| x.is_finite()) || v[1].abs() > 90.0 {
        bail!("--phase-centre {s:?}: expected RA_DEG,DEC_DEG with |DEC| ≤ 90");
    }
    Ok((v[0].to_radians(), v[1].to_radians()))
}

/// Runs `gpucbf image`; returns a JSON summary.
pub fn run(args: &ImageArgs) -> anyhow::Result<serde_json::Value> {
    let vis = match (&args.vis, &args.pcap) {
        (Some(p), _) => load_npy(p)?,
        (None, Some(p)) => load_pcap(
            p,
            args.array_size
                .context("--pcap needs --array-size (number of antennas)")?,
        )?,
        (None, None) => bail!("give --vis FILE.npy or --pcap FILE"),
    };
    let layout = match &args.antennas {
        Some(p) => std::fs::read_to_string(p)
            .map_err(anyhow::Error::from)
            .and_then(|text| Ok(parse_layout(&text)?))
            .with_context(|| format!("reading --antennas {}", p.display()))?,
        None => default_layout(),
    };
    if layout.len() < vis.n_ants {
        bail!(
            "the layout has {} antennas, the data {}",
            layout.len(),
            vis.n_ants
        );
    }
    let obs = Observation {
        positions_enu: layout[..vis.n_ants].to_vec(),
        latitude_rad: MEERKAT_LAT_RAD,
        longitude_rad: MEERKAT_LON_RAD,
        time_unix: args.time,
        phase_centre: args.phase_centre.as_deref().map(parse_radec).transpose()?,
        freqs_hz: (0..vis.channels)
            .map(|c| args.freqs_start + c as f64 * args.freqs_step)
            .collect(),
    };
    let params = ImagingParams {
        size: args.size,
        cell_rad: args.cell.map(|a| (a / 3600.0).to_radians()),
        weighting: match args.weighting {
            WeightingArg::Natural => Weighting::Natural,
            WeightingArg::Uniform => Weighting::Uniform,
            WeightingArg::Briggs => Weighting::Briggs(args.robust),
        },
        w_planes: args.w_planes,
    };
    let img = dirty_image(&obs, &vis, &params, args.pol_product)?;
    if let Some(p) = &args.out_fits {
        write_fits(p, &img)?;
    }
    if let Some(p) = &args.out_png {
        let title = format!(
            "DIRTY IMAGE {:.1} MHZ, {} ANTENNAS, {} CHANNELS",
            img.freq_hz / 1e6,
            vis.n_ants,
            vis.channels
        );
        write_image_png(p, &img, &title)?;
    }
    let (peak, col, row) = img.peak();
    let (l, m) = img.lm_of(col, row);
    Ok(serde_json::json!({
        "n_ants": vis.n_ants,
        "channels": vis.channels,
        "flagged_fraction": vis.flagged.iter().filter(|f| **f).count() as f64
            / vis.flagged.len().max(1) as f64,
        "size": img.size,
        "cell_arcsec": img.cell_rad.to_degrees() * 3600.0,
        "ra_deg": img.ra.to_degrees(),
        "dec_deg": img.dec.to_degrees(),
        "freq_hz": img.freq_hz,
        "sum_weights": img.sum_weights,
        "peak": peak,
        "peak_col": col,
        "peak_row": row,
        "peak_l": l,
        "peak_m": m,
    }))
}
