// Host side of the Tensor Memory Accelerator: a 2-D tensor map (CUtensorMap) for cp.async.bulk.tensor, encoded
// through the driver entry point the runtime hands out (no link against libcuda).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

namespace tmap {

// The driver's cuTensorMapEncodeTiled, looked up once; null where the driver has none.
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050  // the by-version lookup; cudaGetDriverEntryPoint is deprecated from CUDA 13
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                                             &found);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &found);
#endif
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A row-major fp16 matrix [rows, cols] (row pitch `pitch` elements) read in boxes of box_rows x box_cols with the
// 128-byte swizzle (box_cols * 2 must be 128); elements outside the matrix read as zero. cudaErrorNotSupported where
// the driver cannot encode it.
inline cudaError_t half_2d_sw128(CUtensorMap* map, const void* base, unsigned long long rows, unsigned long long cols,
                                 unsigned long long pitch, unsigned box_rows, unsigned box_cols) {
  const auto fn = encode_tiled();
  if (fn == nullptr) return cudaErrorNotSupported;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {pitch * 2};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = fn(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace tmap
