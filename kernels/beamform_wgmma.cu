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
// ([128-byte K block][row][16-byte chunk XOR row % 8]; the unswizzled core-matrix layout read
// about 3x slower), rows 2j (Re: Wr, -Wi per antenna) and 2j + 1 (Im: Wi, Wr) for beam slot j.
// Row mapping: warp v of a consumer warpgroup owns spectra 16 v .. 16 v + 15 of its 64; row
// 16 v + g is spectrum 16 v + 2 g and row 16 v + g + 8 spectrum 16 v + 2 g + 1, so that a lane's
// accumulators hold (Re, Im) of beam slot 4 i + t at two consecutive spectra: one 4-byte
// store, a warp writes 32-byte runs.
//
// Work. An item is (channel, beam group, batch, 128 spectra); the block's four consumer
// warpgroups take its two 64-spectrum halves times the group's two sub-groups of beam slots
// (four warpgroups keep four warps per scheduler: the epilogue is latency-bound with two).
// Items are ordered channel, group, batch, spectra (weights change only with the channel or
// group); the grid is persistent, block k walking items [k n / grid, (k + 1) n / grid). A stage is one item's KCH antennas (all of them
// for small arrays): four tensor copies (32 spectra x KCH antennas each) issued by thread 0
// into a ring of NR slots with full / empty mbarriers (a 17th, producer warp would cap the
// registers at 96: one register-file quarter would hold 5 warps). Absent antennas of a
// batch (present == 0) are zeroed in the registers (the copy brings whatever is there). At a
// change of channel or group the consumers rebuild the weight planes between two named
// barriers (the copies of the next stages are already in flight).
// Per k32 step (16 antennas) and warpgroup: up to 4 wgmma m64nNk32 (2 planes x 2 pols, N =
// 2 NB0 or 2 NB1), A in two alternating register sets.
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
#ifndef BW_PROBE
#define BW_PROBE 0 // diagnostic, wrong results: 1 = no wgmma and no epilogue, 2 = weights built
                   // once, 3 = no epilogue, 4 = no wgmma
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
#define WN0 (2 * NB0)  // wgmma N of pol 0
#define WN1 (2 * NB1)
#define KB ((2 * NAP + 127) / 128)  // 128-byte K blocks of a weight row (4 k32 steps each)
#define WB0 (KB * WN0 * 128)        // bytes of one weight plane of pol 0
#define WB1 (KB * WN1 * 128)
#define W_BYTES (4 * (WB0 + WB1))
// weight plane (0 hi, 1 lo) of sub-group u, pol p: offset in the weights
#define WOFF(plane, u, p) ((2 * (plane) + (u)) * (WB0 + WB1) + ((p) ? WB0 : 0))
#define BW_THREADS 512 // four consumer warpgroups (thread 0 also issues the copies)
#define CONSUMERS 512
#define SMEM_BYTES (1024 + NR * SLOT + W_BYTES)

static_assert(N_ANTS <= 256, "beamform_wg: at most 256 antennas");
static_assert(SPECTRA % 16 == 0, "SPECTRA must be a multiple of 16");
static_assert(KCH % 16 == 0 && KCH >= 16 && KCH <= 256, "KCH: a multiple of 16, 16..256");
static_assert(NS >= 1 && NS <= 32, "beam slots per sub-group: 1..32");
static_assert(NB0 % 4 == 0 && NB1 % 4 == 0 && (NB0 <= 16 || NB0 % 8 == 0) &&
                  (NB1 <= 16 || NB1 % 8 == 0),
              "NB0, NB1: whole wgmma N shapes");
static_assert(NR >= 2 && SMEM_BYTES <= 227 * 1024, "NR: 2 .. what fits");

// wgmma m64nNk32 s8, A from registers (dense m64k32 layout: register 0 row 16 w + g, bytes
// 4 t .. 4 t + 3; register 1 row + 8; registers 2, 3 the same 16 bytes further in K), B from
// shared memory; acc == 0 starts the sums (D = A B).
template <int N> __device__ __forceinline__ void wg_rs(int (&d)[N / 2], const u32 (&a)[4], u64 db, int acc);
// BEGIN generated: wg_rs specialisations
template <> __device__ __forceinline__ void wg_rs<8>(int (&d)[4], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8 {%0,%1,%2,%3}, {%4, %5, %6, %7}, %8, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_rs<16>(int (&d)[8], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8, %9, %10, %11}, %12, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_rs<24>(int (&d)[12], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %17, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n24k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}, {%12, %13, %14, %15}, %16, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_rs<32>(int (&d)[16], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16, %17, %18, %19}, %20, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_rs<48>(int (&d)[24], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n48k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, {%24, %25, %26, %27}, %28, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_rs<64>(int (&d)[32], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32, %33, %34, %35}, %36, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_rs<80>(int (&d)[40], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %45, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n80k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39}, {%40, %41, %42, %43}, %44, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_rs<96>(int (&d)[48], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, {%48, %49, %50, %51}, %52, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_rs<112>(int (&d)[56], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %61, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n112k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55}, {%56, %57, %58, %59}, %60, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_rs<128>(int (&d)[64], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64, %65, %66, %67}, %68, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_rs<144>(int (&d)[72], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %77, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n144k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71}, {%72, %73, %74, %75}, %76, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]), "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
// END generated

// Byte offset of (row n, byte k) in a weight plane of wgmma N = wn (see the header notes).
__device__ __forceinline__ int wpos(int wn, int n, int k) {
    return (k >> 7) * wn * 128 + n * 128 + ((((k >> 4) & 7) ^ (n & 7)) << 4) + (k & 15);
}
// Descriptor of k32 step kg of the weight plane at shared address w (wgmma N = wn).
__device__ __forceinline__ u64 wdesc(u32 w, int wn, int kg) {
    return make_desc_swz(w + (kg >> 2) * wn * 128 + 32 * (kg & 3));
}

// The weight planes of channel c, beam group bg, and the group's beam table (beam index or -1,
// output scale); the consumer threads; one thread per (slot, antenna pair) writes a 4-byte
// word of the Re row and of the Im row in each plane.
__device__ __forceinline__ void build_weights(unsigned char *w, int *s_beam, float *s_os, int c,
                                              int bg, const int *__restrict__ slots,
                                              const float2 *__restrict__ coef,
                                              const float *__restrict__ delay,
                                              const float *__restrict__ wscale) {
    const int tid = threadIdx.x;
    if (tid < NSG) {
        const int beam = slots[bg * NSG + tid];
        s_beam[tid] = beam;
        s_os[tid] = beam >= 0 ? wscale[beam] / QMAX : 0.0f;
    }
    for (int idx = tid; idx < NSG * (NAP / 2); idx += CONSUMERS) {
        const int jg = idx / (NAP / 2), pa = idx % (NAP / 2);
        const int u = jg / NS, js = jg % NS;
        const int p = js >= NB0, j = js - p * NB0;
        const int beam = slots[bg * NSG + jg];
        float q = 0.0f;
        if (beam >= 0) {
            const float sb = wscale[beam];
            q = sb > 0.0f ? QMAX / sb : 0.0f;
        }
        u32 ww[4];
        weight_words(beam, 2 * pa, c, q, coef, delay, ww);
        const int wn = p ? WN1 : WN0;
        unsigned char *hi = w + WOFF(0, u, p), *lo = w + WOFF(1, u, p);
        const int ore = wpos(wn, 2 * j, 4 * pa), oim = wpos(wn, 2 * j + 1, 4 * pa);
        *(u32 *)(hi + ore) = ww[0];
        *(u32 *)(lo + ore) = ww[1];
        *(u32 *)(hi + oim) = ww[2];
        *(u32 *)(lo + oim) = ww[3];
    }
}

__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 512;\n" ::: "memory"); }

// Epilogue of one pol's accumulators: beam slot 4 i + t (slot index base + 4 i + t), spectra s0
// and s0 + 1; DITHER selects the dithered quantiser.
template <int WN, bool DITHER>
__device__ __forceinline__ void epilogue(const int (&h)[WN / 2], const int (&l)[WN / 2], int base,
                                         const int *s_beam, const float *s_os, signed char *out,
                                         unsigned long long *saturated, int bt, int c, int s0,
                                         u32 dseed) {
    const int t = threadIdx.x & 3;
    unsigned int nsat[WN / 8];
    unsigned int any = 0;
    // output of beam b: outp + b * BEAM_STRIDE; dither key of beam b, spectrum s0: kbase + b
    signed char *outp = out + ((size_t)bt * N_BEAMS * N_CHANNELS + c) * SPECTRA * 2 + (size_t)s0 * 2;
    const u32 kbase = ((u32)c * SPECTRA + (u32)s0) * N_BEAMS + dseed;
#pragma unroll
    for (int i = 0; i < WN / 8; i++) {
        // the accumulators are read on every lane (a read in a divergent path would make the
        // compiler serialise the wgmma); an empty slot has scale 0 (no saturation), spectra
        // past the batch were zero-filled
        const int beam = s_beam[base + 4 * i + t];
        const float os = s_os[base + 4 * i + t];
        const u32 key = kbase + (u32)beam;
        nsat[i] = 0;
        const u32 q0 = beam_quant(combine(h[4 * i], l[4 * i]), combine(h[4 * i + 1], l[4 * i + 1]),
                                  os, DITHER, key, nsat[i]);
        const u32 q1 = beam_quant(combine(h[4 * i + 2], l[4 * i + 2]),
                                  combine(h[4 * i + 3], l[4 * i + 3]), os, DITHER, key + N_BEAMS,
                                  nsat[i]);
        any |= nsat[i];
        if (beam >= 0 && s0 < SPECTRA)
            *(u32 *)(outp + (size_t)beam * (N_CHANNELS * SPECTRA * 2)) = __byte_perm(q0, q1, 0x5410);
    }
    // saturation (rare): lanes with the same t share a beam; sum over g, one atomic per warp
    if (__any_sync(0xffffffffu, any)) {
#pragma unroll
        for (int i = 0; i < WN / 8; i++) {
            unsigned int n = nsat[i];
            n += __shfl_xor_sync(0xffffffffu, n, 4);
            n += __shfl_xor_sync(0xffffffffu, n, 8);
            n += __shfl_xor_sync(0xffffffffu, n, 16);
            const int beam = s_beam[base + 4 * i + t];
            if ((threadIdx.x & 31) < 4 && n && beam >= 0)
                atomicAdd(&saturated[(size_t)bt * N_BEAMS + beam], (unsigned long long)n);
        }
    }
}

#define BW_FULL(r) (bar0 + 8 * (r))
#define BW_EMPTY(r) (bar0 + 8 * (NR + (r)))

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
                const unsigned int *__restrict__ dseeds) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) u64 bars[2 * NR];
    __shared__ int s_beam[NSG];
    __shared__ float s_os[NSG];
    const long long n_items = (long long)N_CHANNELS * N_BG * n_batches * N_IT;
    const int it0 = (int)((long long)blockIdx.x * n_items / gridDim.x);
    const int it1 = (int)((long long)(blockIdx.x + 1) * n_items / gridDim.x);
    if (it1 <= it0) return;
    const int n_stages = (it1 - it0) * N_KCH;
    const int tid = threadIdx.x;
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
    __syncthreads();

    // thread 0 issues the tensor copies: stages 0 .. NR - 1 now, stage s - 1 + NR at the start
    // of stage s, once every consumer warp has released the slot of stage s - 1
    auto issue = [&](int s) {
        const int r = s % NR;
        const int it = it0 + s / N_KCH, kc = s % N_KCH;
        const int st = it % N_IT, bt = (it / N_IT) % n_batches;
        const int c = it / (N_IT * n_batches * N_BG);
        mbar_arrive_tx(BW_FULL(r), SLOT);
#pragma unroll
        for (int j = 0; j < 4; j++)
            tma_load4(ring + r * SLOT + j * BOX, &tm, 4 * (128 * st + 32 * j), c, kc * KCH, bt,
                      BW_FULL(r));
    };
    if (tid == 0)
        for (int s = 0; s < NR && s < n_stages; s++) issue(s);

    // ---------------- consumers: warpgroup wg takes spectra 64 hf .. 64 hf + 63 of an item (hf =
    // wg % 2) for the slots of sub-group u = wg / 2 ----------------
    const int wg = tid >> 7, v = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int hf = wg & 1, u = wg >> 1;
#if NB0 > 0
    int h0[WN0 / 2], l0[WN0 / 2]; // accumulators of pol 0's beams, hi and lo weight planes
#endif
#if NB1 > 0
    int h1[WN1 / 2], l1[WN1 / 2];
#endif
    int cur = -1;       // (channel, group) of the weights in shared memory
    bool allp = true;   // every antenna of the item's batch present
    // this lane's 8 bytes of a box row: spectra 2g, 2g + 1 of the warp's 16, chunk swizzled by
    // the row (rows 2t, 2t + 1, 8 + 2t, 9 + 2t of a k32 step: conflict-free)
    const u32 chunk = 4 * (v & 1) + (g >> 1), cbyte = 8 * (g & 1);
    for (int s = 0; s < n_stages; s++) {
        const int r = s % NR;
        const int it = it0 + s / N_KCH, kc = s % N_KCH;
        const int st = it % N_IT, bt = (it / N_IT) % n_batches, cbg = it / (N_IT * n_batches);
        const int c = cbg / N_BG, bg = cbg % N_BG;
        if (kc == 0) {
            if (cbg != cur) {
                consumers_sync(); // every consumer is done with the old weights
#if BW_PROBE != 2
                build_weights(wgen, s_beam, s_os, c, bg, slots, coef, delay, wscale);
#else
                if (cur < 0)
                    build_weights(wgen, s_beam, s_os, c, bg, slots, coef, delay, wscale);
#endif
                fence_proxy_async(); // generic-proxy writes, read by wgmma
                consumers_sync();
                cur = cbg;
            }
            bool ok = true;
            for (int a = lane; a < N_ANTS; a += 32) ok &= present[(size_t)bt * N_ANTS + a] != 0;
            allp = __all_sync(0xffffffffu, ok);
        }
        if (tid == 0 && s >= 1 && s - 1 + NR < n_stages) {
            mbar_wait(BW_EMPTY((s - 1) % NR), (u32)((s - 1) / NR) & 1);
            issue(s - 1 + NR);
        }
        __syncwarp(); // (warp 0 converges before its aligned wgmma instructions)
        mbar_wait(BW_FULL(r), (u32)(s / NR) & 1);
        const u32 box = ring + r * SLOT + (2 * hf + (v >> 1)) * BOX;
        const int nks = min(KCH, NAP - kc * KCH) / 16;
        u32 ra[2][2][4]; // [set][pol][register]
#pragma unroll
        for (int ks = 0; ks < KSPS; ks++) {
            if (ks < nks) {
                uint2 x[4]; // antennas 2t, 2t + 1, 8 + 2t, 9 + 2t of the step
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int row = 16 * ks + 2 * t + (e & 1) + 8 * (e >> 1);
                    x[e] = ld_shared8(box + row * 128 + ((chunk ^ (row & 7)) << 4) + cbyte);
                    if (!allp) {
                        const int a = kc * KCH + row;
                        if (a < N_ANTS && !present[(size_t)bt * N_ANTS + a]) x[e] = make_uint2(0, 0);
                    }
                }
                if (ks == nks - 1) {
                    // the stage's data is in registers: release the slot
                    __syncwarp();
                    if (lane == 0) mbar_arrive(BW_EMPTY(r));
                }
                u32(&a)[2][4] = ra[ks & 1];
#pragma unroll
                for (int p = 0; p < 2; p++) {
                    const u32 sel = p ? 0x7632u : 0x5410u;
                    a[p][0] = __byte_perm(x[0].x, x[1].x, sel); // row g: spectrum 2g
                    a[p][1] = __byte_perm(x[0].y, x[1].y, sel); // row g + 8: spectrum 2g + 1
                    a[p][2] = __byte_perm(x[2].x, x[3].x, sel);
                    a[p][3] = __byte_perm(x[2].y, x[3].y, sel);
                }
                const int kg = kc * KSPS + ks; // global k32 step
                const int first = kc > 0 || ks > 0;
                wg_fence();
#if BW_PROBE == 1 || BW_PROBE == 4
                // (no wgmma: keep the A registers live)
#if NB0 > 0
                h0[0] += (int)(a[0][0] ^ a[0][1] ^ a[0][2] ^ a[0][3]);
#endif
#if NB1 > 0
                h1[0] += (int)(a[1][0] ^ a[1][1] ^ a[1][2] ^ a[1][3]);
#endif
#else
#if NB0 > 0
                wg_rs<WN0>(h0, a[0], wdesc(wsm + WOFF(0, u, 0), WN0, kg), first);
                wg_rs<WN0>(l0, a[0], wdesc(wsm + WOFF(1, u, 0), WN0, kg), first);
#endif
#if NB1 > 0
                wg_rs<WN1>(h1, a[1], wdesc(wsm + WOFF(0, u, 1), WN1, kg), first);
                wg_rs<WN1>(l1, a[1], wdesc(wsm + WOFF(1, u, 1), WN1, kg), first);
#endif
#endif
                wg_commit();
                wg_wait<1>();
            }
        }
        wg_wait<0>();
        if (kc == N_KCH - 1) {
            const int s0 = 128 * st + 64 * hf + 16 * v + 2 * g;
            const u32 dseed = dseeds[bt];
#if BW_PROBE == 1 || BW_PROBE == 3
            // (no epilogue: one store of an otherwise unused sum per lane)
            int sum = 0;
#if NB0 > 0
#pragma unroll
            for (int k = 0; k < WN0 / 2; k++) sum += h0[k] ^ l0[k];
#endif
#if NB1 > 0
#pragma unroll
            for (int k = 0; k < WN1 / 2; k++) sum += h1[k] ^ l1[k];
#endif
            if (sum == 0x7fffffff) out[0] = (signed char)dseed;
#else
#if NB0 > 0
            if (dither)
                epilogue<WN0, true>(h0, l0, u * NS, s_beam, s_os, out, saturated, bt, c, s0, dseed);
            else
                epilogue<WN0, false>(h0, l0, u * NS, s_beam, s_os, out, saturated, bt, c, s0, dseed);
#endif
#if NB1 > 0
            if (dither)
                epilogue<WN1, true>(h1, l1, u * NS + NB0, s_beam, s_os, out, saturated, bt, c, s0,
                                    dseed);
            else
                epilogue<WN1, false>(h1, l1, u * NS + NB0, s_beam, s_os, out, saturated, bt, c, s0,
                                     dseed);
#endif
#endif
        }
    }
}
#undef BW_FULL
#undef BW_EMPTY
