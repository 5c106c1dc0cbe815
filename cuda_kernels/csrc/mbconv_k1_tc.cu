// Kernel 1 of the MBConv block with the depthwise on tensor cores as banded products (CUDA_KERNELS_K1_TCDW=1, off
// by default; NOTES.md, session 36, "The depthwise as banded products").
//
// One output row of one channel under one filter row r is a banded (Toeplitz) product: out[y][x0 + n] +=
// sum_kk E[y + r][x0 - 8 + kk] T_r[kk][n] with T_r[kk][n] = w[r][kk - n + PAD - 8] inside the band, 0 outside. So
// with E stored channel-major (a channel's rows of x, 16-byte chunks: chunk j holds x in [8 (j - 1), 8 j)) the
// depthwise of 16 output rows x 8 outputs of a channel is, per filter row, one mma.m16n8k16 and one m16n8k8: A = the
// E rows y + r at the window's three chunks (ldmatrix), B = T_r (three registers a lane, the same for every x-block,
// row and image: built once per channel from the taps). Against the HFMA2 loop's one instruction per tap and channel
// pair, that is ~11 instructions per filter row for 16 x 32 outputs.
//
// A CTA takes (channel group, band of ROWS output rows, image): the band's X rows with their halo once (halved, so
// that the accumulators hold h = v / 2 and SiLU is h + h tanh h), then chunks of 16 hidden channels: the expand on
// mma.sync (16-pixel m-tiles of one row) whose SiLU'd fp16 E goes to shared memory transposed (stmatrix.trans), the
// depthwise as above, its bias and SiLU, the band's per-channel sums (partial[n][band][c], as version 8 writes them)
// and D staged in shared memory, then copied out 8 bytes a thread during the next chunk's expand.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "mbconv.cuh"
#include "mbconv_launch.cuh"
#include "mbconv_ptx.cuh"
#include "mbconv_v2.cuh"  // silu_of_half
#include "pdl.h"

namespace mb {
namespace {

constexpr int kTcThreads = 256, kTcWarps = kTcThreads / 32;
constexpr int kTcHC = 16;  // hidden channels a chunk: one pair a warp in the depthwise

template <int H, int W, int CIN, int KS, int ROWS>
struct TcShape {
  static constexpr int PAD = KS / 2;
  static constexpr int KP = (CIN + 15) / 16 * 16;  // the expand's K, zero-padded
  static constexpr int XB = (W + 7) / 8;            // x-blocks of 8 outputs
  static constexpr int SLOTS = XB * 8;              // pixel slots a row (x >= W: zero)
  static constexpr int NCH = XB + 2;                // 16-byte chunks of an E row
  static constexpr int ER = 16 + KS - 1;            // E rows: output rows 0..15 of the band and their halo
  static constexpr int RS = NCH * 16 + 16;          // E row stride: an odd number of 16-byte units, so that
                                                    // ldmatrix's 8 rows fall in 8 bank groups
  static constexpr int CS = (ER * RS / 16) % 2 ? ER * RS : ER * RS + 16;  // channel stride, odd units too
                                                                           // (stmatrix.trans: 8 channels a matrix)
  static constexpr int XROW = KP * 2;               // X slot stride (bytes), chunks XOR (slot >> 2) & 1
  static constexpr int DPIX = 48, DROW = W * DPIX + 16;  // D staging: 16 channels (+8 pad) a pixel; rows + 16 bytes
  static constexpr int CC = CIN / 8;                // 16-byte chunks of an X pixel
  static constexpr int xr() {                       // the most X rows a band expands
    int m = 0;
    for (int b = 0; b * ROWS < H; ++b) {
      const int lo = b * ROWS - PAD < 0 ? 0 : b * ROWS - PAD;
      const int hi = b * ROWS + ROWS - 1 + PAD > H - 1 ? H - 1 : b * ROWS + ROWS - 1 + PAD;
      m = hi - lo + 1 > m ? hi - lo + 1 : m;
    }
    return m;
  }
  static constexpr int XR = xr();
  static constexpr int X_BYTES = XR * SLOTS * XROW, U_BYTES = kTcHC * XROW, E_BYTES = kTcHC * CS,
                       D_BYTES = ROWS * DROW;
  static constexpr int SMEM = X_BYTES + 2 * U_BYTES + E_BYTES + D_BYTES;
  static_assert(CIN % 8 == 0 && ROWS <= 16 && PAD <= 8 && H % ROWS == 0, "shape (bands of ROWS rows each)");
  static_assert(XB % 2 == 0, "an expand m-tile is 16 slots of one row");
  static_assert((KP / 2) % 32 == 8 || (KP / 2) % 32 == 24, "X rows: 4 slots in 4 bank groups before the XOR");
  static_assert((RS / 16) % 2 == 1 && (CS / 16) % 2 == 1, "E strides");
};

// Byte offset of 16-byte chunk `chunk` of X / U row `row` (rows of KP halves): chunks XOR (row >> 2) & 1, so that
// ldmatrix's 8 consecutive rows fall in 8 bank groups (rows 4 apart would share them at 96 or 160 bytes a row).
template <int XROW>
__device__ __forceinline__ uint32_t xrow_offset(int row, int chunk) {
  return row * XROW + ((chunk ^ ((row >> 2) & 1)) << 4);
}

__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// This lane's place in the banded B of every channel (g = lane / 4, q = lane % 4): its registers t = 0, 1 (k16's kk =
// 2q + 8t, +1) and 2 (k8's kk = 16 + 2q, +1) at output n = g hold taps (s, s + 1), s = kk - g + PAD - 8, of each
// filter row; the pairs lie 8 apart and the band is KS <= 7 wide, so at most one t (`t_on`) meets it. The taps' rows
// offset by `lo` / `hi` (clamped into the filter: always a valid load), weighted by `m_lo` / `m_hi`: 1/2 (the halved
// weights) inside the band, 0 outside.
struct BandLane {
  int t_on, lo, hi;
  float m_lo, m_hi;
};

template <int KS>
__device__ __forceinline__ BandLane band_lane(int lane) {
  constexpr int PAD = KS / 2;
  const int g = lane >> 2, q = lane & 3;
  int t_on = -1, s0 = 0;
#pragma unroll
  for (int t = 0; t < 3; ++t) {
    const int s = 2 * q + 8 * t - g + PAD - 8;
    if (s >= -1 && s < KS) t_on = t, s0 = s;
  }
  const bool lo_ok = t_on >= 0 && s0 >= 0, hi_ok = t_on >= 0 && s0 + 1 < KS;
  return {t_on, min(max(s0, 0), KS - 1), min(max(s0 + 1, 0), KS - 1), lo_ok ? 0.5f : 0.f, hi_ok ? 0.5f : 0.f};
}

// B of the banded product of the channel whose taps start at w_c (p.w_dw + c: [KS * KS][HID]), per filter row.
template <int KS, int HID>
__device__ __forceinline__ void banded_b(const float* w_c, const BandLane& L, uint32_t (&b)[KS][3]) {
  const float *lo = w_c + L.lo * HID, *hi = w_c + L.hi * HID;
#pragma unroll
  for (int r = 0; r < KS; ++r) {
    const uint32_t word = bf::pack_half2(L.m_lo * __ldg(lo + r * KS * HID), L.m_hi * __ldg(hi + r * KS * HID));
#pragma unroll
    for (int t = 0; t < 3; ++t) b[r][t] = t == L.t_on ? word : 0u;
  }
}

template <int H, int W, int CIN, int KS, int ROWS, int HID>
__global__ void __launch_bounds__(kTcThreads, 2) expand_dw_tc_kernel(const Params p, int groups) {
  using S = TcShape<H, W, CIN, KS, ROWS>;
  constexpr int PAD = S::PAD, KP = S::KP, XB = S::XB, SLOTS = S::SLOTS, NCH = S::NCH, RS = S::RS, CS = S::CS;
  constexpr int XROW = S::XROW, CC = S::CC, KSTEPS = KP / 16, MT_ROW = XB / 2;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* const xs = smem;
  uint8_t* const us = smem + S::X_BYTES;
  uint8_t* const es = us + 2 * S::U_BYTES;
  uint8_t* const ds = es + S::E_BYTES;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int band = blockIdx.y, n = blockIdx.z;
  constexpr int chunks = HID / kTcHC;
  const int ch_lo = blockIdx.x * chunks / groups, ch_hi = (blockIdx.x + 1) * chunks / groups;
  const int oh0 = band * ROWS;
  constexpr int rows_valid = ROWS;  // H % ROWS == 0
  const int ih_lo = max(0, oh0 - PAD), ih_hi = min(H - 1, oh0 + ROWS - 1 + PAD), xrows = ih_hi - ih_lo + 1;
  const uint32_t xs_a = smem_addr(xs), us_a = smem_addr(us), es_a = smem_addr(es), ds_a = smem_addr(ds);

  // Zeros: all of E (rows and columns outside the image stay zero: the expand writes only in-image rows and slots,
  // the slots x >= W as zeros), X's slots x >= W and channels past CIN.
  for (int i = tid; i < S::E_BYTES / 16; i += kTcThreads) *reinterpret_cast<uint4*>(es + 16 * i) = make_uint4(0, 0, 0, 0);
  if constexpr (SLOTS > W || KP > CIN) {
    constexpr int SIDE = (SLOTS - W) * (KP / 8), TAIL = KP / 8 - CC, PER_ROW = SIDE + W * TAIL;
    for (int i = tid; i < S::XR * PER_ROW; i += kTcThreads) {
      const int row = i / PER_ROW, rest = i - row * PER_ROW;
      int x, chunk;
      if (rest < SIDE) x = W + rest / (KP / 8), chunk = rest % (KP / 8);
      else x = (rest - SIDE) / (TAIL > 0 ? TAIL : 1), chunk = CC + (rest - SIDE) % (TAIL > 0 ? TAIL : 1);
      *reinterpret_cast<uint4*>(xs + xrow_offset<XROW>(row * SLOTS + x, chunk)) = make_uint4(0, 0, 0, 0);
    }
  }
  pdl::wait();  // x and every global write follow the wait (pdl.h)
  pdl::launch_dependents();

  const __half* xg = p.x + (size_t)(n * H + ih_lo) * W * CIN;
  for (int i = tid; i < xrows * W * CC; i += kTcThreads) {
    const int pix = i / CC, chunk = i - pix * CC, row = pix / W, x = pix - row * W;
    cp_async16(xs_a + xrow_offset<XROW>(row * SLOTS + x, chunk), xg + (size_t)i * 8, true);
  }
  // U: one 16-byte piece a thread (16 channels x KP / 8 pieces <= 256), its places computed once
  static_assert(kTcHC * (KP / 8) <= kTcThreads, "one U piece a thread");
  const bool u_mine = tid < kTcHC * (KP / 8);
  const uint32_t u_dst = us_a + xrow_offset<XROW>(tid / (KP / 8), tid % (KP / 8));
  const __half* const u_src = p.w_exp + (tid / (KP / 8)) * KP + (tid % (KP / 8)) * 8;
  auto load_u = [&](int chunk, int buf) {
    if (u_mine) cp_async16(u_dst + buf * S::U_BYTES, u_src + chunk * kTcHC * KP, true);
  };
  load_u(ch_lo, 0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  for (int i = tid; i < xrows * W * CC; i += kTcThreads) {  // X halved (exact): the accumulators hold h = v / 2
    const int pix = i / CC, chunk = i - pix * CC, row = pix / W, x = pix - row * W;
    uint4* v = reinterpret_cast<uint4*>(xs + xrow_offset<XROW>(row * SLOTS + x, chunk));
    uint4 u = *v;
    const __half2 half = __float2half2_rn(0.5f);
    __half2* h = reinterpret_cast<__half2*>(&u);
#pragma unroll
    for (int j = 0; j < 4; ++j) h[j] = __hmul2(h[j], half);
    *v = u;
  }

  // D staging -> D: 16 bytes (8 channels) a thread and step, ROWS x W pixels of 16 channels
  auto copy_out = [&](int chunk) {
    constexpr int PIECES = ROWS * W * 2, STEPS = (PIECES + kTcThreads - 1) / kTcThreads;
    __half* dg = p.d + (size_t)(n * H + oh0) * W * HID + chunk * kTcHC;
#pragma unroll
    for (int k = 0; k < STEPS; ++k) {
      const int i = tid + k * kTcThreads, pix = i >> 1, half = i & 1, y = pix / W;
      if (PIECES % kTcThreads == 0 || i < PIECES)
        *reinterpret_cast<uint4*>(dg + pix * HID + half * 8) =
            *reinterpret_cast<const uint4*>(ds + pix * S::DPIX + (y + half) * 16);  // DROW = W DPIX + 16
    }
  };

  float* const partial = p.partial + ((size_t)n * p.row_blocks + band) * HID;
  const BandLane band_b = band_lane<KS>(lane);
  for (int chunk = ch_lo; chunk < ch_hi; ++chunk) {
    const int buf = (chunk - ch_lo) & 1;
    cp_async_wait<0>();
    __syncthreads();  // U(chunk) and X landed; E and the staging free (the last depthwise and copy done)
    if (chunk > ch_lo) copy_out(chunk - 1);
    if (chunk + 1 < ch_hi) load_u(chunk + 1, buf ^ 1);
    cp_async_commit();

    // ---- the expand: m-tiles (16 slots of one row) x 16 channels, K = KP ----
    {
      // Lane constants: ldmatrix row (mi & 1) 8 + (lane & 7) of matrix mi = lane / 8 starts 16-row-aligned runs, so
      // its chunk XOR ((row >> 2) & 1) is the lane's own; the stmatrix row is channel (mi / 2) 8 + (lane & 7).
      const int mi = lane >> 3, sw = (lane >> 2) & 1;
      const uint32_t u_lane = us_a + buf * S::U_BYTES + ((mi >> 1) * 8 + (lane & 7)) * XROW + (((mi & 1) ^ sw) << 4);
      const uint32_t x_lane = xs_a + ((mi & 1) * 8 + (lane & 7)) * XROW + (((mi >> 1) ^ sw) << 4);
      const uint32_t e_lane = es_a + ((mi >> 1) * 8 + (lane & 7)) * CS + (mi & 1) * 16 + 16 + (ih_lo - oh0 + PAD) * RS;
      uint32_t b[KSTEPS][4];  // U's fragments: [k step][n-tile 0: b0, b1, n-tile 1: b0, b1]
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ++ks) ldmatrix_x4(b[ks], u_lane + 32 * ks);
      const int c_base = chunk * kTcHC;
      float bias[2][2];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) bias[nt][e] = 0.5f * __ldg(p.b_exp + c_base + nt * 8 + 2 * q + e);
      for (int mt = warp; mt < xrows * MT_ROW; mt += kTcWarps) {
        const int row = mt / MT_ROW, x0 = (mt - row * MT_ROW) * 16;
        const uint32_t x_tile = x_lane + (row * SLOTS + x0) * XROW;
        float acc[2][4];
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
          uint32_t a[4];
          ldmatrix_x4(a, x_tile + 32 * ks);
          if (ks == 0) {
            bf::mma_m16n8k16_c(acc[0], a, b[0][0], b[0][1], bias[0][0], bias[0][1]);
            bf::mma_m16n8k16_c(acc[1], a, b[0][2], b[0][3], bias[1][0], bias[1][1]);
          } else {
            mma_m16n8k16(acc[0], a, b[ks][0], b[ks][1]);
            mma_m16n8k16(acc[1], a, b[ks][2], b[ks][3]);
          }
        }
        const bool lo_in = x0 + g < W, hi_in = x0 + 8 + g < W;  // slots x >= W hold zeros in E
        uint32_t v[4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          v[2 * nt] = lo_in ? bf::pack_half2(silu_of_half(acc[nt][0]), silu_of_half(acc[nt][1])) : 0u;
          v[2 * nt + 1] = hi_in ? bf::pack_half2(silu_of_half(acc[nt][2]), silu_of_half(acc[nt][3])) : 0u;
        }
        // matrix mi = (n-tile mi / 2, slots (mi % 2) 8 ..): stored row j = channel 8 (mi / 2) + j, its 8 slots
        stmatrix_x4_trans(e_lane + row * RS + x0 * 2, v[0], v[1], v[2], v[3]);
      }
    }
    __syncthreads();  // E complete

    // ---- the depthwise: warp w takes channels 2w, 2w + 1 of the chunk; 16 rows x 8 XB outputs each ----
    {
      const int cl = 2 * warp, c = chunk * kTcHC + cl;
      float acc[2][XB][4];
      const float bias_h[2] = {0.5f * __ldg(p.b_dw + c), 0.5f * __ldg(p.b_dw + c + 1)};  // C of the first products
#pragma unroll
      for (int ci = 0; ci < 2; ++ci) {
        uint32_t bw[KS][3];
        banded_b<KS, HID>(p.w_dw + c + ci, band_b, bw);
        const int mi = lane >> 3;
        const uint32_t a_base = es_a + (cl + ci) * CS + ((mi & 1) * 8 + (lane & 7)) * RS + (mi >> 1) * 16;
#pragma unroll
        for (int r = 0; r < KS; ++r) {
          // f[j]: E's chunks 2j, 2j + 1 (rows 0-7 and 8-15 of each: registers 0-1 and 2-3). An even x-block's
          // window (chunks xb, xb + 1, xb + 2) is one k16 product on f[xb / 2] and a k8 on f[xb / 2 + 1]'s first
          // half; an odd one's starts mid-pair, so three k8 products (every operand consecutive registers of one
          // ldmatrix: no moves, and each E row read once a filter row)
          uint32_t f[NCH / 2][4];
#pragma unroll
          for (int j = 0; j < NCH / 2; ++j) ldmatrix_x4(f[j], a_base + r * RS + j * 32);
#pragma unroll
          for (int xb = 0; xb < XB; ++xb) {
            float (&d)[4] = acc[ci][xb];
            if (xb % 2 == 0) {
              if (r == 0) bf::mma_m16n8k16_c(d, f[xb / 2], bw[r][0], bw[r][1], bias_h[ci], bias_h[ci]);
              else mma_m16n8k16(d, f[xb / 2], bw[r][0], bw[r][1]);
              bf::mma_m16n8k8(d, f[xb / 2 + 1][0], f[xb / 2 + 1][1], bw[r][2]);
            } else {
              if (r == 0) bf::mma_m16n8k8_c(d, f[xb / 2][2], f[xb / 2][3], bw[r][0], bias_h[ci]);
              else bf::mma_m16n8k8(d, f[xb / 2][2], f[xb / 2][3], bw[r][0]);
              bf::mma_m16n8k8(d, f[xb / 2 + 1][0], f[xb / 2 + 1][1], bw[r][1]);
              bf::mma_m16n8k8(d, f[xb / 2 + 1][2], f[xb / 2 + 1][3], bw[r][2]);
            }
          }
        }
      }
      // bias (in the accumulators) and SiLU; the band's sums; D as channel pairs into the staging
      const bool lo_ok = g < rows_valid, hi_ok = g + 8 < rows_valid;
      float sum[2] = {0.f, 0.f};
#pragma unroll
      for (int xb = 0; xb < XB; ++xb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int x = xb * 8 + 2 * q + (e & 1), y = g + (e >> 1) * 8;
          const bool ok = x < W && ((e >> 1) ? hi_ok : lo_ok);
          const float v0 = silu_of_half(acc[0][xb][e]), v1 = silu_of_half(acc[1][xb][e]);
          sum[0] += ok ? v0 : 0.f;
          sum[1] += ok ? v1 : 0.f;
          if (ok) *reinterpret_cast<uint32_t*>(ds + y * S::DROW + x * S::DPIX + cl * 2) = bf::pack_half2(v0, v1);
        }
      // two channels over 32 lanes: halves exchange first, then lanes 0-15 hold channel 0's, 16-31 channel 1's
      const bool upper = lane & 16;
      float s = (upper ? sum[1] : sum[0]) + __shfl_xor_sync(0xffffffffu, upper ? sum[0] : sum[1], 16);
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if ((lane & 15) == 0) partial[c + (upper ? 1 : 0)] = s;
    }
  }
  __syncthreads();
  copy_out(ch_hi - 1);
}

template <int H, int W, int CIN, int KS, int ROWS, int HID>
cudaError_t launch_tc_shape(const Params& p, cudaStream_t stream, bool pdl) {
  using S = TcShape<H, W, CIN, KS, ROWS>;
  auto kernel = expand_dw_tc_kernel<H, W, CIN, KS, ROWS, HID>;
  static DeviceSlots slots;
  int dev = 0;
  cudaError_t err = prepare(kernel, slots, S::SMEM, kTcThreads, dev);
  if (err != cudaSuccess) return err;
  const int bands = p.row_blocks, chunks = HID / kTcHC;
  const long items = (long)p.N * bands, ctas = (long)slots.ctas_per_sm[dev] * slots.sms[dev];
  const int groups = (int)std::max(1L, std::min<long>(chunks, ctas / items));  // about one wave of CTAs
  const dim3 grid(groups, bands, p.N);
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, grid, dim3(kTcThreads), S::SMEM, stream, p, groups);
  kernel<<<grid, kTcThreads, S::SMEM, stream>>>(p, groups);
  return cudaGetLastError();
}

}  // namespace

bool kernel1_tc_requested() {
  const char* v = std::getenv("CUDA_KERNELS_K1_TCDW");
  return v != nullptr && v[0] == '1' && v[1] == '\0';
}

// The shapes instantiated: EfficientNet-B0's 3.1 (28 x 28, 40 -> 240, k 5) and 4.1 (14 x 14, 80 -> 480, k 3), in
// bands of 14 rows, stride 1, hidden = hid_pad.
bool kernel1_tc_applies(const Params& p) {
  if (p.stride != 1 || p.k_pad == 0 || p.hidden != p.hid_pad || p.hidden % kTcHC || p.rows_per_tile != 14) return false;
  const bool b31 = p.H == 28 && p.W == 28 && p.C_in == 40 && p.ksize == 5 && p.hidden == 240;
  const bool b41 = p.H == 14 && p.W == 14 && p.C_in == 80 && p.ksize == 3 && p.hidden == 480;
  return b31 || b41;
}

cudaError_t launch_expand_dw_tc(const Params& p, cudaStream_t stream, bool pdl) {
  if (!kernel1_tc_applies(p)) return cudaErrorNotSupported;
  if (p.H == 28) return launch_tc_shape<28, 28, 40, 5, 14, 240>(p, stream, pdl);
  return launch_tc_shape<14, 14, 80, 3, 14, 480>(p, stream, pdl);
}

}  // namespace mb
