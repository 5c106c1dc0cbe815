// Block-fusion kernel for FFN and ConvFirst (paper eqs. 30-32 and Fig. 6b; cuda_kernels/README.md), NHWC float16,
// fp32 accumulation.
//
// One thread block computes a tile of BM = 128 consecutive pixels (flattened n, h, w):
//   phase A  X tile [BM x C] into shared memory: copied from DRAM (FFN), or computed as the
//            group-width-8 3x3 convolution of an input tile with its halo rows (ConvFirst),
//            on tensor cores with mma.m16n8k8, plus the folded-BN bias;
//   phase B  loop over chunks of HC hidden channels (eq. 32):
//              H = ReLU(X . U_chunk^T + a_chunk)   (stage 1, H stays in shared memory)
//              O += H . V_chunk^T                  (stage 2, O stays in registers)
//            the weights stream through a ring of shared-memory slots with cp.async, one
//            64-wide k-slice per slot, so the next slices load while the current one is used;
//   phase C  O + b, plus the shortcut (the input pixels) when asked, written once to DRAM.
// DRAM traffic is the input (halo rows re-read hit L2), the output and the weights (L2).
#pragma once
#include <type_traits>

#include "params.h"
#include "ffn_slices.cuh"
#include "pdl.h"
#include "ptx.cuh"

namespace bf {


constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBM = 128;
constexpr int kHaloPixels = 336;
constexpr int kMaxDevices = 64;  // (floor(127 / W) + 4) * W <= 336 for every W <= 56

template <int C_, int HC_, int WM1_, int WM2_, int MINB_, int STAGES_, bool CONV_>
struct Config {
  static constexpr int C = C_, HC = HC_, WM1 = WM1_, WM2 = WM2_, MINB = MINB_;
  static constexpr bool CONV = CONV_;
  static constexpr int BM = kBM;
  static constexpr int WN1 = kWarps / WM1, WN2 = kWarps / WM2;
  static constexpr int TM1 = BM / WM1, TN1 = HC / WN1;  // stage-1 warp tile
  static constexpr int TM2 = BM / WM2, TN2 = C / WN2;   // stage-2 warp tile
  static constexpr int MT1 = TM1 / 16, NT1 = TN1 / 8, MT2 = TM2 / 16, NT2 = TN2 / 8;
  static constexpr int KP = (C + 63) / 64;              // 64-column panels of X
  static constexpr int KW = C < 64 ? C : 64;            // k width of a U slice
  // C need not be a power of two, only a multiple of 32: then (C = 96, 160, ...) the last panel
  // of X, and the last U slice of each chunk, is 32 columns wide, half a panel. PARTIAL is false
  // for C = 32 (one panel of 32, KW) and for multiples of 64, whose code it leaves unchanged.
  static constexpr int KLAST = C - 64 * (KP - 1);      // k width of the last panel and U slice
  static constexpr bool PARTIAL = KLAST != KW;
  static constexpr int KU = KP, KV = HC / 64;           // slices per chunk
  static constexpr int STAGES = STAGES_;
  static constexpr int A_BYTES = KP * BM * 128;
  static constexpr int H_BYTES = KV * BM * 128;
  static constexpr int SLOT_BYTES = (HC > C ? HC : C) * 128;
  static constexpr int RING_BYTES = STAGES * SLOT_BYTES;
  static constexpr int HALO_BYTES = (kHaloPixels + 1) * 128;  // + one zero pixel
  // The halo gets its own buffer when MINB blocks still fit in an SM (227 KB, 1 KB reserved
  // per block); then the first weight slices load while the convolution runs. Otherwise it
  // aliases the ring and H, which are idle during the convolution.
  static constexpr int FFN_BYTES = A_BYTES + RING_BYTES + H_BYTES;
  static constexpr bool SEPARATE_HALO = CONV && (FFN_BYTES + HALO_BYTES + 1024) * MINB <= 227 * 1024;
  static constexpr int R_BYTES = SEPARATE_HALO ? RING_BYTES + H_BYTES + HALO_BYTES
                                 : (CONV && HALO_BYTES > RING_BYTES + H_BYTES) ? HALO_BYTES
                                                                                : RING_BYTES + H_BYTES;
  static constexpr int SMEM_BYTES = A_BYTES + R_BYTES;
  static_assert(TM1 % 16 == 0 && TN1 % 16 == 0 && TM2 % 16 == 0 && TN2 % 16 == 0, "warp tile");
  static_assert(HC % 64 == 0 && C % 32 == 0, "shape");
  static_assert(!PARTIAL || (C > 64 && KLAST == 32), "a partial panel is the last, 32 columns");
};

// Loads k-slice `t` of hidden chunk `chunk` into a ring slot: a U slice (rows = HC hidden
// channels, k = input channels) for t < KU, else a V slice (rows = C outputs, k = hidden).
template <class K>
__device__ __forceinline__ void load_weight_slice(const Params& p, uint8_t* slot, int chunk, int t) {
  const uint32_t base = smem_addr(slot);
  if (t < K::KU) {
    // KWIDTH columns of U's rows chunk * HC .. + HC, from column t * 64
    auto load_u = [&](auto kwidth) {
      constexpr int CH = decltype(kwidth)::value / 8;
      for (int i = threadIdx.x; i < K::HC * CH; i += kThreads) {
        const int r = i / CH, c = i % CH;
        const __half* src = p.w1 + (size_t)(chunk * K::HC + r) * K::C + t * 64 + c * 8;
        cp_async16(base + panel_offset(r, c), src, true);
      }
    };
    if constexpr (K::PARTIAL) {
      if (t == K::KU - 1) {
        load_u(std::integral_constant<int, K::KLAST>{});
        return;
      }
    }
    load_u(std::integral_constant<int, K::KW>{});
  } else {
    const int tv = t - K::KU;
    for (int i = threadIdx.x; i < K::C * 8; i += kThreads) {
      const int r = i >> 3, c = i & 7;
      const __half* src = p.w2 + (size_t)r * p.hidden + chunk * K::HC + tv * 64 + c * 8;
      cp_async16(base + panel_offset(r, c), src, true);
    }
  }
}

// Grouped 3x3 convolution (group width 8, stride 1, pad 1) of the tile's pixels into A_s.
// The halo is the run of whole image rows (global row = n*H + h) that the tile touches,
// plus one row above and below; it is loaded one slice of channels at a time: 64 channels,
// or 32 for C = 32 and for the last slice of C = 96, 160, ... (conv_slice's CS).
template <class K, int CS>
__device__ __forceinline__ void conv_slice(const Params& p, uint8_t* A_s, uint32_t halo_base, uint32_t zero_addr,
                                           int p0, int row_lo, int npix, int s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int W = p.W, H = p.H;
  constexpr int CHS = CS / 8;        // 16-byte chunks (= groups) per pixel and slice
  constexpr int PAIRS = CHS / 2;     // a warp job covers two groups

  // Each lane owns one pixel of a 16-pixel m-tile; lanes 16..31 serve the second group.
  if (s > 0) __syncthreads();
  for (int i = threadIdx.x; i < npix * CHS; i += kThreads) {
    const int q = i / CHS, c = i % CHS;
    const __half* src = p.x + ((size_t)row_lo * W + q) * K::C + s * 64 + c * 8;
    cp_async16(halo_base + panel_offset(q, c), src, true);
  }
  cp_async_commit();
  // kWarps is a multiple of PAIRS, so each warp keeps one pair of groups for the whole
  // slice and loads its 2 x 9 weight fragments once, while the halo is in flight.
  static_assert(kWarps % PAIRS == 0, "conv job split");
  const int pair = warp % PAIRS;
  const int local_group = pair * 2 + (lane >> 4);
  const int g0 = s * 8 + pair * 2;  // global group index of the pair's first group
  uint32_t bfrag[2][9];
#pragma unroll
  for (int tap = 0; tap < 9; ++tap) {
    bfrag[0][tap] = __ldg(p.conv_w + ((size_t)g0 * 9 + tap) * 32 + lane);
    bfrag[1][tap] = __ldg(p.conv_w + ((size_t)(g0 + 1) * 9 + tap) * 32 + lane);
  }
  cp_async_wait<0>();
  __syncthreads();

  // The warp's m-tiles are unrolled so that their nine-tap mma chains interleave.
  constexpr int MT_STEP = kWarps / PAIRS, JOBS_PER_WARP = (K::BM / 16) / MT_STEP;
  float acc[JOBS_PER_WARP][2][4] = {};
#pragma unroll
  for (int j = 0; j < JOBS_PER_WARP; ++j) {
    const int mt = warp / PAIRS + j * MT_STEP;
    const int pix = p0 + mt * 16 + (lane & 15);
    const bool in_range = pix < p.P;
    const int grow = in_range ? pix / W : 0;
    const int w = in_range ? pix - grow * W : 0;
    const int h = grow % H;
    conv3x3_taps(acc[j], in_range, grow, h, w, W, H, row_lo, halo_base, zero_addr, bfrag,
                 [&](int q) { return panel_offset(q, local_group); });
  }
#pragma unroll
  for (int j = 0; j < JOBS_PER_WARP; ++j) {
    const int mt = warp / PAIRS + j * MT_STEP;
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) {
      const int ch = (g0 + gi) * 8 + (lane & 3) * 2;
      const float bias0 = __ldg(p.conv_b + ch), bias1 = __ldg(p.conv_b + ch + 1);
      const int row = mt * 16 + (lane >> 2);
      uint8_t* panel = A_s + (ch >> 6) * (K::BM * 128);
      const int chunk = (ch & 63) >> 3, within = (ch & 7) * 2;
      *reinterpret_cast<uint32_t*>(panel + panel_offset(row, chunk) + within) =
          pack_half2(acc[j][gi][0] + bias0, acc[j][gi][1] + bias1);
      *reinterpret_cast<uint32_t*>(panel + panel_offset(row + 8, chunk) + within) =
          pack_half2(acc[j][gi][2] + bias0, acc[j][gi][3] + bias1);
    }
  }
}

template <class K>
__device__ __forceinline__ void conv_phase(const Params& p, uint8_t* A_s, uint8_t* halo, int p0) {
  const int W = p.W, rows_total = p.P / W;
  const int p_last = min(p0 + K::BM, p.P) - 1;
  const int row_lo = max(p0 / W - 1, 0);
  const int row_hi = min(p_last / W + 1, rows_total - 1);
  const int npix = (row_hi - row_lo + 1) * W;
  uint8_t* zero_pixel = halo + kHaloPixels * 128;
  if (threadIdx.x < 8) reinterpret_cast<uint4*>(zero_pixel)[threadIdx.x] = make_uint4(0, 0, 0, 0);
  const uint32_t halo_base = smem_addr(halo), zero_addr = smem_addr(zero_pixel);
  // slices of KW channels; when PARTIAL, the last is KLAST = 32 wide
  for (int s = 0; s < K::KP; ++s) {
    if constexpr (K::PARTIAL) {
      if (s == K::KP - 1) {
        conv_slice<K, K::KLAST>(p, A_s, halo_base, zero_addr, p0, row_lo, npix, s);
        break;
      }
    }
    conv_slice<K, K::KW>(p, A_s, halo_base, zero_addr, p0, row_lo, npix, s);
  }
  __syncthreads();
}

template <class K>
__global__ void __launch_bounds__(kThreads, K::MINB) block_fusion_kernel(const Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* A_s = smem;
  uint8_t* ring = smem + K::A_BYTES;
  uint8_t* H_s = ring + K::RING_BYTES;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int p0 = blockIdx.x * K::BM;
  const int nchunks = p.hidden / K::HC;
  constexpr int SLICES = K::KU + K::KV;
  const int nslices = nchunks * SLICES;

  auto issue_slice = [&](int gs) {
    if (gs < nslices) load_weight_slice<K>(p, ring + (gs % K::STAGES) * K::SLOT_BYTES, gs / SLICES, gs % SLICES);
    cp_async_commit();
  };

  // PDL (pdl.h): the wait precedes the first read of x (phase A) and every global write; with a separate
  // halo the first STAGES - 1 weight slices (constants) are issued ahead of it. One tile per block: the
  // trigger follows the wait, letting the dependent's blocks start in this grid's tail.
  if constexpr (K::CONV && K::SEPARATE_HALO) {
#pragma unroll
    for (int s = 0; s < K::STAGES - 1; ++s) issue_slice(s);
  }
  pdl::wait();
  pdl::launch_dependents();

  // ---- phase A: X tile into A_s ----
  if constexpr (K::CONV) {
    if constexpr (K::SEPARATE_HALO) {
      conv_phase<K>(p, A_s, H_s + K::H_BYTES, p0);
    } else {
      conv_phase<K>(p, A_s, ring, p0);
#pragma unroll
      for (int s = 0; s < K::STAGES - 1; ++s) issue_slice(s);
    }
  } else {
    constexpr int CHX = K::C / 8;
    const uint32_t a_base = smem_addr(A_s);
    for (int i = threadIdx.x; i < K::BM * CHX; i += kThreads) {
      const int r = i / CHX, c = i % CHX;
      const bool valid = p0 + r < p.P;
      const __half* src = valid ? p.x + (size_t)(p0 + r) * K::C + c * 8 : p.x;
      cp_async16(a_base + (c >> 3) * (K::BM * 128) + panel_offset(r, c & 7), src, valid);
    }
    cp_async_commit();
#pragma unroll
    for (int s = 0; s < K::STAGES - 1; ++s) issue_slice(s);
  }

  // ---- phase B: loop over hidden chunks ----
  const int wm1 = warp / K::WN1, wn1 = warp % K::WN1;
  const int wm2 = warp / K::WN2, wn2 = warp % K::WN2;
  // ldmatrix lane roles: A rows (lane & 15), k half (lane >> 4); B rows (lane & 7) + 8 * (lane >> 4),
  // k half (lane >> 3) & 1.
  const int a_row = lane & 15, a_chunk = lane >> 4;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_chunk = (lane >> 3) & 1;

  float acc2[K::MT2][K::NT2][4];
#pragma unroll
  for (int i = 0; i < K::MT2; ++i)
#pragma unroll
    for (int j = 0; j < K::NT2; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc2[i][j][k] = 0.f;

  int gs = 0;
  for (int chunk = 0; chunk < nchunks; ++chunk) {
    float acc1[K::MT1][K::NT1][4];
#pragma unroll
    for (int i = 0; i < K::MT1; ++i)
#pragma unroll
      for (int j = 0; j < K::NT1; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc1[i][j][k] = 0.f;

    // stage 1: acc1 = X . U_chunk^T, one 64-wide k-slice per ring slot
#pragma unroll 1
    for (int t = 0; t < K::KU; ++t, ++gs) {
      cp_async_wait<K::STAGES - 2>();
      __syncthreads();
      issue_slice(gs + K::STAGES - 1);
      const uint32_t a_base = smem_addr(A_s + t * (K::BM * 128));
      const uint32_t b_base = smem_addr(ring + (gs % K::STAGES) * K::SLOT_BYTES);
#pragma unroll
      for (int ks = 0; ks < K::KW / 16; ++ks) {
        // the last panel of a C = 96, 160, ... tile is KLAST = 32 columns wide
        if constexpr (K::PARTIAL) {
          if (t == K::KU - 1 && ks >= K::KLAST / 16) break;
        }
        uint32_t a[K::MT1][4];
#pragma unroll
        for (int mt = 0; mt < K::MT1; ++mt)
          ldmatrix_x4(a[mt], a_base + panel_offset(wm1 * K::TM1 + mt * 16 + a_row, ks * 2 + a_chunk));
#pragma unroll
        for (int np = 0; np < K::NT1 / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, b_base + panel_offset(wn1 * K::TN1 + np * 16 + b_row, ks * 2 + b_chunk));
#pragma unroll
          for (int mt = 0; mt < K::MT1; ++mt) {
            mma_m16n8k16(acc1[mt][2 * np], a[mt], b[0], b[1]);
            mma_m16n8k16(acc1[mt][2 * np + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }
    // H = ReLU(acc1 + a) into H_s (fp16). Every warp passed a barrier after the previous
    // chunk's stage 2, so nobody still reads H_s.
    store_relu_half<K::MT1, K::NT1, K::TM1, K::TN1, K::BM * 128>(H_s, acc1, p.b1, chunk * K::HC, wm1, wn1, lane);

    // stage 2: acc2 += H . V_chunk^T (the barrier at the top of each slice publishes H_s)
#pragma unroll 1
    for (int t = 0; t < K::KV; ++t, ++gs) {
      cp_async_wait<K::STAGES - 2>();
      __syncthreads();
      issue_slice(gs + K::STAGES - 1);
      const uint32_t a_base = smem_addr(H_s + t * (K::BM * 128));
      const uint32_t b_base = smem_addr(ring + (gs % K::STAGES) * K::SLOT_BYTES);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        uint32_t a[K::MT2][4];
#pragma unroll
        for (int mt = 0; mt < K::MT2; ++mt)
          ldmatrix_x4(a[mt], a_base + panel_offset(wm2 * K::TM2 + mt * 16 + a_row, ks * 2 + a_chunk));
#pragma unroll
        for (int np = 0; np < K::NT2 / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, b_base + panel_offset(wn2 * K::TN2 + np * 16 + b_row, ks * 2 + b_chunk));
#pragma unroll
          for (int mt = 0; mt < K::MT2; ++mt) {
            mma_m16n8k16(acc2[mt][2 * np], a[mt], b[0], b[1]);
            mma_m16n8k16(acc2[mt][2 * np + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // ---- phase C: O + b staged as fp16 in A_s (last read before the final chunk's stage 2) ----
#pragma unroll
  for (int nt = 0; nt < K::NT2; ++nt) {
    const int col = wn2 * K::TN2 + nt * 8 + (lane & 3) * 2;
    const float bias0 = __ldg(p.b2 + col), bias1 = __ldg(p.b2 + col + 1);
    uint8_t* panel = A_s + (col >> 6) * (K::BM * 128);
    const int c16 = (col & 63) >> 3, within = (col & 7) * 2;
#pragma unroll
    for (int mt = 0; mt < K::MT2; ++mt) {
      const int row = wm2 * K::TM2 + mt * 16 + (lane >> 2);
      const float* v = acc2[mt][nt];
      *reinterpret_cast<uint32_t*>(panel + panel_offset(row, c16) + within) = pack_half2(v[0] + bias0, v[1] + bias1);
      *reinterpret_cast<uint32_t*>(panel + panel_offset(row + 8, c16) + within) = pack_half2(v[2] + bias0, v[3] + bias1);
    }
  }
  __syncthreads();
  // All shortcut loads are issued before the first store: the compiler cannot move a load of
  // x above a store to out (they might alias), and one L2 round trip per row would serialise.
  constexpr int CHX = K::C / 8, ITERS = K::BM * CHX / kThreads;
  static_assert(K::BM * CHX % kThreads == 0, "epilogue split");
  uint4 xin[ITERS];
  if (p.residual) {
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int i = threadIdx.x + it * kThreads, r = i / CHX, c = i % CHX;
      xin[it] = p0 + r < p.P ? __ldg(reinterpret_cast<const uint4*>(p.x + (size_t)(p0 + r) * K::C + c * 8))
                             : make_uint4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int i = threadIdx.x + it * kThreads, r = i / CHX, c = i % CHX;
    if (p0 + r >= p.P) continue;
    const uint4 staged =
        *reinterpret_cast<const uint4*>(A_s + (c >> 3) * (K::BM * 128) + panel_offset(r, c & 7));
    uint4 result = staged;
    if (p.residual) {
      const __half2* o2 = reinterpret_cast<const __half2*>(&staged);
      const __half2* x2 = reinterpret_cast<const __half2*>(&xin[it]);
      __half2* r2 = reinterpret_cast<__half2*>(&result);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 a = __half22float2(o2[k]), b = __half22float2(x2[k]);
        r2[k] = __floats2half2_rn(a.x + b.x, a.y + b.y);
      }
    }
    *reinterpret_cast<uint4*>(p.out + (size_t)(p0 + r) * K::C + c * 8) = result;
  }
}

// Launch attributes are per device: each device's limit is checked and its attribute set the
// first time a variant launches there. A variant that needs more shared memory per block than
// the device offers is refused with cudaErrorInvalidConfiguration (the A100's 163 KB is less
// than the C = 256 variants need), before anything is launched.
template <class K>
cudaError_t launch(const Params& p, cudaStream_t stream) {
  static bool configured[kMaxDevices] = {};
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (!configured[dev]) {
    int optin = 0;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return err;
    if (K::SMEM_BYTES > optin) return cudaErrorInvalidConfiguration;
    err = cudaFuncSetAttribute(block_fusion_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, K::SMEM_BYTES);
    if (err != cudaSuccess) return err;
    configured[dev] = true;
  }
  const int grid = (p.P + K::BM - 1) / K::BM;
  if (p.pdl && pdl::device_supports(dev))
    return pdl::launch(block_fusion_kernel<K>, dim3(grid), dim3(kThreads), K::SMEM_BYTES, stream, p);
  block_fusion_kernel<K><<<grid, kThreads, K::SMEM_BYTES, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace bf
