// Narrowband post-processing (reference/dsp.md §4, §6, §7): the complex FFT bins are mapped
// to output channels with DC in the middle — output channel c comes from bin
// (c − C/2) mod N, which swaps the band halves and, when N = 2C (discard mode), drops the
// outer half; with N = C (no-discard) every bin is kept. Then fine delay + phase, complex
// gain, dither, saturating round-half-even quantisation to 8 or 4 bits with saturation
// counts per pol, and the (heap, channel, spectrum-in-heap, pol, re/im) output layout.
// Helpers (dither hash, quantiser) are the same as in postproc.cu and src/fengine/postproc.rs.
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
#ifndef QMAX
#define QMAX 127
#endif
#ifndef FOUR_BIT
#define FOUR_BIT 0
#endif

#define TILE 32
#define ROWS 8
#define DITHER_SCALE 2.3282709e-10f

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ float u32_to_dither(unsigned int r) {
    int i = (int)r;
    if (i < 0) i += 1;
    return __fmul_rn((float)i, DITHER_SCALE);
}

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

__device__ __forceinline__ int quant(float v, unsigned int& sat) {
    const float q = (float)QMAX;
    sat |= fabsf(v) > q;
    if (isnan(v)) return 0;
    return (int)rintf(fminf(fmaxf(v, -q), q));
}

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
#pragma unroll
        for (int j = 0; j < TILE / ROWS; j++) {
            const int sl = ty + j * ROWS;
            const int s = st + sl;
            if (s >= spectra) continue;
            unsigned int word = 0;
#pragma unroll
            for (int p = 0; p < 2; p++) {
                const long long sp = (long long)s * 2 + p;
                const float2 x = fft[sp * N + bin];
                const float2 d = delay[sp];
                float sn, cs;
                sincospif(fmaf(d.x, (float)(c - C / 2), d.y), &sn, &cs);
                float2 v = cmul(x, cmul(make_float2(cs, sn), gains[p * C + c]));
                if (dither) {
                    const unsigned long long r =
                        mix64(keys[sp] ^ ((unsigned long long)c * 0x9e3779b97f4a7c15ULL));
                    v.x = __fadd_rn(v.x, u32_to_dither((unsigned int)r));
                    v.y = __fadd_rn(v.y, u32_to_dither((unsigned int)(r >> 32)));
                }
                unsigned int f = 0;
                const int qr = quant(v.x, f);
                const int qi = quant(v.y, f);
                sat_p[p] += f;
#if FOUR_BIT
                word |= (((unsigned int)(qr & 0xf) << 4) | (unsigned int)(qi & 0xf)) << (8 * p);
#else
                word |= ((unsigned int)(qr & 0xff) | ((unsigned int)(qi & 0xff) << 8)) << (16 * p);
#endif
            }
            tile[tx][sl] = word;
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
