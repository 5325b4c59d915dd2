// gpucbf X-engine beamformer: single-pol beams from one batch of F-engine data, on int8 tensor
// cores (mma.sync m16n8k32 s8 -> s32).
//
// Input: int8 [antenna][channel][spectrum][pol][re/im] (one batch). Output: int8
// [beam][channel][spectrum][re/im]. For beam b, local channel c:
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
// Blocks. A block is one channel and up to BTB beam tiles (16 beams of one pol each; grid.x
// indexes groups of tiles). It builds its weight planes in shared memory once (while the first
// input stages are in flight), then walks the spectra in tiles of TS and the antennas in chunks
// of KC = 32: cp.async brings each stage in as it lies in memory ([antenna][spectrum], 16-byte
// coalesced copies, NR - 1 stages in flight), one pass transposes it to [spectrum][antenna]
// rows of 4-byte words (both pols, re/im), so that one 16-byte shared load gives a B fragment
// of either pol (PRMT selects the pol), and the warps multiply the previous stage meanwhile.
// Warp w owns the output tile (beam tile w / NT, 32 spectra (w % NT)): 2 x 4 fragments x (hi, lo).
// The input is read from device memory exactly once per beam-tile group.
//
// Defines: N_ANTS, N_CHANNELS, SPECTRA (spectra per batch, a multiple of 16), N_BEAMS,
// BTB (beam tiles per block, 1..8), TS (spectra per tile: 32 or 64, BTB * TS / 32 <= 8), NR (raw
// input stages, 2..4).

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
#ifndef BTB
#define BTB 4
#endif
#ifndef TS
#define TS 64
#endif

#define THREADS 256
#define WARPS 8
#define KC 32                               // antennas per stage
#define N_KC ((N_ANTS + KC - 1) / KC)       // antenna chunks
#define NAP (N_KC * KC)                     // padded antennas
#define LAST_KSTEPS ((N_ANTS - (N_KC - 1) * KC + 15) / 16) // k32 steps in the last chunk
#define WS (2 * NAP + 16)                   // weight row stride, bytes (odd multiple of 16)
#define RS (4 * KC + 64)                    // input row stride, bytes (64 mod 128)
#define NT (TS / 32)                        // 32-spectra subtiles per tile
#define N_ST ((SPECTRA + TS - 1) / TS)      // spectra tiles
#ifndef NR
#define NR 3                                // raw cp.async stages (NR - 1 in flight)
#endif
#define RAW_RS (4 * TS + 16)                // raw row stride (one antenna), bytes
#define RAW_BYTES (KC * RAW_RS)
#define CPT (KC * TS / 4 / THREADS)         // 16-byte copies per thread per stage
#define W_BYTES (BTB * 32 * WS)
#define SMEM_BYTES (2 * W_BYTES + NR * RAW_BYTES + 2 * TS * RS + BTB * 128)
#define QMAX 32512.0f

static_assert(SPECTRA % 16 == 0, "SPECTRA must be a multiple of 16");
static_assert(TS == 32 || TS == 64, "TS must be 32 or 64");
static_assert(BTB >= 1 && BTB * NT <= WARPS, "BTB * TS / 32 must be <= 8");
static_assert(NR >= 2 && CPT >= 1, "bad NR / TS");

typedef unsigned int u32;
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

// Byte offset within a weight row of (antenna a, input component ri): in each k32 step of 16
// antennas, thread-in-group q's B registers hold antennas (4q, 4q+1) and (4q+2, 4q+3).
__device__ __forceinline__ int kbyte(int a) {
    const int g = a >> 4, al = a & 15, q = al >> 2, r = al & 3;
    return 32 * g + (r < 2 ? 4 * q + 2 * r : 16 + 4 * q + 2 * (r - 2));
}

__device__ __forceinline__ void split16(int w, u32 &hi, u32 &lo) {
    int l = (int)(signed char)(w & 0xff);
    hi = (u32)(((w - l) >> 8) & 0xff);
    lo = (u32)(l & 0xff);
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

// Stage (spectra tile st, antenna chunk kc) into a raw buffer [antenna][TS spectra x 4 bytes]:
// consecutive threads copy consecutive 16-byte pieces of one antenna's spectra (coalesced);
// out-of-range antennas and spectra are zero-filled.
__device__ __forceinline__ void issue_stage(unsigned char *raw, const signed char *in, int c,
                                            int st, int kc) {
#pragma unroll
    for (int i = 0; i < CPT; i++) {
        const int u = i * THREADS + threadIdx.x;
        const int al = u / (TS / 4), sq = u % (TS / 4);
        const int a = kc * KC + al, s = st * TS + 4 * sq;
        const bool valid = a < N_ANTS && s < SPECTRA;
        const signed char *src =
            valid ? in + (((size_t)a * N_CHANNELS + c) * SPECTRA + s) * 4 : in;
        cp_async16(raw + al * RAW_RS + 16 * sq, src, valid);
    }
}

// Raw [antenna][spectrum] -> B rows [spectrum][antenna] (4-byte words: both pols, re/im). Lane =
// antenna (rows padded by 16 bytes: conflict-free 16-byte reads), warp = groups of 4 spectra.
__device__ __forceinline__ void transpose_stage(unsigned char *xb, const unsigned char *raw) {
    const int a = threadIdx.x & 31;
#pragma unroll
    for (int sq = threadIdx.x >> 5; sq < TS / 4; sq += WARPS) {
        const uint4 v = *(const uint4 *)(raw + a * RAW_RS + 16 * sq);
        u32 *row = (u32 *)(xb + 4 * sq * RS) + a;
        row[0] = v.x;
        row[RS / 4] = v.y;
        row[2 * RS / 4] = v.z;
        row[3 * RS / 4] = v.w;
    }
}

// coef: float2 [N_BEAMS][N_ANTS]; delay: float [N_BEAMS][N_ANTS]; wscale: float [N_BEAMS]
// (max_a |coef|); order: beam indices sorted by pol; groups: int3 (start in order, count <= 16,
// pol), one per beam tile. saturated: u64 [N_BEAMS] (added to). dither != 0 enables dither with
// key ((batch * N_CHANNELS + c) * SPECTRA + s) * N_BEAMS + beam. Dynamic shared memory SMEM_BYTES.
extern "C" __global__ void __launch_bounds__(THREADS, 2)
    beamform(const signed char *__restrict__ in, char2 *__restrict__ out,
             const float2 *__restrict__ coef, const float *__restrict__ delay,
             const float *__restrict__ wscale, const int *__restrict__ order,
             const int3 *__restrict__ groups, int n_groups,
             unsigned long long *__restrict__ saturated, int dither, u64 seed, u64 batch) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char *whi = smem, *wlo = smem + W_BYTES, *xin = smem + 2 * W_BYTES;
    unsigned char *raw = xin + 2 * TS * RS;
    int *s_beam = (int *)(raw + NR * RAW_BYTES); // [BTB * 16] beam index or -1
    float *s_q = (float *)(s_beam + BTB * 16);   // [BTB * 16] 32512 / s_b
    const int c = blockIdx.y;
    const int g0 = blockIdx.x * BTB;
    const int ntiles = min(BTB, n_groups - g0);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n_stages = N_ST * N_KC;

#pragma unroll
    for (int p = 0; p < NR - 1; p++) {
        if (p < n_stages) issue_stage(raw + p * RAW_BYTES, in, c, p / N_KC, p % N_KC);
        cp_async_commit();
    }

    if (threadIdx.x < BTB * 16) {
        const int t = threadIdx.x >> 4, j = threadIdx.x & 15;
        int beam = -1;
        float q = 0.0f;
        if (t < ntiles) {
            const int3 grp = groups[g0 + t];
            if (j < grp.y) {
                beam = order[grp.x + j];
                const float sb = wscale[beam];
                q = sb > 0.0f ? QMAX / sb : 0.0f;
            }
        }
        s_beam[threadIdx.x] = beam;
        s_q[threadIdx.x] = q;
    }
    __syncthreads();
    // Weight planes: row 32 t + 2 j + r (tile t, beam j of the tile, r = 0 re / 1 im output).
#pragma unroll 4
    for (int idx = threadIdx.x; idx < BTB * 16 * NAP; idx += THREADS) {
        const int jt = idx / NAP, a = idx % NAP;
        const int t = jt >> 4, j = jt & 15;
        const int beam = s_beam[jt];
        int wr = 0, wi = 0;
        if (beam >= 0 && a < N_ANTS) {
            const size_t k = (size_t)beam * N_ANTS + a;
            float sn, cs;
            sincospif((float)c * delay[k], &sn, &cs);
            const float2 cw = coef[k];
            const float q = s_q[jt];
            wr = max(-32512, min(32512, __float2int_rn((cw.x * cs - cw.y * sn) * q)));
            wi = max(-32512, min(32512, __float2int_rn((cw.x * sn + cw.y * cs) * q)));
        }
        u32 rh, rl, ih, il, nh, nl;
        split16(wr, rh, rl);
        split16(wi, ih, il);
        split16(-wi, nh, nl);
        const int off = (32 * t + 2 * j) * WS + kbyte(a);
        *(unsigned short *)(whi + off) = (unsigned short)(rh | (nh << 8));
        *(unsigned short *)(wlo + off) = (unsigned short)(rl | (nl << 8));
        *(unsigned short *)(whi + off + WS) = (unsigned short)(ih | (rh << 8));
        *(unsigned short *)(wlo + off + WS) = (unsigned short)(il | (rl << 8));
    }

    // This warp's output tile.
    const bool active = warp < ntiles * NT;
    const int bt = active ? warp / NT : 0, nt = warp % NT;
    int3 grp = make_int3(0, 0, 0);
    if (active) grp = groups[g0 + bt];
    const u32 sel = grp.z ? 0x7632u : 0x5410u;
    const int g = lane >> 2, tq = lane & 3, r = g & 1;
    // beams of this lane's two output rows per m16 fragment (jb = 8 mi + 4 h + g / 2)
    int beam[2][2];
    float oscale[2][2];
    unsigned int nsat[2][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int jb = 8 * mi + 4 * h + (g >> 1);
            beam[mi][h] = jb < grp.y ? order[grp.x + jb] : -1;
            oscale[mi][h] = beam[mi][h] >= 0 ? wscale[beam[mi][h]] / QMAX : 0.0f;
            nsat[mi][h] = 0;
        }
    // ldmatrix row addresses: lanes 0-7 / 8-15 / 16-23 / 24-31 give matrices a0..a3
    const int arow = 32 * bt + (lane & 7) + 8 * ((lane >> 3) & 1);
    const int acol = 16 * (lane >> 4);

    int acc_hi[2][4][4], acc_lo[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc_hi[mi][ni][k] = acc_lo[mi][ni][k] = 0;

    // Iteration i: stage i has landed (raw), stage i + NR - 1 is issued, stage i is transposed
    // into B buffer i % 2 while the warps multiply stage i - 1 out of the other; one barrier.
    for (int i = 0; i <= n_stages; i++) {
        if (i < n_stages) cp_async_wait<NR - 2>();
        __syncthreads();
        if (i + NR - 1 < n_stages) {
            const int j = i + NR - 1, st = j / N_KC, kc = j % N_KC;
            issue_stage(raw + (j % NR) * RAW_BYTES, in, c, st, kc);
        }
        cp_async_commit();
        if (i < n_stages) transpose_stage(xin + (i & 1) * TS * RS, raw + (i % NR) * RAW_BYTES);
        if (i == 0) continue;
        const int st = (i - 1) / N_KC, kc = (i - 1) % N_KC;
        const unsigned char *xb = xin + ((i - 1) & 1) * TS * RS;
        if (active) {
            const int ks = kc == N_KC - 1 ? LAST_KSTEPS : 2;
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                if (kk < ks) {
                    const int kg = kc * 2 + kk; // global k32 step
                    u32 ah[2][4], al[2][4];
#pragma unroll
                    for (int mi = 0; mi < 2; mi++) {
                        const int o = (arow + 16 * mi) * WS + 32 * kg + acol;
                        ldmatrix_x4(ah[mi], whi + o);
                        ldmatrix_x4(al[mi], wlo + o);
                    }
#pragma unroll
                    for (int ni = 0; ni < 4; ni++) {
                        const uint4 v = *(const uint4 *)(xb + (32 * nt + 8 * ni + g) * RS +
                                                         64 * kk + 16 * tq);
                        const u32 b[2] = {__byte_perm(v.x, v.y, sel), __byte_perm(v.z, v.w, sel)};
#pragma unroll
                        for (int mi = 0; mi < 2; mi++) {
                            mma_s8(acc_hi[mi][ni], ah[mi], b);
                            mma_s8(acc_lo[mi][ni], al[mi], b);
                        }
                    }
                }
            }
            if (kc == N_KC - 1) {
                // Epilogue of spectra tile st: lanes g even hold Re rows, odd Im rows; swap
                // with lane ^ 4 so that each lane owns one complex output.
#pragma unroll
                for (int mi = 0; mi < 2; mi++)
#pragma unroll
                    for (int ni = 0; ni < 4; ni++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const float os = oscale[mi][h];
                            const float v0 = os * fmaf(256.0f, (float)acc_hi[mi][ni][2 * h],
                                                       (float)acc_lo[mi][ni][2 * h]);
                            const float v1 = os * fmaf(256.0f, (float)acc_hi[mi][ni][2 * h + 1],
                                                       (float)acc_lo[mi][ni][2 * h + 1]);
                            const float other = __shfl_xor_sync(0xffffffffu, r ? v0 : v1, 4);
                            float vr = r ? other : v0, vi = r ? v1 : other;
                            const int s = st * TS + 32 * nt + 8 * ni + 2 * tq + r;
                            const int b = beam[mi][h];
                            if (b >= 0 && s < SPECTRA) {
                                if (dither) {
                                    u64 key = (((u64)batch * N_CHANNELS + c) * SPECTRA + s) * N_BEAMS + b;
                                    u64 hsh = splitmix64(seed + key * 0x9E3779B97F4A7C15ULL);
                                    vr = __fadd_rn(vr, dither_from((unsigned int)hsh));
                                    vi = __fadd_rn(vi, dither_from((unsigned int)(hsh >> 32)));
                                }
                                nsat[mi][h] += fabsf(vr) > 127.0f || fabsf(vi) > 127.0f;
                                vr = fminf(fmaxf(vr, -127.0f), 127.0f);
                                vi = fminf(fmaxf(vi, -127.0f), 127.0f);
                                char2 q;
                                q.x = (signed char)__float2int_rn(vr);
                                q.y = (signed char)__float2int_rn(vi);
                                out[((size_t)b * N_CHANNELS + c) * SPECTRA + s] = q;
                            }
                        }
#pragma unroll
                for (int mi = 0; mi < 2; mi++)
#pragma unroll
                    for (int ni = 0; ni < 4; ni++)
#pragma unroll
                        for (int k = 0; k < 4; k++) acc_hi[mi][ni][k] = acc_lo[mi][ni][k] = 0;
            }
        }
    }

    // Saturation counts: the 8 lanes with the same g / 2 share a beam.
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            unsigned int n = nsat[mi][h];
            n += __shfl_xor_sync(0xffffffffu, n, 1);
            n += __shfl_xor_sync(0xffffffffu, n, 2);
            n += __shfl_xor_sync(0xffffffffu, n, 4);
            if ((lane & 7) == 0 && n && beam[mi][h] >= 0)
                atomicAdd(&saturated[beam[mi][h]], (unsigned long long)n);
        }
}
