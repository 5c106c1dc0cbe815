// Host-side interface of the C = 512 stride-1 ConvFirst kernel (convfirst_c512.cu, sm_90a):
// its arguments, its fixed shape constants and the launcher, which the PyTorch binding
// includes without the device code.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace c512 {

constexpr int kChannels = 512;
constexpr int kHiddenChunk = 128;  // hidden must be a multiple
constexpr int kTilePixels = 64;    // pixels per thread block
constexpr int kMaxWidth = 28;      // the conv halo of a tile, (floor(63 / W) + 4) W pixels, fits in 255
constexpr int kSlotBytes = 16384;  // one weight slot: a 128-row x 64-k fp16 panel, 128-byte swizzled
constexpr int kSlotsPerChunk = 16; // 8 U panels (128 hidden rows x 64 input channels), 8 V panels

struct Params {
  const __half* x;          // [P, 512] input (NHWC)
  __half* out;              // [P, 512]
  const uint32_t* conv_w;   // [64, 9, 32] mma B fragments of the grouped 3x3 weight
  const float* conv_b;      // [512]
  const uint8_t* wpack;     // hidden / 128 chunks x 16 slots x 16 KB (cuda_kernels.convfirst_c512.pack_weights)
  const float* b1;          // [hidden]
  const float* b2;          // [512]
  int P;                    // pixels = N * H * W
  int hidden;               // alpha * 512
  int H, W;
};

// Variants: 0, each thread block streams every weight slot from L2; 1, clusters of two thread
// blocks (neighbouring tiles) multicast each slot into both, halving the L2 weight traffic.
constexpr int kVariants = 2;
// Dynamic shared memory per block.
int smem_bytes();
// cudaErrorInvalidValue for a shape the kernel does not take (hidden % 128, W > kMaxWidth) or an
// unknown variant, cudaErrorNoKernelImageForDevice off compute capability 9.0 or without an sm_90a
// build, cudaErrorInvalidConfiguration when the device has less shared memory per block than the
// kernel needs: all before launching.
cudaError_t launch(const Params& p, int variant, cudaStream_t stream);

}  // namespace c512
