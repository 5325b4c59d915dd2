//! The dsim signal language and its evaluation.
//!
//! ```text
//! program   := { statement }
//! statement := NAME '=' top ';'  |  top ';'
//! top       := 'nodither' '(' expr ')' | expr
//! expr      := term { ('+' | '-') term }
//! term      := unary { '*' unary }
//! unary     := '-' unary | atom
//! atom      := NUMBER | NAME | call | '(' expr ')'
//! call      := cw(amp, freq) | multicw(m, amp0, amp_step, freq0, freq_step)
//!            | comb(amp, freq) | wgn(std [, entropy]) | delay(expr, samples)
//! ```
//!
//! Programs are bounded before anything is generated: at most [`MAX_SOURCE_BYTES`] long,
//! [`MAX_NESTING`] levels of parentheses (or unary minus, `delay`), expression trees at most
//! [`MAX_OPERATOR_DEPTH`] operators deep and [`MAX_OPS_PER_SAMPLE`] operations per sample
//! (a variable counts at every use, a `multicw` as its `m` cosines).
//!
//! Every signal is periodic with the replay period P: frequencies are rounded to a
//! multiple of adc_rate / P. Values are a pure function of the sample index (noise uses a
//! counter-based generator), so any range of samples can be evaluated independently, in
//! parallel, and the result does not depend on the thread count.

use std::f64::consts::PI;
use std::sync::Arc;

mod parse;

pub use parse::{
    parse, per_stream, SignalError, MAX_NESTING, MAX_OPERATOR_DEPTH, MAX_OPS_PER_SAMPLE,
    MAX_SOURCE_BYTES,
};

/// A parsed signal expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// A constant (full scale is 1).
    Const(f64),
    /// A cosine: `cw(amp, freq)`.
    Cw {
        /// Amplitude (full scale is 1).
        amp: f64,
        /// Frequency in Hz (snapped to the period).
        freq: f64,
    },
    /// `m` cosines, amplitudes and frequencies in steps: `multicw(m, amp0, amp_step, freq0,
    /// freq_step)`.
    MultiCw {
        /// Number of cosines.
        m: u32,
        /// Amplitude of the first.
        amp0: f64,
        /// Amplitude step.
        amp_step: f64,
        /// Frequency of the first (Hz).
        freq0: f64,
        /// Frequency step (Hz).
        freq_step: f64,
    },
    /// Impulses `freq` times a second: `comb(amp, freq)`.
    Comb {
        /// Impulse height.
        amp: f64,
        /// Impulses per second (snapped to the period).
        freq: f64,
    },
    /// White Gaussian noise: `wgn(std [, entropy])`.
    Wgn {
        /// Standard deviation (full scale is 1).
        std: f64,
        /// Seed of the noise.
        entropy: u64,
    },
    /// A signal delayed by whole samples: `delay(expr, samples)`.
    Delay(Arc<Signal>, i64),
    /// Sum.
    Add(Arc<Signal>, Arc<Signal>),
    /// Difference.
    Sub(Arc<Signal>, Arc<Signal>),
    /// Product.
    Mul(Arc<Signal>, Arc<Signal>),
}

/// One output stream's signal and whether to dither it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSignal {
    /// The signal.
    pub signal: Arc<Signal>,
    /// Add uniform dither before quantisation (`nodither(...)` turns it off).
    pub dither: bool,
}

impl Signal {
    /// Writes the expression as the language reads it, with the parentheses its tree needs
    /// (`prec`: 0 inside a sum, 1 as a product's or a difference's operand, 2 as a
    /// product's right operand), numbers as Python's `repr` (katgpucbf's canonical form).
    fn write(&self, f: &mut std::fmt::Formatter<'_>, prec: u8) -> std::fmt::Result {
        use crate::control::sampling::float_repr as n;
        let bin = |f: &mut std::fmt::Formatter<'_>, a: &Signal, op: char, b: &Signal, mine: u8| {
            let paren = prec > mine;
            if paren {
                write!(f, "(")?;
            }
            a.write(f, mine)?;
            write!(f, " {op} ")?;
            b.write(f, mine + 1)?;
            if paren {
                write!(f, ")")?;
            }
            Ok(())
        };
        match self {
            Signal::Const(c) if *c < 0.0 => write!(f, "(0.0 - {})", n(-c)),
            Signal::Const(c) => write!(f, "{}", n(*c)),
            Signal::Cw { amp, freq } => write!(f, "cw({}, {})", n(*amp), n(*freq)),
            Signal::MultiCw {
                m,
                amp0,
                amp_step,
                freq0,
                freq_step,
            } => write!(
                f,
                "multicw({m}, {}, {}, {}, {})",
                n(*amp0),
                n(*amp_step),
                n(*freq0),
                n(*freq_step)
            ),
            Signal::Comb { amp, freq } => write!(f, "comb({}, {})", n(*amp), n(*freq)),
            Signal::Wgn { std, entropy } => write!(f, "wgn({}, {entropy})", n(*std)),
            Signal::Delay(inner, d) => {
                write!(f, "delay(")?;
                inner.write(f, 0)?;
                write!(f, ", {d})")
            }
            Signal::Add(a, b) => bin(f, a, '+', b, 0),
            Signal::Sub(a, b) => bin(f, a, '-', b, 0),
            Signal::Mul(a, b) => bin(f, a, '*', b, 1),
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.write(f, 0)
    }
}

impl std::fmt::Display for StreamSignal {
    /// `expr;`, or `nodither(expr);` for an undithered stream.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.dither {
            write!(f, "{};", self.signal)
        } else {
            write!(f, "nodither({});", self.signal)
        }
    }
}

/// A program's canonical text (katgpucbf's `signals` sensor): each output `expr;`, joined
/// by spaces, every `wgn` with its entropy.
pub fn canonical(outs: &[StreamSignal]) -> String {
    let v: Vec<String> = outs.iter().map(|s| s.to_string()).collect();
    v.join(" ")
}

/// Evaluation context: the replay period and sample rate that frequencies snap to.
#[derive(Debug, Clone, Copy)]
pub struct Timebase {
    /// ADC sample rate in Hz.
    pub adc_rate: f64,
    /// Replay period in samples.
    pub period: u64,
}

impl Timebase {
    /// Cycles per period for frequency `f` (rounded to an integer so the signal repeats).
    pub fn cycles(&self, f: f64) -> i64 {
        (f * self.period as f64 / self.adc_rate).round() as i64
    }

    /// The frequency actually generated for a requested `f`.
    pub fn snapped(&self, f: f64) -> f64 {
        self.cycles(f) as f64 * self.adc_rate / self.period as f64
    }
}

/// SplitMix64 finaliser: a good 64-bit hash, the basis of the counter-based generators.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in [0, 1) from 53 random bits.
#[inline]
pub fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Noise is generated in blocks of this many samples, each from its own generator seeded
/// by (entropy, block index): any sample range can be produced independently.
pub const NOISE_BLOCK: u64 = 1024;

/// Adds `std` × standard-normal samples [start, start + out.len()) of stream `entropy`.
fn wgn_into(std: f64, entropy: u64, start: u64, out: &mut [f64]) {
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};
    let mut i = 0usize;
    while i < out.len() {
        let n = start + i as u64;
        let (blk, off) = (n / NOISE_BLOCK, n % NOISE_BLOCK);
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(mix64(entropy ^ mix64(blk)));
        for _ in 0..off {
            let _: f64 = StandardNormal.sample(&mut rng);
        }
        let take = ((NOISE_BLOCK - off) as usize).min(out.len() - i);
        for v in &mut out[i..i + take] {
            let z: f64 = StandardNormal.sample(&mut rng);
            *v += std * z;
        }
        i += take;
    }
}

fn cw_into(amp: f64, cycles: i64, tb: &Timebase, start: u64, out: &mut [f64]) {
    if amp == 0.0 || out.is_empty() {
        return;
    }
    let p = tb.period as i128;
    let k = (cycles as i128).rem_euclid(p);
    // Exact phase of the first sample, re-anchored every 1024 samples to bound drift.
    let step = 2.0 * PI * k as f64 / p as f64;
    let (ws, wc) = step.sin_cos();
    for (blk, chunk) in out.chunks_mut(1024).enumerate() {
        let n0 = start as i128 + (blk * 1024) as i128;
        let ph = 2.0 * PI * ((k * n0).rem_euclid(p)) as f64 / p as f64;
        let (mut s, mut c) = ph.sin_cos();
        for v in chunk {
            *v += amp * c;
            let c2 = c * wc - s * ws;
            s = s * wc + c * ws;
            c = c2;
        }
    }
}

impl Signal {
    /// Adds samples [start, start + out.len()) into `out`; `start` is taken modulo the
    /// period and the range should not cross the period's end (callers evaluate whole
    /// heaps and the period is a multiple of the heap size; `delay` splits its own wrap).
    pub fn eval_add(&self, tb: &Timebase, start: u64, out: &mut [f64]) {
        let p = tb.period;
        let start = start % p;
        match self {
            Signal::Const(c) => out.iter_mut().for_each(|v| *v += c),
            Signal::Cw { amp, freq } => cw_into(*amp, tb.cycles(*freq), tb, start, out),
            Signal::MultiCw {
                m,
                amp0,
                amp_step,
                freq0,
                freq_step,
            } => {
                for i in 0..*m {
                    let a = amp0 + i as f64 * amp_step;
                    let f = freq0 + i as f64 * freq_step;
                    cw_into(a, tb.cycles(f), tb, start, out);
                }
            }
            Signal::Comb { amp, freq } => {
                let m = tb.cycles(*freq).unsigned_abs();
                if m == 0 {
                    return;
                }
                // Impulse j sits at round(j·P/m), j in 0..m; visit those in [start, end).
                let m = m.min(p);
                let end = start + out.len() as u64;
                let pf = p as f64;
                let mut j = ((start as f64) * m as f64 / pf).floor() as u64;
                j = j.saturating_sub(1);
                while j < m {
                    let pos = ((j as f64) * pf / m as f64).round() as u64;
                    if pos >= end {
                        break;
                    }
                    if pos >= start {
                        out[(pos - start) as usize] += amp;
                    }
                    j += 1;
                }
            }
            Signal::Wgn { std, entropy } => wgn_into(*std, *entropy, start, out),
            Signal::Delay(inner, d) => {
                let s = (start as i128 - *d as i128).rem_euclid(p as i128) as u64;
                // The shifted range may wrap around the period: split it.
                let first = ((p - s) as usize).min(out.len());
                inner.eval_add(tb, s, &mut out[..first]);
                let mut off = first;
                while off < out.len() {
                    let n = (out.len() - off).min(p as usize);
                    inner.eval_add(tb, 0, &mut out[off..off + n]);
                    off += n;
                }
            }
            Signal::Add(a, b) => {
                a.eval_add(tb, start, out);
                b.eval_add(tb, start, out);
            }
            Signal::Sub(a, b) => {
                a.eval_add(tb, start, out);
                let mut tmp = vec![0.0; out.len()];
                b.eval_add(tb, start, &mut tmp);
                out.iter_mut().zip(&tmp).for_each(|(o, t)| *o -= t);
            }
            Signal::Mul(a, b) => {
                let mut x = vec![0.0; out.len()];
                let mut y = vec![0.0; out.len()];
                a.eval_add(tb, start, &mut x);
                b.eval_add(tb, start, &mut y);
                out.iter_mut()
                    .zip(x.iter().zip(&y))
                    .for_each(|(o, (x, y))| *o += x * y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Vec<StreamSignal>, SignalError> {
        let mut k = 0;
        parse(s, &mut || {
            k += 1;
            k
        })
    }

    fn eval(s: &Signal, tb: &Timebase, start: u64, n: usize) -> Vec<f64> {
        let mut v = vec![0.0; n];
        s.eval_add(tb, start, &mut v);
        v
    }

    const TB: Timebase = Timebase {
        adc_rate: 1712e6,
        period: 1 << 20,
    };

    #[test]
    fn grammar_and_errors() {
        let o = p("a = cw(1.0, 1e8) + wgn(0.1); a + 0.5; nodither(a * -2);").unwrap();
        assert_eq!(o.len(), 2);
        assert!(o[0].dither && !o[1].dither);
        let o = p("n = nodither(cw(0.5, 1e6)); n;").unwrap();
        assert!(!o[0].dither);
        for bad in [
            "cw(1.0, 1e8)",
            "cw(1.0);",
            "foo(1);",
            "a = 1; a = 2; a;",
            "n = nodither(1); n + 1;",
            "delay(cw(1, 2), 1.5);",
            "wgn(-1);",
            "cw(1, x);",
            "1 + ;",
            "cw(1.0, 1e8) $ 2;",
            "",
        ] {
            assert!(p(bad).is_err(), "{bad:?} should fail");
        }
        assert!(per_stream(p("1; 2; 3;").unwrap(), 2).is_err());
        assert_eq!(per_stream(p("1;").unwrap(), 3).unwrap().len(), 3);
    }

    #[test]
    fn cw_is_periodic_and_snapped() {
        let s = Signal::Cw {
            amp: 0.7,
            freq: 123.456e6,
        };
        let f = TB.snapped(123.456e6);
        assert!((f - 123.456e6).abs() <= TB.adc_rate / TB.period as f64 / 2.0);
        let v = eval(&s, &TB, 1000, 4096);
        for (i, x) in v.iter().enumerate() {
            let t = (1000 + i) as f64;
            let want = 0.7 * (2.0 * PI * f * t / TB.adc_rate).cos();
            assert!((x - want).abs() < 1e-9, "sample {i}: {x} vs {want}");
        }
        // The last samples of the period join the first seamlessly.
        let tail = eval(&s, &TB, TB.period - 1, 1)[0];
        let want = 0.7 * (2.0 * PI * f * (TB.period - 1) as f64 / TB.adc_rate).cos();
        assert!((tail - want).abs() < 1e-9);
    }

    #[test]
    fn multicw_delay_comb_and_noise() {
        let m = Signal::MultiCw {
            m: 3,
            amp0: 0.1,
            amp_step: 0.05,
            freq0: 1e7,
            freq_step: 2e6,
        };
        let sum = Signal::Add(
            Arc::new(Signal::Add(
                Arc::new(Signal::Cw {
                    amp: 0.1,
                    freq: 1e7,
                }),
                Arc::new(Signal::Cw {
                    amp: 0.15,
                    freq: 1.2e7,
                }),
            )),
            Arc::new(Signal::Cw {
                amp: 0.2,
                freq: 1.4e7,
            }),
        );
        let (a, b) = (eval(&m, &TB, 77, 500), eval(&sum, &TB, 77, 500));
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-12));

        let w = Arc::new(Signal::Wgn {
            std: 1.0,
            entropy: 9,
        });
        let d = Signal::Delay(w.clone(), 10);
        let base = eval(&w, &TB, 0, 3000);
        let del = eval(&d, &TB, 10, 2990);
        assert_eq!(&base[..2990], &del[..]);
        // Negative delays and the period wrap.
        let d = Signal::Delay(w.clone(), -5);
        assert_eq!(eval(&d, &TB, TB.period - 5, 1)[0], base[0]);
        // Noise statistics and independence from how the range is split.
        let n = eval(&w, &TB, 0, 200_000);
        let mean = n.iter().sum::<f64>() / n.len() as f64;
        let var = n.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n.len() as f64;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "{mean} {var}"
        );
        assert_eq!(eval(&w, &TB, 1500, 100), n[1500..1600].to_vec());

        let c = Signal::Comb {
            amp: 0.5,
            freq: TB.adc_rate / 1024.0,
        };
        let v = eval(&c, &TB, 0, 4096);
        let hits: Vec<usize> = (0..4096).filter(|&i| v[i] != 0.0).collect();
        assert_eq!(hits, vec![0, 1024, 2048, 3072]);
        assert_eq!(eval(&c, &TB, 1024, 1)[0], 0.5);
    }
}
