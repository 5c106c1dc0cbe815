// Stride-2 ConvFirst block in one kernel (paper Fig. 6c; cuda_kernels/README.md), NHWC float16,
// fp32 accumulation. The inference form of perfmodel.zoo.ConvFirstBlock(stride=2):
//
//   out = Blur(x) . S^T + b_S  +  ReLU(Blur(conv(x) + b_c) . U^T + b_U) . V^T + b_V
//
// conv: grouped 3x3 (group width 8, stride 1, zero padding); Blur: [1 2 1] x [1 2 1] / 16 with
// reflect padding and stride 2; U: C_in -> hidden, V: hidden -> C_out, S: C_in -> C_out.
//
// One thread block computes a tile of R whole output rows (R * Wo <= BM = 128 or 64 pixels, the rows
// counted over n * Ho + ho, so a tile may span images):
//   phase A  per 32-channel slice: the input rows the tile needs (2R + 3 rows) into shared
//            memory; the conv on tensor cores (mma.m16n8k8) at the 2R + 1 full-resolution rows
//            the blur windows read, into shared memory; then on CUDA cores the blur of that
//            conv output (the FFN input, A_s) and the blur of the input (the shortcut's input,
//            in H_s);
//   phase B  the shortcut first, as one K-chunk of stage 2 (acc = Blur(x) . S^T), which frees
//            H_s; then the FFN loop of block_fusion.cuh over hidden chunks of HC channels;
//   phase C  acc + (b_V + b_S) staged in shared memory, written once with 16-byte stores.
// Weights stream through a cp.async ring of STAGES slots (one 64-wide k-slice per slot). The
// phase-A buffers alias the ring, which is idle until the first weight slice is issued.
#pragma once
#include <cuda_fp16.h>
#include <cstdint>

#include "convfirst_s2.h"
#include "ffn_slices.cuh"
#include "pdl.h"
#include "ptx.cuh"

namespace s2 {

using bf::conv3x3_taps;
using bf::cp_async16;
using bf::cp_async_commit;
using bf::cp_async_wait;
using bf::LaneRoles;
using bf::ldmatrix_x4;
using bf::mma_m16n8k16;
using bf::mma_m16n8k8;
using bf::mma_slice;
using bf::pack_half2;
using bf::panel_offset;
using bf::smem_addr;
using bf::store_relu_half;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBM = 128;  // the largest tile: rows of A_s
constexpr int kMaxW = 56;
constexpr int kMaxDevices = 64;
// Phase A works on 32 channels at a time: one pixel is 64 bytes (four 16-byte chunks).
constexpr int kCS = 32;
constexpr int kPixBytes = kCS * 2;
// R * Wo <= 128 and W <= 2 * Wo, so R * W <= 256: the input rows of a tile hold at most
// (2R + 3) W <= 512 + 3 * 56 pixels, the conv rows (2R + 1) W <= 512 + 56.
constexpr int kXPix = 4 * kBM + 3 * kMaxW;
constexpr int kYPix = 4 * kBM + kMaxW;
constexpr int kPhaseABytes = (kXPix + 1 + kYPix) * kPixBytes;  // + one zero pixel

// 64-byte pixels; the four 16-byte chunks are XOR-swizzled with bits 1-2 of the pixel index,
// so that ldmatrix's eight row reads (eight consecutive pixels) hit eight bank groups.
__device__ __forceinline__ uint32_t px_offset(int q, int c) {
  return static_cast<uint32_t>(q * kPixBytes + (((c ^ (q >> 1)) & 3) << 4));
}

__device__ __forceinline__ int reflect(int i, int n) { return i < 0 ? -i : (i >= n ? 2 * n - 2 - i : i); }

constexpr int cmax(int a, int b) { return a > b ? a : b; }

// NSPLIT > 1: the output columns are split over NSPLIT thread blocks per tile (blockIdx.y), each computing
// COUT of the NSPLIT * COUT columns (phase A, the conv, the blurs and stage 1 are computed by each).
// CLUSTER_H (NSPLIT = 2): the two blocks of a tile are a cluster and split stage 1 too: block r computes hidden
// columns HC1 r .. HC1 r + HC1 - 1 of each chunk (HC1 = HC / 2) and writes them into its own H panel and the
// partner's (distributed shared memory), one cluster barrier per chunk; H alternates between two sets of
// panels by chunk (H_s holds max(KV, KP) >= 2 KV panels), so a block never writes a set its partner may still read.
template <int CIN_, int COUT_, int HC_, int WM1_, int WM2_, int MINB_, int BM_ = kBM, int STAGES_ = 3, int NSPLIT_ = 1,
          bool CLUSTER_H_ = false>
struct Config {
  static constexpr int CIN = CIN_, COUT = COUT_, HC = HC_, WM1 = WM1_, WM2 = WM2_, MINB = MINB_;
  static constexpr int NSPLIT = NSPLIT_;
  static constexpr int OUT_LD = COUT * NSPLIT;              // output row stride
  static constexpr bool CLUSTER_H = CLUSTER_H_;
  static constexpr int HC1 = CLUSTER_H ? HC / 2 : HC;      // hidden columns of a chunk this block's stage 1 computes
  static constexpr int BM = BM_;
  static constexpr int WN1 = kWarps / WM1, WN2 = kWarps / WM2;
  static constexpr int TM1 = BM / WM1, TN1 = HC1 / WN1;    // stage-1 warp tile
  static constexpr int TM2 = BM / WM2, TN2 = COUT / WN2;   // stage-2 warp tile
  static constexpr int MT1 = TM1 / 16, NT1 = TN1 / 8, MT2 = TM2 / 16, NT2 = TN2 / 8;
  static constexpr int KP = (CIN + 63) / 64;               // 64-column panels of A_s
  static constexpr int KW = CIN < 64 ? CIN : 64;           // k width of a U or S slice
  // CIN need not be a power of two, only a multiple of 32: for CIN = 96, 160, ... the last panel
  // of A_s and S_s, and the last U and S slice, is KLAST = 32 wide (PARTIAL; false for CIN = 32
  // and multiples of 64, whose code it leaves unchanged).
  static constexpr int KLAST = CIN - 64 * (KP - 1);
  static constexpr bool PARTIAL = KLAST != KW;
  static constexpr int KV = HC / 64;                       // V slices per chunk
  static constexpr int PER_CHUNK = KP + KV;
  static constexpr int STAGES = STAGES_;  // ring slots: STAGES - 1 slices in flight
  static constexpr int PANEL = BM * 128;
  static constexpr int A_BYTES = KP * PANEL;
  static constexpr int H_BYTES = cmax(KV, KP) * PANEL;     // H, and Blur(x) before the FFN
  static constexpr int SLOT_BYTES = cmax(HC, COUT) * 128;
  static constexpr int RING_BYTES = STAGES * SLOT_BYTES;
  static constexpr int OUT_BYTES = (COUT / 64) * PANEL;    // epilogue staging
  static constexpr int R_BYTES = cmax(cmax(RING_BYTES, kPhaseABytes), OUT_BYTES);
  static constexpr int SMEM_BYTES = A_BYTES + H_BYTES + R_BYTES;
  static_assert(TM1 % 16 == 0 && TN1 % 16 == 0 && TM2 % 16 == 0 && TN2 % 16 == 0, "warp tile");
  static_assert(!CLUSTER_H || (NSPLIT == 2 && HC1 == 64 && H_BYTES >= 2 * KV * PANEL), "cluster split of stage 1");
  static_assert(HC % 64 == 0 && CIN % kCS == 0 && COUT % 64 == 0, "shape");
  static_assert(!PARTIAL || (CIN > 64 && KLAST == 32), "a partial panel is the last, 32 columns");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory");
  // STAGES = 2 (256 -> 512, whose 64 KB slices leave room for two): one slice loads while the
  // other is read, and every slice's barrier waits for its copy.
  static_assert(BM <= kBM && BM % 64 == 0 && STAGES >= 2 && STAGES <= 9, "tile rows, ring depth");
};

// Copies `rows` rows of KWIDTH fp16 (row stride ld) into a slot as one 128-byte panel.
template <int KWIDTH>
__device__ __forceinline__ void copy_rows(uint32_t base, const __half* src, int rows, int ld) {
  constexpr int CH = KWIDTH / 8;
  for (int i = threadIdx.x; i < rows * CH; i += kThreads) {
    const int r = i / CH, c = i % CH;
    cp_async16(base + panel_offset(r, c), src + (size_t)r * ld + c * 8, true);
  }
}

// Weight slice gs of the stream: the KP shortcut slices S, then per hidden chunk KP U slices
// (HC rows, k = input channels) and KV V slices (COUT rows, k = hidden channels).
// S and U slices t < KP - 1 are KW wide, the last KLAST (narrower when PARTIAL).
template <class K>
__device__ __forceinline__ void copy_k_slice(uint32_t base, const __half* src, int rows, int t) {
  if constexpr (K::PARTIAL) {
    if (t == K::KP - 1) {
      copy_rows<K::KLAST>(base, src, rows, K::CIN);
      return;
    }
  }
  copy_rows<K::KW>(base, src, rows, K::CIN);
}

template <class K>
__device__ __forceinline__ void load_slice(const Params& p, uint8_t* slot, int gs) {
  const uint32_t base = smem_addr(slot);
  if (gs < K::KP) {
    copy_k_slice<K>(base, p.ws + gs * 64, K::COUT, gs);
    return;
  }
  const int u = gs - K::KP, chunk = u / K::PER_CHUNK, t = u % K::PER_CHUNK;
  if (t < K::KP)
    copy_k_slice<K>(base, p.w1 + (size_t)chunk * K::HC * K::CIN + t * 64, K::HC1, t);
  else
    copy_rows<64>(base, p.w2 + chunk * K::HC + (t - K::KP) * 64, K::COUT, p.hidden);
}

// Global row (n * H + h) of the input row at the centre of output row J's blur window.
__device__ __forceinline__ int centre_row(const Params& p, int J) {
  return (J / p.Ho) * p.H + 2 * (J % p.Ho);
}

// Phase A: A_s = Blur(conv(x) + b_c) and S_s = Blur(x) for the tile's output rows j0 .. j0+nrows-1.
template <class K>
__device__ __forceinline__ void phase_a(const Params& p, uint8_t* A_s, uint8_t* S_s, uint8_t* work, int j0,
                                        int nrows) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int H = p.H, W = p.W, last_row = p.N * H - 1;
  const int ylo = max(centre_row(p, j0) - 1, 0);
  const int yhi = min(centre_row(p, j0 + nrows - 1) + 1, last_row);
  const int xlo = max(ylo - 1, 0), xhi = min(yhi + 1, last_row);
  const int npix_x = (xhi - xlo + 1) * W, npix_y = (yhi - ylo + 1) * W;
  uint8_t* xh = work;
  uint8_t* zero_pixel = work + kXPix * kPixBytes;
  uint8_t* yb = zero_pixel + kPixBytes;
  const uint32_t xh_base = smem_addr(xh), yb_base = smem_addr(yb), zero_base = smem_addr(zero_pixel);
  if (threadIdx.x < kPixBytes / 16) reinterpret_cast<uint4*>(zero_pixel)[threadIdx.x] = make_uint4(0, 0, 0, 0);
  const int nvalid = nrows * p.Wo;

  // The conv job of a warp: one pair of groups (pair = warp & 1) of the slice's four, and the
  // m-tiles warp/2, warp/2 + 4, ...; two m-tiles at a time so that their tap chains interleave.
  const int pair = warp & 1, local_group = pair * 2 + (lane >> 4);
  const int nmt = (npix_y + 15) / 16;

  for (int s = 0; s < K::CIN / kCS; ++s) {
    if (s > 0) __syncthreads();  // the previous slice's blur has read xh and yb
    for (int i = threadIdx.x; i < npix_x * 4; i += kThreads) {
      const int q = i >> 2, c = i & 3;
      cp_async16(xh_base + px_offset(q, c), p.x + ((size_t)xlo * W + q) * K::CIN + s * kCS + c * 8, true);
    }
    cp_async_commit();
    const int g0 = s * 4 + pair * 2;
    uint32_t bfrag[2][9];
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      bfrag[0][tap] = __ldg(p.conv_w + ((size_t)g0 * 9 + tap) * 32 + lane);
      bfrag[1][tap] = __ldg(p.conv_w + ((size_t)(g0 + 1) * 9 + tap) * 32 + lane);
    }
    float cb[2][2];
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) {
      const int ch = (g0 + gi) * 8 + (lane & 3) * 2;
      cb[gi][0] = __ldg(p.conv_b + ch);
      cb[gi][1] = __ldg(p.conv_b + ch + 1);
    }
    cp_async_wait<0>();
    __syncthreads();

    // conv: Y = conv(x) + b_c at every pixel of rows ylo..yhi, into yb (fp16, as PyTorch rounds it)
    for (int mt0 = warp >> 1; mt0 < nmt; mt0 += 8) {
      float acc[2][2][4] = {};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int q = (mt0 + 4 * j) * 16 + (lane & 15);
        const bool in_range = q < npix_y;
        const int grow = in_range ? ylo + q / W : 0;
        const int w = in_range ? q % W : 0;
        const int h = grow % H;
        conv3x3_taps(acc[j], in_range, grow, h, w, W, H, xlo, xh_base, zero_base, bfrag,
                     [&](int xq) { return px_offset(xq, local_group); });
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int qy = (mt0 + 4 * j) * 16 + (lane >> 2);
#pragma unroll
        for (int gi = 0; gi < 2; ++gi) {
          const int within = (lane & 3) * 4;
          if (qy < npix_y)
            *reinterpret_cast<uint32_t*>(yb + px_offset(qy, pair * 2 + gi) + within) =
                pack_half2(acc[j][gi][0] + cb[gi][0], acc[j][gi][1] + cb[gi][1]);
          if (qy + 8 < npix_y)
            *reinterpret_cast<uint32_t*>(yb + px_offset(qy + 8, pair * 2 + gi) + within) =
                pack_half2(acc[j][gi][2] + cb[gi][0], acc[j][gi][3] + cb[gi][1]);
        }
      }
    }
    __syncthreads();

    // blur + stride 2 (reflect padding) of Y into A_s and of x into S_s: one output pixel and
    // 8 channels per item, fp32 sums of fp16 values
    for (int i = threadIdx.x; i < K::BM * 4; i += kThreads) {
      const int r = i >> 2, c = i & 3;
      float ay[8], ax[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) ay[k] = ax[k] = 0.f;
      if (r < nvalid) {
        const int J = j0 + r / p.Wo, wo = r % p.Wo;
        const int n = J / p.Ho, ho = J % p.Ho;
#pragma unroll
        for (int a = 0; a < 3; ++a) {
          const int grow = n * H + reflect(2 * ho + a - 1, H);
#pragma unroll
          for (int b = 0; b < 3; ++b) {
            const int w = reflect(2 * wo + b - 1, W);
            const float f = (a == 1 ? 2.f : 1.f) * (b == 1 ? 2.f : 1.f);
            const uint4 vy = *reinterpret_cast<const uint4*>(yb + px_offset((grow - ylo) * W + w, c));
            const uint4 vx = *reinterpret_cast<const uint4*>(xh + px_offset((grow - xlo) * W + w, c));
            const __half2* hy = reinterpret_cast<const __half2*>(&vy);
            const __half2* hx = reinterpret_cast<const __half2*>(&vx);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const float2 fy = __half22float2(hy[k]), fx = __half22float2(hx[k]);
              ay[2 * k] += f * fy.x;
              ay[2 * k + 1] += f * fy.y;
              ax[2 * k] += f * fx.x;
              ax[2 * k + 1] += f * fx.y;
            }
          }
        }
      }
      uint4 oy, ox;
      uint32_t* py = reinterpret_cast<uint32_t*>(&oy);
      uint32_t* px = reinterpret_cast<uint32_t*>(&ox);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        py[k] = pack_half2(ay[2 * k] * 0.0625f, ay[2 * k + 1] * 0.0625f);
        px[k] = pack_half2(ax[2 * k] * 0.0625f, ax[2 * k + 1] * 0.0625f);
      }
      const int col = s * kCS + c * 8;
      const uint32_t off = (col >> 6) * K::PANEL + panel_offset(r, (col & 63) >> 3);
      *reinterpret_cast<uint4*>(A_s + off) = oy;
      *reinterpret_cast<uint4*>(S_s + off) = ox;
    }
  }
  __syncthreads();  // A_s and S_s complete; the ring may be overwritten
}

// This block's part of the weights and output when the output columns are split (Config::NSPLIT): rows
// COUT * part .. of V and S, the bias and the output columns from COUT * part.
template <class K>
__device__ __forceinline__ Params column_part(const Params& p, int part) {
  Params q = p;
  q.w2 += (size_t)part * K::COUT * p.hidden;
  q.ws += (size_t)part * K::COUT * K::CIN;
  q.bo += part * K::COUT;
  q.out += part * K::COUT;
  if constexpr (K::CLUSTER_H) {  // stage 1: hidden rows HC1 * part .. of each chunk of U, and their biases
    q.w1 += (size_t)part * K::HC1 * K::CIN;
    q.b1 += part * K::HC1;
  }
  return q;
}

// Every thread of both blocks of the cluster: release this block's shared-memory writes (local and remote),
// acquire the partner's.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// store_relu_half (ffn_slices.cuh) for one 64-column panel, written into this block's panel at H_s and, through
// distributed shared memory, the same offset of the partner's (`remote`: mapa of H_s's address).
template <int MT, int NT, int TM, int TN>
__device__ __forceinline__ void store_relu_half_pair(uint8_t* H_s, uint32_t remote, const float (&acc)[MT][NT][4],
                                                     const float* bias, int offset, int wm, int wn, int lane) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int col = wn * TN + nt * 8 + (lane & 3) * 2;
    const float bias0 = __ldg(bias + offset + col), bias1 = __ldg(bias + offset + col + 1);
    const int c16 = col >> 3, within = (col & 7) * 2;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int row = wm * TM + mt * 16 + (lane >> 2);
      const float* v = acc[mt][nt];
      const uint32_t lo = pack_half2(fmaxf(v[0] + bias0, 0.f), fmaxf(v[1] + bias1, 0.f));
      const uint32_t hi = pack_half2(fmaxf(v[2] + bias0, 0.f), fmaxf(v[3] + bias1, 0.f));
      const uint32_t o0 = panel_offset(row, c16) + within, o1 = panel_offset(row + 8, c16) + within;
      *reinterpret_cast<uint32_t*>(H_s + o0) = lo;
      *reinterpret_cast<uint32_t*>(H_s + o1) = hi;
      asm volatile("st.shared::cluster.b32 [%0], %1;\n" ::"r"(remote + o0), "r"(lo) : "memory");
      asm volatile("st.shared::cluster.b32 [%0], %1;\n" ::"r"(remote + o1), "r"(hi) : "memory");
    }
  }
}

template <class K>
__global__ void __launch_bounds__(kThreads, K::MINB) convfirst_s2_kernel(const Params p_arg) {
  // PDL (pdl.h): phase A reads x at once and its cp.async groups are counted with the weights' after it, so
  // the wait leads (moving the first weight slices ahead of it would change phase A's cp.async waits). One
  // tile per block: the trigger follows the wait, letting the dependent's blocks start in this grid's tail.
  pdl::wait();
  pdl::launch_dependents();
  const Params p = K::NSPLIT > 1 ? column_part<K>(p_arg, blockIdx.y) : p_arg;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* A_s = smem;
  uint8_t* H_s = smem + K::A_BYTES;
  uint8_t* ring = H_s + K::H_BYTES;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int j0 = blockIdx.x * p.rows_per_tile;
  const int nrows = min(p.rows_per_tile, p.N * p.Ho - j0);
  const int nvalid = nrows * p.Wo;

  // ---- phase A ----
  phase_a<K>(p, A_s, H_s, ring, j0, nrows);

  const int nchunks = p.hidden / K::HC;
  const int nslices = K::KP + nchunks * K::PER_CHUNK;
  auto issue_slice = [&](int gs) {
    if (gs < nslices) load_slice<K>(p, ring + (gs % K::STAGES) * K::SLOT_BYTES, gs);
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < K::STAGES - 1; ++s) issue_slice(s);

  const int wm1 = warp / K::WN1, wn1 = warp % K::WN1;
  const int wm2 = warp / K::WN2, wn2 = warp % K::WN2;
  const LaneRoles roles(lane);

  float acc2[K::MT2][K::NT2][4];
#pragma unroll
  for (int i = 0; i < K::MT2; ++i)
#pragma unroll
    for (int j = 0; j < K::NT2; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc2[i][j][k] = 0.f;

  // ---- phase B: the shortcut Blur(x) . S^T (A = S_s in H_s), then the FFN chunks ----
  int gs = 0;
#pragma unroll 1
  for (int t = 0; t < K::KP; ++t, ++gs) {
    cp_async_wait<K::STAGES - 2>();
    __syncthreads();
    issue_slice(gs + K::STAGES - 1);
    const uint32_t a_base = smem_addr(H_s + t * K::PANEL), b_base = smem_addr(ring + (gs % K::STAGES) * K::SLOT_BYTES);
    if (K::PARTIAL && t == K::KP - 1)
      mma_slice<K::MT2, K::NT2, K::TM2, K::TN2, K::KLAST>(acc2, a_base, b_base, wm2, wn2, roles);
    else
      mma_slice<K::MT2, K::NT2, K::TM2, K::TN2, K::KW>(acc2, a_base, b_base, wm2, wn2, roles);
  }
  // CLUSTER_H: both blocks have read S_s (in H_s) before either writes H into the other
  if constexpr (K::CLUSTER_H) cluster_sync();
#pragma unroll 1
  for (int chunk = 0; chunk < nchunks; ++chunk) {
    float acc1[K::MT1][K::NT1][4];
#pragma unroll
    for (int i = 0; i < K::MT1; ++i)
#pragma unroll
      for (int j = 0; j < K::NT1; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc1[i][j][k] = 0.f;

    // stage 1: acc1 = A . U_chunk^T
#pragma unroll 1
    for (int t = 0; t < K::KP; ++t, ++gs) {
      cp_async_wait<K::STAGES - 2>();
      __syncthreads();
      issue_slice(gs + K::STAGES - 1);
      const uint32_t a_base = smem_addr(A_s + t * K::PANEL), b_base = smem_addr(ring + (gs % K::STAGES) * K::SLOT_BYTES);
      if (K::PARTIAL && t == K::KP - 1)
        mma_slice<K::MT1, K::NT1, K::TM1, K::TN1, K::KLAST>(acc1, a_base, b_base, wm1, wn1, roles);
      else
        mma_slice<K::MT1, K::NT1, K::TM1, K::TN1, K::KW>(acc1, a_base, b_base, wm1, wn1, roles);
    }
    // H = ReLU(acc1 + b1) into H_s. Every warp has passed a barrier since its last read of
    // H_s (the previous stage 2 or the shortcut), at the top of this chunk's stage-1 slices.
    // CLUSTER_H: this block's panel (its HC1 hidden columns) of the chunk's panel set, here and in the partner;
    // the partner last read that set two chunks ago, before it arrived at the previous chunk's cluster barrier.
    constexpr int kHSet = K::CLUSTER_H ? K::KV : 0;  // panels between the two alternating sets
    if constexpr (K::CLUSTER_H) {
      uint8_t* hp = H_s + ((chunk & 1) * K::KV + (int)blockIdx.y) * K::PANEL;
      uint32_t remote;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(hp)), "r"(blockIdx.y ^ 1));
      store_relu_half_pair<K::MT1, K::NT1, K::TM1, K::TN1>(hp, remote, acc1, p.b1, chunk * K::HC, wm1, wn1, lane);
      cluster_sync();  // both panels of the chunk are in both blocks
    } else {
      store_relu_half<K::MT1, K::NT1, K::TM1, K::TN1, K::PANEL>(H_s, acc1, p.b1, chunk * K::HC, wm1, wn1, lane);
    }
    // stage 2: acc2 += H . V_chunk^T (the barrier at the top of each slice publishes H_s)
#pragma unroll 1
    for (int t = 0; t < K::KV; ++t, ++gs) {
      cp_async_wait<K::STAGES - 2>();
      __syncthreads();
      issue_slice(gs + K::STAGES - 1);
      mma_slice<K::MT2, K::NT2, K::TM2, K::TN2, 64>(acc2, smem_addr(H_s + ((chunk & 1) * kHSet + t) * K::PANEL),
                                                    smem_addr(ring + (gs % K::STAGES) * K::SLOT_BYTES), wm2, wn2,
                                                    roles);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // nobody reads the ring any more

  // ---- phase C: acc2 + b_o staged as fp16 panels in the ring, then 16-byte row stores ----
  uint8_t* O_s = ring;
#pragma unroll
  for (int nt = 0; nt < K::NT2; ++nt) {
    const int col = wn2 * K::TN2 + nt * 8 + (lane & 3) * 2;
    const float bias0 = __ldg(p.bo + col), bias1 = __ldg(p.bo + col + 1);
    uint8_t* panel = O_s + (col >> 6) * K::PANEL;
    const int c16 = (col & 63) >> 3, within = (col & 7) * 2;
#pragma unroll
    for (int mt = 0; mt < K::MT2; ++mt) {
      const int row = wm2 * K::TM2 + mt * 16 + (lane >> 2);
      const float* v = acc2[mt][nt];
      *reinterpret_cast<uint32_t*>(panel + panel_offset(row, c16) + within) = pack_half2(v[0] + bias0, v[1] + bias1);
      *reinterpret_cast<uint32_t*>(panel + panel_offset(row + 8, c16) + within) =
          pack_half2(v[2] + bias0, v[3] + bias1);
    }
  }
  __syncthreads();
  constexpr int CHX = K::COUT / 8;
  __half* out = p.out + (size_t)j0 * p.Wo * K::OUT_LD;
  for (int i = threadIdx.x; i < nvalid * CHX; i += kThreads) {
    const int r = i / CHX, c = i % CHX;
    *reinterpret_cast<uint4*>(out + (size_t)r * K::OUT_LD + c * 8) =
        *reinterpret_cast<const uint4*>(O_s + (c >> 3) * K::PANEL + panel_offset(r, c & 7));
  }
}

// Output rows per tile: as many as fit in BM pixels, fewer when that leaves SMs idle
// (tiles <= SMs x blocks per SM while possible).
template <class K>
int rows_per_tile(const Params& p, int sms) {
  const int rows = p.N * p.Ho, rmax = K::BM / p.Wo;
  const int slots = sms * K::MINB / K::NSPLIT;  // tiles that fill the SMs once (each is NSPLIT blocks)
  const int want = (rows + slots - 1) / slots;
  return want < 1 ? 1 : (want > rmax ? rmax : want);
}

// Refuses (cudaErrorInvalidConfiguration) a device whose shared memory per block is too small,
// before launching; sets the launch attribute once per device.
// pdl: programmatic dependent launch (pdl.h), on devices that have it.
template <class K>
cudaError_t launch(Params p, cudaStream_t stream, bool pdl = false) {
  static bool configured[kMaxDevices] = {};
  static int sm_count[kMaxDevices] = {};
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (!configured[dev]) {
    int optin = 0;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return err;
    if (K::SMEM_BYTES > optin) return cudaErrorInvalidConfiguration;
    err = cudaDeviceGetAttribute(&sm_count[dev], cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    err = cudaFuncSetAttribute(convfirst_s2_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, K::SMEM_BYTES);
    if (err != cudaSuccess) return err;
    configured[dev] = true;
  }
  if (p.rows_per_tile <= 0) p.rows_per_tile = rows_per_tile<K>(p, sm_count[dev]);
  if (p.rows_per_tile * p.Wo > K::BM) return cudaErrorInvalidValue;
  const int rows = p.N * p.Ho;
  const int grid = (rows + p.rows_per_tile - 1) / p.rows_per_tile;
  if constexpr (K::CLUSTER_H) {  // the two column halves of a tile (blockIdx.y 0, 1) are one cluster
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(grid, K::NSPLIT);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = K::SMEM_BYTES;
    config.stream = stream;
    cudaLaunchAttribute attribute[2];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = 1;
    attribute[0].val.clusterDim.y = K::NSPLIT;
    attribute[0].val.clusterDim.z = 1;
    unsigned count = 1;
    pdl::add_attribute(attribute, count, pdl && pdl::device_supports(dev));
    config.attrs = attribute;
    config.numAttrs = count;
    err = cudaLaunchKernelEx(&config, convfirst_s2_kernel<K>, p);
    return err != cudaSuccess ? err : cudaGetLastError();
  }
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(convfirst_s2_kernel<K>, dim3(grid, K::NSPLIT), dim3(kThreads), K::SMEM_BYTES, stream, p);
  convfirst_s2_kernel<K><<<dim3(grid, K::NSPLIT), kThreads, K::SMEM_BYTES, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace s2
