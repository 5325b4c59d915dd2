// Benchmark helper (`gpucbf bench fgpu`): measures the f32 FMA throughput of the device so that
// the DDC can be reported as a fraction of its compute bound. Each thread runs CHAINS
// independent dependency chains of `iters` FMAs each.

#define CHAINS 16

extern "C" __global__ void fma_peak(float* __restrict__ out, int iters, float a, float b) {
    float x[CHAINS];
#pragma unroll
    for (int k = 0; k < CHAINS; k++) x[k] = (float)(threadIdx.x + k) * 1e-3f;
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int k = 0; k < CHAINS; k++) x[k] = fmaf(x[k], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < CHAINS; k++) s += x[k];
    // Never true for the arguments the bench passes; keeps the chains alive.
    if (s == 1234.5f) out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
