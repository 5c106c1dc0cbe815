#include "block_fusion.cuh"
#include "variants.h"

namespace bf {
// Config<C, HC, WM1, WM2, MINB, STAGES, CONV>. C = 96 is 1.5 panels of 64 columns (the last U
// slice 32 wide, Config::PARTIAL); the tiles of C = 64: 32x32 stage-1 warp tiles, stage 2 32x48.
// Variant 0 two blocks per SM (the halo aliases the ring), variant 1 one block per SM with its
// own halo buffer (the first weight slices load during the convolution) and 255 registers.
cudaError_t launch_c96(const Params& p, bool conv, int variant, cudaStream_t stream) {
  switch (variant * 2 + (conv ? 1 : 0)) {
    case 0: return launch<Config<96, 64, 4, 4, 2, 3, false>>(p, stream);
    case 1: return launch<Config<96, 64, 4, 4, 2, 3, true>>(p, stream);
    case 2: return launch<Config<96, 64, 4, 4, 1, 4, false>>(p, stream);
    case 3: return launch<Config<96, 64, 4, 4, 1, 4, true>>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}
}  // namespace bf
