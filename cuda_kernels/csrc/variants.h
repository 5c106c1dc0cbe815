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
cudaError_t launch_c128(const Params& p, bool conv, int variant, cudaStream_t stream);
cudaError_t launch_c256(const Params& p, bool conv, int variant, cudaStream_t stream);
}  // namespace bf
