// Kernel 1 of the MBConv block, version 3 (mbconv_v2.cuh with V3 = true), for 5x5 depthwise
// convolutions.
#include "mbconv_v2.cuh"

namespace mb {
cudaError_t launch_expand_dw_v3_k5(const Params& p, int chunk, cudaStream_t stream, bool pdl, bool hf) {
  return launch_expand_dw_v2_ks<5, true>(p, chunk, stream, pdl, hf);
}
}  // namespace mb
