// Probe (diagnostic, not part of the engine): answers three questions before building a
// correlator on them, on the GPU it runs on.
//  1. sem: does sparse wgmma (m64n256k64 s8, A from registers, 2:4 metadata) compute what the
//     correlator design assumes? A's compressed fragment is taken to follow the dense m64k32 s8
//     register layout (thread (warp w, g = lane / 4, t = lane % 4): reg 0 row 16w + g, compressed
//     bytes 4t..4t+3; reg 1 row + 8; regs 2, 3 the same 16 compressed bytes further); compressed
//     byte kc of a row lands at dense position 4 (kc / 2) + idx[kc % 2] with idx from the
//     metadata nibble (0x4: 0, 1; 0xE: 2, 3). B: 256 rows x 128 bytes, 128B-swizzled K-major.
//     Checked against a host product; on mismatch a one-hot search prints where each byte goes.
//  2. rate: tensor throughput of sparse RS m64n256k64, dense RS and dense SS m64n256k32 (useful
//     multiply-adds: sparse counts half its dense-equivalent K).
//  3. tma: L2 -> shared rate of the correlator's access pattern ([batch][antenna][channel][spectrum
//     x 4 bytes], 576 antennas, 28 channels, 256 spectra, 32 batches): per stage of 64 spectra
//     (a) 64 + 64 antenna rows by 1-D bulk copies (one per row), (b) the same by 2-D tensor boxes
//     (64 rows x 128 bytes, 128B swizzle), (c) a 16-row A box plus 256 B rows shared by a cluster
//     of 4 CTAs (each brings 64 rows multicast to all 4), all expressed as correlator TOPS.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o wgmma_sp wgmma_sp.cu
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

typedef unsigned int u32;
typedef unsigned long long u64;

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define ACC4(i) "+r"(d[i]), "+r"(d[(i) + 1]), "+r"(d[(i) + 2]), "+r"(d[(i) + 3])
#define ACC16(i) ACC4(i), ACC4((i) + 4), ACC4((i) + 8), ACC4((i) + 12)
#define ACC64(i) ACC16(i), ACC16((i) + 16), ACC16((i) + 32), ACC16((i) + 48)
#define D128                                                                                       \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                      \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                             \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                             \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"                             \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                             \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"                             \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"                 \
    "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"

__device__ __forceinline__ void wgmma_sp(int (&d)[128], const u32 (&a)[4], u64 db, u32 meta) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %134, 0;\n"
                 "wgmma.mma_async.sp.sync.aligned.m64n256k64.s32.s8.s8 " D128
                 ", {%128, %129, %130, %131}, %132, %133, 0, p;\n}\n"
                 : ACC64(0), ACC64(64)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(meta), "n"(1));
}
__device__ __forceinline__ void wgmma_rs(int (&d)[128], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 " D128
                 ", {%128, %129, %130, %131}, %132, p;\n}\n"
                 : ACC64(0), ACC64(64)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}
__device__ __forceinline__ void wgmma_ss(int (&d)[128], u64 da, u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 " D128 ", %128, %129, p;\n}\n"
                 : ACC64(0), ACC64(64)
                 : "l"(da), "l"(db), "n"(1));
}
__device__ __forceinline__ u64 desc_swz(u32 saddr) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | (1ull << 16) | ((u64)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---------------------------------------------------------------- 1. semantics
// b: 256 rows x 128 bytes (row-major, plain); a: [128 threads][2 ksteps][4]; out: [64][256]
extern "C" __global__ void __launch_bounds__(128, 1)
    sp_sem(const signed char *b, const u32 *a, u32 meta, int dense, int *out) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const u32 base = ((u32)__cvta_generic_to_shared(smem) + 1023u) & ~1023u;
    unsigned char *sp = smem + (base - (u32)__cvta_generic_to_shared(smem));
    for (int i = threadIdx.x; i < 256 * 8; i += 128) {
        const int r = i / 8, c = i % 8;
        *(uint4 *)(sp + (r / 8) * 1024 + (r % 8) * 128 + ((c ^ (r % 8)) * 16)) =
            *(const uint4 *)(b + r * 128 + c * 16);
    }
    fence_proxy_async();
    __syncthreads();
    int d[128];
#pragma unroll
    for (int k = 0; k < 128; k++) d[k] = 0;
    const int tid = threadIdx.x;
    u32 a0[4], a1[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        a0[i] = a[tid * 8 + i];
        a1[i] = a[tid * 8 + 4 + i];
    }
    wg_fence();
    if (dense) {
        // dense RS over the 128 bytes: 4 k32 steps, A regs reused (checks the dense layout)
        wgmma_rs(d, a0, desc_swz(base + 0));
        wgmma_rs(d, a1, desc_swz(base + 32));
    } else {
        wgmma_sp(d, a0, desc_swz(base + 0), meta);
        wgmma_sp(d, a1, desc_swz(base + 64), meta);
    }
    wg_commit();
    wg_wait<0>();
    const int w = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        const int r = 16 * w + g, c = 8 * j + 2 * t;
        out[r * 256 + c] = d[4 * j];
        out[r * 256 + c + 1] = d[4 * j + 1];
        out[(r + 8) * 256 + c] = d[4 * j + 2];
        out[(r + 8) * 256 + c + 1] = d[4 * j + 3];
    }
}

// ---------------------------------------------------------------- 2. rate
// 2 warpgroups, each issuing iters x 4 wgmma (one commit group per 4), one group kept in flight.
extern "C" __global__ void __launch_bounds__(256, 1) rate(int mode, int iters, int *out) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const u32 base = ((u32)__cvta_generic_to_shared(smem) + 1023u) & ~1023u;
    const int tid = threadIdx.x;
    for (int i = tid; i < 48 * 1024 / 16; i += 256)
        ((uint4 *)(smem + (base - (u32)__cvta_generic_to_shared(smem))))[i] =
            make_uint4(i * 2654435761u, i ^ 0x5bd1e995u, i + 7, i * 3);
    fence_proxy_async();
    __syncthreads();
    int d[128];
#pragma unroll
    for (int k = 0; k < 128; k++) d[k] = 0;
    u32 a[4] = {tid * 0x01010101u, tid ^ 0x3c3c3c3cu, 0x01020304u, (u32)tid};
    const u32 bb = base + 16 * 1024; // B: 32 KB
    const u32 ab = base + (tid >> 7) * 8 * 1024;
    for (int it = 0; it < iters; it++) {
        wg_fence();
        if (mode == 0) {
#pragma unroll
            for (int ks = 0; ks < 4; ks++) wgmma_sp(d, a, desc_swz(bb + 64 * (ks & 1)), 0x44444444u);
        } else if (mode == 1) {
#pragma unroll
            for (int ks = 0; ks < 4; ks++) wgmma_rs(d, a, desc_swz(bb + 32 * ks));
        } else {
#pragma unroll
            for (int ks = 0; ks < 4; ks++) wgmma_ss(d, desc_swz(ab + 32 * ks), desc_swz(bb + 32 * ks));
        }
        wg_commit();
        wg_wait<1>();
    }
    wg_wait<0>();
    int s = 0;
#pragma unroll
    for (int k = 0; k < 128; k++) s += d[k];
    if (s == 0x12345678) out[0] = s;
}


// 2b. rate4: the correlator's consumer shape, m64n128k64 sparse RS, `nwg` warpgroups (2 or 4,
// launched with 128 nwg threads), 4 wgmma per commit group, one group kept in flight.
// mode 0: constant A registers; mode 1: A rebuilt each iteration from shared memory into two
// alternating register sets (8-byte loads, a PRMT and an (im, -re) row, as correlate_sp does);
// mode 2: the same with rows chosen so that a warp's loads are free of bank conflicts.
#define ACC32(i) ACC16(i), ACC16((i) + 16)
__device__ __forceinline__ void wgmma_sp128(int (&d)[64], const u32 (&a)[4], u64 db, u32 meta) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
                 "wgmma.mma_async.sp.sync.aligned.m64n128k64.s32.s8.s8 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
                 "{%64, %65, %66, %67}, %68, %69, 0, p;\n}\n"
                 : ACC32(0), ACC32(32)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(meta), "n"(1));
}
__device__ __forceinline__ uint2 lds8(u32 addr) {
    uint2 v;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void build_a(u32 (&a)[4][4], u32 slot, int al, int t, u32 sel) {
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        const u32 c0 = 4 * (ks & 1) + (t >> 1);
        const u32 base = slot + (ks >> 1) * 4096 + al * 128 + (t & 1) * 8;
        const uint2 x = lds8(base + ((c0 ^ (al & 7)) << 4));
        const uint2 y = lds8(base + (((c0 + 2) ^ (al & 7)) << 4));
        a[ks][0] = __byte_perm(x.x, x.y, sel);
        a[ks][1] = __byte_perm(a[ks][0], 0x00FF00FFu - ((a[ks][0] << 8) & 0xFF00FF00u), 0x7351);
        a[ks][2] = __byte_perm(y.x, y.y, sel);
        a[ks][3] = __byte_perm(a[ks][2], 0x00FF00FFu - ((a[ks][2] << 8) & 0xFF00FF00u), 0x7351);
    }
}
extern "C" __global__ void __launch_bounds__(512, 1) rate4(int mode, int iters, int *out) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const u32 base = ((u32)__cvta_generic_to_shared(smem) + 1023u) & ~1023u;
    const int tid = threadIdx.x;
    for (int i = tid; i < 48 * 1024 / 16; i += blockDim.x)
        ((uint4 *)(smem + (base - (u32)__cvta_generic_to_shared(smem))))[i] =
            make_uint4(i * 2654435761u, i ^ 0x5bd1e995u, i + 7, i * 3);
    fence_proxy_async();
    __syncthreads();
    int d[64];
#pragma unroll
    for (int k = 0; k < 64; k++) d[k] = 0;
    const int wg = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    // mode 1: rows 4w + g % 4 (two rows of a warp share the swizzled 16-byte chunks: 2-way bank
    // conflicts); mode 2: rows 8 (w / 2) + w % 2 + 2 (g % 4) (conflict-free)
    const int al = mode == 2 ? 16 * (wg >> 1) + 8 * (w >> 1) + (w & 1) + 2 * (g & 3)
                             : 16 * (wg >> 1) + 4 * w + (g & 3);
    const u32 sel = (g >> 2) ? 0x7632u : 0x5410u, meta = (wg & 1) ? 0xEEEEEEEEu : 0x44444444u;
    const u32 abase = base, bb = base + 16 * 1024; // A: 2 x 4 KB per slot (2 slots), B: 32 KB
    u32 ra[4][4], rb[4][4];
#pragma unroll
    for (int k = 0; k < 4; k++)
#pragma unroll
        for (int j = 0; j < 4; j++) ra[k][j] = rb[k][j] = (tid + k) * 0x01010101u + j;
    auto stage = [&](u32(&a)[4][4], int it) {
        if (mode >= 1) build_a(a, abase + (it & 1) * 8192, al, t, sel);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ks++)
            wgmma_sp128(d, a[ks], desc_swz(bb + (ks >> 1) * 16384 + 64 * (ks & 1)), meta);
        wg_commit();
        wg_wait<1>();
    };
    for (int it = 0; it < iters; it += 2) {
        stage(ra, it);
        stage(rb, it + 1);
    }
    wg_wait<0>();
    int s = 0;
#pragma unroll
    for (int k = 0; k < 64; k++) s += d[k];
    if (s == 0x12345678) out[0] = s;
}

// ---------------------------------------------------------------- 3. tma
#define PA 576
#define PC 28
#define PS 256
#define PB 32
#define NRING 4
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(u32 bar, u32 bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile("{\n.reg .pred p;\nW_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait_cl(u32 bar, u32 parity) {
    asm volatile("{\n.reg .pred p;\nWC_%=:\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n@!p bra WC_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive_remote(u32 bar, u32 cta) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(cta)
                 : "memory");
}
__device__ __forceinline__ void bulk_g2s(u32 dst, const void *src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void tma4(u32 dst, const CUtensorMap *m, int c0, int c1, int c2, int c3, u32 bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"((u64)m), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void tma4_mc(u32 dst, const CUtensorMap *m, int c0, int c1, int c2, int c3, u32 bar,
                                        unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
                 "l"((u64)m), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(mask)
                 : "memory");
}
__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void tile_coords(int idx, int &ti, int &tj) {
    int j = (int)((sqrtf(8.0f * idx + 1.0f) - 1.0f) * 0.5f);
    while (j * (j + 1) / 2 > idx) j--;
    while ((j + 1) * (j + 2) / 2 <= idx) j++;
    tj = j;
    ti = idx - j * (j + 1) / 2;
}

// mode 0: bulk rows, mode 1: tensor boxes; grid (45 tiles, PC channels), 128 threads
extern "C" __global__ void __launch_bounds__(128, 1)
    tma_tile(const signed char *in, const __grid_constant__ CUtensorMap m64, int mode, int *out) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) u64 bars[2 * NRING];
    const u32 base = ((u32)__cvta_generic_to_shared(smem) + 1023u) & ~1023u;
    const u32 bar0 = (u32)__cvta_generic_to_shared(bars);
    int ti, tj;
    tile_coords(blockIdx.x, ti, tj);
    const bool diag = ti == tj;
    const int ch = blockIdx.y, tid = threadIdx.x;
    const int nst = PB * PS / 64;
    const u32 stage_bytes = (diag ? 64 : 128) * 256;
    if (tid == 0) {
        for (int r = 0; r < NRING; r++) {
            mbar_init(bar0 + 8 * r, 1);
            mbar_init(bar0 + 8 * (NRING + r), 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](int s) {
        const int r = s % NRING;
        const u32 slot = base + r * 32768, bar = bar0 + 8 * r;
        const int t0 = s * 64, b = t0 / PS, w = t0 % PS;
        if (mode == 0) {
            if (tid == 0) mbar_arrive_tx(bar, stage_bytes);
            __syncwarp();
            for (int row = tid; row < (diag ? 64 : 128); row += 32) {
                const int a = row < 64 ? ti * 64 + row : tj * 64 + row - 64;
                bulk_g2s(slot + row * 256, in + (((size_t)b * PA + a) * PC + ch) * PS * 4 + w * 4, 256, bar);
            }
        } else if (tid == 0) {
            mbar_arrive_tx(bar, stage_bytes);
            for (int h = 0; h < 2; h++) {
                tma4(slot + h * 8192, &m64, (w + 32 * h) * 4, ch, ti * 64, b, bar);
                if (!diag) tma4(slot + 16384 + h * 8192, &m64, (w + 32 * h) * 4, ch, tj * 64, b, bar);
            }
        }
    };
    const int warp = tid >> 5, lane = tid & 31;
    if (warp == 0)
        for (int s = 0; s < NRING && s < nst; s++) issue(s);
    int acc = 0;
    for (int s = 0; s < nst; s++) {
        const int r = s % NRING;
        mbar_wait(bar0 + 8 * r, (s / NRING) & 1);
        acc += ((volatile int *)(smem + (base - (u32)__cvta_generic_to_shared(smem)) + r * 32768))[tid];
        __syncwarp();
        if (lane == 0) mbar_arrive(bar0 + 8 * (NRING + r));
        if (warp == 0 && s + NRING < nst) {
            mbar_wait(bar0 + 8 * (NRING + r), (s / NRING) & 1);
            issue(s + NRING);
        }
    }
    if (acc == 0x7fffffff) out[0] = acc;
}

// Sparse-design access: cluster of 4 CTAs = 4 a1 blocks of 16 antennas (one 64-antenna block
// I) x one 256-antenna B block starting at 64 I; per stage each CTA loads its 16 A rows and
// 64 of the 256 B rows multicast to all 4. grid.x = 4 x (sum over I of B blocks), grid.y = PC.
extern "C" __global__ void __cluster_dims__(4, 1, 1) __launch_bounds__(128, 1)
    tma_sparse(const __grid_constant__ CUtensorMap m16, const __grid_constant__ CUtensorMap m64, int *out) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) u64 bars[2 * 3];
    const int NR = 3;
    const u32 base = ((u32)__cvta_generic_to_shared(smem) + 1023u) & ~1023u;
    const u32 bar0 = (u32)__cvta_generic_to_shared(bars);
    const u32 rank = cluster_rank();
    // cluster index -> (I, J)
    int k = blockIdx.x / 4, I = 0;
    for (;; I++) {
        const int nb = (PA - 64 * I + 255) / 256;
        if (k < nb) break;
        k -= nb;
    }
    const int J = k;
    const int a1 = 64 * I + 16 * rank, a2 = 64 * I + 256 * J;
    const int ch = blockIdx.y, tid = threadIdx.x;
    const int nst = PB * PS / 64;
    const u32 stage_bytes = (16 + 256) * 256, SLOT = 4096 * 2 + 65536 + 1024 * 0;
    if (tid == 0) {
        for (int r = 0; r < NR; r++) {
            mbar_init(bar0 + 8 * r, 1);
            mbar_init(bar0 + 8 * (NR + r), 4 * 4); // 4 warps in each of 4 CTAs
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    cluster_sync();
    auto issue = [&](int s) {
        const int r = s % NR;
        const u32 slot = base + r * SLOT, bar = bar0 + 8 * r;
        const int t0 = s * 64, b = t0 / PS, w = t0 % PS;
        mbar_arrive_tx(bar, stage_bytes);
        for (int h = 0; h < 2; h++) {
            tma4(slot + h * 2048, &m16, (w + 32 * h) * 4, ch, a1, b, bar);
            tma4_mc(slot + 4096 + h * 32768 + rank * 8192, &m64, (w + 32 * h) * 4, ch, a2 + 64 * rank, b, bar,
                    (unsigned short)0xF);
        }
    };
    const int warp = tid >> 5, lane = tid & 31;
    if (tid == 0)
        for (int s = 0; s < NR && s < nst; s++) issue(s);
    int acc = 0;
    for (int s = 0; s < nst; s++) {
        const int r = s % NR;
        mbar_wait(bar0 + 8 * r, (s / NR) & 1);
        acc += ((volatile int *)(smem + (base - (u32)__cvta_generic_to_shared(smem)) + r * SLOT))[tid];
        __syncwarp();
        if (lane == 0)
            for (int c = 0; c < 4; c++) mbar_arrive_remote(bar0 + 8 * (NR + r), c);
        if (tid == 0 && s + NR < nst) {
            mbar_wait_cl(bar0 + 8 * (NR + r), (s / NR) & 1);
            issue(s + NR);
        }
    }
    cluster_sync();
    if (acc == 0x7fffffff) out[0] = acc;
}

// ---------------------------------------------------------------- host
static int hyp_row(int th, int reg) { return 16 * (th / 32) + ((th & 31) >> 2) + 8 * (reg & 1); }
static int hyp_kc(int th, int reg, int byte) { return 16 * (reg >> 1) + 4 * (th & 3) + byte; }

static double corr_ops_576() {
    const double nbl = 576.0 * 577 / 2;
    return nbl * 4 * PC * (double)PB * PS * 8;
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    std::mt19937 rng(12345);
    // ---------------- 1. semantics
    {
        CK(cudaFuncSetAttribute(sp_sem, cudaFuncAttributeMaxDynamicSharedMemorySize, 40 * 1024));
        std::vector<signed char> hb(256 * 128);
        for (auto &v : hb) v = (signed char)((int)(rng() % 255) - 127);
        std::vector<u32> ha(128 * 8);
        for (auto &v : ha) v = rng();
        signed char *db;
        u32 *da;
        int *dout;
        CK(cudaMalloc(&db, hb.size()));
        CK(cudaMalloc(&da, ha.size() * 4));
        CK(cudaMalloc(&dout, 64 * 256 * 4));
        CK(cudaMemcpy(db, hb.data(), hb.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(da, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice));
        std::vector<int> got(64 * 256);
        for (int dense = 1; dense >= 0; dense--) {
            for (u32 meta : {0x44444444u, 0xEEEEEEEEu}) {
                if (dense && meta != 0x44444444u) continue;
                sp_sem<<<1, 128, 40 * 1024>>>(db, da, meta, dense, dout);
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost));
                // expected: dense A [64][128]
                std::vector<int> A(64 * 128, 0);
                for (int th = 0; th < 128; th++)
                    for (int ks = 0; ks < 2; ks++)
                        for (int reg = 0; reg < 4; reg++)
                            for (int by = 0; by < 4; by++) {
                                const int v = (signed char)((ha[th * 8 + 4 * ks + reg] >> (8 * by)) & 0xFF);
                                const int row = hyp_row(th, reg), kc = hyp_kc(th, reg, by);
                                if (dense) {
                                    // two k32 steps per register set: ks 0 -> bytes 0..31, ks 1 -> 32..63
                                    A[row * 128 + 32 * ks + kc] = v;
                                } else {
                                    const int idx0 = (meta & 3), idx1 = (meta >> 2) & 3;
                                    const int kd = 4 * (kc / 2) + ((kc & 1) ? idx1 : idx0);
                                    A[row * 128 + 64 * ks + kd] = v;
                                }
                            }
                long bad = 0;
                for (int m = 0; m < 64; m++)
                    for (int n = 0; n < 256; n++) {
                        long s = 0;
                        for (int k = 0; k < (dense ? 64 : 128); k++) s += (long)A[m * 128 + k] * hb[n * 128 + k];
                        if (s != got[m * 256 + n]) {
                            if (bad < 3) printf("  mismatch m=%d n=%d got %d want %ld\n", m, n, got[m * 256 + n], s);
                            bad++;
                        }
                    }
                printf("sem %s meta=%08x: %ld of %d outputs differ from the assumed layout\n",
                       dense ? "dense-rs" : "sparse-rs", meta, bad, 64 * 256);
                if (bad && !dense) {
                    // one-hot search: B[n][k] = k + 1 (n < 256), A = one byte
                    std::vector<signed char> hb2(256 * 128);
                    for (int n = 0; n < 256; n++)
                        for (int k = 0; k < 128; k++) hb2[n * 128 + k] = (signed char)((k % 127) + 1);
                    CK(cudaMemcpy(db, hb2.data(), hb2.size(), cudaMemcpyHostToDevice));
                    int shown = 0;
                    for (int th = 0; th < 128 && shown < 40; th += 1)
                        for (int reg = 0; reg < 4; reg++)
                            for (int by = 0; by < 4; by += 3) {
                                if (th % 32 >= 5 && th != 37) continue;
                                std::vector<u32> h1(128 * 8, 0);
                                h1[th * 8 + reg] = 1u << (8 * by);
                                CK(cudaMemcpy(da, h1.data(), h1.size() * 4, cudaMemcpyHostToDevice));
                                sp_sem<<<1, 128, 40 * 1024>>>(db, da, meta, 0, dout);
                                CK(cudaDeviceSynchronize());
                                CK(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost));
                                int row = -1, val = 0;
                                for (int m = 0; m < 64; m++)
                                    if (got[m * 256]) row = m, val = got[m * 256];
                                printf("  onehot th=%d reg=%d byte=%d -> row %d dense k %d (assumed row %d kc %d)\n",
                                       th, reg, by, row, val - 1, hyp_row(th, reg), hyp_kc(th, reg, by));
                                shown++;
                            }
                    CK(cudaMemcpy(db, hb.data(), hb.size(), cudaMemcpyHostToDevice));
                    CK(cudaMemcpy(da, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice));
                }
            }
        }
    }
    // ---------------- 2. rate
    {
        CK(cudaFuncSetAttribute(rate, cudaFuncAttributeMaxDynamicSharedMemorySize, 52 * 1024));
        int *dout;
        CK(cudaMalloc(&dout, 4));
        const int iters = 20000, blocks = prop.multiProcessorCount;
        const char *names[3] = {"sparse RS m64n256k64", "dense RS m64n256k32", "dense SS m64n256k32"};
        for (int mode = 0; mode < 3; mode++) {
            rate<<<blocks, 256, 52 * 1024>>>(mode, 100, dout);
            CK(cudaDeviceSynchronize());
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            cudaEventRecord(e0);
            rate<<<blocks, 256, 52 * 1024>>>(mode, iters, dout);
            cudaEventRecord(e1);
            CK(cudaEventSynchronize(e1));
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            const double useful = (double)blocks * 2 * iters * 4 * 64.0 * 256 * 32;
            printf("rate %-22s: %8.1f useful TOPS (2 ops per useful multiply-add)\n", names[mode],
                   2 * useful / (ms * 1e-3) / 1e12);
        }
    }

    // ---------------- 2b. rate4 (the correlator's consumer shape)
    {
        CK(cudaFuncSetAttribute(rate4, cudaFuncAttributeMaxDynamicSharedMemorySize, 52 * 1024));
        int *dout;
        CK(cudaMalloc(&dout, 4));
        const int iters = 20000, blocks = prop.multiProcessorCount;
        for (int nwg : {4, 2})
            for (int mode = 0; mode < 3; mode++) {
                rate4<<<blocks, 128 * nwg, 52 * 1024>>>(mode, 100, dout);
                CK(cudaDeviceSynchronize());
                cudaEvent_t e0, e1;
                cudaEventCreate(&e0);
                cudaEventCreate(&e1);
                cudaEventRecord(e0);
                rate4<<<blocks, 128 * nwg, 52 * 1024>>>(mode, iters, dout);
                cudaEventRecord(e1);
                CK(cudaEventSynchronize(e1));
                float ms;
                cudaEventElapsedTime(&ms, e0, e1);
                const double useful = (double)blocks * nwg * iters * 4 * 64.0 * 128 * 32;
                printf("rate4 %d warpgroups m64n128k64 sparse RS, A %-24s: %8.1f useful TOPS\n", nwg,
                       mode == 0 ? "constant" : mode == 1 ? "rebuilt, 2-way conflicts" : "rebuilt, conflict-free", 2 * useful / (ms * 1e-3) / 1e12);
            }
    }
    // ---------------- 3. tma
    {
        const size_t bytes = (size_t)PB * PA * PC * PS * 4;
        signed char *din;
        int *dout;
        CK(cudaMalloc(&din, bytes));
        CK(cudaMemset(din, 1, bytes));
        CK(cudaMalloc(&dout, 4));
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult q;
        CK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q));
        auto enc = (PFN_cuTensorMapEncodeTiled_v12000)fn;
        auto make = [&](int rows) {
            CUtensorMap m;
            cuuint64_t dims[4] = {PS * 4, PC, PA, PB};
            cuuint64_t strides[3] = {PS * 4, (cuuint64_t)PC * PS * 4, (cuuint64_t)PA * PC * PS * 4};
            cuuint32_t box[4] = {128, 1, (cuuint32_t)rows, 1};
            cuuint32_t es[4] = {1, 1, 1, 1};
            CUresult r = enc(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, din, dims, strides, box, es,
                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
            if (r != CUDA_SUCCESS) {
                printf("cuTensorMapEncodeTiled failed %d\n", (int)r);
                exit(1);
            }
            return m;
        };
        CUtensorMap m64 = make(64), m16 = make(16);
        const double ops = corr_ops_576();
        CK(cudaFuncSetAttribute(tma_tile, cudaFuncAttributeMaxDynamicSharedMemorySize, NRING * 32768 + 1024));
        for (int mode = 0; mode < 2; mode++) {
            for (int rep = 0; rep < 2; rep++) {
                cudaEvent_t e0, e1;
                cudaEventCreate(&e0);
                cudaEventCreate(&e1);
                cudaEventRecord(e0);
                tma_tile<<<dim3(45, PC), 128, NRING * 32768 + 1024>>>(din, m64, mode, dout);
                cudaEventRecord(e1);
                CK(cudaEventSynchronize(e1));
                float ms;
                cudaEventElapsedTime(&ms, e0, e1);
                const double moved = (45.0 * 128 - 9 * 64) * PC * PB * PS * 4;
                if (rep)
                    printf("tma 64x64 tiles, %-11s: %.3f ms, L2->SM %.2f TB/s, %.0f correlator TOPS-equivalent\n",
                           mode ? "tensor box" : "bulk rows", ms, moved / (ms * 1e-3) / 1e12, ops / (ms * 1e-3) / 1e12);
            }
        }
        int nclu = 0;
        for (int I = 0; I < PA / 64; I++) nclu += (PA - 64 * I + 255) / 256;
        const int smem = 3 * (4096 * 2 + 65536) + 1024;
        CK(cudaFuncSetAttribute(tma_sparse, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        for (int rep = 0; rep < 2; rep++) {
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            cudaEventRecord(e0);
            tma_sparse<<<dim3(4 * nclu, PC), 128, smem>>>(m16, m64, dout);
            cudaEventRecord(e1);
            cudaError_t err = cudaEventSynchronize(e1);
            if (err != cudaSuccess) {
                printf("tma_sparse: %s\n", cudaGetErrorString(err));
                break;
            }
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            const double moved = (double)nclu * 4 * (16 + 64) * PC * PB * PS * 4;
            if (rep)
                printf("tma sparse 16x256 tiles, cluster 4 multicast: %.3f ms, L2->SM %.2f TB/s (issued), %.0f correlator TOPS-equivalent (%d clusters)\n",
                       ms, moved / (ms * 1e-3) / 1e12, ops / (ms * 1e-3) / 1e12, nclu);
        }
    }
    printf("done\n");
    return 0;
}
