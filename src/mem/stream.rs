//! Copying packet payloads into chunk memory with non-temporal (streaming) stores: the
//! destination is written once, read later by another thread or the GPU's DMA, never by
//! the writer, so the lines need not be read for ownership first nor kept in this core's
//! caches. On x86_64 the aligned middle of the copy uses `movntdq` (SSE2, always present
//! there); the unaligned head and tail, and other architectures, copy normally.

/// Copies below this many bytes take the plain copy (streaming pays off per whole line).
pub const STREAM_MIN: usize = 256;

/// Copies `src` to `dst` (`src.len()` bytes), streaming the 16-byte-aligned middle past the
/// caches. Call [`stream_fence`] before another thread may read what was written.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and must not overlap `src`.
#[inline]
pub unsafe fn copy_stream(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    #[cfg(target_arch = "x86_64")]
    if n >= STREAM_MIN {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let head = dst.align_offset(16).min(n);
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
        let body = (n - head) & !63;
        let (mut s, mut d) = (src.as_ptr().add(head), dst.add(head));
        let end = d.add(body);
        while d < end {
            let a = _mm_loadu_si128(s as *const __m128i);
            let b = _mm_loadu_si128(s.add(16) as *const __m128i);
            let c = _mm_loadu_si128(s.add(32) as *const __m128i);
            let e = _mm_loadu_si128(s.add(48) as *const __m128i);
            _mm_stream_si128(d as *mut __m128i, a);
            _mm_stream_si128(d.add(16) as *mut __m128i, b);
            _mm_stream_si128(d.add(32) as *mut __m128i, c);
            _mm_stream_si128(d.add(48) as *mut __m128i, e);
            s = s.add(64);
            d = d.add(64);
        }
        std::ptr::copy_nonoverlapping(s, d, n - head - body);
        return;
    }
    std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n);
}

/// Orders every streaming store of this thread before its later stores (x86_64 `sfence`):
/// call it before handing what [`copy_stream`] wrote to another thread (before the
/// release that publishes it).
#[inline]
pub fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length and alignment of both sides copies exactly, and writes nothing past
    /// the end.
    #[test]
    fn copies_every_length_and_alignment() {
        let src: Vec<u8> = (0..1200u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 15, 16, 63, 64, 255, 256, 257, 511, 1000, 1100] {
            for so in [0, 1, 8, 13] {
                for d_off in [0, 1, 7, 16, 33] {
                    let mut dst = vec![0xAAu8; 1300];
                    // SAFETY: d_off + len ≤ 1133 < 1300; src and dst are distinct.
                    unsafe { copy_stream(dst.as_mut_ptr().add(d_off), &src[so..so + len]) };
                    stream_fence();
                    assert_eq!(
                        &dst[d_off..d_off + len],
                        &src[so..so + len],
                        "{len} {so} {d_off}"
                    );
                    assert!(dst[..d_off].iter().all(|&b| b == 0xAA));
                    assert!(dst[d_off + len..].iter().all(|&b| b == 0xAA));
                }
            }
        }
    }
}
