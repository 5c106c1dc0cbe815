// Kernel 1 of the MBConv block, version 5 (mbconv_v2.cuh with V3 = true and TC = true: version 3
// with the depthwise on tensor cores, depthwise_tc), for 5x5 depthwise convolutions.
#include "mbconv_v2.cuh"

namespace mb {
cudaError_t launch_expand_dw_v5_k5(const Params& p, int chunk, cudaStream_t stream) {
  return launch_expand_dw_v2_ks<5, true, true>(p, chunk, stream);
}
}  // namespace mb
