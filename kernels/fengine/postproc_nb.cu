// Narrowband post-processing (reference/dsp.md §4, §6, §7): the complex FFT bins are mapped
// to output channels with DC in the middle — output channel c comes from bin
// (c − C/2) mod N, which swaps the band halves and, when N = 2C (discard mode), drops the
// outer half; with N = C (no-discard) every bin is kept. Then fine delay + phase, complex
// gain, dither, saturating round-half-even quantisation to 8 or 4 bits with saturation
// counts per pol, and the (heap, channel, spectrum-in-heap, pol, re/im) output layout.
// Helpers (dither hash, quantiser) are shared with postproc.cu (quant.cuh) and match
// src/fengine/postproc.rs.
//
// Block: 32 × 8 threads; a tile of 32 channels × 32 spectra goes through shared memory so
// that each output row (one channel, consecutive spectra, both pols) is written contiguously.
//
// Compile-time defines: N (PFB channels, a power of two), C (output channels), QMAX (127 or
// 7), FOUR_BIT (0 or 1).

#ifndef N
#error "define N"
#endif
#ifndef C
#error "define C"
#endif
#define TILE 32
#define ROWS 8

// The dither, quantiser and cmul come from quant.cuh, which the loader puts in front of
// this file.

// fft: ((s·2 + pol)·N + bin). out: byte offset of (heap, channel, spectrum-in-heap) is
// ((heap·C + c)·sph + si)·2·BPV. gains: [pol][C] complex. delay: per (s, pol)
// (−fine/(N·divisor), phase/π mod 2). keys: dither key per (s, pol). sat: [2], added to.
extern "C" __global__ void postproc_nb(const float2* __restrict__ fft,
                                       unsigned char* __restrict__ out,
                                       const float2* __restrict__ gains,
                                       const float2* __restrict__ delay,
                                       const unsigned long long* __restrict__ keys, int spectra,
                                       long long out_first, int sph, int dither,
                                       unsigned long long* __restrict__ sat) {
    __shared__ unsigned int tile[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int ct = blockIdx.x * TILE, st = blockIdx.y * TILE;
    const int c = ct + tx;
    const int bin = (c + N - C / 2) & (N - 1);
    unsigned int sat_p[2] = {0, 0};
    if (c < C) {
        const unsigned long long salt = dither_salt(c);
#pragma unroll
        for (int j = 0; j < TILE / ROWS; j++) {
            const int sl = ty + j * ROWS;
            const int s = st + sl;
            if (s >= spectra) continue;
            unsigned int v2[2];
#pragma unroll
            for (int p = 0; p < 2; p++) {
                const long long sp = (long long)s * 2 + p;
                const float2 x = fft[sp * N + bin];
                const float2 d = delay[sp];
                float sn, cs;
                sincospif(fmaf(d.x, (float)(c - C / 2), d.y), &sn, &cs);
                float2 v = cmul(x, cmul(make_float2(cs, sn), gains[p * C + c]));
                if (dither) v = add_dither(v, keys[sp], salt);
                v2[p] = quant_pack(v, sat_p[p]);
            }
            tile[tx][sl] = pack_pols(v2[0], v2[1]);
        }
    }
    __syncthreads();
    for (int i = ty; i < TILE; i += ROWS) {
        const int cc = ct + i;
        const int s = st + tx;
        if (s < spectra && cc < C) {
            const long long abs_s = out_first + s;
            const long long heap = abs_s / sph, si = abs_s % sph;
#if FOUR_BIT
            reinterpret_cast<unsigned short*>(out)[(heap * C + cc) * sph + si] =
                (unsigned short)tile[i][tx];
#else
            reinterpret_cast<unsigned int*>(out)[(heap * C + cc) * sph + si] = tile[i][tx];
#endif
        }
    }
#pragma unroll
    for (int p = 0; p < 2; p++) {
        unsigned int v = sat_p[p];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if ((tx & 31) == 0 && v) atomicAdd(sat + p, (unsigned long long)v);
    }
}
