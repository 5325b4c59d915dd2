// Dither and quantisation device functions shared by postproc.cu and postproc_nb.cu (and the
// CPU reference src/fengine/postproc.rs, which computes the same values bit for bit). The
// Rust loader prepends this file to each kernel source (src/fengine/gpu.rs `POSTPROC_SRC`,
// src/fengine/gpu_ddc.rs `POSTPROC_NB_SRC`), so it needs no NVRTC include path.
//
// Compile-time defines: QMAX (127 or 7; default 127), FOUR_BIT (0 or 1; default 0).
#ifndef GPUCBF_QUANT_CUH
#define GPUCBF_QUANT_CUH

#ifndef QMAX
#define QMAX 127
#endif
#ifndef FOUR_BIT
#define FOUR_BIT 0
#endif

// Dither (reference/dsp.md §7): uniform in (−½, ½) LSB on re and im independently, keyed by
// (seed, feng_id, pol, absolute spectrum) through the host's `dither_key` and by channel:
//   r = mix1(key ^ salt(c)),  salt(c) = mix1(c · 0x9e3779b97f4a7c15)
//   re = unit(r mod 2^32), im = unit(r >> 32)
// mix1 is one xor-shift-multiply-xor-shift round (the key is already a full-entropy hash, the
// per-channel salt is hoisted out of the spectrum loops). unit() maps 22 bits j to
// (j + ½)·2^−22 − ½ without an integer-to-float conversion: 2^22 levels, symmetric about 0,
// |value| ≤ ½ − 2^−23 < ½.
#define DITHER_MUL 0xd6e8feb86659fd93ULL
#define DITHER_GOLDEN 0x9e3779b97f4a7c15ULL

__device__ __forceinline__ unsigned long long dither_mix1(unsigned long long z) {
    z ^= z >> 32;
    z *= DITHER_MUL;
    return z ^ (z >> 32);
}

__device__ __forceinline__ unsigned long long dither_salt(unsigned int c) {
    return dither_mix1((unsigned long long)c * DITHER_GOLDEN);
}

// 1 + (2j + 1)·2^−23 − 1.5 is exact (Sterbenz).
__device__ __forceinline__ float dither_unit(unsigned int r) {
    return __fsub_rn(__uint_as_float(0x3f800001u | (r & 0x007ffffeu)), 1.5f);
}

// Adds the dither of (key, salt) to v (the additions rounded as on the CPU).
__device__ __forceinline__ float2 add_dither(float2 v, unsigned long long key,
                                             unsigned long long salt) {
    const unsigned long long r = dither_mix1(key ^ salt);
    v.x = __fadd_rn(v.x, dither_unit((unsigned int)r));
    v.y = __fadd_rn(v.y, dither_unit((unsigned int)(r >> 32)));
    return v;
}

// Saturating round-half-even to ±QMAX (NaN → 0); `sat` set when |v| > QMAX.
__device__ __forceinline__ int quant(float v, unsigned int& sat) {
    sat |= fabsf(v) > (float)QMAX;
#if QMAX == 127
    // One saturating conversion to [−128, 127] (ties to even, NaN → 0), then −128 → −127.
    int r;
    asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(r) : "f"(v));
    return max(r, -127);
#else
    if (isnan(v)) return 0;
    const float q = (float)QMAX;
    return (int)rintf(fminf(fmaxf(v, -q), q));
#endif
}

// Quantises v and adds 1 to `sat` when re or im saturated. Returns the packed value in the
// low 16 bits (8-bit: re in the low byte, im in the next) or the low 8 bits (4-bit: re in the
// high nibble); the bits above are unspecified (pack_pols drops them).
__device__ __forceinline__ unsigned int quant_pack(float2 v, unsigned int& sat) {
    unsigned int s = 0;
    const int qr = quant(v.x, s);
    const int qi = quant(v.y, s);
    sat += s;
#if FOUR_BIT
    return ((unsigned int)qr << 4) | ((unsigned int)qi & 0xfu);
#else
    return __byte_perm((unsigned int)qr, (unsigned int)qi, 0x0040);
#endif
}

// The (pol 0, pol 1) pair of quant_pack values as one output word (4 bytes for 8-bit; the low
// 2 bytes for 4-bit, the rest unspecified).
__device__ __forceinline__ unsigned int pack_pols(unsigned int v0, unsigned int v1) {
#if FOUR_BIT
    return __byte_perm(v0, v1, 0x0040);
#else
    return __byte_perm(v0, v1, 0x5410);
#endif
}

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

#endif  // GPUCBF_QUANT_CUH
