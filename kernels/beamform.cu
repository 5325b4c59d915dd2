// gpucbf X-engine beamformer: single-pol beams from one batch of F-engine data.
//
// Input: int8 [antenna][channel][spectrum][pol][re/im] (one batch). Output: int8
// [beam][channel][spectrum][re/im]. For beam b, local channel c:
//   out = Q( sum_a W'[b][a] * exp(j*pi*c*D[b][a]) * x[a][c][s][pol_b] + dither )
// W' (complex float: weight * quant gain * fringe phase re-referenced to the first channel, zero
// for absent antennas) and D (= -2*df*tau wrapped to [-1, 1)) are prepared on the host. Q clamps to
// +-127 and rounds half to even. Saturation (|re| or |im| > 127 before rounding) is counted per beam.
//
// Defines: N_ANTS, N_CHANNELS, SPECTRA (spectra per batch), N_BEAMS, BATCH_BEAMS (beams per pass).
// One thread handles SPT spectra of one channel for a group of beams of one pol.

#ifndef N_ANTS
#error "N_ANTS must be defined"
#endif
#ifndef N_CHANNELS
#error "N_CHANNELS must be defined"
#endif
#ifndef SPECTRA
#error "SPECTRA must be defined"
#endif
#ifndef N_BEAMS
#error "N_BEAMS must be defined"
#endif

#define THREADS 128
#define SPT 2 // spectra per thread (coefficients reused from one shared load)
#define BLOCK_SPECTRA (THREADS * SPT)
#define BATCH_ANTS 16
#ifndef BATCH_BEAMS
#define BATCH_BEAMS 16
#endif

typedef unsigned long long u64;

__device__ __forceinline__ u64 splitmix64(u64 z) {
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z;
}

// Uniform dither in (-0.5, 0.5) from a 32-bit word (same formula as the host's `dither_pair`).
__device__ __forceinline__ float dither_from(unsigned int u) {
    return __fmul_rn(__fadd_rn((float)(int)u, 0.5f), 2.3282709e-10f);
}

// coef: float2 [N_BEAMS][N_ANTS]; delay: float [N_BEAMS][N_ANTS]; order: beam indices sorted by
// pol; groups: int3 (start in order, count <= BATCH_BEAMS, pol) so that every group has one pol
// (no per-beam pol select in the inner loop). saturated: u64 [N_BEAMS] (added to).
// dither != 0 enables dither with key ((batch * N_CHANNELS + c) * SPECTRA + s) * N_BEAMS + beam.
extern "C" __global__ void __launch_bounds__(THREADS)
    beamform(const signed char *__restrict__ in, char2 *__restrict__ out,
             const float2 *__restrict__ coef, const float *__restrict__ delay,
             const int *__restrict__ order, const int3 *__restrict__ groups, int n_groups,
             unsigned long long *__restrict__ saturated, int dither, u64 seed, u64 batch) {
    __shared__ float2 w[BATCH_ANTS][BATCH_BEAMS];
    const int c = blockIdx.y;
    int s[SPT];
    bool valid[SPT];
#pragma unroll
    for (int k = 0; k < SPT; k++) {
        s[k] = blockIdx.x * BLOCK_SPECTRA + k * THREADS + threadIdx.x;
        valid[k] = s[k] < SPECTRA;
    }

    for (int gi = 0; gi < n_groups; gi++) {
        const int3 grp = groups[gi];
        const int nb = grp.y, pol = grp.z;
        float ar[BATCH_BEAMS][SPT], ai[BATCH_BEAMS][SPT];
#pragma unroll
        for (int b = 0; b < BATCH_BEAMS; b++)
#pragma unroll
            for (int k = 0; k < SPT; k++) ar[b][k] = ai[b][k] = 0.0f;
        for (int a0 = 0; a0 < N_ANTS; a0 += BATCH_ANTS) {
            __syncthreads();
            for (int k = threadIdx.x; k < BATCH_ANTS * BATCH_BEAMS; k += THREADS) {
                int a = k / BATCH_BEAMS, b = k % BATCH_BEAMS;
                float2 v = make_float2(0.0f, 0.0f);
                if (a0 + a < N_ANTS && b < nb) {
                    size_t idx = (size_t)order[grp.x + b] * N_ANTS + a0 + a;
                    float sn, cs;
                    sincospif((float)c * delay[idx], &sn, &cs);
                    float2 cw = coef[idx];
                    v.x = cw.x * cs - cw.y * sn;
                    v.y = cw.x * sn + cw.y * cs;
                }
                w[a][b] = v;
            }
            __syncthreads();
            const int na = min(BATCH_ANTS, N_ANTS - a0);
            for (int a = 0; a < na; a++) {
                float xr[SPT], xi[SPT];
#pragma unroll
                for (int k = 0; k < SPT; k++) {
                    xr[k] = xi[k] = 0.0f;
                    if (valid[k]) {
                        char2 x = *(const char2 *)(in + (((size_t)(a0 + a) * N_CHANNELS + c) * SPECTRA + s[k]) * 4 + 2 * pol);
                        xr[k] = x.x;
                        xi[k] = x.y;
                    }
                }
#pragma unroll
                for (int b = 0; b < BATCH_BEAMS; b++) {
                    float2 cw = w[a][b];
#pragma unroll
                    for (int k = 0; k < SPT; k++) {
                        ar[b][k] = fmaf(cw.x, xr[k], fmaf(-cw.y, xi[k], ar[b][k]));
                        ai[b][k] = fmaf(cw.x, xi[k], fmaf(cw.y, xr[k], ai[b][k]));
                    }
                }
            }
        }
#pragma unroll
        for (int b = 0; b < BATCH_BEAMS; b++) {
            const int beam = b < nb ? order[grp.x + b] : 0;
#pragma unroll
            for (int k = 0; k < SPT; k++) {
                bool sat = false;
                if (valid[k] && b < nb) {
                    float vr = ar[b][k], vi = ai[b][k];
                    if (dither) {
                        u64 key = (((u64)batch * N_CHANNELS + c) * SPECTRA + s[k]) * N_BEAMS + beam;
                        u64 h = splitmix64(seed + key * 0x9E3779B97F4A7C15ULL);
                        vr = __fadd_rn(vr, dither_from((unsigned int)h));
                        vi = __fadd_rn(vi, dither_from((unsigned int)(h >> 32)));
                    }
                    sat = fabsf(vr) > 127.0f || fabsf(vi) > 127.0f;
                    vr = fminf(fmaxf(vr, -127.0f), 127.0f);
                    vi = fminf(fmaxf(vi, -127.0f), 127.0f);
                    char2 q;
                    q.x = (signed char)__float2int_rn(vr);
                    q.y = (signed char)__float2int_rn(vi);
                    out[((size_t)beam * N_CHANNELS + c) * SPECTRA + s[k]] = q;
                }
                unsigned int bal = __ballot_sync(0xffffffffu, sat);
                if ((threadIdx.x & 31) == 0 && bal) atomicAdd(&saturated[beam], (unsigned long long)__popc(bal));
            }
        }
    }
}
