// EfficientNet's stem and block features.1.0's kernel 1 in one kernel (effnet_stem_dw.cu), then version 9-11's SE
// and projection (mbconv.cu launch_se_project_v9): the block's input, the stem's output, never reaches DRAM.
#pragma once
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "effnet_stem.h"
#include "mbconv.cuh"

namespace mb {

// The image and the stem's operands (effnet_stem.py prepare_weights: the conv's mma B fragments, the fp32 bias).
struct StemDwParams {
  const __half* img;   // [N, H, W, 3]
  const uint32_t* wb;  // stem.py pack_conv1
  const float* bias;   // [C]
  int H, W;            // the image's size
};

constexpr int kStemDwRows = 8;  // output rows per CTA (a band); the E tile holds kStemDwRows + 2 rows

// E's columns: 4 per depthwise column group plus the two padding columns (even: the slot swizzle c ^ (c >> 2 & 1)
// keeps every column inside the row).
__host__ __device__ inline int stem_dw_e_cols(int wo) { return (wo + 3) / 4 * 4 + 2; }
// The image window of 2 (kStemDwRows + 2) + 1 rows at the stem's version-2 pitch, and the last row's slack.
__host__ __device__ inline int stem_dw_window_halves(int width) {
  return (2 * (kStemDwRows + 2) + 1) * effstem::window_pitch_v2(width) + 2 * effstem::kWindowOffsetV2;
}
// window, E [(kStemDwRows + 2) x stem_dw_e_cols x C] fp16, the pool's per-group sums [256 / (C / 2) x C] fp32
__host__ __device__ inline int stem_dw_smem_bytes(int width, int wo, int c) {
  return stem_dw_window_halves(width) * 2 + (kStemDwRows + 2) * stem_dw_e_cols(wo) * c * 2 + 256 / (c / 2) * c * 4;
}

// p: block 1.0's Params as the MBConv binding fills them (H = Ho, W = Wo the stem's output size, C_in = hidden = 32,
// ksize 3, stride 1, rows_per_tile = kStemDwRows); cudaErrorInvalidValue otherwise.
cudaError_t launch_stem_dw(const Params& p, const StemDwParams& s, cudaStream_t stream, bool pdl);
// launch_stem_dw, then launch_se_project_v9 (`version` 9, 10 or 11).
cudaError_t launch_stem_mbconv(const Params& p, const StemDwParams& s, int version, cudaStream_t stream, bool pdl);

}  // namespace mb
