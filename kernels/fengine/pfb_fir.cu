// PFB FIR for the wideband F-engine (reference/dsp.md §2-§3, §5), with the sample decode
// fused in. Each thread owns one pair of adjacent real samples (2m, 2m+1) of the 2N-sample
// window step, i.e. one complex input z[m] = y[2m] + i·y[2m+1] of the length-N complex FFT
// that the real 2N-point FFT is computed from. It walks a run of spectra keeping the last
// TAPS sample pairs in registers, so each input sample is decoded once per run.
//
//   y_s[j] = Σ_t w[t·2N + j] · x[first + (s + t)·2N + j]     (weights not reversed)
//
// The output is "unzipped" by UNZIP = n: z[n·m' + r] goes to sub-FFT r at position m', so
// each of the n length-N/n sub-FFT inputs of one (spectrum, pol) is contiguous:
//   out[((s·2 + pol)·n + r)·(N/n) + m'].
//
// Digitiser statistics (Σx², clip count) are accumulated over the newest window row of
// each spectrum (samples s·2N + (TAPS−1)·2N + j), exactly once per sample.
//
// Compile-time defines: N (complex FFT length = channels), TAPS, UNZIP (1, 2 or 4),
// IN_BITS (2..16 for packed big-endian input, 0 for little-endian int16 input); tuning:
// FIR_STCS, FIR_MIN_BLOCKS with FIR_MAX_THREADS, FIR_STATS, FIR_FAST.

#ifndef N
#error "define N"
#endif
#ifndef TAPS
#error "define TAPS"
#endif
#ifndef UNZIP
#define UNZIP 1
#endif
#ifndef IN_BITS
#define IN_BITS 10
#endif
// FIR_STATS 0 drops the digitiser statistics (a benchmark diagnostic only).
#ifndef FIR_STATS
#define FIR_STATS 1
#endif

// FIR_STCS 1: output stores with the streaming (evict-first) cache hint; the FIR output is
// read back once, by the FFT, long after it is written.
#ifndef FIR_STCS
#define FIR_STCS 0
#endif
// FIR_MIN_BLOCKS > 0: __launch_bounds__(FIR_MAX_THREADS, FIR_MIN_BLOCKS), so that many
// blocks fit on one SM (trades registers for occupancy).
#ifndef FIR_MIN_BLOCKS
#define FIR_MIN_BLOCKS 0
#endif
#if FIR_MIN_BLOCKS > 0
#define FIR_BOUNDS __launch_bounds__(FIR_MAX_THREADS, FIR_MIN_BLOCKS)
#else
#define FIR_BOUNDS
#endif

#define L (N / UNZIP)
#define STEP (2LL * N)

// FIR_FAST 1 (default) uses the decoder below that walks rows from one word pointer with a
// fixed bit shift when a window row is a whole number of 32-bit words; 0 forces the
// general decoder (kept for small N and as the benchmark's reference point).
#ifndef FIR_FAST
#define FIR_FAST 1
#endif
#if IN_BITS != 0 && FIR_FAST && (2 * N * IN_BITS) % 32 == 0
#define ROW_WORDS (2 * N * IN_BITS / 32)
#define FAST_DECODE 1
#else
#define FAST_DECODE 0
#endif
// Digitiser statistics: Σx² of up to TAPS rows fits 32 bits for ≤ 12-bit samples (flushed
// to 64 bits once per tap group); 16-bit samples are flushed every row.
#define STAT_ROW_FLUSH (IN_BITS == 0 || IN_BITS > 12 || TAPS > 256)

// Decodes the sample pair starting at sample index i (i even for IN_BITS == 0).
// Packed input: the 64-bit big-endian word from the 32-bit word holding bit i·B covers
// both samples (at most 31 + 32 bits); the buffer is 4-byte aligned and padded by 8 bytes.
__device__ __forceinline__ void load_pair(const unsigned char* __restrict__ base,
                                          long long i, int& a, int& b) {
#if IN_BITS == 0
    const short2 v = *reinterpret_cast<const short2*>(base + 2 * i);
    a = v.x;
    b = v.y;
#else
    const long long bit = i * IN_BITS;
    const unsigned int* p = reinterpret_cast<const unsigned int*>(base) + (bit >> 5);
    const unsigned long long hi = __byte_perm(__ldg(p), 0, 0x0123);
    const unsigned long long lo = __byte_perm(__ldg(p + 1), 0, 0x0123);
    const unsigned long long v = (hi << 32) | lo;
    const int sh = (int)(bit & 31);
    a = (int)((long long)(v << sh) >> (64 - IN_BITS));
    b = (int)((long long)(v << (sh + IN_BITS)) >> (64 - IN_BITS));
#endif
}

// Fast decoder: the pair at bit `sh` of the big-endian word pair p[0], p[1] (both samples lie
// within the 32 bits from bit sh on).
__device__ __forceinline__ void load_pair_at(const unsigned int* __restrict__ p, int sh, int& a,
                                             int& b) {
#if IN_BITS != 0
    const unsigned int w0 = __byte_perm(__ldg(p), 0, 0x0123);
    const unsigned int w1 = __byte_perm(__ldg(p + 1), 0, 0x0123);
    const unsigned int top = __funnelshift_l(w1, w0, sh);
    a = (int)top >> (32 - IN_BITS);
    b = (int)(top << IN_BITS) >> (32 - IN_BITS);
#endif
}

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// Where the thread's samples are: the general path keeps the sample index of the run's
// first row; the fast path a word pointer and bit shift for row 0 of the input.
struct Src {
    const unsigned char* base;
    long long col;
    const unsigned int* w;
    int sh;
};

// Row `row` (counted in window steps from sample index col) of the thread's column.
__device__ __forceinline__ Src advance(Src src, long long row) {
#if FAST_DECODE
    src.w += row * ROW_WORDS;
#else
    src.col += row * STEP;
#endif
    return src;
}

__device__ __forceinline__ void load_row(const Src& src, int row, int& a, int& b) {
#if FAST_DECODE
    load_pair_at(src.w + row * ROW_WORDS, src.sh, a, b);
#else
    load_pair(src.base, src.col + row * STEP, a, b);
#endif
}

// One spectrum of the sliding window: loads the newest row into ring slot (u + T − 1) mod T,
// where the window's rows t = 0..T−1 sit in slots (u + t) mod T.
template <int T>
__device__ __forceinline__ void fir_step(int u, const Src& src, int row,
                                         const float2 (&wr)[T], float2 (&buf)[T],
                                         float2* __restrict__ dst, int hi, int lo,
                                         unsigned int& sq, unsigned int& clipped,
                                         unsigned long long& sum_sq) {
    int a, b;
    load_row(src, row, a, b);
#if FIR_STATS
    sq += (unsigned int)(a * a) + (unsigned int)(b * b);
    clipped += (unsigned int)(a >= hi || a <= lo) + (unsigned int)(b >= hi || b <= lo);
#if STAT_ROW_FLUSH
    sum_sq += sq;
    sq = 0;
#endif
#endif
    buf[(u + T - 1) % T] = make_float2((float)a, (float)b);
    float ar = 0.0f, ai = 0.0f;
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float2 x = buf[(u + t) % T];
        ar = fmaf(wr[t].x, x.x, ar);
        ai = fmaf(wr[t].y, x.y, ai);
    }
#if FIR_STCS
    __stcs(dst, make_float2(ar, ai));
#else
    *dst = make_float2(ar, ai);
#endif
}

// Grid: x over pairs m (blockDim.x threads each), y over runs of `run` spectra, z over
// pols (pol = pol0 + z; blockDim.x must be a multiple of 32).
// in: both pols, pol p at in + p·in_pol_stride bytes; first_p: index of the first sample
// of spectrum 0's window within pol p's buffer. w: TAPS·2N float weights.
// stats: [Σx² pol0, Σx² pol1, clipped pol0, clipped pol1] (added to).
extern "C" __global__ void FIR_BOUNDS pfb_fir(const unsigned char* __restrict__ in, long long in_pol_stride,
                                   int pol0, int first0, int first1, const float2* __restrict__ w,
                                   float2* __restrict__ out, int spectra, int run,
                                   int stat_bits, unsigned long long* __restrict__ stats) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    const int pol = pol0 + (int)blockIdx.z;
    const bool active = m < N;
    const unsigned char* base = in + pol * in_pol_stride;
    const long long first = pol == 0 ? first0 : first1;
    const int s_begin = blockIdx.y * run;
    const int s_end = min(s_begin + run, spectra);
    const int hi = (1 << (stat_bits - 1)) - 1;
    const int lo = -(1 << (stat_bits - 1));
    unsigned long long sum_sq = 0;
    unsigned int sq = 0, clipped = 0;

    if (active && s_begin < s_end) {
        float2 wr[TAPS];
#pragma unroll
        for (int t = 0; t < TAPS; t++) wr[t] = w[(long long)t * N + m];
        float2 buf[TAPS];
        Src src;
        src.base = base;
        src.col = first + 2LL * m;
#if FAST_DECODE
        {
            const long long bit = src.col * IN_BITS;
            src.w = reinterpret_cast<const unsigned int*>(base) + (bit >> 5);
            src.sh = (int)(bit & 31);
        }
#endif
        const Src head = advance(src, s_begin);
#pragma unroll
        for (int t = 0; t < TAPS - 1; t++) {
            int a, b;
            load_row(head, t, a, b);
            buf[t] = make_float2((float)a, (float)b);
        }
        float2* dst = out + ((long long)pol * UNZIP + (m % UNZIP)) * L + m / UNZIP;
        const long long spec_stride = 2LL * N;  // (2 pols · UNZIP · L) float2 per spectrum
        for (int g = s_begin; g < s_end; g += TAPS) {
            // Rows g + TAPS − 1 + u of this group, u = 0..TAPS−1 (constant offsets).
            const Src gs = advance(src, (long long)g + TAPS - 1);
            if (g + TAPS <= s_end) {
                // Whole group: no guards, so the loads can all be issued up front.
#pragma unroll
                for (int u = 0; u < TAPS; u++)
                    fir_step<TAPS>(u, gs, u, wr, buf,
                                   dst + (long long)(g + u) * spec_stride, hi, lo, sq, clipped,
                                   sum_sq);
            } else {
#pragma unroll
                for (int u = 0; u < TAPS; u++)
                    if (g + u < s_end)
                        fir_step<TAPS>(u, gs, u, wr, buf,
                                       dst + (long long)(g + u) * spec_stride, hi, lo, sq,
                                       clipped, sum_sq);
            }
            sum_sq += sq;
            sq = 0;
        }
    }
    sum_sq = warp_sum(sum_sq);
    const unsigned long long clip = warp_sum((unsigned long long)clipped);
    if ((threadIdx.x & 31) == 0 && (sum_sq | clip)) {
        atomicAdd(stats + pol, sum_sq);
        atomicAdd(stats + 2 + pol, clip);
    }
}
