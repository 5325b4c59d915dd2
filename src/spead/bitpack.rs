//! Packing of signed samples into big-endian, MSB-first bit streams (digitiser format) and
//! back. Any width from 2 to 16 bits.

/// Bytes needed for `n` samples of `bits` bits (rounded up).
pub fn packed_len(n: usize, bits: u32) -> usize {
    (n * bits as usize).div_ceil(8)
}

/// Packs `samples` (each already within the signed `bits` range) into `out`.
/// `out` must be at least `packed_len(samples.len(), bits)` bytes.
pub fn pack(samples: &[i16], bits: u32, out: &mut [u8]) {
    assert!(
        (2..=16).contains(&bits),
        "sample width {bits} out of range 2..=16"
    );
    assert!(
        out.len() >= packed_len(samples.len(), bits),
        "output buffer too small"
    );
    if bits == 10 {
        return pack10(samples, out);
    }
    let mask = (1u64 << bits) - 1;
    let mut acc: u64 = 0;
    let mut nbits = 0u32;
    let mut o = 0usize;
    for &s in samples {
        acc = (acc << bits) | (s as i64 as u64 & mask);
        nbits += bits;
        while nbits >= 8 {
            nbits -= 8;
            out[o] = (acc >> nbits) as u8;
            o += 1;
        }
    }
    if nbits > 0 {
        out[o] = (acc << (8 - nbits)) as u8;
    }
}

fn pack10(samples: &[i16], out: &mut [u8]) {
    let mut chunks = samples.chunks_exact(4);
    let mut o = 0usize;
    for c in &mut chunks {
        let w = ((c[0] as u64 & 0x3FF) << 30)
            | ((c[1] as u64 & 0x3FF) << 20)
            | ((c[2] as u64 & 0x3FF) << 10)
            | (c[3] as u64 & 0x3FF);
        out[o..o + 5].copy_from_slice(&w.to_be_bytes()[3..]);
        o += 5;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut acc: u64 = 0;
        for &s in rest {
            acc = (acc << 10) | (s as u64 & 0x3FF);
        }
        let nbits = 10 * rest.len() as u32;
        let nbytes = nbits.div_ceil(8) as usize;
        acc <<= nbytes as u32 * 8 - nbits;
        out[o..o + nbytes].copy_from_slice(&acc.to_be_bytes()[8 - nbytes..]);
    }
}

/// Unpacks `out.len()` signed samples of `bits` bits from `data`.
pub fn unpack(data: &[u8], bits: u32, out: &mut [i16]) {
    assert!(
        (2..=16).contains(&bits),
        "sample width {bits} out of range 2..=16"
    );
    assert!(
        data.len() >= packed_len(out.len(), bits),
        "input buffer too small"
    );
    let shift = 64 - bits;
    let mut acc: u64 = 0;
    let mut nbits = 0u32;
    let mut i = 0usize;
    for v in out.iter_mut() {
        while nbits < bits {
            acc = (acc << 8) | data[i] as u64;
            i += 1;
            nbits += 8;
        }
        nbits -= bits;
        let raw = (acc >> nbits) << shift;
        *v = ((raw as i64) >> shift) as i16;
        acc &= (1u64 << nbits) - 1;
    }
}

#[cfg(test)]
mod tests {
    use crate::spead::bitpack::*;

    #[test]
    fn ten_bit_known_pattern() {
        // -1, 0, 1, -512 → 1111111111 0000000000 0000000001 1000000000
        let mut out = [0u8; 5];
        pack(&[-1, 0, 1, -512], 10, &mut out);
        assert_eq!(out, [0xFF, 0xC0, 0x00, 0x06, 0x00]);
    }

    #[test]
    fn round_trip_all_widths() {
        for bits in 2..=16u32 {
            let lo = -(1i32 << (bits - 1));
            let hi = (1i32 << (bits - 1)) - 1;
            let samples: Vec<i16> = (0..103)
                .map(|i| (lo + (i * 7919) % (hi - lo + 1)) as i16)
                .collect();
            let mut buf = vec![0u8; packed_len(samples.len(), bits)];
            pack(&samples, bits, &mut buf);
            let mut back = vec![0i16; samples.len()];
            unpack(&buf, bits, &mut back);
            assert_eq!(samples, back, "bits={bits}");
        }
    }
}
