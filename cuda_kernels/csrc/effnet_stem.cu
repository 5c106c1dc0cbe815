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
#include "effnet_stem.h"

#include "pdl.h"
#include "ptx.cuh"

namespace effstem {

constexpr int kThreads = 256, kWarps = kThreads / 32;

__device__ __forceinline__ float silu(float v) {  // v sigmoid(v) = h + h tanh(h), h = v / 2
  const float h = 0.5f * v;
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  return fmaf(h, t, h);
}

// Window offset (halves) of the k pair (k, k + 1) from an output pixel's first tap: ky rows down, t = kx 3 + ci
// along; the pad pairs k >= 30 read ky = 2's pair 8-9 (zero weights).
__device__ __forceinline__ int pair_offset(int k, int pitch) {
  const int ky = k < 30 ? k / 10 : 2, t = k < 30 ? k - 10 * (k / 10) : 8;
  return ky * pitch + t;
}

// wb: conv's B fragments (stem.py pack_conv1: [nt][s][lane][r] words); bias [C] fp32; x [N, H, W, 3]; y [N, Ho, Wo, C].
template <int NT>
__global__ void __launch_bounds__(kThreads) stem_kernel(const __half* __restrict__ x, const uint32_t* __restrict__ wb,
                                                       const float* __restrict__ bias, __half* __restrict__ y, int H,
                                                       int W, int Ho, int Wo, int bands) {
  constexpr int C = 8 * NT;
  extern __shared__ __align__(16) __half win[];
  const int pitch = window_pitch(W);
  const int n = blockIdx.x / bands, band = blockIdx.x - n * bands;
  const int oy0 = band * kRows, rows = min(kRows, Ho - oy0), iy0 = 2 * oy0 - 1;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;

  uint32_t b[NT][2][2];  // the weights' B fragments, constant over the band
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int r = 0; r < 2; ++r) b[nt][s][r] = __ldg(wb + ((nt * 2 + s) * 32 + lane) * 2 + r);
  float bi[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    bi[nt][0] = __ldg(bias + nt * 8 + 2 * q);
    bi[nt][1] = __ldg(bias + nt * 8 + 2 * q + 1);
  }
  // k pairs 16 s + 2 q (+ 8 h): their window offsets, and the halves they keep (the pad k = 9, 19, 29 and 30-31 read
  // neighbouring pixels: zeroed in A as well as in B, so that an Inf or NaN there cannot reach this output)
  int off[2][2];
  uint32_t keep[2][2];
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = 16 * s + 2 * q + 8 * h;
      off[s][h] = pair_offset(k, pitch);
      keep[s][h] = k >= 30 ? 0u : (k % 10 == 8 ? 0x0000FFFFu : 0xFFFFFFFFu);
    }

  pdl::wait();  // x may be the previous kernel's output
  // 1. the window: row r is image row iy0 + r, half c is the image row's half c - 3 (column -1 is padding)
  const int win_rows = 2 * rows + 1;
  for (int r = warp; r < win_rows; r += kWarps) {
    const int iy = iy0 + r;
    const bool row_in = iy >= 0 && iy < H;
    const __half* src = x + ((size_t)n * H + (row_in ? iy : 0)) * W * 3;
    for (int c = lane; c < pitch; c += 32) {
      const int i = c - 3;
      win[r * pitch + c] = row_in && i >= 0 && i < 3 * W ? src[i] : __float2half(0.f);
    }
  }
  __syncthreads();
  pdl::launch_dependents();

  // 2-3. m16 tiles of the band's pixels (row-major), round robin over the warps
  const int P = rows * Wo, tiles = (P + 15) / 16;
  for (int tile = warp; tile < tiles; tile += kWarps) {
    int base[2];  // the first tap's window half of rows g and g + 8 (clamped into the band: not stored)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int p = min(tile * 16 + g + 8 * h, P - 1), oy = p / Wo, ox = p - oy * Wo;
      base[h] = 2 * oy * pitch + 6 * ox;
    }
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      uint32_t a[4];  // (row g, k), (row g + 8, k), (row g, k + 8), (row g + 8, k + 8); k = 16 s + 2 q
#pragma unroll
      for (int j = 0; j < 4; ++j)  // base and off are even: 4-byte aligned
        a[j] = *reinterpret_cast<const uint32_t*>(win + base[j & 1] + off[s][j >> 1]) & keep[s][j >> 1];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) bf::mma_m16n8k16(acc[nt], a, b[nt][s][0], b[nt][s][1]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int p = tile * 16 + g + 8 * h;
      if (p >= P) continue;
      const int oy = p / Wo, ox = p - oy * Wo;
      __half* dst = y + (((size_t)n * Ho + oy0 + oy) * Wo + ox) * C + 2 * q;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        *reinterpret_cast<__half2*>(dst + nt * 8) =
            __floats2half2_rn(silu(acc[nt][2 * h] + bi[nt][0]), silu(acc[nt][2 * h + 1] + bi[nt][1]));
    }
  }
}

namespace {

template <int NT>
cudaError_t launch_nt(const __half* x, const uint32_t* wb, const float* bias, __half* y, int N, int H, int W,
                      cudaStream_t stream, bool pdl) {
  const int Ho = (H + 1) / 2, Wo = (W + 1) / 2, bands = (Ho + kRows - 1) / kRows;
  const int smem = smem_bytes(W);
  const auto kernel = stem_kernel<NT>;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, dim3(N * bands), dim3(kThreads), smem, stream, x, wb, bias, y, H, W, Ho, Wo, bands);
  kernel<<<N * bands, kThreads, smem, stream>>>(x, wb, bias, y, H, W, Ho, Wo, bands);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch(const __half* x, const uint32_t* wb, const float* bias, __half* y, int N, int H, int W, int C,
                   cudaStream_t stream, bool pdl) {
  if (W < 1 || W > kMaxWidth || H < 1 || N < 1) return cudaErrorInvalidValue;
  if (C == 32) return launch_nt<4>(x, wb, bias, y, N, H, W, stream, pdl);
  if (C == 40) return launch_nt<5>(x, wb, bias, y, N, H, W, stream, pdl);
  if (C == 48) return launch_nt<6>(x, wb, bias, y, N, H, W, stream, pdl);
  return cudaErrorInvalidValue;
}

}  // namespace effstem
