// gpucbf X-engine beamformer: single-pol beams from one batch of F-engine data, on int8 tensor
// cores (mma.sync m16n8k32 s8 -> s32).
//
// Input: one batch, [antenna][channel][spectrum][pol] complex samples: int8 re, im (SAMPLE_BITS
// 8) or one byte per complex value with re in the high nibble (SAMPLE_BITS 4, two's complement
// nibbles, as fgpu --send-sample-bits 4 writes them; unpacked to int8 on the way into shared
// memory). Output: int8 [beam][channel][spectrum][re/im]. For beam b, local channel c:
//   out = Q( sum_a W'[b][a] * exp(j*pi*c*D[b][a]) * x[a][c][s][pol_b] + dither )
// W' (complex float: weight * quant gain * fringe phase re-referenced to the first channel, zero
// for absent antennas) and D (= -2*df*tau wrapped to [-1, 1)) are prepared on the host. Q clamps to
// +-127 and rounds half to even. Saturation (|re| or |im| > 127 before rounding) is counted per beam.
//
// Method. Per channel the beams are a complex matrix product out[b][s] = sum_a w[b][a] x[a][s],
// done as a real int8 product with M = (beam, re/im out), K = (antenna, re/im in), N = spectrum:
// rows (Wr, -Wi) and (Wi, Wr). The channel's weights w = W' e^{j pi c D} are quantised per beam
// to 16 bits, w16 = round(w * 32512 / s_b) with s_b = max_a |W'[b][a]| (the magnitude does not
// depend on c), and split exactly into two int8 planes w16 = 256 hi + lo; two MMAs (hi, lo) share
// every input fragment and out = s_b / 32512 * (256 acc_hi + acc_lo): exact integer sums, a
// weight error below s_b * 1.6e-5.
//
// Work. The launch covers n_batches batches (a chunk), each with its own antenna presence
// (absent antennas are zero-filled by the copy, no memory read), dither seed and saturation
// counts. A beam tile is 16 beams as two half-tiles (m16 fragments) of 8 beams of one pol each,
// so beams of both pols share a tile (the pol is selected per fragment). An item is one batch,
// one channel and up to BTB beam tiles. The grid is persistent (16 warps per SM: two blocks of
// 8 warps or four of 4); block k walks the contiguous items [k n / grid, (k + 1) n / grid)
// (batch fastest, so the weights of a channel are built once for all batches of the chunk)
// and, within each, the spectra in tiles of TS and the antennas in chunks of KC = 32, as one
// continuous stream of stages: cp.async brings each stage in as it lies in memory ([antenna]
// [spectrum], 16-byte coalesced copies, NR - 1 stages in flight, across item boundaries), one
// pass transposes it (and unpacks 4-bit input) to [spectrum][pol][antenna] rows (see bpos), so
// that one 8-byte shared load gives a B fragment of one pol, and the warps multiply the
// previous stage meanwhile. At a change of channel the block rebuilds its weight planes
// (one extra barrier) while the next stages are already in flight.
//
// Output tile of a warp: MW m16 fragments (half-tiles) of one beam tile, 32 spectra, 4
// fragments x (hi, lo) each; a beam tile has 2 / MW x TS / 32 warps (MW 1 halves the
// accumulators: no spills under the 128-register cap, and more warps share the MMAs and the
// epilogue). The weight rows are ordered so that an m16 fragment (half-tile) holds Re of 8
// beams in rows 0-7 and Im of the same beams in rows 8-15, and the spectra of the N dimension
// are permuted (column n of fragment ni is spectrum 8 (n / 2) + 2 ni + n % 2): a lane then owns
// 8 consecutive complex outputs of one beam and writes them as one 16-byte store (no shuffles;
// a warp writes 64-byte runs).
// Epilogue without the (quarter-rate) int<->float conversions of dither and quantiser: the
// 8-bit dither uniform u is built as float bits (1 + u 2^-15, exact: one byte permute), scaled
// by 128 less a constant in an FMA; the quantiser clamps and adds 1.5 2^23 (round half to even
// by the FP adder) and takes the low byte of the bits. Dither: one 32-bit hash per pair of
// spectra (2 ni, 2 ni + 1 of a lane's 8), four 8-bit uniforms (the host's `beam_dither`).
//
// Defines: N_ANTS, N_CHANNELS, SPECTRA (spectra per batch, a multiple of 16), N_BEAMS,
// BTB (beam tiles per block, 1..8), TS (spectra per tile: 32, 64 or 128), MW (m16 fragments per
// warp, 1 or 2; BTB * TS / 32 * 2 / MW <= WARPS, the warps that multiply), WARPS (4, 8 or 16),
// NR (raw input stages, 2..6), SAMPLE_BITS (8 or 4), BPROBE (diagnostic, wrong results: 1 = no
// MMAs and no epilogue, 2 = no weight build, 3 = no epilogue), MINB (launch bounds: blocks per
// SM the registers are capped for, 1..4).

// (N_ANTS, N_CHANNELS and SPECTRA: checked in xshape.cuh)
#ifndef N_BEAMS
#error "N_BEAMS must be defined"
#endif
#ifndef BTB
#define BTB 4
#endif
#ifndef TS
#define TS 64
#endif
#ifndef SAMPLE_BITS
#define SAMPLE_BITS 8
#endif
#ifndef BPROBE
#define BPROBE 0
#endif
#ifndef MINB
#define MINB 2 // blocks per SM the registers are capped for (launch bounds)
#endif
#ifndef MW
#define MW 2 // m16 fragments (half-tiles of 8 beams) per warp
#endif
#ifndef WARPS
#define WARPS 8
#endif

#define THREADS (32 * WARPS)
#define KC 32                               // antennas per stage
#define N_KC ((N_ANTS + KC - 1) / KC)       // antenna chunks
#define NAP (N_KC * KC)                     // padded antennas
#define LAST_KSTEPS ((N_ANTS - (N_KC - 1) * KC + 15) / 16) // k32 steps in the last chunk
#define WS (2 * NAP + 16)                   // weight row stride, bytes (odd multiple of 16)
#define RS (4 * KC)                         // transposed row stride, bytes (no padding: swizzled)
#define NT (TS / 32)                        // 32-spectra subtiles per tile
#define WPT (NT * 2 / MW)                   // warps per beam tile
#define N_ST ((SPECTRA + TS - 1) / TS)      // spectra tiles
#define SPI (N_ST * N_KC)                   // stages per item
#ifndef NR
#define NR 3                                // raw cp.async stages (NR - 1 in flight)
#endif
#define SBYTES (SAMPLE_BITS / 2)            // input bytes per spectrum (both pols)
#define SPC (16 / SBYTES)                   // spectra per 16-byte copy
#define RAW_RS (SBYTES * TS + 16)           // raw row stride (one antenna), bytes
#define RAW_BYTES (KC * RAW_RS)
#define CPR (TS / SPC)                      // 16-byte copies per antenna row
#define CPT ((KC * CPR + THREADS - 1) / THREADS) // copies per thread per stage
#define W_BYTES (BTB * 32 * WS)
#define SMEM_BYTES (2 * W_BYTES + NR * RAW_BYTES + 2 * TS * RS + BTB * 128)
#define BATCH_BYTES ((size_t)N_ANTS * N_CHANNELS * SPECTRA * SBYTES)
#define OUT_BATCH ((size_t)N_BEAMS * N_CHANNELS * SPECTRA * 2)

static_assert(SPECTRA % 16 == 0, "SPECTRA must be a multiple of 16");
static_assert(TS == 32 || TS == 64 || TS == 128, "TS must be 32, 64 or 128");
static_assert(MW == 1 || MW == 2, "MW must be 1 or 2");
static_assert(WARPS == 4 || WARPS == 8 || WARPS == 16, "WARPS must be 4, 8 or 16");
static_assert(BTB >= 1 && BTB * WPT <= WARPS, "BTB * TS / 32 * 2 / MW must be <= WARPS");
static_assert(NR >= 2 && NR <= 6, "NR must be 2..6");
static_assert(SAMPLE_BITS == 8 || SAMPLE_BITS == 4, "SAMPLE_BITS must be 8 or 4");


__device__ __forceinline__ void mma_s8(int (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const void *p) {
    u32 s = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    u32 d = (u32)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0; // 0 source bytes => zero fill
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Stage (batch bt, channel c, spectra tile st, antenna chunk kc) into a raw buffer [antenna][TS
// spectra]: consecutive threads copy consecutive 16-byte pieces of one antenna's spectra
// (coalesced); out-of-range antennas and spectra, and antennas absent in the batch (present[bt]
// [a] == 0), are zero-filled without reading memory.
__device__ __forceinline__ void issue_stage(unsigned char *raw, const signed char *in,
                                            const unsigned char *__restrict__ present, int bt,
                                            int c, int st, int kc) {
#pragma unroll
    for (int i = 0; i < CPT; i++) {
        const int u = i * THREADS + threadIdx.x;
        if ((KC * CPR) % THREADS != 0 && u >= KC * CPR) break;
        const int al = u / CPR, sq = u % CPR;
        const int a = kc * KC + al, s = st * TS + SPC * sq;
        const bool valid = a < N_ANTS && s < SPECTRA && present[(size_t)bt * N_ANTS + a] != 0;
        const signed char *src =
            valid ? in + (size_t)bt * BATCH_BYTES +
                        (((size_t)a * N_CHANNELS + c) * SPECTRA + s) * SBYTES
                  : in;
        cp_async16(raw + al * RAW_RS + 16 * sq, src, valid);
    }
}

#if SAMPLE_BITS == 4
// Sign-extends the four nibbles held in the low halves of the bytes of x.
__device__ __forceinline__ u32 sext4(u32 x) { return x | ((x & 0x08080808u) * 0x1eu); }
#endif

// B rows [spectrum][pol][antenna] of a stage (128 bytes each): row s holds, per pol p, the (re,
// im) bytes of the KC antennas as 4-byte words of antenna pairs, in 32-byte chunks (2 p +
// antennas / 16); the chunk index is XOR-ed with bits 0 and 3 of s so that the 8-byte B loads
// of the 4 spectra rows of a half-warp (rows 0, 1, 8, 9 apart) hit distinct banks. Byte offset
// of the word of pair pa (antennas 2 pa, 2 pa + 1), pol p, spectrum s:
__device__ __forceinline__ int bpos(int s, int p, int pa) {
    return s * RS + 32 * ((2 * p + (pa >> 3)) ^ ((s & 1) | ((s >> 3) & 1) << 1)) + 4 * (pa & 7);
}

// Raw [antenna][spectrum] -> B rows (above). Lane = antenna (raw rows padded by 16 bytes:
// conflict-free 16-byte reads), warp = groups of spectra; lanes 2j and 2j + 1 swap their
// (both-pol) words of a spectrum and store the pol-0 / pol-1 word of their pair (one 128-byte
// row per warp store).
__device__ __forceinline__ void transpose_stage(unsigned char *xb, const unsigned char *raw) {
    const int a = threadIdx.x & 31;
    const int odd = a & 1;
    // even lane: (own p0 re/im, partner p0 re/im); odd lane: (partner p1, own p1)
    const u32 psel = odd ? 0x3276u : 0x5410u;
#pragma unroll
    for (int sq = threadIdx.x >> 5; sq < CPR; sq += WARPS) {
        const uint4 v = *(const uint4 *)(raw + a * RAW_RS + 16 * sq);
        u32 w[SPC];
#if SAMPLE_BITS == 8
        // each word: spectrum SPC sq + k, (pol0 re, im, pol1 re, im)
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
#else
        // each word: (s, pol0), (s, pol1), (s+1, pol0), (s+1, pol1), re in the high nibble
        const u32 pk[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const u32 re = sext4((pk[k] >> 4) & 0x0f0f0f0fu), im = sext4(pk[k] & 0x0f0f0f0fu);
            w[2 * k] = __byte_perm(re, im, 0x5140);
            w[2 * k + 1] = __byte_perm(re, im, 0x7362);
        }
#endif
#pragma unroll
        for (int k = 0; k < SPC; k++) {
            const u32 x = __shfl_xor_sync(0xffffffffu, w[k], 1);
            *(u32 *)(xb + bpos(SPC * sq + k, odd, a >> 1)) = __byte_perm(w[k], x, psel);
        }
    }
}

// Beam table of beam-tile group bg: s_beam / s_q [BTB * 16] (beam index or -1, 32512 / s_b).
// Entry 16 t + 8 h + j is beam j of half-group 2 (bg * BTB + t) + h (8 beams of one pol).
__device__ __forceinline__ void load_beam_table(int *s_beam, float *s_q, int bg, int n_groups,
                                                const int *__restrict__ order,
                                                const int3 *__restrict__ groups,
                                                const float *__restrict__ wscale) {
    if (threadIdx.x < BTB * 16) {
        const int t = threadIdx.x >> 4, h = (threadIdx.x >> 3) & 1, j = threadIdx.x & 7;
        const int gi = 2 * (bg * BTB + t) + h;
        int beam = -1;
        float q = 0.0f;
        if (gi < n_groups) {
            const int3 grp = groups[gi];
            if (j < grp.y) {
                beam = order[grp.x + j];
                const float sb = wscale[beam];
                q = sb > 0.0f ? QMAX / sb : 0.0f;
            }
        }
        s_beam[threadIdx.x] = beam;
        s_q[threadIdx.x] = q;
    }
}

// Weight planes of channel c: for tile t and beam j of the tile, row 32 t + 16 (j / 8) + j % 8
// holds the Re output (Wr, -Wi) and that row + 8 the Im output (Wi, Wr). One thread writes an
// antenna pair (one 4-byte word per row and plane). In a k32 step of 16 antennas, thread-in-group
// q's B registers hold antennas (4q, 4q+1) at byte 4q and (4q+2, 4q+3) at byte 16 + 4q.
__device__ __forceinline__ void build_weights(unsigned char *whi, unsigned char *wlo,
                                              const int *s_beam, const float *s_q, int c,
                                              const float2 *__restrict__ coef,
                                              const float *__restrict__ delay) {
#pragma unroll 2
    for (int idx = threadIdx.x; idx < BTB * 16 * (NAP / 2); idx += THREADS) {
        const int jt = idx / (NAP / 2), p = idx % (NAP / 2);
        const int t = jt >> 4, j = jt & 15;
        const int beam = s_beam[jt];
        const float q = s_q[jt];
        const int a0 = 2 * p;
        u32 w[4];
        weight_words(beam, a0, c, q, coef, delay, w);
        const int al = a0 & 15;
        const int off = 32 * (a0 >> 4) + ((al & 2) ? 16 : 0) + 4 * (al >> 2);
        const int rre = 32 * t + 16 * (j >> 3) + (j & 7);
        *(u32 *)(whi + rre * WS + off) = w[0];
        *(u32 *)(wlo + rre * WS + off) = w[1];
        *(u32 *)(whi + (rre + 8) * WS + off) = w[2];
        *(u32 *)(wlo + (rre + 8) * WS + off) = w[3];
    }
}

// Per-item, per-warp state: the warp's beam tile, spectra subtile and first half-tile, the pol
// selector of each of its MW m16 fragments (one half-group of 8 beams of one pol each) and the
// lane's beam in each.
struct WarpItem {
    bool active;
    int bt, nt, h0;
    int pol[MW];
    int beam[MW];
    float oscale[MW];
};

__device__ __forceinline__ WarpItem warp_item(int bg, int n_groups, const int *__restrict__ order,
                                              const int3 *__restrict__ groups,
                                              const float *__restrict__ wscale) {
    WarpItem w;
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    const int n_tiles = (n_groups + 1) / 2;
    const int ntiles = min(BTB, n_tiles - bg * BTB);
    w.active = warp < ntiles * WPT;
    w.bt = w.active ? warp / WPT : 0;
    w.nt = (warp % WPT) % NT;
    w.h0 = MW == 2 ? 0 : (warp % WPT) / NT;
    // a warp of a half-tile without beams has nothing to do
    if (MW == 1 && 2 * (bg * BTB + w.bt) + w.h0 >= n_groups) w.active = false;
#pragma unroll
    for (int mi = 0; mi < MW; mi++) {
        const int gi = 2 * (bg * BTB + w.bt) + w.h0 + mi;
        int3 grp = make_int3(0, 0, 0);
        if (w.active && gi < n_groups) grp = groups[gi];
        w.pol[mi] = grp.z;
        w.beam[mi] = g < grp.y ? order[grp.x + g] : -1;
        w.oscale[mi] = w.beam[mi] >= 0 ? wscale[w.beam[mi]] / QMAX : 0.0f;
    }
    return w;
}

// coef: float2 [N_BEAMS][N_ANTS]; delay: float [N_BEAMS][N_ANTS]; wscale: float [N_BEAMS]
// (max_a |coef|); order: beam indices sorted by pol; groups: int3 (start in order, count <= 8,
// pol), one per half-tile (an m16 fragment: 8 beams of one pol), tile t = half-groups 2t, 2t + 1.
// in: n_batches batches of BATCH_BYTES; present: u8 [n_batches][N_ANTS] (0: the antenna is read
// as zeros); out: int8 [batch][beam][channel][spectrum][re/im]; saturated: u64
// [n_batches][N_BEAMS] (added to). dither != 0 enables dither with the pair hash key (c *
// SPECTRA / 2 + s / 2) * N_BEAMS + beam + dseed[batch]. Dynamic shared memory SMEM_BYTES.
// Items are (channel, group of beam tiles, batch), batch fastest; block k takes the contiguous
// items [k n / grid, (k + 1) n / grid), so its weights are rebuilt only when the channel or the
// group changes.
extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    beamform(const signed char *__restrict__ in, signed char *__restrict__ out,
             const float2 *__restrict__ coef, const float *__restrict__ delay,
             const float *__restrict__ wscale, const int *__restrict__ order,
             const int3 *__restrict__ groups, int n_groups,
             const unsigned char *__restrict__ present, int n_batches,
             unsigned long long *__restrict__ saturated, int dither,
             const unsigned int *__restrict__ dseeds) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char *whi = smem, *wlo = smem + W_BYTES, *xin = smem + 2 * W_BYTES;
    unsigned char *raw = xin + 2 * TS * RS;
    int *s_beam = (int *)(raw + NR * RAW_BYTES); // [BTB * 16] beam index or -1
    float *s_q = (float *)(s_beam + BTB * 16);   // [BTB * 16] 32512 / s_b
    const int n_tiles = (n_groups + 1) / 2;
    const int n_bg = (n_tiles + BTB - 1) / BTB;
    const long long n_items = (long long)N_CHANNELS * n_bg * n_batches;
    const int it0 = (int)((long long)blockIdx.x * n_items / gridDim.x);
    const int it1 = (int)((long long)(blockIdx.x + 1) * n_items / gridDim.x);
    if (it1 <= it0) return;
    const int n_stages = (it1 - it0) * SPI;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, tq = lane & 3;

#pragma unroll
    for (int p = 0; p < NR - 1; p++) {
        if (p < n_stages) {
            const int it = it0 + p / SPI, r = p % SPI;
            issue_stage(raw + p * RAW_BYTES, in, present, it % n_batches,
                        (it / n_batches) / n_bg, r / N_KC, r % N_KC);
        }
        cp_async_commit();
    }

    int item = it0;
    int bt = item % n_batches, cbg = item / n_batches;
    int c = cbg / n_bg, bg = cbg % n_bg;
    unsigned int dseed = dseeds[bt];
    load_beam_table(s_beam, s_q, bg, n_groups, order, groups, wscale);
    __syncthreads();
#if BPROBE != 2
    build_weights(whi, wlo, s_beam, s_q, c, coef, delay);
#endif
    WarpItem wi = warp_item(bg, n_groups, order, groups, wscale);
    unsigned int nsat[MW];
#pragma unroll
    for (int mi = 0; mi < MW; mi++) nsat[mi] = 0;
    // ldmatrix row addresses: lanes 0-7 / 8-15 / 16-23 / 24-31 give matrices a0..a3
    const int arow = (lane & 7) + 8 * ((lane >> 3) & 1);
    const int acol = 16 * (lane >> 4);

    int acc_hi[MW][4][4], acc_lo[MW][4][4];
#pragma unroll
    for (int mi = 0; mi < MW; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc_hi[mi][ni][k] = acc_lo[mi][ni][k] = 0;

    // Iteration i: stage i has landed (raw), stage i + NR - 1 is issued, stage i is transposed
    // into B buffer i % 2 while the warps multiply stage i - 1 out of the other; one barrier
    // (two at a change of channel or beam group, around the weight rebuild).
    for (int i = 0; i <= n_stages; i++) {
        if (i < n_stages) cp_async_wait<NR - 2>();
        __syncthreads();
        if (i + NR - 1 < n_stages) {
            const int j = i + NR - 1, r = j % SPI;
            const int jt = it0 + j / SPI;
            issue_stage(raw + (j % NR) * RAW_BYTES, in, present, jt % n_batches,
                        (jt / n_batches) / n_bg, r / N_KC, r % N_KC);
        }
        cp_async_commit();
        if (i < n_stages) transpose_stage(xin + (i & 1) * TS * RS, raw + (i % NR) * RAW_BYTES);
        if (i == 0) continue;
        const int r = (i - 1) % SPI;
        const int st = r / N_KC, kc = r % N_KC;
        const unsigned char *xb = xin + ((i - 1) & 1) * TS * RS;
#if BPROBE != 1
        if (wi.active) {
            const int ks = kc == N_KC - 1 ? LAST_KSTEPS : 2;
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                if (kk < ks) {
                    const int kg = kc * 2 + kk; // global k32 step
                    u32 ah[MW][4], al[MW][4];
#pragma unroll
                    for (int mi = 0; mi < MW; mi++) {
                        const int o =
                            (32 * wi.bt + arow + 16 * (wi.h0 + mi)) * WS + 32 * kg + acol;
                        ldmatrix_x4(ah[mi], whi + o);
                        ldmatrix_x4(al[mi], wlo + o);
                    }
#pragma unroll
                    for (int ni = 0; ni < 4; ni++) {
                        // column g of fragment ni is spectrum 8 (g / 2) + 2 ni + g % 2; this
                        // lane's B registers: antenna pairs 8 kk + 2 tq, + 1 of the fragment's
                        // pol (loaded per fragment: comparing the pols costs registers)
                        const int srow = 32 * wi.nt + 8 * (g >> 1) + 2 * ni + (g & 1);
                        uint2 v[MW];
                        v[0] = *(const uint2 *)(xb + bpos(srow, wi.pol[0], 8 * kk + 2 * tq));
                        if (MW == 2)
                            v[MW - 1] = *(const uint2 *)(xb + bpos(srow, wi.pol[MW - 1],
                                                                   8 * kk + 2 * tq));
#pragma unroll
                        for (int mi = 0; mi < MW; mi++) {
                            const u32 b[2] = {v[mi].x, v[mi].y};
                            mma_s8(acc_hi[mi][ni], ah[mi], b);
                            mma_s8(acc_lo[mi][ni], al[mi], b);
                        }
                    }
                }
            }
            if (kc == N_KC - 1) {
#if BPROBE != 3
                // Epilogue of spectra tile st: this lane owns beam row g of each m16 fragment,
                // spectra s0 .. s0 + 7 (re in acc[..][0..1], im in acc[..][2..3]).
                const int s0 = st * TS + 32 * wi.nt + 8 * tq;
#pragma unroll
                for (int mi = 0; mi < MW; mi++) {
                    const int b = wi.beam[mi];
                    if (b >= 0 && s0 < SPECTRA) {
                        const float os = wi.oscale[mi];
                        // pair key of spectra s0, s0 + 1 (s0 even)
                        const u32 key0 =
                            ((u32)c * (SPECTRA / 2) + (u32)s0 / 2) * N_BEAMS + (u32)b + dseed;
                        u32 word[4];
#pragma unroll
                        for (int ni = 0; ni < 4; ni++) {
                            const u32 h = dither ? hash32(key0 + (u32)(ni * N_BEAMS)) : 0u;
                            u32 q[2];
#pragma unroll
                            for (int e = 0; e < 2; e++)
                                q[e] = beam_quant(
                                    combine(acc_hi[mi][ni][e], acc_lo[mi][ni][e]),
                                    combine(acc_hi[mi][ni][2 + e], acc_lo[mi][ni][2 + e]), os,
                                    dither, h, 2 * e, nsat[mi]);
                            word[ni] = __byte_perm(q[0], q[1], 0x5410);
                        }
                        *(uint4 *)(out + (size_t)bt * OUT_BATCH +
                                   (((size_t)b * N_CHANNELS + c) * SPECTRA + s0) * 2) =
                            make_uint4(word[0], word[1], word[2], word[3]);
                    }
                }
#else
                // keep the MMAs live: one store of an otherwise unused sum per lane and tile
                if (acc_hi[0][0][0] == 0x7fffffff && acc_lo[MW - 1][3][3] == 0x7fffffff)
                    out[0] = (signed char)(acc_hi[MW - 1][3][3] + acc_lo[0][0][0]);
#endif
#pragma unroll
                for (int mi = 0; mi < MW; mi++)
#pragma unroll
                    for (int ni = 0; ni < 4; ni++)
#pragma unroll
                        for (int k = 0; k < 4; k++) acc_hi[mi][ni][k] = acc_lo[mi][ni][k] = 0;
            }
        }
#endif
        if (r == SPI - 1) {
            // End of the item: flush the saturation counts of its batch (the 4 lanes of a g
            // share a beam); at a change of channel or group rebuild the tables and weights.
#pragma unroll
            for (int mi = 0; mi < MW; mi++) {
                unsigned int n = nsat[mi];
                n += __shfl_xor_sync(0xffffffffu, n, 1);
                n += __shfl_xor_sync(0xffffffffu, n, 2);
                if (tq == 0 && n && wi.active && wi.beam[mi] >= 0)
                    atomicAdd(&saturated[(size_t)bt * N_BEAMS + wi.beam[mi]],
                              (unsigned long long)n);
                nsat[mi] = 0;
            }
            if (i < n_stages) {
                item++;
                bt = item % n_batches;
                dseed = dseeds[bt];
                const int ncbg = item / n_batches;
                if (ncbg != cbg) {
                    cbg = ncbg;
                    c = cbg / n_bg;
                    const int nbg = cbg % n_bg;
                    __syncthreads(); // everyone is done with the old weights and tables
                    if (nbg != bg) {
                        bg = nbg;
                        load_beam_table(s_beam, s_q, bg, n_groups, order, groups, wscale);
                        __syncthreads();
                        wi = warp_item(bg, n_groups, order, groups, wscale);
                    }
#if BPROBE != 2
                    build_weights(whi, wlo, s_beam, s_q, c, coef, delay);
#endif
                }
            }
        }
    }
}
