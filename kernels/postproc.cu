// Wideband post-processing (reference/dsp.md §4-§7): the last radix-UNZIP pass of the
// length-N complex FFT, the real-to-complex fix-up that turns it into bins 0..N-1 of the
// real 2N-point FFT (X_k and X_{N-k} together), fine delay + phase, complex gain, dither,
// saturating round-half-even quantisation to 8 or 4 bits with saturation counts per pol,
// and the (heap, channel, spectrum-in-heap, pol, re/im) output layout.
//
// Input: fft[((s·2 + pol)·n + r)·(N/n) + q] = S_r[q], the length-N/n FFTs of z[n·m' + r].
//   Z_k = Σ_r e^{−2πi·r·k/N} S_r[k mod N/n]
//   E_k = (Z_k + conj Z_{N−k})/2,  O_k = −i(Z_k − conj Z_{N−k})/2,  t_k = e^{−iπk/N}
//   X_k = E_k + t_k·O_k,  X_{N−k} = conj(E_k − t_k·O_k)
//
// Block: 32 × ROWS threads (ROWS = 8 unless defined); a tile of 32 values of k
// (0 ≤ k ≤ N/2) × 32 spectra. Results go through shared memory so that each output row
// (one channel, consecutive spectra, both pols) is written contiguously.
//
// Compile-time defines: N (channels), UNZIP, QMAX (127 or 7), FOUR_BIT (0 or 1).

#ifndef N
#error "define N"
#endif
#ifndef UNZIP
#define UNZIP 1
#endif
#ifndef QMAX
#define QMAX 127
#endif
#ifndef FOUR_BIT
#define FOUR_BIT 0
#endif
// POST_FAST_SINCOS 1 (default): the delay/phase rotation from the hardware __sincosf after an
// exact reduction of the angle to [−π, π] (absolute error ~3e-7, far below the output LSB);
// 0: sincospif (the benchmark's reference point).
#ifndef POST_FAST_SINCOS
#define POST_FAST_SINCOS 1
#endif

#define L (N / UNZIP)
#define TILE 32
#ifndef ROWS
#define ROWS 8
#endif

// Same constant and hash as src/fengine/postproc.rs (splitmix64 finaliser).
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

__device__ __forceinline__ float2 conjf2(float2 a) { return make_float2(a.x, -a.y); }

// Saturating round-half-even to ±QMAX (NaN → 0); `sat` set when |v| > QMAX.
__device__ __forceinline__ int quant(float v, unsigned int& sat) {
    const float q = (float)QMAX;
    sat |= fabsf(v) > q;
#if QMAX == 127
    // One saturating conversion to [−128, 127] (ties to even, NaN → 0), then −128 → −127.
    int r;
    asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(r) : "f"(v));
    return max(r, -127);
#else
    if (isnan(v)) return 0;
    return (int)rintf(fminf(fmaxf(v, -q), q));
#endif
}

// Applies delay/phase/gain/dither to X for channel c and returns the packed value (two
// bytes re, im for 8-bit; one byte, re in the high nibble, for 4-bit).
// cg = c·0x9e3779b97f4a7c15 (the channel's dither salt, hoisted by the caller).
__device__ __forceinline__ unsigned int finish(float2 x, int c, unsigned long long cg, float2 d,
                                               float2 g, unsigned long long key, int dither,
                                               unsigned int& sat) {
    float sn, cs;
    const float th = fmaf(d.x, (float)(c - N / 2), d.y);  // angle / π
#if POST_FAST_SINCOS
    __sincosf(3.14159265358979f * (th - 2.0f * rintf(0.5f * th)), &sn, &cs);
#else
    sincospif(th, &sn, &cs);
#endif
    float2 v = cmul(x, cmul(make_float2(cs, sn), g));
    if (dither) {
        const unsigned long long r = mix64(key ^ cg);
        v.x = __fadd_rn(v.x, u32_to_dither((unsigned int)r));
        v.y = __fadd_rn(v.y, u32_to_dither((unsigned int)(r >> 32)));
    }
    unsigned int s = 0;
    const int qr = quant(v.x, s);
    const int qi = quant(v.y, s);
    sat += s;
#if FOUR_BIT
    return ((unsigned int)(qr & 0xf) << 4) | (unsigned int)(qi & 0xf);
#else
    return (unsigned int)(qr & 0xff) | ((unsigned int)(qi & 0xff) << 8);
#endif
}

// fft: see above. out: output buffer (byte offset of (heap, channel, spectrum-in-heap) is
// ((heap·N + c)·sph + si)·2·BPV). gains: [pol][N] complex. delay: per (s, pol)
// (−fine/(N·divisor), phase/π mod 2). keys: dither key per (s, pol). sat: [2], added to.
extern "C" __global__ void postproc(const float2* __restrict__ fft, unsigned char* __restrict__ out,
                                    const float2* __restrict__ gains,
                                    const float2* __restrict__ delay,
                                    const unsigned long long* __restrict__ keys, int spectra,
                                    long long out_first, int sph, int dither,
                                    unsigned long long* __restrict__ sat) {
    __shared__ unsigned int lo_t[TILE][TILE + 1];
    __shared__ unsigned int hi_t[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int kt = blockIdx.x * TILE, st = blockIdx.y * TILE;
    const int k = kt + tx;
    unsigned int sat_p[2] = {0, 0};

    if (k <= N / 2) {
        float ts, tc;
        sincospif(-(float)k / (float)N, &ts, &tc);
        const float2 t = make_float2(tc, ts);
        float2 tw[UNZIP];
        tw[0] = make_float2(1.0f, 0.0f);
#pragma unroll
        for (int r = 1; r < UNZIP; r++) {
            // e^{−2πi·r·k/N} exactly from the reduced integer argument.
            float sn, cs;
            sincospif(-2.0f * (float)((r * k) % N) / (float)N, &sn, &cs);
            tw[r] = make_float2(cs, sn);
        }
        const int ka = k % L, kb = (N - k) % L;
        const int cb = N - k;  // mirrored channel (only for 0 < k < N/2)
        const unsigned long long cga = (unsigned long long)k * 0x9e3779b97f4a7c15ULL;
        const unsigned long long cgb = (unsigned long long)cb * 0x9e3779b97f4a7c15ULL;
        const bool mirror = k > 0 && k < N / 2;
#pragma unroll
        for (int j = 0; j < TILE / ROWS; j++) {
            const int sl = ty + j * ROWS;
            const int s = st + sl;
            if (s >= spectra) continue;
            unsigned int wa = 0, wb = 0;
#pragma unroll
            for (int p = 0; p < 2; p++) {
                const float2* b = fft + ((long long)s * 2 + p) * N;
                float2 za = b[ka], zb = b[kb];
#pragma unroll
                for (int r = 1; r < UNZIP; r++) {
                    const float2 ua = b[r * L + ka], ub = b[r * L + kb];
                    const float2 pa = cmul(ua, tw[r]), pb = cmul(ub, conjf2(tw[r]));
                    za.x += pa.x; za.y += pa.y;
                    zb.x += pb.x; zb.y += pb.y;
                }
                const float2 e = make_float2(0.5f * (za.x + zb.x), 0.5f * (za.y - zb.y));
                // O = −i/2·(Z_k − conj Z_{N−k}).
                const float2 o = make_float2(0.5f * (za.y + zb.y), -0.5f * (za.x - zb.x));
                const float2 to = cmul(t, o);
                const float2 xa = make_float2(e.x + to.x, e.y + to.y);
                const float2 d = delay[(long long)s * 2 + p];
                const unsigned long long key = keys[(long long)s * 2 + p];
                const unsigned int va =
                    finish(xa, k, cga, d, gains[p * N + k], key, dither, sat_p[p]);
#if FOUR_BIT
                wa |= va << (8 * p);
#else
                wa |= va << (16 * p);
#endif
                if (mirror) {
                    const float2 xb = make_float2(e.x - to.x, -(e.y - to.y));
                    const unsigned int vb =
                        finish(xb, cb, cgb, d, gains[p * N + cb], key, dither, sat_p[p]);
#if FOUR_BIT
                    wb |= vb << (8 * p);
#else
                    wb |= vb << (16 * p);
#endif
                }
            }
            lo_t[tx][sl] = wa;
            hi_t[tx][sl] = wb;
        }
    }
    __syncthreads();
    // Thread (tx, ty) writes spectrum st + tx of channels kt + ty + j·ROWS (and mirrors).
    const int s = st + tx;
    if (s < spectra) {
        const long long abs_s = out_first + s;
        const long long heap = abs_s / sph;
        const long long row0 = heap * N * sph + (abs_s - heap * sph);  // (heap, channel 0, si)
#if FOUR_BIT
        unsigned short* o = reinterpret_cast<unsigned short*>(out) + row0;
#else
        unsigned int* o = reinterpret_cast<unsigned int*>(out) + row0;
#endif
#pragma unroll
        for (int j = 0; j < TILE / ROWS; j++) {
            const int i = ty + j * ROWS;
            const int c = kt + i;
            if (c <= N / 2) {
                o[(long long)c * sph] = lo_t[i][tx];
                if (c > 0 && c < N / 2) o[(long long)(N - c) * sph] = hi_t[i][tx];
            }
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
