// Kernel 1 of the MBConv block, version 7 (mbconv_v2.cuh with V3 = true and SE = true: version 3's kernel 1
// whose last CTA per image computes the squeeze-excitation), for 5x5 depthwise convolutions.
#include "mbconv_v2.cuh"

namespace mb {
cudaError_t launch_expand_dw_v7_k5(const Params& p, int chunk, cudaStream_t stream, bool pdl) {
  if (p.N > kSECountMax) return cudaErrorInvalidValue;
  return launch_expand_dw_v2_ks<5, true, false, true>(p, chunk, stream, pdl);
}
}  // namespace mb
