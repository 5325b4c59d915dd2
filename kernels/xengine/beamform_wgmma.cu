// gpucbf X-engine beamformer on Hopper warpgroup MMA (sm_90a): the same beams, arithmetic and
// output as beamform.cu (whose header notes give the weights, the 16-bit split into hi / lo
// int8 planes, the dither and the quantiser; shared through beam_common.cuh), 8-bit input.
//
// Product per channel, transposed against beamform.cu: M = 64 spectra, K = (antenna, re/im) of
// one pol, N = (beam, Re / Im output) of the beams of that pol:
//   out[s][(b, Re)] = sum_a re x * Wr - im x * Wi,  out[s][(b, Im)] = sum_a re x * Wi + im x * Wr.
// A (the input) is built in registers straight from the raw samples as the copy engine leaves
// them ([antenna][spectrum][pol][re/im], 128B-swizzled boxes of 32 spectra): a lane's 8-byte
// load holds spectra (2g, 2g + 1) of one antenna, both pols; a PRMT per register picks the
// pol. So there is no transpose pass: the tensor cores take the input as it arrived. B (the
// weights, per plane hi / lo and pol) is K-major in shared memory with the 128-byte swizzle
// ([128-byte K block][row][16-byte chunk XOR row % 8]; where the last block would hold only one
// or two k32 steps it is 32 or 64 bytes wide with the 32- or 64-byte swizzle instead, so that
// no K padding takes shared memory (80 antennas: 160 bytes a row, not 256); the unswizzled
// core-matrix layout read
// about 3x slower), rows 2j (Re: Wr, -Wi per antenna) and 2j + 1 (Im: Wi, Wr) for beam slot j.
// Row mapping: warp v of a consumer warpgroup owns spectra 16 v .. 16 v + 15 of its 64; row
// 16 v + g is spectrum 16 v + 2 g and row 16 v + g + 8 spectrum 16 v + 2 g + 1, so that a lane's
// accumulators hold (Re, Im) of beam slot 4 i + t at two consecutive spectra: one 4-byte
// word, staged in shared memory (a row of 64 spectra per slot and warpgroup); once the
// warpgroup's rows are staged its warps copy them out in 16-byte pieces (a beam's 64 spectra
// are 128 contiguous bytes of the output).
//
// Work. An item is (channel, beam group, batch, 128 spectra); the block's four consumer
// warpgroups take its two 64-spectrum halves times the group's two sub-groups of beam slots
// (four warpgroups keep four warps per scheduler: the epilogue is latency-bound with two).
// Items are ordered channel, group, batch, spectra (weights change only with the channel or
// group), the channels interleaved (CPERM, chan_of_v: the blocks read neighbouring channels
// at the same time); the grid is persistent, block k walking items [k n / grid, (k + 1) n /
// grid), with STEAL (items of one stage) the second half of those from the front while blocks
// whose own are done take them from the end (without the interleave the blocks of a few TPCs
// ran ~20 % slower than the rest). A
// stage is one item's KCH antennas (all of them for small arrays): four tensor copies (32
// spectra x KCH antennas each) issued by thread 0 into a ring of NR slots with full / empty
// mbarriers (a 17th, producer warp would cap the registers at 96: one register-file quarter
// would hold 5 warps). Absent antennas of a batch (present == 0) are zeroed in the ring slot
// between two consumer barriers (rare; the copy brings whatever is there). At a change of
// channel or group the consumers rebuild the weight planes between two named barriers (the
// copies of the next stages are already in flight), with PCACHE from the group's delays,
// coefficients and scales held in shared memory (no global loads in a build).
// Per k32 step (16 antennas) and warpgroup: one wgmma m64nNk32 per pol, N = 4 NB0 or 4 NB1
// (the Re / Im rows of the hi plane, then of the lo plane), a commit group each, A in two
// alternating register sets. Per-batch presence flags and dither seeds are read into shared
// memory at the start (up to MAXB batches).
//
// Defines: N_ANTS (<= 256), N_CHANNELS, SPECTRA (multiple of 16), N_BEAMS, NB0 / NB1 (beam
// slots per sub-group of pol 0 / 1: 0, or multiples of 4 up to 16 and of 8 above; NB0 + NB1
// <= 32; a group is two sub-groups),
// N_BG (beam groups), KCH (antennas per stage, a multiple of 16), NR (ring slots), BW_PROBE.
// (N_ANTS, N_CHANNELS and SPECTRA: checked in xshape.cuh)
#ifndef N_BEAMS
#error "N_BEAMS must be defined"
#endif
#ifndef NB0
#error "NB0 must be defined"
#endif
#ifndef NB1
#error "NB1 must be defined"
#endif
#ifndef N_BG
#define N_BG 1
#endif
#ifndef KCH
#define KCH 80
#endif
#ifndef NR
#define NR 3
#endif
#ifndef STEAL
#define STEAL 0
#endif
#ifndef CPERM
#define CPERM 1 // channel interleave (chan_of_v)
#endif
#ifndef PCACHE
#define PCACHE 0 // 1: the beam group's delays, coefficients and scales in shared memory (N_BG 1)
#endif
#ifndef STEAL_MIN
#define STEAL_MIN 3 // a thief takes items of a tail with at least this many left
#endif
#if STEAL && (KCH < N_ANTS)
#error "STEAL: items of one stage only (KCH >= N_ANTS)"
#endif
#ifndef BW_PROBE
#define BW_PROBE 0 // diagnostic, wrong results: 1 = no wgmma and no epilogue, 2 = weights built
                   // once, 3 = no epilogue, 4 = no wgmma, 5 = timeline (right beams; each
                   // block's phase cycles written past the saturation counters)
#endif
#if BW_PROBE == 5
// timeline probe: thread 0 of warpgroup w adds the cycles of phase j of its items to
// s_tl[TL_WORDS w + j] (0 weights, 1 waiting for stage data, 2 MMA phase, 3 waiting for the
// sums and the previous copy-out, 4 epilogue, 5 copy-out; 8 the waits at weight changes, 9 the
// weight builds; 6 of warpgroup 0: the builds), each its own words (no atomics: the probe
// perturbs less)
#define TL_WORDS 10
#define TL_MARK(j)                                                                              \
    do {                                                                                        \
        const u32 now_ = clock();                                                               \
        if ((threadIdx.x & 127) == 0) k.s_tl[TL_WORDS * (threadIdx.x >> 7) + (j)] += now_ - tl_; \
        tl_ = now_;                                                                             \
    } while (0)
#define PROBE_TL , k.s_tl
// (the cycles of the waits at a weight change into s_tl[8])
#define TL_WAIT(stmt)                                                                           \
    do {                                                                                        \
        const u32 w0_ = clock();                                                                \
        stmt;                                                                                   \
        if ((threadIdx.x & 127) == 0)                                                           \
            k.s_tl[TL_WORDS * (threadIdx.x >> 7) + 8] += (u32)clock() - w0_;                    \
    } while (0)
#else
#define TL_MARK(j) (void)0
#define PROBE_TL
#define TL_WAIT(stmt) stmt
#endif

#define NAP ((N_ANTS + 15) / 16 * 16) // antennas padded to k32 steps
#define KSTEPS (NAP / 16)
#define N_KCH ((NAP + KCH - 1) / KCH) // stages per item
#define KSPS (KCH / 16)               // k32 steps per (full) stage
#define N_IT ((SPECTRA + 127) / 128)  // items per (channel, group, batch)
#define BOX (128 * KCH)               // one tensor copy: 32 spectra x KCH antennas
#define SLOT (4 * BOX)
#define NS (NB0 + NB1) // beam slots per sub-group
#define NSG (2 * NS)   // beam slots per group
// wgmma N of pol 0: the Re / Im rows of its NB0 slots in the hi plane, then in the lo plane
// (one wgmma takes both planes: half the instructions and A reads of one per plane)
#define WN0 (4 * NB0)
#define WN1 (4 * NB1)
// a weight row: KBF 128-byte K blocks (4 k32 steps each), then, where one or two steps are
// left, a last block of LW = 32 or 64 bytes (else a last 128-byte block takes the rest)
#define KSR (KSTEPS % 4)
#define LW ((KSR == 1 || KSR == 2) ? 32 * KSR : 0)
#define KBF (LW ? KSTEPS / 4 : (KSTEPS + 3) / 4)
#define ROWB (KBF * 128 + LW)
// bytes of a weight plane of wgmma N = wn (both hi / lo planes), 1024-aligned for the swizzle
#define WPL(wn) (((wn) * ROWB + 1023) / 1024 * 1024)
#define WB0 WPL(WN0) // bytes of the weights of pol 0
#define WB1 WPL(WN1)
#define W_BYTES (2 * (WB0 + WB1))
// weights of sub-group u, pol p: offset in the weights
#define WOFF(u, p) ((u) * (WB0 + WB1) + ((p) ? WB0 : 0))
// per-batch presence flags and dither seeds held in shared memory up to this many batches
// (read from global memory per item beyond)
#define MAXB 128
#define BW_THREADS 512 // four consumer warpgroups (thread 0 also issues the copies)
#define CONSUMERS 512
// output staging: per warpgroup a row per beam slot of its sub-group (64 spectra x re/im = 128
// bytes, rows 160 bytes apart: a warp's four slots t = 0..3 fall on distinct banks)
#define STG_ROW 160
#define STG_WG (NS * STG_ROW)
#define STG_BYTES (4 * STG_WG)
// the parameter cache (PCACHE): per (slot, antenna) of the group the coefficient (float2) and
// the delay, then per slot its beam, q (the weights' scale) and the output scale
#define PC_BYTES (PCACHE ? NSG * NAP * 12 + NSG * 12 : 0)
#define SMEM_BYTES (1024 + NR * SLOT + W_BYTES + STG_BYTES + PC_BYTES)

static_assert(N_ANTS <= 256, "beamform_wg: at most 256 antennas");
static_assert(SPECTRA % 16 == 0, "SPECTRA must be a multiple of 16");
static_assert(KCH % 16 == 0 && KCH >= 16 && KCH <= 256, "KCH: a multiple of 16, 16..256");
static_assert(NS >= 1 && NS <= 32, "beam slots per sub-group: 1..32");
static_assert(NB0 % 4 == 0 && NB1 % 4 == 0 && (NB0 <= 16 || NB0 % 8 == 0) &&
                  (NB1 <= 16 || NB1 % 8 == 0),
              "NB0, NB1: whole wgmma N shapes (4 NB of 16 .. 128)");
static_assert(NR >= 2 && SMEM_BYTES <= 227 * 1024, "NR: 2 .. what fits");
static_assert(!PCACHE || N_BG == 1, "PCACHE: one beam group");

// wgmma m64nNk32 s8, A from registers (dense m64k32 layout: register 0 row 16 w + g, bytes
// 4 t .. 4 t + 3; register 1 row + 8; registers 2, 3 the same 16 bytes further in K), B from
// shared memory: wg_rs adds A B to the accumulators d, wg_rs0 starts them (D = A B, d as
// outputs only: the first k32 step of an item, so that the sums of the item before are dead
// and nothing between two items holds them; ptxas had serialised the wgmma otherwise, C7520).
template <int N> __device__ __forceinline__ void wg_rs(int (&d)[N / 2], const u32 (&a)[4], u64 db);
template <int N> __device__ __forceinline__ void wg_rs0(int (&d)[N / 2], const u32 (&a)[4], u64 db);
// BEGIN generated: wg_rs, wg_rs0 specialisations
template <> __device__ __forceinline__ void wg_rs<16>(int (&d)[8], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8, %9, %10, %11}, %12, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs0<16>(int (&d)[8], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8, %9, %10, %11}, %12, p;\n}\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]), "=r"(d[4]), "=r"(d[5]), "=r"(d[6]), "=r"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs<32>(int (&d)[16], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16, %17, %18, %19}, %20, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs0<32>(int (&d)[16], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16, %17, %18, %19}, %20, p;\n}\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]), "=r"(d[4]), "=r"(d[5]), "=r"(d[6]), "=r"(d[7]), "=r"(d[8]), "=r"(d[9]), "=r"(d[10]), "=r"(d[11]), "=r"(d[12]), "=r"(d[13]), "=r"(d[14]), "=r"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs<48>(int (&d)[24], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n48k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, {%24, %25, %26, %27}, %28, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs0<48>(int (&d)[24], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n48k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, {%24, %25, %26, %27}, %28, p;\n}\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]), "=r"(d[4]), "=r"(d[5]), "=r"(d[6]), "=r"(d[7]), "=r"(d[8]), "=r"(d[9]), "=r"(d[10]), "=r"(d[11]), "=r"(d[12]), "=r"(d[13]), "=r"(d[14]), "=r"(d[15]), "=r"(d[16]), "=r"(d[17]), "=r"(d[18]), "=r"(d[19]), "=r"(d[20]), "=r"(d[21]), "=r"(d[22]), "=r"(d[23])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs<64>(int (&d)[32], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32, %33, %34, %35}, %36, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs0<64>(int (&d)[32], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32, %33, %34, %35}, %36, p;\n}\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]), "=r"(d[4]), "=r"(d[5]), "=r"(d[6]), "=r"(d[7]), "=r"(d[8]), "=r"(d[9]), "=r"(d[10]), "=r"(d[11]), "=r"(d[12]), "=r"(d[13]), "=r"(d[14]), "=r"(d[15]), "=r"(d[16]), "=r"(d[17]), "=r"(d[18]), "=r"(d[19]), "=r"(d[20]), "=r"(d[21]), "=r"(d[22]), "=r"(d[23]), "=r"(d[24]), "=r"(d[25]), "=r"(d[26]), "=r"(d[27]), "=r"(d[28]), "=r"(d[29]), "=r"(d[30]), "=r"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs<96>(int (&d)[48], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, {%48, %49, %50, %51}, %52, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs0<96>(int (&d)[48], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, {%48, %49, %50, %51}, %52, p;\n}\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]), "=r"(d[4]), "=r"(d[5]), "=r"(d[6]), "=r"(d[7]), "=r"(d[8]), "=r"(d[9]), "=r"(d[10]), "=r"(d[11]), "=r"(d[12]), "=r"(d[13]), "=r"(d[14]), "=r"(d[15]), "=r"(d[16]), "=r"(d[17]), "=r"(d[18]), "=r"(d[19]), "=r"(d[20]), "=r"(d[21]), "=r"(d[22]), "=r"(d[23]), "=r"(d[24]), "=r"(d[25]), "=r"(d[26]), "=r"(d[27]), "=r"(d[28]), "=r"(d[29]), "=r"(d[30]), "=r"(d[31]), "=r"(d[32]), "=r"(d[33]), "=r"(d[34]), "=r"(d[35]), "=r"(d[36]), "=r"(d[37]), "=r"(d[38]), "=r"(d[39]), "=r"(d[40]), "=r"(d[41]), "=r"(d[42]), "=r"(d[43]), "=r"(d[44]), "=r"(d[45]), "=r"(d[46]), "=r"(d[47])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs<128>(int (&d)[64], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64, %65, %66, %67}, %68, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs0<128>(int (&d)[64], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64, %65, %66, %67}, %68, p;\n}\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]), "=r"(d[4]), "=r"(d[5]), "=r"(d[6]), "=r"(d[7]), "=r"(d[8]), "=r"(d[9]), "=r"(d[10]), "=r"(d[11]), "=r"(d[12]), "=r"(d[13]), "=r"(d[14]), "=r"(d[15]), "=r"(d[16]), "=r"(d[17]), "=r"(d[18]), "=r"(d[19]), "=r"(d[20]), "=r"(d[21]), "=r"(d[22]), "=r"(d[23]), "=r"(d[24]), "=r"(d[25]), "=r"(d[26]), "=r"(d[27]), "=r"(d[28]), "=r"(d[29]), "=r"(d[30]), "=r"(d[31]), "=r"(d[32]), "=r"(d[33]), "=r"(d[34]), "=r"(d[35]), "=r"(d[36]), "=r"(d[37]), "=r"(d[38]), "=r"(d[39]), "=r"(d[40]), "=r"(d[41]), "=r"(d[42]), "=r"(d[43]), "=r"(d[44]), "=r"(d[45]), "=r"(d[46]), "=r"(d[47]), "=r"(d[48]), "=r"(d[49]), "=r"(d[50]), "=r"(d[51]), "=r"(d[52]), "=r"(d[53]), "=r"(d[54]), "=r"(d[55]), "=r"(d[56]), "=r"(d[57]), "=r"(d[58]), "=r"(d[59]), "=r"(d[60]), "=r"(d[61]), "=r"(d[62]), "=r"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// END generated

// Byte offset of (row n, byte k) in a weight plane of wgmma N = wn (see the header notes): in
// a swizzled block of rows of w bytes the 16-byte chunk index XOR bits 7.. of the row's offset
// (128 bytes: row % 8; 64: (row / 2) % 4; 32: (row / 4) % 2).
__device__ __forceinline__ int wpos(int wn, int n, int k) {
    if (LW && (k >> 7) >= KBF) {
        const int m = LW / 16 - 1;
        return KBF * wn * 128 + n * LW + ((((k >> 4) & m) ^ ((n * LW >> 7) & m)) << 4) +
               (k & 15);
    }
    return (k >> 7) * wn * 128 + n * 128 + ((((k >> 4) & 7) ^ (n & 7)) << 4) + (k & 15);
}
// Descriptor of k32 step kg of the weight plane whose descriptor's low word is lo (wgmma N =
// wn): the step's offset added to the address field (shared addresses < 2^18: no carry out);
// in the narrow last block the 32- or 64-byte swizzle (layout type 3 / 2, 8-row groups 8 LW
// bytes apart).
__device__ __forceinline__ u64 wdesc(u32 lo, int wn, int kg) {
    constexpr u64 hi = make_desc_swz(0) & 0xffffffff00000000ull;
    if (LW && (kg >> 2) >= KBF) {
        constexpr u64 hn = ((u64)(LW == 32 ? 3 : 2) << 62) | ((u64)((8 * LW) >> 4) << 32);
        return hn | (u64)(lo + ((KBF * wn * 128 + 32 * (kg & 3)) >> 4));
    }
    return hi | (u64)(lo + (((kg >> 2) * wn * 128 + 32 * (kg & 3)) >> 4));
}

// The four words of job idx (weight_words_of: slot jg of the group, antenna pair pa; the
// slot is j of pol p of sub-group u) into the weight planes: rows 2 j (Re) and 2 j + 1 (Im) of
// the hi plane, and the same rows of the lo plane, wn / 2 rows further (a multiple of 8 rows:
// the same swizzle, wn / 2 rows of the K block's width further).
__device__ __forceinline__ void store_job(unsigned char *w, int idx, const u32 (&ww)[4]) {
    const int jg = idx / (NAP / 2), pa = idx % (NAP / 2);
    const int u = jg / NS, js = jg % NS;
    const int p = js >= NB0, j = js - p * NB0;
    const int wn = p ? WN1 : WN0, k = 4 * pa;
    const int dl = wn / 2 * ((LW && (k >> 7) >= KBF) ? LW : 128);
    unsigned char *wp = w + WOFF(u, p);
    const int o0 = wpos(wn, 2 * j, k), o1 = wpos(wn, 2 * j + 1, k);
    *(u32 *)(wp + o0) = ww[0];
    *(u32 *)(wp + o0 + dl) = ww[1];
    *(u32 *)(wp + o1) = ww[2];
    *(u32 *)(wp + o1 + dl) = ww[3];
}

// The weight planes of channel c, beam group bg, and the group's beam table (beam index or -1,
// output scale); the consumer threads; one thread per (slot, antenna pair) writes a 4-byte
// word of the Re row and of the Im row in each plane. A thread's (up to WJ) jobs are unrolled
// so that their loads overlap: two global round trips a build (a job's beam, then its delays,
// coefficients and scale).
#define WJOBS (NSG * (NAP / 2))
#define WJ ((WJOBS + CONSUMERS - 1) / CONSUMERS)
__device__ __noinline__ void build_weights(unsigned char *w, int *s_beam, float *s_os, int c,
                                           int bg, const int *__restrict__ slots,
                                           const float2 *__restrict__ coef,
                                           const float *__restrict__ delay,
                                           const float *__restrict__ wscale,
                                           const unsigned char *pc
#if BW_PROBE == 5
                                           , unsigned long long *s_tl
#endif
) {
    const int tid = threadIdx.x;
#if BW_PROBE == 5
    const u32 t0 = clock();
#endif
#if PCACHE
    // (no global loads: the parameters from the cache)
    const float2 *pcw = (const float2 *)pc;
    const float *pd = (const float *)(pc + NSG * NAP * 8);
    const int *pbeam = (const int *)(pc + NSG * NAP * 12);
    const float *pq = (const float *)(pbeam + NSG), *pos = pq + NSG;
    (void)bg;
    (void)slots;
    (void)coef;
    (void)delay;
    (void)wscale;
    if (tid < NSG) {
        s_beam[tid] = pbeam[tid];
        s_os[tid] = pos[tid];
    }
#pragma unroll
    for (int i = 0; i < WJ; i++) {
        const int idx = tid + i * CONSUMERS;
        if (idx < WJOBS) {
            const int jg = idx / (NAP / 2), pa = idx % (NAP / 2);
            const float2 dd = *(const float2 *)(pd + jg * NAP + 2 * pa);
            const float4 cc = *(const float4 *)(pcw + jg * NAP + 2 * pa);
            const float d[2] = {dd.x, dd.y};
            const float2 cw[2] = {make_float2(cc.x, cc.y), make_float2(cc.z, cc.w)};
            u32 ww[4];
            weight_words_of(d, cw, c, pq[jg], ww);
            store_job(w, idx, ww);
        }
    }
#else
    (void)pc;
    // two rounds of loads, each all at once: the beams of the jobs (and of the table's slot),
    // then their scales, delays and coefficients (one job after the other, behind a division
    // each, they had been ten round trips in a row)
    int beam[WJ];
#pragma unroll
    for (int i = 0; i < WJ; i++) {
        const int idx = tid + i * CONSUMERS;
        beam[i] = idx < WJOBS ? slots[bg * NSG + idx / (NAP / 2)] : -1;
    }
    const int tb = tid < NSG ? slots[bg * NSG + tid] : -1;
    float sb[WJ], d[WJ][2];
    float2 cw[WJ][2];
#pragma unroll
    for (int i = 0; i < WJ; i++) {
        const int pa = (tid + i * CONSUMERS) % (NAP / 2);
        sb[i] = beam[i] >= 0 ? wscale[beam[i]] : 0.0f;
#pragma unroll
        for (int e = 0; e < 2; e++)
            weight_params(beam[i], 2 * pa + e, coef, delay, d[i][e], cw[i][e]);
    }
    const float ts = tb >= 0 ? wscale[tb] : 0.0f;
    if (tid < NSG) {
        s_beam[tid] = tb;
        s_os[tid] = tb >= 0 ? ts / QMAX : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < WJ; i++) {
        const int idx = tid + i * CONSUMERS;
        if (idx < WJOBS) {
            const float q = sb[i] > 0.0f ? QMAX / sb[i] : 0.0f;
            u32 ww[4];
            weight_words_of(d[i], cw[i], c, q, ww);
            store_job(w, idx, ww);
        }
    }
#endif
#if BW_PROBE == 5
    if ((tid & 127) == 0) s_tl[TL_WORDS * (tid >> 7) + 9] += (u32)clock() - t0;
#endif
}

__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 512;\n" ::: "memory"); }
// The four warps of warpgroup wg (named barriers 2 .. 5).
__device__ __forceinline__ void wg_sync(int wg) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(2 + wg) : "memory");
}

// A lane's epilogue context for one item: its staging word of slot 0 (spectra s0 and s0 + 1 of
// the warpgroup's 64, re / im: shared address), the dither pair key of beam 0 at (s0, s0 + 1),
// the sub-group's beam table (beam index or -1, output scale per slot) and the batch's
// saturation counters.
struct Epi {
    u32 stg;
    u32 kbase;
    const int *beam;
    const float *os;
    unsigned long long *sat;
};

// The scaled (and dithered) values of beam slot 4 i + t (scale os, dither pair key key) at
// spectra s0 (v[0] re, v[1] im) and s0 + 1 (v[2], v[3]), from the accumulators d of one pol
// (the hi plane's sums d[k], the lo plane's d[WN / 4 + k]): one hash for the four uniforms.
template <int WN, bool DITHER>
__device__ __forceinline__ void epi_values(const int (&d)[WN / 2], int i, float os, u32 key,
                                           float (&v)[4]) {
    constexpr int L = WN / 4;
    const u32 h = DITHER ? hash32(key) : 0u;
    beam_value(combine(d[4 * i], d[L + 4 * i]), combine(d[4 * i + 1], d[L + 4 * i + 1]), os,
               DITHER, h, 0, v[0], v[1]);
    beam_value(combine(d[4 * i + 2], d[L + 4 * i + 2]), combine(d[4 * i + 3], d[L + 4 * i + 3]),
               os, DITHER, h, 2, v[2], v[3]);
}

// The four values as the output word (re, im at s0, then at s0 + 1), rounded half to even by
// adding 1.5 2^23 (the low byte of the bits): without the clamp, right where every |v| <= 127
// (else epi_saturation writes the word again).
__device__ __forceinline__ u32 pack_unclamped(const float (&v)[4]) {
    u32 q[4];
#pragma unroll
    for (int k = 0; k < 4; k++) q[k] = __float_as_uint(__fadd_rn(v[k], 12582912.0f));
    return __byte_perm(__byte_perm(q[0], q[1], 0x0040), __byte_perm(q[2], q[3], 0x0040), 0x5410);
}

// Epilogue iteration i of one pol (slot base + 4 i + t): quantise without the clamp and stage
// (one 4-byte word: re, im at s0 and s0 + 1), and keep the largest |value| in mx (where that
// passes 127, epi_saturation clamps, stages again and counts). The accumulators are read on
// every lane (a read in a divergent path would make the compiler serialise the wgmma); an
// empty slot has scale 0 and its row is not copied out, spectra past the batch were zero-filled
// (and are not copied out either).
template <int WN, bool DITHER>
__device__ __forceinline__ void epi_iter(const int (&d)[WN / 2], int i, int base, const Epi &e,
                                         float &mx) {
#if BW_PROBE == 1 || BW_PROBE == 3
    // (no epilogue: one store of an otherwise unused sum per lane)
    int sum = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) sum += d[4 * i + k] ^ d[WN / 4 + 4 * i + k];
    if (sum == 0x7fffffff) st_shared4(e.stg, (u32)sum);
#else
    const int t = threadIdx.x & 3;
    const int beam = e.beam[base + 4 * i + t];
    float v[4];
    epi_values<WN, DITHER>(d, i, e.os[base + 4 * i + t], e.kbase + (u32)beam, v);
    mx = fmaxf(mx, fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3]))));
    st_shared4(e.stg + (base + 4 * i) * STG_ROW, pack_unclamped(v));
#endif
}

// Where some lane's mx passed 127 (rare): the warp computes its outputs of one pol again from
// the accumulators, stages them clamped (the same thread's later store wins) and counts the
// saturated ones (|re| or |im| above 127 before rounding), per beam summed over the warp, one
// atomic per warp and beam.
template <int WN, bool DITHER>
__device__ __forceinline__ void epi_saturation(const int (&d)[WN / 2], int base, const Epi &e,
                                               float mx) {
#if !(BW_PROBE == 1 || BW_PROBE == 3)
    if (!__any_sync(0xffffffffu, mx > 127.0f)) return;
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < WN / 16; i++) {
        const int beam = e.beam[base + 4 * i + t];
        float v[4];
        epi_values<WN, DITHER>(d, i, e.os[base + 4 * i + t], e.kbase + (u32)beam, v);
        st_shared4(e.stg + (base + 4 * i) * STG_ROW,
                   __byte_perm(beam_pack(v[0], v[1]), beam_pack(v[2], v[3]), 0x5410));
        unsigned int n = (fmaxf(fabsf(v[0]), fabsf(v[1])) > 127.0f) +
                         (fmaxf(fabsf(v[2]), fabsf(v[3])) > 127.0f);
        n += __shfl_xor_sync(0xffffffffu, n, 4);
        n += __shfl_xor_sync(0xffffffffu, n, 8);
        n += __shfl_xor_sync(0xffffffffu, n, 16);
        if ((threadIdx.x & 31) < 4 && n && beam >= 0)
            atomicAdd(&e.sat[beam], (unsigned long long)n);
    }
#endif
}

// The whole epilogue of one pol.
template <int WN, bool DITHER>
__device__ __forceinline__ void epi_all(const int (&d)[WN / 2], int base, const Epi &e) {
    float mx = 0.0f;
#pragma unroll
    for (int i = 0; i < WN / 16; i++) epi_iter<WN, DITHER>(d, i, base, e, mx);
    epi_saturation<WN, DITHER>(d, base, e, mx);
}

// This lane's offsets in a stage box of rows (antennas) 2t + j, j = 0, 1, for spectra 2g,
// 2g + 1 of the warp's 16 (128B swizzle: the 16-byte chunk XOR the row % 8; rows 8 and 16 ks
// further have the same chunk).
__device__ __forceinline__ void x_offsets(u32 (&xo)[2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, v = (threadIdx.x >> 5) & 3;
    const u32 chunk = 4 * (v & 1) + (g >> 1), cbyte = 8 * (g & 1);
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int row = 2 * t + j;
        xo[j] = row * 128 + ((chunk ^ row) << 4) + cbyte;
    }
}

// This lane's 16 bytes of k32 step ks (antennas 2t, 2t + 1, 8 + 2t, 9 + 2t of the step, each
// spectra 2g, 2g + 1 of the warp's 16, both pols) from the stage box at shared address box
// (conflict-free).
__device__ __forceinline__ void load_x(uint2 (&x)[4], u32 box, const u32 (&xo)[2], int ks) {
#pragma unroll
    for (int e = 0; e < 4; e++) x[e] = ld_shared8(box + xo[e & 1] + (16 * ks + 8 * (e >> 1)) * 128);
}

// The rows of antennas absent from a batch (pres: its presence bytes) in the stage at shared
// address slot (stage kc of an item: antennas kc KCH ..) set to zero, by every consumer between
// two consumer barriers (rare: only for a batch with an antenna missing; the copy engine
// brings whatever is there, and rows past the array read as zeros already).
__device__ __noinline__ void zero_absent(u32 slot, int kc, const unsigned char *__restrict__ pres) {
    consumers_sync(); // every consumer has seen the stage arrive and reads nothing yet
    for (int idx = threadIdx.x; idx < 4 * KCH * 8; idx += CONSUMERS) {
        const int row = (idx >> 3) % KCH, a = kc * KCH + row;
        if (a < N_ANTS && !pres[a])
            asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(
                             slot + (idx / (8 * KCH)) * BOX + row * 128 + (idx & 7) * 16),
                         "r"(0)
                         : "memory");
    }
    fence_proxy_async(); // before the copy engine refills the slot
    consumers_sync();
}

// The A registers of pol p from load_x's bytes (a PRMT per register picks the pol): register
// 0 row g (spectrum 2g), 1 row g + 8 (spectrum 2g + 1), 2 and 3 the same 16 bytes further in K.
__device__ __forceinline__ void perm_a(u32 (&a)[4], const uint2 (&x)[4], int p) {
    const u32 sel = p ? 0x7632u : 0x5410u;
    a[0] = __byte_perm(x[0].x, x[1].x, sel);
    a[1] = __byte_perm(x[0].y, x[1].y, sel);
    a[2] = __byte_perm(x[2].x, x[3].x, sel);
    a[3] = __byte_perm(x[2].y, x[3].y, sel);
}

// One pol's k32 step: d = (acc ? d : 0) + A B (B: the weight plane whose descriptor's low word
// is wlo), or in the probes without wgmma a use of the A registers.
template <int WN>
__device__ __forceinline__ void mma_step(int (&d)[WN / 2], const u32 (&a)[4], u32 wlo, int kg,
                                         bool acc) {
#if BW_PROBE == 1 || BW_PROBE == 4
    d[0] += (int)(a[0] ^ a[1] ^ a[2] ^ a[3]);
#else
    if (acc)
        wg_rs<WN>(d, a, wdesc(wlo, WN, kg));
    else
        wg_rs0<WN>(d, a, wdesc(wlo, WN, kg));
#endif
}

#define BW_FULL(r) (bar0 + 8 * (r))
#define BW_EMPTY(r) (bar0 + 8 * (NR + (r)))

// Whether every antenna of batch bt is present (the whole warp calls it).
__device__ __forceinline__ bool warp_all_present(const unsigned char *__restrict__ present, int bt) {
    bool ok = true;
    for (int a = threadIdx.x & 31; a < N_ANTS; a += 32) ok &= present[(size_t)bt * N_ANTS + a] != 0;
    return __all_sync(0xffffffffu, ok);
}

// Block b's items [i0, i1) of n of a grid of g blocks; with STEAL its last half (at most 2^14
// items) from tail0 on is its tail, which blocks whose own items are done may take from the end.
__device__ __forceinline__ void block_items(int b, int g, long long n, int &i0, int &i1,
                                            int &tail0) {
    i0 = (int)((long long)b * n / g);
    i1 = (int)((long long)(b + 1) * n / g);
    tail0 = max(i0 + (i1 - i0) / 2, i1 - 16384);
}
// A tail word: front in the low 16 bits, end (int16) in the high 16 bits; the word + STEAL_DEC
// has end - 1 (the front unchanged). A front past the end stays within a few steps (each
// claimant fails once), so neither field wraps (2^14 items, at most 1024 blocks).
#define STEAL_DEC 0xffff0000u
__device__ __forceinline__ int tail_front(u32 w) { return (int)(w & 0xffffu); }
__device__ __forceinline__ int tail_end(u32 w) { return (int)(short)(w >> 16); }
// atomicAdd on a tail word by lane 0 alone, as one instruction whose result waits in its
// register until the claim is used an item later. (For an add at a warp-uniform address ptxas
// emits a warp-aggregated atomic that shuffles the result at once, so the warp waited out the
// round trip right there, even in inline PTX; the lane index, 0 here, added to the address
// hides its uniformity.)
__device__ __forceinline__ u32 tail_add(u32 *w, u32 v) {
    u32 lane, old;
    asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
    asm volatile("atom.global.add.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(w + lane), "r"(v));
    return old;
}

// The channel of virtual channel v (items are ordered by virtual channel; CPERM P, a divisor
// of the channels, about the channels a block takes): the channels as P rows, v walking them
// column by column, so that at any time the blocks, each on the j-th channel of its P, read
// neighbouring channels of row j (the input is [batch][antenna][channel][spectrum]:
// neighbouring blocks read neighbouring kilobytes, not ones P kilobytes apart; H100, 80
// antennas, 512 channels: 16 beams 87-89 % -> 93-94 %, the memory-only probe 91 % -> 94 %).
// (A last row shorter than the others, for any P, cost ptxas registers: spills, C7520.)
static_assert(N_CHANNELS % CPERM == 0, "CPERM: a divisor of the channels");
__device__ __forceinline__ int chan_of_v(int v) {
    return (v % CPERM) * (N_CHANNELS / CPERM) + v / CPERM;
}

// What a consumer thread needs of the kernel's arguments and its block's shared memory.
struct Ctx {
    const TensorMap *tm;
    signed char *out;
    const float2 *coef;
    const float *delay, *wscale;
    const int *slots;
    const unsigned char *present;
    int n_batches;
    unsigned long long *saturated;
    const unsigned int *dseeds;
    int it0, it1, n_stages; // the block's items and stages
    u32 ring, wsm, bar0;    // shared addresses: the ring, the weights, the mbarriers
    u32 stg;                // shared address of the output staging
    unsigned char *wgen;    // the weights (generic address)
    const unsigned char *pc; // the parameter cache (PCACHE)
    int *s_beam;
    float *s_os;
    const u32 *s_seed;
    const unsigned char *s_allp;
    bool tables; // the per-batch tables hold every batch
#if STEAL
    u32 *work;    // per block: its tail's (end << 16 | front), items past tail0 (end as int16)
    int tail0;                // first item of the block's tail
    long long n_items;
    int *s_item; // item per ring slot (-1: no more)
    int *s_cl;   // thread 0's claim state: next own item, kind of the pending claim, victim,
                 // (end marker issued, probe item count,) the victim's first tail item
#endif
#if BW_PROBE == 5
    unsigned long long *s_tl;
#endif
};

// The block's work (every thread; thread 0 also issues the tensor copies), DITHER: the dithered
// quantiser.
template <bool DITHER> __device__ __forceinline__ void consume(const Ctx &k) {
    const int it0 = k.it0, n_stages = k.n_stages, n_batches = k.n_batches;
    const u32 ring = k.ring, wsm = k.wsm, bar0 = k.bar0;
    const unsigned char *__restrict__ present = k.present;
    const bool tables = k.tables;
    const int tid = threadIdx.x;
    const int wg = tid >> 7, v = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2;
    auto full_wait = [&](int s) { mbar_wait(BW_FULL(s % NR), (u32)(s / NR) & 1); };
    // thread 0 issues the tensor copies of the block's items: stages 0 .. NR - 1 now, stage s -
    // 1 + NR at the start of stage s, once every consumer warp has released the slot of stage s
    // - 1 (issuing from the last warp to release a slot, so that no warp waits on the others,
    // measured 72.5 % / 55.6 % against 80.9 % / 56.4 % at 16 / 64 beams); with STEAL warp 0
    // claims the items as it issues them (below). (An earlier stealing kernel, claims held in
    // the consumers' registers, spilled 24 bytes and ran slower than static ranges, 67.4 %
    // against 70.0 % at 64 beams; this one ran 78.1 % against 68.7 %.)
    // the copies of stage kc of item it into ring slot r (one thread)
    auto copies = [&](int r, int it, int kc) {
        const int st = it % N_IT, bt = (it / N_IT) % n_batches;
        const int c = chan_of_v(it / (N_IT * n_batches * N_BG));
        mbar_arrive_tx(BW_FULL(r), SLOT);
#pragma unroll
        for (int j = 0; j < 4; j++)
            tma_load4(ring + r * SLOT + j * BOX, k.tm, 4 * (128 * st + 32 * j), c, kc * KCH, bt,
                      BW_FULL(r));
    };
#if !STEAL
    auto issue = [&](int s) { copies(s % NR, it0 + s / N_KCH, s % N_KCH); };
#endif
#if STEAL
    // Work stealing (items of one stage): warp 0 claims each item as it issues its copies and
    // leaves it in s_item for the consumers (-1 after the last). First the block's own items
    // up to its tail (no atomics), then its tail from the front, one atomic per item issued an
    // item ahead (pend), then items of other blocks' tails from the end: the block with the
    // most left (a scan by warp 0), again an item ahead, a new scan once that one is done.
    u32 pend = 0; // thread 0: the result of the claim issued an item ahead
    if (tid == 0 && k.s_cl[1] == 1) pend = tail_add(&k.work[blockIdx.x], 1u);
    // warp 0: the victim with the most items left and one of its items, -1 when no block has
    // STEAL_MIN left (a thief rebuilds its weights for the victim's channel: taking the last
    // one or two items of a tail costs about as much as it saves)
    auto steal = [&]() -> int {
        for (;;) {
            int best = -1, brem = 0;
            // (plain L2 loads, several in flight: the atomic below decides)
#pragma unroll 4
            for (int b = lane; b < (int)gridDim.x; b += 32) {
                const u32 x = __ldcg(&k.work[b]);
                const int rem = tail_end(x) - tail_front(x);
                if (rem >= STEAL_MIN && rem > brem) {
                    brem = rem;
                    best = b;
                }
            }
#pragma unroll
            for (int o = 16; o; o >>= 1) {
                const int r2 = __shfl_xor_sync(0xffffffffu, brem, o);
                const int b2 = __shfl_xor_sync(0xffffffffu, best, o);
                if (r2 > brem || (r2 == brem && b2 > best)) {
                    brem = r2;
                    best = b2;
                }
            }
            if (best < 0) return -1;
            int item = -2;
            if (lane == 0) {
                const u32 x = tail_add(&k.work[best], STEAL_DEC);
                const int f = tail_front(x), e = tail_end(x);
                if (f < e) {
                    int i0, i1, t0;
                    block_items(best, gridDim.x, k.n_items, i0, i1, t0);
                    item = t0 + e - 1;
                    k.s_cl[1] = 2;
                    k.s_cl[2] = best;
                    k.s_cl[5] = t0;
                    pend = tail_add(&k.work[best], STEAL_DEC);
                }
            }
            item = __shfl_sync(0xffffffffu, item, 0);
            if (item != -2) return item; // (else another block took the last one: scan again)
        }
    };
    // warp 0: the next item to issue, -1 when there is none
    auto claim = [&]() -> int {
        int item = -1, scan = 0;
        if (lane == 0) {
            const int kind = k.s_cl[1];
            if (kind == 0) { // own items before the tail
                const int p = k.s_cl[0];
                item = p;
                k.s_cl[0] = p + 1;
                if (p + 1 >= k.tail0) {
                    k.s_cl[1] = 1;
                    pend = tail_add(&k.work[blockIdx.x], 1u);
                }
            } else {
                const int f = tail_front(pend), e = tail_end(pend);
                if (f < e) {
                    const int b = kind == 1 ? (int)blockIdx.x : k.s_cl[2];
                    item = kind == 1 ? k.tail0 + f : k.s_cl[5] + e - 1;
                    pend = tail_add(&k.work[b], kind == 1 ? 1u : STEAL_DEC);
                } else {
                    scan = 1;
                }
            }
        }
        if (__shfl_sync(0xffffffffu, scan, 0)) item = steal();
        return __shfl_sync(0xffffffffu, item, 0);
    };
    // lane 0 of warp 0: stage s's copies of item it (or the end marker)
    auto issue_item = [&](int s, int it) {
        const int r = s % NR;
        k.s_item[r] = it;
        if (it < 0)
            mbar_arrive(BW_FULL(r));
        else
            copies(r, it, 0);
    };
    if (tid < 32)
        for (int s = 0; s < NR; s++) {
            const int it = claim();
            if (lane == 0) issue_item(s, it);
            if (it < 0) {
                if (lane == 0) k.s_cl[3] = 1;
                break;
            }
        }
    auto refill = [&](int s) {
        if (tid < 32 && s >= 1 && !k.s_cl[3]) {
            if (lane == 0) mbar_wait(BW_EMPTY((s - 1) % NR), (u32)((s - 1) / NR) & 1);
            __syncwarp();
            const int it = claim();
            if (lane == 0) {
                issue_item(s - 1 + NR, it);
                if (it < 0) k.s_cl[3] = 1;
            }
        }
        __syncwarp();
    };
#else
    if (tid == 0)
        for (int s = 0; s < NR && s < n_stages; s++) issue(s);
    auto refill = [&](int s) {
        if (tid == 0 && s >= 1 && s - 1 + NR < n_stages) {
            mbar_wait(BW_EMPTY((s - 1) % NR), (u32)((s - 1) / NR) & 1);
            issue(s - 1 + NR);
        }
        __syncwarp();
    };
#endif
    auto release = [&](int s) {
        __syncwarp();
        if (lane == 0) mbar_arrive(BW_EMPTY(s % NR));
    };

    // ---------------- consumers: warpgroup wg takes spectra 64 hf .. 64 hf + 63 of an item (hf =
    // wg % 2) for the slots of sub-group u = wg / 2 ----------------
    const int hf = wg & 1, u = wg >> 1;
    // this warp's box (32 spectra) in ring slot r
    auto box_of = [&](int r) { return ring + r * SLOT + (2 * hf + (v >> 1)) * BOX; };
    u32 xo[2];
    x_offsets(xo);
    // low words of the descriptors of this sub-group's weight planes (pol 0, pol 1)
    const u32 wlo0 = (u32)make_desc_swz(wsm + WOFF(u, 0)), wlo1 = (u32)make_desc_swz(wsm + WOFF(u, 1));
    // accumulators of pol 0's and pol 1's beams (hi plane, then lo plane)
#if NB0 > 0
    int d0[WN0 / 2];
#endif
#if NB1 > 0
    int d1[WN1 / 2];
#endif
    int cur = -1; // (channel, group) of the weights in shared memory
    // the weights of item it's (channel, group), rebuilt between named barriers on a change
    auto weights_for = [&](int it) {
        const int cbg = it / (N_IT * n_batches);
        if (cbg == cur) return;
        TL_WAIT(consumers_sync()); // every consumer is done with the old weights
#if BW_PROBE == 5
        if (threadIdx.x == 0) k.s_tl[6]++;
#endif
#if BW_PROBE == 2
        if (cur < 0)
#endif
            build_weights(k.wgen, k.s_beam, k.s_os, chan_of_v(cbg / N_BG), cbg % N_BG, k.slots,
                          k.coef, k.delay, k.wscale, k.pc PROBE_TL);
        fence_proxy_async(); // generic-proxy writes, read by wgmma
        TL_WAIT(consumers_sync());
        cur = cbg;
    };
    auto batch_of = [&](int it) { return (it / N_IT) % n_batches; };
    auto all_present = [&](int bt) -> bool {
        if (tables) return k.s_allp[bt] != 0;
        return warp_all_present(present, bt);
    };
    // this warpgroup's output staging (a row per slot of sub-group u) and this lane's word in it
    const u32 stg_wg = k.stg + wg * STG_WG;
    const u32 stg_lane = stg_wg + (lane & 3) * STG_ROW + 32 * v + 4 * g;
    auto epi_of = [&](int it) -> Epi {
        const int st = it % N_IT, bt = batch_of(it);
        const int c = chan_of_v(it / (N_IT * n_batches * N_BG));
        const int s0 = 128 * st + 64 * hf + 16 * v + 2 * g;
        const u32 dseed = tables ? k.s_seed[bt] : k.dseeds[bt];
        Epi e;
        e.stg = stg_lane;
        e.kbase = ((u32)c * (SPECTRA / 2) + (u32)s0 / 2) * N_BEAMS + dseed; // s0 even
        e.beam = k.s_beam + u * NS;
        e.os = k.s_os + u * NS;
        e.sat = k.saturated + (size_t)bt * N_BEAMS;
        return e;
    };
    // the staged rows of item it out to global memory (after the warpgroup's barrier): warp v
    // copies rows v NS / 4 .. (v + 1) NS / 4 - 1, a lane 16 bytes at a time (a row: 64 spectra
    // of one beam, 128 bytes; fewer at the end of a batch; none for an empty slot)
    auto copy_out = [&](int it) {
        const int st = it % N_IT, bt = batch_of(it);
        const int c = chan_of_v(it / (N_IT * n_batches * N_BG));
        const int sb = 128 * st + 64 * hf;
        signed char *base = k.out + ((size_t)bt * N_BEAMS * N_CHANNELS + c) * SPECTRA * 2 + sb * 2;
#pragma unroll
        for (int j = 0; j < (2 * NS + 31) / 32; j++) {
            const int q = lane + 32 * j, row = v * (NS / 4) + (q >> 3), b16 = 16 * (q & 7);
            if (q < 2 * NS) { // (a warp's rows: 2 NS pieces, fewer than 32 for NS < 16)
                const int beam = k.s_beam[u * NS + row];
                const uint4 w = ld_shared16(stg_wg + row * STG_ROW + b16);
                if (beam >= 0 && sb + b16 / 2 < SPECTRA)
                    *(uint4 *)(base + (size_t)beam * (N_CHANNELS * SPECTRA * 2) + b16) = w;
            }
        }
    };

    // Per item: its N_KCH stages (unrolled, so that the steps per stage are constants and no
    // wgmma sits in a divergent path: ptxas serialises them all otherwise), both pols' wgmma
    // per k32 step (one commit group per pol), then the epilogue (pol 0's while pol 1's last
    // wgmma may still run).
#if BW_PROBE == 5
    u32 tl_ = clock();
#endif
#if STEAL
    for (int n = 0;; n++) {
        refill(n);
        full_wait(n);
        TL_MARK(1);
        const int it = k.s_item[n % NR];
        if (it < 0) break;
#if BW_PROBE == 5
        if (tid == 0) k.s_cl[4]++;
#endif
        weights_for(it);
        TL_MARK(0);
#else
    for (int n = 0; n < k.it1 - it0; n++) {
        const int it = it0 + n;
        weights_for(it);
        TL_MARK(0);
#endif
        const bool allp = all_present(batch_of(it)); // every antenna of the batch present
#pragma unroll
        for (int kc = 0; kc < N_KCH; kc++) {
            const int s = n * N_KCH + kc;
#if !STEAL
            refill(s);
            TL_MARK(2);
            full_wait(s);
            TL_MARK(1);
#endif
            // (the presence address computed here: hoisted above the loop, ptxas serialised
            // the wgmma, C7520)
            if (!allp)
                zero_absent(ring + (s % NR) * SLOT, kc, present + (size_t)batch_of(it) * N_ANTS);
            const int nks = kc < N_KCH - 1 ? KSPS : (NAP - (N_KCH - 1) * KCH) / 16;
            u32 ra[2][2][4]; // [set][pol][register]
#pragma unroll
            for (int ks = 0; ks < KSPS; ks++) {
                if (ks < nks) {
                    uint2 x[4];
                    load_x(x, box_of(s % NR), xo, ks);
                    if (ks == nks - 1) release(s); // the stage's data is in registers
                    u32(&a)[2][4] = ra[ks & 1];
                    perm_a(a[0], x, 0);
                    perm_a(a[1], x, 1);
                    const int kg = kc * KSPS + ks; // global k32 step
                    const bool acc = kc > 0 || ks > 0; // adds to the item's sums
                    wg_fence();
#if NB0 > 0
                    mma_step<WN0>(d0, a[0], wlo0, kg, acc);
                    wg_commit();
#endif
#if NB1 > 0
                    mma_step<WN1>(d1, a[1], wlo1, kg, acc);
                    wg_commit();
#endif
                    // the previous step's groups are done: its A registers may be rebuilt
                    wg_wait<(NB0 > 0) + (NB1 > 0)>();
                }
            }
            if (kc < N_KCH - 1) wg_wait<0>();
        }
        TL_MARK(2);
        const Epi e = epi_of(it);
        // the previous item's staged rows are copied out (two alternating staging buffers
        // instead, without this barrier, measured the same: 78.2-78.3 % at 64 beams)
        wg_sync(wg);
#if NB0 > 0
#if NB1 > 0
        wg_wait<1>(); // pol 0's sums are complete (pol 1's last wgmma may still run)
#else
        wg_wait<0>();
#endif
        TL_MARK(3);
        epi_all<WN0, DITHER>(d0, 0, e);
#endif
#if NB1 > 0
        wg_wait<0>();
        epi_all<WN1, DITHER>(d1, NB0, e);
#endif
        TL_MARK(4);
        wg_sync(wg); // the item's rows are staged
        copy_out(it);
        TL_MARK(5);
    }
}

// tm: the input [batch][antenna][channel][spectrum x 4 bytes], boxes of 128 bytes x 1 channel x
// KCH antennas x 1 batch, 128B swizzle (out-of-range antennas and spectra read as zeros).
// slots: int [N_BG][2][NS] beam index per slot of each sub-group (pol 0 slots first) or -1.
// coef, delay, wscale, present, saturated, dither, dseeds as for beamform.cu. Dynamic shared
// memory SMEM_BYTES; BW_THREADS threads per block.
extern "C" __global__ void __launch_bounds__(BW_THREADS, 1)
    beamform_wg(const __grid_constant__ TensorMap tm, signed char *__restrict__ out,
                const float2 *__restrict__ coef, const float *__restrict__ delay,
                const float *__restrict__ wscale, const int *__restrict__ slots,
                const unsigned char *__restrict__ present, int n_batches,
                unsigned long long *__restrict__ saturated, int dither,
                const unsigned int *__restrict__ dseeds, u32 *__restrict__ work) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) u64 bars[2 * NR];
    __shared__ int s_beam[NSG];
    __shared__ float s_os[NSG];
    __shared__ u32 s_seed[MAXB];           // dither seed per batch
    __shared__ unsigned char s_allp[MAXB]; // every antenna of the batch present
#if BW_PROBE == 5
    __shared__ unsigned long long s_tl[4 * TL_WORDS];
    const unsigned long long tl_start = clock64();
    if (threadIdx.x < 4 * TL_WORDS) s_tl[threadIdx.x] = 0;
#endif
    const long long n_items = (long long)N_CHANNELS * N_BG * n_batches * N_IT;
    int it0, it1, tail0;
    block_items(blockIdx.x, gridDim.x, n_items, it0, it1, tail0);
    if (it1 <= it0) return;
#if STEAL
    __shared__ int s_item[NR];
    __shared__ int s_cl[6];
    if (threadIdx.x == 0) {
        // this launch's tail (the word of the launch before has nothing left: front >= end)
        work[blockIdx.x] = (u32)(it1 - tail0) << 16;
        s_cl[0] = it0;
        s_cl[1] = it0 < tail0 ? 0 : 1;
        s_cl[2] = 0;
        s_cl[3] = 0;
        s_cl[4] = 0;
        s_cl[5] = 0;
    }
#else
    (void)tail0;
    (void)work;
#endif
    const int n_stages = (it1 - it0) * N_KCH;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const u32 sbase = (u32)__cvta_generic_to_shared(smem);
    const u32 ring = (sbase + 1023u) & ~1023u;
    const u32 wsm = ring + NR * SLOT; // weights (shared address)
    unsigned char *wgen = smem + (wsm - sbase);
    const u32 bar0 = (u32)__cvta_generic_to_shared(bars);
    if (tid == 0) {
        for (int r = 0; r < NR; r++) {
            mbar_init(BW_FULL(r), 1);
            mbar_init(BW_EMPTY(r), CONSUMERS / 32); // one arrival per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((u64)&tm) : "memory");
    }
#if PCACHE
    {
        // the parameter cache (see PC_BYTES)
        unsigned char *pc = wgen + W_BYTES + STG_BYTES;
        float2 *pcw = (float2 *)pc;
        float *pd = (float *)(pc + NSG * NAP * 8);
        int *pbeam = (int *)(pc + NSG * NAP * 12);
        float *pq = (float *)(pbeam + NSG), *pos = pq + NSG;
        for (int idx = tid; idx < NSG * NAP; idx += BW_THREADS) {
            const int jg = idx / NAP, a = idx % NAP;
            weight_params(slots[jg], a, coef, delay, pd[idx], pcw[idx]);
        }
        if (tid < NSG) {
            const int beam = slots[tid];
            const float sb = beam >= 0 ? wscale[beam] : 0.0f;
            pbeam[tid] = beam;
            pq[tid] = sb > 0.0f ? QMAX / sb : 0.0f;
            pos[tid] = beam >= 0 ? sb / QMAX : 0.0f;
        }
    }
#endif
    // the per-batch tables (a warp per batch), so that no item waits on global loads
    const bool tables = n_batches <= MAXB;
    if (tables)
        for (int b = tid >> 5; b < n_batches; b += BW_THREADS / 32) {
            const bool ok = warp_all_present(present, b);
            if (lane == 0) {
                s_allp[b] = ok;
                s_seed[b] = dseeds[b];
            }
        }
    __syncthreads();

    Ctx k;
    k.tm = &tm;
    k.out = out;
    k.coef = coef;
    k.delay = delay;
    k.wscale = wscale;
    k.slots = slots;
    k.present = present;
    k.n_batches = n_batches;
    k.saturated = saturated;
    k.dseeds = dseeds;
    k.it0 = it0;
    k.it1 = it1;
    k.n_stages = n_stages;
    k.ring = ring;
    k.wsm = wsm;
    k.bar0 = bar0;
    k.stg = wsm + W_BYTES;
    k.pc = wgen + W_BYTES + STG_BYTES;
    k.wgen = wgen;
    k.s_beam = s_beam;
    k.s_os = s_os;
    k.s_seed = s_seed;
    k.s_allp = s_allp;
    k.tables = tables;
#if STEAL
    k.work = work;
    k.tail0 = tail0;
    k.n_items = n_items;
    k.s_item = s_item;
    k.s_cl = s_cl;
#endif
#if BW_PROBE == 5
    k.s_tl = s_tl;
#endif
    if (dither)
        consume<true>(k);
    else
        consume<false>(k);
#if BW_PROBE == 5
    // the block's timeline past the saturation counters: (SM << 48 | total cycles, items), then
    // the six phase sums (cycles, summed over the warpgroups)
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 smid;
        asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
        unsigned long long *t = saturated + (size_t)n_batches * N_BEAMS + 10 * blockIdx.x;
        t[0] = ((unsigned long long)smid << 48) | (clock64() - tl_start);
#if STEAL
        t[1] = (unsigned long long)s_cl[4] | s_tl[6] << 32;
#else
        t[1] = (unsigned long long)(it1 - it0) | s_tl[6] << 32;
#endif
        for (int j = 0; j < TL_WORDS; j++) {
            if (j == 6 || j == 7) continue;
            unsigned long long sum = 0;
            for (int w = 0; w < 4; w++) sum += s_tl[TL_WORDS * w + j];
            t[j < 6 ? 2 + j : j] = sum;
        }
    }
#endif
}
#undef BW_FULL
#undef BW_EMPTY
