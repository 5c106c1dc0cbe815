// Kernel 1 of the MBConv block for 3x3 depthwise convolutions (one file per kernel size, so
// that the instantiations compile in parallel).
#include "mbconv_expand_dw.cuh"

namespace mb {
cudaError_t launch_expand_dw_k3(const Params& p, int chunk, cudaStream_t stream) {
  return launch_expand_dw_ks<3>(p, chunk, stream);
}
}  // namespace mb
