#include "block_fusion.cuh"
#include "variants.h"

namespace bf {
// Config<C, HC, WM1, WM2, MINB, STAGES, CONV>
cudaError_t launch_c64(const Params& p, bool conv, int variant, cudaStream_t stream) {
  switch (variant * 2 + (conv ? 1 : 0)) {
    case 0: return launch<Config<64, 64, 4, 4, 2, 3, false>>(p, stream);
    case 1: return launch<Config<64, 64, 4, 4, 2, 3, true>>(p, stream);
    case 2: return launch<Config<64, 64, 4, 4, 2, 4, false>>(p, stream);
    case 3: return launch<Config<64, 64, 4, 4, 2, 4, true>>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}
}  // namespace bf
