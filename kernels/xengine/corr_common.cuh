// gpucbf: correlator pieces shared by correlate.cu (mma.sync) and correlate_wgmma.cu (sm_90a):
// the baseline count, the conjugate permutation of the complex trick and the triangle's tile
// order. Prepended to those sources on the host (after xshape.cuh).

#define N_BASELINES ((N_ANTS) * ((N_ANTS) + 1) / 2)

// (re0, im0, re1, im1) -> (-im0, re0, -im1, re1): i x per complex int8 pair, so that the B
// columns x and conj_perm(x) give Re and Im of x1 conj(x2) in adjacent output columns.
__device__ __forceinline__ u32 conj_perm(u32 v) {
    return __byte_perm(v, 0x00FF00FFu - (v & 0xFF00FF00u), 0x2705);
}

// Tile (ti, tj), ti <= tj, of triangle index idx = tj (tj + 1) / 2 + ti.
__device__ __forceinline__ void tile_coords(int idx, int &ti, int &tj) {
    int j = (int)((sqrtf(8.0f * idx + 1.0f) - 1.0f) * 0.5f);
    while (j * (j + 1) / 2 > idx) j--;
    while ((j + 1) * (j + 2) / 2 <= idx) j++;
    tj = j;
    ti = idx - j * (j + 1) / 2;
}
