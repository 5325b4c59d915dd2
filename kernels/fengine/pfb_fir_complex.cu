// Complex-input PFB FIR for the narrowband F-engine (reference/dsp.md §3, §8): the DDC output
// u (complex f32) is filtered with real weights, real and imaginary parts alike, step N
// complex samples per spectrum:
//
//   y_s[i] = Σ_t w[t·N + i] · u[(s + t)·N + i]     (weights not reversed)
//
// Each thread owns one column i and walks a run of spectra keeping the last TAPS samples in
// registers (ring buffer indexed by compile-time constants after unrolling), so every input
// is read once per run. Output: out[(s·2 + pol)·N + i], the input of a length-N C2C FFT.
//
// Compile-time defines: N (PFB channels), TAPS.

#ifndef N
#error "define N"
#endif
#ifndef TAPS
#error "define TAPS"
#endif

// Loads row `src[row·N]` into ring slot (u + TAPS − 1) mod TAPS and writes one output.
__device__ __forceinline__ void fir_step(int u, const float2* __restrict__ src, long long row,
                                         const float (&wr)[TAPS], float2 (&buf)[TAPS],
                                         float2* __restrict__ dst) {
    buf[(u + TAPS - 1) % TAPS] = src[row * N];
    float ar = 0.0f, ai = 0.0f;
#pragma unroll
    for (int t = 0; t < TAPS; t++) {
        const float2 x = buf[(u + t) % TAPS];
        ar = fmaf(wr[t], x.x, ar);
        ai = fmaf(wr[t], x.y, ai);
    }
    *dst = make_float2(ar, ai);
}

// Grid: x over columns (blockDim.x threads each), y over runs of `run` spectra, z over pols.
// u: pol p's samples at u + p·u_pol_stride ((spectra + TAPS − 1)·N each). w: TAPS·N floats.
extern "C" __global__ void pfb_fir_complex(const float2* __restrict__ u, long long u_pol_stride,
                                           const float* __restrict__ w,
                                           float2* __restrict__ out, int spectra, int run) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int pol = blockIdx.z;
    const int s_begin = blockIdx.y * run;
    const int s_end = min(s_begin + run, spectra);
    if (i >= N || s_begin >= s_end) return;
    float wr[TAPS];
#pragma unroll
    for (int t = 0; t < TAPS; t++) wr[t] = w[(long long)t * N + i];
    const float2* src = u + pol * u_pol_stride + i;
    float2 buf[TAPS];
#pragma unroll
    for (int t = 0; t < TAPS - 1; t++) buf[t] = src[(long long)(s_begin + t) * N];
    float2* dst = out + (long long)pol * N + i;
    for (int g = s_begin; g < s_end; g += TAPS) {
        if (g + TAPS <= s_end) {
#pragma unroll
            for (int v = 0; v < TAPS; v++)
                fir_step(v, src, g + v + TAPS - 1, wr, buf, dst + (long long)(g + v) * 2 * N);
        } else {
#pragma unroll
            for (int v = 0; v < TAPS; v++)
                if (g + v < s_end)
                    fir_step(v, src, g + v + TAPS - 1, wr, buf,
                             dst + (long long)(g + v) * 2 * N);
        }
    }
}
