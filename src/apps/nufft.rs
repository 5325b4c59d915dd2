//! `gpucbf nufft ...`: NUFFTs on `.npy` files, and the CPU benchmark.
//!
//! Precision follows the complex input (`complex64` → f32, `complex128` → f64).
//! Coordinates may be float32 or float64 of any shape (flattened); float64 coordinates are
//! folded into `[-π, π)` in f64 before rounding to f32. Type 1 writes a C-ordered
//! `(N1, N2[, N3])` array whose first axis goes with x (as `finufft.nufft2d1`); type 2 reads
//! such an array and writes the `M` values.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use num_complex::Complex;

use crate::compute::nufft::{make_plan, Backend, NufftType, Options, Real};
use crate::npy::{read_npy, write_npy, NpyData};

/// NUFFT subcommands.
// The variants' docs are clap's help text, where `f[k]` is maths, not an intra-doc link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Subcommand, Debug)]
pub enum NufftCmd {
    /// Type 1 (points → modes): f[k] = Σ_j c_j exp(isign·i·k·x_j).
    Type1(Type1Args),
    /// Type 2 (modes → points): c_j = Σ_k f[k] exp(isign·i·k·x_j).
    Type2(Type2Args),
    /// Throughput benchmark (2-D type 1, f32): CPU, and with --gpu / --gpu-only the GPU.
    Bench(crate::bench::nufft::NufftBenchArgs),
}

/// Point coordinates and common options.
#[derive(Args, Debug)]
pub struct Common {
    /// x coordinates (.npy, float32/64), paired with the first mode axis.
    #[arg(long)]
    x: PathBuf,
    /// y coordinates.
    #[arg(long)]
    y: PathBuf,
    /// z coordinates (3-D transforms).
    #[arg(long)]
    z: Option<PathBuf>,
    /// Requested relative tolerance.
    #[arg(long)]
    eps: f64,
    /// Fine-grid upsampling factor (2.0 or 1.25).
    #[arg(long, default_value_t = 2.0)]
    upsampfac: f64,
    /// Implementation.
    #[arg(long, value_enum, default_value = "auto")]
    backend: Backend,
    /// Output .npy.
    #[arg(long)]
    out: PathBuf,
}

/// `nufft type1`.
#[derive(Args, Debug)]
pub struct Type1Args {
    #[command(flatten)]
    common: Common,
    /// Strengths (.npy, complex64/128, M values).
    #[arg(long)]
    c: PathBuf,
    /// Modes per axis, "N1,N2[,N3]".
    #[arg(long)]
    modes: String,
    /// Sign of the exponent (FINUFFT Python's type-1 default is +1).
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    isign: i32,
}

/// `nufft type2`.
#[derive(Args, Debug)]
pub struct Type2Args {
    #[command(flatten)]
    common: Common,
    /// Mode array (.npy, complex64/128, shape (N1, N2[, N3])).
    #[arg(long)]
    f: PathBuf,
    /// Modes per axis (optional; must match the shape of --f).
    #[arg(long)]
    modes: Option<String>,
    /// Sign of the exponent (FINUFFT Python's type-2 default is -1).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    isign: i32,
}

/// Runs a NUFFT subcommand.
pub fn run(cmd: NufftCmd) -> Result<()> {
    match cmd {
        NufftCmd::Type1(a) => {
            let modes = parse_modes(&a.modes)?;
            let c = read_npy(&a.c)?;
            match c.data {
                NpyData::C64(v) => {
                    let f = transform::<f32>(NufftType::Type1, &a.common, &modes, a.isign, &v)?;
                    write_npy(&a.common.out, &modes, &NpyData::C64(f))?;
                }
                NpyData::C128(v) => {
                    let f = transform::<f64>(NufftType::Type1, &a.common, &modes, a.isign, &v)?;
                    write_npy(&a.common.out, &modes, &NpyData::C128(f))?;
                }
                d => bail!(
                    "{}: strengths must be complex64 or complex128, got {}",
                    a.c.display(),
                    d.dtype()
                ),
            }
        }
        NufftCmd::Type2(a) => {
            let f = read_npy(&a.f)?;
            if let Some(m) = &a.modes {
                let modes = parse_modes(m)?;
                if modes != f.shape {
                    bail!(
                        "--modes {:?} does not match the shape {:?} of {}",
                        modes,
                        f.shape,
                        a.f.display()
                    );
                }
            }
            let modes = f.shape.clone();
            let (len, out) = match f.data {
                NpyData::C64(v) => {
                    let c = transform::<f32>(NufftType::Type2, &a.common, &modes, a.isign, &v)?;
                    (c.len(), NpyData::C64(c))
                }
                NpyData::C128(v) => {
                    let c = transform::<f64>(NufftType::Type2, &a.common, &modes, a.isign, &v)?;
                    (c.len(), NpyData::C128(c))
                }
                d => bail!(
                    "{}: modes must be complex64 or complex128, got {}",
                    a.f.display(),
                    d.dtype()
                ),
            };
            write_npy(&a.common.out, &[len], &out)?;
        }
        NufftCmd::Bench(a) => crate::bench::nufft::run_bench(&a)?,
    }
    Ok(())
}

fn parse_modes(s: &str) -> Result<Vec<usize>> {
    let modes = s
        .split(',')
        .map(|p| p.trim().parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("--modes {s:?}: expected N1,N2[,N3]"))?;
    if !(2..=3).contains(&modes.len()) {
        bail!("--modes {s:?}: expected 2 or 3 comma-separated sizes");
    }
    Ok(modes)
}

/// Reads coordinates as `T`, folding f64 input into [-π, π) before rounding.
fn read_coords<T: Real>(path: &Path) -> Result<Vec<T>> {
    let a = read_npy(path)?;
    let two_pi = 2.0 * std::f64::consts::PI;
    Ok(match a.data {
        NpyData::F32(v) => v.into_iter().map(|x| T::cast(x as f64)).collect(),
        NpyData::F64(v) => v
            .into_iter()
            .map(|x| T::cast(x - two_pi * (x / two_pi).round()))
            .collect(),
        d => bail!(
            "{}: coordinates must be float32 or float64, got {}",
            path.display(),
            d.dtype()
        ),
    })
}

fn transform<T: Real>(
    ty: NufftType,
    a: &Common,
    modes: &[usize],
    isign: i32,
    input: &[Complex<T>],
) -> Result<Vec<Complex<T>>> {
    let opts = Options {
        eps: a.eps,
        isign,
        upsampfac: a.upsampfac,
    };
    let mut paths = vec![&a.x, &a.y];
    paths.extend(a.z.as_ref());
    if paths.len() != modes.len() {
        bail!(
            "{} modes given but {} coordinate arrays",
            modes.len(),
            paths.len()
        );
    }
    let mut plan = make_plan::<T>(a.backend, ty, modes, &opts)?;
    let coords = paths
        .iter()
        .map(|p| read_coords::<T>(p))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&[T]> = coords.iter().map(|v| v.as_slice()).collect();
    plan.set_points(&refs)?;
    let n_out = match ty {
        NufftType::Type1 => modes.iter().product(),
        NufftType::Type2 => plan.num_points(),
    };
    let mut out = vec![Complex::default(); n_out];
    plan.execute(input, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod unit {
    use crate::apps::nufft::*;
    use crate::compute::nufft::SplitMix64;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(subcommand)]
        cmd: NufftCmd,
    }

    fn cli(dir: &Path, args: &str) -> Result<()> {
        let argv = std::iter::once("nufft".to_string()).chain(
            args.split_whitespace()
                .map(|a| a.replace("@", &format!("{}/", dir.display()))),
        );
        run(Wrap::try_parse_from(argv)?.cmd)
    }

    /// End to end through .npy files: layout (N1, N2) with the first axis going with x,
    /// modes from -N/2, both types, f64 and f32 (f64 coordinates folded first).
    #[test]
    fn cli_type1_and_type2_match_direct_sums() {
        let dir = std::env::temp_dir().join(format!("gpucbf-nufft-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = SplitMix64(3);
        let m = 50;
        let x: Vec<f64> = (0..m).map(|_| rng.uniform(-9.0, 9.0)).collect();
        let y: Vec<f64> = (0..m).map(|_| rng.uniform(-3.2, 3.2)).collect();
        let c: Vec<Complex<f64>> = (0..m)
            .map(|_| Complex::new(rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0)))
            .collect();
        write_npy(&dir.join("x.npy"), &[m], &NpyData::F64(x.clone())).unwrap();
        write_npy(&dir.join("y.npy"), &[m], &NpyData::F64(y.clone())).unwrap();
        write_npy(&dir.join("c.npy"), &[m], &NpyData::C128(c.clone())).unwrap();
        let c32: Vec<Complex<f32>> = c
            .iter()
            .map(|v| Complex::new(v.re as f32, v.im as f32))
            .collect();
        write_npy(&dir.join("c32.npy"), &[m], &NpyData::C64(c32)).unwrap();
        let (n1, n2) = (12usize, 9usize);
        let direct = |sign: f64, i1: usize, i2: usize| -> Complex<f64> {
            let (k1, k2) = (i1 as f64 - (n1 / 2) as f64, i2 as f64 - (n2 / 2) as f64);
            (0..m)
                .map(|j| c[j] * Complex::from_polar(1.0, sign * (k1 * x[j] + k2 * y[j])))
                .sum()
        };
        cli(
            &dir,
            "type1 --x @x.npy --y @y.npy --c @c.npy --modes 12,9 --eps 1e-10 --out @f.npy",
        )
        .unwrap();
        let f = read_npy(&dir.join("f.npy")).unwrap();
        assert_eq!(f.shape, vec![n1, n2]);
        let NpyData::C128(fv) = &f.data else {
            panic!("dtype {}", f.data.dtype())
        };
        for i1 in 0..n1 {
            for i2 in 0..n2 {
                assert!(
                    (fv[i1 * n2 + i2] - direct(1.0, i1, i2)).norm() < 1e-8,
                    "[{i1},{i2}]"
                );
            }
        }
        let args = "type1 --x @x.npy --y @y.npy --c @c32.npy --modes 12,9 --eps 1e-5 --isign -1 --upsampfac 1.25 --out @f32.npy";
        cli(&dir, args).unwrap();
        let f32a = read_npy(&dir.join("f32.npy")).unwrap();
        let NpyData::C64(fv32) = &f32a.data else {
            panic!("dtype {}", f32a.data.dtype())
        };
        let (mut num, mut den) = (0.0, 0.0);
        for i1 in 0..n1 {
            for i2 in 0..n2 {
                let d = direct(-1.0, i1, i2);
                let g = fv32[i1 * n2 + i2];
                num += (Complex::new(g.re as f64, g.im as f64) - d).norm_sqr();
                den += d.norm_sqr();
            }
        }
        assert!(
            (num / den).sqrt() < 1e-4,
            "f32 rel err {}",
            (num / den).sqrt()
        );
        // Type 2 of the type-1 output: c'_j = Σ_k f_k exp(-i k·x_j).
        cli(
            &dir,
            "type2 --x @x.npy --y @y.npy --f @f.npy --eps 1e-10 --out @c2.npy",
        )
        .unwrap();
        let c2 = read_npy(&dir.join("c2.npy")).unwrap();
        assert_eq!(c2.shape, vec![m]);
        let NpyData::C128(c2v) = &c2.data else {
            panic!("dtype {}", c2.data.dtype())
        };
        for (j, got) in c2v.iter().enumerate() {
            let mut want = Complex::new(0.0, 0.0);
            for i1 in 0..n1 {
                for i2 in 0..n2 {
                    let (k1, k2) = (i1 as f64 - 6.0, i2 as f64 - 4.0);
                    want += fv[i1 * n2 + i2] * Complex::from_polar(1.0, -(k1 * x[j] + k2 * y[j]));
                }
            }
            assert!(
                (got - want).norm() < 1e-8 * (1.0 + want.norm()),
                "point {j}"
            );
        }
        // Clear errors.
        let e = cli(
            &dir,
            "type2 --x @x.npy --y @y.npy --f @f.npy --modes 9,12 --eps 1e-6 --out @e.npy",
        );
        assert!(e.unwrap_err().to_string().contains("does not match"));
        if !crate::gpu::gpu_available() {
            let e = cli(&dir, "type1 --x @x.npy --y @y.npy --c @c.npy --modes 8,8 --eps 1e-6 --backend gpu --out @e.npy");
            assert!(e.unwrap_err().to_string().contains("GPU NUFFT backend"));
        }
        let e = cli(
            &dir,
            "type1 --x @x.npy --y @c.npy --c @c.npy --modes 8,8 --eps 1e-6 --out @e.npy",
        );
        assert!(e.unwrap_err().to_string().contains("float32 or float64"));
        let e = cli(
            &dir,
            "type1 --x @x.npy --y @y.npy --c @c.npy --modes 8,0 --eps 1e-6 --out @e.npy",
        );
        assert!(e.unwrap_err().to_string().contains("axis 1"));
        let e = cli(
            &dir,
            "type1 --x @x.npy --y @y.npy --c @c.npy --modes 8,8,8 --eps 1e-6 --out @e.npy",
        );
        assert!(e.is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
