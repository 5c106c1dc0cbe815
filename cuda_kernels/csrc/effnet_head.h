// EfficientNet's head after its 1x1 convolution (csrc/effnet_head.cu; cuda_kernels/effnet_head.py): the convolution's
// bias, SiLU and the global average pool in one pass over the convolution's output, which cuBLAS has just written.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace effhead {

constexpr int kThreads = 128;  // channel pairs per CTA

// y: [n * hw, c] fp16 rows (the convolution without its bias, NHWC); bias: [c] fp32; out: [n, c] fp16 =
// mean over the hw rows of image m of SiLU(y + bias), summed in fp32 in row order. c even.
cudaError_t launch(const __half* y, const float* bias, __half* out, int n, int hw, int c, cudaStream_t stream);

}  // namespace effhead
