// The block-fusion PTX wrappers (ptx.cuh) that the MBConv kernels call, named in namespace mb.
#pragma once
#include <cuda_fp16.h>

#include "ptx.cuh"

namespace mb {

using bf::cp_async16;
using bf::cp_async_commit;
using bf::cp_async_wait;
using bf::ldmatrix_x4;
using bf::mma_m16n8k16;
using bf::smem_addr;

// The SE scale on a packed pair of D values: the product in fp32, rounded once to fp16 (the projections' A operand).
__device__ __forceinline__ uint32_t scale_half2(uint32_t v, float2 s) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&v));
  const __half2 r = __floats2half2_rn(f.x * s.x, f.y * s.y);
  return *reinterpret_cast<const uint32_t*>(&r);
}

// L2 eviction priorities for D (MB_D_L2_HINTS: only under cuda_kernels/_build.py's CUDA_KERNELS_BUILD_D_L2_HINTS=1):
// kernel 1 stores D evict_last, the projection reads it evict_first, so that the D lines the projection has consumed
// are the victims of its own misses rather than the lines it has yet to read. s36 call 3: 2.1's projection on the
// block's path 42.6 -> 37.3 us (D 115 MB), B0 -4.5 us; s37 call 2: B2 +85 us (+2.3%), so not the default.
// The evict_first read alone is also a launch-time choice of project_v9s (project_v9se_kernel,
// CUDA_KERNELS_PROJ_V9_EF), so its two helpers are always defined.
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void cp_async16_d(uint32_t dst, const void* src, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "l"(policy));
}
#ifdef MB_D_L2_HINTS
__device__ __forceinline__ uint64_t l2_evict_last() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void store_d_pair(__half* d, __half2 v, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.b32 [%0], %1, %2;\n" ::"l"(d), "r"(*reinterpret_cast<const uint32_t*>(&v)),
               "l"(policy)
               : "memory");
}
#endif

}  // namespace mb
