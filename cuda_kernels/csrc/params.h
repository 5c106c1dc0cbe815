// Kernel arguments shared by the host binding and the device code.
#pragma once
#include <cstdint>
#include <cuda_fp16.h>

namespace bf {

struct Params {
  const __half* x;          // [P, C] input (NHWC)
  __half* out;              // [P, C]
  const __half* w1;         // [hidden, C]   expand weight, BN folded
  const float* b1;          // [hidden]
  const __half* w2;         // [C, hidden]   project weight, BN folded
  const float* b2;          // [C]
  const uint32_t* conv_w;   // [C/8, 9, 32] mma B fragments of the grouped 3x3 weight
  const float* conv_b;      // [C]
  int P;                    // pixels = N*H*W
  int hidden;               // alpha * C
  int H, W;                 // spatial size (ConvFirst only)
  int residual;             // add x to the output
  int pdl;                  // host only: launch with programmatic dependent launch (csrc/pdl.h); not read by the kernel
};

}  // namespace bf
