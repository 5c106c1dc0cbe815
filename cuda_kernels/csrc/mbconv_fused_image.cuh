// The whole MBConv block of one image in one pair of kernel-1 CTAs (CUDA_KERNELS_FUSED_IMAGE=1; measured in
// session 34 and off: the items run as fast as kernel 1's, but this tail, which every CTA reaches at the same
// moment, took 17 us at B0's 4.1 and 31 at 3.1 - break-even and slower; NOTES.md "Session 34"). Kernel 1's
// persistent CTAs are replaced, where it applies, by clusters of two: cluster n takes image n's items (its first CTA
// the first half of the image's (chunk, band) items, chunk-major), then both CTAs meet at the cluster barrier (D and
// the pool's partial sums of the image written by both, visible to both), run the image's SE themselves (~20K MACs
// at B0's 4.1) and project their half of the image's 16-row tiles from D, which they wrote a few microseconds before
// and which L2 still holds. The SE and projection kernels are not launched: the chain kernel 1 -> SE -> projection
// (s33 call 2: 3.1 54.3 + 4.4 + 18.0 us, 4.1 26.9 + 6.6 + 13.1) becomes kernel 1 plus each image's own SE and
// projection, with nothing waiting on the whole batch.
//
// The projection: the SE's scale folded into V per image, V' = V diag(s) in fp16 (shared memory, row pitch
// fi_ldv), then each warp's 16-row tiles as mma.sync m16n8k16 steps with A straight from D in L2 (16-byte loads,
// a few k32 blocks ahead) in a permuted k order: within a k32 block lane (g, t) holds D[row][8 t .. 8 t + 7] and
// step s of the block takes its halves 4 s .. 4 s + 3 as columns {2 t, 2 t + 1, 2 t + 8, 2 t + 9}; B is read from
// V' at the same physical k, so the sum over k is the same sum in another order.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "mbconv.cuh"
#include "ptx.cuh"

namespace mb {

// V' row pitch in halves: >= hidden and 32 mod 64, so that a quarter warp's two rows of 64 bytes (16-byte loads of
// lanes t = 0..3 of two rows) fall on distinct bank halves
__host__ __device__ constexpr int fi_ldv(int hidden) { return (hidden + 31) / 64 * 64 + 32; }

// Shared memory of the tail: V (then V') [c_out x fi_ldv], the pool, the scale [hidden] fp32 each, FC1's outputs
// [sq] fp32.
__host__ __device__ constexpr int fi_tail_smem_bytes(int hidden, int sq, int c_out) {
  return c_out * fi_ldv(hidden) * 2 + (2 * hidden + sq) * 4;
}

// The ring's depth: the largest divisor of the k32 blocks up to 5, so that the next tile's blocks take the slots its
// blocks will be read from (5 at hidden 480), else (no such divisor above 2: 7 blocks at hidden 240) 4 blocks and no
// prefetch across tiles (a ring of 7 spilled at hidden 240).
__host__ __device__ constexpr int fi_ring(int kb) {
  int d = kb < 5 ? kb : 5;
  while (kb % d) --d;
  return d > 2 || d == kb ? d : (kb < 4 ? kb : 4);
}

// D's k32 block `block` of the two rows d0 / d1 (lane t's 16-byte pieces) into slot `slot` of the ring a0 / a1
template <int PF>
__device__ __forceinline__ void fi_load_block(uint4 (&a0)[PF], uint4 (&a1)[PF], int slot, const uint4* d0,
                                              const uint4* d1, int block) {
  a0[slot] = __ldcg(d0 + 4 * block);
  a1[slot] = __ldcg(d1 + 4 * block);
}

__device__ __forceinline__ void fi_cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();  // clusters are sm_90's (version 11 runs on Hopper only: launch_mbconv refuses older GPUs)
#endif
}

// fp16 pairs multiplied, round to nearest (the exact product of two halves rounded once, as PyTorch's fp16 mul)
__device__ __forceinline__ uint32_t fi_hmul2(uint32_t a, uint32_t b) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// A 16-byte shared-memory load that stays where it is written: the scale's pieces do not change from tile to tile,
// and hoisted out of the tile loop (15 of them at 4.1) they held 60 registers and spilled
__device__ __forceinline__ uint4 fi_lds128(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(bf::smem_addr(p)));
  return v;
}

// Two rows' 16-byte pieces of D (the same 8 channels) times the scale's piece of those channels
__device__ __forceinline__ void fi_scale4(uint4& x0, uint4& x1, const uint4 s) {
  x0 = make_uint4(fi_hmul2(x0.x, s.x), fi_hmul2(x0.y, s.y), fi_hmul2(x0.z, s.z), fi_hmul2(x0.w, s.w));
  x1 = make_uint4(fi_hmul2(x1.x, s.x), fi_hmul2(x1.y, s.y), fi_hmul2(x1.z, s.z), fi_hmul2(x1.w, s.w));
}

__device__ __forceinline__ float fi_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// After CTA h (0 or 1) of image n's pair has stored its items' D and pool sums. THREADS threads; C_OUT, HIDDEN, SQ as
// the launch's (p.C_out, p.hidden, p.sq: the caller's static shape, so that the SE's loops unroll and each of its
// weight loads is issued before the first is used).
// MEET_ONLY (a diagnostic, CUDA_KERNELS_FUSED_IMAGE=3: the block's output is not computed): the tail stops once the
// pair has met, so that a timed launch shows kernel 1's items in this arrangement apart from the SE and the projection.
// SCALE_D (CUDA_KERNELS_FUSED_IMAGE=5, session 35, not yet measured): the scale applied to D's pieces in registers
// (s in fp16, one HMUL2 a word: D s rounded to fp16 as PyTorch's fp16 SE rounds it) and V used as loaded, so that
// no pass over V waits on the SE (s35 call 1's profile of the row form: the V' pass and its barriers ~18% of 4.1's
// samples).
template <int C_OUT, int HIDDEN, int SQ, int THREADS, bool MEET_ONLY = false, bool SCALE_D = false>
__device__ __forceinline__ void fused_image_tail(const Params& p, uint8_t* smem, int n, int h) {
  static_assert(C_OUT % 8 == 0 && HIDDEN % 16 == 0 && HIDDEN >= 32, "n8 tiles of C_out, k16 steps of hidden");
  constexpr int LDV = fi_ldv(HIDDEN), NTO = C_OUT / 8, KB = HIDDEN / 32, KT = HIDDEN % 32 / 16, NW = THREADS / 32;
  // k32 blocks of D in flight a lane (SCALE_D: 3, its scale pieces and products took the registers of a deeper ring)
  constexpr int PF = SCALE_D && KB % 3 == 0 ? 3 : fi_ring(KB);
  __half* vs = reinterpret_cast<__half*>(smem);
  float* pool = reinterpret_cast<float*>(smem + C_OUT * LDV * 2);
  float* sc = pool + HIDDEN;
  float* z = sc + HIDDEN;
  __half* sch = reinterpret_cast<__half*>(sc);  // SCALE_D: the scale in fp16 (16-byte pieces: 8 t .. 8 t + 7)
  static_assert((C_OUT * LDV * 2 + HIDDEN * 4) % 16 == 0, "the fp16 scale's 16-byte pieces");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int P = p.Ho * p.Wo;

  // V into shared memory at the pitch of V' while the partner may still be in its items (past this barrier the last
  // item's pool sums have been read: kernel 1's shared memory is free)
  __syncthreads();
  for (int i = tid; i < C_OUT * (HIDDEN / 8); i += THREADS) {
    const int r = i / (HIDDEN / 8), c8 = (i - r * (HIDDEN / 8)) * 8;
    bf::cp_async16(bf::smem_addr(vs + r * LDV + c8), p.w_proj + (size_t)r * p.hk_pad + c8, true);
  }
  bf::cp_async_commit();
  // The SE's weights into L1 while the pair meets (both CTAs of an SM read the same lines)
  for (int i = tid; i < 2 * (SQ * HIDDEN / 32); i += THREADS) {
    const float* w = i < SQ * HIDDEN / 32 ? p.w_se1 + 32 * i : p.w_se2 + 32 * (i - SQ * HIDDEN / 32);
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(w));
  }
  // Both CTAs' D and pool sums of image n (release / acquire at cluster scope; read below through L2 only, .cg)
  fi_cluster_sync();
  if constexpr (MEET_ONLY) {
    bf::cp_async_wait<0>();
    return;
  }
  // The projection's row pointers: this warp's tiles h + 2 warp, h + 2 warp + 2 NW, ... (the pair's halves
  // interleaved); rows past the image read its last row and are not stored.
  const int g = lane >> 2, t = lane & 3, tiles = (P + 15) / 16;
  const __half* dimg = p.d + (size_t)n * P * HIDDEN;
  const __half* vrow = vs + g * LDV + 8 * t;
  auto rows_of = [&](int tile, const uint4*& d0, const uint4*& d1) {
    d0 = reinterpret_cast<const uint4*>(dimg + (size_t)min(tile * 16 + g, P - 1) * HIDDEN + 8 * t);
    d1 = reinterpret_cast<const uint4*>(dimg + (size_t)min(tile * 16 + g + 8, P - 1) * HIDDEN + 8 * t);
  };
  // D in a ring of PF k32 blocks a lane that runs across the warp's tiles: the first tile's first blocks are issued
  // here, before the SE, so that their latency passes during it (s34 call 2: the tail was a chain of dependent L2
  // round trips, 22 us at 4.1)
  constexpr bool CROSS = KB % PF == 0;  // the ring continues into the next tile
  int tile = h + 2 * warp;
  const uint4 *d0, *d1;
  rows_of(tile, d0, d1);
  uint4 a0[PF], a1[PF];
  auto first_blocks = [&]() {
    if (tile < tiles) {
#pragma unroll
      for (int q = 0; q < PF; ++q) {
        fi_load_block(a0, a1, q, d0, d1, q);
      }
    }
  };
  first_blocks();
  const float inv = 1.f / float(P);
  for (int c = tid; c < HIDDEN; c += THREADS) {
    float s = 0.f;
    for (int b = 0; b < p.row_blocks; ++b) s += __ldcg(p.partial + ((size_t)n * p.row_blocks + b) * p.hid_pad + c);
    pool[c] = s * inv;
  }
  __syncthreads();
#pragma unroll
  for (int j = warp; j < SQ; j += NW) {  // FC1 and SiLU: a warp a squeezed channel
    float a = 0.f;
#pragma unroll
    for (int c = lane; c < HIDDEN; c += 32) a = fmaf(__ldg(p.w_se1 + (size_t)j * HIDDEN + c), pool[c], a);
    a = fi_warp_sum(a);
    if (lane == 0) {
      const float v = a + __ldg(p.b_se1 + j);
      z[j] = v / (1.f + expf(-v));
    }
  }
  __syncthreads();
  for (int c = tid; c < HIDDEN; c += THREADS) {  // FC2 and the sigmoid: a thread a channel
    float a = __ldg(p.b_se2 + c);
#pragma unroll
    for (int j = 0; j < SQ; ++j) a = fmaf(__ldg(p.w_se2 + (size_t)c * SQ + j), z[j], a);
    if constexpr (SCALE_D) {
      sch[c] = __float2half_rn(1.f / (1.f + expf(-a)));
    } else {
      sc[c] = 1.f / (1.f + expf(-a));
    }
  }
  bf::cp_async_wait<0>();
  __syncthreads();
  for (int i = tid; i < (SCALE_D ? 0 : C_OUT * (HIDDEN / 8)); i += THREADS) {  // V' = V diag(s) in place, 8 halves
    const int r = i / (HIDDEN / 8), c8 = (i - r * (HIDDEN / 8)) * 8;
    uint4 v = *reinterpret_cast<const uint4*>(vs + r * LDV + c8);
    __half2* hv = reinterpret_cast<__half2*>(&v);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __half22float2(hv[e]);
      hv[e] = __floats2half2_rn(f.x * sc[c8 + 2 * e], f.y * sc[c8 + 2 * e + 1]);
    }
    *reinterpret_cast<uint4*>(vs + r * LDV + c8) = v;
  }
  if constexpr (!SCALE_D) __syncthreads();

  for (; tile < tiles; tile += 2 * NW) {
    const int r0 = tile * 16 + g, r1 = r0 + 8;
    const uint4 *n0 = d0, *n1 = d1;  // the next tile's rows (its first blocks are issued in this tile's last ones)
    const bool next = CROSS && tile + 2 * NW < tiles;
    if (next) rows_of(tile + 2 * NW, n0, n1);
    uint2 y0, y1;  // KT: the last k16 step's halves 4 t .. 4 t + 3
    if constexpr (KT) {
      y0 = __ldcg(reinterpret_cast<const uint2*>(reinterpret_cast<const __half*>(d0) + KB * 32 - 4 * t));
      y1 = __ldcg(reinterpret_cast<const uint2*>(reinterpret_cast<const __half*>(d1) + KB * 32 - 4 * t));
    }
    float acc[NTO][4];
#pragma unroll
    for (int nt = 0; nt < NTO; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    __half2 xr[NTO][2];  // the shortcut's values, loaded two blocks before the end
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      uint4 x0 = a0[kb % PF], x1 = a1[kb % PF];
      if constexpr (SCALE_D) fi_scale4(x0, x1, fi_lds128(sch + kb * 32 + 8 * t));
      if (kb + PF < KB) {
        fi_load_block(a0, a1, kb % PF, d0, d1, kb + PF);
      } else if (next) {  // block kb + PF - KB of the next tile into the same slot (CROSS: KB % PF == 0)
        fi_load_block(a0, a1, kb % PF, n0, n1, kb + PF - KB);
      }
      if (kb == (KB > 2 ? KB - 2 : 0)) {
#pragma unroll
        for (int nt = 0; nt < NTO; ++nt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int row = min(hh ? r1 : r0, P - 1);
            xr[nt][hh] = p.residual ? *reinterpret_cast<const __half2*>(p.x + ((size_t)n * P + row) * C_OUT + nt * 8 +
                                                                        2 * t)
                                    : __float2half2_rn(0.f);
          }
      }
      const uint32_t s0[4] = {x0.x, x1.x, x0.y, x1.y}, s1[4] = {x0.z, x1.z, x0.w, x1.w};
#pragma unroll
      for (int nt = 0; nt < NTO; ++nt) {
        const uint4 b = *reinterpret_cast<const uint4*>(vrow + nt * 8 * LDV + kb * 32);
        bf::mma_m16n8k16(acc[nt], s0, b.x, b.y);
        bf::mma_m16n8k16(acc[nt], s1, b.z, b.w);
      }
    }
    if constexpr (KT) {
      if constexpr (SCALE_D) {
        const uint2 sk = *reinterpret_cast<const uint2*>(sch + KB * 32 + 4 * t);
        y0 = make_uint2(fi_hmul2(y0.x, sk.x), fi_hmul2(y0.y, sk.y));
        y1 = make_uint2(fi_hmul2(y1.x, sk.x), fi_hmul2(y1.y, sk.y));
      }
      const uint32_t s0[4] = {y0.x, y1.x, y0.y, y1.y};
#pragma unroll
      for (int nt = 0; nt < NTO; ++nt) {
        const uint2 b = *reinterpret_cast<const uint2*>(vrow + nt * 8 * LDV + KB * 32 - 4 * t);
        bf::mma_m16n8k16(acc[nt], s0, b.x, b.y);
      }
    }
#pragma unroll
    for (int nt = 0; nt < NTO; ++nt) {  // stride 1 and C_in == C_out: x has out's layout (xr zero without a shortcut)
      const int col = nt * 8 + 2 * t;
      const float b0 = __ldg(p.b_proj + col), b1 = __ldg(p.b_proj + col + 1);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = hh ? r1 : r0;
        if (row >= P) continue;
        const float2 xv = __half22float2(xr[nt][hh]);
        *reinterpret_cast<__half2*>(p.out + ((size_t)n * P + row) * C_OUT + col) =
            __floats2half2_rn(acc[nt][2 * hh] + b0 + xv.x, acc[nt][2 * hh + 1] + b1 + xv.y);
      }
    }
    if (CROSS) {
      d0 = n0;
      d1 = n1;
    } else if (tile + 2 * NW < tiles) {  // the next tile's first blocks after this one's MMAs
      rows_of(tile + 2 * NW, d0, d1);
#pragma unroll
      for (int q = 0; q < PF; ++q) {
        fi_load_block(a0, a1, q, d0, d1, q);
      }
    }
  }
}

}  // namespace mb
