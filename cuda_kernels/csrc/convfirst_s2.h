// Host-side interface of the stride-2 ConvFirst kernel (convfirst_s2.cuh): its arguments
// and the launcher, which the PyTorch binding includes without the device code.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace s2 {

struct Params {
  const __half* x;          // [N*H*W, CIN] input (NHWC)
  __half* out;              // [N*Ho*Wo, COUT]
  const uint32_t* conv_w;   // [CIN/8, 9, 32] mma B fragments of the grouped 3x3 weight
  const float* conv_b;      // [CIN]
  const __half* w1;         // [hidden, CIN]  expand (BN folded)
  const float* b1;          // [hidden]
  const __half* w2;         // [COUT, hidden] project (BN folded)
  const __half* ws;         // [COUT, CIN]    shortcut 1x1 (BN folded)
  const float* bo;          // [COUT]         b_V + b_S
  int N, H, W, Ho, Wo;
  int hidden;
  int rows_per_tile;        // R: output rows per tile, R * Wo <= the tile's BM (128 or 64)
};

// Tile variants: 0 for every shape; 1 for (64, 128) (two blocks per SM), (96, 192) and (128, 256)
// (64-pixel tiles); 2 for (32, 64), (64, 128), (128, 256) and 3 for (128, 256): deeper weight rings.
constexpr int kVariants = 4;
// Launches the kernel for (cin, cout) in {(32, 64), (64, 128), (96, 192), (128, 256), (192, 384)};
// rows_per_tile <= 0 picks it. cudaErrorInvalidValue for another shape or variant, cudaErrorInvalidConfiguration when the
// device has less shared memory per block than the kernel needs (nothing is launched then). pdl: launch with
// programmatic dependent launch (csrc/pdl.h; a launcher argument, not a Params field: a larger Params changed
// the kernel's SASS).
cudaError_t launch_convfirst_s2(const Params& p, int cin, int cout, int variant, cudaStream_t stream, bool pdl = false);
// Dynamic shared memory per block of the (cin, cout) kernel, 0 for an unsupported shape.
int smem_bytes(int cin, int cout);
// Hidden channels per chunk of the (cin, cout) kernel: hidden must be a multiple; 0 if unsupported.
int hidden_chunk(int cin, int cout);

}  // namespace s2
