// gpucbf X-engine correlator: int8 tensor cores (mma.sync m16n8k32 s8 -> s32).
//
// Input (per batch, as received from the F-engines): int8 [antenna][channel][spectrum][pol][re/im],
// batches contiguous. Output accumulator: int64 [channel][baseline][product][re/im], baseline
// bl = a2(a2+1)/2 + a1 (a1 <= a2), product p1 + 2*p2,
// value sum_t x[a1,p1](t) * conj(x[a2,p2](t)).
//
// Defines (from the host, via NVRTC -D): N_ANTS, N_CHANNELS, SPECTRA (spectra per batch, a multiple
// of 16). Inputs must lie in [-127, 127] (-128 is never sent by a MeerKAT F-engine; the complex trick
// negates imaginary parts and -(-128) is not representable).
//
// Mapping. A thread block (8 warps) computes a 64 x 64 antenna tile (a1 rows, a2 columns) of the
// upper triangle; tiles on the diagonal skip warps wholly below it and discard a1 > a2 at the store.
// Warp (wy, wx), wy in 0..2, wx in 0..4, owns a1 in [32wy, 32wy+32), a2 in [16wx, 16wx+16) of the
// tile: 4 A fragments (8 antennas x 2 pols = 16 rows) times 8 B fragments (4 antennas x 1 pol,
// each as two columns: x and conj_perm(x) = i*x, giving Re and Im in adjacent output columns).
// K = 32 = 16 time samples x (re, im). Thread-in-group t takes the K slots {4t..4t+3, 16+4t..16+4t+3}
// for both A and B; we assign them the times 4t..4t+3 so that one 16-byte shared load of an antenna
// (4 times x 2 pols x re/im) feeds both pols of an A row pair or both pol fragments of a B column.
//
// 4-bit input (SAMPLE_BITS 4; direct path only): one byte per complex value, re in the high
// nibble (two's complement nibbles, as fgpu --send-sample-bits 4 writes them). Hopper has no
// int4 tensor path, so each thread cp.asyncs its 8-byte pieces (4 times x 2 pols) into a ring of
// packed stages and unpacks them to int8 into one of two int8 stage buffers, one stage ahead of
// the MMAs; the MMA loop is the 8-bit one.
//
// Time is staged through shared memory in chunks of STAGE_TIMES (64) spectra by a 3-stage cp.async
// pipeline; each stage is then rearranged once per block into fragment-ready order (pol split,
// conj_perm applied; double-buffered, overlapping the previous stage's MMAs), so the warps' inner
// loop is 16-byte shared loads and MMAs only. grid.z
// splits the time range (each block at most 65536 samples, so the int32 tensor-core sums are exact:
// |re|, |im| <= 2 * 127^2 per sample) and blocks add their partial sums into the int64 accumulator
// with 64-bit atomics.

// (N_ANTS, N_CHANNELS and SPECTRA: checked in xshape.cuh; N_BASELINES, conj_perm, tile_coords:
// corr_common.cuh)

#define TILE 64
#define N_TILES ((N_ANTS + TILE - 1) / TILE)
#ifndef STAGE_TIMES
#define STAGE_TIMES 64
#endif
#define KSTEPS_PER_STAGE (STAGE_TIMES / 16)
#define CHUNKS (STAGE_TIMES / 4) // 16-byte chunks per row (4 times x 2 pols x re/im)
#ifndef N_STAGES
#define N_STAGES 3 // raw cp.async stages
#endif
#ifndef DIRECT
#define DIRECT 1 // build fragments straight from the raw stages (no ready buffers)
#endif
// Diagnostic only (wrong results, for `gpucbf bench xbgpu`'s limit probes; direct path):
// 1 = no conj_perm on B, 2 = no MMAs (fragments folded into the sums with XOR),
// 3 = MMAs only (fragments built once per stage, not per k-step).
#ifndef PROBE
#define PROBE 0
#endif
#ifndef SAMPLE_BITS
#define SAMPLE_BITS 8
#endif
#define SBYTES (SAMPLE_BITS / 2) // input bytes per time sample (both pols)
#if SAMPLE_BITS != 8 && SAMPLE_BITS != 4
#error "SAMPLE_BITS must be 8 or 4"
#endif
#if SAMPLE_BITS == 4 && !DIRECT
#error "4-bit input needs the direct path"
#endif
#define ROWS (2 * TILE) // a1 tile rows then a2 tile rows
#define THREADS 256
// dynamic shared memory, in uint4: raw stages, then two ready buffers, each A-ready followed by
// B-ready (2 variants)
#define RAW_OFF 0
#define READY_OFF (N_STAGES * ROWS * CHUNKS)
#define READY_SIZE (TILE * CHUNKS * 3)
#if DIRECT && SAMPLE_BITS == 4
// two int8 stage buffers, then N_STAGES packed stages (uint2 per chunk)
#define SMEM_UINT4 (2 * ROWS * CHUNKS + N_STAGES * ROWS * CHUNKS / 2)
#define SLOT(st) ((st) & 1)
#elif DIRECT
#define SMEM_UINT4 (N_STAGES * ROWS * CHUNKS)
#define SLOT(st) ((st) % N_STAGES)
#else
#define SMEM_UINT4 (READY_OFF + 2 * READY_SIZE)
#endif


static_assert(SPECTRA % 16 == 0, "SPECTRA must be a multiple of 16");
static_assert(STAGE_TIMES % 16 == 0 && (ROWS * CHUNKS) % THREADS == 0, "bad STAGE_TIMES");

__device__ __forceinline__ void mma_s8(int (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    u32 s = (u32)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0; // 0 source bytes => zero fill
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}

#if SAMPLE_BITS == 4
__device__ __forceinline__ void cp_async8(void *smem, const void *gmem, bool valid) {
    u32 s = (u32)__cvta_generic_to_shared(smem);
    int n = valid ? 8 : 0; // 0 source bytes => zero fill
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}

// Sign-extends the four nibbles held in the low halves of the bytes of x.
__device__ __forceinline__ u32 sext4(u32 x) { return x | ((x & 0x08080808u) * 0x1eu); }

// 4 times x 2 pols of packed 4-bit samples (re high nibble) -> 4 words (re0, im0, re1, im1).
__device__ __forceinline__ uint4 unpack4(uint2 p) {
    const u32 r0 = sext4((p.x >> 4) & 0x0f0f0f0fu), i0 = sext4(p.x & 0x0f0f0f0fu);
    const u32 r1 = sext4((p.y >> 4) & 0x0f0f0f0fu), i1 = sext4(p.y & 0x0f0f0f0fu);
    return make_uint4(__byte_perm(r0, i0, 0x5140), __byte_perm(r0, i0, 0x7362),
                      __byte_perm(r1, i1, 0x5140), __byte_perm(r1, i1, 0x7362));
}
#endif

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Swizzled chunk position in the A-ready buffer: a quarter-warp reads rows r, r+1 at the same
// chunk; the XOR puts them in different banks.
__device__ __forceinline__ int swz(int row, int chunk) { return chunk ^ ((row & 1) << 2); }

// Per-thread constants of the loader: thread copies chunk `chunk` of rows r0 + 16i.
struct Loader {
    const signed char *base;  // any valid address (source of zero-fill copies)
    const signed char *a1src; // row r0 of the a1 tile, channel ch, time 0, batch 0
    const signed char *a2src; // row r0 of the a2 tile
    int r0, chunk;
};

#define ROWS_PER_PASS (THREADS / CHUNKS)
#define ROW_STEP ((size_t)ROWS_PER_PASS * N_CHANNELS * SPECTRA * SBYTES)
#define BATCH_STEP ((size_t)N_ANTS * N_CHANNELS * SPECTRA * SBYTES)

__device__ __forceinline__ Loader make_loader(const signed char *in, int ch, int a1_base, int a2_base) {
    Loader l;
    l.base = in;
    l.r0 = threadIdx.x / CHUNKS;
    l.chunk = threadIdx.x % CHUNKS;
    l.a1src = in + ((size_t)(a1_base + l.r0) * N_CHANNELS + ch) * SPECTRA * SBYTES;
    l.a2src = in + ((size_t)(a2_base + l.r0) * N_CHANNELS + ch) * SPECTRA * SBYTES;
    return l;
}

// Block-uniform: cp.async stage `st` (k-steps kbeg + st*KSTEPS_PER_STAGE ..) into raw buffer
// `raw` ([ROWS][CHUNKS]); out-of-range antennas and times are zero-filled.
__device__ __forceinline__ void load_stage(uint4 *raw, const Loader &l, int a1_base, int a2_base,
                                           long long kbeg, long long kend, int st) {
    const long long kk = kbeg + (long long)st * KSTEPS_PER_STAGE + l.chunk / 4;
    const bool tvalid = kk < kend;
    const long long t = kk * 16 + (l.chunk % 4) * 4;
    const size_t toff = (size_t)(t / SPECTRA) * BATCH_STEP + (size_t)(t % SPECTRA) * SBYTES;
#pragma unroll
    for (int i = 0; i < ROWS * CHUNKS / THREADS; i++) {
        const int half = i * ROWS_PER_PASS < TILE ? 0 : 1;
        const int ii = half ? i - TILE / ROWS_PER_PASS : i;
        const int ant = (half ? a2_base : a1_base) + l.r0 + ii * ROWS_PER_PASS;
        const bool valid = tvalid && ant < N_ANTS;
        const signed char *src = (half ? l.a2src : l.a1src) + toff + ii * ROW_STEP;
#if DIRECT && SAMPLE_BITS == 4
        // packed ring: thread-owned 8-byte pieces, unpacked by the same thread
        const int row = l.r0 + i * ROWS_PER_PASS;
        cp_async8((uint2 *)raw + row * CHUNKS + l.chunk, valid ? src : l.base, valid);
#elif DIRECT
        const int row = l.r0 + i * ROWS_PER_PASS;
        cp_async16(raw + row * CHUNKS + swz(row, l.chunk), valid ? src : l.base, valid);
#else
        cp_async16(raw + i * THREADS + threadIdx.x, valid ? src : l.base, valid);
#endif
    }
}

#if SAMPLE_BITS == 4
// Unpacks this thread's pieces of packed stage `packed` into the int8 stage buffer `dst`
// (swizzled like the 8-bit direct path).
__device__ __forceinline__ void unpack_stage(uint4 *dst, const uint2 *packed, const Loader &l) {
#pragma unroll
    for (int i = 0; i < ROWS * CHUNKS / THREADS; i++) {
        const int row = l.r0 + i * ROWS_PER_PASS;
        dst[row * CHUNKS + swz(row, l.chunk)] = unpack4(packed[row * CHUNKS + l.chunk]);
    }
}
#define PACKED(st) (smem + 2 * ROWS * CHUNKS + ((st) % N_STAGES) * ROWS * CHUNKS / 2)
#endif

// Rearranges one raw stage into fragment-ready form, once per block instead of once per warp:
// A-ready [TILE][CHUNKS] = {pol0 t0t1, pol1 t0t1, pol0 t2t3, pol1 t2t3} (the 4 A registers);
// B-ready [TILE][CHUNKS][2] = variant 0 {pol0 t0t1, pol0 t2t3, pol1 t0t1, pol1 t2t3} and
// variant 1 the same with conj_perm (the B registers of even / odd columns).
__device__ __forceinline__ void transform_stage(const uint4 *raw, uint4 *aready, uint4 *bready) {
#pragma unroll
    for (int i = 0; i < ROWS * CHUNKS / THREADS; i++) {
        int id = i * THREADS + threadIdx.x;
        int row = id / CHUNKS;
        int chunk = id % CHUNKS;
        uint4 v = raw[id];
        u32 p0a = __byte_perm(v.x, v.y, 0x5410), p1a = __byte_perm(v.x, v.y, 0x7632);
        u32 p0b = __byte_perm(v.z, v.w, 0x5410), p1b = __byte_perm(v.z, v.w, 0x7632);
        if (row < TILE) {
            aready[row * CHUNKS + swz(row, chunk)] = make_uint4(p0a, p1a, p0b, p1b);
        } else {
            uint4 *dst = bready + ((row - TILE) * CHUNKS + chunk) * 2;
            dst[0] = make_uint4(p0a, p0b, p1a, p1b);
            dst[1] = make_uint4(conj_perm(p0a), conj_perm(p0b), conj_perm(p1a), conj_perm(p1b));
        }
    }
}

// in: n_batches batches; acc: int64 accumulator; ksteps_per_block: time range of one grid.z slice
// in units of 16 samples (<= 4096). Dynamic shared memory: SMEM_UINT4 * 16 bytes.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    correlate(const signed char *__restrict__ in, long long *__restrict__ acc, int n_batches,
              int ksteps_per_block) {
    extern __shared__ uint4 smem[];

    int ti, tj;
    tile_coords(blockIdx.x, ti, tj);
    const int ch = blockIdx.y;
    const int a1_base = ti * TILE, a2_base = tj * TILE;
    const long long ktotal = (long long)n_batches * (SPECTRA / 16);
    const long long kbeg = (long long)blockIdx.z * ksteps_per_block;
    if (kbeg >= ktotal) return;
    const long long kend = min(ktotal, kbeg + ksteps_per_block);
    const int n_stages = (int)((kend - kbeg + KSTEPS_PER_STAGE - 1) / KSTEPS_PER_STAGE);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wy = warp >> 2, wx = warp & 3;
    // On a diagonal tile, warps whose a1 range lies entirely above their a2 range have no work.
    const bool active = !(ti == tj && 32 * wy > 16 * wx + 15);

    int accum[4][8][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) accum[i][j][r] = 0;

    const Loader ld = make_loader(in, ch, a1_base, a2_base);
#if DIRECT
    // Pipeline: N_STAGES - 1 raw stages in flight (cp.async) while stage st is multiplied
    // straight out of its raw buffer; one barrier per stage. Fragments are assembled in
    // registers: PRMT splits the pols, and odd B columns (g odd) take conj_perm through
    // per-lane masks (identity for even g).
    const u32 cmask = (g & 1) ? 0xFF00FF00u : 0u, cadd = (g & 1) ? 0x00FF00FFu : 0u;
    const u32 csel = (g & 1) ? 0x2705u : 0x3210u;
#if SAMPLE_BITS == 4
    // 4-bit: iteration st waits for packed stage st + 1 (own pieces), and after the barrier
    // unpacks it into int8 buffer (st + 1) % 2 while the MMAs read buffer st % 2.
#pragma unroll
    for (int s = 0; s < N_STAGES - 1; s++) {
        if (s < n_stages) load_stage(PACKED(s), ld, a1_base, a2_base, kbeg, kend, s);
        cp_async_commit();
    }
    cp_async_wait<N_STAGES - 2>();
    unpack_stage(smem, (const uint2 *)PACKED(0), ld);
#else
#pragma unroll
    for (int s = 0; s < N_STAGES - 1; s++) {
        if (s < n_stages) load_stage(smem + s * ROWS * CHUNKS, ld, a1_base, a2_base, kbeg, kend, s);
        cp_async_commit();
    }
#endif
    for (int st = 0; st < n_stages; st++) {
#if SAMPLE_BITS == 4
        cp_async_wait<N_STAGES - 3>();
        // int8 buffer st % 2 is complete; everyone is done with buffer (st + 1) % 2
        __syncthreads();
        if (st + N_STAGES - 1 < n_stages)
            load_stage(PACKED(st + N_STAGES - 1), ld, a1_base, a2_base, kbeg, kend,
                       st + N_STAGES - 1);
        cp_async_commit();
        if (st + 1 < n_stages)
            unpack_stage(smem + SLOT(st + 1) * ROWS * CHUNKS, (const uint2 *)PACKED(st + 1), ld);
#else
        cp_async_wait<N_STAGES - 2>();
        // stage st has landed for every thread; everyone is done with buffer (st - 1) % N_STAGES
        __syncthreads();
        if (st + N_STAGES - 1 < n_stages)
            load_stage(smem + ((st + N_STAGES - 1) % N_STAGES) * ROWS * CHUNKS, ld, a1_base,
                       a2_base, kbeg, kend, st + N_STAGES - 1);
        cp_async_commit();
#endif
        const uint4 *raw = smem + SLOT(st) * ROWS * CHUNKS;
        if (active) {
#if PROBE == 3
            u32 afrag[4][4], bfr[4][4];
            {
                const int chunk = t;
#else
#pragma unroll
            for (int ks = 0; ks < KSTEPS_PER_STAGE; ks++) {
                const int chunk = ks * 4 + t;
                u32 afrag[4][4];
#endif
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int row = 32 * wy + 8 * i + g;
                    const uint4 v = raw[row * CHUNKS + swz(row, chunk)];
                    afrag[i][0] = __byte_perm(v.x, v.y, 0x5410);
                    afrag[i][1] = __byte_perm(v.x, v.y, 0x7632);
                    afrag[i][2] = __byte_perm(v.z, v.w, 0x5410);
                    afrag[i][3] = __byte_perm(v.z, v.w, 0x7632);
                }
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int row = TILE + 16 * wx + 4 * q + (g >> 1);
                    const uint4 v = raw[row * CHUNKS + swz(row, chunk)];
                    u32 p[4] = {__byte_perm(v.x, v.y, 0x5410), __byte_perm(v.z, v.w, 0x5410),
                                __byte_perm(v.x, v.y, 0x7632), __byte_perm(v.z, v.w, 0x7632)};
#if PROBE != 1
#pragma unroll
                    for (int k = 0; k < 4; k++) p[k] = __byte_perm(p[k], cadd - (p[k] & cmask), csel);
#endif
                    const u32 bf0[2] = {p[0], p[1]};
                    const u32 bf1[2] = {p[2], p[3]};
#if PROBE == 3
#pragma unroll
                    for (int k = 0; k < 4; k++) bfr[q][k] = p[k];
                }
            }
#pragma unroll
            for (int ks = 0; ks < KSTEPS_PER_STAGE; ks++) {
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const u32 bf0[2] = {bfr[q][0], bfr[q][1]};
                    const u32 bf1[2] = {bfr[q][2], bfr[q][3]};
#endif
#pragma unroll
                    for (int i = 0; i < 4; i++) {
#if PROBE == 2
                        accum[i][2 * q][0] ^= afrag[i][0] ^ afrag[i][2] ^ bf0[0] ^ bf0[1];
                        accum[i][2 * q + 1][0] ^= afrag[i][1] ^ afrag[i][3] ^ bf1[0] ^ bf1[1];
#else
                        mma_s8(accum[i][2 * q + 0], afrag[i], bf0);
                        mma_s8(accum[i][2 * q + 1], afrag[i], bf1);
#endif
                    }
                }
            }
        }
    }
#else
    // Pipeline: raw stage st+2 is in flight (cp.async) while stage st+1 is rearranged into one
    // ready buffer and stage st is multiplied out of the other; one barrier per stage.
#pragma unroll
    for (int s = 0; s < 2; s++) {
        if (s < n_stages)
            load_stage(smem + RAW_OFF + s * ROWS * CHUNKS, ld, a1_base, a2_base, kbeg, kend, s);
        cp_async_commit();
    }
    cp_async_wait<1>();
    __syncthreads();
    transform_stage(smem + RAW_OFF, smem + READY_OFF, smem + READY_OFF + TILE * CHUNKS);

    for (int st = 0; st < n_stages; st++) {
        cp_async_wait<0>();
        // stage st is transformed; raw st+1 has landed; everyone is done with ready[(st+1)%2]
        __syncthreads();
        if (st + 2 < n_stages)
            load_stage(smem + RAW_OFF + ((st + 2) % N_STAGES) * ROWS * CHUNKS, ld, a1_base,
                       a2_base, kbeg, kend, st + 2);
        cp_async_commit();
        if (st + 1 < n_stages) {
            uint4 *r = smem + READY_OFF + ((st + 1) & 1) * READY_SIZE;
            transform_stage(smem + RAW_OFF + ((st + 1) % N_STAGES) * ROWS * CHUNKS, r, r + TILE * CHUNKS);
        }
        const uint4 *aready = smem + READY_OFF + (st & 1) * READY_SIZE;
        const uint4 *bready = aready + TILE * CHUNKS;
        if (active) {
#if PROBE == 3
            u32 afrag[4][4], bfr[4][4];
            {
                const int chunk = t;
#else
#pragma unroll
            for (int ks = 0; ks < KSTEPS_PER_STAGE; ks++) {
                const int chunk = ks * 4 + t;
                u32 afrag[4][4];
#endif
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int row = 32 * wy + 8 * i + g;
                    uint4 v = aready[row * CHUNKS + swz(row, chunk)];
                    afrag[i][0] = v.x;
                    afrag[i][1] = v.y;
                    afrag[i][2] = v.z;
                    afrag[i][3] = v.w;
                }
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    int ant = 16 * wx + 4 * q + (g >> 1);
                    uint4 v = bready[(ant * CHUNKS + chunk) * 2 + (g & 1)];
                    const u32 bf0[2] = {v.x, v.y};
                    const u32 bf1[2] = {v.z, v.w};
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        mma_s8(accum[i][2 * q + 0], afrag[i], bf0);
                        mma_s8(accum[i][2 * q + 1], afrag[i], bf1);
                    }
                }
            }
        }
    }
#endif
    cp_async_wait<0>();

    if (!active) return;
    // Thread (g, t) of fragment (i, q, p2) holds V[a1][a2][p1=0][p2] (re, im) and [p1=1] (re, im)
    // for a1 = row antenna g of A fragment i, a2 = antenna t of B group q.
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int a1 = a1_base + 32 * wy + 8 * i + g;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int a2 = a2_base + 16 * wx + 4 * q + t;
            if (a1 <= a2 && a2 < N_ANTS) {
                size_t bl = (size_t)a2 * (a2 + 1) / 2 + a1;
#pragma unroll
                for (int p2 = 0; p2 < 2; p2++) {
                    const int *c = accum[i][2 * q + p2];
                    u64 *dst = (u64 *)(acc + ((size_t)ch * N_BASELINES + bl) * 8 + 4 * p2);
                    // order: re(p1=0), im(p1=0), re(p1=1), im(p1=1)
                    if (c[0]) atomicAdd(dst + 0, (u64)(long long)c[0]);
                    if (c[1]) atomicAdd(dst + 1, (u64)(long long)c[1]);
                    if (c[2]) atomicAdd(dst + 2, (u64)(long long)c[2]);
                    if (c[3]) atomicAdd(dst + 3, (u64)(long long)c[3]);
                }
            }
        }
    }
}

// Saturate the int64 accumulator to int32 (+-(2^31 - 1)), write MISSING (-2^31, 1) for baselines
// with an absent antenna, count saturated products of present baselines, and zero the accumulator.
// present: one byte per baseline. One thread per (channel, baseline, product).
extern "C" __global__ void reduce(long long *__restrict__ acc, int *__restrict__ out,
                                  const unsigned char *__restrict__ present,
                                  unsigned long long *__restrict__ saturated) {
    const size_t n = (size_t)N_CHANNELS * N_BASELINES * 4;
    const long long lim = 2147483647LL;
    unsigned int count = 0;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (size_t)gridDim.x * blockDim.x) {
        size_t bl = (idx / 4) % N_BASELINES;
        long long re = acc[2 * idx], im = acc[2 * idx + 1];
        acc[2 * idx] = 0;
        acc[2 * idx + 1] = 0;
        int ore, oim;
        if (!present[bl]) {
            ore = (int)0x80000000u;
            oim = 1;
        } else {
            bool sat = re > lim || re < -lim || im > lim || im < -lim;
            count += sat;
            ore = (int)max(-lim, min(lim, re));
            oim = (int)max(-lim, min(lim, im));
        }
        out[2 * idx] = ore;
        out[2 * idx + 1] = oim;
    }
    // warp-level sum, one atomic per warp
    for (int off = 16; off > 0; off >>= 1) count += __shfl_down_sync(0xffffffffu, count, off);
    if ((threadIdx.x & 31) == 0 && count) atomicAdd(saturated, (unsigned long long)count);
}
