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

// Version 2 (the default; CUDA_KERNELS_EFFNET_STEM_V2=0 runs version 1): window row r's half 0 at r pitch + 4
// with the pitch a multiple of 8 halves (>= 3 W + 7: the odd-W pad pair's last half), so each 16-byte piece of an
// image row lands on a 16-byte boundary after the 3-half shift; then a staging tile per warp (16 pixels x C, rows of
// stage_words(C) 32-bit words: C / 2 + 4 or + 8, whichever is 4 mod 8, so a quad's 8 rows fall on 8 distinct bank
// groups) for 16-byte output stores.
constexpr int kWindowOffsetV2 = 4;
__host__ __device__ inline int window_pitch_v2(int width) { return (3 * width + 7 + 7) & ~7; }
__host__ __device__ inline int stage_words(int c) { return (c / 2 + 4) % 8 == 4 ? c / 2 + 4 : c / 2 + 8; }
__host__ __device__ inline int window_halves_v2(int width) {
  return (2 * kRows + 1) * window_pitch_v2(width) + 2 * kWindowOffsetV2;
}
__host__ __device__ inline int smem_bytes_v2(int width, int c) {
  return window_halves_v2(width) * 2 + 8 * 16 * stage_words(c) * 4;  // 8 warps' staging tiles after the window
}

// x [N, H, W, 3], wb: the conv's mma B fragments (stem.py pack_conv1), bias [C] fp32, y [N, (H + 1) / 2, (W + 1) / 2,
// C]; C in {32, 40, 48}, 1 <= W <= kMaxWidth (cudaErrorInvalidValue otherwise). Version 2 where requested
// (version2_requested) and y is 16-byte aligned.
bool version2_requested();  // unless CUDA_KERNELS_EFFNET_STEM_V2=0 (read at every call)
cudaError_t launch(const __half* x, const uint32_t* wb, const float* bias, __half* y, int N, int H, int W, int C,
                   cudaStream_t stream, bool pdl);

}  // namespace effstem
