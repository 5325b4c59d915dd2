// gpucbf X-engine correlator for Hopper: warpgroup tensor cores (wgmma.mma_async m64n256k32
// s8 x s8 -> s32, sm_90a). Same input, accumulator and output conventions as correlate.cu (whose
// `reduce` kernel finishes the dump):
//
// Input (per batch): int8 [antenna][channel][spectrum][pol][re/im], batches contiguous.
// Accumulator: int64 [channel][baseline][product][re/im], baseline bl = a2(a2+1)/2 + a1 (a1 <= a2),
// product p1 + 2*p2, value sum_t x[a1,p1](t) * conj(x[a2,p2](t)). Inputs in [-127, 127].
//
// Defines (NVRTC -D): N_ANTS, N_CHANNELS, SPECTRA (a multiple of 16), ST (spectra per pipeline
// stage: 32 or 64), NREADY (shared-memory operand buffers: 2 or 3), NRAW (0: each thread loads
// the next stage into registers; 2..8: a ring of NRAW raw stages filled by cp.async, NRAW - 1
// stages in flight), PREF (register path: stages loaded ahead, 1 or 2), SWZ (1: 128-byte swizzled operand layout instead of no-swizzle, ST = 64
// only), PROBE (diagnostic only, wrong results: 1 = no wgmma, 2 = no global loads).
//
// Real GEMM view (the complex trick). A thread block (2 warpgroups, 256 threads) computes a 64 x 64
// antenna tile (a1 rows, a2 columns) of the upper triangle for one channel and one time range.
//   A rows (M = 128): m = 16*(a1/8) + 8*p1 + a1%8 (a1 local to the tile), K = time x (re, im);
//     warpgroup wg owns rows 64wg.. (a1 in [32wg, 32wg + 32)).
//   B rows (N = 256): n = 128*p2 + 2*a2 + c, c = 0: x[a2,p2], c = 1: conj_perm(x) = (-im, re),
//     so one dot product gives Re (c = 0) and Im (c = 1) of x[a1,p1] * conj(x[a2,p2]) in adjacent
//     accumulator columns.
// Both operands are K-major in shared memory in the no-swizzle canonical layout: core matrices of
// 8 rows x 16 bytes (8 rows of 8 complex samples), 128 contiguous bytes each; row groups of 8 are
// adjacent (stride byte offset 128), core-matrix columns along K are LBO_A / LBO_B apart (leading
// byte offset). Each thread loads its share of a stage from global memory (into registers one
// stage ahead, or through its own slots of a cp.async ring), splits the pols, forms conj_perm, and stores the core-matrix rows
// (ordinary stores, then fence.proxy.async before the barrier that precedes the wgmma). NREADY
// operand buffers rotate: while the tensor cores work on stage s, the threads write stage s + 1;
// with 3 buffers the wgmma of stage s - 1 may still be running (wait_group 1), so the tensor pipe
// never drains.
//
// Accumulators: thread (warp w of its warpgroup, g = lane/4, t = lane%4) holds, for each 8-column
// group j (0..31), d[4j + {0,1}] = (Re, Im) of p1 = 0 and d[4j + {2,3}] = (Re, Im) of p1 = 1 for
// a1 = 32wg + 8w + g, a2 = 4(j%16) + t, p2 = j/16 — four consecutive int64 of the accumulator.
// grid.z splits time (at most 65536 samples per block keep the int32 sums exact); blocks add
// their partial sums with 64-bit atomics.

// (N_ANTS, N_CHANNELS and SPECTRA: checked in xshape.cuh; N_BASELINES, conj_perm, tile_coords:
// corr_common.cuh)
#ifndef ST
#define ST 64
#endif
#ifndef NREADY
#define NREADY 3
#endif
#ifndef NRAW
#define NRAW 0
#endif
#ifndef PROBE
#define PROBE 0
#endif
#ifndef SWZ
#define SWZ 0
#endif
#ifndef PREF
#define PREF 1
#endif
// Byte distance between 8-row groups: no swizzle, core matrices of one K column are adjacent;
// 128B swizzle, a group is one 1024-byte atom of 8 rows x 128 bytes (the whole stage's K), its
// 16-byte chunk c of row r stored at chunk c ^ r.
#define RG (SWZ ? 1024 : 128)

#define TILE 64
#define THREADS 256
#define OCT (ST / 8)                 // 8-sample octets (core-matrix columns) per stage
#define KS (ST / 16)                 // k32 steps per stage
#define UNITS (TILE * OCT / THREADS) // (antenna, octet) units per thread per operand
#define LBO_A (16 * 128)             // 16 row groups of A
#define LBO_B (32 * 128)             // 32 row groups of B
#define A_BYTES (OCT * LBO_A)
#define B_BYTES (OCT * LBO_B)
#define READY_BYTES (A_BYTES + B_BYTES)
#define NCHUNK (4 * UNITS) // raw 16-byte chunks per thread per stage
#define RAW_OFF (NREADY * READY_BYTES)
#define RAW_STAGE_BYTES (NCHUNK * THREADS * 16)
#define BATCH_STEP ((size_t)N_ANTS * N_CHANNELS * SPECTRA * 4)

static_assert(SPECTRA % 16 == 0, "SPECTRA must be a multiple of 16");
static_assert(ST == 32 || ST == 64, "ST must be 32 or 64");
static_assert(NREADY == 2 || NREADY == 3, "NREADY must be 2 or 3");
static_assert(NRAW == 0 || (NRAW >= 2 && NRAW <= 8), "NRAW must be 0 or 2..8");
static_assert(PREF == 1 || PREF == 2, "PREF must be 1 or 2");
static_assert(!SWZ || ST == 64, "the 128B-swizzled layout needs ST = 64 (128 bytes of K)");
static_assert(UNITS >= 1 && UNITS * THREADS == TILE * OCT, "bad unit split");


// This block's slice of the launch's time (grid.z, ksteps_per_block k-steps of 16 samples):
// first and end sample and the number of st-sample stages; false when the slice starts past
// the input (the block has nothing to do).
__device__ __forceinline__ bool block_time_range(int n_batches, int ksteps_per_block, int st,
                                                 u32 &t_begin, u32 &t_end, int &n_stages) {
    const long long ktotal = (long long)n_batches * (SPECTRA / 16);
    const long long kbeg = (long long)blockIdx.z * ksteps_per_block;
    if (kbeg >= ktotal) return false;
    const long long kend = min(ktotal, kbeg + ksteps_per_block);
    n_stages = (int)(((kend - kbeg) * 16 + st - 1) / st);
    t_begin = (u32)(kbeg * 16);
    t_end = (u32)(kend * 16);
    return true;
}

__device__ __forceinline__ void cp_async16(u32 saddr, const void *gmem, bool valid) {
    const int n = valid ? 16 : 0; // 0 source bytes => zero fill
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem), "r"(n)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void st_shared16(u32 addr, uint4 v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}

#define ACC4(i) "+r"(d[i]), "+r"(d[(i) + 1]), "+r"(d[(i) + 2]), "+r"(d[(i) + 3])
#define ACC16(i) ACC4(i), ACC4((i) + 4), ACC4((i) + 8), ACC4((i) + 12)
#define ACC64(i) ACC16(i), ACC16((i) + 16), ACC16((i) + 32), ACC16((i) + 48)

// D[64 x 256] += A[64 x 32] * B[256 x 32]^T, both from shared memory.
__device__ __forceinline__ void wgmma_256(int (&d)[128], u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
        "{"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
        "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
        "}, %128, %129, p;\n}\n"
        : ACC64(0), ACC64(64)
        : "l"(da), "l"(db), "n"(1));
}

// Per-thread loader state: UNITS (antenna, octet) units of A (a1 rows) and of B (a2 rows).
struct Units {
    const signed char *pa[UNITS], *pb[UNITS]; // antenna row at channel ch, time 0, batch 0
    bool va[UNITS], vb[UNITS];                // antenna < N_ANTS
    u32 sa[UNITS];                            // A store offset (pol 0; pol 1 is +128)
    u32 sb0[UNITS], sb1[UNITS];               // B store offsets of stores k = 0, 1 (p2 = 0)
};

__device__ __forceinline__ void load_stage(uint4 (&ra)[UNITS][2], uint4 (&rb)[UNITS][2],
                                           const Units &u, u32 t, u32 t_end) {
    const bool tv = t < t_end;
    const size_t toff = (size_t)(t / SPECTRA) * BATCH_STEP + (size_t)(t % SPECTRA) * 4;
    const uint4 z = make_uint4(0, 0, 0, 0);
#if PROBE == 2
    (void)tv;
    (void)toff;
    (void)z;
#pragma unroll
    for (int j = 0; j < UNITS; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            ra[j][h] = make_uint4(t + h, t ^ j, t * 3, t + 7);
            rb[j][h] = make_uint4(t ^ h, t + j, t * 5, t + 9);
        }
#else
#pragma unroll
    for (int j = 0; j < UNITS; j++) {
        if (tv && u.va[j]) {
            const uint4 *p = (const uint4 *)(u.pa[j] + toff);
            ra[j][0] = __ldg(p);
            ra[j][1] = __ldg(p + 1);
        } else {
            ra[j][0] = z;
            ra[j][1] = z;
        }
        if (tv && u.vb[j]) {
            const uint4 *p = (const uint4 *)(u.pb[j] + toff);
            rb[j][0] = __ldg(p);
            rb[j][1] = __ldg(p + 1);
        } else {
            rb[j][0] = z;
            rb[j][1] = z;
        }
    }
#endif
}

// cp.async of one stage into this thread's slots of raw ring slot `raw` (chunk k of the thread
// at raw + (k * THREADS + tid) * 16; k = 4j + {A low, A high, B low, B high}).
__device__ __forceinline__ void issue_stage(u32 raw, const Units &u, u32 t, u32 t_end,
                                            const signed char *any) {
#if PROBE != 2
    const bool tv = t < t_end;
    const size_t toff = (size_t)(t / SPECTRA) * BATCH_STEP + (size_t)(t % SPECTRA) * 4;
    const u32 base = raw + threadIdx.x * 16;
#pragma unroll
    for (int j = 0; j < UNITS; j++) {
        const bool va = tv && u.va[j], vb = tv && u.vb[j];
        const signed char *pa = va ? u.pa[j] + toff : any;
        const signed char *pb = vb ? u.pb[j] + toff : any;
        cp_async16(base + (4 * j + 0) * THREADS * 16, pa, va);
        cp_async16(base + (4 * j + 1) * THREADS * 16, va ? pa + 16 : any, va);
        cp_async16(base + (4 * j + 2) * THREADS * 16, pb, vb);
        cp_async16(base + (4 * j + 3) * THREADS * 16, vb ? pb + 16 : any, vb);
    }
#endif
}

__device__ __forceinline__ void read_stage(uint4 (&ra)[UNITS][2], uint4 (&rb)[UNITS][2], u32 raw) {
    const u32 base = raw + threadIdx.x * 16;
#pragma unroll
    for (int j = 0; j < UNITS; j++) {
        ra[j][0] = ld_shared16(base + (4 * j + 0) * THREADS * 16);
        ra[j][1] = ld_shared16(base + (4 * j + 1) * THREADS * 16);
        rb[j][0] = ld_shared16(base + (4 * j + 2) * THREADS * 16);
        rb[j][1] = ld_shared16(base + (4 * j + 3) * THREADS * 16);
    }
}

// Raw chunk (4 samples x [p0 re, p0 im, p1 re, p1 im]) pair -> core-matrix rows of 8 samples.
__device__ __forceinline__ uint4 pol_row(const uint4 &c0, const uint4 &c1, u32 sel) {
    return make_uint4(__byte_perm(c0.x, c0.y, sel), __byte_perm(c0.z, c0.w, sel),
                      __byte_perm(c1.x, c1.y, sel), __byte_perm(c1.z, c1.w, sel));
}

__device__ __forceinline__ uint4 conj_row(const uint4 &v) {
    return make_uint4(conj_perm(v.x), conj_perm(v.y), conj_perm(v.z), conj_perm(v.w));
}

__device__ __forceinline__ uint4 sel4(bool s, const uint4 &a, const uint4 &b) {
    return make_uint4(s ? a.x : b.x, s ? a.y : b.y, s ? a.z : b.z, s ? a.w : b.w);
}

// Writes one stage (held in registers) into the operand buffer at shared address `buf`.
__device__ __forceinline__ void store_stage(const uint4 (&ra)[UNITS][2], const uint4 (&rb)[UNITS][2],
                                            const Units &u, u32 buf, bool sw) {
#pragma unroll
    for (int j = 0; j < UNITS; j++) {
        st_shared16(buf + u.sa[j], pol_row(ra[j][0], ra[j][1], 0x5410));
        st_shared16(buf + u.sa[j] + RG, pol_row(ra[j][0], ra[j][1], 0x7632));
#pragma unroll
        for (int p2 = 0; p2 < 2; p2++) {
            const uint4 x = pol_row(rb[j][0], rb[j][1], p2 ? 0x7632 : 0x5410);
            const uint4 y = conj_row(x);
            // rows c = 0 (x) and c = 1 (conj) of this antenna; the upper half of each 8-lane
            // phase writes them in the other order so the phase covers all 32 banks.
            st_shared16(buf + A_BYTES + u.sb0[j] + p2 * 16 * RG, sel4(sw, y, x));
            st_shared16(buf + A_BYTES + u.sb1[j] + p2 * 16 * RG, sel4(sw, x, y));
        }
    }
}

// Issues the wgmma of one stage (operand buffer at shared address buf) for warpgroup wg.
__device__ __forceinline__ void wgmma_stage(int (&d)[128], u32 buf, int wg) {
#if PROBE != 1
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
#if SWZ
        // k-step ks starts 32 bytes further into each swizzle atom
        const u64 da = make_desc_swz(buf + wg * 8 * 1024 + 32 * ks);
        const u64 db = make_desc_swz(buf + A_BYTES + 32 * ks);
#else
        const u64 da = make_desc(buf + 2 * ks * LBO_A + wg * 8 * 128, LBO_A, 128);
        const u64 db = make_desc(buf + A_BYTES + 2 * ks * LBO_B, LBO_B, 128);
#endif
        wgmma_256(d, da, db);
    }
    wg_commit();
#else
    d[0] += (int)buf;
#endif
}

// in: n_batches batches; acc: int64 accumulator; ksteps_per_block: time range of one grid.z slice
// in units of 16 samples (<= 4096, a multiple of ST / 16). Dynamic shared memory:
// NREADY * READY_BYTES + NRAW * RAW_STAGE_BYTES.
// Adds a thread's accumulators (layout in the header comment) for row antenna a1 into the int64
// accumulator with 64-bit atomics, in the order re(p1=0), im(p1=0), re(p1=1), im(p1=1); zero sums
// are skipped, as are the baselines below the diagonal and the padding past N_ANTS.
__device__ __forceinline__ void add_tile(const int (&d)[128], long long *acc, int ch, int a1,
                                         int a2_base, int t4) {
#pragma unroll
    for (int j = 0; j < 32; j++) {
        const int p2 = j >> 4;
        const int a2 = a2_base + 4 * (j & 15) + t4;
        if (a1 <= a2 && a2 < N_ANTS) {
            const size_t bl = (size_t)a2 * (a2 + 1) / 2 + a1;
            u64 *dst = (u64 *)(acc + ((size_t)ch * N_BASELINES + bl) * 8 + 4 * p2);
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (d[4 * j + q]) atomicAdd(dst + q, (u64)(long long)d[4 * j + q]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    correlate_wgmma(const signed char *__restrict__ in, long long *__restrict__ acc, int n_batches,
                    int ksteps_per_block) {
    extern __shared__ __align__(128) unsigned char smem[];

    int ti, tj;
    tile_coords(blockIdx.x, ti, tj);
    const int ch = blockIdx.y;
    const int a1_base = ti * TILE, a2_base = tj * TILE;
    u32 t_begin, t_end;
    int n_stages;
    if (!block_time_range(n_batches, ksteps_per_block, ST, t_begin, t_end, n_stages)) return;

    const int tid = threadIdx.x;
    const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;

    // unit u = tid + THREADS * j: antenna 8q + i of the tile, octet o
    const int i = tid & 7, o = (tid >> 3) % OCT;
    const bool sw = (i >> 2) & 1;
    Units u;
#pragma unroll
    for (int j = 0; j < UNITS; j++) {
        const int q = (tid + THREADS * j) / (8 * OCT);
        const int a1 = a1_base + 8 * q + i, a2 = a2_base + 8 * q + i;
        u.va[j] = a1 < N_ANTS;
        u.vb[j] = a2 < N_ANTS;
        u.pa[j] = in + ((size_t)(u.va[j] ? a1 : 0) * N_CHANNELS + ch) * SPECTRA * 4;
        u.pb[j] = in + ((size_t)(u.vb[j] ? a2 : 0) * N_CHANNELS + ch) * SPECTRA * 4;
#if SWZ
        u.sa[j] = (2 * q) * 1024 + i * 128 + (o ^ i) * 16;
        const int ng = 2 * q + (i >> 2), r0 = 2 * (i & 3) + sw, r1 = 2 * (i & 3) + 1 - sw;
        u.sb0[j] = ng * 1024 + r0 * 128 + (o ^ r0) * 16;
        u.sb1[j] = ng * 1024 + r1 * 128 + (o ^ r1) * 16;
#else
        u.sa[j] = o * LBO_A + (2 * q) * 128 + i * 16;
        const u32 sb = o * LBO_B + (2 * q + (i >> 2)) * 128 + 2 * (i & 3) * 16;
        u.sb0[j] = sb + (sw ? 16 : 0);
        u.sb1[j] = sb + (sw ? 0 : 16);
#endif
    }
    // (the host adds 1024 bytes so that the swizzle atoms can start 1024-aligned)
    const u32 sbase = ((u32)__cvta_generic_to_shared(smem) + 1023u) & ~1023u;
    const u32 toct = t_begin + 8 * o;

    int d[128];
#pragma unroll
    for (int k = 0; k < 128; k++) d[k] = 0;

    uint4 ra[UNITS][2], rb[UNITS][2];
#if NRAW
    const u32 rbase = sbase + RAW_OFF;
#pragma unroll
    for (int r = 0; r < NRAW; r++) {
        if (r < n_stages) issue_stage(rbase + r * RAW_STAGE_BYTES, u, toct + r * ST, t_end, in);
        cp_async_commit();
    }
    cp_async_wait<NRAW - 1>();
    read_stage(ra, rb, rbase);
    store_stage(ra, rb, u, sbase, sw);
    int rslot = 1 % NRAW; // ring slot of stage s + 1
#elif PREF == 2
    // two register sets: stage k is loaded into set k % 2, two stages ahead of its use
    uint4 ra1[UNITS][2], rb1[UNITS][2];
    load_stage(ra, rb, u, toct, t_end);
    store_stage(ra, rb, u, sbase, sw);
    if (n_stages > 1) load_stage(ra1, rb1, u, toct + ST, t_end);
    if (n_stages > 2) load_stage(ra, rb, u, toct + 2 * ST, t_end);
#else
    load_stage(ra, rb, u, toct, t_end);
    store_stage(ra, rb, u, sbase, sw);
    if (n_stages > 1) load_stage(ra, rb, u, toct + ST, t_end);
#endif
    fence_proxy_async();
    __syncthreads();

    int cur = 0; // buffer of stage s
#if NRAW == 0 && PREF == 2
    // one pipeline step for stage S; (RA, RB) hold stage S + 1 and then receive stage S + 3
#define WG_STEP(S, RA, RB)                                                                         \
    {                                                                                              \
        wgmma_stage(d, sbase + cur * READY_BYTES, wg);                                             \
        const int nxt = cur + 1 == NREADY ? 0 : cur + 1;                                           \
        if ((S) + 1 < n_stages) {                                                                  \
            store_stage(RA, RB, u, sbase + nxt * READY_BYTES, sw);                                 \
            if ((S) + 3 < n_stages) load_stage(RA, RB, u, toct + (u32)((S) + 3) * ST, t_end);       \
            fence_proxy_async();                                                                   \
        }                                                                                          \
        wg_wait<NREADY - 2>();                                                                     \
        __syncthreads();                                                                           \
        cur = nxt;                                                                                 \
    }
    for (int s = 0; s < n_stages; s += 2) {
        WG_STEP(s, ra1, rb1)
        if (s + 1 < n_stages) WG_STEP(s + 1, ra, rb)
    }
#undef WG_STEP
#else
    for (int s = 0; s < n_stages; s++) {
        wgmma_stage(d, sbase + cur * READY_BYTES, wg);
        const int nxt = cur + 1 == NREADY ? 0 : cur + 1;
#if NRAW
        if (s + 1 < n_stages) {
            cp_async_wait<NRAW - 2>(); // stage s + 1 has landed (this thread's own chunks)
            read_stage(ra, rb, rbase + rslot * RAW_STAGE_BYTES);
            store_stage(ra, rb, u, sbase + nxt * READY_BYTES, sw);
            fence_proxy_async();
        }
        // stage s + NRAW goes into the slot stage s left (read in the previous iteration)
        if (s + NRAW < n_stages) {
            const int slot = rslot == 0 ? NRAW - 1 : rslot - 1;
            issue_stage(rbase + slot * RAW_STAGE_BYTES, u, toct + (u32)(s + NRAW) * ST, t_end, in);
        }
        cp_async_commit();
        rslot = rslot + 1 == NRAW ? 0 : rslot + 1;
#else
        if (s + 1 < n_stages) {
            store_stage(ra, rb, u, sbase + nxt * READY_BYTES, sw);
            if (s + 2 < n_stages) load_stage(ra, rb, u, toct + (u32)(s + 2) * ST, t_end);
            fence_proxy_async();
        }
#endif
        wg_wait<NREADY - 2>();
        // buffer nxt is complete; every warpgroup is done with the buffer stage s + 2 will use
        __syncthreads();
        cur = nxt;
    }
#endif
    wg_wait<0>();

    add_tile(d, acc, ch, a1_base + 32 * wg + 8 * warp + g, a2_base, t4);
}

// Layout probe: one wgmma.mma_async m64n8k32 s8 (128 threads). a: int8 [64][32] (row-major,
// K contiguous), b: int8 [8][32], d: int32 [64][8] = a * b^T, stored through the accumulator
// layout assumed above (row 16w + g (+8), column 2t (+1)).
extern "C" __global__ void __launch_bounds__(128, 1)
    wgmma_probe(const signed char *__restrict__ a, const signed char *__restrict__ b,
                int *__restrict__ dout) {
    __shared__ __align__(128) unsigned char sa[64 * 32];
    __shared__ __align__(128) unsigned char sb[8 * 32];
    const int tid = threadIdx.x;
    // A: core matrix (row group rg = r/8, column kc = k/16) at kc * 1024 + rg * 128
    for (int e = tid; e < 64 * 32; e += 128) {
        const int r = e / 32, k = e % 32;
        sa[(k / 16) * 1024 + (r / 8) * 128 + (r % 8) * 16 + k % 16] = (unsigned char)a[e];
    }
    // B: one row group, columns 128 bytes apart
    for (int e = tid; e < 8 * 32; e += 128) {
        const int r = e / 32, k = e % 32;
        sb[(k / 16) * 128 + r * 16 + k % 16] = (unsigned char)b[e];
    }
    fence_proxy_async();
    __syncthreads();
    const u32 a_s = (u32)__cvta_generic_to_shared(sa), b_s = (u32)__cvta_generic_to_shared(sb);
    const u64 da = make_desc(a_s, 1024, 128);
    const u64 db = make_desc(b_s, 128, 256);
    int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    wg_fence();
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8 {%0, %1, %2, %3}, %4, %5, p;\n}\n"
                 : "+r"(d0), "+r"(d1), "+r"(d2), "+r"(d3)
                 : "l"(da), "l"(db), "n"(1));
    wg_commit();
    wg_wait<0>();
    const int w = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
    const int r0 = 16 * w + g;
    dout[r0 * 8 + 2 * t] = d0;
    dout[r0 * 8 + 2 * t + 1] = d1;
    dout[(r0 + 8) * 8 + 2 * t] = d2;
    dout[(r0 + 8) * 8 + 2 * t + 1] = d3;
}

// ------------------------------------------------------------------------------------------
// Warp-specialised variant `correlate_ws` (384 threads, ST = 64, 128-byte swizzled operands).
// Warpgroup 0 ("transform") moves the data, warpgroups 1 and 2 ("consumers") only issue wgmma:
//  * raw ring of WS_NR stages: per stage the 64 A antenna rows and the 64 B antenna rows, each
//    ST spectra x 4 bytes (256 bytes, [spectrum][pol][re/im] as in global memory), filled by 1-D
//    bulk copies (cp.async.bulk ... mbarrier::complete_tx, one per antenna row and batch
//    segment; transform thread r copies row r) completing on raw_full[slot]; diagonal tiles
//    copy the A rows only and read B from them;
//  * the transform warpgroup reads a raw stage (16-byte ld.shared, conflict-free), splits the
//    pols, forms conj_perm and writes the 128B-swizzled operand buffer (WS_NC of them), then
//    fence.proxy.async + canon_full[buf]; after a named barrier of its 128 threads the raw slot
//    is refilled with stage s + WS_NR;
//  * consumers wait on canon_full, issue 4 x m64n256k32, keep one wgmma group in flight and
//    release the previous buffer through canon_empty (256 arrivals).
// Each transform thread first loads all its raw chunks of a stage (one shared-memory latency
// per stage); invalid antennas and times read a zero block instead of the ring.
// WS_CL = 2: clusters of 2 CTAs computing tiles (ti, tj) and (ti + 1, tj) (the second one
// below the diagonal, computing nothing, where column tj has an odd tile count) share the B
// rows: CTA rank k copies B rows 32k..32k+31 with .multicast::cluster into both CTAs; a raw
// slot is refilled only when both CTAs released it (raw_empty[slot], one local and one remote
// arrival per stage), and the CTAs synchronise as a cluster at start and exit.
// setmaxnreg moves registers from the transform warpgroup(s) (WS_REG_T) to the consumers
// (WS_REG_C). WS_PROBE (diagnostic only, wrong results): 1 = no wgmma, 2 = no bulk copies,
// 3 = bulk copies only (no transform, no wgmma).
// Accumulator mapping and epilogue as correlate_wgmma (consumer warpgroup c in place of wg).
// ------------------------------------------------------------------------------------------
#ifndef WS_NC
#define WS_NC 2
#endif
#ifndef WS_NR
#define WS_NR 4
#endif
#ifndef WS_PROBE
#define WS_PROBE 0
#endif
#ifndef WS_CL
#define WS_CL 1
#endif
static_assert(WS_CL == 1 || WS_CL == 2, "WS_CL must be 1 or 2");
#ifndef WS_NT
#define WS_NT 1 // transform warpgroups
#endif
#define WS_TT (128 * WS_NT)            // transform threads
#define WS_THREADS (WS_TT + 256)
#define WS_ENTRY_REGS ((65536 / WS_THREADS) & ~7)
#ifndef WS_REG_T
#define WS_REG_T 120
#endif
#ifndef WS_REG_C
#define WS_REG_C 192
#endif
#define WS_UNITS (4 / WS_NT) // (antenna, octet) units of A and of B per transform thread
#define WS_ST 64
#define WS_A_BYTES (16 * 1024)                 // 16 row groups of 8 rows x 128 bytes
#define WS_CANON_BYTES (WS_A_BYTES + 32 * 1024) // + B: 32 row groups
#define WS_ROW_BYTES (WS_ST * 4)
#define WS_RAW_BYTES (2 * TILE * WS_ROW_BYTES)
static_assert(WS_NC == 2 || WS_NC == 3, "WS_NC must be 2 or 3");
static_assert(WS_NR >= 2 && WS_NR <= 6, "WS_NR must be 2..6");
static_assert(WS_REG_T % 8 == 0 && WS_REG_C % 8 == 0, "setmaxnreg counts are multiples of 8");
// (512 threads would leave 128 registers at entry: ptxas then rejects m64n256 wgmma, C7602)
static_assert(WS_NT == 1, "WS_NT must be 1");
static_assert(WS_TT * WS_REG_T + 256 * WS_REG_C <= WS_THREADS * WS_ENTRY_REGS,
              "setmaxnreg budget");

__device__ __forceinline__ void bulk_g2s(u32 dst, const void *src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
                 "[%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void mbar_wait_cluster(u32 bar, u32 parity) {
    asm volatile("{\n.reg .pred p;\nWS_WAITC_%=:\n"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WS_WAITC_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
// Arrival on the barrier at the same offset in CTA `cta` of the cluster.
__device__ __forceinline__ void mbar_arrive_remote(u32 bar, u32 cta) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
                 "r"(cta)
                 : "memory");
}
__device__ __forceinline__ void bulk_g2s_mc(u32 dst, const void *src, u32 bytes, u32 bar,
                                            unsigned short mask) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar), "h"(mask)
                 : "memory");
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                     : "memory");
}

// Bulk copies of antenna row `row` (0..63: A, 64..127: B) of stage s into raw slot `dst`
// (the row's bytes, split at batch boundaries); returns the bytes this row brings (0: none).
__device__ __forceinline__ u32 ws_row_bytes(int row, bool diag, int a1_base, int a2_base) {
    if (row >= TILE && diag) return 0;
    const int a = row < TILE ? a1_base + row : a2_base + row - TILE;
    return a < N_ANTS ? 1u : 0u;
}
__device__ __forceinline__ void ws_issue(u32 slot, u32 bar, int row, const signed char *rowp, u32 t0,
                                         u32 tE, bool mc) {
    u32 t = t0;
    while (t < tE) {
        const u32 b = t / SPECTRA, w = t % SPECTRA;
        const u32 n = min(tE - t, (u32)SPECTRA - w);
        const u32 dst = slot + row * WS_ROW_BYTES + (t - t0) * 4;
        const signed char *src = rowp + (size_t)b * BATCH_STEP + w * 4;
        if (mc)
            bulk_g2s_mc(dst, src, n * 4, bar, (unsigned short)3);
        else
            bulk_g2s(dst, src, n * 4, bar);
        t += n;
    }
}

extern "C" __global__ void
#if WS_CL == 2
    __cluster_dims__(2, 1, 1)
#endif
    __launch_bounds__(WS_THREADS, 1) correlate_ws(const signed char *__restrict__ in, long long *__restrict__ acc, int n_batches,
                 int ksteps_per_block) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bars[2 * WS_NC + 2 * WS_NR];
    __shared__ __align__(16) uint4 zero16[2];

    int ti, tj;
#if WS_CL == 2
    // cluster k: the k-th pair of tiles (ti, tj), (ti + 1, tj), column by column
    const int rank = blockIdx.x & 1;
    {
        int k = blockIdx.x >> 1;
        tj = 0;
        while (k >= (tj + 2) / 2) {
            k -= (tj + 2) / 2;
            tj++;
        }
        ti = 2 * k + rank;
    }
    const bool dummy = ti > tj, diag = false;
#else
    tile_coords(blockIdx.x, ti, tj);
    const int rank = 0;
    const bool dummy = false, diag = ti == tj;
#endif
    const int ch = blockIdx.y;
    const int a1_base = ti * TILE, a2_base = tj * TILE;
    u32 t_begin, t_end;
    int n_stages;
    if (!block_time_range(n_batches, ksteps_per_block, WS_ST, t_begin, t_end, n_stages)) return;

    const int tid = threadIdx.x;
    const u32 canon = ((u32)__cvta_generic_to_shared(smem) + 1023u) & ~1023u;
    const u32 raw = canon + WS_NC * WS_CANON_BYTES;
    const u32 bar0 = (u32)__cvta_generic_to_shared(bars);
    // barriers: canon_full[c], canon_empty[c], raw_full[r]
#define CFULL(c) (bar0 + 8 * (c))
#define CEMPTY(c) (bar0 + 8 * (WS_NC + (c)))
#define RFULL(r) (bar0 + 8 * (2 * WS_NC + (r)))
#define REMPTY(r) (bar0 + 8 * (2 * WS_NC + WS_NR + (r)))
    if (tid == 0) {
        for (int c = 0; c < WS_NC; c++) {
            mbar_init(CFULL(c), WS_TT);
            mbar_init(CEMPTY(c), 256);
        }
        for (int r = 0; r < WS_NR; r++) {
            mbar_init(RFULL(r), 1);
            mbar_init(REMPTY(r), 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if (tid < 2) zero16[tid] = make_uint4(0, 0, 0, 0);
#if WS_CL == 2
    cluster_sync();
#else
    __syncthreads();
#endif
    const u32 zaddr = (u32)__cvta_generic_to_shared(zero16);

    if (tid < WS_TT) {
        // ---------------- transform warpgroup ----------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WS_REG_T));
        // the raw row this thread copies
        const int row = tid; // transform threads 0..127 copy one row each
        // rows whose bytes arrive in this CTA (cluster: B rows from either CTA), and whether
        // this thread copies its row (cluster: B rows 32 rank.. of this CTA, multicast)
        const u32 row_ok = tid < 2 * TILE && !(dummy && row < TILE)
                               ? ws_row_bytes(row, diag, a1_base, a2_base)
                               : 0u;
        const bool mc = WS_CL == 2 && row >= TILE;
        const bool mine = row_ok && (!mc || ((row - TILE) >> 5) == (WS_CL == 2 ? rank : 0));
        const int ra = row < TILE ? a1_base + row : a2_base + row - TILE;
        const signed char *rowp = in + ((size_t)(row_ok ? ra : 0) * N_CHANNELS + ch) * SPECTRA * 4;
        int n_rows = 0; // rows copied per stage
        if (tid == 0) {
            for (int r = dummy ? TILE : 0; r < 2 * TILE; r++)
                n_rows += (int)ws_row_bytes(r, diag, a1_base, a2_base);
        }
        auto issue = [&](int s) {
            const u32 slot = raw + (s % WS_NR) * WS_RAW_BYTES;
            const u32 t0 = t_begin + (u32)s * WS_ST;
            const u32 tE = min(t0 + WS_ST, t_end);
#if WS_PROBE == 2
            (void)slot;
            if (tid == 0) mbar_arrive(RFULL(s % WS_NR));
#else
            if (tid == 0) mbar_arrive_tx(RFULL(s % WS_NR), (u32)n_rows * (tE - t0) * 4);
#if WS_CL == 2
            // multicast into both CTAs: both must have released the slot (stage s - WS_NR)
            if (mine && mc && s >= WS_NR) mbar_wait_cluster(REMPTY(s % WS_NR), (u32)(s / WS_NR - 1) & 1);
#endif
            if (mine) ws_issue(slot, RFULL(s % WS_NR), row, rowp, t0, tE, mc);
#endif
        };
        for (int s = 0; s < WS_NR && s < n_stages; s++) issue(s);

        // units: antenna a = tid / 8 + (WS_TT / 8) j of the tile, octet o = tid % 8
        const int o = tid & 7, sw = (o >> 2) & 1;
        for (int s = 0; s < n_stages; s++) {
            const int r = s % WS_NR, c = s % WS_NC;
            mbar_wait(RFULL(r), (u32)(s / WS_NR) & 1);
#if WS_PROBE != 3
            const u32 slot = raw + r * WS_RAW_BYTES;
            const bool tv = t_begin + (u32)s * WS_ST + 8 * o < t_end;
            // chunk f at +16 sw, g at +16 (1 - sw): the 8 lanes of a phase hit 8 bank groups
            uint4 fa[WS_UNITS], ga[WS_UNITS], fb[WS_UNITS], gb[WS_UNITS];
#pragma unroll
            for (int j = 0; j < WS_UNITS; j++) {
                const int a = (tid >> 3) + (WS_TT / 8) * j;
                const bool va = tv && a1_base + a < N_ANTS, vb = tv && a2_base + a < N_ANTS;
                const u32 pa = va ? slot + a * WS_ROW_BYTES + o * 32 : zaddr;
                const u32 pb =
                    vb ? (diag ? slot : slot + TILE * WS_ROW_BYTES) + a * WS_ROW_BYTES + o * 32 : zaddr;
                fa[j] = ld_shared16(pa + 16 * sw);
                ga[j] = ld_shared16(pa + 16 - 16 * sw);
                fb[j] = ld_shared16(pb + 16 * sw);
                gb[j] = ld_shared16(pb + 16 - 16 * sw);
            }
            if (s >= WS_NC) mbar_wait(CEMPTY(c), (u32)(s / WS_NC + 1) & 1);
            const u32 buf = canon + c * WS_CANON_BYTES;
#pragma unroll
            for (int j = 0; j < WS_UNITS; j++) {
                const int a = (tid >> 3) + (WS_TT / 8) * j, q = a >> 3, i = a & 7;
                // A rows (a1 = a1_base + a)
                {
                    const uint4 lo = sw ? ga[j] : fa[j], hi = sw ? fa[j] : ga[j];
                    const u32 sa = buf + (2 * q) * 1024 + i * 128 + (o ^ i) * 16;
                    st_shared16(sa, pol_row(lo, hi, 0x5410));
                    st_shared16(sa + 1024, pol_row(lo, hi, 0x7632));
                }
                // B rows (a2 = a2_base + a): x and conj_perm(x) per pol
                {
                    const uint4 lo = sw ? gb[j] : fb[j], hi = sw ? fb[j] : gb[j];
                    const int ng = 2 * q + (i >> 2), r0 = 2 * (i & 3), r1 = r0 + 1;
                    const u32 sb0 = buf + WS_A_BYTES + ng * 1024 + r0 * 128 + (o ^ r0) * 16;
                    const u32 sb1 = buf + WS_A_BYTES + ng * 1024 + r1 * 128 + (o ^ r1) * 16;
#pragma unroll
                    for (int p2 = 0; p2 < 2; p2++) {
                        const uint4 x = pol_row(lo, hi, p2 ? 0x7632 : 0x5410);
                        st_shared16(sb0 + p2 * 16 * 1024, x);
                        st_shared16(sb1 + p2 * 16 * 1024, conj_row(x));
                    }
                }
            }
            fence_proxy_async();
#else
            if (s >= WS_NC) mbar_wait(CEMPTY(c), (u32)(s / WS_NC + 1) & 1);
#endif
            mbar_arrive(CFULL(c));
            // every transform thread is done with raw slot r: refill it (releasing the slot
            // right after the raw loads instead measured slower: 421 against 504 TOPS at 576
            // antennas, the copies then compete with the wgmma operand traffic)
            asm volatile("bar.sync 1, %0;\n" ::"n"(WS_TT) : "memory");
#if WS_CL == 2
            if (tid == TILE) {
                mbar_arrive_remote(REMPTY(r), 0);
                mbar_arrive_remote(REMPTY(r), 1);
            }
#endif
            if (s + WS_NR < n_stages) issue(s + WS_NR);
        }
    } else {
        // ---------------- consumer warpgroups ----------------
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WS_REG_C));
        const int wg = (tid >> 7) - WS_NT, warp = (tid >> 5) & 3, lane = tid & 31;
        const int g = lane >> 2, t4 = lane & 3;
        if (dummy) {
            // (cluster partner below the diagonal: takes part in the copies, computes nothing)
            for (int s = 0; s < n_stages; s++) {
                mbar_wait(CFULL(s % WS_NC), (u32)(s / WS_NC) & 1);
                if (s > 0) mbar_arrive(CEMPTY((s - 1) % WS_NC));
            }
        } else {
        int d[128];
#pragma unroll
        for (int k = 0; k < 128; k++) d[k] = 0;
        for (int s = 0; s < n_stages; s++) {
            const int c = s % WS_NC;
            mbar_wait(CFULL(c), (u32)(s / WS_NC) & 1);
            const u32 buf = canon + c * WS_CANON_BYTES;
#if WS_PROBE == 0 || WS_PROBE == 2
            wg_fence();
#pragma unroll
            for (int ks = 0; ks < WS_ST / 16; ks++) {
                const u64 da = make_desc_swz(buf + wg * 8 * 1024 + 32 * ks);
                const u64 db = make_desc_swz(buf + WS_A_BYTES + 32 * ks);
                wgmma_256(d, da, db);
            }
            wg_commit();
            wg_wait<1>();
#else
            d[0] += (int)buf;
#endif
            if (s > 0) mbar_arrive(CEMPTY((s - 1) % WS_NC));
        }
        wg_wait<0>();

        add_tile(d, acc, ch, a1_base + 32 * wg + 8 * warp + g, a2_base, t4);
        }
    }
#if WS_CL == 2
    // no CTA leaves while its peer may still multicast into it or arrive on its barriers
    cluster_sync();
#endif
#undef CFULL
#undef CEMPTY
#undef RFULL
#undef REMPTY
}

// ------------------------------------------------------------------------------------------
// Sparse-operand variant `correlate_sp` (sm_90a): no rearrangement of the input at all.
// The raw rows are the B operand as they lie in memory: row n = antenna a2, K = the bytes of
// its spectra, k = 4 t + 2 q + c (t spectrum, q pol, c re/im). A is 2:4 structured sparse
// (wgmma.mma_async.sp, m64nNk64 s8, A from registers): of each group of four K bytes (one
// spectrum) only the two of pol q = p2 are non-zero, so the compressed A row holds two bytes
// per spectrum and the metadata is one constant per warpgroup (0x4 nibbles: positions 0, 1
// for p2 = 0; 0xE: positions 2, 3 for p2 = 1). Compressed A rows, for a1 and pol p1:
//   Re row (x_re, x_im)[a1, p1](t)   -> sum = re1 re2 + im1 im2   = Re x1 conj(x2)
//   Im row (x_im, -x_re)[a1, p1](t)  -> sum = im1 re2 - re1 im2   = Im x1 conj(x2)
// A block computes SP_A antennas a1 against up to SP_NMAX antennas a2 (all four pol products)
// with SP_CWG consumer warpgroups: SP_CWG = 4 (512 threads): 32 x 128, warpgroup c holds pol
// p2 = c % 2 of a2 for a1 in [16 (c / 2), 16 (c / 2) + 16); SP_CWG = 2 (384 threads, a separate
// producer warpgroup): 16 x 256, warpgroup c = p2. In a warpgroup, warp w,
// lane (g, t) owns rows g (Re) and g + 8 (Im) of a1 = 8 (w / 2) + w % 2 + 2 (g % 4), p1 = g / 4 (a
// warp's rows two apart: its swizzled 8-byte loads are free of bank conflicts), i.e. compressed
// fragment registers {Re, Im, Re, Im} of the spectrum pairs (2t, 2t + 1) and (8 + 2t, 9 + 2t)
// of each 16-spectrum k-step, built with two 8-byte shared loads, a PRMT and a negation.
// Tiles: row block i (a1 in [SP_A i, SP_A (i + 1))) against a2 from SP_A i in SP_NMAX-wide
// tiles, the last one as narrow as the array allows (N a multiple of SP_WQ = 32 for SP_CWG 4,
// 64 for 2: whole wgmma shapes), so the work computed is the triangle in SP_A x SP_WQ pieces.
// Data path: per 64-spectrum stage two bulk tensor copies (TMA, cp.async.bulk.tensor.4d, 128B
// swizzle, 32 spectra x SP_A or SP_NMAX antenna rows per box) for A and for B into a ring of
// SP_NR slots (full/empty mbarriers), issued by one thread; antennas past N_ANTS and
// batches past the launch are zero-filled by the copy engine. The tensor maps (dims: spectrum
// bytes, channel, antenna, batch) are built on the host for each launch.
// Each consumer warpgroup keeps two stages of wgmma in flight (two A register sets).
// Accumulators: warpgroup of pol p2, for 8-column group j: d[4j + e] = Re, d[4j + 2 + e] = Im of
// (a1, p1) x (a2 = a2_base + 8 j + 2 t + e, p2), e = 0, 1. Same int64 accumulator as the
// other kernels (64-bit atomics at the end of a block's time range).
// SP_PROBE (diagnostic only, wrong results): 1 = no wgmma, 2 = no tensor copies.
// ------------------------------------------------------------------------------------------
#ifndef SP_CWG
#define SP_CWG 4 // consumer warpgroups: 2 (16 x 256 tiles) or 4 (32 x 128 tiles)
#endif
#ifndef SP_NR
#define SP_NR (SP_CWG == 4 ? 5 : 3)
#endif
#ifndef SP_PROBE
#define SP_PROBE 0
#endif
#if SP_CWG == 4
// four consumer warpgroups (p2, a1 half); thread 0 also issues the copies
#define SP_A 32
#define SP_NMAX 128
#define SP_THREADS 512
#elif SP_CWG == 2
// two consumer warpgroups and a producer warpgroup (one thread copies; setmaxnreg gives its
// registers to the consumers)
#define SP_A 16
#define SP_NMAX 256
#define SP_THREADS 384
#define SP_REG_C 232
#define SP_REG_P 40
static_assert(256 * SP_REG_C + 128 * SP_REG_P <= 65536, "setmaxnreg budget");
#else
#error "SP_CWG must be 2 or 4"
#endif
#define SP_WQ (SP_CWG == 4 ? 32 : 64) // tile widths: multiples of this
#define SP_ST 64
#define SP_A_BOX (SP_A * 128)
#define SP_B_BOX (SP_NMAX * 128)
#define SP_SLOT (2 * SP_A_BOX + 2 * SP_B_BOX)
static_assert(SP_NR >= 2 && SP_NR * SP_SLOT + 1024 <= 227 * 1024, "SP_NR: 2 .. what fits");
static_assert(SP_SLOT % 1024 == 0, "slots must keep the 1024-byte swizzle alignment");

// (re0, im0, re1, im1) -> (im0, -re0, im1, -re1); inputs in [-127, 127]
__device__ __forceinline__ u32 im_row(u32 v) {
    return __byte_perm(v, 0x00FF00FFu - ((v << 8) & 0xFF00FF00u), 0x7351);
}

__device__ __forceinline__ void wgmma_sp(int (&d)[16], const u32 (&a)[4], u64 db, u32 meta) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %22, 0;\n"
                 "wgmma.mma_async.sp.sync.aligned.m64n32k64.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
                 "{%16, %17, %18, %19}, %20, %21, 0, p;\n}\n"
                 : ACC4(0), ACC4(4), ACC4(8), ACC4(12)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(meta), "n"(1));
}
__device__ __forceinline__ void wgmma_sp(int (&d)[48], const u32 (&a)[4], u64 db, u32 meta) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %54, 0;\n"
                 "wgmma.mma_async.sp.sync.aligned.m64n96k64.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, "
                 "{%48, %49, %50, %51}, %52, %53, 0, p;\n}\n"
                 : ACC4(0), ACC4(4), ACC4(8), ACC4(12), ACC4(16), ACC4(20), ACC4(24), ACC4(28), ACC4(32), ACC4(36), ACC4(40), ACC4(44)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(meta), "n"(1));
}
__device__ __forceinline__ void wgmma_sp(int (&d)[32], const u32 (&a)[4], u64 db, u32 meta) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
                 "wgmma.mma_async.sp.sync.aligned.m64n64k64.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
                 "{%32, %33, %34, %35}, %36, %37, 0, p;\n}\n"
                 : ACC4(0), ACC4(4), ACC4(8), ACC4(12), ACC4(16), ACC4(20), ACC4(24), ACC4(28)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(meta), "n"(1));
}
__device__ __forceinline__ void wgmma_sp(int (&d)[64], const u32 (&a)[4], u64 db, u32 meta) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
                 "wgmma.mma_async.sp.sync.aligned.m64n128k64.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
                 "{%64, %65, %66, %67}, %68, %69, 0, p;\n}\n"
                 : ACC4(0), ACC4(4), ACC4(8), ACC4(12), ACC4(16), ACC4(20), ACC4(24), ACC4(28), ACC4(32), ACC4(36), ACC4(40), ACC4(44), ACC4(48), ACC4(52), ACC4(56), ACC4(60)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(meta), "n"(1));
}
__device__ __forceinline__ void wgmma_sp(int (&d)[96], const u32 (&a)[4], u64 db, u32 meta) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %102, 0;\n"
                 "wgmma.mma_async.sp.sync.aligned.m64n192k64.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, "
                 "{%96, %97, %98, %99}, %100, %101, 0, p;\n}\n"
                 : ACC4(0), ACC4(4), ACC4(8), ACC4(12), ACC4(16), ACC4(20), ACC4(24), ACC4(28), ACC4(32), ACC4(36), ACC4(40), ACC4(44), ACC4(48), ACC4(52), ACC4(56), ACC4(60), ACC4(64), ACC4(68), ACC4(72), ACC4(76), ACC4(80), ACC4(84), ACC4(88), ACC4(92)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(meta), "n"(1));
}
__device__ __forceinline__ void wgmma_sp(int (&d)[128], const u32 (&a)[4], u64 db, u32 meta) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %134, 0;\n"
                 "wgmma.mma_async.sp.sync.aligned.m64n256k64.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
                 "{%128, %129, %130, %131}, %132, %133, 0, p;\n}\n"
                 : ACC4(0), ACC4(4), ACC4(8), ACC4(12), ACC4(16), ACC4(20), ACC4(24), ACC4(28), ACC4(32), ACC4(36), ACC4(40), ACC4(44), ACC4(48), ACC4(52), ACC4(56), ACC4(60), ACC4(64), ACC4(68), ACC4(72), ACC4(76), ACC4(80), ACC4(84), ACC4(88), ACC4(92), ACC4(96), ACC4(100), ACC4(104), ACC4(108), ACC4(112), ACC4(116), ACC4(120), ACC4(124)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(meta), "n"(1));
}

// Row block and tile of block index idx: sets a1_base and a2_base and returns the tile width
// (a multiple of SP_WQ, at most SP_NMAX), or 0 past the last tile.
__device__ __forceinline__ int sp_tile(int idx, int &a1_base, int &a2_base) {
    for (int i = 0; SP_A * i < N_ANTS; i++) {
        const int nt = (N_ANTS - SP_A * i + SP_NMAX - 1) / SP_NMAX;
        if (idx < nt) {
            a1_base = SP_A * i;
            a2_base = SP_A * i + SP_NMAX * idx;
            const int rem = N_ANTS - a2_base;
            return rem >= SP_NMAX ? SP_NMAX : (rem + SP_WQ - 1) / SP_WQ * SP_WQ;
        }
        idx -= nt;
    }
    return 0;
}

#define SP_FULL(r) (bar0 + 8 * (r))
#define SP_EMPTY(r) (bar0 + 8 * (SP_NR + (r)))

// The tensor copies of stage s into its ring slot (one thread; the slot is free).
__device__ __forceinline__ void sp_issue(int s, const TensorMap *tm_a, const TensorMap *tm_b, u32 ring,
                                         u32 bar0, u32 t_begin, int ch, int a1_base, int a2_base) {
    const int r = s % SP_NR;
    const u32 slot = ring + r * SP_SLOT;
#if SP_PROBE == 2
    (void)slot;
    (void)tm_a;
    (void)tm_b;
    (void)t_begin;
    (void)ch;
    (void)a1_base;
    (void)a2_base;
    mbar_arrive(SP_FULL(r));
#else
    mbar_arrive_tx(SP_FULL(r), SP_SLOT);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        // (SPECTRA is a multiple of 32: a 32-spectrum box never spans two batches)
        const u32 tt = t_begin + (u32)s * SP_ST + 32 * h;
        const int b = (int)(tt / SPECTRA), sp = (int)(tt % SPECTRA);
        tma_load4(slot + h * SP_A_BOX, tm_a, 4 * sp, ch, a1_base, b, SP_FULL(r));
        tma_load4(slot + 2 * SP_A_BOX + h * SP_B_BOX, tm_b, 4 * sp, ch, a2_base, b, SP_FULL(r));
    }
#endif
}

// Builds this lane's A fragments of one stage (ring slot at `slot`) in registers: per k-step
// ks (16 spectra) box ks / 2, bytes 64 (ks % 2) + 8 t and + 32 of row al, 16-byte chunks
// XOR-swizzled by the row; Re words select pol p1, Im words are (im, -re) of them.
__device__ __forceinline__ void sp_build_a(u32 (&a)[4][4], u32 slot, int al, int t, u32 sel) {
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        const u32 c0 = 4 * (ks & 1) + (t >> 1);
        const u32 base = slot + (ks >> 1) * SP_A_BOX + al * 128 + (t & 1) * 8;
        const uint2 x = ld_shared8(base + ((c0 ^ (al & 7)) << 4));
        const uint2 y = ld_shared8(base + (((c0 + 2) ^ (al & 7)) << 4));
        a[ks][0] = __byte_perm(x.x, x.y, sel);
        a[ks][1] = im_row(a[ks][0]);
        a[ks][2] = __byte_perm(y.x, y.y, sel);
        a[ks][3] = im_row(a[ks][2]);
    }
}

// Consumer warpgroups (threads 0 .. 128 SP_CWG - 1) of a tile NW antennas wide.
template <int NW>
__device__ __forceinline__ void sp_consume(long long *acc, int ch, int a1_base, int a2_base,
                                           int n_stages, u32 ring, u32 bar0, const TensorMap *tm_a,
                                           const TensorMap *tm_b, u32 t_begin) {
    int d[NW / 2];
#pragma unroll
    for (int k = 0; k < NW / 2; k++) d[k] = 0;
    const int tid = threadIdx.x, wg = tid >> 7, p2 = wg & 1, w = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    // a1 - a1_base (the row of the A box): a warp's four rows are two apart, so that their
    // swizzled 16-byte chunks fall in distinct banks (rows 4w + g % 4 made 2-way conflicts)
    const int al = 16 * (wg >> 1) + 8 * (w >> 1) + (w & 1) + 2 * (g & 3);
    const u32 sel = (g >> 2) ? 0x7632u : 0x5410u;
    const u32 meta = p2 ? 0xEEEEEEEEu : 0x44444444u;
    auto mma = [&](const u32(&a)[4][4], u32 slot) {
#if SP_PROBE != 1
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ks++)
            wgmma_sp(d, a[ks], make_desc_swz(slot + 2 * SP_A_BOX + (ks >> 1) * SP_B_BOX + 64 * (ks & 1)),
                     meta);
        wg_commit();
#else
        (void)slot;
        d[0] += (int)(a[0][0] ^ a[1][1] ^ a[2][2] ^ a[3][3]);
#endif
    };
    // two register sets: stage s is issued while stage s - 1 may still run
    u32 ra[4][4], rb[4][4];
    auto stage = [&](int s, u32(&a)[4][4]) {
        const int r = s % SP_NR;
#if SP_CWG == 4
        // thread 0 refills the slot of stage s - 2 once every consumer warp has released it
        if (tid == 0 && s >= 2 && s - 2 + SP_NR < n_stages) {
            mbar_wait(SP_EMPTY((s - 2) % SP_NR), (u32)((s - 2) / SP_NR) & 1);
            sp_issue(s - 2 + SP_NR, tm_a, tm_b, ring, bar0, t_begin, ch, a1_base, a2_base);
        }
        __syncwarp(); // (warp 0 converges before its aligned wgmma instructions)
#else
        (void)tm_a;
        (void)tm_b;
        (void)t_begin;
#endif
        const u32 slot = ring + r * SP_SLOT;
        mbar_wait(SP_FULL(r), (u32)(s / SP_NR) & 1);
        sp_build_a(a, slot, al, t, sel);
        mma(a, slot);
#if SP_PROBE != 1
        wg_wait<1>();
#endif
        // the wgmma of stage s - 1 are complete: its slot may be refilled
        if (s > 0 && lane == 0) mbar_arrive(SP_EMPTY((s - 1) % SP_NR));
    };
    for (int s = 0; s < n_stages; s += 2) {
        stage(s, ra);
        if (s + 1 < n_stages) stage(s + 1, rb);
    }
    wg_wait<0>();

    const int a1 = a1_base + al, p1 = g >> 2;
    if (a1 >= N_ANTS) return;
#pragma unroll
    for (int j = 0; j < NW / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int a2 = a2_base + 8 * j + 2 * t + e;
            if (a1 <= a2 && a2 < N_ANTS) {
                const size_t bl = (size_t)a2 * (a2 + 1) / 2 + a1;
                u64 *dst = (u64 *)(acc + ((size_t)ch * N_BASELINES + bl) * 8 + 2 * (p1 + 2 * p2));
                if (d[4 * j + e]) atomicAdd(dst, (u64)(long long)d[4 * j + e]);
                if (d[4 * j + 2 + e]) atomicAdd(dst + 1, (u64)(long long)d[4 * j + 2 + e]);
            }
        }
}

// tm_a: boxes of 128 bytes x 1 channel x SP_A antennas x 1 batch; tm_b: the same with SP_NMAX
// antennas. Dynamic shared memory: SP_NR * SP_SLOT + 1024.
extern "C" __global__ void __launch_bounds__(SP_THREADS, 1)
    correlate_sp(const __grid_constant__ TensorMap tm_a, const __grid_constant__ TensorMap tm_b,
                 long long *__restrict__ acc, int n_batches, int ksteps_per_block) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bars[2 * SP_NR];
    int a1_base = 0, a2_base = 0;
    const int nw = sp_tile(blockIdx.x, a1_base, a2_base);
    if (nw == 0) return;
    const int ch = blockIdx.y;
    u32 t_begin, t_end; // (whole stages: the copies zero-fill past the input)
    int n_stages;
    if (!block_time_range(n_batches, ksteps_per_block, SP_ST, t_begin, t_end, n_stages)) return;

    const int tid = threadIdx.x;
    const u32 ring = ((u32)__cvta_generic_to_shared(smem) + 1023u) & ~1023u;
    const u32 bar0 = (u32)__cvta_generic_to_shared(bars);
    if (tid == 0) {
        for (int r = 0; r < SP_NR; r++) {
            mbar_init(SP_FULL(r), 1);
            mbar_init(SP_EMPTY(r), 4 * SP_CWG); // one arrival per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((u64)&tm_a) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((u64)&tm_b) : "memory");
    }
    __syncthreads();
#if SP_CWG == 4
    if (tid == 0)
        for (int s = 0; s < SP_NR && s < n_stages; s++)
            sp_issue(s, &tm_a, &tm_b, ring, bar0, t_begin, ch, a1_base, a2_base);
    if (nw == 128)
        sp_consume<128>(acc, ch, a1_base, a2_base, n_stages, ring, bar0, &tm_a, &tm_b, t_begin);
    else if (nw == 96)
        sp_consume<96>(acc, ch, a1_base, a2_base, n_stages, ring, bar0, &tm_a, &tm_b, t_begin);
    else if (nw == 64)
        sp_consume<64>(acc, ch, a1_base, a2_base, n_stages, ring, bar0, &tm_a, &tm_b, t_begin);
    else
        sp_consume<32>(acc, ch, a1_base, a2_base, n_stages, ring, bar0, &tm_a, &tm_b, t_begin);
#else
    if (tid >= 256) {
        // ---------------- producer warpgroup: one thread issues the tensor copies ----------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(SP_REG_P));
        if (tid == 256) {
            for (int s = 0; s < n_stages; s++) {
                if (s >= SP_NR) mbar_wait(SP_EMPTY(s % SP_NR), (u32)(s / SP_NR - 1) & 1);
                sp_issue(s, &tm_a, &tm_b, ring, bar0, t_begin, ch, a1_base, a2_base);
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(SP_REG_C));
        if (nw == 256)
            sp_consume<256>(acc, ch, a1_base, a2_base, n_stages, ring, bar0, &tm_a, &tm_b, t_begin);
        else if (nw == 192)
            sp_consume<192>(acc, ch, a1_base, a2_base, n_stages, ring, bar0, &tm_a, &tm_b, t_begin);
        else if (nw == 128)
            sp_consume<128>(acc, ch, a1_base, a2_base, n_stages, ring, bar0, &tm_a, &tm_b, t_begin);
        else
            sp_consume<64>(acc, ch, a1_base, a2_base, n_stages, ring, bar0, &tm_a, &tm_b, t_begin);
    }
#endif
}
#undef SP_FULL
#undef SP_EMPTY
