#include "block_fusion.cuh"
#include "variants.h"

namespace bf {
// Config<C, HC, WM1, WM2, MINB, STAGES, CONV>. C = 192: three full panels; the tiles of C = 256
// (64x32 stage-1 warp tiles, stage 2 64x48), one block per SM, a 3- or 4-slot ring of 24 KB
// slices; the halo has its own buffer in both.
cudaError_t launch_c192(const Params& p, bool conv, int variant, cudaStream_t stream) {
  switch (variant * 2 + (conv ? 1 : 0)) {
    case 0: return launch<Config<192, 128, 2, 2, 1, 3, false>>(p, stream);
    case 1: return launch<Config<192, 128, 2, 2, 1, 3, true>>(p, stream);
    case 2: return launch<Config<192, 128, 2, 2, 1, 4, false>>(p, stream);
    case 3: return launch<Config<192, 128, 2, 2, 1, 4, true>>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}
}  // namespace bf
