// Stride-1 ConvFirst block in one kernel on Hopper warpgroup MMAs (sm_90a), NHWC float16, fp32
// accumulation (cuda_kernels/README.md; NOTES.md "C = 512 ConvFirst" and "C = 256 on the wgmma kernel"),
// one template instance per channel count C in 128 / 256 / 512:
//
//   out = x + ReLU(X U^T + a) V^T + b,   X = conv(x) + b_c   (grouped 3x3, group width 8)
//
// A 128 x 512 fp32 output accumulator is the whole register file, so one thread block takes a
// tile of 64 pixels, and its two consumer warpgroups split the columns instead of the rows:
//   phase A  X [64 x C] = conv of the tile from a halo of whole image rows, on mma.m16n8k8
//            (all 256 consumer threads, 64 channels at a time), into C / 64 128-byte-swizzled
//            panels: the A operand of stage 1;
//   per hidden chunk j of 128 channels:
//     stage 1  warpgroup w: H[:, 64w .. 64w+63] = ReLU(X U_j^T + a)   wgmma m64n64k16, A and B
//              from shared memory; written as fp16 into the chunk's H buffer (two buffers,
//              alternating by chunk), then both warpgroups meet at a named barrier;
//     stage 2  warpgroup w: out[:, C/2 w .. C/2 w + C/2 - 1] += H V_j^T, A = H and B = V_j from
//              shared memory: wgmma m64n128k16 into 2 accumulators of 64 registers at C = 512,
//              one at C = 256; m64n64k16 into one of 32 at C = 128.
//   epilogue out = acc + b + x from registers, one rounding.
// The weights are packed on the host into 16 KB slots in the order they are used (per chunk:
// C / 64 U panels of 128 hidden rows x 64 input channels, then for each 64-wide k panel of the
// chunk the C / 128 row blocks of V, 128 output rows each); one producer thread streams them with
// bulk copies into an 8-slot ring guarded by full/empty mbarriers. Every consumer warp waits on
// every slot and releases it once the wgmma group that read it has retired (or at once when its
// warpgroup does not read it: the other warpgroup's half of V, at C >= 256; at C = 128 each
// warpgroup reads 64 rows of the one V block).
#include "convfirst_c512.h"
#include "convfirst_wide.cuh"
#include "pdl.h"
#include "ptx.cuh"
#include "ptx_sm90.cuh"
#include "wgmma.cuh"

#include <type_traits>

namespace c512 {

using bf::bulk_copy_g2s;
using bf::cp_async16;
using bf::cp_async_commit;
using bf::cp_async_wait;
using bf::fence_barrier_init;
using bf::fence_proxy_async_smem;
using bf::ldmatrix_x4;
using bf::mbar_arrive;
using bf::mbar_arrive_expect_tx;
using bf::mbar_init;
using bf::mbar_wait;
using bf::mma_m16n8k8;
using bf::named_barrier_sync;
using bf::pack_half2;
using bf::panel_offset;
using bf::smem_addr;

constexpr int kConsumers = 2;                        // warpgroups
constexpr int kConsumerThreads = 128 * kConsumers;
constexpr int kThreads = kConsumerThreads + 128;    // + one producer warpgroup (one thread works)
constexpr int kConsumerWarps = kConsumerThreads / 32;
constexpr int kStages = 8;                           // ring slots
constexpr int kPanel = kTilePixels * 128;            // one 64-column panel of X or H: 8 KB
constexpr int kHChunkBytes = (kHiddenChunk / 64) * kPanel;  // 16 KB
constexpr int kHBytes = 2 * kHChunkBytes;            // two chunks, alternating
constexpr int kHaloPixels = kHBytes / 128 - 1;       // the conv halo aliases H (+ one zero pixel)
constexpr int kConsumerBarrier = 1;                  // named barrier of the 256 consumer threads
constexpr int kMaxDevices = 64;

// What depends on the channel count C: the X panels, the slots per chunk and the stage-2 split.
// HALO2 (variant 2, C <= 256): a second conv halo buffer after the ring, so that phase A loads the
// next 64-channel slice while the current one computes (C = 512 has no room for it).
template <int C, bool HALO2 = false>
struct Shape {
  static constexpr int kKPanels = C / 64;        // 64-wide k panels of X = U slots per chunk
  static constexpr int kVBlocks = C / 128;       // 128-row blocks of V per 64-wide k panel of a chunk
  static constexpr int kSlotsPerChunk = slots_per_chunk(C);
  static constexpr int kOutCols = C / 2;         // output columns per warpgroup
  static constexpr int kN2 = kOutCols < 128 ? kOutCols : 128;  // stage-2 wgmma n
  static constexpr int kAccs = kOutCols / kN2;   // stage-2 accumulators per warpgroup (n = kN2)
  // C = 384: 192 output columns per warpgroup = one n128 accumulator and one n64 (kSmallRegs): V
  // block 0 is warpgroup 0's, block 2 warpgroup 1's, block 1 is split (rows 64w .. into the n64 one).
  static constexpr bool kMixed = C == 384;
  static constexpr int kSmallRegs = kMixed ? 32 : 1;
  static constexpr int kXBytes = kKPanels * kPanel;
  static constexpr int kXOffset = 0;
  static constexpr int kHOffset = kXOffset + kXBytes;
  static constexpr int kRingOffset = kHOffset + kHBytes;
  static constexpr int kHalo2Offset = kRingOffset + kStages * kSlotBytes;  // used only with HALO2
  static constexpr int kBarOffset = kHalo2Offset + (HALO2 ? kHBytes : 0);
  static constexpr int kSmemBytes = 1024 + kBarOffset + 2 * kStages * 8;  // + alignment slack
  static_assert(C == 64 || C == 128 || C == 256 || C == 384 || C == 512, "channel counts");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
  // a V block (128 rows) is either one warpgroup's (C >= 256) or split between both (C = 128)
  // (C = 64 has its own stage 2, ffn64_tile: kVBlocks, kOutCols, kN2 and kAccs are unused there)
  static_assert(C == 64 || kVBlocks == 2 * kAccs || (kVBlocks == 1 && kN2 == 64) || (kMixed && kAccs == 1 && kN2 == 128),
                "stage-2 split");
};

constexpr int max_halo_pixels() {
  int most = 0;
  for (int w = 1; w <= kMaxWidth; ++w) {
    const int n = ((kTilePixels - 1) / w + 4) * w;  // rows a tile touches, + one above and below
    most = n > most ? n : most;
  }
  return most;
}
static_assert(max_halo_pixels() <= kHaloPixels, "the conv halo must fit in the H buffers");
// C = 64 loads the window p0 - W - 1 .. p0 + 64 + W of a tile's halo rows only (row_lo W > p0 - 2 W):
// every index it writes is below 3 W + 64, and the zero pixel (index kHaloPixels) stays clear.
static_assert(3 * kMaxWidth64 + 64 <= kHaloPixels, "C = 64: the conv window must fit in the H buffers");
// Variant 4: a halo of at most 127 pixels per 16 KB half of H (the zero pixel is pixel 127 of the second).
constexpr int max_halo_pixels_upto(int width) {
  int most = 0;
  for (int w = 1; w <= width; ++w) {
    const int n = ((kTilePixels - 1) / w + 4) * w;
    most = n > most ? n : most;
  }
  return most;
}
static_assert(max_halo_pixels_upto(kSplitHMaxWidth) < kHChunkBytes / 128 &&
                  kHaloPixels * 128 == kHChunkBytes + (kHChunkBytes / 128 - 1) * 128,
              "variant 4's halves");
static_assert(kSlotBytes == 128 * 128 && kHiddenChunk == 128, "slot layout");
static_assert(slots_per_chunk(512) == 16, "slots per chunk");

// ---- clusters (variant 1): two CTAs share each weight slot through a multicast bulk copy ----
// Arrives on the mbarrier at the same shared offset `bar` in CTA `rank` of the cluster.
__device__ __forceinline__ void mbar_arrive_remote(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}

// One bulk copy global -> the same shared offset `dst` in every CTA of `mask`, each completing
// `bytes` on its own mbarrier at offset `bar`.
__device__ __forceinline__ void bulk_copy_g2s_multicast(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                                        uint16_t mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
      "%4;\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "h"(mask)
      : "memory");
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using bf::fence_registers;
using bf::setmaxnreg_dec;
using bf::setmaxnreg_inc;
using bf::desc_advance;
using bf::smem_desc_sw128;
using bf::wgmma_commit;
using bf::wgmma_fence;
using bf::wgmma_m64n128k16_ss;
using bf::wgmma_m64n64k16_ss;
using bf::wgmma_m64n64k16_rs;
using bf::wgmma_wait;

__device__ __forceinline__ void consumer_sync() { named_barrier_sync(kConsumerBarrier, kConsumerThreads); }

using cfwide::conv_mtiles;
using cfwide::cluster_ctarank;
using cfwide::cluster_sync;
using cfwide::wgmma_ss;

// Epilogue of one accumulator of NREG registers (NREG / 32 groups of 64 columns) at output columns
// col0 + col1 ..: out = acc + b + x, all shortcut loads of a group before its stores. Accumulator
// layout: pixel r0 + 8 hr (r0 = p0 + 16 wq + lane / 4), columns 8 n + 2 (lane % 4) (+ 1) of group g.
// (col0 + col1, not one sum: the kernels' machine code depends on how the column is added up.)
template <int C, int NREG>
__device__ __forceinline__ void store_out(const Params& p, const float (&acc)[NREG], int col0, int col1, int r0,
                                          int lane) {
#pragma unroll
  for (int g = 0; g < NREG / 32; ++g) {
    __half2 sc[8][2];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = r0 + 8 * hr, col = col0 + col1 + 8 * (8 * g + n) + 2 * (lane & 3);
        sc[n][hr] = row < p.P ? __ldg(reinterpret_cast<const __half2*>(p.x + (size_t)row * C + col)) : __float2half2_rn(0.f);
      }
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int nb = 8 * g + n, col = col0 + col1 + 8 * nb + 2 * (lane & 3);
      const float2 b = __ldg(reinterpret_cast<const float2*>(p.b2 + col));
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = r0 + 8 * hr;
        if (row >= p.P) continue;
        const float2 s = __half22float2(sc[n][hr]);
        const float v0 = acc[4 * nb + 2 * hr] + b.x + s.x, v1 = acc[4 * nb + 2 * hr + 1] + b.y + s.y;
        *reinterpret_cast<__half2*>(p.out + (size_t)row * C + col) = __floats2half2_rn(v0, v1);
      }
    }
  }
}

// Variant 5: store_out split in two, the shortcut loads (load_shortcut, at the tile's start: their latency
// hides behind the tile's FFN) and the stores (store_out_sc, the same arithmetic in the same order).
template <int C, int NREG>
__device__ __forceinline__ void load_shortcut(const Params& p, __half2 (&sc)[NREG / 32][8][2], int col0, int col1,
                                              int r0, int lane) {
#pragma unroll
  for (int g = 0; g < NREG / 32; ++g)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = r0 + 8 * hr, col = col0 + col1 + 8 * (8 * g + n) + 2 * (lane & 3);
        sc[g][n][hr] = row < p.P ? __ldg(reinterpret_cast<const __half2*>(p.x + (size_t)row * C + col)) : __float2half2_rn(0.f);
      }
}

template <int C, int NREG>
__device__ __forceinline__ void store_out_sc(const Params& p, const float (&acc)[NREG], const __half2 (&sc)[NREG / 32][8][2],
                                             int col0, int col1, int r0, int lane) {
#pragma unroll
  for (int g = 0; g < NREG / 32; ++g)
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int nb = 8 * g + n, col = col0 + col1 + 8 * nb + 2 * (lane & 3);
      const float2 b = __ldg(reinterpret_cast<const float2*>(p.b2 + col));
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = r0 + 8 * hr;
        if (row >= p.P) continue;
        const float2 s = __half22float2(sc[g][n][hr]);
        const float v0 = acc[4 * nb + 2 * hr] + b.x + s.x, v1 = acc[4 * nb + 2 * hr + 1] + b.y + s.y;
        *reinterpret_cast<__half2*>(p.out + (size_t)row * C + col) = __floats2half2_rn(v0, v1);
      }
    }
}

// Bias pairs of warpgroup wg's 64 hidden columns of chunk j, in the accumulator's column order.
__device__ __forceinline__ void load_bias1(const Params& p, int j, int wg, int lane, float2 (&bias)[8]) {
  const float* bsrc = p.b1 + j * kHiddenChunk + 64 * wg + 2 * (lane & 3);
#pragma unroll
  for (int n = 0; n < 8; ++n) bias[n] = __ldg(reinterpret_cast<const float2*>(bsrc + 8 * n));
}

// Stage 1 of a chunk: acc1 = X . U_j[64w .. 64w+63]^T, one 64-wide k panel per slot (slot stream index
// `it` on). `pending`: the last slot this warpgroup read whose wgmma group may still be running; each
// slot is released once its group has retired, the last one after wgmma_wait<0> (pending = -1 on return).
template <int KPANELS, typename Release>
__device__ __forceinline__ void stage1(float (&acc1)[32], uint32_t x_s, uint32_t ring, uint32_t full_bar, int wg,
                                       int& it, int& pending, Release& release) {
  const uint64_t dx = smem_desc_sw128(x_s), du = smem_desc_sw128(ring + wg * (64 * 128));
#pragma unroll  // (measured so: C = 128 and 256 run 2 and 4 k panels per chunk unrolled, session 9)
  for (int kp = 0; kp < KPANELS; ++kp, ++it) {
    const uint32_t slot = uint32_t(it) % kStages;
    mbar_wait(full_bar + 8 * slot, (uint32_t(it) / kStages) & 1);
    fence_registers(acc1);
    wgmma_fence();
    const uint64_t da = desc_advance(dx, kp * kPanel), db = desc_advance(du, slot * kSlotBytes);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
      wgmma_m64n64k16_ss(acc1, desc_advance(da, ks * 32), desc_advance(db, ks * 32), (kp | ks) != 0);
    wgmma_commit();
    wgmma_wait<1>();  // every group but this one has retired
    if (pending >= 0) release(pending);
    pending = it;
  }
  wgmma_wait<0>();
  fence_registers(acc1);
  release(pending);
  pending = -1;
}

// H[:, 64w ..] = ReLU(acc1 + a) as fp16 into hp, H panel w of the chunk's buffer.
__device__ __forceinline__ void store_h(uint8_t* hp, const float (&acc1)[32], const float2 (&bias)[8], int wq,
                                        int lane) {
  const int row = wq * 16 + (lane >> 2), within = (lane & 3) * 4;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    *reinterpret_cast<uint32_t*>(hp + panel_offset(row, n) + within) =
        pack_half2(fmaxf(acc1[4 * n] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 1] + bias[n].y, 0.f));
    *reinterpret_cast<uint32_t*>(hp + panel_offset(row + 8, n) + within) =
        pack_half2(fmaxf(acc1[4 * n + 2] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 3] + bias[n].y, 0.f));
  }
}

// Stage 2 of chunk j, H in the buffer at hb: per k panel of the chunk, the C / 128 row blocks of V_j.
// At C >= 256 this warpgroup's output half is blocks kAccs w .. kAccs w + kAccs - 1 (accumulator q % kAccs);
// at C = 128 the one block is split, rows 64w .. 64w + 63 into the warpgroup's n64 product; C = 384:
// see Shape (acc2s is its n64 accumulator, unused at other widths). The other warpgroup's slots are
// released at once.
template <typename S, typename Release>
__device__ __forceinline__ void stage2(float (&acc2)[S::kAccs][S::kN2 / 2], float (&acc2s)[S::kSmallRegs], uint32_t hb,
                                       uint32_t ring, uint32_t full_bar, int wg, int j, int& it, int& pending,
                                       Release& release) {
  constexpr bool kSplitBlock = S::kVBlocks == 1;
  const uint32_t b_rows = kSplitBlock ? wg * (64 * 128) : 0;
  const uint64_t dh = smem_desc_sw128(hb), dr = smem_desc_sw128(ring);
#pragma unroll
  for (int kp = 0; kp < kHiddenChunk / 64; ++kp) {
#pragma unroll
    for (int q = 0; q < S::kVBlocks; ++q, ++it) {
      const uint32_t slot = uint32_t(it) % kStages;
      mbar_wait(full_bar + 8 * slot, (uint32_t(it) / kStages) & 1);
      if constexpr (S::kMixed) {
        if (q == 1 || q == 2 * wg) {  // q is a constant in each unrolled iteration
          wgmma_fence();
          if (q == 1) {  // the split block: rows 64w .. 64w + 63 into the n64 accumulator
            fence_registers(acc2s);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
              wgmma_ss(acc2s, desc_advance(dh, kp * kPanel + kk * 32),
                       desc_advance(dr, slot * kSlotBytes + wg * (64 * 128) + kk * 32), (j | kp | kk) != 0);
          } else {
            fence_registers(acc2[0]);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
              wgmma_ss(acc2[0], desc_advance(dh, kp * kPanel + kk * 32), desc_advance(dr, slot * kSlotBytes + kk * 32),
                       (j | kp | kk) != 0);
          }
          wgmma_commit();
          wgmma_wait<1>();
          if (pending >= 0) release(pending);
          pending = it;
        } else {
          release(it);  // the other warpgroup's whole block
        }
      } else if (kSplitBlock || q / S::kAccs == wg) {
        float(&acc)[S::kN2 / 2] = acc2[q % S::kAccs];
        fence_registers(acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          wgmma_ss(acc, desc_advance(dh, kp * kPanel + kk * 32), desc_advance(dr, slot * kSlotBytes + b_rows + kk * 32),
                   (j | kp | kk) != 0);
        wgmma_commit();
        wgmma_wait<1>();
        if (pending >= 0) release(pending);
        pending = it;
      } else {
        release(it);  // the other warpgroup's quarter
      }
    }
  }
}

// ---- C = 64: the FFN of a tile with stage 2 on register A operands, split by k ----
// X is one 64-wide k panel; per hidden chunk j one U slot (128 hidden rows) and one V slot (the chunk's
// two 64-row x 64-k panels of V, k panel 0 in rows 0..63). Warpgroup w: stage 1 as at every width
// (acc1 = X . U_j[64w ..]^T, m64n64k16 from shared memory), then H_w = ReLU(acc1 + a) packed to fp16 in
// registers in the wgmma A layout (no H in shared memory, no barrier between the warpgroups), and
// stage 2 acc2 += H_w . V_j[:, 64w .. 64w + 63]^T (m64n64k16, A from registers, B = rows 64w.. of the
// V slot): every output column over the warpgroup's half of the hidden chunk. After the last chunk the
// two partial sums meet in shared memory (`red`, 16 KB: 8 KB written by each warpgroup, the 32 columns
// the other one stores), and warpgroup w stores output columns 32w .. 32w + 31.
// `after_stage1(j)` runs once the chunk's stage-1 products have retired (variant 3: x_empty).
template <typename Release, typename AfterStage1>
__device__ __forceinline__ void ffn64_tile(const Params& p, uint32_t x_s, uint32_t ring, uint32_t full_bar, uint8_t* red,
                                           int wg, int wq, int lane, int nchunks, int p0, int& it, int& pending,
                                           Release& release, AfterStage1&& after_stage1) {
  constexpr int C = 64;
  // The epilogue's shortcut x and bias b, loaded first: their latency hides behind the tile's FFN instead
  // of following the partial-sum exchange (columns 32 wg + 8 i + 2 (lane % 4), rows r0 and r0 + 8).
  const int r0 = p0 + wq * 16 + (lane >> 2);
  __half2 sc[4][2];
  float2 b2[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int col = 32 * wg + 8 * i + 2 * (lane & 3);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = r0 + 8 * hr;
      sc[i][hr] = row < p.P ? __ldg(reinterpret_cast<const __half2*>(p.x + (size_t)row * C + col)) : __float2half2_rn(0.f);
    }
    b2[i] = __ldg(reinterpret_cast<const float2*>(p.b2 + col));
  }
  float acc2[32];  // not zeroed: the first product (chunk 0, first k step) runs with scale-d 0
  const uint64_t dv = smem_desc_sw128(ring + wg * (64 * 128));
#pragma unroll 1
  for (int j = 0; j < nchunks; ++j) {
    float2 bias[8];
    load_bias1(p, j, wg, lane, bias);
    float acc1[32];
    stage1<1>(acc1, x_s, ring, full_bar, wg, it, pending, release);  // also retires chunk j - 1's stage 2
    after_stage1(j);
    uint32_t h[4][4];  // k step ks: hidden columns 16 ks .. of this warpgroup's 64 (n blocks 2 ks, 2 ks + 1)
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      h[n >> 1][(n & 1) * 2 + 0] = pack_half2(fmaxf(acc1[4 * n + 0] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 1] + bias[n].y, 0.f));
      h[n >> 1][(n & 1) * 2 + 1] = pack_half2(fmaxf(acc1[4 * n + 2] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 3] + bias[n].y, 0.f));
    }
    const uint32_t slot = uint32_t(it) % kStages;
    mbar_wait(full_bar + 8 * slot, (uint32_t(it) / kStages) & 1);
    fence_registers(h);
    fence_registers(acc2);
    wgmma_fence();
    const uint64_t db = desc_advance(dv, slot * kSlotBytes);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_m64n64k16_rs(acc2, h[ks], desc_advance(db, ks * 32), (j | ks) != 0);
    wgmma_commit();
    pending = it;  // released once the group has retired (the next chunk's stage 1, or below)
    ++it;
  }
  wgmma_wait<0>();
  fence_registers(acc2);
  release(pending);
  pending = -1;

  // The two k halves meet: warpgroup w gives n blocks 4 (1 - w) .. (the other's columns), keeps 4 w ..
  // Thread t of one warpgroup holds the same accumulator positions as thread t of the other.
  const int t = wq * 32 + (lane & 31);
  float4* const give = reinterpret_cast<float4*>(red) + wg * 512;
  const float4* const take = reinterpret_cast<const float4*>(red) + (wg ^ 1) * 512;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int lo = 4 * i, hi = 16 + 4 * i;  // n blocks i and 4 + i
    give[i * 128 + t] = wg ? make_float4(acc2[lo], acc2[lo + 1], acc2[lo + 2], acc2[lo + 3])
                           : make_float4(acc2[hi], acc2[hi + 1], acc2[hi + 2], acc2[hi + 3]);
  }
  consumer_sync();
  float kept[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int lo = 4 * i, hi = 16 + 4 * i;
    const float4 v = take[i * 128 + t];
    kept[i][0] = (wg ? acc2[hi] : acc2[lo]) + v.x;
    kept[i][1] = (wg ? acc2[hi + 1] : acc2[lo + 1]) + v.y;
    kept[i][2] = (wg ? acc2[hi + 2] : acc2[lo + 2]) + v.z;
    kept[i][3] = (wg ? acc2[hi + 3] : acc2[lo + 3]) + v.w;
  }

  // epilogue: out = acc + b + x at columns 32 wg + 8 i + 2 (lane % 4), rows r0 and r0 + 8
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int col = 32 * wg + 8 * i + 2 * (lane & 3);
    const float2 b = b2[i];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = r0 + 8 * hr;
      if (row >= p.P) continue;
      const float2 sx = __half22float2(sc[i][hr]);
      const float v0 = kept[i][2 * hr] + b.x + sx.x, v1 = kept[i][2 * hr + 1] + b.y + sx.y;
      *reinterpret_cast<__half2*>(p.out + (size_t)row * C + col) = __floats2half2_rn(v0, v1);
    }
  }
}

// Phase A: X = conv(x) + b_c (rounded to fp16, as PyTorch rounds it) for pixels p0 .. p0+63.
// The halo is the run of whole image rows (global row n*H + h) the tile touches plus one row
// above and below, 64 channels at a time; taps outside the image read a zero pixel. With HALO2
// the slices alternate between `halo` and `halo2`, slice s + 1 loading while slice s computes.
template <int C, bool HALO2>
__device__ __forceinline__ void conv_phase(const Params& p, uint8_t* x_panels, uint8_t* halo, uint8_t* halo2,
                                           int p0) {
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int W = p.W, H = p.H, rows_total = p.P / W;
  const int p_last = min(p0 + kTilePixels, p.P) - 1;
  const int row_lo = max(p0 / W - 1, 0);
  const int row_hi = min(p_last / W + 1, rows_total - 1);
  const int npix = (row_hi - row_lo + 1) * W;
  uint8_t* zero_pixel = halo + kHaloPixels * 128;
  if (t < 8) reinterpret_cast<uint4*>(zero_pixel)[t] = make_uint4(0, 0, 0, 0);
  const uint32_t halo0 = smem_addr(halo), zero_addr = smem_addr(zero_pixel);
  const uint32_t halo1 = HALO2 ? smem_addr(halo2) : halo0;
  auto load_slice = [&](int s, uint32_t base) {
    if constexpr (C == 64) {  // only the window the taps read, at its place in the halo rows (W <= 56)
      const int qa = max(p0 - W - 1, row_lo * W) - row_lo * W;
      const int qb = min(p0 + kTilePixels + W + 1, (row_hi + 1) * W) - row_lo * W;
      for (int i = t; i < (qb - qa) * 8; i += kConsumerThreads) {
        const int q = qa + (i >> 3), c = i & 7;
        cp_async16(base + panel_offset(q, c), p.x + ((size_t)row_lo * W + q) * C + s * 64 + c * 8, true);
      }
    } else {
      for (int i = t; i < npix * 8; i += kConsumerThreads) {
        const int q = i >> 3, c = i & 7;
        cp_async16(base + panel_offset(q, c), p.x + ((size_t)row_lo * W + q) * C + s * 64 + c * 8, true);
      }
    }
    cp_async_commit();
  };
  if constexpr (HALO2) load_slice(0, halo0);

  // A warp job: one pair of the slice's eight groups (warp % 4; lanes 16..31 serve the second
  // group) for two of the tile's four 16-pixel m-tiles (warp / 4 and warp / 4 + 2), whose
  // nine-tap mma chains interleave.
  static_assert(kConsumerWarps == 8 && kTilePixels == 64, "conv job split");
  const int pair = warp & 3, local_group = pair * 2 + (lane >> 4);
#pragma unroll 1
  for (int s = 0; s < C / 64; ++s) {
    const uint32_t halo_base = (s & 1) ? halo1 : halo0;
    const bool next = HALO2 && s + 1 < C / 64;
    if constexpr (HALO2) {
      if (next) load_slice(s + 1, (s & 1) ? halo0 : halo1);  // its buffer's readers (slice s - 1) are done
    } else {
      if (s > 0) consumer_sync();  // every warp has read the previous slice's halo
      load_slice(s, halo_base);
    }
    const int g0 = s * 8 + pair * 2;  // global index of the pair's first group
    uint32_t bfrag[2][9];
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      bfrag[0][tap] = __ldg(p.conv_w + ((size_t)g0 * 9 + tap) * 32 + lane);
      bfrag[1][tap] = __ldg(p.conv_w + ((size_t)(g0 + 1) * 9 + tap) * 32 + lane);
    }
    float2 cb[2];
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) cb[gi] = __ldg(reinterpret_cast<const float2*>(p.conv_b + (g0 + gi) * 8 + (lane & 3) * 2));
    if (next) cp_async_wait<1>();  // slice s has landed, s + 1 may still be in flight
    else cp_async_wait<0>();
    consumer_sync();

    float acc[2][2][4] = {};
    conv_mtiles<2>(acc, p.P, W, H, p0, warp >> 2, lane, row_lo, halo_base, zero_addr, local_group, bfrag);
    uint8_t* panel = x_panels + s * kPanel;  // the slice's 64 channels are X panel s
    const int within = (lane & 3) * 4;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = ((warp >> 2) + 2 * j) * 16 + (lane >> 2);
#pragma unroll
      for (int gi = 0; gi < 2; ++gi) {
        const int chunk = pair * 2 + gi;
        *reinterpret_cast<uint32_t*>(panel + panel_offset(row, chunk) + within) =
            pack_half2(acc[j][gi][0] + cb[gi].x, acc[j][gi][1] + cb[gi].y);
        *reinterpret_cast<uint32_t*>(panel + panel_offset(row + 8, chunk) + within) =
            pack_half2(acc[j][gi][2] + cb[gi].x, acc[j][gi][3] + cb[gi].y);
      }
    }
    if constexpr (HALO2) consumer_sync();  // every warp has read this slice's buffer before s + 2 loads into it
  }
}
#endif

// CLUSTER = 1 (variant 0): each CTA streams every weight slot itself. CLUSTER = 2 (variant 1): the
// two CTAs of a cluster (neighbouring tiles) take turns loading a slot and multicast it into both,
// so each slot crosses L2 once per two tiles; a slot is refilled only when the consumers of both
// CTAs have released it (each consumer warp arrives on both CTAs' empty barriers).
// HALO2 (variant 2): phase A double-buffers its halo (Shape). SPLIT_H (variant 4, W <= kSplitHMaxWidth):
// phase A double-buffers its halo in the two 16 KB halves of the idle H buffers instead (no extra shared
// memory, so every width has it; a halo of <= 127 pixels, the zero pixel at index 127 of the second half).
template <int C, int CLUSTER, bool HALO2 = false, bool SPLIT_H = false>
__global__ void __launch_bounds__(kThreads, 1) convfirst_c512_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(CLUSTER == 1 || CLUSTER == 2, "cluster size");
  using S = Shape<C, HALO2>;
  constexpr int kXOffset = S::kXOffset, kHOffset = S::kHOffset, kRingOffset = S::kRingOffset;
  constexpr int kBarOffset = S::kBarOffset, kSlotsPerChunk = S::kSlotsPerChunk;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;  // 1024-aligned for the 128-byte swizzle
  uint8_t* const smem = smem_raw + (base - raw);
  const uint32_t x_s = base + kXOffset, h_s = base + kHOffset, ring = base + kRingOffset;
  const uint32_t full_bar = base + kBarOffset, empty_bar = full_bar + kStages * 8;
  const int nchunks = p.hidden / kHiddenChunk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int p0 = blockIdx.x * kTilePixels;

  const uint32_t rank = CLUSTER == 2 ? cluster_ctarank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar + 8 * s, 1);                          // the producer's arrive + the copy's bytes
      mbar_init(empty_bar + 8 * s, kConsumerWarps * CLUSTER);  // one arrive per consumer warp of the cluster
    }
    fence_barrier_init();
  }
  if constexpr (CLUSTER == 2) cluster_sync();  // both CTAs' barriers exist before any remote use
  else __syncthreads();

  if (warp >= kConsumerWarps) {
    // ---- producer: the tile's slots in order; the first eight load during phase A ----
    setmaxnreg_dec<40>();
    if (warp == kConsumerWarps && lane == 0) {
      const int nslots = nchunks * kSlotsPerChunk;
      for (int it = 0; it < nslots; ++it) {
        const int slot = it % kStages;
        mbar_wait(empty_bar + 8 * slot, ((it / kStages) & 1) ^ 1);
        mbar_arrive_expect_tx(full_bar + 8 * slot, kSlotBytes);  // this CTA's copy, whoever issues it
        const uint8_t* src = p.wpack + (size_t)it * kSlotBytes;
        if constexpr (CLUSTER == 2) {
          if ((it & 1) == (int)rank)
            bulk_copy_g2s_multicast(ring + slot * kSlotBytes, src, kSlotBytes, full_bar + 8 * slot, 0x3);
        } else {
          bulk_copy_g2s(ring + slot * kSlotBytes, src, kSlotBytes, full_bar + 8 * slot);
        }
      }
    }
  } else {
    // ---- consumers ----
    setmaxnreg_inc<232>();
    // PDL (pdl.h): the barriers and the producer's first kStages weight slots (constants, not the previous
    // kernel's output) went ahead; x (phase A, the residual) and out come after the wait. The CTA's only
    // tile starts here, so the trigger follows at once: the dependent's CTAs then take the SMs this grid's
    // last wave leaves and run their own prologue during this grid's tail.
    pdl::wait();
    pdl::launch_dependents();
    // wg through a shuffle: warp-uniform to the compiler, so the descriptors built from it stay in uniform registers
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), wq = warp & 3;
    // one pointer to H for phase A and the H stores (two expressions change the H stores' address code)
    uint8_t* const h_smem = smem + kHOffset;
    if constexpr (SPLIT_H) {
      static_assert(!HALO2, "one halo scheme");
      conv_phase<C, true>(p, smem + kXOffset, h_smem, h_smem + kHChunkBytes, p0);
    } else {
      conv_phase<C, HALO2>(p, smem + kXOffset, h_smem, smem + S::kHalo2Offset, p0);
    }
    fence_proxy_async_smem();  // X (generic stores) is read by wgmma (async proxy)
    consumer_sync();

    if constexpr (C == 64) {  // stage 2 on register A operands, split by k (ffn64_tile)
      int it = 0, pending = -1;
      auto release = [&](int index) {
        if (lane == 0) mbar_arrive(empty_bar + 8 * (uint32_t(index) % kStages));
      };
      ffn64_tile(p, x_s, ring, full_bar, h_smem, wg, wq, lane, nchunks, p0, it, pending, release, [](int) {});
    } else {
      // acc2 is not zeroed: the first product into each half (chunk 0, k panel 0, first k step)
      // runs with scale-d 0. Zeroing it with moves made ptxas serialise every wgmma (C7515).
      float acc2[S::kAccs][S::kN2 / 2];
      float acc2s[S::kSmallRegs];  // C = 384's n64 accumulator (unused, and removed, at other widths)

      // `pending`: the last slot this warpgroup read whose wgmma group may still be running.
      int it = 0, pending = -1;
      auto release = [&](int index) {
        if (lane == 0) {
          mbar_arrive(empty_bar + 8 * (uint32_t(index) % kStages));
          if constexpr (CLUSTER == 2) mbar_arrive_remote(empty_bar + 8 * (uint32_t(index) % kStages), rank ^ 1);
        }
      };
#pragma unroll 1
      for (int j = 0; j < nchunks; ++j) {
        float2 bias[8];
        load_bias1(p, j, wg, lane, bias);
        float acc1[32];
        stage1<S::kKPanels>(acc1, x_s, ring, full_bar, wg, it, pending, release);
        // H buffer j % 2 was last read by stage 2 of chunk j - 2, which both warpgroups retired
        // before chunk j - 1's barrier.
        store_h(h_smem + (j & 1) * kHChunkBytes + wg * kPanel, acc1, bias, wq, lane);
        fence_proxy_async_smem();
        consumer_sync();  // the whole H chunk is written

        // stage 2 (chunk j's H buffer j % 2)
        stage2<S>(acc2, acc2s, h_s + (j & 1) * kHChunkBytes, ring, full_bar, wg, j, it, pending, release);
      }
      wgmma_wait<0>();
#pragma unroll
      for (int a = 0; a < S::kAccs; ++a) fence_registers(acc2[a]);
      if constexpr (S::kMixed) fence_registers(acc2s);

      // epilogue: out = acc2 + b + x (store_out), at the warpgroup's kN2-column part a
      const int r0 = p0 + wq * 16 + (lane >> 2);
      if constexpr (S::kMixed) {  // warpgroup 0: n128 -> columns 0.., n64 -> 128..; warpgroup 1: n64 -> 192.., n128 -> 256..
        store_out<C>(p, acc2[0], wg ? 256 : 0, 0, r0, lane);
        store_out<C>(p, acc2s, wg ? 192 : 128, 0, r0, lane);
      } else {
#pragma unroll
        for (int a = 0; a < S::kAccs; ++a) store_out<C>(p, acc2[a], S::kOutCols * wg, S::kN2 * a, r0, lane);
      }
    }
  }
  // no CTA of a cluster exits while its partner may still arrive on its barriers
  if constexpr (CLUSTER == 2) {
    __syncwarp();  // the producer warp's lanes reconverge (barrier.cluster is .aligned)
    cluster_sync();
  }
#endif
}

// ---- variant 3 (C <= 256): persistent tiles, the next tile's conv on its own warpgroup ----
// 512 threads: consumer warpgroups 0 and 1 (the FFN and the epilogue of the current tile, as above),
// the producer warpgroup 2 (one thread streams the weight slots over all of the CTA's tiles), and the
// conv warpgroup 3, which computes the next tile's X = conv(x) + b_c into registers while the consumers
// run the current tile's FFN, then writes it into the one X buffer once the consumers have retired the
// current tile's last stage-1 product (mbarrier x_empty) and signals x_full (the first tile's conv is the
// consumers' own phase A, as in variant 0, while the conv warpgroup starts on the second). The CTA walks tiles
// blockIdx.x, + gridDim.x, ...; gridDim.x <= the SM count. Shared memory: variant 2's layout (the second
// halo buffer after the ring is the conv warpgroup's halo) + the two X barriers.
constexpr int kThreads3 = kThreads + 128;      // + the conv warpgroup
constexpr int kConvThread0 = kThreads;         // its first thread
constexpr int kConvWarp0 = kConvThread0 / 32;
constexpr int kConvThreads = 128;
constexpr int kConvBarrier = 2;                // named barrier of the conv warpgroup
// setmaxnreg split of the 65,536 registers (128 per thread at entry with 512 threads):
// 2 x 128 x kRegConsumer3 + 128 x kRegProducer3 + 128 x kRegConv3 <= 65,536.
constexpr int kRegConsumer3 = 168, kRegProducer3 = 32, kRegConv3 = 144;
static_assert(2 * kRegConsumer3 + kRegProducer3 + kRegConv3 <= 512, "setmaxnreg split");
// Every warp starts at 65,536 / 512 = 128 (__launch_bounds__(kThreads3, 1)). setmaxnreg.dec may only
// lower a warp's count and setmaxnreg.inc only raise it: the conv warpgroup goes 128 -> 144, an *inc*
// (a dec to 144 was USETMAXREG.DEALLOC 0x90 above the warp's 128: an illegal instruction on every launch).
constexpr int kRegEntry3 = 65536 / kThreads3;
static_assert(kRegProducer3 < kRegEntry3 && kRegConsumer3 > kRegEntry3 && kRegConv3 > kRegEntry3,
              "variant 3: the producer's setmaxnreg is a dec, the consumers' and the conv warpgroup's are incs");

template <int C>
struct Shape3 {
  using S = Shape<C, true>;
  static constexpr int kHaloOffset = S::kHalo2Offset;           // the conv warpgroup's halo (32 KB)
  static constexpr int kBarOffset = S::kBarOffset;              // the ring's full / empty barriers
  static constexpr int kXBarOffset = S::kBarOffset + 2 * kStages * 8;  // x_full, x_empty
  static constexpr int kSmemBytes = S::kSmemBytes + 16;
  static_assert(C <= 256, "variant 3 needs variant 2's halo buffer (C <= 256)");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

// ---- variant 5 (C = 64, 128): variant 3 with the conv warpgroup's halo prefetched one unit ahead ----
// The conv warpgroup walks units u = (k - 1) C/64 + s (tile k >= 1, 64-channel slice s) and loads unit u + 1
// into halo buffer (u + 1) % 2 while it computes unit u (NOTES.md "Variant 5"). Each buffer holds the window
// the taps read (pixels p0 - W - 1 .. p0 + 64 + W at halo index q = pixel - row_lo W, as C = 64 loads it in
// every variant) addressed from buffer - 128 d, d = the window's first index rounded down to a multiple of 8
// (the swizzle's row % 8 is unchanged): indices d .. qb, qb - d <= 2 W + 66 + 7 = 185 pixels at W = 56.
// Shared memory (232,448 B per block, opt-in, on the H200): X (C / 64 x 8 KB) + H 32 KB + ring 128 KB + two
// halo buffers 2 x 24 KB + a zero pixel 128 B + 16 ring barriers + x_full / x_empty + 1024 B alignment slack:
// 222,480 B at C = 64, 230,672 B at C = 128 (C = 256's 32 KB X does not fit).
constexpr int kHalo5Pixels = 192;
constexpr int kHalo5Bytes = kHalo5Pixels * 128;
static_assert(2 * kMaxWidth64 + 66 + 7 <= kHalo5Pixels && 2 * kMaxWidth + 66 + 7 <= kHalo5Pixels,
              "variant 5: a tile's shifted window fits a halo buffer");

template <int C>
struct Shape5 {
  using S = Shape<C, true>;  // X, H and the ring at variant 2's (and 3's) offsets
  static constexpr int kHaloOffset = S::kRingOffset + kStages * kSlotBytes;  // two buffers of kHalo5Bytes
  static constexpr int kZeroOffset = kHaloOffset + 2 * kHalo5Bytes;          // one zero pixel for both
  static constexpr int kBarOffset = kZeroOffset + 128;
  static constexpr int kXBarOffset = kBarOffset + 2 * kStages * 8;  // x_full, x_empty
  static constexpr int kSmemBytes = 1024 + kXBarOffset + 16;
  static_assert(C == 64 || C == 128, "variant 5: C = 64 and 128");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
  static_assert(kSmemBytes == (C == 64 ? 222480 : 230672), "the layout NOTES.md and convfirst_c512.py state");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void conv_sync() { named_barrier_sync(kConvBarrier, kConvThreads); }

// The same pointer, hidden from the optimiser (it cannot hoist what is computed from it).
template <typename T>
__device__ __forceinline__ T* opaque(T* ptr) {
  uint64_t v = reinterpret_cast<uint64_t>(ptr);
  asm volatile("mov.b64 %0, %0;\n" : "+l"(v));
  return reinterpret_cast<T*>(v);
}

// The conv warpgroup: X of the 64-pixel tile at p0, as mma C fragments packed to half2, into xr:
// xr[s][mt][gi][hr] = X[16 mt + lane / 4 + 8 hr, 64 s + 8 (2 cw + gi) + 2 (lane % 4) + {0, 1}] for conv
// warp cw (group pair cw of every slice, all four m-tiles). One halo buffer: each slice loads, waits,
// computes; the warpgroup's latency hides behind the consumers' FFN.
template <int C>
__device__ __forceinline__ void conv_tile(const Params& p, uint32_t halo, uint32_t zero_addr, int p0,
                                          uint32_t (&xr)[C / 64][4][2][2]) {
  const int t = threadIdx.x - kConvThread0, lane = t & 31, cw = t >> 5;
  const int W = p.W, H = p.H, rows_total = p.P / W;
  const int p_last = min(p0 + kTilePixels, p.P) - 1;
  const int row_lo = max(p0 / W - 1, 0);
  const int row_hi = min(p_last / W + 1, rows_total - 1);
  const int npix = (row_hi - row_lo + 1) * W;
  const int local_group = cw * 2 + (lane >> 4);
#pragma unroll
  for (int s = 0; s < C / 64; ++s) {
    conv_sync();  // every conv warp has read the previous slice's halo (and the zero pixel is written)
    // Opaque copies of the slice's pointers: otherwise the compiler computes every slice's pointers
    // once per tile and keeps them live beside xr (spills).
    const __half* xs = opaque(p.x) + s * 64;
    if constexpr (C == 64) {  // only the window the taps read (as conv_phase at C = 64)
      const int qa = max(p0 - W - 1, row_lo * W) - row_lo * W;
      const int qb = min(p0 + kTilePixels + W + 1, (row_hi + 1) * W) - row_lo * W;
      for (int i = t; i < (qb - qa) * 8; i += kConvThreads) {
        const int q = qa + (i >> 3), c = i & 7;
        cp_async16(halo + panel_offset(q, c), xs + ((size_t)row_lo * W + q) * C + c * 8, true);
      }
    } else {
      for (int i = t; i < npix * 8; i += kConvThreads) {
        const int q = i >> 3, c = i & 7;
        cp_async16(halo + panel_offset(q, c), xs + ((size_t)row_lo * W + q) * C + c * 8, true);
      }
    }
    cp_async_commit();
    const int g0 = s * 8 + cw * 2;  // global index of the pair's first group
    const uint32_t* wsrc = opaque(p.conv_w) + ((size_t)g0 * 9 * 32 + lane);
    uint32_t bfrag[2][9];
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      bfrag[0][tap] = __ldg(wsrc + tap * 32);
      bfrag[1][tap] = __ldg(wsrc + (9 + tap) * 32);
    }
    const float* bsrc = opaque(p.conv_b) + (g0 * 8 + (lane & 3) * 2);
    float2 cb[2];
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) cb[gi] = __ldg(reinterpret_cast<const float2*>(bsrc + gi * 8));
    cp_async_wait<0>();
    conv_sync();
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // m-tiles 2 half, 2 half + 1: two interleaved nine-tap chains
      // The tap addresses are the same for every slice; kept, 36 of them would outlive the slice loop
      // (which is unrolled for xr) and spill. An opaque copy of p0 makes each (slice, half) recompute them.
      int p0h;
      asm volatile("mov.b32 %0, %1;\n" : "=r"(p0h) : "r"(p0));
      float acc[2][2][4] = {};
      conv_mtiles<1>(acc, p.P, W, H, p0h, 2 * half, lane, row_lo, halo, zero_addr, local_group, bfrag);
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int gi = 0; gi < 2; ++gi) {
          xr[s][2 * half + j][gi][0] = pack_half2(acc[j][gi][0] + cb[gi].x, acc[j][gi][1] + cb[gi].y);
          xr[s][2 * half + j][gi][1] = pack_half2(acc[j][gi][2] + cb[gi].x, acc[j][gi][3] + cb[gi].y);
        }
    }
  }
}

// xr (conv_tile's layout) into the X panels: slice s is panel s, group 2 cw + gi its 16-byte chunk.
template <int C>
__device__ __forceinline__ void store_x(uint8_t* x_panels, const uint32_t (&xr)[C / 64][4][2][2]) {
  const int t = threadIdx.x - kConvThread0, lane = t & 31, cw = t >> 5;
  const int within = (lane & 3) * 4;
#pragma unroll
  for (int s = 0; s < C / 64; ++s)
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int gi = 0; gi < 2; ++gi) {
        const int row = mt * 16 + (lane >> 2), chunk = cw * 2 + gi;
        *reinterpret_cast<uint32_t*>(x_panels + s * kPanel + panel_offset(row, chunk) + within) = xr[s][mt][gi][0];
        *reinterpret_cast<uint32_t*>(x_panels + s * kPanel + panel_offset(row + 8, chunk) + within) = xr[s][mt][gi][1];
      }
}

// Variant 5's conv warpgroup, tiles 1 .. my_tiles - 1 of the CTA (see Shape5): per unit u (tile k, slice s)
// wait for its loads (issued one unit earlier), one conv_sync (everyone's copies of u visible; every warp
// done with unit u - 1, so buffer (u + 1) % 2 is free), issue unit u + 1 (its own commit group, empty past
// the last), then the taps of u, exactly as conv_tile; after a tile's last slice the X handoff of variant 3.
template <int C>
__device__ __forceinline__ void conv_stream(const Params& p, uint32_t halo0, uint32_t zero_addr, uint8_t* x_panels,
                                            uint32_t x_full, uint32_t x_empty, int my_tiles) {
  constexpr int kSlices = C / 64;
  const int t = threadIdx.x - kConvThread0, lane = t & 31, cw = t >> 5;
  const int W = p.W, H = p.H, rows_total = p.P / W;
  const int local_group = cw * 2 + (lane >> 4);
  const int nunits = (my_tiles - 1) * kSlices;
  // the tile at p0: its first halo row, and its window qa .. qb - 1 of halo indices (conv_phase at C = 64)
  auto window = [&](int p0, int& row_lo, int& qa, int& qb) {
    const int p_last = min(p0 + kTilePixels, p.P) - 1;
    row_lo = max(p0 / W - 1, 0);
    const int row_hi = min(p_last / W + 1, rows_total - 1);
    qa = max(p0 - W - 1, row_lo * W) - row_lo * W;
    qb = min(p0 + kTilePixels + W + 1, (row_hi + 1) * W) - row_lo * W;
  };
  auto issue = [&](int u) {
    if (u < nunits) {
      const int k = 1 + u / kSlices, s = u % kSlices;
      const int p0 = ((int)blockIdx.x + k * (int)gridDim.x) * kTilePixels;
      int row_lo, qa, qb;
      window(p0, row_lo, qa, qb);
      const uint32_t buf = halo0 + (u & 1) * kHalo5Bytes - (qa & ~7) * 128;
      const __half* xs = opaque(p.x) + ((size_t)row_lo * W) * C + s * 64;
      for (int i = t; i < (qb - qa) * 8; i += kConvThreads) {
        const int q = qa + (i >> 3), c = i & 7;
        cp_async16(buf + panel_offset(q, c), xs + (size_t)q * C + c * 8, true);
      }
    }
    cp_async_commit();
  };
  uint32_t bfrag[2][9];
  float2 cb[2];
  auto load_b = [&](int s) {  // the group pair's nine taps' B fragments and conv bias for slice s
    const int g0 = s * 8 + cw * 2;
    const uint32_t* wsrc = opaque(p.conv_w) + ((size_t)g0 * 9 * 32 + lane);
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      bfrag[0][tap] = __ldg(wsrc + tap * 32);
      bfrag[1][tap] = __ldg(wsrc + (9 + tap) * 32);
    }
    const float* bsrc = opaque(p.conv_b) + (g0 * 8 + (lane & 3) * 2);
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) cb[gi] = __ldg(reinterpret_cast<const float2*>(bsrc + gi * 8));
  };
  if constexpr (kSlices == 1) load_b(0);  // one slice: loaded once for every tile
  uint32_t xr[kSlices][4][2][2];
  issue(0);
  int u = 0;
#pragma unroll 1
  for (int k = 1; k < my_tiles; ++k) {
    const int p0 = ((int)blockIdx.x + k * (int)gridDim.x) * kTilePixels;
#pragma unroll
    for (int s = 0; s < kSlices; ++s, ++u) {
      if constexpr (kSlices > 1) load_b(s);  // in flight during the wait, the sync and the next unit's issue
      cp_async_wait<0>();  // unit u's copies (issued one unit earlier) have landed
      conv_sync();
      issue(u + 1);
      int row_lo, qa, qb;
      window(p0, row_lo, qa, qb);
      const uint32_t halo = halo0 + (u & 1) * kHalo5Bytes - (qa & ~7) * 128;
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // as conv_tile: m-tiles 2 half, 2 half + 1
        int p0h;
        asm volatile("mov.b32 %0, %1;\n" : "=r"(p0h) : "r"(p0));
        float acc[2][2][4] = {};
        conv_mtiles<1>(acc, p.P, W, H, p0h, 2 * half, lane, row_lo, halo, zero_addr, local_group, bfrag);
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int gi = 0; gi < 2; ++gi) {
            xr[s][2 * half + j][gi][0] = pack_half2(acc[j][gi][0] + cb[gi].x, acc[j][gi][1] + cb[gi].y);
            xr[s][2 * half + j][gi][1] = pack_half2(acc[j][gi][2] + cb[gi].x, acc[j][gi][3] + cb[gi].y);
          }
      }
    }
    mbar_wait(x_empty, (k - 1) & 1);  // the consumers' last stage-1 product of tile k - 1 retired
    store_x<C>(x_panels, xr);
    fence_proxy_async_smem();  // X (generic stores) is read by wgmma (async proxy)
    mbar_arrive(x_full);
  }
  cp_async_wait<0>();  // the last (empty) group
}
#endif

// PREFETCH (variant 5, C = 64 and 128): the conv warpgroup's halo prefetched one unit ahead into two
// buffers (conv_stream, Shape5) and, at C = 128, the shortcut loaded at the tile's start.
template <int C, bool PREFETCH = false>
__global__ void __launch_bounds__(kThreads3, 1) convfirst_c512_persistent_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Shape<C, true>;
  using S3 = std::conditional_t<PREFETCH, Shape5<C>, Shape3<C>>;
  constexpr int kXOffset = S::kXOffset, kHOffset = S::kHOffset, kRingOffset = S::kRingOffset;
  constexpr int kBarOffset = S3::kBarOffset, kSlotsPerChunk = S::kSlotsPerChunk;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;  // 1024-aligned for the 128-byte swizzle
  uint8_t* const smem = smem_raw + (base - raw);
  const uint32_t x_s = base + kXOffset, h_s = base + kHOffset, ring = base + kRingOffset;
  const uint32_t full_bar = base + kBarOffset, empty_bar = full_bar + kStages * 8;
  const uint32_t x_full = base + S3::kXBarOffset, x_empty = x_full + 8;
  const int nchunks = p.hidden / kHiddenChunk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int tiles = (p.P + kTilePixels - 1) / kTilePixels;
  const int my_tiles = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar + 8 * s, 1);                // the producer's arrive + the copy's bytes
      mbar_init(empty_bar + 8 * s, kConsumerWarps);  // one arrive per consumer warp
    }
    mbar_init(x_full, kConvThreads);    // every conv thread, after its X stores and proxy fence (tiles 1, 2, ...)
    mbar_init(x_empty, kConsumerWarps); // every consumer warp, after its last stage-1 product of a tile
    fence_barrier_init();
  }
  __syncthreads();

  if (warp >= kConvWarp0) {
    // ---- conv warpgroup: tile k + 1's conv while the consumers run tile k's FFN ----
    setmaxnreg_inc<kRegConv3>();  // 128 -> 144: registers from the producer's release (see kRegEntry3)
    pdl::wait();  // reads x (pdl.h)
    if constexpr (PREFETCH) {
      const int t = threadIdx.x - kConvThread0;
      if (t < 8) reinterpret_cast<uint4*>(smem + S3::kZeroOffset)[t] = make_uint4(0, 0, 0, 0);
      conv_stream<C>(p, base + S3::kHaloOffset, base + S3::kZeroOffset, smem + kXOffset, x_full, x_empty, my_tiles);
    } else {
      const uint32_t halo = base + S3::kHaloOffset, zero_addr = halo + kHaloPixels * 128;
      const int t = threadIdx.x - kConvThread0;
      if (t < 8) reinterpret_cast<uint4*>(smem + S3::kHaloOffset + kHaloPixels * 128)[t] = make_uint4(0, 0, 0, 0);
      uint32_t xr[C / 64][4][2][2];
#pragma unroll 1
      for (int k = 1; k < my_tiles; ++k) {  // tile 0's conv is the consumers' (below)
        conv_tile<C>(p, halo, zero_addr, ((int)blockIdx.x + k * (int)gridDim.x) * kTilePixels, xr);
        mbar_wait(x_empty, (k - 1) & 1);  // the consumers' last stage-1 product of tile k - 1 retired
        store_x<C>(smem + kXOffset, xr);
        fence_proxy_async_smem();  // X (generic stores) is read by wgmma (async proxy)
        mbar_arrive(x_full);
      }
    }
  } else if (warp >= kConsumerWarps) {
    // ---- producer: every tile's slots in order, without a break between tiles ----
    setmaxnreg_dec<kRegProducer3>();
    if (warp == kConsumerWarps && lane == 0) {
      const int nslots = nchunks * kSlotsPerChunk;
      int g = 0;  // stream index over all of this CTA's tiles
      // C = 64 with a tile's slots fitting the ring (hidden <= 512): loaded once, resident for every tile
      int rounds = my_tiles;
      if constexpr (C == 64) rounds = nslots <= kStages && my_tiles > 0 ? 1 : my_tiles;
#pragma unroll 1
      for (int k = 0; k < rounds; ++k) {
#pragma unroll 1
        for (int it = 0; it < nslots; ++it, ++g) {
          const int slot = g % kStages;
          mbar_wait(empty_bar + 8 * slot, ((g / kStages) & 1) ^ 1);
          mbar_arrive_expect_tx(full_bar + 8 * slot, kSlotBytes);
          bulk_copy_g2s(ring + slot * kSlotBytes, p.wpack + (size_t)it * kSlotBytes, kSlotBytes, full_bar + 8 * slot);
        }
      }
    }
  } else {
    // ---- consumers ----
    setmaxnreg_inc<kRegConsumer3>();
    pdl::wait();  // reads x, writes out (pdl.h); the producer's weight slots went ahead
    // wg through a shuffle: warp-uniform to the compiler, so the descriptors built from it stay in uniform registers
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), wq = warp & 3;
    float acc2[S::kAccs][S::kN2 / 2];
    float acc2s[S::kSmallRegs];  // C = 384's (unused here, and removed)
    // `it`: the slot stream index (over all tiles); `pending`: the last slot this warpgroup read whose
    // wgmma group may still be running; `jg`: chunks over all tiles (the H buffer alternates by it).
    int it = 0, pending = -1, jg = 0;
    auto release = [&](int index) {
      if (lane == 0) mbar_arrive(empty_bar + 8 * (uint32_t(index) % kStages));
    };
    // The first tile's conv: the consumers' own phase A (eight warps, the halo in H: double-buffered in
    // its two halves as variant 4 where W <= 18, else single as variant 0), while the conv warpgroup
    // starts on the second tile and the producer fills the ring.
    if (my_tiles > 0) {
      if constexpr (C == 64)  // one slice: nothing to double-buffer
        conv_phase<C, false>(p, smem + kXOffset, smem + kHOffset, nullptr, (int)blockIdx.x * kTilePixels);
      else if (p.W <= kSplitHMaxWidth)
        conv_phase<C, true>(p, smem + kXOffset, smem + kHOffset, smem + kHOffset + kHChunkBytes,
                            (int)blockIdx.x * kTilePixels);
      else
        conv_phase<C, false>(p, smem + kXOffset, smem + kHOffset, nullptr, (int)blockIdx.x * kTilePixels);
      fence_proxy_async_smem();  // X (generic stores) is read by wgmma (async proxy)
      consumer_sync();
    }
#pragma unroll 1
    for (int k = 0; k < my_tiles; ++k) {
      const int p0 = ((int)blockIdx.x + k * (int)gridDim.x) * kTilePixels;
      // PDL: the CTA starts its last tile (after its wait above). A CTA holds a whole SM (512 threads x 128
      // registers), so the dependent's CTAs can only start on SMs this grid leaves: no earlier trigger helps.
      if (k == my_tiles - 1) pdl::launch_dependents();
      // variant 5 at C > 64: the epilogue's shortcut (x, the kernel's input) loads now, its latency behind the FFN
      __half2 sc[PREFETCH ? S::kAccs : 1][S::kN2 / 64 > 0 ? S::kN2 / 64 : 1][8][2];
      if constexpr (PREFETCH && C != 64) {
        const int r0 = p0 + wq * 16 + (lane >> 2);
#pragma unroll
        for (int a = 0; a < S::kAccs; ++a) load_shortcut<C, S::kN2 / 2>(p, sc[a], S::kOutCols * wg, S::kN2 * a, r0, lane);
      }
      if (k > 0) mbar_wait(x_full, (k - 1) & 1);  // the conv warpgroup has written this tile's X
      if constexpr (C == 64) {
        // resident weights (the producer loaded one tile's slots once): every tile reads slots 0 ..
        if (nchunks * kSlotsPerChunk <= kStages) it = 0;
        ffn64_tile(p, x_s, ring, full_bar, smem + kHOffset + (k & 1) * kHChunkBytes, wg, wq, lane, nchunks, p0, it,
                   pending, release, [&](int j) {
                     // the tile's last read of X has retired in this warp: the conv warpgroup may overwrite it
                     if (j == nchunks - 1 && lane == 0) mbar_arrive(x_empty);
                   });
      } else {
#pragma unroll 1
        for (int j = 0; j < nchunks; ++j, ++jg) {
          float2 bias[8];
          load_bias1(p, j, wg, lane, bias);
          float acc1[32];
          stage1<S::kKPanels>(acc1, x_s, ring, full_bar, wg, it, pending, release);
          // the tile's last read of X has retired in this warp: the conv warpgroup may overwrite it
          if (j == nchunks - 1 && lane == 0) mbar_arrive(x_empty);

          // H buffer jg % 2 was last read by stage 2 of global chunk jg - 2, which both warpgroups
          // retired before chunk jg - 1's barrier (also across a tile boundary).
          store_h(smem + kHOffset + (jg & 1) * kHChunkBytes + wg * kPanel, acc1, bias, wq, lane);
          fence_proxy_async_smem();
          consumer_sync();

          stage2<S>(acc2, acc2s, h_s + (jg & 1) * kHChunkBytes, ring, full_bar, wg, j, it, pending, release);
        }
        wgmma_wait<0>();
#pragma unroll
        for (int a = 0; a < S::kAccs; ++a) fence_registers(acc2[a]);
        if (pending >= 0) release(pending);  // the tile's last V slot: the producer refills it during the epilogue
        pending = -1;

        const int r0 = p0 + wq * 16 + (lane >> 2);
        if constexpr (PREFETCH) {
#pragma unroll
          for (int a = 0; a < S::kAccs; ++a) store_out_sc<C>(p, acc2[a], sc[a], S::kOutCols * wg, S::kN2 * a, r0, lane);
        } else {
#pragma unroll
          for (int a = 0; a < S::kAccs; ++a) store_out<C>(p, acc2[a], S::kOutCols * wg, S::kN2 * a, r0, lane);
        }
      }
    }
  }
#endif
}

// ---- variant 6 (C = 64): one tile per consumer warpgroup (NOTES.md "Variant 6") ----
// 512 threads as variant 3: consumer warpgroups 0 and 1, the producer warpgroup 2, the conv warpgroup 3. The CTA's
// local tile k (tiles blockIdx.x + k gridDim.x, as variant 3) belongs to consumer warpgroup k % 2, which runs its whole
// FFN (all 128 hidden channels of every chunk, the whole 64 x 64 output in acc2) and its epilogue alone: no partial sums,
// no barrier between the consumer warpgroups, so their latency chains interleave on the tensor pipe. Inside a warpgroup
// each chunk runs in two 64-wide hidden halves a / b, pipelined: groups S1a(0) S1b(0), then per chunk j
// S2a(j) S1a(j + 1) S2b(j) S1b(j + 1), each ReLU running while the groups before it compute. The conv warpgroup computes
// every tile's X (variant 5's prefetched halo stream, tile 0 included) into X buffer k % 2, with its own x_full / x_empty
// pair per buffer. Weights resident only (hidden <= kPingPongMaxHidden: every slot fits the ring, loaded once; the
// launcher refuses more). Shared memory: two X buffers, the ring, two halo buffers, a zero pixel, the barriers.
constexpr int kRegConsumer6 = 184, kRegProducer6 = 24, kRegConv6 = 120;
static_assert(2 * kRegConsumer6 + kRegProducer6 + kRegConv6 <= 512, "variant 6: setmaxnreg split");
static_assert(kRegProducer6 < kRegEntry3 && kRegConv6 < kRegEntry3 && kRegConsumer6 > kRegEntry3,
              "variant 6: the producer's and the conv warpgroup's setmaxnreg are decs, the consumers' an inc");
static_assert(kPingPongMaxHidden / kHiddenChunk * slots_per_chunk(64) <= kStages, "variant 6: resident weights");
constexpr int kConsumerWarps6 = 4;  // x_empty[b]: the owning warpgroup's warps

struct Shape6 {
  static constexpr int kXOffset = 0;                                // X buffers 0, 1 (8 KB each)
  static constexpr int kRingOffset = 2 * kPanel;                    // 8 slots of 16 KB
  static constexpr int kHaloOffset = kRingOffset + kStages * kSlotBytes;  // two halo buffers (variant 5's)
  static constexpr int kZeroOffset = kHaloOffset + 2 * kHalo5Bytes;       // one zero pixel
  static constexpr int kBarOffset = kZeroOffset + 128;                    // kStages full barriers
  static constexpr int kXBarOffset = kBarOffset + kStages * 8;           // x_full[2], x_empty[2]
  static constexpr int kSmemBytes = 1024 + kXBarOffset + 32;
  static_assert(kRingOffset % 1024 == 0 && kHaloOffset % 1024 == 0 && kHalo5Bytes % 1024 == 0, "swizzle alignment");
  static_assert(kSmemBytes == 197856, "the layout NOTES.md and convfirst_c512.py state");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Variant 6's conv warpgroup: every tile k = 0 .. my_tiles - 1 of the CTA; tile k's halo window in buffer k % 2 (loaded
// one tile ahead, as conv_stream), its X into X buffer k % 2 once x_empty[k % 2] has completed phase k / 2 - 1 (the
// owning warpgroup's last stage-1 read of tile k - 2 retired; k >= 2), then x_full[k % 2].
__device__ __forceinline__ void conv_stream6(const Params& p, uint32_t halo0, uint32_t zero_addr, uint8_t* x0,
                                             uint32_t x_full0, uint32_t x_empty0, int my_tiles) {
  constexpr int C = 64;
  const int t = threadIdx.x - kConvThread0, lane = t & 31, cw = t >> 5;
  const int W = p.W, H = p.H, rows_total = p.P / W;
  const int local_group = cw * 2 + (lane >> 4);
  auto window = [&](int p0, int& row_lo, int& qa, int& qb) {
    const int p_last = min(p0 + kTilePixels, p.P) - 1;
    row_lo = max(p0 / W - 1, 0);
    const int row_hi = min(p_last / W + 1, rows_total - 1);
    qa = max(p0 - W - 1, row_lo * W) - row_lo * W;
    qb = min(p0 + kTilePixels + W + 1, (row_hi + 1) * W) - row_lo * W;
  };
  auto issue = [&](int k) {
    if (k < my_tiles) {
      const int p0 = ((int)blockIdx.x + k * (int)gridDim.x) * kTilePixels;
      int row_lo, qa, qb;
      window(p0, row_lo, qa, qb);
      const uint32_t buf = halo0 + (k & 1) * kHalo5Bytes - (qa & ~7) * 128;
      const __half* xs = opaque(p.x) + ((size_t)row_lo * W) * C;
      for (int i = t; i < (qb - qa) * 8; i += kConvThreads) {
        const int q = qa + (i >> 3), c = i & 7;
        cp_async16(buf + panel_offset(q, c), xs + (size_t)q * C + c * 8, true);
      }
    }
    cp_async_commit();
  };
  uint32_t bfrag[2][9];  // one slice: the pair's B fragments and conv bias for every tile
  float2 cb[2];
  {
    const int g0 = cw * 2;
    const uint32_t* wsrc = p.conv_w + ((size_t)g0 * 9 * 32 + lane);
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      bfrag[0][tap] = __ldg(wsrc + tap * 32);
      bfrag[1][tap] = __ldg(wsrc + (9 + tap) * 32);
    }
    const float* bsrc = p.conv_b + (g0 * 8 + (lane & 3) * 2);
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) cb[gi] = __ldg(reinterpret_cast<const float2*>(bsrc + gi * 8));
  }
  uint32_t xr[1][4][2][2];
  issue(0);
#pragma unroll 1
  for (int k = 0; k < my_tiles; ++k) {
    const int p0 = ((int)blockIdx.x + k * (int)gridDim.x) * kTilePixels;
    cp_async_wait<0>();  // tile k's copies (issued one tile earlier) have landed
    conv_sync();         // everyone's copies visible; every warp done with tile k - 1's taps (buffer (k + 1) % 2)
    issue(k + 1);
    int row_lo, qa, qb;
    window(p0, row_lo, qa, qb);
    const uint32_t halo = halo0 + (k & 1) * kHalo5Bytes - (qa & ~7) * 128;
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // as conv_tile: m-tiles 2 half, 2 half + 1
      int p0h;
      asm volatile("mov.b32 %0, %1;\n" : "=r"(p0h) : "r"(p0));
      float acc[2][2][4] = {};
      conv_mtiles<1>(acc, p.P, W, H, p0h, 2 * half, lane, row_lo, halo, zero_addr, local_group, bfrag);
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int gi = 0; gi < 2; ++gi) {
          xr[0][2 * half + j][gi][0] = pack_half2(acc[j][gi][0] + cb[gi].x, acc[j][gi][1] + cb[gi].y);
          xr[0][2 * half + j][gi][1] = pack_half2(acc[j][gi][2] + cb[gi].x, acc[j][gi][3] + cb[gi].y);
        }
    }
    const int b = k & 1;
    if (k >= 2) mbar_wait(x_empty0 + 8 * b, ((k >> 1) - 1) & 1);  // tile k - 2's last stage-1 read retired
    store_x<C>(x0 + b * kPanel, xr);
    fence_proxy_async_smem();  // X (generic stores) is read by wgmma (async proxy)
    mbar_arrive(x_full0 + 8 * b);
  }
  cp_async_wait<0>();  // the last (empty) group
}

// One consumer warpgroup's FFN of its tile (X at x_s), pipelined by 64-wide hidden halves (see above), into acc2
// (64 x 64: pixel 16 wq + lane / 4 + 8 hr, column 8 n + 2 (lane % 4) + {0, 1} at acc2[4 n + 2 hr + {0, 1}]).
// `x_done` runs once the tile's last stage-1 group (the last read of X) has retired.
template <int NCHUNKS, typename XDone>
__device__ __forceinline__ void ffn64_own(const Params& p, uint32_t x_s, uint32_t ring, int lane,
                                          float (&acc2)[32], XDone&& x_done) {
  constexpr int nchunks = NCHUNKS;  // unrolled: ptxas follows which group each wait retires
  float acc1a[32], acc1b[32];  // the chunk's hidden halves 0..63, 64..127
  uint32_t ha[4][4], hb[4][4];  // their ReLU as stage 2's A fragments (k step ks: hidden 16 ks .. of the half)
  const uint64_t dx = smem_desc_sw128(x_s), dr = smem_desc_sw128(ring);
  auto s1 = [&](float(&acc)[32], int j, int half) {  // U_j rows 64 half .. (slot 2 j)
    const uint64_t db = desc_advance(dr, (2 * j) * kSlotBytes + half * (64 * 128));
    fence_registers(acc);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
      wgmma_m64n64k16_ss(acc, desc_advance(dx, ks * 32), desc_advance(db, ks * 32), ks != 0);
    wgmma_commit();
  };
  auto s2 = [&](uint32_t(&h)[4][4], int j, int half) {  // the V slot's rows 64 half .. (k panel `half`)
    const uint64_t db = desc_advance(dr, (2 * j + 1) * kSlotBytes + half * (64 * 128));
    fence_registers(h);  // (not acc2: the previous group may still accumulate into it)
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_m64n64k16_rs(acc2, h[ks], desc_advance(db, ks * 32), (j | half | ks) != 0);
    wgmma_commit();
  };
  auto relu = [&](uint32_t(&h)[4][4], const float(&acc)[32], const float2(&bias)[8]) {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      h[n >> 1][(n & 1) * 2 + 0] = pack_half2(fmaxf(acc[4 * n + 0] + bias[n].x, 0.f), fmaxf(acc[4 * n + 1] + bias[n].y, 0.f));
      h[n >> 1][(n & 1) * 2 + 1] = pack_half2(fmaxf(acc[4 * n + 2] + bias[n].x, 0.f), fmaxf(acc[4 * n + 3] + bias[n].y, 0.f));
    }
  };
  s1(acc1a, 0, 0);
  s1(acc1b, 0, 1);
#pragma unroll
  for (int j = 0; j < nchunks; ++j) {
    const bool more = j + 1 < nchunks;
    float2 bias[8];
    load_bias1(p, j, 0, lane, bias);  // hidden 128 j + 0 ..
    // pending: S2a(j - 1) S1a(j) S2b(j - 1) S1b(j) (j > 0) or S1a(0) S1b(0): S1a(j) (and S2a(j - 1): ha is free)
    if (j == 0) wgmma_wait<1>();
    else wgmma_wait<2>();
    fence_registers(acc1a);
    relu(ha, acc1a, bias);
    s2(ha, j, 0);
    if (more) s1(acc1a, j + 1, 0);
    load_bias1(p, j, 1, lane, bias);  // hidden 128 j + 64 ..
    // pending: S2b(j - 1) S1b(j) S2a(j) [S1a(j + 1)]: S1b(j) (and S2b(j - 1): hb is free)
    if (more) wgmma_wait<2>();
    else wgmma_wait<1>();
    fence_registers(acc1b);
    if (!more) x_done();
    relu(hb, acc1b, bias);
    s2(hb, j, 1);
    if (more) s1(acc1b, j + 1, 1);
  }
  wgmma_wait<0>();
  fence_registers(acc2);
}
#endif

__global__ void __launch_bounds__(kThreads3, 1) convfirst_c64_pingpong_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S6 = Shape6;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;  // 1024-aligned for the 128-byte swizzle
  uint8_t* const smem = smem_raw + (base - raw);
  const uint32_t ring = base + S6::kRingOffset, full_bar = base + S6::kBarOffset;
  const uint32_t x_full = base + S6::kXBarOffset, x_empty = x_full + 16;  // [2] each
  const int nchunks = p.hidden / kHiddenChunk, nslots = 2 * nchunks;  // slots_per_chunk(64) = 2
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int tiles = (p.P + kTilePixels - 1) / kTilePixels;
  const int my_tiles = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(full_bar + 8 * s, 1);  // the producer's arrive + the copy's bytes
    for (int b = 0; b < 2; ++b) {
      mbar_init(x_full + 8 * b, kConvThreads);       // every conv thread, after its X stores and proxy fence
      mbar_init(x_empty + 8 * b, kConsumerWarps6);   // the owning warpgroup's warps, after the tile's last stage 1
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warp >= kConvWarp0) {
    setmaxnreg_dec<kRegConv6>();
    pdl::wait();  // reads x (pdl.h)
    const int t = threadIdx.x - kConvThread0;
    if (t < 8) reinterpret_cast<uint4*>(smem + S6::kZeroOffset)[t] = make_uint4(0, 0, 0, 0);
    conv_stream6(p, base + S6::kHaloOffset, base + S6::kZeroOffset, smem + S6::kXOffset, x_full, x_empty, my_tiles);
  } else if (warp >= kConsumerWarps) {
    // ---- producer: every slot once (resident for all of the CTA's tiles) ----
    setmaxnreg_dec<kRegProducer6>();
    if (warp == kConsumerWarps && lane == 0 && my_tiles > 0) {
#pragma unroll 1
      for (int s = 0; s < nslots; ++s) {
        mbar_arrive_expect_tx(full_bar + 8 * s, kSlotBytes);
        bulk_copy_g2s(ring + s * kSlotBytes, p.wpack + (size_t)s * kSlotBytes, kSlotBytes, full_bar + 8 * s);
      }
    }
  } else {
    // ---- consumers: warpgroup wg takes local tiles wg, wg + 2, ... ----
    setmaxnreg_inc<kRegConsumer6>();
    pdl::wait();  // reads x, writes out (pdl.h); the producer's weight slots went ahead
    // wg through a shuffle: warp-uniform to the compiler, so the descriptors built from it stay in uniform registers
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), wq = warp & 3;
    const uint32_t x_s = base + S6::kXOffset + wg * kPanel;
    const uint32_t my_full = x_full + 8 * wg, my_empty = x_empty + 8 * wg;
    float2 b2[8];  // the epilogue's bias at columns 8 n + 2 (lane % 4)
#pragma unroll
    for (int n = 0; n < 8; ++n) b2[n] = __ldg(reinterpret_cast<const float2*>(p.b2 + 8 * n + 2 * (lane & 3)));
    if (wg < my_tiles)
#pragma unroll 1
      for (int s = 0; s < nslots; ++s) mbar_wait(full_bar + 8 * s, 0);  // each slot's only fill
    float acc2[32];  // not zeroed: each tile's first stage-2 product runs with scale-d 0
#pragma unroll 1
    for (int k = wg, r = 0; k < my_tiles; k += 2, ++r) {
      const int p0 = ((int)blockIdx.x + k * (int)gridDim.x) * kTilePixels;
      // PDL: the warpgroup starts its last tile (after its wait above); repeats have no effect (pdl.h)
      if (k + 2 >= my_tiles) pdl::launch_dependents();
      const int r0 = p0 + wq * 16 + (lane >> 2);
      __half2 sc[8][2];  // the shortcut, loaded first: its latency hides behind the tile's FFN
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = r0 + 8 * hr, col = 8 * n + 2 * (lane & 3);
          sc[n][hr] = row < p.P ? __ldg(reinterpret_cast<const __half2*>(p.x + (size_t)row * 64 + col)) : __float2half2_rn(0.f);
        }
      mbar_wait(my_full, r & 1);  // the conv warpgroup has written this tile's X
      auto x_done = [&] {
        if (lane == 0) mbar_arrive(my_empty);  // the tile's last read of X retired in this warp
      };
      switch (nchunks) {  // 1 .. 4 (hidden <= kPingPongMaxHidden)
        case 1: ffn64_own<1>(p, x_s, ring, lane, acc2, x_done); break;
        case 2: ffn64_own<2>(p, x_s, ring, lane, acc2, x_done); break;
        case 3: ffn64_own<3>(p, x_s, ring, lane, acc2, x_done); break;
        default: ffn64_own<4>(p, x_s, ring, lane, acc2, x_done); break;
      }
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int col = 8 * n + 2 * (lane & 3);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = r0 + 8 * hr;
          if (row >= p.P) continue;
          const float2 sx = __half22float2(sc[n][hr]);
          const float v0 = acc2[4 * n + 2 * hr] + b2[n].x + sx.x, v1 = acc2[4 * n + 2 * hr + 1] + b2[n].y + sx.y;
          *reinterpret_cast<__half2*>(p.out + (size_t)row * 64 + col) = __floats2half2_rn(v0, v1);
        }
      }
    }
  }
#endif
}

// ---- variant 7 (C = 128, 256): the FFN split by k, stage 2 from registers (NOTES.md "Variant 7") ----
// 384 threads: consumer warpgroups 0 and 1 and the producer warpgroup 2, persistent (tiles blockIdx.x + k gridDim.x, as
// variant 3). Per hidden chunk j consumer warpgroup w computes stage 1 for its 64 hidden columns (acc1 = X . U_j[64w ..]^T,
// m64n64k16 from shared memory, as every variant), packs H_w = ReLU(acc1 + a) into wgmma A fragments in registers, and
// accumulates stage 2 for all C output columns (m64nCk16 with A from registers, B = the V slots of k panel w): no H in
// shared memory and no barrier between the warpgroups per chunk. The two 64 x C partial sums meet once per tile in
// shared memory (X and the 32 KB after it: X is dead once both warpgroups' last stage-1 group retired); warpgroup w
// keeps columns C/2 w .. and runs the epilogue. The conv is the consumers' (a tile's slices as units u = k C/64 + s, the
// halo window of unit u in buffer u % 2, unit u + 1 loading while unit u computes: the next tile's first slice loads
// during this tile's FFN). setmaxnreg: consumers 232 (inc), producer 40 (dec), variant 0's split.
constexpr int kRegConsumer7 = 232, kRegProducer7 = 40;
constexpr int kRegEntry7 = 65536 / kThreads / 8 * 8;  // 168: every warp's count at entry (__launch_bounds__(384, 1))
static_assert(2 * 128 * kRegConsumer7 + 128 * kRegProducer7 <= kThreads * kRegEntry7,
              "variant 7: setmaxnreg split within the block's registers at entry");
static_assert(kRegProducer7 < kRegEntry7 && kRegConsumer7 > kRegEntry7,
              "variant 7: the producer's setmaxnreg is a dec, the consumers' an inc");
constexpr int kHalo7Pixels = 132;  // a tile's shifted window is <= 2 W + 73 pixels (variant 5's scheme)
constexpr int kHalo7Bytes = kHalo7Pixels * 128;
static_assert(2 * kMaxWidth + 66 + 7 <= kHalo7Pixels, "variant 7: a tile's shifted window fits a halo buffer");

template <int C>
struct Shape7 {
  static constexpr int kKPanels = C / 64;                  // U slots per chunk = X panels
  static constexpr int kVBlocks = C / 128;                 // V slots per 64-wide k panel of a chunk
  static constexpr int kSlotsPerChunk = slots_per_chunk(C);
  static constexpr int kXBytes = kKPanels * kPanel;
  static constexpr int kXOffset = 0;                        // X, then the exchange's second half
  static constexpr int kRedBytes = 2 * kXBytes;             // the exchange: two warpgroups x 64 x C/2 fp32
  static constexpr int kRingOffset = kRedBytes;             // 8 slots of 16 KB
  static constexpr int kHaloOffset = kRingOffset + kStages * kSlotBytes;  // two halo buffers
  static constexpr int kZeroOffset = kHaloOffset + 2 * kHalo7Bytes;       // one zero pixel
  static constexpr int kBarOffset = kZeroOffset + 128;                    // full[8], empty[8]
  static constexpr int kSmemBytes = 1024 + kBarOffset + 2 * kStages * 8;
  static_assert(C == 128 || C == 256, "variant 7: C = 128 and 256");
  static_assert(kRedBytes == 2 * kTilePixels * (C / 2) * 4, "the exchange holds both warpgroups' given halves");
  static_assert(kRingOffset % 1024 == 0 && kHalo7Bytes % 128 == 0, "swizzle alignment");
  // at C = 256 a chunk is the whole ring, so its V slots (kp, q) are ring slots 4 + 2 kp + q: a warpgroup's two V
  // slots lie side by side, one n256 B operand; at C = 128 a warpgroup's V is one slot
  static_assert(C != 256 || slots_per_chunk(C) == kStages, "variant 7: n256 B spans two adjacent slots");
  static_assert(C != 128 || kStages % slots_per_chunk(C) == 0, "variant 7: chunks aligned in the ring");
  static_assert(kSmemBytes == (C == 256 ? 231680 : 198912), "the layout NOTES.md and convfirst_c512.py state");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using bf::wgmma_m64n128k16_rs;
using bf::wgmma_m64n256k16_rs;

// Stage 2 of variant 7 by accumulator size: n = 256 (128 registers, C = 256) or n = 128 (64, C = 128).
__device__ __forceinline__ void wgmma_rs7(float (&d)[128], const uint32_t (&a)[4], uint64_t b, int scale_d) {
  wgmma_m64n256k16_rs(d, a, b, scale_d);
}
__device__ __forceinline__ void wgmma_rs7(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int scale_d) {
  wgmma_m64n128k16_rs(d, a, b, scale_d);
}
#endif

template <int C>
__global__ void __launch_bounds__(kThreads, 1) convfirst_c512_ksplit_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S7 = Shape7<C>;
  constexpr int kSlices = C / 64, kVB = S7::kVBlocks, kSlotsPerChunk = S7::kSlotsPerChunk;
  constexpr int kAcc = C / 2;          // acc2 registers per thread: 64 x C over 128 threads
  constexpr int kKeep = kAcc / 2;      // the kept (and the given) half: columns C/2 w ..
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;  // 1024-aligned for the 128-byte swizzle
  uint8_t* const smem = smem_raw + (base - raw);
  const uint32_t x_s = base + S7::kXOffset, ring = base + S7::kRingOffset;
  const uint32_t full_bar = base + S7::kBarOffset, empty_bar = full_bar + kStages * 8;
  const int nchunks = p.hidden / kHiddenChunk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int tiles = (p.P + kTilePixels - 1) / kTilePixels;
  const int my_tiles = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar + 8 * s, 1);                // the producer's arrive + the copy's bytes
      mbar_init(empty_bar + 8 * s, kConsumerWarps);  // one arrive per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warp >= kConsumerWarps) {
    // ---- producer: every tile's slots in order, without a break between tiles ----
    setmaxnreg_dec<kRegProducer7>();
    if (warp == kConsumerWarps && lane == 0) {
      const int nslots = nchunks * kSlotsPerChunk;
      int g = 0;  // stream index over all of this CTA's tiles
#pragma unroll 1
      for (int k = 0; k < my_tiles; ++k) {
#pragma unroll 1
        for (int it = 0; it < nslots; ++it, ++g) {
          const int slot = g % kStages;
          mbar_wait(empty_bar + 8 * slot, ((g / kStages) & 1) ^ 1);
          mbar_arrive_expect_tx(full_bar + 8 * slot, kSlotBytes);
          bulk_copy_g2s(ring + slot * kSlotBytes, p.wpack + (size_t)it * kSlotBytes, kSlotBytes, full_bar + 8 * slot);
        }
      }
    }
  } else {
    // ---- consumers ----
    setmaxnreg_inc<kRegConsumer7>();
    pdl::wait();  // reads x, writes out (pdl.h); the producer's weight slots went ahead
    const int t = threadIdx.x, wg = warp >> 2, wq = warp & 3;
    const int W = p.W, H = p.H;
    const uint32_t halo0 = base + S7::kHaloOffset, zero_addr = base + S7::kZeroOffset;
    if (t < 8) reinterpret_cast<uint4*>(smem + S7::kZeroOffset)[t] = make_uint4(0, 0, 0, 0);  // seen after unit 0's sync
    const int nunits = my_tiles * kSlices;
    // the tile at p0: its first halo row and its window qa .. qb - 1 of halo indices (variant 5's); rows_total is
    // recomputed per call (kept, it would be one more register beside acc2 across the tile loop)
    auto window = [&](int p0, int& row_lo, int& qa, int& qb) {
      int P;
      asm volatile("mov.b32 %0, %1;\n" : "=r"(P) : "r"(p.P));
      const int rows_total = P / W;
      const int p_last = min(p0 + kTilePixels, p.P) - 1;
      row_lo = max(p0 / W - 1, 0);
      const int row_hi = min(p_last / W + 1, rows_total - 1);
      qa = max(p0 - W - 1, row_lo * W) - row_lo * W;
      qb = min(p0 + kTilePixels + W + 1, (row_hi + 1) * W) - row_lo * W;
    };
    auto issue = [&](int u) {  // unit u's halo window into buffer u % 2 (its own commit group; empty past the last)
      if (u < nunits) {
        const int k = u / kSlices, s = u % kSlices;
        const int p0 = ((int)blockIdx.x + k * (int)gridDim.x) * kTilePixels;
        int row_lo, qa, qb;
        window(p0, row_lo, qa, qb);
        const uint32_t buf = halo0 + (u & 1) * kHalo7Bytes - (qa & ~7) * 128;
        const __half* xs = opaque(p.x) + ((size_t)row_lo * W) * C + s * 64;
        for (int i = t; i < (qb - qa) * 8; i += kConsumerThreads) {
          const int q = qa + (i >> 3), c = i & 7;
          cp_async16(buf + panel_offset(q, c), xs + (size_t)q * C + c * 8, true);
        }
      }
      cp_async_commit();
    };
    float acc2[kAcc];  // not zeroed: each tile's first stage-2 product runs with scale-d 0
    // `it`: the slot stream index (over all tiles). `npend`: what this warpgroup read with wgmma groups that may still
    // be running, relative to `next` (the stream index of the slot about to be read, or past the chunk): 1, the U slot
    // next - 1; 2, the kVB V slots of the last stage 2, next - 2 kVB + wg kVB ..; 0, nothing (no register for an index)
    int it = 0, npend = 0;
    auto release = [&](int index) {
      if (lane == 0) mbar_arrive(empty_bar + 8 * (uint32_t(index) % kStages));
    };
    auto release_pending = [&](int next) {
      if (npend == 1) {
        release(next - 1);
      } else if (npend == 2) {
#pragma unroll
        for (int q = 0; q < kVB; ++q) release(next - 2 * kVB + wg * kVB + q);
      }
      npend = 0;
    };
    const int local_group = wq * 2 + (lane >> 4);  // the warp's group pair wq of every slice
    if (my_tiles > 0) issue(0);
    int u = 0;
#pragma unroll 1
    for (int k = 0; k < my_tiles; ++k) {
      const int p0 = ((int)blockIdx.x + k * (int)gridDim.x) * kTilePixels;
      // PDL: the CTA starts its last tile (after its wait above), as variant 3
      if (k == my_tiles - 1) pdl::launch_dependents();
      // ---- conv: X = conv(x) + b_c, slice by slice (variant 0's job split: group pair wq, m-tiles wg and wg + 2) ----
      int row_lo, qa, qb;
      window(p0, row_lo, qa, qb);
#pragma unroll 1
      for (int s = 0; s < kSlices; ++s, ++u) {
        const int g0 = s * 8 + wq * 2;  // global index of the pair's first group
        uint32_t bfrag[2][9];
        const uint32_t* wsrc = opaque(p.conv_w) + ((size_t)g0 * 9 * 32 + lane);  // (opaque: loaded per slice)
#pragma unroll
        for (int tap = 0; tap < 9; ++tap) {
          bfrag[0][tap] = __ldg(wsrc + tap * 32);
          bfrag[1][tap] = __ldg(wsrc + (9 + tap) * 32);
        }
        cp_async_wait<0>();  // unit u's copies (issued one unit earlier) have landed
        // everyone's copies of u visible; every warp done with unit u - 1 (buffer (u + 1) % 2 is free) and, at s = 0,
        // with the previous tile's exchange (X may be written)
        consumer_sync();
        issue(u + 1);
        const uint32_t halo = halo0 + (u & 1) * kHalo7Bytes - (qa & ~7) * 128;
        // an opaque copy of p0: the tap addresses (the same for every slice) are recomputed per slice instead of being
        // kept live beside acc2 across the slice loop
        int p0h;
        asm volatile("mov.b32 %0, %1;\n" : "=r"(p0h) : "r"(p0));
        float acc[2][2][4] = {};
        conv_mtiles<2>(acc, p.P, W, H, p0h, wg, lane, row_lo, halo, zero_addr, local_group, bfrag);
        // the conv bias after the taps (L1 hits after the first tile; four registers fewer during the taps)
        const float* bsrc = opaque(p.conv_b) + (g0 * 8 + (lane & 3) * 2);
        float2 cb[2];
#pragma unroll
        for (int gi = 0; gi < 2; ++gi) cb[gi] = __ldg(reinterpret_cast<const float2*>(bsrc + gi * 8));
        uint8_t* panel = smem + S7::kXOffset + s * kPanel;  // the slice's 64 channels are X panel s
        const int within = (lane & 3) * 4;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int row = (wg + 2 * j) * 16 + (lane >> 2);
#pragma unroll
          for (int gi = 0; gi < 2; ++gi) {
            const int chunk = wq * 2 + gi;
            *reinterpret_cast<uint32_t*>(panel + panel_offset(row, chunk) + within) =
                pack_half2(acc[j][gi][0] + cb[gi].x, acc[j][gi][1] + cb[gi].y);
            *reinterpret_cast<uint32_t*>(panel + panel_offset(row + 8, chunk) + within) =
                pack_half2(acc[j][gi][2] + cb[gi].x, acc[j][gi][3] + cb[gi].y);
          }
        }
      }
      fence_proxy_async_smem();  // X (generic stores) is read by wgmma (async proxy)
      consumer_sync();

      // ---- the FFN, split by k: warpgroup w owns hidden columns 64w .. of every chunk ----
#pragma unroll 1
      for (int j = 0; j < nchunks; ++j) {
        float2 bias[8];
        load_bias1(p, j, wg, lane, bias);
        float acc1[32];
#pragma unroll 1
        for (int kp = 0; kp < kSlices; ++kp, ++it) {  // stage 1: one U slot per 64-wide k panel of X
          const int slot = it % kStages;
          mbar_wait(full_bar + 8 * slot, (it / kStages) & 1);
          fence_registers(acc1);
          wgmma_fence();
          const uint32_t a0 = x_s + kp * kPanel, b0 = ring + slot * kSlotBytes + wg * (64 * 128);
#pragma unroll
          for (int ks = 0; ks < 4; ++ks)
            wgmma_m64n64k16_ss(acc1, smem_desc_sw128(a0 + ks * 32), smem_desc_sw128(b0 + ks * 32), (kp | ks) != 0);
          wgmma_commit();
          wgmma_wait<1>();  // every group but this one has retired (the previous stage 2 too)
          release_pending(it);
          npend = 1;
        }
        wgmma_wait<0>();
        fence_registers(acc1);
        release_pending(it);
        uint32_t h[4][4];  // k step ks: hidden columns 16 ks .. of this warpgroup's 64 (n blocks 2 ks, 2 ks + 1)
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          h[n >> 1][(n & 1) * 2 + 0] = pack_half2(fmaxf(acc1[4 * n + 0] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 1] + bias[n].y, 0.f));
          h[n >> 1][(n & 1) * 2 + 1] = pack_half2(fmaxf(acc1[4 * n + 2] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 3] + bias[n].y, 0.f));
        }
        // stage 2: the chunk's V slots follow its U slots, k panel kp's kVB blocks at it + kp kVB; this warpgroup's are
        // k panel wg's (adjacent in the ring), the other k panel's are released as soon as they are full
        const int mine = it + wg * kVB, theirs = it + (1 - wg) * kVB;
#pragma unroll
        for (int q = 0; q < kVB; ++q) mbar_wait(full_bar + 8 * ((mine + q) % kStages), ((mine + q) / kStages) & 1);
        fence_registers(h);
        wgmma_fence();
        const uint32_t b0 = ring + (mine % kStages) * kSlotBytes;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) wgmma_rs7(acc2, h[ks], smem_desc_sw128(b0 + ks * 32), (j | ks) != 0);
        wgmma_commit();
#pragma unroll
        for (int q = 0; q < kVB; ++q) {
          mbar_wait(full_bar + 8 * ((theirs + q) % kStages), ((theirs + q) / kStages) & 1);
          release(theirs + q);
        }
        npend = 2;
        it += 2 * kVB;
      }
      wgmma_wait<0>();
      fence_registers(acc2);
      release_pending(it);  // the tile's last V slots: the producer refills them during the exchange

      // ---- the two k halves meet: warpgroup w gives acc2[kKeep (1 - w) ..], keeps acc2[kKeep w ..] ----
      consumer_sync();  // both warpgroups' last stage-1 reads of X have retired: the exchange may overwrite it
      const int r0 = p0 + wq * 16 + (lane >> 2), col0 = (C / 2) * wg + 2 * (lane & 3);
      __half2 sc[kKeep / 4][2];
      {
        const int tw = wq * 32 + lane;  // thread tw of one warpgroup holds the same positions as thread tw of the other
        float4* const give = reinterpret_cast<float4*>(smem + S7::kXOffset) + wg * (kKeep / 4) * 128;
        const float4* const take = reinterpret_cast<const float4*>(smem + S7::kXOffset) + (wg ^ 1) * (kKeep / 4) * 128;
#pragma unroll
        for (int i = 0; i < kKeep / 4; ++i) {
          const int lo = 4 * i, hi = kKeep + 4 * i;
          give[i * 128 + tw] = wg ? make_float4(acc2[lo], acc2[lo + 1], acc2[lo + 2], acc2[lo + 3])
                                  : make_float4(acc2[hi], acc2[hi + 1], acc2[hi + 2], acc2[hi + 3]);
        }
        // the epilogue's shortcut (kept columns C/2 wg + 8 n + 2 (lane % 4), rows r0, r0 + 8): in flight during the
        // barrier and the exchange's reads
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const bool in = r0 + 8 * hr < p.P;
          const __half2* xrow = reinterpret_cast<const __half2*>(p.x + (size_t)(r0 + 8 * hr) * C + col0);
#pragma unroll
          for (int n = 0; n < kKeep / 4; ++n) sc[n][hr] = in ? __ldg(xrow + 4 * n) : __float2half2_rn(0.f);
        }
        consumer_sync();
#pragma unroll
        for (int i = 0; i < kKeep / 4; ++i) {  // the kept sums into acc2[0 .. kKeep) (constant indices)
          const int lo = 4 * i, hi = kKeep + 4 * i;
          const float4 v = take[i * 128 + tw];
          acc2[lo] = (wg ? acc2[hi] : acc2[lo]) + v.x;
          acc2[lo + 1] = (wg ? acc2[hi + 1] : acc2[lo + 1]) + v.y;
          acc2[lo + 2] = (wg ? acc2[hi + 2] : acc2[lo + 2]) + v.z;
          acc2[lo + 3] = (wg ? acc2[hi + 3] : acc2[lo + 3]) + v.w;
        }
      }
      // epilogue: out = acc + b + x at columns col0 + 8 n (C/2 wg + 8 n + 2 (lane % 4)), one rounding
      const float2* const bsrc = reinterpret_cast<const float2*>(p.b2 + col0);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        if (r0 + 8 * hr >= p.P) continue;
        __half2* const orow = reinterpret_cast<__half2*>(p.out + (size_t)(r0 + 8 * hr) * C + col0);
#pragma unroll
        for (int n = 0; n < kKeep / 4; ++n) {
          const float2 b = __ldg(bsrc + 4 * n);
          const float2 sx = __half22float2(sc[n][hr]);
          const float v0 = acc2[4 * n + 2 * hr] + b.x + sx.x, v1 = acc2[4 * n + 2 * hr + 1] + b.y + sx.y;
          orow[4 * n] = __floats2half2_rn(v0, v1);
        }
      }
    }
    cp_async_wait<0>();  // the last (empty) group
  }
#endif
}

// ---- variant 8 (C = 256): variant 7's FFN without the conv, the epilogue's operands in shared memory (NOTES.md
// "What binds the C = 256 block", "Next: variant 8") ----
// Two kernels. convfirst_c512_conv8_kernel: X = conv(x) + b_c, one CTA per (64-pixel tile, 64-channel slice), variant 7's
// arithmetic (conv_mtiles<2>, the bias after the taps, one rounding), written into a scratch of ceil(P / 64) tiles x
// C / 64 panels x 8 KB in the fused kernel's 128-byte-swizzled panel layout (rows past P hold b_c, as variant 7's X), so
// that one 32 KB bulk copy lands a tile's X ready for wgmma. convfirst_c512_ffn8_kernel: variant 7's consumers without
// their conv stream; the producer thread loads each tile's X by bulk copy into one of two X buffers (x_full / x_empty),
// the producer warpgroup's three idle warps cp.async the tile's shortcut rows into the tile's X buffer once both
// consumer warpgroups' last stage-1 groups of the tile have retired (x_dead), and b2 once per CTA (sc_full); the
// epilogue reads both from shared memory. The partial sums meet in a 32 KB area in two rounds of 16 KB per warpgroup.
constexpr int kSlices8 = 256 / 64;
constexpr int kConv8Threads = 256;
constexpr int kConv8Smem = kHalo7Bytes + 128 + kPanel;  // halo window, zero pixel, the slice's X panel (staging)
constexpr int kCopierThreads8 = 96;                     // producer warpgroup's warps 1..3

struct Shape8 {
  static constexpr int C = 256;
  static constexpr int kXBytes = kSlices8 * kPanel;                 // one tile's X: 32 KB
  static constexpr int kXOffset = 0;                                // two X buffers
  static constexpr int kRedOffset = 2 * kXBytes;                    // the exchange: 32 KB (two rounds)
  static constexpr int kRedBytes = kXBytes;
  static constexpr int kRingOffset = kRedOffset + kRedBytes;        // 8 slots of 16 KB
  static constexpr int kB2Offset = kRingOffset + kStages * kSlotBytes;  // b2 [C] fp32
  static constexpr int kBarOffset = kB2Offset + C * 4;
  // full[8], empty[8], x_full[2], x_empty[2], x_dead, sc_full
  static constexpr int kBarriers = 2 * kStages + 2 + 2 + 1 + 1;
  static constexpr int kSmemBytes = 1024 + kBarOffset + kBarriers * 8;
  static_assert(kRingOffset % 1024 == 0 && kXBytes % 1024 == 0, "swizzle alignment");
  static_assert(slots_per_chunk(C) == kStages, "variant 8: n256 B spans two adjacent slots (variant 7's)");
  static_assert(2 * kRedBytes == 2 * kTilePixels * (C / 2) * 4, "two rounds of the exchange hold both given halves");
  static_assert(kSmemBytes == 231600, "the layout NOTES.md and convfirst_c512.py state");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

// Bytes of the conv scratch for P pixels at C = 256: whole tiles in the panel layout.
constexpr long long conv8_scratch_bytes(long long pixels) {
  return (pixels + kTilePixels - 1) / kTilePixels * Shape8::kXBytes;
}

template <int C>
__global__ void __launch_bounds__(kConv8Threads) convfirst_c512_conv8_kernel(const Params p, uint8_t* const xconv) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) uint8_t smem_c8[];
  const int t = threadIdx.x, warp = t >> 5, lane = t & 31, wg = warp >> 2, wq = warp & 3;
  const int tile = blockIdx.x, s = blockIdx.y;
  const int W = p.W, H = p.H, p0 = tile * kTilePixels;
  const uint32_t halo_base = smem_addr(smem_c8), zero_addr = halo_base + kHalo7Bytes;
  uint8_t* const panel = smem_c8 + kHalo7Bytes + 128;
  const int rows_total = p.P / W;
  const int p_last = min(p0 + kTilePixels, p.P) - 1;
  const int row_lo = max(p0 / W - 1, 0);
  const int row_hi = min(p_last / W + 1, rows_total - 1);
  const int qa = max(p0 - W - 1, row_lo * W) - row_lo * W;
  const int qb = min(p0 + kTilePixels + W + 1, (row_hi + 1) * W) - row_lo * W;
  const int g0 = s * 8 + wq * 2;  // global index of the warp's group pair
  uint32_t bfrag[2][9];
  const uint32_t* wsrc = p.conv_w + ((size_t)g0 * 9 * 32 + lane);
#pragma unroll
  for (int tap = 0; tap < 9; ++tap) {
    bfrag[0][tap] = __ldg(wsrc + tap * 32);
    bfrag[1][tap] = __ldg(wsrc + (9 + tap) * 32);
  }
  if (t < 8) reinterpret_cast<uint4*>(smem_c8 + kHalo7Bytes)[t] = make_uint4(0, 0, 0, 0);
  pdl::wait();  // x is the previous kernel's output; the scratch was read by the previous fused kernel
  pdl::launch_dependents();
  const uint32_t halo = halo_base - (qa & ~7) * 128;  // variant 5's shifted window (row % 8 of the swizzle kept)
  const __half* xs = p.x + ((size_t)row_lo * W) * C + s * 64;
  for (int i = t; i < (qb - qa) * 8; i += kConv8Threads) {
    const int q = qa + (i >> 3), c = i & 7;
    cp_async16(halo + panel_offset(q, c), xs + (size_t)q * C + c * 8, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  float acc[2][2][4] = {};
  conv_mtiles<2>(acc, p.P, W, H, p0, wg, lane, row_lo, halo, zero_addr, wq * 2 + (lane >> 4), bfrag);
  float2 cb[2];
#pragma unroll
  for (int gi = 0; gi < 2; ++gi) cb[gi] = __ldg(reinterpret_cast<const float2*>(p.conv_b + (g0 + gi) * 8 + (lane & 3) * 2));
  const int within = (lane & 3) * 4;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int row = (wg + 2 * j) * 16 + (lane >> 2);
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) {
      const int chunk = wq * 2 + gi;
      *reinterpret_cast<uint32_t*>(panel + panel_offset(row, chunk) + within) =
          pack_half2(acc[j][gi][0] + cb[gi].x, acc[j][gi][1] + cb[gi].y);
      *reinterpret_cast<uint32_t*>(panel + panel_offset(row + 8, chunk) + within) =
          pack_half2(acc[j][gi][2] + cb[gi].x, acc[j][gi][3] + cb[gi].y);
    }
  }
  __syncthreads();
  // the swizzled panel as it is (the fused kernel's layout): 8 KB, two 16-byte stores per thread, coalesced
  uint4* const dst = reinterpret_cast<uint4*>(xconv + ((size_t)tile * (C / 64) + s) * kPanel);
#pragma unroll
  for (int i = 0; i < kPanel / 16 / kConv8Threads; ++i)
    dst[i * kConv8Threads + t] = reinterpret_cast<const uint4*>(panel)[i * kConv8Threads + t];
#endif
}

// ---- variant 8's conv kernel, version b (CUDA_KERNELS_CONV8B=1; NOTES.md "Variant 8's conv kernel, version b") ----
// One CTA of 256 threads per 64-pixel tile, all four 64-channel slices: conv8's per-output arithmetic exactly (the same
// nine-tap m16n8k8 chain per accumulator, the same A and B fragments, the bias after the taps, one rounding), with the
// work per tile rearranged: the tile's 4 x 128-pixel window lands by cp.async in four regions (one commit group per
// slice, each region with its own zero pixel at the same place), the lane's 2 x 9 ldmatrix addresses are computed once
// per tile and reach slice s by a constant offset (s * kConv8bRegion, an immediate of LDSM), the taps run outer so that
// the four chains of a warp interleave, and slice s's X panel is staged in its own region once every warp has read it.
constexpr int kConv8bRegion = kHalo7Bytes + 128;          // a slice's shifted window, then its zero pixel
constexpr int kConv8bSmem = kSlices8 * kConv8bRegion;     // 68,096 B: 3 CTAs per SM
constexpr int kConv8bCtasPerSm = 3;
constexpr int kConv8bCopySteps = 4;                     // 32 pixels per step: 128 >= a window's 2 W + 66
static_assert(kPanel <= kHalo7Bytes && kConv8bRegion % 128 == 0, "a slice's X panel is staged in its region");
static_assert(kConv8bCtasPerSm * (kConv8bSmem + 1024) <= 228 * 1024, "conv8b: three CTAs per SM");
static_assert(kConv8Threads == 256 && kTilePixels == 64, "conv8b: conv8's job split (8 warps, 4 m-tiles)");

// The lane's ldmatrix row address of each of the nine taps for the 16-pixel m-tile whose lane pixel is `pix` (conv_mtiles'
// addresses: panel_offset(q, local_group) in the shifted window at `halo`, or `zero_addr` for a tap outside the image
// or a pixel past P), with the row / column tests once per pixel instead of once per tap.
__device__ __forceinline__ void conv8b_tap_addrs(uint32_t (&addr)[9], int P, int W, int H, int pix, int row_lo,
                                                 uint32_t halo, uint32_t zero_addr, int local_group) {
  const bool in_range = pix < P;
  const int grow = in_range ? int(unsigned(pix) / unsigned(W)) : 0;  // unsigned: no sign fix-ups
  const int w = in_range ? pix - grow * W : 0;
  const int h = int(unsigned(grow) % unsigned(H));
  const int qc = (grow - row_lo) * W + w;  // the pixel's index in the window rows
  const bool row_ok[3] = {in_range && h > 0, in_range, in_range && h + 1 < H};
  const bool col_ok[3] = {w > 0, true, w + 1 < W};
#pragma unroll
  for (int dy = -1; dy <= 1; ++dy) {
    const int qr = qc + dy * W;  // the tap row's centre
#pragma unroll
    for (int dx = -1; dx <= 1; ++dx) {
      const int q = qr + dx;     // panel_offset(q, local_group) as one shift-add and one xor-and
      addr[3 * (dy + 1) + dx + 1] = row_ok[dy + 1] && col_ok[dx + 1]
                                        ? halo + q * 128 + (((local_group ^ q) & 7) << 4) : zero_addr;
    }
  }
}

// cp.async.wait_group with a count known only after unrolling
__device__ __forceinline__ void cp_async_wait_upto3(int pending) {
  if (pending >= 3) cp_async_wait<3>();
  else if (pending == 2) cp_async_wait<2>();
  else if (pending == 1) cp_async_wait<1>();
  else cp_async_wait<0>();
}

template <int C>
__global__ void __launch_bounds__(kConv8Threads, kConv8bCtasPerSm)
    convfirst_c512_conv8b_kernel(const Params p, uint8_t* const xconv) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(C / 64 == kSlices8, "conv8b: C = 256");
  extern __shared__ __align__(128) uint8_t smem_c8[];
  const int t = threadIdx.x, warp = t >> 5, lane = t & 31, wg = warp >> 2, wq = warp & 3;
  const int tile = blockIdx.x;
  const int W = p.W, H = p.H, p0 = tile * kTilePixels;
  const unsigned uw = W;  // unsigned divisions (every operand >= 0): no sign fix-ups
  const int rows_total = int(unsigned(p.P) / uw);
  const int p_last = min(p0 + kTilePixels, p.P) - 1;
  const int row_lo = max(int(unsigned(p0) / uw) - 1, 0);
  const int row_hi = min(int(unsigned(p_last) / uw) + 1, rows_total - 1);
  const int qa = max(p0 - W - 1, row_lo * W) - row_lo * W;
  const int qb = min(p0 + kTilePixels + W + 1, (row_hi + 1) * W) - row_lo * W;
  const uint32_t base = smem_addr(smem_c8);
  const uint32_t halo = base - (qa & ~7) * 128;  // conv8's shifted window in region 0 (row % 8 of the swizzle kept)
  // the lane's tap addresses for m-tiles wg and wg + 2 (conv8's job split: group pair wq, lanes 16..31 the second group)
  uint32_t addr[2][9];
#pragma unroll
  for (int j = 0; j < 2; ++j)
    conv8b_tap_addrs(addr[j], p.P, W, H, p0 + (wg + 2 * j) * 16 + (lane & 15), row_lo, halo, base + kHalo7Bytes,
                     wq * 2 + (lane >> 4));
  if (t < 8 * kSlices8)  // the four zero pixels
    reinterpret_cast<uint4*>(smem_c8 + (t >> 3) * kConv8bRegion + kHalo7Bytes)[t & 7] = make_uint4(0, 0, 0, 0);
  pdl::wait();  // x is the previous kernel's output; the scratch was read by the previous fused kernel
  pdl::launch_dependents();
  // the window, slice by slice (one commit group each): thread t copies 16-byte chunk t % 8 of pixels qa + t / 8 + 32 k,
  // whose swizzled place advances by 32 rows (q % 8 fixed) and whose source by 32 pixels
  {
    static_assert(32 * kConv8bCopySteps >= 2 * kMaxWidth + 66, "conv8b: the copy steps cover a window");
    const int q1 = qa + (t >> 3), c = t & 7, n = qb - q1;
    const uint32_t dst = halo + panel_offset(q1, c);
    const __half* const src = p.x + ((size_t)row_lo * W + q1) * C + c * 8;
#pragma unroll
    for (int s = 0; s < kSlices8; ++s) {
#pragma unroll
      for (int k = 0; k < kConv8bCopySteps; ++k)
        if (32 * k < n) cp_async16(dst + s * kConv8bRegion + k * 32 * 128, src + k * 32 * C + s * 64, true);
      cp_async_commit();
    }
  }
  const uint32_t* wsrc = p.conv_w + ((size_t)(wq * 2) * 9 * 32 + lane);  // + 8 groups per slice
  const float* bsrc = p.conv_b + (wq * 2 * 8 + (lane & 3) * 2);           // + 64 channels per slice
  const int within = (lane & 3) * 4;
  uint32_t bfrag[2][9];  // group pair s * 8 + 2 wq (conv8's g0) of slice s; slice s + 1's loaded after slice s's taps
  auto load_bfrag = [&](const uint32_t* src) {
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      bfrag[0][tap] = __ldg(src + tap * 32);
      bfrag[1][tap] = __ldg(src + (9 + tap) * 32);
    }
  };
  load_bfrag(wsrc);
#pragma unroll 1
  for (int s = 0; s < kSlices8; ++s, wsrc += 8 * 9 * 32, bsrc += 64) {
    float2 cb[2];
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) cb[gi] = __ldg(reinterpret_cast<const float2*>(bsrc + gi * 8));
    cp_async_wait_upto3(kSlices8 - 1 - s);  // slice s's window has landed (later slices may still be in flight)
    __syncthreads();                        // ... for every thread; and slice s - 1's X panel is staged
    if (s > 0) {  // slice s - 1's X panel, 8 KB, two coalesced 16-byte stores per thread
      const uint4* const src = reinterpret_cast<const uint4*>(smem_c8 + (s - 1) * kConv8bRegion);
      uint4* const dst = reinterpret_cast<uint4*>(xconv + ((size_t)tile * kSlices8 + s - 1) * kPanel);
#pragma unroll
      for (int i = 0; i < kPanel / 16 / kConv8Threads; ++i) dst[i * kConv8Threads + t] = src[i * kConv8Threads + t];
    }
    float acc[2][2][4] = {};
#pragma unroll
    for (int tap = 0; tap < 9; ++tap)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t a[4];
        ldmatrix_x4(a, addr[j][tap] + s * kConv8bRegion);
        mma_m16n8k8(acc[j][0], a[0], a[1], bfrag[0][tap]);
        mma_m16n8k8(acc[j][1], a[2], a[3], bfrag[1][tap]);
      }
    if (s + 1 < kSlices8) load_bfrag(wsrc + 8 * 9 * 32);  // in flight across this slice's staging and barriers
    __syncthreads();  // every warp has read slice s's window: its region takes the slice's X panel
    uint8_t* const panel = smem_c8 + s * kConv8bRegion;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = (wg + 2 * j) * 16 + (lane >> 2);
#pragma unroll
      for (int gi = 0; gi < 2; ++gi) {
        const int chunk = wq * 2 + gi;
        *reinterpret_cast<uint32_t*>(panel + panel_offset(row, chunk) + within) =
            pack_half2(acc[j][gi][0] + cb[gi].x, acc[j][gi][1] + cb[gi].y);
        *reinterpret_cast<uint32_t*>(panel + panel_offset(row + 8, chunk) + within) =
            pack_half2(acc[j][gi][2] + cb[gi].x, acc[j][gi][3] + cb[gi].y);
      }
    }
  }
  __syncthreads();
  {  // the last slice's X panel
    const uint4* const src = reinterpret_cast<const uint4*>(smem_c8 + (kSlices8 - 1) * kConv8bRegion);
    uint4* const dst = reinterpret_cast<uint4*>(xconv + ((size_t)tile * kSlices8 + kSlices8 - 1) * kPanel);
#pragma unroll
    for (int i = 0; i < kPanel / 16 / kConv8Threads; ++i) dst[i * kConv8Threads + t] = src[i * kConv8Threads + t];
  }
#endif
}

__global__ void __launch_bounds__(kThreads, 1) convfirst_c512_ffn8_kernel(const Params p, const uint8_t* const xconv) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S8 = Shape8;
  constexpr int C = S8::C;
  constexpr int kSlices = kSlices8, kVB = C / 128, kSlotsPerChunk = kStages;  // Shape8: a chunk is the ring
  constexpr int kAcc = C / 2;      // acc2 registers per thread
  constexpr int kKeep = kAcc / 2;  // the kept (and the given) half
  constexpr int kRound = kKeep / 8;  // float4s given per thread per round of the exchange
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  uint8_t* const smem = smem_raw + (base - raw);
  const uint32_t ring = base + S8::kRingOffset;
  const uint32_t full_bar = base + S8::kBarOffset, empty_bar = full_bar + kStages * 8;
  const uint32_t xfull_bar = empty_bar + kStages * 8, xempty_bar = xfull_bar + 16, xdead_bar = xempty_bar + 16,
                 scfull_bar = xdead_bar + 8;
  const int nchunks = p.hidden / kHiddenChunk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int tiles = (p.P + kTilePixels - 1) / kTilePixels;
  const int my_tiles = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar + 8 * s, 1);
      mbar_init(empty_bar + 8 * s, kConsumerWarps);
    }
    for (int b = 0; b < 2; ++b) {
      mbar_init(xfull_bar + 8 * b, 1);                // the producer's arrive + the copy's bytes
      mbar_init(xempty_bar + 8 * b, kConsumerWarps);  // every consumer warp done with the tile's shortcut
    }
    mbar_init(xdead_bar, kConsumerWarps);   // every consumer warp's last stage-1 group of the tile retired
    mbar_init(scfull_bar, kCopierThreads8);  // every copier thread's shortcut (and b2) copies landed
    fence_barrier_init();
  }
  __syncthreads();

  if (warp >= kConsumerWarps) {
    setmaxnreg_dec<kRegProducer7>();
    if (warp == kConsumerWarps) {
      if (lane == 0) {
        // ---- producer: every tile's weight slots without a break; tile k + 1's X after tile k's first chunk ----
        const int nslots = nchunks * kSlotsPerChunk;
        auto issue_x = [&](int kk) {  // tile kk's X into buffer kk % 2
          const int b = kk & 1;
          if (kk >= 2) mbar_wait(xempty_bar + 8 * b, ((kk >> 1) & 1) ^ 1);  // tile kk - 2's epilogue is done with it
          mbar_arrive_expect_tx(xfull_bar + 8 * b, S8::kXBytes);
          bulk_copy_g2s(base + S8::kXOffset + b * S8::kXBytes,
                        xconv + (size_t)((int)blockIdx.x + kk * (int)gridDim.x) * S8::kXBytes, S8::kXBytes,
                        xfull_bar + 8 * b);
        };
        auto after_first_chunk = [&](int k) {
          if (k == 0) {
            pdl::wait();  // the scratch is the conv kernel's output
            issue_x(0);
            if (my_tiles > 1) issue_x(1);
          } else if (k + 1 < my_tiles) {
            issue_x(k + 1);
          }
        };
        int g = 0;
#pragma unroll 1
        for (int k = 0; k < my_tiles; ++k) {
#pragma unroll 1
          for (int it = 0; it < nslots; ++it, ++g) {
            if (it == kSlotsPerChunk) after_first_chunk(k);
            const int slot = g % kStages;
            mbar_wait(empty_bar + 8 * slot, ((g / kStages) & 1) ^ 1);
            mbar_arrive_expect_tx(full_bar + 8 * slot, kSlotBytes);
            bulk_copy_g2s(ring + slot * kSlotBytes, p.wpack + (size_t)it * kSlotBytes, kSlotBytes, full_bar + 8 * slot);
          }
          if (nslots == kSlotsPerChunk) after_first_chunk(k);
        }
      }
    } else {
      // ---- copiers (warps 9..11): b2 once, then per tile the shortcut rows into the tile's dead X buffer ----
      const int ct = threadIdx.x - (kConsumerThreads + 32);
      pdl::wait();  // x is the previous kernel's output
#pragma unroll 1
      for (int k = 0; k < my_tiles; ++k) {
        if (k == 0)
#pragma unroll 1
          for (int i = ct; i < C * 4 / 16; i += kCopierThreads8)
            cp_async16(base + S8::kB2Offset + i * 16, p.b2 + i * 4, true);
        const int p0 = ((int)blockIdx.x + k * (int)gridDim.x) * kTilePixels;
        const uint32_t xb = base + S8::kXOffset + (k & 1) * S8::kXBytes;
        mbar_wait(xdead_bar, k & 1);
        // a warp copies whole 512-byte rows (warp w - 9: rows w - 9, w - 6, ...), lane = the row's 16-byte chunk
        static_assert(C / 8 == 32 && kCopierThreads8 % 32 == 0, "variant 8: one shortcut row per copier warp");
#pragma unroll 1
        for (int row = ct >> 5; row < kTilePixels; row += kCopierThreads8 / 32) {
          const bool in = p0 + row < p.P;
          cp_async16(xb + (lane >> 3) * kPanel + panel_offset(row, lane & 7),
                     p.x + (size_t)(in ? p0 + row : 0) * C + lane * 8, in);
        }
        cp_async_commit();
        cp_async_wait<0>();
        fence_proxy_async_smem();  // the buffer is written next by a bulk copy (tile k + 2's X)
        mbar_arrive(scfull_bar);
      }
    }
  } else {
    // ---- consumers ----
    setmaxnreg_inc<kRegConsumer7>();
    pdl::wait();  // writes out (pdl.h)
    // wg through a shuffle: the compiler then knows it is warp-uniform (CUTLASS's canonical_warp_group_idx), so the
    // descriptors below stay in uniform registers and each HGMMA takes them without R2UR (desc_advance)
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), wq = warp & 3;
    float acc2[kAcc];  // not zeroed: each tile's first stage-2 product runs with scale-d 0
    // A chunk is the whole ring (4 U slots, then 4 V slots; Shape8), so every chunk starts at slot 0: the slots are
    // constants of the unrolled loops and a chunk's parity is the chunk count's. The descriptors are built once and
    // advanced by constants (desc_advance; NOTES.md "Session 9": variant 7's loop
    // spent ~99 instructions per k panel rebuilding them and the slot arithmetic, for 4 HGMMA).
    static_assert(kSlices + 2 * kVB == kStages, "variant 8: a chunk is the ring, U slots then V slots");
    constexpr int kMine = kSlices;  // this warpgroup's V slots: kMine + wg kVB + q
    const uint64_t du = smem_desc_sw128(ring + wg * (64 * 128));
    const uint64_t dv = smem_desc_sw128(ring + (kMine + wg * kVB) * kSlotBytes);
    const uint32_t mine_bar = full_bar + 8 * (kMine + wg * kVB), theirs_bar = full_bar + 8 * (kMine + (1 - wg) * kVB);
    uint32_t phase = 0;  // the ring's parity in the current chunk
    bool v_pending = false;  // this warpgroup's V slots of the previous chunk, not yet released
    auto release = [&](uint32_t bar) {  // the empty barrier of the slot whose full barrier is `bar`
      if (lane == 0) mbar_arrive(bar + kStages * 8);
    };
    auto release_v = [&]() {
      if (v_pending) {
#pragma unroll
        for (int q = 0; q < kVB; ++q) release(mine_bar + 8 * q);
      }
      v_pending = false;
    };
#pragma unroll 1
    for (int k = 0; k < my_tiles; ++k) {
      const int p0 = ((int)blockIdx.x + k * (int)gridDim.x) * kTilePixels;
      if (k == my_tiles - 1) pdl::launch_dependents();  // the CTA starts its last tile (variant 3's)
      const int b = k & 1;
      const uint32_t x_s = base + S8::kXOffset + b * S8::kXBytes;
      const uint64_t dx = smem_desc_sw128(x_s);
      mbar_wait(xfull_bar + 8 * b, (k >> 1) & 1);  // tile k's X has landed

      // ---- the FFN, split by k (variant 7's order of products and releases) ----
#pragma unroll 1
      for (int j = 0; j < nchunks; ++j) {
        float2 bias[8];
        load_bias1(p, j, wg, lane, bias);
        float acc1[32];
#pragma unroll
        for (int kp = 0; kp < kSlices; ++kp) {
          mbar_wait(full_bar + 8 * kp, phase);
          fence_registers(acc1);
          wgmma_fence();
#pragma unroll
          for (int ks = 0; ks < 4; ++ks)
            wgmma_m64n64k16_ss(acc1, desc_advance(dx, kp * kPanel + ks * 32), desc_advance(du, kp * kSlotBytes + ks * 32),
                               (kp | ks) != 0);
          wgmma_commit();
          wgmma_wait<1>();  // every group but this one has retired: the previous slot's (or chunk's V) reads are done
          if (kp == 0) {
            release_v();
          } else {
            release(full_bar + 8 * (kp - 1));
          }
        }
        wgmma_wait<0>();
        fence_registers(acc1);
        release(full_bar + 8 * (kSlices - 1));
        if (j == nchunks - 1 && lane == 0) mbar_arrive(xdead_bar);  // this warp's reads of tile k's X are done
        uint32_t h[4][4];
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          h[n >> 1][(n & 1) * 2 + 0] = pack_half2(fmaxf(acc1[4 * n + 0] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 1] + bias[n].y, 0.f));
          h[n >> 1][(n & 1) * 2 + 1] = pack_half2(fmaxf(acc1[4 * n + 2] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 3] + bias[n].y, 0.f));
        }
#pragma unroll
        for (int q = 0; q < kVB; ++q) mbar_wait(mine_bar + 8 * q, phase);
        fence_registers(h);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) wgmma_rs7(acc2, h[ks], desc_advance(dv, ks * 32), (j | ks) != 0);
        wgmma_commit();
#pragma unroll
        for (int q = 0; q < kVB; ++q) {
          mbar_wait(theirs_bar + 8 * q, phase);
          release(theirs_bar + 8 * q);
        }
        v_pending = true;
        phase ^= 1;
      }
      wgmma_wait<0>();
      fence_registers(acc2);
      release_v();

      // ---- the two k halves meet in two rounds through the 32 KB area: warpgroup w gives acc2[kKeep (1 - w) ..] ----
      const int tw = wq * 32 + lane;
      float4* const give = reinterpret_cast<float4*>(smem + S8::kRedOffset) + wg * kRound * 128;
      const float4* const take = reinterpret_cast<const float4*>(smem + S8::kRedOffset) + (wg ^ 1) * kRound * 128;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        consumer_sync();  // r = 0: the other warpgroup is done with the previous tile's area; r = 1: with round 0's
#pragma unroll
        for (int i = 0; i < kRound; ++i) {
          const int lo = 4 * (r * kRound + i), hi = kKeep + lo;
          give[i * 128 + tw] = wg ? make_float4(acc2[lo], acc2[lo + 1], acc2[lo + 2], acc2[lo + 3])
                                  : make_float4(acc2[hi], acc2[hi + 1], acc2[hi + 2], acc2[hi + 3]);
        }
        consumer_sync();
#pragma unroll
        for (int i = 0; i < kRound; ++i) {
          const int lo = 4 * (r * kRound + i), hi = kKeep + lo;
          const float4 v = take[i * 128 + tw];
          acc2[lo] = (wg ? acc2[hi] : acc2[lo]) + v.x;
          acc2[lo + 1] = (wg ? acc2[hi + 1] : acc2[lo + 1]) + v.y;
          acc2[lo + 2] = (wg ? acc2[hi + 2] : acc2[lo + 2]) + v.z;
          acc2[lo + 3] = (wg ? acc2[hi + 3] : acc2[lo + 3]) + v.w;
        }
      }
      // ---- epilogue: out = acc + b + x (variant 7's order, one rounding), b2 and the shortcut from shared memory ----
      mbar_wait(scfull_bar, k & 1);
      const int rl = wq * 16 + (lane >> 2), r0 = p0 + rl, col0 = (C / 2) * wg + 2 * (lane & 3);
      const float2* const bs = reinterpret_cast<const float2*>(smem + S8::kB2Offset + col0 * 4);
      const uint8_t* const scb = smem + S8::kXOffset + b * S8::kXBytes + (2 * wg) * kPanel + (lane & 3) * 4;
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        if (r0 + 8 * hr >= p.P) continue;
        __half2* const orow = reinterpret_cast<__half2*>(p.out + (size_t)(r0 + 8 * hr) * C + col0);
#pragma unroll
        for (int n = 0; n < kKeep / 4; ++n) {
          const float2 bb = bs[4 * n];
          const __half2 s2 = *reinterpret_cast<const __half2*>(scb + (n >> 3) * kPanel + panel_offset(rl + 8 * hr, n & 7));
          const float2 sx = __half22float2(s2);
          const float v0 = acc2[4 * n + 2 * hr] + bb.x + sx.x, v1 = acc2[4 * n + 2 * hr + 1] + bb.y + sx.y;
          orow[4 * n] = __floats2half2_rn(v0, v1);
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(xempty_bar + 8 * b);  // the producer may load tile k + 2's X here
    }
  }
#endif
}

int smem_bytes(int channels, int variant) {
  const bool halo2 = variant == 2;
  if (channels == 64) {  // variants 0, 2, 3
    if (variant == 0) return Shape<64>::kSmemBytes;
    if (variant == 2) return Shape<64, true>::kSmemBytes;
    if (variant == 3) return Shape3<64>::kSmemBytes;
    if (variant == 5) return Shape5<64>::kSmemBytes;
    if (variant == 6) return Shape6::kSmemBytes;
    return 0;
  }
  if (variant == 4) {  // variant 0's layout
    switch (channels) {
      case 128: return Shape<128>::kSmemBytes;
      case 256: return Shape<256>::kSmemBytes;
      case 384: return Shape<384>::kSmemBytes;
      case 512: return Shape<512>::kSmemBytes;
      default: return 0;
    }
  }
  if (variant == 3) {
    switch (channels) {
      case 128: return Shape3<128>::kSmemBytes;
      case 256: return Shape3<256>::kSmemBytes;
      default: return 0;
    }
  }
  if (variant == 5) return channels == 128 ? Shape5<128>::kSmemBytes : 0;
  if (variant == 6) return 0;  // C = 64 only (above)
  if (variant == 7) {
    switch (channels) {
      case 128: return Shape7<128>::kSmemBytes;
      case 256: return Shape7<256>::kSmemBytes;
      default: return 0;
    }
  }
  if (variant == 8) return channels == 256 ? Shape8::kSmemBytes : 0;
  switch (channels) {
    case 128: return halo2 ? Shape<128, true>::kSmemBytes : Shape<128>::kSmemBytes;
    case 256: return halo2 ? Shape<256, true>::kSmemBytes : Shape<256>::kSmemBytes;
    case 384: return halo2 ? 0 : Shape<384>::kSmemBytes;
    case 512: return halo2 ? 0 : Shape<512>::kSmemBytes;
    default: return 0;
  }
}

// Per device, width and variant: compute capability 9.0 (the kernel body exists only in the sm_90a
// image) and the shared-memory limit are checked and the launch attribute set once.
template <int C, int CLUSTER, bool HALO2 = false, bool SPLIT_H = false>
cudaError_t launch_impl(const Params& p, cudaStream_t stream) {
  constexpr int kSmemBytes = Shape<C, HALO2>::kSmemBytes;
  static bool ready[kMaxDevices] = {};
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (!ready[dev]) {
    int major = 0, minor = 0, optin = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err == cudaSuccess && (major != 9 || minor != 0)) err = cudaErrorNoKernelImageForDevice;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess && kSmemBytes > optin) err = cudaErrorInvalidConfiguration;
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(convfirst_c512_kernel<C, CLUSTER, HALO2, SPLIT_H>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kSmemBytes);
    if (err != cudaSuccess) return err;
    ready[dev] = true;
  }
  const int tiles = (p.P + kTilePixels - 1) / kTilePixels;
  const int grid = (tiles + CLUSTER - 1) / CLUSTER * CLUSTER;  // a last CTA past the end computes nothing kept
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = CLUSTER;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  unsigned count = CLUSTER > 1 ? 1 : 0;  // variant 0 is a plain launch
  pdl::add_attribute(attribute, count, p.pdl != 0);
  config.attrs = attribute;
  config.numAttrs = count;
  err = cudaLaunchKernelEx(&config, convfirst_c512_kernel<C, CLUSTER, HALO2, SPLIT_H>, p);
  return err != cudaSuccess ? err : cudaGetLastError();
}

// Variants 3 and 5 (PREFETCH): one CTA per SM (at most one per tile), each walking its tiles.
template <int C, bool PREFETCH = false>
cudaError_t launch_persistent(const Params& p, cudaStream_t stream) {
  constexpr int kSmemBytes = std::conditional_t<PREFETCH, Shape5<C>, Shape3<C>>::kSmemBytes;
  static int sms[kMaxDevices] = {};  // 0 until the device is checked
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (sms[dev] == 0) {
    int major = 0, minor = 0, optin = 0, count = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err == cudaSuccess && (major != 9 || minor != 0)) err = cudaErrorNoKernelImageForDevice;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess && kSmemBytes > optin) err = cudaErrorInvalidConfiguration;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(convfirst_c512_persistent_kernel<C, PREFETCH>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) return err;
    sms[dev] = count > 0 ? count : 1;
  }
  const int tiles = (p.P + kTilePixels - 1) / kTilePixels;
  const int grid = tiles < sms[dev] ? tiles : sms[dev];
  if (p.pdl)
    return pdl::launch(convfirst_c512_persistent_kernel<C, PREFETCH>, dim3(grid), dim3(kThreads3), kSmemBytes, stream, p);
  convfirst_c512_persistent_kernel<C, PREFETCH><<<grid, kThreads3, kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

// Variant 6 (C = 64, hidden <= kPingPongMaxHidden): one CTA per SM (at most one per tile), as launch_persistent.
cudaError_t launch_pingpong(const Params& p, cudaStream_t stream) {
  constexpr int kSmemBytes = Shape6::kSmemBytes;
  if (p.hidden > kPingPongMaxHidden) return cudaErrorInvalidValue;  // resident weights only
  static int sms[kMaxDevices] = {};  // 0 until the device is checked
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (sms[dev] == 0) {
    int major = 0, minor = 0, optin = 0, count = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err == cudaSuccess && (major != 9 || minor != 0)) err = cudaErrorNoKernelImageForDevice;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess && kSmemBytes > optin) err = cudaErrorInvalidConfiguration;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(convfirst_c64_pingpong_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) return err;
    sms[dev] = count > 0 ? count : 1;
  }
  const int tiles = (p.P + kTilePixels - 1) / kTilePixels;
  const int grid = tiles < sms[dev] ? tiles : sms[dev];
  if (p.pdl) return pdl::launch(convfirst_c64_pingpong_kernel, dim3(grid), dim3(kThreads3), kSmemBytes, stream, p);
  convfirst_c64_pingpong_kernel<<<grid, kThreads3, kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

// Variant 7 (C = 128, 256): one CTA per SM (at most one per tile), as launch_persistent, 384 threads.
template <int C>
cudaError_t launch_ksplit(const Params& p, cudaStream_t stream) {
  constexpr int kSmemBytes = Shape7<C>::kSmemBytes;
  static int sms[kMaxDevices] = {};  // 0 until the device is checked
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (sms[dev] == 0) {
    int major = 0, minor = 0, optin = 0, count = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err == cudaSuccess && (major != 9 || minor != 0)) err = cudaErrorNoKernelImageForDevice;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess && kSmemBytes > optin) err = cudaErrorInvalidConfiguration;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(convfirst_c512_ksplit_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) return err;
    sms[dev] = count > 0 ? count : 1;
  }
  const int tiles = (p.P + kTilePixels - 1) / kTilePixels;
  const int grid = tiles < sms[dev] ? tiles : sms[dev];
  if (p.pdl) return pdl::launch(convfirst_c512_ksplit_kernel<C>, dim3(grid), dim3(kThreads), kSmemBytes, stream, p);
  convfirst_c512_ksplit_kernel<C><<<grid, kThreads, kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

// Variant 8 (C = 256): the conv kernel (one CTA per tile and 64-channel slice) into `xconv` (conv8_scratch_bytes(P)
// bytes, 16-byte aligned), then the fused FFN kernel, one CTA per SM (at most one per tile), both PDL-chained when p.pdl.
cudaError_t launch_v8(const Params& p, uint8_t* xconv, cudaStream_t stream, int conv8b) {
  if (p.C != 256 || p.hidden <= 0 || p.hidden % kHiddenChunk || p.W < 1 || p.W > max_width(p.C) || p.H < 1 ||
      p.P <= 0 || p.P % (p.H * p.W) || xconv == nullptr || reinterpret_cast<uintptr_t>(xconv) % 16)
    return cudaErrorInvalidValue;
  constexpr int kSmemBytes = Shape8::kSmemBytes;
  static int sms[kMaxDevices] = {};  // 0 until the device is checked
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (sms[dev] == 0) {
    int major = 0, minor = 0, optin = 0, count = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err == cudaSuccess && (major != 9 || minor != 0)) err = cudaErrorNoKernelImageForDevice;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess && kSmemBytes > optin) err = cudaErrorInvalidConfiguration;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(convfirst_c512_ffn8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err == cudaSuccess)  // the conv kernel's version b (68 KB, above the 48 KB default)
      err = cudaFuncSetAttribute(convfirst_c512_conv8b_kernel<256>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kConv8bSmem);
    if (err != cudaSuccess) return err;
    sms[dev] = count > 0 ? count : 1;
  }
  const int tiles = (p.P + kTilePixels - 1) / kTilePixels;
  const dim3 conv_grid(tiles, kSlices8);
  if (conv8b) {  // version b: one CTA per tile, all four slices
    if (p.pdl) {
      err = pdl::launch(convfirst_c512_conv8b_kernel<256>, dim3(tiles), dim3(kConv8Threads), kConv8bSmem, stream, p,
                        xconv);
    } else {
      convfirst_c512_conv8b_kernel<256><<<tiles, kConv8Threads, kConv8bSmem, stream>>>(p, xconv);
      err = cudaGetLastError();
    }
  } else if (p.pdl) {
    err = pdl::launch(convfirst_c512_conv8_kernel<256>, conv_grid, dim3(kConv8Threads), kConv8Smem, stream, p, xconv);
  } else {
    convfirst_c512_conv8_kernel<256><<<conv_grid, kConv8Threads, kConv8Smem, stream>>>(p, xconv);
    err = cudaGetLastError();
  }
  if (err != cudaSuccess) return err;
  const int grid = tiles < sms[dev] ? tiles : sms[dev];
  const uint8_t* const xc = xconv;
  if (p.pdl) return pdl::launch(convfirst_c512_ffn8_kernel, dim3(grid), dim3(kThreads), kSmemBytes, stream, p, xc);
  convfirst_c512_ffn8_kernel<<<grid, kThreads, kSmemBytes, stream>>>(p, xc);
  return cudaGetLastError();
}

long long conv8_scratch_bytes_host(long long pixels) { return conv8_scratch_bytes(pixels); }

// C = 64: variants 0, 2, 3, 5, 6 (has_variant).
cudaError_t launch_width64(const Params& p, int variant, cudaStream_t stream) {
  switch (variant) {
    case 0: return launch_impl<64, 1>(p, stream);
    case 2: return launch_impl<64, 1, true>(p, stream);
    case 3: return launch_persistent<64>(p, stream);
    case 5: return launch_persistent<64, true>(p, stream);
    case 6: return launch_pingpong(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <int C>
cudaError_t launch_width(const Params& p, int variant, cudaStream_t stream) {
  switch (variant) {
    case 0: return launch_impl<C, 1>(p, stream);
    case 1: return launch_impl<C, 2>(p, stream);
    case 2:
      if constexpr (C <= 256) return launch_impl<C, 1, true>(p, stream);
      return cudaErrorInvalidValue;
    case 3:
      if constexpr (C <= 256) return launch_persistent<C>(p, stream);
      return cudaErrorInvalidValue;
    case 4:
      if (p.W > kSplitHMaxWidth) return cudaErrorInvalidValue;
      return launch_impl<C, 1, false, true>(p, stream);
    case 5:
      if constexpr (C == 128) return launch_persistent<C, true>(p, stream);
      return cudaErrorInvalidValue;
    case 7:
      if constexpr (C == 128 || C == 256) return launch_ksplit<C>(p, stream);
      return cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch(const Params& p, int variant, cudaStream_t stream) {
  if (p.hidden <= 0 || p.hidden % kHiddenChunk || p.W < 1 || p.W > max_width(p.C) || p.H < 1 || p.P <= 0 ||
      p.P % (p.H * p.W))
    return cudaErrorInvalidValue;
  switch (p.C) {
    case 64: return launch_width64(p, variant, stream);
    case 128: return launch_width<128>(p, variant, stream);
    case 256: return launch_width<256>(p, variant, stream);
    case 384: return launch_width<384>(p, variant, stream);
    case 512: return launch_width<512>(p, variant, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace c512
