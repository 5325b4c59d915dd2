// GPU NUFFT (types 1 and 2, 2-D and 3-D): bin sort of the points, output-driven spreading,
// interpolation, and the deconvolution / mode copy on either side of cuFFT.
// Host code: src/nufft/gpu.rs; CPU reference: src/nufft/{spread,deconv,kernel}.rs.
//
// Grid: C order, axis 0 (x) slowest, shape nf0 × nf1 (× nf2), interleaved complex REAL.
// Points: coordinates in REAL (any finite value, folded into [0, 2π) in double exactly as
// the CPU's `to_grid`), strengths interleaved complex.
//
// Sort (counting sort by bin, cuFINUFFT's scheme): `nufft_bin_count` gives every point its
// bin and its rank inside the bin (atomic increment), `nufft_scan` turns the counts into
// bin starts and subproblem starts (a bin of n points is ⌈n/SUB⌉ subproblems),
// `nufft_scatter` writes the permutation and the permuted coordinates, `nufft_subprob`
// lists the subproblems (bin, first sorted point, length).
//
// Spreading, output-driven without atomics in shared memory: a block holds G groups of
// GT threads; group g takes subproblem blockIdx.x·G + g and owns a padded tile of
// (B0+NS) × (B1+NS) (× (B2+NS)) cells covering every footprint of its bin. Thread `a` of
// a group owns the residue classes cls = a + q·GT (< NS^DIM) of tile cells modulo NS on
// every axis: every point's NS^DIM footprint holds exactly one cell of each class, so the
// threads of a group walk the same batch of points, each updating its own cell of every
// footprint with a plain `+=`: no atomics, and no barrier per point (only per batch of NP
// points, whose kernel values the group evaluated into shared memory first). With GT ≈
// NS^DIM and G·GT ≈ 256, nearly every lane works at every ns (cuFINUFFT's OD leaves
// 256 − NS^DIM lanes idle per point). The tiles are then added to the grid with global
// atomics (zero cells skipped).
//
// Interpolation (type 2): one thread per sorted point gathers its NS^DIM footprint from
// the grid (neighbouring threads read neighbouring cells: sorted order) and writes
// out[perm[q]]; no atomics.
//
// Kernel values: the ES kernel's per-panel polynomials fitted on the host (`Kernel`,
// NCOEF coefficients × NS panels, highest degree last), evaluated by Horner in REAL at
// s = 2(i0 − (t − NS/2)) − 1, with i0 = ⌈t − NS/2⌉ computed in double.
//
// Defines: REAL (float|double), DIM (2|3), NS, NCOEF, B0, B1, B2 (bin size per axis, B2 = 1
// in 2-D), G, GT (groups per block, threads per group), NP (batch), SUB (subproblem cap).

#ifndef REAL
#define REAL float
#endif
#ifndef DIM
#define DIM 2
#endif
#ifndef NS
#error "define NS"
#endif
#ifndef NCOEF
#error "define NCOEF"
#endif
#ifndef B0
#define B0 16
#endif
#ifndef B1
#define B1 16
#endif
#ifndef B2
#define B2 1
#endif
#ifndef G
#define G 1
#endif
#ifndef GT
#define GT 256
#endif
#ifndef NP
#define NP 64
#endif
#ifndef SUB
#define SUB 1024
#endif

#define S0 (B0 + NS)
#define S1 (B1 + NS)
#if DIM == 3
#define S2 (B2 + NS)
#define NCLASS (NS * NS * NS)
#else
#define S2 1
#define NCLASS (NS * NS)
#endif
#define TILE_CELLS (S0 * S1 * S2)
#define CPT ((NCLASS + GT - 1) / GT)

#if REAL_IS_DOUBLE
typedef double2 complex_t;
#else
typedef float2 complex_t;
#endif

__device__ __forceinline__ complex_t make_c(REAL re, REAL im) {
    complex_t v;
    v.x = re;
    v.y = im;
    return v;
}

// Folds x into [0, 2π) and rescales to [0, nf): the CPU's `to_grid`, in double.
__device__ __forceinline__ double to_grid(double x, int nf) {
    const double two_pi = 6.283185307179586;
    double u = x / two_pi;
    double t = (u - floor(u)) * (double)nf;
    return (t >= 0.0 && t < (double)nf) ? t : 0.0;
}

// First grid index i0 = ⌈t − NS/2⌉ and the Horner variable s ∈ [−1, 1).
__device__ __forceinline__ int first_index(double t, REAL& s) {
    double tt = t - 0.5 * NS;
    double i0 = ceil(tt);
    s = (REAL)(2.0 * (i0 - tt) - 1.0);
    return (int)i0;
}

// v[j] = φ(i0 + j − t) for j < NS, from the panel polynomials coef[d·NS + j].
__device__ __forceinline__ void eval_kernel(const REAL* coef, REAL s, REAL* v) {
#pragma unroll
    for (int j = 0; j < NS; ++j) {
        REAL acc = coef[(NCOEF - 1) * NS + j];
#pragma unroll
        for (int d = NCOEF - 2; d >= 0; --d) acc = acc * s + coef[d * NS + j];
        v[j] = acc;
    }
}

__device__ __forceinline__ int bin_of_point(const REAL* x, const REAL* y, const REAL* z,
                                            int j, int nf0, int nf1, int nf2, int nb0,
                                            int nb1, int nb2) {
    int b0 = min((int)to_grid((double)x[j], nf0) / B0, nb0 - 1);
    int b1 = min((int)to_grid((double)y[j], nf1) / B1, nb1 - 1);
    int b = b0 * nb1 + b1;
#if DIM == 3
    int b2 = min((int)to_grid((double)z[j], nf2) / B2, nb2 - 1);
    b = b * nb2 + b2;
#endif
    return b;
}

extern "C" __global__ void nufft_bin_count(const REAL* __restrict__ x,
                                           const REAL* __restrict__ y,
                                           const REAL* __restrict__ z, int m, int nf0,
                                           int nf1, int nf2, int nb0, int nb1, int nb2,
                                           int* __restrict__ bin, int* __restrict__ rank,
                                           int* __restrict__ counts) {
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < m; j += gridDim.x * blockDim.x) {
        int b = bin_of_point(x, y, z, j, nf0, nf1, nf2, nb0, nb1, nb2);
        bin[j] = b;
        rank[j] = atomicAdd(&counts[b], 1);
    }
}

// One block of 1024 threads: start[i] = Σ_{b<i} counts[b] and sub_start[i] = Σ_{b<i}
// ⌈counts[b]/SUB⌉ for i = 0..n (n + 1 entries each).
extern "C" __global__ void __launch_bounds__(1024)
    nufft_scan(const int* __restrict__ counts, int n, int* __restrict__ start,
               int* __restrict__ sub_start) {
    __shared__ int s_pts[1024];
    __shared__ int s_sub[1024];
    const int tid = threadIdx.x;
    const int per = (n + 1023) / 1024;
    const int lo = min(n, tid * per), hi = min(n, lo + per);
    int p = 0, q = 0;
    for (int i = lo; i < hi; ++i) {
        p += counts[i];
        q += (counts[i] + SUB - 1) / SUB;
    }
    s_pts[tid] = p;
    s_sub[tid] = q;
    __syncthreads();
    for (int off = 1; off < 1024; off <<= 1) {
        int vp = tid >= off ? s_pts[tid - off] : 0;
        int vq = tid >= off ? s_sub[tid - off] : 0;
        __syncthreads();
        s_pts[tid] += vp;
        s_sub[tid] += vq;
        __syncthreads();
    }
    p = s_pts[tid] - p;  // exclusive prefix of this thread's range
    q = s_sub[tid] - q;
    for (int i = lo; i < hi; ++i) {
        start[i] = p;
        sub_start[i] = q;
        p += counts[i];
        q += (counts[i] + SUB - 1) / SUB;
    }
    if (tid == 1023) {
        start[n] = s_pts[1023];
        sub_start[n] = s_sub[1023];
    }
}

extern "C" __global__ void nufft_scatter(const REAL* __restrict__ x, const REAL* __restrict__ y,
                                         const REAL* __restrict__ z, int m,
                                         const int* __restrict__ bin,
                                         const int* __restrict__ rank,
                                         const int* __restrict__ start, int* __restrict__ perm,
                                         REAL* __restrict__ xs, REAL* __restrict__ ys,
                                         REAL* __restrict__ zs) {
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < m; j += gridDim.x * blockDim.x) {
        int pos = start[bin[j]] + rank[j];
        perm[pos] = j;
        xs[pos] = x[j];
        ys[pos] = y[j];
#if DIM == 3
        zs[pos] = z[j];
#endif
    }
}

// One thread per subproblem s: its bin is the last b with sub_start[b] ≤ s.
extern "C" __global__ void nufft_subprob(const int* __restrict__ counts,
                                         const int* __restrict__ start,
                                         const int* __restrict__ sub_start, int nb, int nsub,
                                         int* __restrict__ sub_bin, int* __restrict__ sub_first,
                                         int* __restrict__ sub_len) {
    for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < nsub; s += gridDim.x * blockDim.x) {
        int lo = 0, hi = nb;  // invariant: sub_start[lo] ≤ s < sub_start[hi]
        while (hi - lo > 1) {
            int mid = (lo + hi) >> 1;
            if (sub_start[mid] <= s) lo = mid; else hi = mid;
        }
        int k = s - sub_start[lo];
        sub_bin[s] = lo;
        sub_first[s] = start[lo] + k * SUB;
        sub_len[s] = min(SUB, counts[lo] - k * SUB);
    }
}

__device__ __forceinline__ void atomic_add_c(REAL* p, complex_t v) {
#if !REAL_IS_DOUBLE && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2*>(p), v);
#else
    atomicAdd(p, v.x);
    atomicAdd(p + 1, v.y);
#endif
}

__device__ __forceinline__ int wrap(int i, int n) {
    i %= n;
    return i < 0 ? i + n : i;
}

// Dynamic shared memory, each section starting on a 16-byte boundary: coef[NCOEF·NS] |
// tiles[G][TILE_CELLS] (complex) | kv[G][NP][DIM][NS] | pc[G][NP] (complex) |
// pl[G][NP] (int4: l0, l0 mod NS for axes 0 and 1) | pl2[G][NP] (int2: axis 2, 3-D only).
// The host's `SpreadConfig::shared_bytes` mirrors this layout.
#define ALIGN16(n) ((((size_t)(n)) + 15) / 16 * 16)
#define OFF_TILE ALIGN16(NCOEF * NS * sizeof(REAL))
#define OFF_KV (OFF_TILE + ALIGN16(G * TILE_CELLS * sizeof(complex_t)))
#define OFF_PC (OFF_KV + ALIGN16(G * NP * DIM * NS * sizeof(REAL)))
#define OFF_PL (OFF_PC + ALIGN16(G * NP * sizeof(complex_t)))
#define OFF_PL2 (OFF_PL + ALIGN16(G * NP * sizeof(int4)))
extern "C" __global__ void __launch_bounds__(G * GT)
    nufft_spread(const REAL* __restrict__ xs, const REAL* __restrict__ ys,
                 const REAL* __restrict__ zs, const int* __restrict__ perm,
                 const REAL* __restrict__ c, const int* __restrict__ sub_bin,
                 const int* __restrict__ sub_first, const int* __restrict__ sub_len, int nsub,
                 const REAL* __restrict__ coef, REAL* __restrict__ grid, int nf0, int nf1,
                 int nf2, int nb1, int nb2) {
    extern __shared__ __align__(16) unsigned char smem[];
    REAL* s_coef = reinterpret_cast<REAL*>(smem);
    complex_t* s_tile = reinterpret_cast<complex_t*>(smem + OFF_TILE);
    REAL* s_kv = reinterpret_cast<REAL*>(smem + OFF_KV);
    complex_t* s_pc = reinterpret_cast<complex_t*>(smem + OFF_PC);
    int4* s_pl = reinterpret_cast<int4*>(smem + OFF_PL);
    int2* s_pl2 = reinterpret_cast<int2*>(smem + OFF_PL2);
    __shared__ int s_nmax;

    const int tid = threadIdx.x;
    const int g = tid / GT;
    const int a = tid - g * GT;
    const bool active = g < G;
    const int sub = blockIdx.x * G + g;
    const bool valid = active && sub < nsub;
    const int n = valid ? sub_len[sub] : 0;
    const int first = valid ? sub_first[sub] : 0;
    const int bin = valid ? sub_bin[sub] : 0;
    const int bb0 = bin / (nb1 * nb2);
    const int bb1 = (bin / nb2) % nb1;
    const int o0 = bb0 * B0 - NS / 2;
    const int o1 = bb1 * B1 - NS / 2;
#if DIM == 3
    const int bb2 = bin % nb2;
    const int o2 = bb2 * B2 - NS / 2;
#endif

    if (tid == 0) s_nmax = 0;
    for (int i = tid; i < NCOEF * NS; i += blockDim.x) s_coef[i] = coef[i];
    for (int i = tid; i < G * TILE_CELLS; i += blockDim.x) s_tile[i] = make_c(0, 0);
    __syncthreads();
    if (valid && a == 0) atomicMax(&s_nmax, n);
    __syncthreads();
    const int nmax = s_nmax;

    complex_t* tile = s_tile + g * TILE_CELLS;
    REAL* kv = s_kv + g * NP * DIM * NS;
    complex_t* pc = s_pc + g * NP;
    int4* pl = s_pl + g * NP;
    int2* pl2 = s_pl2 + g * NP;
    (void)pl2;

    for (int base = 0; base < nmax; base += NP) {
        const int cnt = min(NP, n - base);
        // Load: kernel values, tile offsets and strengths of the batch.
        for (int k = a; k < cnt; k += GT) {
            const int q = first + base + k;
            const int j = perm[q];
            pc[k] = make_c(c[2 * (long long)j], c[2 * (long long)j + 1]);
            REAL s;
            int l0 = min(max(first_index(to_grid((double)xs[q], nf0), s) - o0, 0), B0);
            eval_kernel(s_coef, s, kv + (k * DIM + 0) * NS);
            int l1 = min(max(first_index(to_grid((double)ys[q], nf1), s) - o1, 0), B1);
            eval_kernel(s_coef, s, kv + (k * DIM + 1) * NS);
            pl[k] = make_int4(l0, l0 % NS, l1, l1 % NS);
#if DIM == 3
            int l2 = min(max(first_index(to_grid((double)zs[q], nf2), s) - o2, 0), B2);
            eval_kernel(s_coef, s, kv + (k * DIM + 2) * NS);
            pl2[k] = make_int2(l2, l2 % NS);
#endif
        }
        __syncthreads();
        // Accumulate: this thread's cell of every footprint, for each of its classes.
        if (active) {
#pragma unroll
            for (int qc = 0; qc < CPT; ++qc) {
                const int cls = a + qc * GT;
                if (CPT * GT != NCLASS && cls >= NCLASS) break;
#if DIM == 3
                const int e2 = cls % NS;
                const int e1 = (cls / NS) % NS;
                const int e0 = cls / (NS * NS);
#else
                const int e1 = cls % NS;
                const int e0 = cls / NS;
#endif
                for (int k = 0; k < cnt; ++k) {
                    const int4 p = pl[k];
                    int j0 = e0 - p.y;
                    j0 += j0 < 0 ? NS : 0;
                    int j1 = e1 - p.w;
                    j1 += j1 < 0 ? NS : 0;
                    REAL w = kv[(k * DIM) * NS + j0] * kv[(k * DIM + 1) * NS + j1];
                    int cell = (p.x + j0) * S1 + p.z + j1;
#if DIM == 3
                    const int2 p2 = pl2[k];
                    int j2 = e2 - p2.y;
                    j2 += j2 < 0 ? NS : 0;
                    w *= kv[(k * DIM + 2) * NS + j2];
                    cell = cell * S2 + p2.x + j2;
#endif
                    const complex_t cv = pc[k];
                    complex_t t = tile[cell];
                    t.x += w * cv.x;
                    t.y += w * cv.y;
                    tile[cell] = t;
                }
            }
        }
        __syncthreads();
    }
    if (!valid) return;
    // Flush the tile (periodic wrap) with global atomics.
    for (int i = a; i < TILE_CELLS; i += GT) {
        const complex_t v = tile[i];
        if (v.x == (REAL)0 && v.y == (REAL)0) continue;
#if DIM == 3
        const int l2 = i % S2;
        const int l1 = (i / S2) % S1;
        const int l0 = i / (S1 * S2);
        const long long gi =
            ((long long)wrap(o0 + l0, nf0) * nf1 + wrap(o1 + l1, nf1)) * nf2 + wrap(o2 + l2, nf2);
#else
        const int l1 = i % S1;
        const int l0 = i / S1;
        const long long gi = (long long)wrap(o0 + l0, nf0) * nf1 + wrap(o1 + l1, nf1);
#endif
        atomic_add_c(grid + 2 * gi, v);
    }
}

// Only the innermost loop of the interpolation is unrolled in 3-D (NS = 16 would be 4096
// copies); in 2-D both are.
#if DIM == 3
#define UNROLL_OUTER _Pragma("unroll 1")
#else
#define UNROLL_OUTER _Pragma("unroll")
#endif

// Type 2: out[perm[q]] = Σ grid[i0 + a] φ(...) over the footprint of sorted point q.
extern "C" __global__ void nufft_interp(const REAL* __restrict__ xs,
                                        const REAL* __restrict__ ys,
                                        const REAL* __restrict__ zs,
                                        const int* __restrict__ perm, int m,
                                        const REAL* __restrict__ coef,
                                        const REAL* __restrict__ grid, int nf0, int nf1,
                                        int nf2, REAL* __restrict__ out) {
    __shared__ REAL s_coef[NCOEF * NS];
    for (int i = threadIdx.x; i < NCOEF * NS; i += blockDim.x) s_coef[i] = coef[i];
    __syncthreads();
    const complex_t* gr = reinterpret_cast<const complex_t*>(grid);
    for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < m; q += gridDim.x * blockDim.x) {
        REAL s, k0[NS], k1[NS];
        int i0 = wrap(first_index(to_grid((double)xs[q], nf0), s), nf0);
        eval_kernel(s_coef, s, k0);
        int i1 = wrap(first_index(to_grid((double)ys[q], nf1), s), nf1);
        eval_kernel(s_coef, s, k1);
#if DIM == 3
        REAL k2[NS];
        int i2 = wrap(first_index(to_grid((double)zs[q], nf2), s), nf2);
        eval_kernel(s_coef, s, k2);
#endif
        REAL sr = 0, si = 0;
        UNROLL_OUTER
        for (int u = 0; u < NS; ++u) {
            int g0 = i0 + u;
            g0 -= g0 >= nf0 ? nf0 : 0;
            REAL rr = 0, ri = 0;
            UNROLL_OUTER
            for (int v = 0; v < NS; ++v) {
                int g1 = i1 + v;
                g1 -= g1 >= nf1 ? nf1 : 0;
#if DIM == 3
                const complex_t* row = gr + ((long long)g0 * nf1 + g1) * nf2;
                REAL qr = 0, qi = 0;
#pragma unroll
                for (int w = 0; w < NS; ++w) {
                    int g2 = i2 + w;
                    g2 -= g2 >= nf2 ? nf2 : 0;
                    const complex_t gv = row[g2];
                    qr += gv.x * k2[w];
                    qi += gv.y * k2[w];
                }
                rr += qr * k1[v];
                ri += qi * k1[v];
#else
                const complex_t gv = gr[(long long)g0 * nf1 + g1];
                rr += gv.x * k1[v];
                ri += gv.y * k1[v];
#endif
            }
            sr += rr * k0[u];
            si += ri * k0[u];
        }
        const long long j = perm[q];
        out[2 * j] = sr;
        out[2 * j + 1] = si;
    }
}

// Fine-grid index of mode index i on an axis of n modes and nf points.
__device__ __forceinline__ int grid_index(int i, int n, int nf) {
    int k = i - n / 2;
    return k < 0 ? k + nf : k;
}

// The modes (C order, first axis slowest) times w0[i0]·w1[i1]·w2[i2], between the mode
// array and the fine grid: from the grid (TO_GRID false: type 1, src = grid, dst = modes) or
// into it (TO_GRID true: type 2, src = modes, dst = grid, whose other cells must be zero).
template <bool TO_GRID>
__device__ __forceinline__ void copy_modes(const REAL* __restrict__ src, REAL* __restrict__ dst,
                                           const REAL* __restrict__ w0,
                                           const REAL* __restrict__ w1,
                                           const REAL* __restrict__ w2, int n0, int n1, int n2,
                                           int nf0, int nf1, int nf2) {
    const long long total = (long long)n0 * n1 * n2;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const int i2 = (int)(idx % n2);
        const int i1 = (int)((idx / n2) % n1);
        const int i0 = (int)(idx / ((long long)n1 * n2));
        const long long gi = ((long long)grid_index(i0, n0, nf0) * nf1 + grid_index(i1, n1, nf1)) * nf2 +
                             grid_index(i2, n2, nf2);
        const REAL w = w0[i0] * w1[i1] * w2[i2];
        const long long from = TO_GRID ? idx : gi;
        const long long to = TO_GRID ? gi : idx;
        dst[2 * to] = src[2 * from] * w;
        dst[2 * to + 1] = src[2 * from + 1] * w;
    }
}

// The two entry points of `copy_modes`: type 1 `nufft_extract(grid, out, ...)`,
// out[i] = grid[k(i)]·w0[i0]·w1[i1]·w2[i2]; type 2 `nufft_fill(f, grid, ...)`,
// grid[k(i)] = f[i]·w0[i0]·w1[i1]·w2[i2], the rest of the grid zero beforehand.
#define COPY_MODES_KERNEL(name, to_grid)                                                   \
    extern "C" __global__ void name(const REAL* __restrict__ src, REAL* __restrict__ dst,  \
                                    const REAL* __restrict__ w0, const REAL* __restrict__ w1, \
                                    const REAL* __restrict__ w2, int n0, int n1, int n2,   \
                                    int nf0, int nf1, int nf2) {                           \
        copy_modes<to_grid>(src, dst, w0, w1, w2, n0, n1, n2, nf0, nf1, nf2);              \
    }
COPY_MODES_KERNEL(nufft_extract, false)
COPY_MODES_KERNEL(nufft_fill, true)
