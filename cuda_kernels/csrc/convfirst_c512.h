// Host-side interface of the stride-1 ConvFirst kernel on Hopper warpgroup MMAs
// (convfirst_c512.cu, sm_90a; built first for C = 512, templated on the channel count, now also
// C = 256 and 128): its arguments, its fixed shape constants and the launcher, which the PyTorch
// binding includes without the device code.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace c512 {

constexpr int kChannelCounts[] = {64, 128, 256, 384, 512};  // the kernel's instances (template argument C)
constexpr int kHiddenChunk = 128;  // hidden must be a multiple
constexpr int kTilePixels = 64;    // pixels per thread block
constexpr int kMaxWidth = 28;      // the conv halo of a tile, (floor(63 / W) + 4) W pixels, fits in 255
// C = 64 loads only the window of pixels a tile's taps read, p0 - W - 1 .. p0 + 64 + W, at its place in
// the halo rows: halo index < 3 W + 64 <= 255 up to W = 63; the instance is built and tested to W = 56.
constexpr int kMaxWidth64 = 56;
constexpr int max_width(int channels) { return channels == 64 ? kMaxWidth64 : kMaxWidth; }
constexpr int kSlotBytes = 16384;  // one weight slot: a 128-row x 64-k fp16 panel, 128-byte swizzled
// Slots per hidden chunk: C / 64 U panels (128 hidden rows x 64 input channels), then per 64-wide
// k panel of the chunk the C / 128 row blocks of V (128 output rows each): 16 at C = 512. C = 64: one
// U slot, then one V slot holding the chunk's two 64-row x 64-k panels of V (k panel 0 in rows 0..63).
constexpr int slots_per_chunk(int channels) {
  return channels == 64 ? 2 : channels / 64 + (kHiddenChunk / 64) * (channels / 128);
}

struct Params {
  const __half* x;          // [P, C] input (NHWC)
  __half* out;              // [P, C]
  const uint32_t* conv_w;   // [C / 8, 9, 32] mma B fragments of the grouped 3x3 weight
  const float* conv_b;      // [C]
  const uint8_t* wpack;     // hidden / 128 chunks x slots_per_chunk(C) slots x 16 KB (convfirst_c512.pack_weights)
  const float* b1;          // [hidden]
  const float* b2;          // [C]
  int P;                    // pixels = N * H * W
  int hidden;               // alpha * C
  int H, W;
  int C;                    // channels: one of kChannelCounts (last: the C = 512 kernel's SASS is unchanged)
  int pdl;                  // host only: launch with programmatic dependent launch (csrc/pdl.h); not read by the kernel
};

// Variants: 0, each thread block streams every weight slot from L2; 1, clusters of two thread
// blocks (neighbouring tiles) multicast each slot into both, halving the L2 weight traffic; 2 (C <= 256),
// variant 0 with phase A's halo double-buffered (the next 64-channel slice loads while one computes);
// 3 (C <= 256), persistent: one CTA per SM walks its tiles, a fourth warpgroup computes the next tile's
// conv while the consumers run the current tile's FFN (not yet run on a GPU: off by default).
// 4 (every width, W <= kSplitHMaxWidth): variant 0 with phase A's halo double-buffered in the two halves
// of the idle H buffers (no extra shared memory; not yet run on a GPU: off by default).
// 5 (C = 64 and 128): variant 3 with the conv warpgroup's halo prefetched one unit ahead into two buffers
// (and the shortcut loaded at the tile's start at C = 128); measured: the default at C = 128.
// 6 (C = 64, hidden <= kPingPongMaxHidden): persistent, each consumer warpgroup runs its own tile (no partial sums),
// two X buffers; measured: the default at C = 64.
// 7 (C = 128 and 256): persistent, 3 warpgroups, the FFN split by k (each consumer warpgroup half of every hidden chunk,
// stage 2 for all C columns from register A operands, no H in shared memory, no barrier per chunk; the partial sums added
// once per tile), the conv on the consumers with its halo prefetched; not yet run on a GPU: off by default.
// 8 (C = 256): variant 7's FFN without the conv (a separate conv kernel writes X into a scratch, launch_v8), each tile's X
// by bulk copy into two X buffers, the epilogue's shortcut and b2 through shared memory; not yet run: off by default.
constexpr int kVariants = 9;
constexpr int kPingPongMaxHidden = 512;  // variant 6: every weight slot resident in the 8-slot ring
constexpr int kSplitHMaxWidth = 18;  // variant 4: a tile's halo, (floor(63 / W) + 4) W pixels, <= 127
// C = 64: variants 0, 2, 3, 5 and 6 (one 64-channel slice: variant 2 has nothing to overlap and runs as 0 with
// variant 2's layout; no multicast, no split-H halo).
constexpr bool has_variant(int channels, int variant) {
  if (channels == 64) return variant == 0 || variant == 2 || variant == 3 || variant == 5 || variant == 6;
  return variant == 0 || variant == 1 || variant == 4 || (channels <= 256 && (variant == 2 || variant == 3)) ||
         (channels == 128 && variant == 5) || ((channels == 128 || channels == 256) && variant == 7) ||
         (channels == 256 && variant == 8);
}
// Dynamic shared memory per block of the instance for `channels` and `variant` (0 where there is none).
int smem_bytes(int channels, int variant = 0);
// cudaErrorInvalidValue for a shape the kernel does not take (C not in kChannelCounts, hidden % 128,
// W > max_width(C)) or an unknown variant, cudaErrorNoKernelImageForDevice off compute capability 9.0 or
// without an sm_90a build, cudaErrorInvalidConfiguration when the device has less shared memory per
// block than the kernel needs: all before launching.
cudaError_t launch(const Params& p, int variant, cudaStream_t stream);
// Variant 8 (C = 256 only; `launch` refuses it): the conv kernel writes X = conv(x) + b_c into `xconv`, at least
// conv8_scratch_bytes_host(P) bytes, 16-byte aligned (whole 64-pixel tiles, each C / 64 128-byte-swizzled 8 KB panels),
// then the fused kernel reads it. The errors of `launch`, and cudaErrorInvalidValue for C != 256 or a bad scratch.
// conv8b != 0 (CUDA_KERNELS_CONV8B, read by the caller): the conv kernel's version b (one CTA per tile, all four slices;
// the same X bit for bit).
cudaError_t launch_v8(const Params& p, uint8_t* xconv, cudaStream_t stream, int conv8b = 0);
long long conv8_scratch_bytes_host(long long pixels);

}  // namespace c512
