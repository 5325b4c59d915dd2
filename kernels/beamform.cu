// gpucbf X-engine beamformer: single-pol beams from one batch of F-engine data.
//
// Input: int8 [antenna][channel][spectrum][pol][re/im] (one batch). Output: int8
// [beam][channel][spectrum][re/im]. For beam b, local channel c:
//   out = Q( sum_a W'[b][a] * exp(j*pi*c*D[b][a]) * x[a][c][s][pol_b] + dither )
// W' (complex float: weight * quant gain * fringe phase re-referenced to the first channel, zero
// for absent antennas) and D (= -2*df*tau wrapped to [-1, 1)) are prepared on the host. Q clamps to
// +-127 and rounds half to even. Saturation (|re| or |im| > 127 before rounding) is counted per beam.
//
// Defines: N_ANTS, N_CHANNELS, SPECTRA (spectra per batch), N_BEAMS.

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

#define BLOCK_SPECTRA 128
#define BATCH_ANTS 16
#define BATCH_BEAMS (N_BEAMS < 32 ? N_BEAMS : 32)

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

// coef: float2 [N_BEAMS][N_ANTS]; delay: float [N_BEAMS][N_ANTS]; pol: int [N_BEAMS].
// saturated: u64 [N_BEAMS] (added to). dither != 0 enables dither with key
// ((batch * N_CHANNELS + c) * SPECTRA + s) * N_BEAMS + b.
extern "C" __global__ void __launch_bounds__(BLOCK_SPECTRA)
    beamform(const signed char *__restrict__ in, char2 *__restrict__ out,
             const float2 *__restrict__ coef, const float *__restrict__ delay,
             const int *__restrict__ pol, unsigned long long *__restrict__ saturated, int dither,
             u64 seed, u64 batch) {
    __shared__ float2 w[BATCH_ANTS][BATCH_BEAMS];
    __shared__ int bpol[BATCH_BEAMS];
    const int c = blockIdx.y;
    const int s = blockIdx.x * BLOCK_SPECTRA + threadIdx.x;
    const bool valid = s < SPECTRA;

    for (int b0 = 0; b0 < N_BEAMS; b0 += BATCH_BEAMS) {
        const int nb = min(BATCH_BEAMS, N_BEAMS - b0);
        float ar[BATCH_BEAMS], ai[BATCH_BEAMS];
#pragma unroll
        for (int b = 0; b < BATCH_BEAMS; b++) ar[b] = ai[b] = 0.0f;
        __syncthreads();
        if (threadIdx.x < BATCH_BEAMS) bpol[threadIdx.x] = threadIdx.x < nb ? pol[b0 + threadIdx.x] : 0;
        for (int a0 = 0; a0 < N_ANTS; a0 += BATCH_ANTS) {
            __syncthreads();
            for (int k = threadIdx.x; k < BATCH_ANTS * BATCH_BEAMS; k += BLOCK_SPECTRA) {
                int a = k / BATCH_BEAMS, b = k % BATCH_BEAMS;
                float2 v = make_float2(0.0f, 0.0f);
                if (a0 + a < N_ANTS && b < nb) {
                    size_t idx = (size_t)(b0 + b) * N_ANTS + a0 + a;
                    float sn, cs;
                    sincospif((float)c * delay[idx], &sn, &cs);
                    float2 cw = coef[idx];
                    v.x = cw.x * cs - cw.y * sn;
                    v.y = cw.x * sn + cw.y * cs;
                }
                w[a][b] = v;
            }
            __syncthreads();
            if (valid) {
                const int na = min(BATCH_ANTS, N_ANTS - a0);
                for (int a = 0; a < na; a++) {
                    char4 x = *(const char4 *)(in + (((size_t)(a0 + a) * N_CHANNELS + c) * SPECTRA + s) * 4);
                    float x0r = x.x, x0i = x.y, x1r = x.z, x1i = x.w;
#pragma unroll
                    for (int b = 0; b < BATCH_BEAMS; b++) {
                        float xr = bpol[b] ? x1r : x0r;
                        float xi = bpol[b] ? x1i : x0i;
                        float2 cw = w[a][b];
                        ar[b] = fmaf(cw.x, xr, fmaf(-cw.y, xi, ar[b]));
                        ai[b] = fmaf(cw.x, xi, fmaf(cw.y, xr, ai[b]));
                    }
                }
            }
        }
#pragma unroll
        for (int b = 0; b < BATCH_BEAMS; b++) {
            bool sat = false;
            if (valid && b < nb) {
                float vr = ar[b], vi = ai[b];
                if (dither) {
                    u64 key = (((u64)batch * N_CHANNELS + c) * SPECTRA + s) * N_BEAMS + b0 + b;
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
                out[((size_t)(b0 + b) * N_CHANNELS + c) * SPECTRA + s] = q;
            }
            unsigned int bal = __ballot_sync(0xffffffffu, sat);
            if ((threadIdx.x & 31) == 0 && bal && b < nb)
                atomicAdd(&saturated[b0 + b], (unsigned long long)__popc(bal));
        }
    }
}
