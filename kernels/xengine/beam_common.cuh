// gpucbf: beamformer arithmetic shared by beamform.cu (mma.sync) and beamform_wgmma.cu (sm_90a):
// the 16-bit weights, the dither hash and uniforms, the quantiser. Prepended to those sources on
// the host (after xshape.cuh).

#define QMAX 32512.0f

// 32-bit integer hash (lowbias32); identical to the host's `hash32`.
__device__ __forceinline__ u32 hash32(u32 x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// The host's uniform dither (2u - 255) / 512 from byte j of the pair hash (beam_dither: bytes
// 0, 1 re and im of the even spectrum of a pair, 2, 3 of the odd one) is 128 F - DITHER_C, both
// exact: F = 1 + u 2^-15 (u as byte 1 of 1.0f's bits: one PRMT), DITHER_C = 128 + 255 2^-9.
// The epilogue adds -DITHER_C in its scaling FMA and 128 F in a second FMA.
#define DITHER_C 128.498046875f
__device__ __forceinline__ float dither_f(u32 h, int j) {
    return __uint_as_float(__byte_perm(h, 0x3f800000u, 0x7604u | ((u32)j << 4)));
}

// 16-bit weight at channel c of an antenna of delay d and coefficient cw, scaled by q: phase
// pi*c*D reduced exactly (the product c*D split into a rounded part and its exact remainder) to
// [-pi, pi], where the hardware sine / cosine are within 4e-7 (the 16-bit weight step is 3e-5
// of the largest).
__device__ __forceinline__ void weight16_of(float d, float2 cw, int c, float q, int &wr, int &wi) {
    const float fc = (float)c;
    const float hi = fc * d, lo = fmaf(fc, d, -hi);
    const float ph = (hi - 2.0f * rintf(0.5f * hi)) + lo;
    float sn, cs;
    __sincosf(ph * 3.14159265358979f, &sn, &cs);
    wr = max(-32512, min(32512, __float2int_rn((cw.x * cs - cw.y * sn) * q)));
    wi = max(-32512, min(32512, __float2int_rn((cw.x * sn + cw.y * cs) * q)));
}

// The delay and coefficient of (beam, antenna a); zeros (a zero weight) for no beam (-1) or an
// antenna past the array.
__device__ __forceinline__ void weight_params(int beam, int a, const float2 *__restrict__ coef,
                                              const float *__restrict__ delay, float &d,
                                              float2 &cw) {
    d = 0.0f;
    cw = make_float2(0.0f, 0.0f);
    if (beam >= 0 && a < N_ANTS) {
        const size_t k = (size_t)beam * N_ANTS + a;
        d = delay[k];
        cw = coef[k];
    }
}

// The weight words at channel c of antennas a0, a0 + 1 of a beam, from their delays d and
// coefficients cw (weight_params), scaled by q: the Re output row (Wr, -Wi per antenna) and the
// Im output row (Wi, Wr), each as hi and lo int8 planes (w16 = 256 hi + lo), bytes in antenna
// order: w[0] Re hi, w[1] Re lo, w[2] Im hi, w[3] Im lo.
// (w = 256 hi + lo with lo in [-128, 127]: lo is byte 0 of w, hi byte 1 of w + 128; each
// word gathered with PRMTs.)
__device__ __forceinline__ void weight_words_of(const float (&d)[2], const float2 (&cw)[2], int c,
                                                float q, u32 (&w)[4]) {
    int wr[2], wi[2];
#pragma unroll
    for (int e = 0; e < 2; e++) weight16_of(d[e], cw[e], c, q, wr[e], wi[e]);
    const u32 r0 = (u32)wr[0], r1 = (u32)wr[1], i0 = (u32)wi[0], i1 = (u32)wi[1];
    const u32 n0 = 0u - i0, n1 = 0u - i1;
    // byte 1 of each of x, y at bytes 0, 1 (hi) and byte 0 of each (lo)
    auto hi2 = [](u32 x, u32 y) { return __byte_perm(x + 128u, y + 128u, 0x0051); };
    auto lo2 = [](u32 x, u32 y) { return __byte_perm(x, y, 0x0040); };
    w[0] = __byte_perm(hi2(r0, n0), hi2(r1, n1), 0x5410);
    w[1] = __byte_perm(lo2(r0, n0), lo2(r1, n1), 0x5410);
    w[2] = __byte_perm(hi2(i0, r0), hi2(i1, r1), 0x5410);
    w[3] = __byte_perm(lo2(i0, r0), lo2(i1, r1), 0x5410);
}

// weight_words_of for (beam, antennas a0, a0 + 1) (beam -1: zeros).
__device__ __forceinline__ void weight_words(int beam, int a0, int c, float q,
                                             const float2 *__restrict__ coef,
                                             const float *__restrict__ delay, u32 (&w)[4]) {
    float d[2];
    float2 cw[2];
#pragma unroll
    for (int e = 0; e < 2; e++) weight_params(beam, a0 + e, coef, delay, d[e], cw[e]);
    weight_words_of(d, cw, c, q, w);
}

// Clamp to +-127 and round half to even (the FP adder rounds v + 1.5 2^23 to an integer, ties
// to even): the low byte of the returned bits is the int8 value.
__device__ __forceinline__ u32 quant_bits(float v) {
    return __float_as_uint(__fadd_rn(fminf(fmaxf(v, -127.0f), 127.0f), 12582912.0f));
}

// 256 hi + lo as a float (before the output scale).
__device__ __forceinline__ float combine(int hi, int lo) {
#if N_ANTS <= 256
    // |256 hi + lo| <= 2 N_ANTS * 127 * 32640 < 2^31: exact in int32, one rounding
    return (float)(hi * 256 + lo);
#else
    return fmaf(256.0f, (float)hi, (float)lo);
#endif
}


// One complex output before quantising: the sums (fr, fi) (256 hi + lo) scaled by os, plus,
// when dither != 0, the dither of bytes j (re) and j + 1 (im) of the pair hash h.
__device__ __forceinline__ void beam_value(float fr, float fi, float os, int dither, u32 h, int j,
                                           float &vr, float &vi) {
    if (dither) {
        vr = fmaf(dither_f(h, j), 128.0f, fmaf(fr, os, -DITHER_C));
        vi = fmaf(dither_f(h, j + 1), 128.0f, fmaf(fi, os, -DITHER_C));
    } else {
        vr = __fmul_rn(fr, os);
        vi = __fmul_rn(fi, os);
    }
}

// The int8 pair of beam_value's (vr, vi) in the low 16 bits (re, then im).
__device__ __forceinline__ u32 beam_pack(float vr, float vi) {
    return __byte_perm(quant_bits(vr), quant_bits(vi), 0x0040);
}

// One complex output quantised (beam_value, beam_pack); counts saturation (|re| or |im| above
// 127 before rounding) into nsat.
__device__ __forceinline__ u32 beam_quant(float fr, float fi, float os, int dither, u32 h, int j,
                                          unsigned int &nsat) {
    float vr, vi;
    beam_value(fr, fi, os, dither, h, j, vr, vi);
    nsat += fmaxf(fabsf(vr), fabsf(vi)) > 127.0f;
    return beam_pack(vr, vi);
}
