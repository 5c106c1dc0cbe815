// EfficientNet's stem in one kernel: y = SiLU(conv(x) + b), conv 3x3 stride 2 pad 1, 3 -> C (C = 8 NT, NT in
// {4, 5, 6}: B0-B2's 32, B3's 40, B4's 48), NHWC float16, fp32 accumulation, BN folded
// (cuda_kernels/effnet_stem.py; NOTES.md "EfficientNet's stem"). Its own extension, perfmodel_effnet_stem.
//
// One CTA of 8 warps per band of kRows output rows of one image:
//   1. the band's input window, 2 kRows + 1 rows of the image's W + 2 columns (column -1 and W of zero padding) x 3
//      channels, into shared memory as fp16 halves at an even row pitch, zero outside the image;
//   2. the convolution as a GEMM on mma.m16n8k16 with the ConvFirstNet stem's conv1 K layout (csrc/stem.cu,
//      stem.py pack_conv1): k = ky * 10 + kx * 3 + ci, each ky row padded to 10, then to 32, so the k pair a thread
//      holds is two adjacent halves of one window row (output pixel ox's taps start at half 6 ox: one aligned 32-bit
//      shared load); the pad k's weights are zero, their loads stay in the window and are masked to zero; M = the
//      band's pixels in m16 tiles over the warps, N = C;
//   3. + bias, SiLU (tanh form, fp32), one fp16 rounding, stored as half2.
// Version 2 (V2; the default since session 16, CUDA_KERNELS_EFFNET_STEM_V2=0 runs version 1): 70.2 -> 54.5 us at B0's
// shape under Nsight Compute, B0 1.833 -> 1.813 ms (mbconv/s16/call1; predicted ~40 us). Version 1 ran 71.7 us
// (session 15: DRAM 32% of peak, issue active 55%, ~3x the instructions planned): its window is copied one half per
// lane (a 2-byte load, index tests and a 2-byte store per half), each tile divides by Wo four times, and its half2
// stores fill half of each 32-byte sector. Version 2 copies each 16-byte piece of an image row with one 16-byte load
// (and the next piece's first word), four byte permutes (the window sits 3 halves right of the image row) and one
// 16-byte shared store (layout in effnet_stem.h); divides once per pixel row pair through a float reciprocal; and
// stages each warp's 16 x C tile in shared memory so that it leaves as whole 16-byte pieces of the band's contiguous
// output.
#include "effnet_stem.h"

#include <cstdlib>

#include "effnet_stem.cuh"
#include "pdl.h"

namespace effstem {

constexpr int kThreads = 256, kWarps = kThreads / 32;

// wb: conv's B fragments (stem.py pack_conv1: [nt][s][lane][r] words); bias [C] fp32; x [N, H, W, 3]; y [N, Ho, Wo, C].
template <int NT, bool V2>
__global__ void __launch_bounds__(kThreads) stem_kernel(const __half* __restrict__ x, const uint32_t* __restrict__ wb,
                                                       const float* __restrict__ bias, __half* __restrict__ y, int H,
                                                       int W, int Ho, int Wo, int bands) {
  constexpr int C = 8 * NT;
  extern __shared__ __align__(16) __half win[];
  const int pitch = V2 ? window_pitch_v2(W) : window_pitch(W), w0 = V2 ? kWindowOffsetV2 : 0;
  const int n = blockIdx.x / bands, band = blockIdx.x - n * bands;
  const int oy0 = band * kRows, rows = min(kRows, Ho - oy0), iy0 = 2 * oy0 - 1;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;

  const StemLane<NT> lane_ops(wb, bias, lane, pitch);  // B fragments, bias, k-pair offsets and masks

  pdl::wait();  // x may be the previous kernel's output
  // 1. the window: row r is image row iy0 + r, half w0 + c is the image row's half c - 3 (column -1 is padding)
  const int win_rows = 2 * rows + 1;
  if constexpr (V2)
    copy_window_v2<kThreads>(win, x + (size_t)n * H * W * 3, H, W, iy0, win_rows, tid);
  else
    copy_window_halves<kThreads>(win, x + (size_t)n * H * W * 3, H, W, iy0, win_rows, tid, pitch, 0, pitch);
  __syncthreads();
  pdl::launch_dependents();

  // 2-3. m16 tiles of the band's pixels (row-major), round robin over the warps
  const int P = rows * Wo, tiles = (P + 15) / 16;
  const float inv_wo = 1.f / static_cast<float>(Wo);
  auto pixel = [&](int p, int& oy, int& ox) {  // oy = p / Wo, ox = p % Wo (p < 2^20: the float quotient is off by <= 1)
    if constexpr (V2) {
      oy = __float2int_rz(static_cast<float>(p) * inv_wo);
      ox = p - oy * Wo;
      if (ox < 0) --oy, ox += Wo;
      else if (ox >= Wo) ++oy, ox -= Wo;
    } else {
      oy = p / Wo;
      ox = p - oy * Wo;
    }
  };
  uint32_t* stage = reinterpret_cast<uint32_t*>(win + window_halves_v2(W)) + warp * 16 * stage_words(C);
  __half* y_band = y + ((size_t)n * Ho + oy0) * Wo * C;  // the band's output: rows x Wo x C, contiguous
  for (int tile = warp; tile < tiles; tile += kWarps) {
    int base[2];  // the first tap's window half of rows g and g + 8 (clamped into the band: not stored)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int oy, ox;
      pixel(min(tile * 16 + g + 8 * h, P - 1), oy, ox);
      base[h] = w0 + 2 * oy * pitch + 6 * ox;
    }
    float acc[NT][4];
    lane_ops.mma(acc, win, base);
    if constexpr (V2) {
      // the tile's row g + 8 h, channels 8 nt + 2 q (+ 1) -> staging word (g + 8 h) stage_words + 4 nt + q
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const __half2 v = lane_ops.act(acc, h, nt);
          stage[(g + 8 * h) * stage_words(C) + 4 * nt + q] = *reinterpret_cast<const uint32_t*>(&v);
        }
      __syncwarp();
      // 16-byte piece c of the tile: pixel c / NT, channels 8 (c % NT) ..; the tile's pixels are consecutive
      for (int c = lane; c < 16 * NT; c += 32) {
        const int row = c / NT, part = c - row * NT, p = tile * 16 + row;
        if (p < P)
          *reinterpret_cast<uint4*>(y_band + (size_t)p * C + 8 * part) =
              *reinterpret_cast<const uint4*>(stage + row * stage_words(C) + 4 * part);
      }
      __syncwarp();  // the stage is rewritten by the next tile
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int p = tile * 16 + g + 8 * h;
        if (p >= P) continue;
        __half* dst = y_band + (size_t)p * C + 2 * q;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          *reinterpret_cast<__half2*>(dst + nt * 8) = lane_ops.act(acc, h, nt);
      }
    }
  }
}

namespace {

template <int NT, bool V2>
cudaError_t launch_nt(const __half* x, const uint32_t* wb, const float* bias, __half* y, int N, int H, int W,
                      cudaStream_t stream, bool pdl) {
  const int Ho = (H + 1) / 2, Wo = (W + 1) / 2, bands = (Ho + kRows - 1) / kRows;
  const int smem = V2 ? smem_bytes_v2(W, 8 * NT) : smem_bytes(W);
  const auto kernel = stem_kernel<NT, V2>;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (smem > 48 * 1024) {  // version 2 past W ~ 330
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
  }
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, dim3(N * bands), dim3(kThreads), smem, stream, x, wb, bias, y, H, W, Ho, Wo, bands);
  kernel<<<N * bands, kThreads, smem, stream>>>(x, wb, bias, y, H, W, Ho, Wo, bands);
  return cudaGetLastError();
}

template <bool V2>
cudaError_t launch_version(const __half* x, const uint32_t* wb, const float* bias, __half* y, int N, int H, int W,
                           int C, cudaStream_t stream, bool pdl) {
  if (C == 32) return launch_nt<4, V2>(x, wb, bias, y, N, H, W, stream, pdl);
  if (C == 40) return launch_nt<5, V2>(x, wb, bias, y, N, H, W, stream, pdl);
  if (C == 48) return launch_nt<6, V2>(x, wb, bias, y, N, H, W, stream, pdl);
  return cudaErrorInvalidValue;
}

}  // namespace

bool version2_requested() {
  const char* v = std::getenv("CUDA_KERNELS_EFFNET_STEM_V2");
  return v == nullptr || !(v[0] == '0' && v[1] == '\0');
}

cudaError_t launch(const __half* x, const uint32_t* wb, const float* bias, __half* y, int N, int H, int W, int C,
                   cudaStream_t stream, bool pdl) {
  if (W < 1 || W > kMaxWidth || H < 1 || N < 1) return cudaErrorInvalidValue;
  if (version2_requested() && (reinterpret_cast<uintptr_t>(y) & 15) == 0)
    return launch_version<true>(x, wb, bias, y, N, H, W, C, stream, pdl);
  return launch_version<false>(x, wb, bias, y, N, H, W, C, stream, pdl);
}

}  // namespace effstem
