// EfficientNet's stem and block features.1.0's kernel 1 in one kernel (NOTES.md, "The stem and block 1.0's kernel 1
// in one kernel"; CUDA_KERNELS_EFFNET_STEM_DW=1, off by default until measured):
//
//   E = SiLU(conv 3x3 stride 2 (3 -> C)(image) + b)        the stem, never written to DRAM
//   D = SiLU(depthwise 3x3 stride 1 (E) + b_dw)             block 1.0's kernel 1 (expand ratio 1: its input is E)
//   partial[n][band][c] = the band's sums of D             for version 3's SE, then the projection, unchanged
//
// One CTA of 8 warps per band of kStemDwRows output rows of one image (2 CTAs per SM):
//   1. the image window of the band's E rows oy0 - 1 .. oy0 + R (the depthwise's halo), as the stem's version 2 lays
//      it out (effnet_stem.h: 16-byte pieces where W % 8 == 0 and the image is 16-byte aligned, else per half);
//   2. the stem's GEMM on mma.m16n8k16 (effnet_stem.cu's K layout, masks and fragments) over the (R + 2) x Wo E
//      pixels, + bias, SiLU, one fp16 rounding, into the E tile: rows of E_cols(Wo) pixels of C halves, E column c
//      holding stem column c - 1 (columns 0 and >= Wo + 1 zero, rows outside the image zero: the depthwise's padding),
//      pixel c stored in slot c ^ ((c >> 2) & 1), so that the two column groups a warp's depthwise reads (4 pixels
//      apart) fall on the two halves of the banks;
//   3. the depthwise over (segment of 4 output rows, group of 4 output columns) items, each thread a channel pair,
//      version 8's HFMA2 form (the taps halved as half2, summed in fp16 from zero in version 3's order, the halved
//      bias added in fp32, silu_of_half): D stored, the pair's sums per group to red[group][C]; after a barrier, C
//      threads add the groups' sums in order into partial.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "effnet_stem.h"
#include "mbconv.cuh"
#include "effnet_stem.cuh"
#include "mbconv_stem_dw.h"
#include "pdl.h"

namespace mb {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int R = kStemDwRows, ER = R + 2;  // output rows per band, E rows per band
constexpr int OW = 4;                       // a depthwise item: SEG output rows x 4 output columns
using effstem::silu_of_half;

__device__ __forceinline__ int e_slot(int c) { return c ^ ((c >> 2) & 1); }  // E column c's pixel slot

// p: block 1.0's Params (x unused: the block's input is E; H = Ho, W = Wo the stem's output size; C_in = hidden = C;
// d, partial, w_dw [9, hid_pad], b_dw [hid_pad], rows_per_tile = R, row_blocks = bands); s: the image and the stem.
// BC (CUDA_KERNELS_STEM_DW_BC=1, off: B0 +6.1 us in s20 call 1): the stem's bias and halving in its MMA
// (StemLane::halve, mma<true>, act_bc). SEG (CUDA_KERNELS_STEM_DW_SEG=4, or 8 by default since session 20): output
// rows per depthwise item, 4 or the whole band (8): each E row loaded once per band instead of once per 4-row segment plus its 2 halo rows, and the
// item's fixed path (its division, addresses, branches) over 32 outputs instead of 16.
template <int NT, bool BC, int SEG>
__global__ void __launch_bounds__(kThreads, 2) stem_dw_kernel(const Params p, const StemDwParams s) {
  static_assert(SEG == 4 || SEG == kStemDwRows, "items of 4 rows or of the whole band");
  constexpr int C = 8 * NT, PAIRS = C / 2, GROUPS = kThreads / PAIRS;
  extern __shared__ __align__(16) __half smem_h[];
  const int Wimg = s.W, Himg = s.H, Ho = p.Ho, Wo = p.Wo;
  const int pitch = effstem::window_pitch_v2(Wimg), w0 = effstem::kWindowOffsetV2;
  const int WE = stem_dw_e_cols(Wo);
  __half* win = smem_h;
  __half* E = win + stem_dw_window_halves(Wimg);                        // [ER][WE][C]
  float* red = reinterpret_cast<float*>(E + ER * WE * C);               // [GROUPS][C]
  const int bands = p.row_blocks, n = blockIdx.x / bands, band = blockIdx.x - n * bands;
  const int oy0 = band * R, rows = min(R, Ho - oy0), sy0 = oy0 - 1, iy0 = 2 * sy0 - 1;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;

  effstem::StemLane<NT> lane_ops(s.wb, s.bias, lane, pitch);  // the stem's fragments, bias, offsets, masks
  if constexpr (BC) lane_ops.halve();

  pdl::wait();  // the image may be the previous kernel's output
  // 1. the window (effnet_stem.cu version 2's copy): row r is image row iy0 + r, half w0 + c the row's half c - 3
  const int win_rows = 2 * ER + 1;
  effstem::copy_window_v2<kThreads>(win, s.img + (size_t)n * Himg * Wimg * 3, Himg, Wimg, iy0, win_rows, tid);
  // E's columns outside the stem's output (0 and Wo + 1 .. WE - 1), every row: never written by the GEMM below
  for (int i = tid; i < ER * (WE - Wo) * PAIRS; i += kThreads) {
    const int r = i / ((WE - Wo) * PAIRS), rest = i - r * (WE - Wo) * PAIRS;
    const int j = rest / PAIRS, pr = rest - j * PAIRS, col = j == 0 ? 0 : Wo + j;
    reinterpret_cast<uint32_t*>(E + (r * WE + e_slot(col)) * C)[pr] = 0u;
  }
  __syncthreads();
  pdl::launch_dependents();

  // 2. the stem over the band's ER x Wo E pixels (row-major), m16 tiles round robin over the warps
  {
    const int P = ER * Wo, tiles = (P + 15) / 16;
    const float inv_wo = 1.f / static_cast<float>(Wo);
    auto pixel = [&](int px, int& er, int& sx) {  // er = px / Wo, sx = px % Wo
      er = __float2int_rz(static_cast<float>(px) * inv_wo);
      sx = px - er * Wo;
      if (sx < 0) --er, sx += Wo;
      else if (sx >= Wo) ++er, sx -= Wo;
    };
    for (int tile = warp; tile < tiles; tile += kWarps) {
      int base[2], er[2], sx[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        pixel(min(tile * 16 + g + 8 * h, P - 1), er[h], sx[h]);
        base[h] = w0 + 2 * er[h] * pitch + 6 * sx[h];
      }
      float acc[NT][4];
      lane_ops.template mma<BC>(acc, win, base);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (tile * 16 + g + 8 * h >= P) continue;
        const int sy = sy0 + er[h];
        const bool inside = sy >= 0 && sy < Ho;  // else a padding row of the depthwise: zero
        uint32_t* dst = reinterpret_cast<uint32_t*>(E + (er[h] * WE + e_slot(sx[h] + 1)) * C) + q;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const __half2 v = BC ? lane_ops.act_bc(acc, h, nt) : lane_ops.act(acc, h, nt);
          dst[4 * nt] = inside ? *reinterpret_cast<const uint32_t*>(&v) : 0u;
        }
      }
    }
  }
  __syncthreads();  // E complete

  // 3. the depthwise: thread (pair, group); items (segment, column group), column groups first
  const int pair = tid % PAIRS, group = tid / PAIRS, ch = 2 * pair;
  __half2 wh[9];
#pragma unroll
  for (int t = 0; t < 9; ++t)
    wh[t] = __floats2half2_rn(0.5f * __ldg(p.w_dw + t * p.hid_pad + ch), 0.5f * __ldg(p.w_dw + t * p.hid_pad + ch + 1));
  const float db0 = 0.5f * __ldg(p.b_dw + ch), db1 = 0.5f * __ldg(p.b_dw + ch + 1);
  const int ngroups = (Wo + OW - 1) / OW, nseg = (rows + SEG - 1) / SEG;
  float sum0 = 0.f, sum1 = 0.f;
  for (int item = group; item < nseg * ngroups; item += GROUPS) {
    const int seg = item / ngroups, og = item - seg * ngroups;
    const int orow0 = seg * SEG, ow0 = og * OW;
    const int valid_rows = min(SEG, rows - orow0), valid = min(OW, Wo - ow0);
    // whole-band items: D's pixel stride the compile-time C (the launcher requires hidden == C), so that a row's four
    // stores take immediate offsets from one address; the E slots' swizzle bit once per item (ow0 % 4 == 0: slot of
    // column ow0 + x is ow0 + (x ^ bit), bit = (og + x / 4) & 1)
    const int dstride = SEG == kStemDwRows ? C : p.hidden;
    const int sbit = og & 1;
    __half2 acc[SEG][OW];
#pragma unroll
    for (int er = 0; er < SEG + 2; ++er) {  // E rows orow0 .. orow0 + SEG + 1 (output row o reads E rows o .. o + 2)
      __half2 e[OW + 2];
#pragma unroll
      for (int x = 0; x < OW + 2; ++x)
        e[x] = *reinterpret_cast<const __half2*>(
            E + ((orow0 + er) * WE + (SEG == kStemDwRows ? ow0 + (x ^ (sbit ^ (x >> 2))) : e_slot(ow0 + x))) * C + ch);
#pragma unroll
      for (int o = 0; o < SEG; ++o) {
        const int dy = er - o;
        if (dy < 0 || dy > 2) continue;
        if (dy == 0)
#pragma unroll
          for (int u = 0; u < OW; ++u) acc[o][u] = __float2half2_rn(0.f);
#pragma unroll
        for (int u = 0; u < OW; ++u)
#pragma unroll
          for (int dx = 0; dx < 3; ++dx) acc[o][u] = __hfma2(e[u + dx], wh[dy * 3 + dx], acc[o][u]);
        if (dy == 2 && o < valid_rows) {
          __half* d = p.d + (((size_t)n * Ho + oy0 + orow0 + o) * Wo + ow0) * dstride + ch;
#pragma unroll
          for (int u = 0; u < OW; ++u) {
            if (u >= valid) break;
            const float2 f = __half22float2(acc[o][u]);
            const float s0 = silu_of_half(f.x + db0), s1 = silu_of_half(f.y + db1);
            *reinterpret_cast<__half2*>(d + (size_t)u * dstride) = __floats2half2_rn(s0, s1);
            sum0 += s0;
            sum1 += s1;
          }
        }
      }
    }
  }
  *reinterpret_cast<float2*>(red + group * C + ch) = make_float2(sum0, sum1);
  __syncthreads();
  if (tid < C) {
    float t = 0.f;
#pragma unroll
    for (int gi = 0; gi < GROUPS; ++gi) t += red[gi * C + tid];
    p.partial[((size_t)n * bands + band) * p.hid_pad + tid] = t;
  }
}

}  // namespace

cudaError_t launch_stem_dw(const Params& p, const StemDwParams& s, cudaStream_t stream, bool pdl) {
  if (p.C_in != 32 || p.hidden != 32 || p.ksize != 3 || p.stride != 1 || p.rows_per_tile != kStemDwRows ||
      p.Ho != (s.H + 1) / 2 || p.Wo != (s.W + 1) / 2 || s.W < 1 || s.W > effstem::kMaxWidth)
    return cudaErrorInvalidValue;
  const char* bc_env = std::getenv("CUDA_KERNELS_STEM_DW_BC");    // "1": the stem's bias in its MMA
  // whole-band depthwise items unless "4" (default since session 20: B0 -5.2 / -5.6 us in s20 calls 1 and 3)
  const char* seg_env = std::getenv("CUDA_KERNELS_STEM_DW_SEG");
  const bool bc = bc_env != nullptr && std::strcmp(bc_env, "1") == 0;
  const bool band = seg_env == nullptr || std::strcmp(seg_env, "4") != 0;
  const auto kernel = bc ? (band ? stem_dw_kernel<4, true, kStemDwRows> : stem_dw_kernel<4, true, 4>)
                         : (band ? stem_dw_kernel<4, false, kStemDwRows> : stem_dw_kernel<4, false, 4>);
  const int smem = stem_dw_smem_bytes(s.W, p.Wo, 32);
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (smem > 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(p.N * p.row_blocks);
  if (pdl && pdl::device_supports(dev)) return pdl::launch(kernel, grid, dim3(kThreads), smem, stream, p, s);
  kernel<<<grid, kThreads, smem, stream>>>(p, s);
  return cudaGetLastError();
}

}  // namespace mb
