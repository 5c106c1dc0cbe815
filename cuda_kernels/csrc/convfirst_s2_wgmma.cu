// Stride-2 ConvFirst block in one kernel on Hopper warpgroup MMAs (sm_90a), NHWC float16, fp32
// accumulation (cuda_kernels/README.md; NOTES.md "Stride 2 on the wgmma kernel"), C_in -> C_out = 2 C_in for
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

    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), wq = warp & 3;  // warp-uniform to the compiler (desc_advance)
    c5::Params q{};  // load_bias1 reads b1
    q.b1 = p.b1;
    float acc2[O::kAccs][O::kN2 / 2];  // not zeroed: the shortcut's first product runs with scale-d 0
    float acc2s[O::kSmallRegs];        // C = 384's (unused here, and removed)
    int it = 0, pending = -1;
    auto release = [&](int index) {
      if (lane == 0) bf::mbar_arrive(empty_bar + 8 * (uint32_t(index) % kStages));
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

// ---- the persistent variant (C_in = 64 and 128; NOTES.md "Stride 2 on wgmma, persistent") ----
// 512 threads: consumer warpgroups 0-1 (the shortcut, the FFN and the epilogue of the current tile, the arithmetic of
// convfirst_s2w_kernel), the producer warpgroup 2 (one thread streams the slots of all the CTA's tiles without a
// break), and the conv warpgroup 3, which computes the *next* tile's phase A while the consumers run the current
// tile's products: per unit (tile k, 16-channel slice s) the (2R + 3) input rows into halo buffer u % 2 (issued one
// unit ahead), the grouped conv of the (2R + 1) conv rows into yb, the two blurs into registers; after a tile's
// last unit it waits x_empty (the consumers retired the previous tile's reads of X and Xs), writes X and Xs,
// fences and arrives x_full. The CTA walks tiles blockIdx.x, + gridDim.x, ...; gridDim.x <= the SM count.
// The per-pixel arithmetic is s2::phase_a's (same taps in the same order, fp16 conv output, fp32 blur sums in
// the same order, one rounding): the outputs equal convfirst_s2w_kernel's bit for bit.
constexpr int kThreadsP = kThreads + 128;        // + the conv warpgroup
constexpr int kConvThread0P = kThreads;          // its first thread
constexpr int kConvWarp0P = kConvThread0P / 32;
constexpr int kConvThreadsP = 128;
constexpr int kConvBarrierP = 2;                 // named barrier of the conv warpgroup (the consumers' is 1)
constexpr int kUnitChannels = 16;                // a unit's channels: 32-byte pixels of two 16-byte chunks
constexpr int kUnitPixBytes = 2 * kUnitChannels;
// setmaxnreg split (variant 5's): 2 x 128 x 168 + 128 x 32 + 128 x 144 = 65,536; every warp enters at 128.
constexpr int kRegConsumerP = 168, kRegProducerP = 32, kRegConvP = 144;
constexpr int kRegEntryP = 65536 / kThreadsP;
static_assert(2 * kRegConsumerP + kRegProducerP + kRegConvP <= 512, "setmaxnreg split");
static_assert(kRegProducerP < kRegEntryP && kRegConsumerP > kRegEntryP && kRegConvP > kRegEntryP,
              "the producer's setmaxnreg is a dec, the consumers' and the conv warpgroup's are incs");
// A tile's input rows and conv rows at most, over W = 2 .. 56 with R = 64 / ceil(W / 2) (tests: halo_bounds)
constexpr int kHaloPixP = 392;
constexpr int kConvPixP = 294;

template <int CIN>
struct ShapeP {
  using S = Shape<CIN>;  // X, Xs, the ring and H at convfirst_s2w_kernel's offsets
  static constexpr int kUnits = CIN / kUnitChannels;  // units per tile
  static constexpr int kHaloBytes = kHaloPixP * kUnitPixBytes;
  static constexpr int kHaloOffset = S::kEnd;                        // two halo buffers
  static constexpr int kYbOffset = kHaloOffset + 2 * kHaloBytes;     // the conv rows of one unit
  static constexpr int kZeroOffset = kYbOffset + kConvPixP * kUnitPixBytes;
  static constexpr int kBarOffset = kZeroOffset + kUnitPixBytes;     // 16 ring barriers
  static constexpr int kXBarOffset = kBarOffset + 2 * kStages * 8;  // x_full, x_empty
  static constexpr int kSmemBytes = 1024 + kXBarOffset + 16;
  static_assert(CIN == 64 || CIN == 128, "the persistent variant: C_in = 64 and 128");
  static_assert(kSmemBytes <= 232448, "shared memory per block (opt-in, H200)");
  static_assert(kSmemBytes == (CIN == 64 ? 224112 : 232304), "the layout NOTES.md states");
  static_assert(kHaloOffset % 128 == 0 && kBarOffset % 8 == 0, "alignment");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void conv_sync_p() { bf::named_barrier_sync(kConvBarrierP, kConvThreadsP); }

// 32-byte pixels; the two 16-byte chunks XOR-swizzled with bit 2 of the pixel index, so that ldmatrix's eight
// row reads (eight consecutive pixels) hit eight distinct 16-byte bank groups.
__device__ __forceinline__ uint32_t px32_offset(int q, int c) {
  return static_cast<uint32_t>(q * kUnitPixBytes + (((c ^ (q >> 2)) & 1) << 4));
}

// The conv warpgroup: phase A of tiles 0 .. my_tiles - 1 of the CTA, unit u = k units + s in halo buffer u % 2.
template <int CIN>
__device__ __forceinline__ void phase_a_stream(const Params& p, uint8_t* smem, uint32_t base, uint32_t x_full,
                                               uint32_t x_empty, int my_tiles) {
  using SP = ShapeP<CIN>;
  using S = Shape<CIN>;
  constexpr int kUnits = SP::kUnits;
  const int t = threadIdx.x - kConvThread0P, lane = t & 31, cw = t >> 5;
  const int H = p.H, W = p.W, R = p.rows_per_tile, rows_out = p.N * p.Ho, last_row = p.N * H - 1;
  const uint32_t halo0 = base + SP::kHaloOffset, yb_s = base + SP::kYbOffset, zero_s = base + SP::kZeroOffset;
  uint8_t* const yb = smem + SP::kYbOffset;
  // the tile's input rows xlo .. xhi and conv rows ylo .. yhi (global rows n H + h), as s2::phase_a
  auto rows = [&](int k, int& j0, int& nrows, int& xlo, int& ylo, int& npix_x, int& npix_y) {
    j0 = ((int)blockIdx.x + k * (int)gridDim.x) * R;
    nrows = min(R, rows_out - j0);
    const int c0 = (j0 / p.Ho) * H + 2 * (j0 % p.Ho);
    const int jl = j0 + nrows - 1;
    const int c1 = (jl / p.Ho) * H + 2 * (jl % p.Ho);
    ylo = max(c0 - 1, 0);
    const int yhi = min(c1 + 1, last_row);
    xlo = max(ylo - 1, 0);
    const int xhi = min(yhi + 1, last_row);
    npix_x = (xhi - xlo + 1) * W;
    npix_y = (yhi - ylo + 1) * W;
  };
  const int nunits = my_tiles * kUnits;
  auto issue = [&](int u) {
    if (u < nunits) {
      int j0, nrows, xlo, ylo, npix_x, npix_y;
      rows(u / kUnits, j0, nrows, xlo, ylo, npix_x, npix_y);
      const uint32_t buf = halo0 + (u & 1) * SP::kHaloBytes;
      const __half* src = s2w_c512::c512::opaque(p.x) + (size_t)xlo * W * CIN + (u % kUnits) * kUnitChannels;
      for (int i = t; i < npix_x * 2; i += kConvThreadsP) {
        const int q = i >> 1, c = i & 1;
        bf::cp_async16(buf + px32_offset(q, c), src + (size_t)q * CIN + c * 8, true);
      }
    }
    bf::cp_async_commit();
  };
  // Xs's zero panels (C_in = 64) and the zero pixel: once, before the first x_full
  if constexpr (S::kSPanels > S::kKPanels) {
    uint4* const pad = reinterpret_cast<uint4*>(smem + S::kXsOffset + S::kKPanels * kPanel);
    for (int i = t; i < (S::kSPanels - S::kKPanels) * kPanel / 16; i += kConvThreadsP) pad[i] = make_uint4(0, 0, 0, 0);
  }
  if (t < kUnitPixBytes / 16) reinterpret_cast<uint4*>(smem + SP::kZeroOffset)[t] = make_uint4(0, 0, 0, 0);
  // the tile's blurred slices, thread t: output pixel r = t / 2, chunk t % 2 of every unit
  uint4 xr[kUnits], sr[kUnits];
  const int r = t >> 1, cc = t & 1;
  issue(0);
  int u = 0;
#pragma unroll 1
  for (int k = 0; k < my_tiles; ++k) {
    int j0, nrows, xlo, ylo, npix_x, npix_y;
    rows(k, j0, nrows, xlo, ylo, npix_x, npix_y);
    const int nmt = (npix_y + 15) / 16, nvalid = nrows * p.Wo;
#pragma unroll
    for (int s = 0; s < kUnits; ++s, ++u) {
      const int g0 = s * 2;  // the unit's two groups of 8 channels
      uint32_t bfrag[2][9];
      const uint32_t* wsrc = s2w_c512::c512::opaque(p.conv_w) + ((size_t)g0 * 9 * 32 + lane);
#pragma unroll
      for (int tap = 0; tap < 9; ++tap) {
        bfrag[0][tap] = __ldg(wsrc + tap * 32);
        bfrag[1][tap] = __ldg(wsrc + (9 + tap) * 32);
      }
      float cb[2][2];
#pragma unroll
      for (int gi = 0; gi < 2; ++gi) {
        const int ch = (g0 + gi) * 8 + (lane & 3) * 2;
        cb[gi][0] = __ldg(p.conv_b + ch);
        cb[gi][1] = __ldg(p.conv_b + ch + 1);
      }
      bf::cp_async_wait<0>();  // unit u's copies (issued one unit earlier) have landed
      conv_sync_p();           // everyone's copies of u visible; every warp done with unit u - 1 (its buffer, yb)
      issue(u + 1);
      const uint32_t xh_s = halo0 + (u & 1) * SP::kHaloBytes;
      const uint8_t* const xh = smem + SP::kHaloOffset + (u & 1) * SP::kHaloBytes;

      // conv: Y = conv(x) + b_c at every pixel of rows ylo .. yhi into yb (fp16), m-tiles cw, cw + 4, ...
#pragma unroll 1
      for (int mt0 = cw; mt0 < nmt; mt0 += 8) {
        float acc[2][2][4] = {};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int q = (mt0 + 4 * j) * 16 + (lane & 15);
          const bool in_range = q < npix_y;
          const int grow = in_range ? ylo + q / W : 0;
          const int w = in_range ? q % W : 0;
          const int h = grow % H;
          bf::conv3x3_taps(acc[j], in_range, grow, h, w, W, H, xlo, xh_s, zero_s, bfrag,
                           [&](int xq) { return px32_offset(xq, lane >> 4); });
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int qy = (mt0 + 4 * j) * 16 + (lane >> 2);
#pragma unroll
          for (int gi = 0; gi < 2; ++gi) {
            const int within = (lane & 3) * 4;
            if (qy < npix_y)
              *reinterpret_cast<uint32_t*>(yb + px32_offset(qy, gi) + within) =
                  bf::pack_half2(acc[j][gi][0] + cb[gi][0], acc[j][gi][1] + cb[gi][1]);
            if (qy + 8 < npix_y)
              *reinterpret_cast<uint32_t*>(yb + px32_offset(qy + 8, gi) + within) =
                  bf::pack_half2(acc[j][gi][2] + cb[gi][0], acc[j][gi][3] + cb[gi][1]);
          }
        }
      }
      (void)yb_s;
      conv_sync_p();  // yb complete

      // blur + stride 2 (reflect) of Y and of x at output pixel r, chunk cc: fp32 sums of fp16 values
      float ay[8], ax[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) ay[e] = ax[e] = 0.f;
      if (r < nvalid) {
        const int J = j0 + r / p.Wo, wo = r % p.Wo;
        const int n = J / p.Ho, ho = J % p.Ho;
#pragma unroll
        for (int a = 0; a < 3; ++a) {
          const int grow = n * H + s2::reflect(2 * ho + a - 1, H);
#pragma unroll
          for (int b = 0; b < 3; ++b) {
            const int w = s2::reflect(2 * wo + b - 1, W);
            const float f = (a == 1 ? 2.f : 1.f) * (b == 1 ? 2.f : 1.f);
            const uint4 vy = *reinterpret_cast<const uint4*>(yb + px32_offset((grow - ylo) * W + w, cc));
            const uint4 vx = *reinterpret_cast<const uint4*>(xh + px32_offset((grow - xlo) * W + w, cc));
            const __half2* hy = reinterpret_cast<const __half2*>(&vy);
            const __half2* hx = reinterpret_cast<const __half2*>(&vx);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float2 fy = __half22float2(hy[e]), fx = __half22float2(hx[e]);
              ay[2 * e] += f * fy.x;
              ay[2 * e + 1] += f * fy.y;
              ax[2 * e] += f * fx.x;
              ax[2 * e + 1] += f * fx.y;
            }
          }
        }
      }
      uint32_t* py = reinterpret_cast<uint32_t*>(&xr[s]);
      uint32_t* px = reinterpret_cast<uint32_t*>(&sr[s]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        py[e] = bf::pack_half2(ay[2 * e] * 0.0625f, ay[2 * e + 1] * 0.0625f);
        px[e] = bf::pack_half2(ax[2 * e] * 0.0625f, ax[2 * e + 1] * 0.0625f);
      }
    }
    // hand the tile over: X and Xs are free once the consumers retired tile k - 1's last stage-1 product
    if (k > 0) bf::mbar_wait(x_empty, (k - 1) & 1);
#pragma unroll
    for (int s = 0; s < kUnits; ++s) {
      const int col = s * kUnitChannels + cc * 8;
      const uint32_t off = (col >> 6) * kPanel + bf::panel_offset(r, (col & 63) >> 3);
      *reinterpret_cast<uint4*>(smem + S::kXOffset + off) = xr[s];
      *reinterpret_cast<uint4*>(smem + S::kXsOffset + off) = sr[s];
    }
    bf::fence_proxy_async_smem();  // X and Xs (generic stores) are read by wgmma (async proxy)
    bf::mbar_arrive(x_full);
  }
  bf::cp_async_wait<0>();  // the last (empty) group
}
#endif

template <int CIN>
__global__ void __launch_bounds__(kThreadsP, 1) convfirst_s2w_persistent_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Shape<CIN>;
  using SP = ShapeP<CIN>;
  using O = typename S::Out;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = bf::smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;  // 1024-aligned for the 128-byte swizzle
  uint8_t* const smem = smem_raw + (base - raw);
  const uint32_t x_s = base + S::kXOffset, xs_s = base + S::kXsOffset, ring = base + S::kRingOffset;
  const uint32_t h_s = base + S::kHOffset;
  const uint32_t full_bar = base + SP::kBarOffset, empty_bar = full_bar + kStages * 8;
  const uint32_t x_full = base + SP::kXBarOffset, x_empty = x_full + 8;
  const int nchunks = p.hidden / kHiddenChunk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows_out = p.N * p.Ho;
  const int tiles = (rows_out + p.rows_per_tile - 1) / p.rows_per_tile;
  const int my_tiles = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      bf::mbar_init(full_bar + 8 * s, 1);                // the producer's arrive + the copy's bytes
      bf::mbar_init(empty_bar + 8 * s, kConsumerWarps);  // one arrive per consumer warp
    }
    bf::mbar_init(x_full, kConvThreadsP);   // every conv thread, after its X / Xs stores and proxy fence
    bf::mbar_init(x_empty, kConsumerWarps); // every consumer warp, after its last stage-1 product of a tile
    bf::fence_barrier_init();
  }
  __syncthreads();

  if (warp >= kConvWarp0P) {
    // ---- conv warpgroup: phase A of every tile, one tile ahead of the consumers ----
    bf::setmaxnreg_inc<kRegConvP>();  // 128 -> 144: registers from the producer's release
    pdl::wait();                      // reads x (pdl.h)
    phase_a_stream<CIN>(p, smem, base, x_full, x_empty, my_tiles);
  } else if (warp >= kConsumerWarps) {
    // ---- producer: every tile's slots in order, without a break between tiles ----
    bf::setmaxnreg_dec<kRegProducerP>();
    if (warp == kConsumerWarps && lane == 0) {
      const int nslots = S::kShortcutSlots + nchunks * S::kSlotsPerChunk;
      int g = 0;  // stream index over all of this CTA's tiles
#pragma unroll 1
      for (int k = 0; k < my_tiles; ++k) {
#pragma unroll 1
        for (int it = 0; it < nslots; ++it, ++g) {
          const int slot = g % kStages;
          bf::mbar_wait(empty_bar + 8 * slot, ((g / kStages) & 1) ^ 1);
          bf::mbar_arrive_expect_tx(full_bar + 8 * slot, kSlotBytes);
          bf::bulk_copy_g2s(ring + slot * kSlotBytes, p.wpack + (size_t)it * kSlotBytes, kSlotBytes,
                            full_bar + 8 * slot);
        }
      }
    }
  } else {
    // ---- consumers ----
    bf::setmaxnreg_inc<kRegConsumerP>();
    pdl::wait();  // writes out (pdl.h); the producer's weight slots went ahead
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), wq = warp & 3;  // warp-uniform to the compiler (desc_advance)
    c5::Params q{};  // load_bias1 reads b1
    q.b1 = p.b1;
    float acc2[O::kAccs][O::kN2 / 2];  // not zeroed: each tile's shortcut product runs with scale-d 0
    float acc2s[O::kSmallRegs];        // C = 384's (unused here, and removed)
    // `it`: the slot stream index over all tiles; `jg`: chunks over all tiles (the H buffer alternates by it)
    int it = 0, pending = -1, jg = 0;
    auto release = [&](int index) {
      if (lane == 0) bf::mbar_arrive(empty_bar + 8 * (uint32_t(index) % kStages));
    };
#pragma unroll 1
    for (int k = 0; k < my_tiles; ++k) {
      const int j0 = ((int)blockIdx.x + k * (int)gridDim.x) * p.rows_per_tile;
      const int nrows = min(p.rows_per_tile, rows_out - j0);
      // PDL: the CTA starts its last tile (a CTA holds a whole SM; an earlier trigger would gain nothing)
      if (k == my_tiles - 1) pdl::launch_dependents();
      bf::mbar_wait(x_full, k & 1);  // the conv warpgroup has written this tile's X and Xs
#pragma unroll 1
      for (int c = 0; c < S::kSPanels / 2; ++c)
        c5::stage2<O>(acc2, acc2s, xs_s + c * 2 * kPanel, ring, full_bar, wg, c, it, pending, release);
#pragma unroll 1
      for (int j = 0; j < nchunks; ++j, ++jg) {
        float2 bias[8];
        c5::load_bias1(q, j, wg, lane, bias);
        float acc1[32];
        c5::stage1<S::kKPanels>(acc1, x_s, ring, full_bar, wg, it, pending, release);
        // the tile's last reads of X (and, retired before them, of Xs) are done in this warp
        if (j == nchunks - 1 && lane == 0) bf::mbar_arrive(x_empty);
        // H buffer jg % 2 was last read by stage 2 of global chunk jg - 2, which both warpgroups retired
        // before chunk jg - 1's barrier (also across a tile boundary)
        c5::store_h(smem + S::kHOffset + (jg & 1) * c5::kHChunkBytes + wg * kPanel, acc1, bias, wq, lane);
        bf::fence_proxy_async_smem();
        c5::consumer_sync();  // the whole H chunk is written
        c5::stage2<O>(acc2, acc2s, h_s + (jg & 1) * c5::kHChunkBytes, ring, full_bar, wg, j + 1, it, pending,
                      release);
      }
      bf::wgmma_wait<0>();
#pragma unroll
      for (int a = 0; a < O::kAccs; ++a) bf::fence_registers(acc2[a]);
      if (pending >= 0) release(pending);  // the tile's last V slot: the producer refills it during the epilogue
      pending = -1;
      const int rl = wq * 16 + (lane >> 2), nvalid = nrows * p.Wo;
      const size_t pix0 = (size_t)j0 * p.Wo;
#pragma unroll
      for (int a = 0; a < O::kAccs; ++a)
        store_rows<S::COUT>(p, acc2[a], O::kOutCols * wg + O::kN2 * a, rl, lane, nvalid, pix0);
    }
  }
#endif
}

int smem_bytes_persistent(int cin) {
  switch (cin) {
    case 64: return ShapeP<64>::kSmemBytes;
    case 128: return ShapeP<128>::kSmemBytes;
    default: return 0;
  }
}

template <int CIN>
cudaError_t launch_persistent_cin(const Params& p, cudaStream_t stream) {
  constexpr int kSmemBytes = ShapeP<CIN>::kSmemBytes;
  static bool ready[kMaxDevices] = {};
  static int sms[kMaxDevices] = {};
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (!ready[dev]) {
    int major = 0, minor = 0, optin = 0, count = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err == cudaSuccess && (major != 9 || minor != 0)) err = cudaErrorNoKernelImageForDevice;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess && kSmemBytes > optin) err = cudaErrorInvalidConfiguration;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(convfirst_s2w_persistent_kernel<CIN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kSmemBytes);
    if (err != cudaSuccess) return err;
    sms[dev] = count > 0 ? count : 1;
    ready[dev] = true;
  }
  const int tiles = (p.N * p.Ho + p.rows_per_tile - 1) / p.rows_per_tile;
  const int grid = p.grid_limit > 0 ? min(tiles, p.grid_limit) : min(tiles, sms[dev]);
  if (p.pdl)
    return pdl::launch(convfirst_s2w_persistent_kernel<CIN>, dim3(grid), dim3(kThreadsP), kSmemBytes, stream, p);
  convfirst_s2w_persistent_kernel<CIN><<<grid, kThreadsP, kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_persistent(Params p, cudaStream_t stream) {
  if (p.hidden <= 0 || p.hidden % kHiddenChunk || p.N < 1 || p.H < 2 || p.W < 2 || p.W > kMaxWidth ||
      p.Ho != (p.H + 1) / 2 || p.Wo != (p.W + 1) / 2)
    return cudaErrorInvalidValue;
  if (p.rows_per_tile <= 0) p.rows_per_tile = kTilePixels / p.Wo;
  if (p.rows_per_tile * p.Wo > kTilePixels) return cudaErrorInvalidValue;
  // the halo and conv-row buffers are sized for R = 64 / Wo (or fewer rows)
  if ((2 * p.rows_per_tile + 3) * p.W > kHaloPixP || (2 * p.rows_per_tile + 1) * p.W > kConvPixP)
    return cudaErrorInvalidValue;
  switch (p.cin) {
    case 64: return launch_persistent_cin<64>(p, stream);
    case 128: return launch_persistent_cin<128>(p, stream);
    default: return cudaErrorInvalidValue;
  }
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
