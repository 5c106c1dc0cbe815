// Host-side interface of the stride-2 ConvFirst kernel on Hopper warpgroup MMAs (convfirst_s2_wgmma.cu,
// sm_90a; NOTES.md "Stride 2 on the wgmma kernel"): C_in -> 2 C_in for C_in in 64, 128, 256. Its arguments,
// shape constants and the launcher, which the PyTorch binding includes without the device code.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace s2w {

constexpr int kInChannels[] = {64, 128, 256};  // the kernel's instances (C_out = 2 C_in)
constexpr int kTilePixels = 64;                // output pixels per thread block (whole output rows: R Wo <= 64)
constexpr int kHiddenChunk = 128;              // hidden must be a multiple
constexpr int kMaxWidth = 56;                  // input width (phase A's rows, convfirst_s2.cuh: (2R + 3) W <= 680)
constexpr int kSlotBytes = 16384;              // one weight slot: a 128-row x 64-k fp16 panel, 128-byte swizzled
// Shortcut k panels: C_in / 64, padded to an even count (the shortcut runs as stage 2 of c512's template, two
// 64-wide k panels per call); C_in = 64 has a zero second panel (zero weights, zero Blur(x) columns).
constexpr int shortcut_panels(int cin) { return cin / 64 < 2 ? 2 : cin / 64; }
// The weight stream of one tile, in slots: the shortcut (per k panel of Blur(x), the C_out / 128 row blocks of
// W_s), then per hidden chunk j the C_in / 64 U panels (128 hidden rows x 64 input channels) and, per 64-wide
// k panel of the chunk, the C_out / 128 row blocks of V (128 output rows each).
constexpr int shortcut_slots(int cin) { return shortcut_panels(cin) * (2 * cin / 128); }
constexpr int slots_per_chunk(int cin) { return cin / 64 + 2 * (2 * cin / 128); }

struct Params {
  const __half* x;          // [N*H*W, C_in] input (NHWC)
  __half* out;              // [N*Ho*Wo, 2 C_in]
  const uint32_t* conv_w;   // [C_in / 8, 9, 32] mma B fragments of the grouped 3x3 weight
  const float* conv_b;      // [C_in]
  const uint8_t* wpack;     // shortcut_slots + hidden / 128 x slots_per_chunk slots of 16 KB (convfirst_s2_wgmma.pack_weights)
  const float* b1;          // [hidden]
  const float* bo;          // [C_out] = b_V + b_S
  int N, H, W, Ho, Wo;
  int hidden;
  int cin;
  int rows_per_tile;        // R: output rows per tile, R Wo <= 64 (<= 0: the launcher takes 64 / Wo)
  int pdl;                  // host only: launch with programmatic dependent launch (csrc/pdl.h); not read by the kernel
  int grid_limit;           // host only, the persistent launcher: at most this many CTAs (<= 0: the SM count)
};

// Dynamic shared memory per block of the C_in instance (0 for another C_in).
int smem_bytes(int cin);
// cudaErrorInvalidValue for a shape the kernel does not take (C_in, hidden % 128, W outside 2..56, H < 2,
// R Wo > 64), cudaErrorNoKernelImageForDevice off compute capability 9.0 or without an sm_90a build,
// cudaErrorInvalidConfiguration when the device has less shared memory per block than the kernel needs:
// all before launching.
cudaError_t launch(Params p, cudaStream_t stream);

// The persistent variant (C_in = 64 and 128; NOTES.md "Stride 2 on wgmma, persistent"): min(tiles, SMs, grid_limit)
// CTAs of 512 threads, a conv warpgroup computing the next tile's phase A. Same Params and weights as launch; the
// same checks, and cudaErrorInvalidValue for another C_in or a rows_per_tile whose rows exceed its buffers.
int smem_bytes_persistent(int cin);
cudaError_t launch_persistent(Params p, cudaStream_t stream);

}  // namespace s2w
