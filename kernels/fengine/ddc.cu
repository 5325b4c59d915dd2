// Narrowband digital down-conversion (reference/dsp.md §8, seeds/fgpu-design.rst "Down-conversion
// kernel"): mixer + low-pass FIR + subsampling in one kernel; outputs that the subsampling
// drops are never computed.
//
//   y[j] = e^{2πi·φ(j)} · Σ_{p<W} Σ_{q<S} x[S·(j + p) + q] · z[p·S + q],   φ(j) = bias + j·scale
//
// z = h·e^{2πi·f·k} are the FIR weights with the mixer folded in on the host (zero-padded to
// W·S taps); the mixer phase φ is 64-bit fixed point (cycles × 2^64, wrapping drops whole
// cycles), scale = f·S·2^64 per output sample, bias = f·t0·2^64 for the ADC timestamp t0 of
// the first sample.
//
// A work group of WGS threads produces GROUP_OUT = WGS·UNROLL consecutive outputs:
//  1. Decode: the group's footprint of (GROUP_OUT + W − 1)·S input samples is decoded into
//     shared memory in polyphase order (row q holds samples S·n + q). Each thread decodes
//     runs of G samples that fill a whole number of 32-bit words (G·IN_BITS ≡ 0 mod 32), so
//     the bit position of every sample in its run is a compile-time constant: one big-endian
//     word load per 32 bits and a funnel shift for samples that straddle two words.
//  2. FIR: thread t owns outputs t·UNROLL + i (i < UNROLL). For each phase q it loads the
//     UNROLL + W − 1 samples of row q that its outputs need into registers once and updates
//     all UNROLL complex accumulators (a sliding window over p), so each shared-memory load
//     feeds up to 2·W·UNROLL/(UNROLL + W − 1) FMAs. Rows are padded (one slot per UNROLL
//     samples when UNROLL is even) so that the per-thread stride is odd: no bank conflicts.
//  3. Mixer, then the outputs go through shared memory so that the global stores coalesce.
//
// Compile-time defines: S (subsampling), W (taps per phase = ceil(taps/S)), IN_BITS (2..16
// packed big-endian two's complement, MSB first; 0 = little-endian int16), WGS (threads per
// group), UNROLL (outputs per thread).

#ifndef S
#error "define S"
#endif
#ifndef W
#error "define W"
#endif
#ifndef IN_BITS
#define IN_BITS 10
#endif
#ifndef WGS
#define WGS 64
#endif
#ifndef UNROLL
#define UNROLL 8
#endif

#define GROUP_OUT (WGS * UNROLL)
// Samples per polyphase row of the footprint.
#define NN (GROUP_OUT + W - 1)
#if UNROLL % 2 == 0
#define PADN(n) ((n) + (n) / UNROLL)
#else
#define PADN(n) (n)
#endif
#define ROW (PADN(NN - 1) + 1)
#define FOOT (NN * S)

#if IN_BITS == 0
#define G 2
#define GWORDS 1
#else
// gcd(32, IN_BITS) is the largest power of two dividing IN_BITS (IN_BITS ≤ 16).
#define GCD32 ((IN_BITS) & -(IN_BITS))
#define G (32 / GCD32)
#define GWORDS (G * IN_BITS / 32)
#endif

static_assert(S * ROW * 4 + W * S * 8 <= 48 * 1024, "DDC tile exceeds 48 KiB of shared memory");
// The output staging (GROUP_OUT float2, padded like the rows) reuses xs: it fits when S ≥ 2.
static_assert(S >= 2, "subsampling must be at least 2");

// Decodes the G samples starting at staged sample index `start` (a multiple of G) into v;
// only the first `valid` of them are present (the rest read as 0; no loads when valid ≤ 0).
__device__ __forceinline__ void decode_run(const unsigned char* __restrict__ base, long long start,
                                           int valid, float (&v)[G]) {
    if (valid <= 0) {
#pragma unroll
        for (int i = 0; i < G; i++) v[i] = 0.0f;
        return;
    }
    const unsigned int* p = reinterpret_cast<const unsigned int*>(base) + (start / G) * GWORDS;
    unsigned int w[GWORDS];
#pragma unroll
    for (int k = 0; k < GWORDS; k++) w[k] = __ldg(p + k);
#pragma unroll
    for (int i = 0; i < G; i++) {
#if IN_BITS == 0
        const int x = i == 0 ? (int)(short)(w[0] & 0xffffu) : (int)(short)(w[0] >> 16);
#else
        const int bit = i * IN_BITS;  // compile-time after unrolling
        const int k = bit / 32, o = bit % 32;
        const unsigned int hi = __byte_perm(w[k], 0, 0x0123);
        unsigned int u;
        if (o + IN_BITS <= 32) {
            u = hi << o;
        } else {
            const unsigned int lo = __byte_perm(w[k + 1 < GWORDS ? k + 1 : k], 0, 0x0123);
            u = __funnelshift_l(lo, hi, o);  // top 32 bits of (hi:lo) << o
        }
        const int x = (int)u >> (32 - IN_BITS);
#endif
        v[i] = (float)x;
    }
    if (valid < G) {
#pragma unroll
        for (int i = 0; i < G; i++)
            if (i >= valid) v[i] = 0.0f;
    }
}

// Grid: x over groups of GROUP_OUT outputs, y over pols (pol = pol0 + y).
// in: pol p's staged input at in + p·in_pol_stride bytes (4-byte aligned, padded by ≥ 64
// bytes); first_p: staged index of the first sample of output 0's window; nvalid_p: staged
// samples present. z: W·S premixed weights. out: pol p's outputs at out + p·out_pol_stride.
// bias_p: mixer phase of output 0 of pol p; scale: phase step per output.
extern "C" __global__ void __launch_bounds__(WGS)
    ddc(const unsigned char* __restrict__ in, long long in_pol_stride, int pol0,
        long long first0, long long first1, long long nvalid0, long long nvalid1,
        const float2* __restrict__ z, float2* __restrict__ out, long long out_pol_stride,
        long long n_out, unsigned long long bias0, unsigned long long bias1,
        unsigned long long scale) {
    __shared__ float xs[S * ROW];
    __shared__ float2 zs[W * S];
    const int t = threadIdx.x;
    const int pol = pol0 + (int)blockIdx.y;
    const unsigned char* base = in + pol * in_pol_stride;
    const long long first = pol == 0 ? first0 : first1;
    const long long nvalid = pol == 0 ? nvalid0 : nvalid1;
    const long long j0 = (long long)blockIdx.x * GROUP_OUT;
    const long long r0 = first + j0 * S;  // staged index of footprint sample 0

    for (int i = t; i < W * S; i += WGS) zs[i] = z[i];

    // 1. Decode the footprint into polyphase rows. Run g covers footprint indices
    // [g·G − lead, (g + 1)·G − lead); 32-bit index arithmetic from here on.
    const long long a0 = r0 / G * G;
    const int lead = (int)(r0 - a0);
    const int runs = (lead + FOOT + G - 1) / G;
    const long long left = nvalid - a0;  // samples present from a0 on
    for (int g = t; g < runs; g += WGS) {
        const int rs = g * G - lead;
        const long long rem = left - (long long)g * G;
        const int valid = rem >= G ? G : (rem <= 0 ? 0 : (int)rem);
        float v[G];
        decode_run(base, a0 + (long long)g * G, valid, v);
        if (rs >= 0 && rs + G <= FOOT) {
#pragma unroll
            for (int i = 0; i < G; i++) {
                const unsigned int r = (unsigned int)(rs + i);
                xs[(r % S) * ROW + PADN(r / S)] = v[i];
            }
        } else {
#pragma unroll
            for (int i = 0; i < G; i++) {
                const int r = rs + i;
                if (r >= 0 && r < FOOT) xs[(r % S) * ROW + PADN(r / S)] = v[i];
            }
        }
    }
    __syncthreads();

    // 2. FIR over the thread's UNROLL outputs.
    float2 acc[UNROLL];
#pragma unroll
    for (int i = 0; i < UNROLL; i++) acc[i] = make_float2(0.0f, 0.0f);
#pragma unroll 1
    for (int q = 0; q < S; q++) {
        const float* row = xs + q * ROW + t * (UNROLL + (UNROLL % 2 == 0));
        float xw[UNROLL + W - 1];
#pragma unroll
        for (int j = 0; j < UNROLL + W - 1; j++)
            xw[j] = row[UNROLL % 2 == 0 ? j + j / UNROLL : j];
#pragma unroll
        for (int p = 0; p < W; p++) {
            const float2 zz = zs[p * S + q];
#pragma unroll
            for (int i = 0; i < UNROLL; i++) {
                acc[i].x = fmaf(xw[i + p], zz.x, acc[i].x);
                acc[i].y = fmaf(xw[i + p], zz.y, acc[i].y);
            }
        }
    }
    __syncthreads();  // xs is reused for the output staging below

    // 3. Mixer: φ as a signed 32-bit fraction of a cycle in [−½, ½) → sincospi.
    float2* ys = reinterpret_cast<float2*>(xs);
    const unsigned long long bias = pol == 0 ? bias0 : bias1;
#pragma unroll
    for (int i = 0; i < UNROLL; i++) {
        const int m = t * UNROLL + i;
        const unsigned long long ph = bias + (unsigned long long)(j0 + m) * scale;
        const float a = (float)(int)(ph >> 32) * 4.656612873077393e-10f;  // 2^-31
        float sn, cs;
        sincospif(a, &sn, &cs);
        ys[PADN(m)] = make_float2(acc[i].x * cs - acc[i].y * sn, acc[i].x * sn + acc[i].y * cs);
    }
    __syncthreads();
    float2* o = out + pol * out_pol_stride;
    for (int m = t; m < GROUP_OUT; m += WGS) {
        const long long j = j0 + m;
        if (j < n_out) o[j] = ys[PADN(m)];
    }
}
