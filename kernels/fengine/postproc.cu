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
// The thread of k = 0 also produces channel N/2 (both are real-FFT bins that pair with no
// other: X_0 = Re Z_0 + Im Z_0, X_{N/2} = conj Z_{N/2}), so the k range is 0 ≤ k < N/2, a
// whole number of tiles (no tile holding only k = N/2).
//
// Block: 32 × ROWS threads (ROWS = 8 unless defined); tiles of 32 values of k
// (0 ≤ k < N/2) × 32 spectra, one block walking several spectrum tiles. Results go through
// shared memory so that each output row (one channel, consecutive spectra, both pols) is
// written contiguously.
//
// Compile-time defines: N (channels), UNZIP, QMAX (127 or 7), FOUR_BIT (0 or 1), ROWS,
// POST_FAST_SINCOS, POST_PREFETCH, POST_MIN_BLOCKS.

#ifndef N
#error "define N"
#endif
#ifndef UNZIP
#define UNZIP 1
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

// The dither, quantiser and cmul come from quant.cuh, which the loader puts in front of
// this file.

__device__ __forceinline__ float2 conjf2(float2 a) { return make_float2(a.x, -a.y); }

// Applies delay/phase/gain/dither to X for a channel at cf = c − N/2 and returns the packed
// value (two bytes re, im for 8-bit; one byte, re in the high nibble, for 4-bit).
// hd = half the (s, pol) delay coefficients, so hd.x·cf + hd.y is the angle in turns;
// salt = dither_salt(c) (hoisted by the caller).
__device__ __forceinline__ unsigned int finish(float2 x, float cf, unsigned long long salt,
                                               float2 hd, float2 g, unsigned long long key,
                                               int dither, unsigned int& sat) {
    float sn, cs;
    const float turns = fmaf(hd.x, cf, hd.y);
#if POST_FAST_SINCOS
    __sincosf(6.28318530717959f * (turns - rintf(turns)), &sn, &cs);
#else
    sincospif(2.0f * turns, &sn, &cs);
#endif
    float2 v = cmul(x, cmul(make_float2(cs, sn), g));
    if (dither) v = add_dither(v, key, salt);
    return quant_pack(v, sat);
}

// The fft values, delay coefficients and dither keys of one spectrum (both pols) for one
// thread's channel pair, loaded together; with POST_PREFETCH 1 one spectrum ahead of their
// use (two spectra of loads in flight per warp, at the cost of registers and copies).
struct Spec {
    float2 a[2][UNZIP], b[2][UNZIP];  // [pol][r]: S_r[k mod L], S_r[(N − k) mod L]
    float4 d;                          // (pol 0 delay, pol 1 delay)
    ulonglong2 key;                    // (pol 0 key, pol 1 key)
};

__device__ __forceinline__ void load_spec(Spec& x, const float2* __restrict__ fft,
                                          const float4* __restrict__ delay4,
                                          const ulonglong2* __restrict__ keys2, int s, int ka,
                                          int kb) {
#pragma unroll
    for (int p = 0; p < 2; p++) {
        const float2* b = fft + ((long long)s * 2 + p) * N;
#pragma unroll
        for (int r = 0; r < UNZIP; r++) {
            x.a[p][r] = b[r * L + ka];
            x.b[p][r] = b[r * L + kb];
        }
    }
    x.d = delay4[s];
    x.key = keys2[s];
}

#ifndef POST_PREFETCH
#define POST_PREFETCH 0
#endif
// POST_MIN_BLOCKS > 0: __launch_bounds__(32·ROWS, POST_MIN_BLOCKS) (registers for occupancy).
#ifndef POST_MIN_BLOCKS
#define POST_MIN_BLOCKS 0
#endif
#if POST_MIN_BLOCKS > 0
#define POST_BOUNDS __launch_bounds__(TILE * ROWS, POST_MIN_BLOCKS)
#else
#define POST_BOUNDS
#endif

// fft: see above. out: output buffer (byte offset of (heap, channel, spectrum-in-heap) is
// ((heap·N + c)·sph + si)·2·BPV). gains: [pol][N] complex. delay: per (s, pol)
// (−fine/(N·divisor), phase/π mod 2). keys: dither key per (s, pol). sat: [2], added to.
// Grid: x over tiles of 32 values of k, y over blocks that each walk spectrum tiles
// blockIdx.y, blockIdx.y + gridDim.y, ... (the per-channel set-up is done once per block).
extern "C" __global__ void POST_BOUNDS postproc(const float2* __restrict__ fft, unsigned char* __restrict__ out,
                                    const float2* __restrict__ gains,
                                    const float2* __restrict__ delay,
                                    const unsigned long long* __restrict__ keys, int spectra,
                                    long long out_first, int sph, int dither,
                                    unsigned long long* __restrict__ sat) {
    __shared__ unsigned int lo_t[TILE][TILE + 1];
    __shared__ unsigned int hi_t[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int kt = blockIdx.x * TILE;
    const int k = kt + tx;
    const bool active = k < N / 2;
    const int kk = active ? k : 0;  // keeps the per-channel constants defined
    const bool k0 = kk == 0;
    const float4* delay4 = reinterpret_cast<const float4*>(delay);
    const ulonglong2* keys2 = reinterpret_cast<const ulonglong2*>(keys);
    unsigned int sat_p[2] = {0, 0};

    // Per channel, hoisted out of the spectrum loops: twiddles, dither salts, gains, c − N/2.
    float ts, tc;
    sincospif(-(float)kk / (float)N, &ts, &tc);
    const float2 t = make_float2(tc, ts);
    // tw: the twiddles of Z_k. Those of the second value are conj tw for Z_{N−k} and, for
    // k = 0 (tw = 1), (−1)^r for Z_{N/2}: (odd_sign·tw.x, −tw.y) for odd r.
    float2 tw[UNZIP];
    tw[0] = make_float2(1.0f, 0.0f);
#pragma unroll
    for (int r = 1; r < UNZIP; r++) {
        // e^{−2πi·r·k/N} exactly from the reduced integer argument.
        float sn, cs;
        sincospif(-2.0f * (float)((r * kk) % N) / (float)N, &sn, &cs);
        tw[r] = make_float2(cs, sn);
    }
    const float odd_sign = k0 ? -1.0f : 1.0f;
    const int cb = k0 ? N / 2 : N - kk;  // second channel
    const int ka = kk % L, kb = cb % L;
    const unsigned long long salt_a = dither_salt(kk), salt_b = dither_salt(cb);
    const float cfa = (float)(kk - N / 2), cfb = (float)(cb - N / 2);
    float2 ga[2], gb[2];
#pragma unroll
    for (int p = 0; p < 2; p++) {
        ga[p] = gains[p * N + kk];
        gb[p] = gains[p * N + cb];
    }

    for (int st = blockIdx.y * TILE; st < spectra; st += gridDim.y * TILE) {
        const int nj = min(TILE, spectra - st);  // spectra in this tile
        if (active) {
            Spec cur;
            if (ty < nj) load_spec(cur, fft, delay4, keys2, st + ty, ka, kb);
#pragma unroll
            for (int j = 0; j < TILE / ROWS; j++) {
                const int sl = ty + j * ROWS;
#if POST_PREFETCH
                Spec nxt;
                const bool more = j + 1 < TILE / ROWS && sl + ROWS < nj;
                if (more) load_spec(nxt, fft, delay4, keys2, st + sl + ROWS, ka, kb);
#else
                if (j > 0 && sl < nj) load_spec(cur, fft, delay4, keys2, st + sl, ka, kb);
#endif
                if (sl < nj) {
                    unsigned int va[2], vb[2];
#pragma unroll
                    for (int p = 0; p < 2; p++) {
                        float2 za = cur.a[p][0], zb = cur.b[p][0];
#pragma unroll
                        for (int r = 1; r < UNZIP; r++) {
                            const float2 pa = cmul(cur.a[p][r], tw[r]);
                            const float2 twb = make_float2(
                                (r & 1) ? odd_sign * tw[r].x : tw[r].x, -tw[r].y);
                            const float2 pb = cmul(cur.b[p][r], twb);
                            za.x += pa.x; za.y += pa.y;
                            zb.x += pb.x; zb.y += pb.y;
                        }
                        const float2 e =
                            make_float2(0.5f * (za.x + zb.x), 0.5f * (za.y - zb.y));
                        // O = −i/2·(Z_k − conj Z_{N−k}).
                        const float2 o =
                            make_float2(0.5f * (za.y + zb.y), -0.5f * (za.x - zb.x));
                        const float2 to = cmul(t, o);
                        // k = 0: za = Z_0, zb = Z_{N/2} (see the top).
                        const float2 xa = k0 ? make_float2(za.x + za.y, 0.0f)
                                             : make_float2(e.x + to.x, e.y + to.y);
                        const float2 xb = k0 ? conjf2(zb) : make_float2(e.x - to.x, -(e.y - to.y));
                        const float2 hd = p ? make_float2(0.5f * cur.d.z, 0.5f * cur.d.w)
                                            : make_float2(0.5f * cur.d.x, 0.5f * cur.d.y);
                        const unsigned long long key = p ? cur.key.y : cur.key.x;
                        va[p] = finish(xa, cfa, salt_a, hd, ga[p], key, dither, sat_p[p]);
                        vb[p] = finish(xb, cfb, salt_b, hd, gb[p], key, dither, sat_p[p]);
                    }
                    lo_t[tx][sl] = pack_pols(va[0], va[1]);
                    hi_t[tx][sl] = pack_pols(vb[0], vb[1]);
                }
#if POST_PREFETCH
                if (more) cur = nxt;
#endif
            }
        }
        __syncthreads();
        // Thread (tx, ty) writes spectrum st + tx of channels kt + ty + j·ROWS (and mirrors).
        if (tx < nj) {
            // Spectrum indices within one device output buffer fit 31 bits (the host checks
            // them): a 32-bit division, not the 64-bit division routine.
            const unsigned int abs_s = (unsigned int)(out_first + st + tx);
            const unsigned int heap = abs_s / (unsigned int)sph;
            const long long row0 =
                (long long)heap * N * sph + (abs_s - heap * (unsigned int)sph);  // (heap, 0, si)
#if FOUR_BIT
            unsigned short* o = reinterpret_cast<unsigned short*>(out) + row0;
#else
            unsigned int* o = reinterpret_cast<unsigned int*>(out) + row0;
#endif
#pragma unroll
            for (int j = 0; j < TILE / ROWS; j++) {
                const int i = ty + j * ROWS;
                const int c = kt + i;
                if (c < N / 2) {
                    o[(long long)c * sph] = lo_t[i][tx];
                    o[(long long)(c == 0 ? N / 2 : N - c) * sph] = hi_t[i][tx];
                }
            }
        }
        __syncthreads();  // the tile is read before the next one overwrites it
    }
#pragma unroll
    for (int p = 0; p < 2; p++) {
        unsigned int v = sat_p[p];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if ((tx & 31) == 0 && v) atomicAdd(sat + p, (unsigned long long)v);
    }
}
