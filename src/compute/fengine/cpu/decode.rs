//! Decode of digitiser samples (dsp.md §2): two's complement, big-endian, MSB first,
//! 2–16 bits. Each sample lies within 3 consecutive bytes; it is loaded as a 24-bit
//! big-endian word, shifted to the top of an i32 and arithmetically shifted back down.

use crate::compute::fengine::{FError, Samples};
use rayon::prelude::*;

const PAR_CHUNK: usize = 1 << 16;

fn check_bits(bits: u32) -> Result<(), FError> {
    if (2..=16).contains(&bits) {
        Ok(())
    } else {
        Err(FError::BadInputBits(bits))
    }
}

/// Checks that `samples` is self-consistent (bit width, packed buffer long enough).
pub(crate) fn validate(samples: &Samples, pol: usize) -> Result<(), FError> {
    check_bits(samples.bits())?;
    if let Samples::Packed { data, bits, len } = samples {
        let need = (*len * *bits as usize).div_ceil(8);
        if data.len() < need {
            return Err(FError::InputTooShort {
                pol,
                needed: need,
                have: data.len(),
            });
        }
    }
    Ok(())
}

#[inline(always)]
fn sample_at(data: &[u8], bits: u32, i: usize) -> i32 {
    let bit = i * bits as usize;
    let byte = bit / 8;
    let shift = (bit % 8) as u32;
    let word = if byte + 3 <= data.len() {
        (data[byte] as u32) << 16 | (data[byte + 1] as u32) << 8 | data[byte + 2] as u32
    } else {
        // Near the end of the buffer: missing bytes read as zero (they are never part of
        // the sample because the buffer holds all of it).
        let get = |k: usize| data.get(byte + k).copied().unwrap_or(0) as u32;
        get(0) << 16 | get(1) << 8 | get(2)
    };
    ((word << (8 + shift)) as i32) >> (32 - bits)
}

/// Decodes `out.len()` samples from sample index `start`. Groups of 8 samples occupy
/// exactly `bits` bytes, so aligned groups are loaded as one big-endian u128 and split
/// with constant shifts (the width is a const generic); the unaligned head, the tail and
/// groups within 16 bytes of the end of the buffer go sample by sample.
fn decode_run(data: &[u8], bits: u32, start: usize, out: &mut [f32]) {
    macro_rules! dispatch {
        ($($b:literal)*) => {
            match bits {
                $($b => decode_run_n::<$b>(data, start, out),)*
                _ => {
                    for (k, o) in out.iter_mut().enumerate() {
                        *o = sample_at(data, bits, start + k) as f32;
                    }
                }
            }
        };
    }
    dispatch!(2 3 4 5 6 7 9 10 11 12 13 14 15 16)
}

fn decode_run_n<const B: usize>(data: &[u8], start: usize, out: &mut [f32]) {
    let n = out.len();
    let head = ((8 - start % 8) % 8).min(n);
    for (k, o) in out[..head].iter_mut().enumerate() {
        *o = sample_at(data, B as u32, start + k) as f32;
    }
    let mut k = head;
    while k + 8 <= n {
        let byte = (start + k) / 8 * B;
        let Some(w) = data.get(byte..byte + 16) else {
            break;
        };
        let mut b = [0u8; 16];
        b.copy_from_slice(w);
        let v = u128::from_be_bytes(b);
        for m in 0..8 {
            out[k + m] = ((((v << (m * B)) as i128) >> (128 - B)) as i32) as f32;
        }
        k += 8;
    }
    for (j, o) in out[k..].iter_mut().enumerate() {
        *o = sample_at(data, B as u32, start + k + j) as f32;
    }
}

/// Decodes samples `[start, start + out.len())` into `out` as f32 (multi-threaded).
pub fn decode_f32(samples: &Samples, start: usize, out: &mut [f32]) -> Result<(), FError> {
    validate(samples, 0)?;
    let end = start + out.len();
    if end > samples.len() {
        return Err(FError::InputTooShort {
            pol: 0,
            needed: end,
            have: samples.len(),
        });
    }
    match *samples {
        Samples::Decoded { data, .. } => {
            out.par_chunks_mut(PAR_CHUNK)
                .zip(data[start..end].par_chunks(PAR_CHUNK))
                .for_each(|(o, d)| {
                    for (o, &d) in o.iter_mut().zip(d) {
                        *o = d as f32;
                    }
                });
        }
        Samples::Packed { data, bits, .. } => {
            out.par_chunks_mut(PAR_CHUNK)
                .enumerate()
                .for_each(|(c, o)| {
                    let base = start + c * PAR_CHUNK;
                    if bits == 8 {
                        for (k, o) in o.iter_mut().enumerate() {
                            *o = data[base + k] as i8 as f32;
                        }
                    } else {
                        decode_run(data, bits, base, o);
                    }
                });
        }
    }
    Ok(())
}

/// Decodes samples `[start, start + out.len())` into `out` as i16.
pub fn decode(samples: &Samples, start: usize, out: &mut [i16]) -> Result<(), FError> {
    validate(samples, 0)?;
    let end = start + out.len();
    if end > samples.len() {
        return Err(FError::InputTooShort {
            pol: 0,
            needed: end,
            have: samples.len(),
        });
    }
    match *samples {
        Samples::Decoded { data, .. } => out.copy_from_slice(&data[start..end]),
        Samples::Packed { data, bits, .. } => {
            for (k, o) in out.iter_mut().enumerate() {
                *o = sample_at(data, bits, start + k) as i16;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spead::bitpack;

    #[test]
    fn matches_bitpack_all_widths_and_offsets() {
        for bits in 2..=16u32 {
            let lo = -(1i32 << (bits - 1));
            let hi = (1i32 << (bits - 1)) - 1;
            let n = 211;
            let s: Vec<i16> = (0..n)
                .map(|i| (lo + (i as i32 * 7919 + 13) % (hi - lo + 1)) as i16)
                .collect();
            let mut buf = vec![0u8; bitpack::packed_len(n, bits)];
            bitpack::pack(&s, bits, &mut buf);
            let samples = Samples::Packed {
                data: &buf,
                bits,
                len: n,
            };
            for start in [0usize, 1, 3, 7, 100] {
                let mut f = vec![0f32; n - start];
                decode_f32(&samples, start, &mut f).unwrap();
                let mut i = vec![0i16; n - start];
                decode(&samples, start, &mut i).unwrap();
                for k in 0..n - start {
                    assert_eq!(f[k], s[start + k] as f32, "bits {bits} start {start} k {k}");
                    assert_eq!(i[k], s[start + k]);
                }
            }
        }
    }

    #[test]
    fn errors_not_panics() {
        let buf = [0u8; 4];
        let mut out = [0f32; 4];
        let s = Samples::Packed {
            data: &buf,
            bits: 17,
            len: 1,
        };
        assert_eq!(decode_f32(&s, 0, &mut out), Err(FError::BadInputBits(17)));
        let s = Samples::Packed {
            data: &buf,
            bits: 1,
            len: 1,
        };
        assert_eq!(decode_f32(&s, 0, &mut out), Err(FError::BadInputBits(1)));
        // 4 bytes hold only 3 ten-bit samples.
        let s = Samples::Packed {
            data: &buf,
            bits: 10,
            len: 4,
        };
        assert!(matches!(
            decode_f32(&s, 0, &mut out),
            Err(FError::InputTooShort { .. })
        ));
        let s = Samples::Packed {
            data: &buf,
            bits: 10,
            len: 3,
        };
        assert!(matches!(
            decode_f32(&s, 0, &mut out),
            Err(FError::InputTooShort { .. })
        ));
        assert!(decode_f32(&s, 0, &mut out[..3]).is_ok());
    }
}
