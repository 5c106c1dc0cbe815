// Launchers of the block-fusion kernel, one per channel count, each with a few tile
// variants (hidden chunk HC, warp grids of the two stages, blocks per SM).
#pragma once
#include <cuda_runtime.h>

namespace bf {
struct Params;
constexpr int kVariants = 2;
// Return cudaErrorInvalidValue for an unknown variant, else the launch's error code.
cudaError_t launch_c32(const Params& p, bool conv, int variant, cudaStream_t stream);
cudaError_t launch_c64(const Params& p, bool conv, int variant, cudaStream_t stream);
cudaError_t launch_c96(const Params& p, bool conv, int variant, cudaStream_t stream);  // C not a power of two
cudaError_t launch_c128(const Params& p, bool conv, int variant, cudaStream_t stream);
cudaError_t launch_c192(const Params& p, bool conv, int variant, cudaStream_t stream);
cudaError_t launch_c256(const Params& p, bool conv, int variant, cudaStream_t stream);
}  // namespace bf

namespace bf {
// Fused FFN on warpgroup MMAs (csrc/ffn_sm90.cu): sm_90a builds only, C in {64, 128, 256},
// hidden a multiple of its chunk (64 for C = 256, else 128); `wpack` holds the weights in
// the kernel's shared-memory layout (cuda_kernels.ops.pack_wgmma_weights). cudaErrorInvalidValue for an unsupported shape.
cudaError_t launch_ffn_wgmma(const Params& p, int channels, const void* wpack, cudaStream_t stream);
}  // namespace bf
