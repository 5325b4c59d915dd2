// gpucbf: Hopper (sm_90a) helpers shared by the wgmma kernels (correlate_wgmma.cu,
// beamform_wgmma.cu): shared-memory matrix descriptors, wgmma fences and groups, mbarriers,
// tensor-map (TMA) copies. Prepended to those sources on the host (after xshape.cuh).

// Shared-memory matrix descriptor: no swizzle, K-major; lbo = byte distance between core
// matrices adjacent in K, sbo = between 8-row groups.
__device__ __forceinline__ u64 make_desc(u32 saddr, u32 lbo, u32 sbo) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32);
}

// The same for the 128-byte swizzled K-major layout (leading byte offset unused, encoded 1).
__host__ __device__ __forceinline__ constexpr u64 make_desc_swz(u32 saddr) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | (1ull << 16) | ((u64)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(u32 bar, u32 bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(
                     bar),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile("{\n.reg .pred p;\nWS_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WS_WAIT_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
// A CUtensorMap, passed by value (__grid_constant__) and addressed by the copy engine.
struct __align__(64) TensorMap {
    u64 v[16];
};

__device__ __forceinline__ void tma_load4(u32 dst, const TensorMap *m, int c0, int c1, int c2, int c3,
                                          u32 bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"((u64)m), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ uint2 ld_shared8(u32 addr) {
    uint2 v;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void st_shared4(u32 addr, u32 v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
}
__device__ __forceinline__ uint4 ld_shared16(u32 addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}
