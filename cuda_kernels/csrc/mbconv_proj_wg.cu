// The MBConv projection on Hopper warpgroup MMAs (sm_90a; NOTES.md, "The projection on warpgroup MMAs"):
// out = (D * s) V^T + b (+ x), D [P, hidden] from kernel 1, s [N, hid_pad] the SE scale, V [cout_pad, hk_pad].
//
// One warpgroup per CTA; a CTA computes 64-row tiles of D (rows across images where an image has fewer) times BN
// output channels (C_out, or half of it past 256), persistent over row tiles (project_wg_kernel's comment). The
// hidden dimension streams in 64-channel chunks through project_wg_stages(BN)
// stages, each filled by two tensor-memory-accelerator boxes that one thread issues: A (D's 64 x 64) and B (V's
// BN x 64), both 128-byte rows in the 128-byte swizzle (16-byte piece index XOR row % 8), zeros past P / hidden /
// hk_pad, completing on the stage's mbarrier. Each warp reads its 16 rows of A with ldmatrix into the register
// layout of wgmma's A operand, scales them by s of each row's image (the product in fp32, rounded once to fp16:
// project_v3's A values), and the warpgroup runs four m64nBNk16 wgmmas per chunk with A from registers and B by
// descriptor. The weights' first boxes are in flight before the wait on the previous kernel (PDL).
// Session 13's first form loaded both operands with per-thread cp.async (16 pieces per thread per chunk): ncu showed
// it issue-bound on the address arithmetic (650 instructions per warp per chunk at 6.1, 5.4 cycles apart with one
// warp per scheduler), 3-4x its prediction. Its epilogue's serial shortcut loads (OPT below) were found later.
// Products and sums: each output is a sum over k of the same fp16 products as project_v3's, in another order (the
// tensor core's k16 sums, then chunks): close, not bitwise.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "mbconv.cuh"
#include "mbconv_launch.cuh"
#include "mbconv_ptx.cuh"
#include "pdl.h"
#include "ptx_sm90.cuh"
#include "tensor_map.h"
#include "wgmma.cuh"

// MB_WG_STAMP(slot): a hook for cuda_kernels/probes/probe_wg_timeline.cu, which defines it to record the time at
// points of each CTA's path (0 after the PDL wait, 1 + i after chunk i's boxes arrived, 14 after the last chunk's
// MMAs, 15 after the epilogue); empty here, so the extension's code is unchanged.
#ifndef MB_WG_STAMP
#define MB_WG_STAMP(slot)
#endif

namespace mb {

constexpr int kProjWgRows = 64, kProjWgK = 64;
constexpr int kProjWgThreads = 128;

constexpr int kProjWgPrefetchX = 1, kProjWgOverlap = 2, kProjWgPrefetchL2 = 4, kProjWgStages3 = 8;  // OPT's bits
constexpr int kProjWgProducer = 64;  // with option 9 only: option 73 (OPT below)

// Stages: 4, and 3 from BN = 160 on, so that two CTAs fit on an SM (the late blocks have few row tiles), or with
// kProjWgStages3 (OPT below). With the hidden dimension split over KS = 2 warpgroups (project_wg_sk_kernel), each
// warpgroup's own ring: 2 stages up to BN = 120 (two CTAs an SM), else 3 (one CTA an SM).
__host__ __device__ constexpr int project_wg_stages(int bn, int ks = 1, int mw = 1, int opt = 0) {
  return mw == 2 ? 4 : ks == 1 ? (bn >= 160 || (opt & kProjWgStages3) ? 3 : 4) : (bn > 120 ? 3 : 2);
}

// Shared memory (cuda_kernels/mbconv.py project_wg_smem_bytes mirrors it): 1 KB of alignment slack, the stages
// (B: BN rows of 128 bytes, then A: 64 rows of 128 bytes; 1024-aligned for the swizzle), one 8-byte mbarrier each;
// KS rings of them; MW = 2 (project_wg_m2_kernel): A of 128 rows, one ring of 4 stages; kProjWgProducer: a second
// mbarrier a stage (empty), after the first ones.
__host__ __device__ constexpr int project_wg_smem_bytes(int bn, int ks = 1, int mw = 1, int opt = 0) {
  return 1024 + ks * project_wg_stages(bn, ks, mw, opt) * ((bn + mw * kProjWgRows) * 128 + 8) +
         ((opt & kProjWgProducer) ? 8 * project_wg_stages(bn, ks, mw, opt) : 0);
}
// Threads a CTA of project_wg_kernel<BN, OPT>: one warpgroup, and with kProjWgProducer one more warp.
__host__ __device__ constexpr int project_wg_threads(int opt) {
  return kProjWgThreads + ((opt & kProjWgProducer) ? 32 : 0);
}

// The output tile width for C_out: C_out itself up to 256, else half of it (a multiple of 8); 0 where no wgmma shape
// is built (gen_wgmma.py). cuda_kernels/mbconv.py project_wg_bn mirrors it.
__host__ __device__ constexpr int project_wg_bn(int c_out) {
  const int bn = c_out <= 256 ? c_out : (c_out % 16 == 0 ? c_out / 2 : 0);
  return (bn == 16 || bn == 24 || bn == 40 || bn == 48 || bn == 80 || bn == 88 || bn == 112 || bn == 120 || bn == 160 ||
          bn == 176 || bn == 192 || bn == 208)
             ? bn
             : 0;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int BN>
__device__ __forceinline__ void wgmma_rs(float (&d)[BN / 2], const uint32_t (&a)[4], uint64_t desc) {
  if constexpr (BN == 16) bf::wgmma_m64n16k16_rs(d, a, desc, 1);
  else if constexpr (BN == 24) bf::wgmma_m64n24k16_rs(d, a, desc, 1);
  else if constexpr (BN == 40) bf::wgmma_m64n40k16_rs(d, a, desc, 1);
  else if constexpr (BN == 48) bf::wgmma_m64n48k16_rs(d, a, desc, 1);
  else if constexpr (BN == 80) bf::wgmma_m64n80k16_rs(d, a, desc, 1);
  else if constexpr (BN == 88) bf::wgmma_m64n88k16_rs(d, a, desc, 1);
  else if constexpr (BN == 112) bf::wgmma_m64n112k16_rs(d, a, desc, 1);
  else if constexpr (BN == 120) bf::wgmma_m64n120k16_rs(d, a, desc, 1);
  else if constexpr (BN == 160) bf::wgmma_m64n160k16_rs(d, a, desc, 1);
  else if constexpr (BN == 176) bf::wgmma_m64n176k16_rs(d, a, desc, 1);
  else if constexpr (BN == 192) bf::wgmma_m64n192k16_rs(d, a, desc, 1);
  else bf::wgmma_m64n208k16_rs(d, a, desc, 1);
}
#endif

// tm_d: D [P, hidden] in 64 x 64 boxes; tm_w: V [cout_pad, hk_pad] in BN x 64 boxes (tensor_map.h half_2d_sw128).
// Persistent: CTA b computes row tiles b, b + gridDim.x, ... of column tile blockIdx.y, its loads one flat sequence
// of (tile, chunk) steps S ahead of the MMAs, so the next tile's first chunks arrive during this tile's last ones and
// its epilogue. Each tile starts at chunk tile % chunks (and wraps): the CTAs in flight read different slices of V
// at a time instead of all the same one (call 3: 98 CTAs on the same chunk of V held 6.1 at 1.8 TB/s out of L2).
// OPT (CUDA_KERNELS_PROJ_WG_OPT, project_wg_opt; 9 by default since session 22, 1 before), a bit mask:
//   kProjWgPrefetchX: the epilogue loads the shortcut's values of 8 column groups at a time before their stores (read
//     only, ld.global.nc) instead of one load per store: each load waited behind the previous store, which might
//     alias it (session 14, call 2's stall samples: the epilogue's loads ~1/3 of 6.1's samples, long scoreboard);
//   kProjWgOverlap: the next chunk's A (its mbarrier wait, ldmatrix and scale) is prepared while this chunk's wgmmas
//     run (A double-buffered in registers); one wgmma group in flight across the preparation.
//   kProjWgPrefetchL2 (option 5 = 1 | 4 only; measured slower, off): one thread asks L2 for each tile's rows of D as
//     one contiguous range (64 x hidden halves, cp.async.bulk.prefetch.L2) before its boxes are loaded: the first tile's
//     after the wait, the next tile's at each tile's start. The boxes read D 128 bytes a row at a time, 64 rows
//     1,344 bytes apart at 5.1, from many tiles at once: s21 call 2 saw 5.1 at 30% of DRAM's peak with one warpgroup
//     or two (twice the warps bought nothing), so the read pattern is the suspect, as it was for project_v9's ring.
//     Measured slower (s22 call 1: 5.1 26.8 -> 30.9 us); kept for the record.
//   kProjWgStages3 (option 9 = 1 | 8 only; the default since session 22): 3 stages where BN < 160 has 4, so that
//     three CTAs fit an SM at 5.x (BN = 112: 68,632 bytes of shared memory, 158 registers): its 392 row tiles in one
//     wave of 396 CTAs instead of 264 CTAs of which 128 take two tiles each (22 chunk steps on the longest CTA instead
//     of 11; predicted 5.1 27 -> ~17 us, measured 22.9: the chunk steps got slower with 12 warps an SM instead of 8).
//   kProjWgProducer (with 9: option 73; session 33, measured and off): a fifth warp issues the refills of
//     the ring: for step j >= S it waits on stage j % S's "empty" mbarrier, on which each consumer warp arrives once
//     its wgmmas of step j - S are done, then issues the stage's boxes. The consumer warpgroup no longer meets at a
//     CTA barrier each chunk nor waits for warp 0's TMA issues (s33 call 2's timeline of 4.1: ~1,510 cycles a chunk,
//     ~350 fewer in the steps that issue no refill). s33 call 3: 4.1's step 1,508 -> 817 cycles, but the launch ran
//     two CTAs an SM (264 for 392 tiles): block 4.1 -0.8 us, 5.1 +8.8, B0 +20.4 (NOTES.md "Current state").

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// kProjWgPrefetchL2: row tile t's rows of D (P rows in all) into L2 as one request
__device__ __forceinline__ void prefetch_tile_l2(const Params& p, int t, int P) {
  if (t * kProjWgRows < P) {
    const int rows = min(kProjWgRows, P - t * kProjWgRows);
    bf::bulk_prefetch_l2(p.d + (size_t)t * kProjWgRows * p.hidden, (uint32_t)(rows * p.hidden * 2));
  }
}
#endif

// The kernel's body for KS warpgroups. KS = 1: project_wg_kernel. KS = 2 (project_wg_sk_kernel, OPT without
// kProjWgOverlap, one row tile per CTA): warpgroup g takes the tile's chunks g, g + 2, ... through its own ring of
// stages and mbarriers (a named barrier per warpgroup where KS = 1 has __syncthreads), so that each warpgroup's chain
// of chunk steps is half as long; at the end each warpgroup hands the other the accumulators of the other's half of
// the column groups through shared memory (the stages, free by then), adds the other's partial sums for its own half
// (fp32: the two halves' sums added once, so close to KS = 1's values, not bitwise) and stores that half.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int BN, int OPT, int KS, int MW = 1>
__device__ __forceinline__ void project_wg_body(const Params& p, const CUtensorMap& tm_d, const CUtensorMap& tm_w) {
  static_assert(KS == 1 || (KS == 2 && (OPT & kProjWgOverlap) == 0), "the split runs the plain chunk loop");
  static_assert((OPT & kProjWgPrefetchL2) == 0 || (KS == 1 && (OPT & kProjWgOverlap) == 0), "built as option 5 only");
  static_assert(MW == 1 || (MW == 2 && KS == 1 && OPT == kProjWgPrefetchX), "128-row tiles: one ring, option 1");
  static_assert((OPT & kProjWgStages3) == 0 ||
                    (OPT & ~kProjWgProducer) == (kProjWgPrefetchX | kProjWgStages3),
                "built as option 9 only (73 with the producer warp)");
  static_assert((OPT & kProjWgProducer) == 0 || ((OPT & kProjWgStages3) != 0 && KS == 1 && MW == 1),
                "the producer warp: on option 9's one-warpgroup kernel only");
  constexpr bool PW = (OPT & kProjWgProducer) != 0;
  // TM rows a tile: MW warpgroups, warpgroup mw on rows 64 mw .. 64 mw + 63 of each stage's A, all on its B
  constexpr int TM = MW * kProjWgRows;
  constexpr int S = project_wg_stages(BN, KS, MW, OPT), B_BYTES = BN * 128, STAGE = B_BYTES + TM * 128;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const int tid_cta = threadIdx.x, grp = KS == 1 && MW == 1 ? 0 : tid_cta / kProjWgThreads;
  const int wg = KS == 1 ? 0 : grp, mw = MW == 1 ? 0 : grp;
  const int tid = KS == 1 && MW == 1 ? tid_cta : tid_cta % kProjWgThreads, lane = tid & 31, warp = tid >> 5;
  // (PW: threads 0-127 the consumer warpgroup, warp 4 the producer)
  const bool leader = MW == 1 ? tid == 0 : tid_cta == 0;  // issues its ring's copies (one ring a warpgroup where KS = 2)
  const uint32_t smem0 = (smem_addr(smem_raw) + 1023) & ~1023u;
  // warpgroup wg's ring: stage s's B at base + s STAGE, A after it; its mbarrier at bars + 8 s (after every ring)
  const uint32_t base = smem0 + wg * S * STAGE, bars = smem0 + KS * S * STAGE + wg * 8 * S;
  const uint32_t empty = bars + 8 * S;  // PW: stage s's empty mbarrier at empty + 8 s (4 arrivals: the consumer warps)
  const int HW = p.Ho * p.Wo, P = p.N * HW;
  const int tiles = (P + TM - 1) / TM, n0 = blockIdx.y * BN;
  const int chunks = (p.hidden + kProjWgK - 1) / kProjWgK;
  const int mine = (chunks - wg + KS - 1) / KS;  // chunks of a tile that this warpgroup computes
  const int my_tiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int steps = my_tiles * mine;  // (tile, chunk) steps of this warpgroup
  // step j: this CTA's tile j / mine, its chunk (KS (j % mine) + wg + tile) % chunks
  auto step_tile = [&](int j) { return blockIdx.x + (j / mine) * gridDim.x; };
  auto step_chunk = [&](int j, int tile) {
    const int c = KS * (j % mine) + wg + tile % chunks;
    return c < chunks ? c : c - chunks;
  };
  if (leader) {
#pragma unroll
    for (int s = 0; s < S; ++s) bf::mbar_init(bars + 8 * s, 1);
    if constexpr (PW) {
#pragma unroll
      for (int s = 0; s < S; ++s) bf::mbar_init(empty + 8 * s, kProjWgThreads / 32);
    }
    bf::fence_barrier_init();
    for (int j = 0; j < S && j < steps; ++j) {  // the weights do not depend on the previous kernels
      bf::mbar_arrive_expect_tx(bars + 8 * j, STAGE);
      bf::tma_load_2d(base + j * STAGE, &tm_w, step_chunk(j, step_tile(j)) * kProjWgK, n0, bars + 8 * j);
    }
  }
  __syncthreads();  // the barriers initialised
  pdl::wait();      // D and the scale are the previous kernels' output
  pdl::launch_dependents();
  MB_WG_STAMP(0);
  if constexpr ((OPT & kProjWgPrefetchL2) != 0)
    if (tid == 0) prefetch_tile_l2(p, blockIdx.x, P);
  if (leader)
    for (int j = 0; j < S && j < steps; ++j) {
      const int t = step_tile(j);
      bf::tma_load_2d(base + j * STAGE + B_BYTES, &tm_d, step_chunk(j, t) * kProjWgK, t * TM, bars + 8 * j);
    }
  if constexpr (PW) {
    if (warp == kProjWgThreads / 32) {  // the producer: every refill of the CTA's steps, then done
      if (lane == 0)
        for (int jr = S; jr < steps; ++jr) {
          const int slot = jr % S, tn = step_tile(jr), cn = step_chunk(jr, tn);
          const uint32_t bar = bars + 8 * slot, stage = base + slot * STAGE;
          bf::mbar_wait(empty + 8 * slot, ((jr / S) + 1) & 1);  // step jr - S's wgmmas done: its (jr / S - 1)-th
          bf::mbar_arrive_expect_tx(bar, STAGE);
          bf::tma_load_2d(stage, &tm_w, cn * kProjWgK, n0, bar);
          bf::tma_load_2d(stage + B_BYTES, &tm_d, cn * kProjWgK, tn * TM, bar);
        }
      return;
    }
  }

  const int q = lane & 3;
  // ldmatrix x4 of k16 step kk: lanes 0-15 address rows warp * 16 + lane of the first 8 columns, lanes 16-31 the
  // second 8; row r's 16-byte piece j sits at r * 128 + ((j ^ r % 8) << 4)
  const int a_row = mw * kProjWgRows + warp * 16 + (lane & 15);
  const uint32_t a_off = a_row * 128, a_xor = a_row & 7, a_half = lane >> 4;
  float acc[BN / 2];
  float2 sc[4][4];
  int j = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    if constexpr ((OPT & kProjWgPrefetchL2) != 0)
      if (tid == 0) prefetch_tile_l2(p, t + gridDim.x, P);  // this CTA's next tile
    // This lane's two rows (the wgmma A / accumulator layout: row lane / 4 and + 8 of the warp's 16) and their
    // images' scale rows (rows past P read the last image's: their A is zero)
    const int r_lo = t * TM + mw * kProjWgRows + warp * 16 + (lane >> 2), r_hi = r_lo + 8;
    const float* s_lo = p.scale + (size_t)(min(r_lo, P - 1) / HW) * p.hid_pad;
    const float* s_hi = p.scale + (size_t)(min(r_hi, P - 1) / HW) * p.hid_pad;
    // scales of chunk c, k16 step kk: [kk][0] (row lo, k..k+1), [1] (row hi, k..), [2] (lo, k+8..), [3] (hi,
    // k+8..). A whole chunk reads at immediate offsets from two pointers; the last, partial one clamps its columns
    // (D is zero past hidden, so the clamped columns' scales multiply zeros)
    auto load_scales = [&](int c) {
      const int k0 = c * kProjWgK + 2 * q;
      if (c * kProjWgK + kProjWgK <= p.hidden) {
        const float *lo = s_lo + k0, *hi = s_hi + k0;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          sc[kk][0] = __ldg(reinterpret_cast<const float2*>(lo + kk * 16));
          sc[kk][1] = __ldg(reinterpret_cast<const float2*>(hi + kk * 16));
          sc[kk][2] = __ldg(reinterpret_cast<const float2*>(lo + kk * 16 + 8));
          sc[kk][3] = __ldg(reinterpret_cast<const float2*>(hi + kk * 16 + 8));
        }
        return;
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int klo = min(k0 + kk * 16, p.hidden - 2), khi = min(k0 + kk * 16 + 8, p.hidden - 2);
        sc[kk][0] = __ldg(reinterpret_cast<const float2*>(s_lo + klo));
        sc[kk][1] = __ldg(reinterpret_cast<const float2*>(s_hi + klo));
        sc[kk][2] = __ldg(reinterpret_cast<const float2*>(s_lo + khi));
        sc[kk][3] = __ldg(reinterpret_cast<const float2*>(s_hi + khi));
      }
    };
    const int c0 = t % chunks + wg;  // this warpgroup's first chunk of the tile (c0 < 2 chunks)
    // the warpgroup's i-th chunk of the tile
    auto chunk_after = [&](int i) { return c0 + KS * i < chunks ? c0 + KS * i : c0 + KS * i - chunks; };
    // A of the chunk in `stage`: ldmatrix into wgmma's register layout, scaled by sc
    auto prepare = [&](uint32_t (&a)[4][4], uint32_t stage) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        ldmatrix_x4(a[kk], stage + B_BYTES + a_off + (((2 * kk + a_half) ^ a_xor) << 4));
#pragma unroll
        for (int u = 0; u < 4; ++u) a[kk][u] = scale_half2(a[kk][u], sc[kk][u]);
      }
    };
    auto issue = [&](const uint32_t (&a)[4][4], uint32_t stage) {
      bf::fence_registers(acc);
      bf::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_rs<BN>(acc, a[kk], bf::smem_desc_sw128(stage + kk * 32));
      bf::wgmma_commit();
    };
    // after step j's wgmmas completed: every warp's reads of its stage done, refill it with step j + S
    auto release = [&](int slot) {
      if constexpr (PW) {  // this warp's reads of the stage are done (its ldmatrix, the wgmmas it waited for)
        __syncwarp();
        if (lane == 0) bf::mbar_arrive(empty + 8 * slot);
        return;
      }
      if constexpr (KS == 1) __syncthreads();
      else bf::named_barrier_sync(1 + wg, kProjWgThreads);
      if (leader && j + S < steps) {
        const uint32_t bar = bars + 8 * slot, stage = base + slot * STAGE;
        const int tn = step_tile(j + S), cn = step_chunk(j + S, tn);
        bf::mbar_arrive_expect_tx(bar, STAGE);
        bf::tma_load_2d(stage, &tm_w, cn * kProjWgK, n0, bar);
        bf::tma_load_2d(stage + B_BYTES, &tm_d, cn * kProjWgK, tn * TM, bar);
      }
    };
    if (KS == 1) load_scales(c0);
    else if (mine > 0) load_scales(chunk_after(0));  // (c0 may be chunks there)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
    if constexpr ((OPT & kProjWgOverlap) == 0) {
      for (int i = 0; i < mine; ++i, ++j) {
        const int slot = j % S;
        const uint32_t stage = base + slot * STAGE;
        bf::mbar_wait(bars + 8 * slot, (j / S) & 1);
        MB_WG_STAMP(1 + i);
        uint32_t a[4][4];
        prepare(a, stage);
        if (i + 1 < mine) load_scales(chunk_after(i + 1));  // during the MMAs
        bf::fence_registers(a);
        issue(a, stage);
        bf::wgmma_wait<0>();  // before a[] and this stage are reused
        bf::fence_registers(acc);
        release(slot);
      }
    } else {
      // step i: chunk i's A is in `cur` (prepared during step i - 1's MMAs, or here for i = 0); its wgmmas run while
      // chunk i + 1's A goes into `nxt`
      uint32_t a0[4][4], a1[4][4];
      auto step = [&](int i, uint32_t (&cur)[4][4], uint32_t (&nxt)[4][4]) {
        const int slot = j % S;
        bf::fence_registers(cur);
        issue(cur, base + slot * STAGE);
        if (i + 1 < chunks) {
          const int next = (j + 1) % S;
          bf::mbar_wait(bars + 8 * next, ((j + 1) / S) & 1);
          prepare(nxt, base + next * STAGE);
          if (i + 2 < chunks) load_scales(chunk_after(i + 2));
        }
        bf::wgmma_wait<0>();  // chunk i's MMAs: before `cur` and this stage are reused
        bf::fence_registers(acc);
        bf::fence_registers(cur);  // cur live until here: its registers are not handed to nxt while the MMAs read them
        release(slot);
        ++j;
      };
      bf::mbar_wait(bars + 8 * (j % S), (j / S) & 1);
      prepare(a0, base + (j % S) * STAGE);
      if (chunks > 1) load_scales(chunk_after(1));
      for (int i = 0; i < chunks; i += 2) {
        step(i, a0, a1);
        if (i + 1 < chunks) step(i + 1, a1, a0);
      }
    }

    MB_WG_STAMP(14);
    // Epilogue: + bias (+ x), fp16, from the accumulator layout: acc[4 nb + 2 h + u] is row (h ? r_hi : r_lo),
    // column n0 + 8 nb + 2 q + u (BN divides C_out). The shortcut's values of G column groups are loaded before their
    // stores: G = 1 with plain loads, or 8 with kProjWgPrefetchX (read-only loads, which the compiler may also move
    // above earlier stores)
    constexpr bool kPrefetch = (OPT & kProjWgPrefetchX) != 0;
    constexpr int G = kPrefetch ? (KS == 1 ? 8 : 4) : 1;
    // KS = 2: warpgroup 0 stores column groups nb < BN / 16, warpgroup 1 the rest
    auto owns = [&](int nb) { return KS == 1 || (nb < BN / 16) == (wg == 0); };
    if constexpr (KS == 2) {  // (one tile per CTA: every stage's copy was waited on, the rings are free)
      float* red = reinterpret_cast<float*>(smem_raw + (smem0 - smem_addr(smem_raw)));  // [BN / 2][128]
      __syncthreads();  // both warpgroups' MMAs done and their stage reads finished
#pragma unroll
      for (int i = 0; i < BN / 2; ++i)
        if (!owns(i / 4)) red[i * kProjWgThreads + tid] = acc[i];
      __syncthreads();
#pragma unroll
      for (int i = 0; i < BN / 2; ++i)
        if (owns(i / 4)) acc[i] += red[i * kProjWgThreads + tid];
    }
#pragma unroll
    for (int g0 = 0; g0 < BN / 8; g0 += G) {
      __half2 xr[G][2];
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = h ? r_hi : r_lo, col = n0 + (g0 + g) * 8 + 2 * q;
          const __half2* x = reinterpret_cast<const __half2*>(p.x + (size_t)row * p.C_out + col);
          xr[g][h] = __float2half2_rn(0.f);
          if (g0 + g < BN / 8 && owns(g0 + g) && p.residual && row < P)  // stride 1, C_in == C_out: out's layout
            xr[g][h] = kPrefetch ? __ldg(x) : *x;
        }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int nb = g0 + g;
        if (nb >= BN / 8) break;
        if (!owns(nb)) continue;
        const int col = n0 + nb * 8 + 2 * q;
        const float2 bias = __ldg(reinterpret_cast<const float2*>(p.b_proj + col));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = h ? r_hi : r_lo;
          if (row >= P) continue;
          const float2 xv = __half22float2(xr[g][h]);  // zero without a shortcut
          *reinterpret_cast<__half2*>(p.out + (size_t)row * p.C_out + col) =
              __floats2half2_rn(acc[4 * nb + 2 * h] + bias.x + xv.x, acc[4 * nb + 2 * h + 1] + bias.y + xv.y);
        }
      }
    }
    MB_WG_STAMP(15);
  }
}
#endif

template <int BN, int OPT>
__global__ void __launch_bounds__(project_wg_threads(OPT))
    project_wg_kernel(const Params p, const __grid_constant__ CUtensorMap tm_d,
                      const __grid_constant__ CUtensorMap tm_w) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  project_wg_body<BN, OPT, 1>(p, tm_d, tm_w);
#endif
}

// The hidden dimension split over two warpgroups (project_wg_body, KS = 2), one row tile per CTA
// (CUDA_KERNELS_PROJ_WG_SPLIT, project_wg_split). project_wg_kernel's time is each tile's serial chain of chunk
// steps (s21 call 1: 5.1 26.6 us with warps active 10% and issue 22%, 392 tiles on 264 CTAs of one warpgroup; 6.1 20.5
// us, 98 tiles, one warp per scheduler); here each warpgroup's chain is half as long, and up to BN = 112 two CTAs of
// two warpgroups fit an SM (128 registers, 2 stages a ring): twice the warps at 5.x, at 6.x on the same 98 SMs.
template <int BN>
__global__ void __launch_bounds__(2 * kProjWgThreads, BN <= 112 ? 2 : 1)
    project_wg_sk_kernel(const Params p, const __grid_constant__ CUtensorMap tm_d,
                         const __grid_constant__ CUtensorMap tm_w) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  project_wg_body<BN, kProjWgPrefetchX, 2>(p, tm_d, tm_w);
#endif
}

// 128-row tiles on two warpgroups that share each stage's B (CUDA_KERNELS_PROJ_WG_M128=1, measured slower, off): V
// crosses from L2 once per 128 rows instead of once per 64 (at B0's 5.1, 59 of the 97 MB the boxes read in s21 call 1
// were V, re-read by each of 392 tiles). Each warpgroup's rows get the same products and chunk order as a 64-row tile
// starting at the 128-row tile's first chunk: close to project_wg_kernel's values, not bitwise.
template <int BN>
__global__ void __launch_bounds__(2 * kProjWgThreads)
    project_wg_m2_kernel(const Params p, const __grid_constant__ CUtensorMap tm_d,
                         const __grid_constant__ CUtensorMap tm_w) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  project_wg_body<BN, kProjWgPrefetchX, 1, 2>(p, tm_d, tm_w);
#endif
}

// One launcher for the three kernels: persistent (project_wg_kernel, project_wg_m2_kernel: at most as many CTAs as
// fit at once, each looping over row tiles of `rows`) or one row tile per CTA (project_wg_sk_kernel, whose reduction
// reuses the stages).
template <typename Kernel>
cudaError_t launch_wg(Kernel kernel, DeviceSlots& slots, bool (&sm90)[kMaxDevices], int bn, int smem, int threads,
                      bool persistent, const Params& p, cudaStream_t stream, bool pdl, int rows = kProjWgRows) {
  int dev = 0;
  cudaError_t err = prepare(kernel, slots, smem, threads, dev);
  if (err != cudaSuccess) return err;
  if (!sm90[dev]) {  // the kernel's body exists for sm_90a only (wgmma); elsewhere it would do nothing
    int major = 0, minor = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err != cudaSuccess) return err;
    if (major != 9 || minor != 0) return cudaErrorNotSupported;
    sm90[dev] = true;
  }
  const int P = p.N * p.Ho * p.Wo;
  CUtensorMap tm_d, tm_w;  // encoded on the host at each call (D moves between calls); passed by value
  err = tmap::half_2d_sw128(&tm_d, p.d, P, p.hidden, p.hidden, rows, kProjWgK);
  if (err == cudaSuccess)
    err = tmap::half_2d_sw128(&tm_w, p.w_proj, p.C_out, p.hk_pad, p.hk_pad, bn, kProjWgK);
  if (err != cudaSuccess) return err;
  const int tiles = (P + rows - 1) / rows, col_tiles = p.C_out / bn;
  const int fit = std::max(1, slots.ctas_per_sm[dev] * slots.sms[dev] / col_tiles);
  const dim3 grid(persistent ? std::min(tiles, fit) : tiles, col_tiles);
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, grid, dim3(threads), smem, stream, p, tm_d, tm_w);
  kernel<<<grid, threads, smem, stream>>>(p, tm_d, tm_w);
  return cudaGetLastError();
}

template <int BN, int OPT>
cudaError_t launch_project_wg_opt(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  static bool sm90[kMaxDevices] = {};
  return launch_wg(project_wg_kernel<BN, OPT>, slots, sm90, BN, project_wg_smem_bytes(BN, 1, 1, OPT),
                   project_wg_threads(OPT), true, p, stream, pdl);
}

template <int BN>
cudaError_t launch_project_wg_m2(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  static bool sm90[kMaxDevices] = {};
  return launch_wg(project_wg_m2_kernel<BN>, slots, sm90, BN, project_wg_smem_bytes(BN, 1, 2), 2 * kProjWgThreads,
                   true, p, stream, pdl, 2 * kProjWgRows);
}

template <int BN>
cudaError_t launch_project_wg_sk(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  static bool sm90[kMaxDevices] = {};
  return launch_wg(project_wg_sk_kernel<BN>, slots, sm90, BN, project_wg_smem_bytes(BN, 2), 2 * kProjWgThreads, false,
                   p, stream, pdl);
}

// CUDA_KERNELS_PROJ_WG_OPT=0..3, 5, 9 or 73 (read at every call): the kernel's OPT bits. 9 by default since session 22
// (73 = 9 | kProjWgProducer: session 33, measured and off, B0 +20.4 us):
// 1 with kProjWgStages3 (s22 call 2, Nsight Compute, L2 flushed: 5.0 21.8 -> 17.8 us, 5.1 27.5 -> 22.9, 4.1 17.7 ->
// 15.9; B0 -19.9 us). 1 was the fastest of 0-3 (session 15, ncu: 6.1 24.6 -> 21.4 us, 5.1 32.0 -> 26.3, 2.1 70.3 ->
// 63.9); 5 is 1 with kProjWgPrefetchL2 (slower, s22 call 1).
constexpr int kProjWgOptDefault = 9;
int project_wg_opt() {
  const char* v = std::getenv("CUDA_KERNELS_PROJ_WG_OPT");
  if (v != nullptr && std::strcmp(v, "73") == 0) return kProjWgPrefetchX | kProjWgStages3 | kProjWgProducer;
  const bool known = v != nullptr && ((v[0] >= '0' && v[0] <= '3') || v[0] == '5' || v[0] == '9') && v[1] == '\0';
  return known ? v[0] - '0' : kProjWgOptDefault;
}

// CUDA_KERNELS_PROJ_WG_SPLIT=0|1|auto (read at every call; auto by default since session 21): project_wg_sk_kernel,
// the hidden dimension split over two warpgroups, instead of project_wg_kernel<BN, OPT>: never, always, or (auto)
// where the row tiles times the column tiles are at most the SMs, i.e. where one warpgroup an SM left SMs idle (s21
// call 2, Nsight Compute: 6.1's 98 tiles 21.4 -> 16.8 us; 4.1's 392 tiles 16.5 -> 19.8 and 7.0's 196 21.3 -> 27.1).
bool project_wg_split(const Params& p, int bn) {
  const char* v = std::getenv("CUDA_KERNELS_PROJ_WG_SPLIT");
  if (v != nullptr && std::strcmp(v, "0") == 0) return false;
  if (v != nullptr && std::strcmp(v, "1") == 0) return true;
  static int sms[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev >= kMaxDevices) return false;
  if (sms[dev] == 0 && cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return false;
  const long long tiles = ((long long)p.N * p.Ho * p.Wo + kProjWgRows - 1) / kProjWgRows;
  return tiles * (p.C_out / bn) <= sms[dev];
}

bool project_wg_m128() {  // CUDA_KERNELS_PROJ_WG_M128=1 (read at every call; off, s22 call 1): project_wg_m2_kernel
  const char* v = std::getenv("CUDA_KERNELS_PROJ_WG_M128");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

template <int BN>
cudaError_t launch_project_wg_bn(const Params& p, cudaStream_t stream, bool pdl) {
  if (project_wg_split(p, BN)) return launch_project_wg_sk<BN>(p, stream, pdl);
  if (project_wg_m128()) return launch_project_wg_m2<BN>(p, stream, pdl);
  switch (project_wg_opt()) {
    case 1: return launch_project_wg_opt<BN, 1>(p, stream, pdl);
    case 2: return launch_project_wg_opt<BN, 2>(p, stream, pdl);
    case 3: return launch_project_wg_opt<BN, 3>(p, stream, pdl);
    case 5: return launch_project_wg_opt<BN, 5>(p, stream, pdl);
    case 9: return launch_project_wg_opt<BN, 9>(p, stream, pdl);
    case 73: return launch_project_wg_opt<BN, 73>(p, stream, pdl);
    default: return launch_project_wg_opt<BN, 0>(p, stream, pdl);
  }
}

// CUDA_KERNELS_PROJ_WG=off|late|all|ring|unstaged (read at every call; unstaged by default in version 11 since
// session 22, else off): the projection of versions 9-11 on warpgroup MMAs where project_wg_bn has a shape and (late)
// project_v9 does not apply, (ring) late or project_v9 would run its ring of loads in registers (B0's 4.1 / 4.2: s21
// call 2, 45.8 -> 16.5 us, B0 -34.4 us), (unstaged) late or project_v9s does not fit (ring, and project_v9t where
// H x W is not a multiple of 16: B0's 4.0, s22 call 1: 18.2 -> 11.6 us, B0 -5.3 us), or (all) everywhere it has one.
// 0 off, 1 late, 2 all, 3 ring, 4 unstaged.
int project_wg_mode(bool v11) {
  const char* v = std::getenv("CUDA_KERNELS_PROJ_WG");
  if (v == nullptr) return v11 ? 4 : 0;
  if (std::strcmp(v, "late") == 0) return 1;
  if (std::strcmp(v, "all") == 0) return 2;
  if (std::strcmp(v, "ring") == 0) return 3;
  if (std::strcmp(v, "unstaged") == 0) return 4;
  return 0;
}

bool project_wg_applies(const Params& p, int mode) {
  if (mode == 0 || project_wg_bn(p.C_out) == 0 || p.hidden % 8 || p.hidden < 8 || p.hk_pad % 8) return false;
  if (mode == 2 || !project_v9_applies(p.hidden, p.C_out)) return true;
  // ring: where project_v9's task-staged loaders do not fit; unstaged: where project_v9s does not (both structural:
  // CUDA_KERNELS_PROJ_V9_LOAD / _SS / _BULK ask project_v9 itself for another loader where it runs)
  return (mode == 3 && !project_v9_staged_fits(p)) || (mode == 4 && !project_v9s_fits(p));
}

cudaError_t launch_project_wg(const Params& p, cudaStream_t stream, bool pdl) {
  switch (project_wg_bn(p.C_out)) {
    case 16: return launch_project_wg_bn<16>(p, stream, pdl);
    case 24: return launch_project_wg_bn<24>(p, stream, pdl);
    case 40: return launch_project_wg_bn<40>(p, stream, pdl);
    case 48: return launch_project_wg_bn<48>(p, stream, pdl);
    case 80: return launch_project_wg_bn<80>(p, stream, pdl);
    case 88: return launch_project_wg_bn<88>(p, stream, pdl);
    case 112: return launch_project_wg_bn<112>(p, stream, pdl);
    case 120: return launch_project_wg_bn<120>(p, stream, pdl);
    case 160: return launch_project_wg_bn<160>(p, stream, pdl);
    case 176: return launch_project_wg_bn<176>(p, stream, pdl);
    case 192: return launch_project_wg_bn<192>(p, stream, pdl);
    case 208: return launch_project_wg_bn<208>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mb
