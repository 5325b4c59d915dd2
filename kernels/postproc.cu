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
// Compile-time defines: N (channels), UNZIP, QMAX (127 or 7), FOUR_BIT (0 or 1), ROWS,
// POST_FAST_SINCOS.

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
        const bool mirror = k > 0 && k < N / 2;
        // Per channel, hoisted out of the spectrum loop: dither salts, gains, c − N/2.
        const unsigned long long salt_a = dither_salt(k), salt_b = dither_salt(cb);
        const float cfa = (float)(k - N / 2);
        float2 ga[2], gb[2];
#pragma unroll
        for (int p = 0; p < 2; p++) {
            ga[p] = gains[p * N + k];
            gb[p] = mirror ? gains[p * N + cb] : make_float2(0.0f, 0.0f);
        }
#pragma unroll
        for (int j = 0; j < TILE / ROWS; j++) {
            const int sl = ty + j * ROWS;
            const int s = st + sl;
            if (s >= spectra) continue;
            unsigned int va[2], vb[2] = {0u, 0u};
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
                const float2 hd = make_float2(0.5f * d.x, 0.5f * d.y);
                const unsigned long long key = keys[(long long)s * 2 + p];
                va[p] = finish(xa, cfa, salt_a, hd, ga[p], key, dither, sat_p[p]);
                if (mirror) {
                    const float2 xb = make_float2(e.x - to.x, -(e.y - to.y));
                    vb[p] = finish(xb, -cfa, salt_b, hd, gb[p], key, dither, sat_p[p]);
                }
            }
            lo_t[tx][sl] = pack_pols(va[0], va[1]);
            hi_t[tx][sl] = pack_pols(vb[0], vb[1]);
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
