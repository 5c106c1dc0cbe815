// Stride-2 ConvFirst block in one kernel on Hopper warpgroup MMAs (sm_90a), NHWC float16, fp32
// accumulation (DESIGN.md §10; NOTES.md "Stride 2 on the wgmma kernel"), C_in -> C_out = 2 C_in for
// C_in in 64, 128, 256:
//
//   out = Blur(x) . S^T  +  ReLU(Blur(conv(x) + b_c) . U^T + b_U) . V^T  +  (b_V + b_S)
//
// It is the stride-1 wgmma kernel (convfirst_c512.cu) with the stride-2 template's phase A
// (convfirst_s2.cuh) in front and the shortcut as one more stage 2:
//   tile     R whole output rows, R Wo <= 64 pixels (rows counted over n Ho + ho: tiles cross images);
//   phase A  s2::phase_a, unchanged, with 64-pixel panels: per 32-channel slice the tile's 2R + 3 input
//            rows, the grouped conv on mma.m16n8k8 at the 2R + 1 full-resolution rows, then the blur
//            (stride 2, reflect) of the conv output into X [64 x C_in] and of the input into Xs [64 x C_in],
//            both as 8 KB 128-byte-swizzled panels: the A operands of stage 1 and of the shortcut
//            (C_in = 64: Xs has a second, zero panel, so the shortcut is one whole stage 2);
//   phase B  the shortcut acc2 = Xs . S^T (c512's stage 2 over Xs's panels, two per call: the first
//            product runs with scale-d 0), then c512's FFN loop per hidden chunk of 128: stage 1
//            (warpgroup w: H[:, 64w ..] = ReLU(X U_j^T + a), m64n64k16), H through shared memory, a named
//            barrier, stage 2 (acc2 += H V_j^T, the C_out columns split over the two warpgroups);
//   epilogue out = acc2 + b_o from registers, one rounding, rows < the tile's valid pixels.
// Weights: packed on the host into 16 KB slots in stream order (convfirst_s2_wgmma.pack_weights), one
// producer thread streams them with bulk copies into c512's 8-slot ring. Phase A's buffers (80 KB) alias
// the ring's last slots and the H buffers, so the producer loads the first kPreload slots during phase A
// and the rest once phase A's last barrier has passed: the producer warpgroup takes part in each of
// s2::phase_a's __syncthreads (kPhaseABarriers) and in one more after the consumers' proxy fence.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <utility>

#include "pdl.h"  // first, at global scope (the two templates below include it too)

#include "convfirst_s2.cuh"
#include "convfirst_s2_wgmma.h"
#include "ptx.cuh"
#include "ptx_sm90.cuh"
#include "wgmma.cuh"

// The stride-1 wgmma kernel's pieces (its Shape, ring constants, stage 1, H store, stage 2, bias loads), used
// as they are. Its translation unit is included whole, inside a namespace of its own, so that this extension's
// copies of its symbols (and its launchers' static state) cannot meet the C = 512 extension's in one process.
// (Its own headers above are already included, so only its body lands in the namespace.)
namespace s2w_c512 {
#include "convfirst_c512.cu"
}  // namespace s2w_c512

namespace s2w {

namespace c5 = s2w_c512::c512;

constexpr int kThreads = c5::kThreads;  // two consumer warpgroups + one producer warpgroup
constexpr int kConsumerWarps = c5::kConsumerWarps;
constexpr int kStages = c5::kStages;
constexpr int kPanel = c5::kPanel;  // 64 pixels x 64 channels, 8 KB
constexpr int kMaxDevices = 64;
static_assert(kTilePixels == c5::kTilePixels && kSlotBytes == c5::kSlotBytes && kHiddenChunk == c5::kHiddenChunk,
              "the stride-1 kernel's tile and slot");

// s2::phase_a's view of the tile: C_in channels, 64 rows, 8 KB panels (c512's X layout).
template <int CIN_>
struct PhaseA {
  static constexpr int CIN = CIN_, BM = kTilePixels, PANEL = kPanel;
};

template <int CIN>
struct Shape {
  static constexpr int COUT = 2 * CIN;
  static constexpr int kKPanels = CIN / 64;               // X panels = U slots per chunk
  static constexpr int kSPanels = shortcut_panels(CIN);   // Xs panels (C_in = 64: + a zero panel)
  static constexpr int kXOffset = 0;
  static constexpr int kXsOffset = kXOffset + kKPanels * kPanel;
  static constexpr int kRingOffset = kXsOffset + kSPanels * kPanel;
  static constexpr int kHOffset = kRingOffset + kStages * kSlotBytes;
  static constexpr int kEnd = kHOffset + c5::kHBytes;
  // phase A's input rows, zero pixel and conv rows (s2::kPhaseABytes) at the end: the last ring slots and H
  static constexpr int kWorkOffset = (kEnd - s2::kPhaseABytes) & ~127;
  static constexpr int kPreload = (kWorkOffset - kRingOffset) / kSlotBytes;  // slots clear of phase A
  static constexpr int kBarOffset = kEnd;
  static constexpr int kSmemBytes = 1024 + kBarOffset + 2 * kStages * 8;  // + alignment slack, 16 mbarriers
  static constexpr int kShortcutSlots = shortcut_slots(CIN);
  static constexpr int kSlotsPerChunk = slots_per_chunk(CIN);
  // s2::phase_a's __syncthreads: per 32-channel slice one after its loads, one after the conv and (but the
  // first) one before the loads; one at the end. The producer warpgroup takes part in each.
  static constexpr int kPhaseABarriers = 3 * (CIN / s2::kCS);
  using Out = c5::Shape<COUT>;  // the stage-2 split of the C_out columns over the two warpgroups
  static_assert(CIN == 64 || CIN == 128 || CIN == 256, "C_in");
  static_assert(kWorkOffset >= kRingOffset + kPreload * kSlotBytes && kWorkOffset + s2::kPhaseABytes <= kEnd,
                "phase A's buffers lie after the preloaded slots, inside the ring and H");
  static_assert(kPreload >= 1 && kPreload < kStages, "preloaded slots");
  static_assert(kKPanels * kPanel % 1024 == 0 && kRingOffset % 1024 == 0 && kHOffset % 1024 == 0, "swizzle alignment");
  static_assert(kShortcutSlots == kSPanels * Out::kVBlocks && kSlotsPerChunk == kKPanels + 2 * Out::kVBlocks,
                "slot stream");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// out = acc + b_o for one accumulator of NREG registers at output columns col0 .., the tile's rows
// rl and rl + 8 (rl = 16 wq + lane / 4) where they are below nvalid; pixel pix0 + row.
template <int COUT, int NREG>
__device__ __forceinline__ void store_rows(const Params& p, const float (&acc)[NREG], int col0, int rl, int lane,
                                           int nvalid, size_t pix0) {
#pragma unroll
  for (int nb = 0; nb < NREG / 4; ++nb) {
    const int col = col0 + 8 * nb + 2 * (lane & 3);
    const float2 b = __ldg(reinterpret_cast<const float2*>(p.bo + col));
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = rl + 8 * hr;
      if (row >= nvalid) continue;
      *reinterpret_cast<__half2*>(p.out + (pix0 + row) * COUT + col) =
          __floats2half2_rn(acc[4 * nb + 2 * hr] + b.x, acc[4 * nb + 2 * hr + 1] + b.y);
    }
  }
}
#endif

template <int CIN>
__global__ void __launch_bounds__(kThreads, 1) convfirst_s2w_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Shape<CIN>;
  using O = typename S::Out;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = bf::smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;  // 1024-aligned for the 128-byte swizzle
  uint8_t* const smem = smem_raw + (base - raw);
  const uint32_t x_s = base + S::kXOffset, xs_s = base + S::kXsOffset, ring = base + S::kRingOffset;
  const uint32_t h_s = base + S::kHOffset;
  const uint32_t full_bar = base + S::kBarOffset, empty_bar = full_bar + kStages * 8;
  const int nchunks = p.hidden / kHiddenChunk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j0 = blockIdx.x * p.rows_per_tile;
  const int nrows = min(p.rows_per_tile, p.N * p.Ho - j0);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      bf::mbar_init(full_bar + 8 * s, 1);                // the producer's arrive + the copy's bytes
      bf::mbar_init(empty_bar + 8 * s, kConsumerWarps);  // one arrive per consumer warp
    }
    bf::fence_barrier_init();
  }
  __syncthreads();

  if (warp >= kConsumerWarps) {
    // ---- producer: the first kPreload slots during phase A, the rest once its buffers are free ----
    bf::setmaxnreg_dec<40>();  // first: the consumers' setmaxnreg.inc waits for these registers
    const bool leader = warp == kConsumerWarps && lane == 0;
    const int nslots = S::kShortcutSlots + nchunks * S::kSlotsPerChunk;
    auto issue = [&](int it) {
      const int slot = it % kStages;
      bf::mbar_wait(empty_bar + 8 * slot, ((it / kStages) & 1) ^ 1);
      bf::mbar_arrive_expect_tx(full_bar + 8 * slot, kSlotBytes);
      bf::bulk_copy_g2s(ring + slot * kSlotBytes, p.wpack + (size_t)it * kSlotBytes, kSlotBytes, full_bar + 8 * slot);
    };
    const int first = nslots < S::kPreload ? nslots : S::kPreload;
    if (leader)
      for (int it = 0; it < first; ++it) issue(it);
    __syncwarp();
    // s2::phase_a's barriers, then the one after the consumers' proxy fence: phase A's buffers are free
#pragma unroll 1
    for (int b = 0; b < S::kPhaseABarriers + 1; ++b) __syncthreads();
    if (leader)
      for (int it = first; it < nslots; ++it) issue(it);
  } else {
    // ---- consumers ----
    bf::setmaxnreg_inc<232>();
    // PDL (pdl.h): the barriers and the producer's first slots (constants, not the previous kernel's output)
    // went ahead; x (phase A) and out come after the wait. One tile per CTA: the trigger follows at once.
    pdl::wait();
    pdl::launch_dependents();
    s2::Params a{};  // phase A reads x, the conv weights and the sizes
    a.x = p.x;
    a.conv_w = p.conv_w;
    a.conv_b = p.conv_b;
    a.N = p.N;
    a.H = p.H;
    a.W = p.W;
    a.Ho = p.Ho;
    a.Wo = p.Wo;
    s2::phase_a<PhaseA<CIN>>(a, smem + S::kXOffset, smem + S::kXsOffset, smem + S::kWorkOffset, j0, nrows);
    if constexpr (S::kSPanels > S::kKPanels) {  // C_in = 64: Xs's second k panel is zero
      uint4* const pad = reinterpret_cast<uint4*>(smem + S::kXsOffset + S::kKPanels * kPanel);
      for (int i = threadIdx.x; i < (S::kSPanels - S::kKPanels) * kPanel / 16; i += c5::kConsumerThreads)
        pad[i] = make_uint4(0, 0, 0, 0);
    }
    bf::fence_proxy_async_smem();  // X and Xs (generic stores) are read by wgmma; phase A's buffers rewritten by bulk copies
    __syncthreads();               // with the producer warpgroup (its last phase-A barrier)

    const int wg = warp >> 2, wq = warp & 3;
    c5::Params q{};  // load_bias1 reads b1
    q.b1 = p.b1;
    float acc2[O::kAccs][O::kN2 / 2];  // not zeroed: the shortcut's first product runs with scale-d 0
    float acc2s[O::kSmallRegs];        // C = 384's (unused here, and removed)
    int it = 0, pending = -1;
    auto release = [&](int index) {
      if (lane == 0) bf::mbar_arrive(empty_bar + 8 * (index % kStages));
    };
    // the shortcut: acc2 = Xs . S^T, two k panels of Xs per stage-2 call (call c: "chunk" c for scale-d)
#pragma unroll 1
    for (int c = 0; c < S::kSPanels / 2; ++c)
      c5::stage2<O>(acc2, acc2s, xs_s + c * 2 * kPanel, ring, full_bar, wg, c, it, pending, release);
#pragma unroll 1
    for (int j = 0; j < nchunks; ++j) {
      float2 bias[8];
      c5::load_bias1(q, j, wg, lane, bias);
      float acc1[32];
      c5::stage1<S::kKPanels>(acc1, x_s, ring, full_bar, wg, it, pending, release);
      // H buffer j % 2 was last read by stage 2 of chunk j - 2, which both warpgroups retired before chunk
      // j - 1's barrier (as in c512)
      c5::store_h(smem + S::kHOffset + (j & 1) * c5::kHChunkBytes + wg * kPanel, acc1, bias, wq, lane);
      bf::fence_proxy_async_smem();
      c5::consumer_sync();  // the whole H chunk is written
      c5::stage2<O>(acc2, acc2s, h_s + (j & 1) * c5::kHChunkBytes, ring, full_bar, wg, j + 1, it, pending, release);
    }
    bf::wgmma_wait<0>();
#pragma unroll
    for (int k = 0; k < O::kAccs; ++k) bf::fence_registers(acc2[k]);

    // epilogue: out = acc2 + b_o at the warpgroup's columns, the tile's valid rows
    const int rl = wq * 16 + (lane >> 2), nvalid = nrows * p.Wo;
    const size_t pix0 = (size_t)j0 * p.Wo;
#pragma unroll
    for (int k = 0; k < O::kAccs; ++k)
      store_rows<S::COUT>(p, acc2[k], O::kOutCols * wg + O::kN2 * k, rl, lane, nvalid, pix0);
  }
#endif
}

int smem_bytes(int cin) {
  switch (cin) {
    case 64: return Shape<64>::kSmemBytes;
    case 128: return Shape<128>::kSmemBytes;
    case 256: return Shape<256>::kSmemBytes;
    default: return 0;
  }
}

template <int CIN>
cudaError_t launch_cin(const Params& p, cudaStream_t stream) {
  constexpr int kSmemBytes = Shape<CIN>::kSmemBytes;
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
      err = cudaFuncSetAttribute(convfirst_s2w_kernel<CIN>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) return err;
    ready[dev] = true;
  }
  const int grid = (p.N * p.Ho + p.rows_per_tile - 1) / p.rows_per_tile;
  if (p.pdl) return pdl::launch(convfirst_s2w_kernel<CIN>, dim3(grid), dim3(kThreads), kSmemBytes, stream, p);
  convfirst_s2w_kernel<CIN><<<grid, kThreads, kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch(Params p, cudaStream_t stream) {
  if (p.hidden <= 0 || p.hidden % kHiddenChunk || p.N < 1 || p.H < 2 || p.W < 2 || p.W > kMaxWidth ||
      p.Ho != (p.H + 1) / 2 || p.Wo != (p.W + 1) / 2)
    return cudaErrorInvalidValue;
  if (p.rows_per_tile <= 0) p.rows_per_tile = kTilePixels / p.Wo;
  if (p.rows_per_tile * p.Wo > kTilePixels) return cudaErrorInvalidValue;
  switch (p.cin) {
    case 64: return launch_cin<64>(p, stream);
    case 128: return launch_cin<128>(p, stream);
    case 256: return launch_cin<256>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace s2w
