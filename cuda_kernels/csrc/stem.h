// The fused ConvFirstNet stem (csrc/stem.cu): conv 3x3 s2 (3 -> C1) + bias + ReLU, conv 3x3 s2
// (C1 -> 2 C1) + bias + ReLU in one launch, NHWC float16, BN folded. Its own extension
// (perfmodel_stem): bindings in stem_bindings.cpp, shape policy in cuda_kernels/stem.py.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace stem {

struct Params {
  const __half* x;     // [N, H, W, 3]
  const uint32_t* w1;  // conv1 as mma B fragments: [C1/8][2 k-steps][32 lanes][2] half2 words
  const float* b1;     // [C1]
  const __half* w2;    // [C2][9 * C1], k = (dy * 3 + dx) * C1 + ci
  const float* b2;     // [C2]
  __half* out;         // [N, Ho, Wo, C2]
  int N, H, W;         // input
  int H1, W1;          // conv1 output: ceil(H / 2), ceil(W / 2)
  int Ho, Wo;          // conv2 output: ceil(H1 / 2), ceil(W1 / 2)
  int tiles_x, tiles_y, num_tiles;
  int pdl;                  // host only: launch with programmatic dependent launch (csrc/pdl.h); not read by the kernel
};

// Output tile of one step of a (persistent) thread block: 8 rows x 16 columns of the conv2 output.
constexpr int kTileRows = 8;
constexpr int kTileCols = 16;

// Dynamic shared memory per block of the C1 kernel (0 if there is no kernel for C1).
int smem_bytes(int c1);

// Launches the version-1 C1 kernel (C1 in {16, 32}) on `stream`. cudaErrorInvalidValue: no kernel for C1;
// cudaErrorInvalidConfiguration: not one block fits on an SM of this GPU.
cudaError_t launch(const Params& p, int c1, cudaStream_t stream);

// Version 2 (NOTES.md "Fused stem v2"): the input window by 16-byte cp.async, conv1 without the row table.
// It needs x 16-byte aligned and W % 8 == 0, W < 2^28 (v2_applies); launch_v2 runs version 1 for any other input.
// Same weights as version 1. C1 in {16, 32, 48}: C1 = 48 (ConvFirstNet-L, 12 warps, one block per SM; NOTES.md
// "Fused stem C1 = 48") has no version 1, so launch_v2 returns cudaErrorInvalidValue there unless v2_applies.
bool v2_applies(const void* x, int W);
int smem_bytes_v2(int c1);
cudaError_t launch_v2(const Params& p, int c1, cudaStream_t stream);

}  // namespace stem
