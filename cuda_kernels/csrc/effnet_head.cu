// EfficientNet's head after its 1x1 convolution: bias, SiLU and the global average pool in one pass (NOTES.md,
// "Session 19: EfficientNet's head"). Inductor runs them as one Triton reduction after its GEMM: 19.3 us for B0's
// 128 x 49 x 1280 values at batch 128 (s19 call 2), against ~4 us to read them once from DRAM (they are still in L2).
// Thread (image m, channel pair p): the pair's hw values of image m, 8 rows' loads in flight, fp32 sums in row order.
#include "effnet_head.h"

namespace effhead {

namespace {

__device__ __forceinline__ float silu(float v) {  // v sigmoid(v) = h + h tanh(h), h = v / 2
  const float h = 0.5f * v;
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  return fmaf(h, t, h);
}

__global__ void __launch_bounds__(kThreads) effnet_head_pool_kernel(const __half2* __restrict__ y,
                                                                   const float2* __restrict__ bias,
                                                                   __half2* __restrict__ out, int hw, int pairs) {
  const int p = blockIdx.x * kThreads + threadIdx.x, m = blockIdx.y;
  if (p >= pairs) return;
  const float2 b = bias[p];
  const __half2* src = y + (size_t)m * hw * pairs + p;
  float s0 = 0.f, s1 = 0.f;
  constexpr int kBatch = 8;
  int r = 0;
  for (; r + kBatch <= hw; r += kBatch) {
    __half2 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) v[u] = src[(size_t)(r + u) * pairs];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const float2 f = __half22float2(v[u]);
      s0 += silu(f.x + b.x);
      s1 += silu(f.y + b.y);
    }
  }
  for (; r < hw; ++r) {
    const float2 f = __half22float2(src[(size_t)r * pairs]);
    s0 += silu(f.x + b.x);
    s1 += silu(f.y + b.y);
  }
  const float inv = 1.f / float(hw);
  out[(size_t)m * pairs + p] = __floats2half2_rn(s0 * inv, s1 * inv);
}

}  // namespace

cudaError_t launch(const __half* y, const float* bias, __half* out, int n, int hw, int c, cudaStream_t stream) {
  if (n < 1 || hw < 1 || c < 2 || c % 2 || n > 65535) return cudaErrorInvalidValue;
  const int pairs = c / 2;
  const dim3 grid((pairs + kThreads - 1) / kThreads, n);
  effnet_head_pool_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<const __half2*>(y),
                                                       reinterpret_cast<const float2*>(bias),
                                                       reinterpret_cast<__half2*>(out), hw, pairs);
  return cudaGetLastError();
}

}  // namespace effhead
