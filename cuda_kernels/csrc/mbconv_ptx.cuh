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

}  // namespace mb
