// Stride-1 ConvFirst block at C = 768 (ConvFirstNet-L's last stage, 7x7) on Hopper warpgroup MMAs
// (sm_90a), NHWC float16, fp32 accumulation (cuda_kernels/README.md; NOTES.md "C = 768"):
//
//   out = x + ReLU(X U^T + a) V^T + b,   X = conv(x) + b_c   (grouped 3x3, group width 8)
//
// A 64-pixel x 768-column fp32 output accumulator is 192 registers per thread over two consumer
// warpgroups: too many beside stage 1's. So each 64-pixel tile is computed by a cluster of two thread
// blocks (ranks r = 0, 1), each owning half of the work, nothing computed twice but the conv:
//   phase A  both: X [64 x 768] = conv of the tile, 12 swizzled panels (96 KB), as convfirst_c512.cu's
//            phase A (the halo in the idle H buffers; double-buffered in its halves where W <= 18);
//   per hidden chunk j of 128 channels:
//     stage 1  rank r computes hidden columns 64r .. 64r + 63 of the chunk, warpgroup w columns
//              64r + 32w .. (wgmma m64n32k16, A = X, B = U rows from the slot), writes ReLU(. + a) as
//              fp16 into panel r of the chunk's H buffer (two 16 KB buffers alternating by chunk),
//              meets its other warpgroup at a named barrier, then one thread bulk-copies the 8 KB
//              panel into the same place in the partner's shared memory (cp.async.bulk shared::cta ->
//              shared::cluster), completing on the partner's h_full mbarrier;
//     stage 2  rank r accumulates output columns 384r .. 384r + 383 from the whole H chunk, as the C = 384
//              instance does (warpgroup 0: one n128 and one n64 accumulator for columns 0..191, warpgroup 1
//              columns 192..383): its own panel first, the partner's once h_full says it has landed.
//   epilogue out = acc + b + x from registers, one rounding.
// H buffer reuse across the pair: before writing chunk j's panel (buffer j % 2), a rank waits on its
// h_empty[j % 2], on which the partner arrives (remotely) once its reads of that buffer for chunk j - 2
// have retired (after its chunk j - 1 barrier; for chunks 0 and 1, after its phase A, whose halo lives
// in H). Weights: per rank its own stream of 16 KB slots (12 per chunk: 6 U slots of 64 hidden rows x
// 2 k panels, then 2 k panels (k panel r first) x 3 V blocks of 128 output rows), one producer thread, a
// 6-slot ring.
// Shared memory: X 96 KB + H 32 KB + ring 96 KB + barriers = 230,528 B with the alignment slack.
#include "convfirst_c512.h"
#include "convfirst_c768.h"
#include "convfirst_wide.cuh"
#include "ptx.cuh"
#include "ptx_sm90.cuh"
#include "wgmma.cuh"

namespace c768 {

using c512::kHiddenChunk;
using c512::kSlotBytes;
using c512::kSplitHMaxWidth;
using c512::kTilePixels;
using c512::Params;

constexpr int C = 768;
constexpr int kConsumerThreads = 256;
constexpr int kThreads = kConsumerThreads + 128;  // + one producer warpgroup (one thread works)
constexpr int kConsumerWarps = kConsumerThreads / 32;
constexpr int kStages = 6;
constexpr int kPanel = kTilePixels * 128;  // 8 KB
constexpr int kKPanels = C / 64;           // 12 X panels
constexpr int kHChunkBytes = 2 * kPanel;   // one chunk of H: 128 hidden columns = 2 panels
constexpr int kHBytes = 2 * kHChunkBytes;
constexpr int kHaloPixels = kHBytes / 128 - 1;  // the conv halo aliases H (+ one zero pixel)
constexpr int kXOffset = 0;
constexpr int kHOffset = kXOffset + kKPanels * kPanel;
constexpr int kRingOffset = kHOffset + kHBytes;
constexpr int kBarOffset = kRingOffset + kStages * kSlotBytes;
constexpr int kBarBytes = (2 * kStages + 5) * 8;  // full, empty, h_full[2], h_empty[2], x_full
constexpr int kSmemBytesC = 1024 + kBarOffset + kBarBytes;
constexpr int kConsumerBarrier = 1;
constexpr int kMaxDevices = 64;
static_assert(kSmemBytesC <= 227 * 1024, "shared memory per block");
static_assert(kSlotsPerChunk == kKPanels / 2 + 2 * 3, "slots per chunk");
static_assert(kSlotBytes == 128 * 128 && kHiddenChunk == 128, "slot layout");

int smem_bytes() { return kSmemBytesC; }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using bf::cp_async16;
using bf::cp_async_commit;
using bf::cp_async_wait;
using bf::fence_barrier_init;
using bf::fence_proxy_async_smem;
using bf::fence_registers;
using bf::ldmatrix_x4;
using bf::mbar_arrive;
using bf::mbar_arrive_expect_tx;
using bf::mbar_init;
using bf::mbar_wait;
using bf::mma_m16n8k8;
using bf::named_barrier_sync;
using bf::pack_half2;
using bf::panel_offset;
using bf::setmaxnreg_dec;
using bf::setmaxnreg_inc;
using bf::smem_addr;
using bf::smem_desc_sw128;
using bf::wgmma_commit;
using bf::wgmma_fence;
using bf::wgmma_m64n128k16_ss;
using bf::wgmma_m64n64k16_ss;
using bf::wgmma_wait;

__device__ __forceinline__ void consumer_sync() { named_barrier_sync(kConsumerBarrier, kConsumerThreads); }

using cfwide::conv_mtiles;
using cfwide::cluster_ctarank;
using cfwide::cluster_sync;
using cfwide::wgmma_ss;

// The shared::cluster address of offset `local` in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t map_to(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

// Arrives (release, cluster scope) on the mbarrier at shared::cluster address `remote_bar`.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t remote_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote_bar) : "memory");
}

// mbar_wait with acquire at cluster scope: for the barriers the partner arrives on remotely (release.cluster).
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// One bulk copy of `bytes` from this CTA's shared memory (src) into another CTA's (dst, a
// shared::cluster address), completing the bytes on that CTA's mbarrier (bar, shared::cluster).
__device__ __forceinline__ void bulk_copy_s2cluster(uint32_t dst, uint32_t src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "r"(src), "r"(bytes), "r"(bar)
               : "memory");
}

__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// out = acc + b + x for one accumulator of NREG registers at output columns col0 .. (as convfirst_c512.cu).
template <int NREG>
__device__ __forceinline__ void store_out(const Params& p, const float (&acc)[NREG], int col0, int r0, int lane) {
#pragma unroll
  for (int g = 0; g < NREG / 32; ++g) {
    __half2 sc[8][2];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = r0 + 8 * hr, col = col0 + 8 * (8 * g + n) + 2 * (lane & 3);
        sc[n][hr] = row < p.P ? __ldg(reinterpret_cast<const __half2*>(p.x + (size_t)row * C + col)) : __float2half2_rn(0.f);
      }
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int nb = 8 * g + n, col = col0 + 8 * nb + 2 * (lane & 3);
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

// Phase A (convfirst_c512.cu's conv_phase at C = 768): X = conv(x) + b_c, rounded to fp16, for pixels
// p0 .. p0 + 63, 64 channels at a time from a halo of whole image rows. HALO2: the slices alternate
// between the two halves of H (W <= kSplitHMaxWidth), slice s + 1 loading while s computes.
// Slices s0 .. s0 + NS - 1 (X panels of the same index): all 12, or one rank's 6 (variant 0).
template <bool HALO2, int NS>
__device__ __forceinline__ void conv_phase(const Params& p, uint8_t* x_panels, uint8_t* halo, uint8_t* halo2, int p0,
                                           int s0) {
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
    for (int i = t; i < npix * 8; i += kConsumerThreads) {
      const int q = i >> 3, c = i & 7;
      cp_async16(base + panel_offset(q, c), p.x + ((size_t)row_lo * W + q) * C + s * 64 + c * 8, true);
    }
    cp_async_commit();
  };
  if constexpr (HALO2) load_slice(s0, halo0);
  const int pair = warp & 3, local_group = pair * 2 + (lane >> 4);
#pragma unroll 1
  for (int i = 0; i < NS; ++i) {
    const int s = s0 + i;
    const uint32_t halo_base = (i & 1) ? halo1 : halo0;
    const bool next = HALO2 && i + 1 < NS;
    if constexpr (HALO2) {
      if (next) load_slice(s + 1, (i & 1) ? halo0 : halo1);
    } else {
      if (i > 0) consumer_sync();
      load_slice(s, halo_base);
    }
    const int g0 = s * 8 + pair * 2;
    uint32_t bfrag[2][9];
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      bfrag[0][tap] = __ldg(p.conv_w + ((size_t)g0 * 9 + tap) * 32 + lane);
      bfrag[1][tap] = __ldg(p.conv_w + ((size_t)(g0 + 1) * 9 + tap) * 32 + lane);
    }
    float2 cb[2];
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) cb[gi] = __ldg(reinterpret_cast<const float2*>(p.conv_b + (g0 + gi) * 8 + (lane & 3) * 2));
    if (next) cp_async_wait<1>();
    else cp_async_wait<0>();
    consumer_sync();

    float acc[2][2][4] = {};
    conv_mtiles<2>(acc, p.P, W, H, p0, warp >> 2, lane, row_lo, halo_base, zero_addr, local_group, bfrag);
    uint8_t* panel = x_panels + s * kPanel;
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
    if constexpr (HALO2) consumer_sync();
  }
}

// Stage 1 of a chunk for warpgroup wg of rank r: acc1 = X . U^T over the chunk's 6 U slots, slot i holding
// k panels 2i (rows 0..63) and 2i + 1 (rows 64..127), each row one of the rank's 64 hidden columns; the
// warpgroup reads rows 32 wg .. 32 wg + 31 of each half. Slots are released once their group retired.
template <typename Release>
__device__ __forceinline__ void stage1(float (&acc1)[16], uint32_t x_s, uint32_t ring, uint32_t full_bar, int wg,
                                       int& it, int& pending, Release& release) {
#pragma unroll 1
  for (int i = 0; i < kKPanels / 2; ++i, ++it) {
    const int slot = it % kStages;
    mbar_wait(full_bar + 8 * slot, (it / kStages) & 1);
    fence_registers(acc1);
    wgmma_fence();
#pragma unroll
    for (int hk = 0; hk < 2; ++hk) {
      const uint32_t a0 = x_s + (2 * i + hk) * kPanel, b0 = ring + slot * kSlotBytes + hk * (64 * 128) + wg * (32 * 128);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        wgmma_m64n32k16_ss(acc1, smem_desc_sw128(a0 + ks * 32), smem_desc_sw128(b0 + ks * 32), (i | hk | ks) != 0);
    }
    wgmma_commit();
    wgmma_wait<1>();
    if (pending >= 0) release(pending);
    pending = it;
  }
  wgmma_wait<0>();
  fence_registers(acc1);
  release(pending);
  pending = -1;
}

// Stage 2 of chunk j, H in the buffer at hb: per k panel the 3 V blocks of this rank's 384 output rows; block 0
// is warpgroup 0's (n128), block 2 warpgroup 1's (n128), block 1 split by rows (64 wg .. into the warpgroup's n64
// accumulator), as the C = 384 instance of convfirst_c512.cu. The rank's own panel (k panel = rank) first, then,
// once h_full says the partner's panel has landed, the other: the copy's latency hides behind the first half
// (the rank's slot stream is packed in that order).
template <typename Release>
__device__ __forceinline__ void stage2(float (&acc2)[64], float (&acc2s)[32], uint32_t hb, uint32_t ring,
                                       uint32_t full_bar, int wg, int j, uint32_t rank, uint32_t h_full_b,
                                       int& it, int& pending, Release& release) {
#pragma unroll
  for (int ki = 0; ki < kHiddenChunk / 64; ++ki) {
    const int kp = ki ^ (int)rank;
    if (ki == 1) mbar_wait(h_full_b, (j >> 1) & 1);  // the partner's panel of chunk j
#pragma unroll
    for (int q = 0; q < 3; ++q, ++it) {
      const int slot = it % kStages;
      mbar_wait(full_bar + 8 * slot, (it / kStages) & 1);
      if (q == 1 || q == 2 * wg) {
        wgmma_fence();
        if (q == 1) {
          fence_registers(acc2s);
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
            wgmma_ss(acc2s, smem_desc_sw128(hb + kp * kPanel + kk * 32),
                     smem_desc_sw128(ring + slot * kSlotBytes + wg * (64 * 128) + kk * 32), (j | ki | kk) != 0);
        } else {
          fence_registers(acc2);
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
            wgmma_ss(acc2, smem_desc_sw128(hb + kp * kPanel + kk * 32), smem_desc_sw128(ring + slot * kSlotBytes + kk * 32),
                     (j | ki | kk) != 0);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (pending >= 0) release(pending);
        pending = it;
      } else {
        release(it);  // the other warpgroup's whole block
      }
    }
  }
}
#endif

// Clusters of two CTAs (ranks 0 and 1 of tile blockIdx.x / 2); see the file's head. SPLIT_CONV (variant 0):
// rank r convolves X panels 6r .. 6r + 5 only and bulk-copies them (48 KB) into the partner's X, completing
// on its x_full; otherwise (variant 1) each rank convolves all 12.
template <bool SPLIT_CONV>
__global__ void __launch_bounds__(kThreads, 1) convfirst_c768_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;  // 1024-aligned for the 128-byte swizzle (same offset in both CTAs)
  uint8_t* const smem = smem_raw + (base - raw);
  const uint32_t x_s = base + kXOffset, h_s = base + kHOffset, ring = base + kRingOffset;
  const uint32_t full_bar = base + kBarOffset, empty_bar = full_bar + kStages * 8;
  const uint32_t h_full = empty_bar + kStages * 8, h_empty = h_full + 16, x_full = h_empty + 16;
  const int nchunks = p.hidden / kHiddenChunk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint32_t rank = cluster_ctarank(), peer = rank ^ 1;
  const int p0 = (blockIdx.x >> 1) * kTilePixels;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar + 8 * s, 1);
      mbar_init(empty_bar + 8 * s, kConsumerWarps);
    }
    for (int b = 0; b < 2; ++b) {
      mbar_init(h_full + 8 * b, 1);   // this CTA's expect_tx arrive + the partner's 8 KB
      mbar_init(h_empty + 8 * b, 1);  // the partner's arrive: its reads of buffer b are done
    }
    mbar_init(x_full, 1);  // variant 0: this CTA's expect_tx arrive + the partner's 48 KB of X
    fence_barrier_init();
  }
  cluster_sync();  // both CTAs' barriers exist before any remote use

  if (warp >= kConsumerWarps) {
    setmaxnreg_dec<40>();
    if (warp == kConsumerWarps && lane == 0) {
      const int nslots = nchunks * kSlotsPerChunk;
      const uint8_t* stream = p.wpack + (size_t)rank * nslots * kSlotBytes;
      for (int it = 0; it < nslots; ++it) {
        const int slot = it % kStages;
        mbar_wait(empty_bar + 8 * slot, ((it / kStages) & 1) ^ 1);
        mbar_arrive_expect_tx(full_bar + 8 * slot, kSlotBytes);
        bf::bulk_copy_g2s(ring + slot * kSlotBytes, stream + (size_t)it * kSlotBytes, kSlotBytes, full_bar + 8 * slot);
      }
    }
  } else {
    setmaxnreg_inc<232>();
    const int wg = warp >> 2, wq = warp & 3;
    uint8_t* const h_smem = smem + kHOffset;
    constexpr int kNS = SPLIT_CONV ? kKPanels / 2 : kKPanels;
    const int s0 = SPLIT_CONV ? kNS * (int)rank : 0;
    if (p.W <= kSplitHMaxWidth)
      conv_phase<true, kNS>(p, smem + kXOffset, h_smem, h_smem + kHChunkBytes, p0, s0);
    else
      conv_phase<false, kNS>(p, smem + kXOffset, h_smem, nullptr, p0, s0);
    fence_proxy_async_smem();  // X (generic stores) is read by wgmma and the bulk copy (async proxy)
    consumer_sync();
    if (threadIdx.x == 0) {
      if constexpr (SPLIT_CONV) {  // this rank's half of X into the partner's, and the partner's half expected here
        const uint32_t half = x_s + s0 * kPanel;
        mbar_arrive_expect_tx(x_full, kNS * kPanel);
        bulk_copy_s2cluster(map_to(half, peer), half, kNS * kPanel, map_to(x_full, peer));
      }
      // H is no longer the halo: the partner may write its panels of both buffers
      mbar_arrive_cluster(map_to(h_empty, peer));
      mbar_arrive_cluster(map_to(h_empty + 8, peer));
    }
    if constexpr (SPLIT_CONV) mbar_wait(x_full, 0);

    float acc2[64];
    float acc2s[32];
    int it = 0, pending = -1;
    auto release = [&](int index) {
      if (lane == 0) mbar_arrive(empty_bar + 8 * (index % kStages));
    };
#pragma unroll 1
    for (int j = 0; j < nchunks; ++j) {
      const int b = j & 1;
      float2 bias[4];
      const float* bsrc = p.b1 + j * kHiddenChunk + 64 * rank + 32 * wg + 2 * (lane & 3);
#pragma unroll
      for (int n = 0; n < 4; ++n) bias[n] = __ldg(reinterpret_cast<const float2*>(bsrc + 8 * n));
      float acc1[16];
      stage1(acc1, x_s, ring, full_bar, wg, it, pending, release);
      // the partner has finished reading buffer b (chunk j - 2), and so its copy from our panel r is done
      mbar_wait_cluster(h_empty + 8 * b, (j >> 1) & 1);
      {
        uint8_t* hp = h_smem + b * kHChunkBytes + rank * kPanel;
        const int row = wq * 16 + (lane >> 2), within = (lane & 3) * 4;
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          const int chunk = 4 * wg + n;
          *reinterpret_cast<uint32_t*>(hp + panel_offset(row, chunk) + within) =
              pack_half2(fmaxf(acc1[4 * n] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 1] + bias[n].y, 0.f));
          *reinterpret_cast<uint32_t*>(hp + panel_offset(row + 8, chunk) + within) =
              pack_half2(fmaxf(acc1[4 * n + 2] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 3] + bias[n].y, 0.f));
        }
      }
      fence_proxy_async_smem();  // H (generic stores) is read by wgmma and the bulk copy (async proxy)
      consumer_sync();           // this rank's panel of chunk j is written; both warpgroups retired chunk j - 1
      if (threadIdx.x == 0) {
        const uint32_t panel = h_s + b * kHChunkBytes + rank * kPanel;
        mbar_arrive_expect_tx(h_full + 8 * b, kPanel);  // the partner's panel of chunk j
        bulk_copy_s2cluster(map_to(panel, peer), panel, kPanel, map_to(h_full + 8 * b, peer));
        // our reads of buffer b ^ 1 (chunk j - 1) retired before this chunk's barrier
        if (j >= 1) mbar_arrive_cluster(map_to(h_empty + 8 * (b ^ 1), peer));
      }
      stage2(acc2, acc2s, h_s + b * kHChunkBytes, ring, full_bar, wg, j, rank, h_full + 8 * b, it, pending, release);
    }
    wgmma_wait<0>();
    fence_registers(acc2);
    fence_registers(acc2s);

    const int r0 = p0 + wq * 16 + (lane >> 2), c0 = 384 * rank;
    // warpgroup 0: n128 -> columns 0.., n64 -> 128..; warpgroup 1: n64 -> 192.., n128 -> 256.. (of the rank's 384)
    store_out<64>(p, acc2, c0 + (wg ? 256 : 0), r0, lane);
    store_out<32>(p, acc2s, c0 + (wg ? 192 : 128), r0, lane);
  }
  __syncwarp();  // the producer warp's lanes reconverge (barrier.cluster is .aligned)
  cluster_sync();  // no CTA exits while its partner may still copy into it or arrive on its barriers
#endif
}

template <bool SPLIT_CONV>
cudaError_t launch_variant(const Params& p, cudaStream_t stream) {
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
    if (err == cudaSuccess && kSmemBytesC > optin) err = cudaErrorInvalidConfiguration;
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(convfirst_c768_kernel<SPLIT_CONV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kSmemBytesC);
    if (err != cudaSuccess) return err;
    ready[dev] = true;
  }
  const int tiles = (p.P + kTilePixels - 1) / kTilePixels;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(2 * tiles);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmemBytesC;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 2;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  err = cudaLaunchKernelEx(&config, convfirst_c768_kernel<SPLIT_CONV>, p);
  return err != cudaSuccess ? err : cudaGetLastError();
}

cudaError_t launch(const Params& p, int variant, cudaStream_t stream) {
  if (p.C != C || p.hidden <= 0 || p.hidden % kHiddenChunk || p.W < 1 || p.W > c512::kMaxWidth || p.H < 1 ||
      p.P <= 0 || p.P % (p.H * p.W))
    return cudaErrorInvalidValue;
  switch (variant) {
    case 0: return launch_variant<true>(p, stream);
    case 1: return launch_variant<false>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace c768
