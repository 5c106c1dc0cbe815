// EfficientNet's stem (effnet_stem.cu): y = SiLU(conv 3x3 stride 2 pad 1 (3 -> C) + b), NHWC float16.
#pragma once
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace effstem {

constexpr int kRows = 8;        // output rows per CTA (a band)
constexpr int kMaxWidth = 448;  // input width: the window of a band fits 48 KB of shared memory

// Halves per window row: (W + 2) pixels x 3, rounded up to even (the 32-bit loads stay aligned).
__host__ __device__ inline int window_pitch(int width) { return ((width + 2) * 3 + 1) & ~1; }
__host__ __device__ inline int smem_bytes(int width) { return (2 * kRows + 1) * window_pitch(width) * 2; }

// x [N, H, W, 3], wb: the conv's mma B fragments (stem.py pack_conv1), bias [C] fp32, y [N, (H + 1) / 2, (W + 1) / 2,
// C]; C in {32, 40, 48}, 1 <= W <= kMaxWidth (cudaErrorInvalidValue otherwise).
cudaError_t launch(const __half* x, const uint32_t* wb, const float* bias, __half* y, int N, int H, int W, int C,
                   cudaStream_t stream, bool pdl);

}  // namespace effstem
