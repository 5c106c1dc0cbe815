// Kernel 1 of the MBConv block, version 8 (mbconv_v8.cuh: persistent CTAs over (chunk, image, band) items, X by
// bulk copy, atomic-free pool; version 3's kernel 1 without an expand conv), for 5x5 depthwise convolutions.
#include "mbconv_v8.cuh"

namespace mb {
cudaError_t launch_expand_dw_v8_k5(const Params& p, int chunk, cudaStream_t stream, bool pdl, bool v10, bool v11) {
  return launch_expand_dw_v8_ks<5>(p, chunk, stream, pdl, v10, v11);
}
}  // namespace mb
