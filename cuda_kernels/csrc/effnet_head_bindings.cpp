// PyTorch binding of EfficientNet's head pool (csrc/effnet_head.cu; its own extension, perfmodel_effnet_head).
// Shape policy lives in cuda_kernels/effnet_head.py, which raises ValueError first; the checks here guard the raw op.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "effnet_head.h"

namespace {

// y: [N * HW, C] float16 contiguous (the 1x1 convolution without its bias); bias: [C] fp32. Returns [N, C] float16:
// the mean over each image's HW rows of SiLU(y + bias).
torch::Tensor effnet_head_pool(torch::Tensor y, torch::Tensor bias, int64_t n) {
  TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(y.device());
  TORCH_CHECK(y.scalar_type() == torch::kHalf && y.dim() == 2 && y.is_contiguous(), "y must be [N * HW, C] float16");
  const int64_t rows = y.size(0), c = y.size(1);
  TORCH_CHECK(n >= 1 && n <= 65535 && rows % n == 0 && rows >= n, "y's rows must be N * HW with 1 <= N <= 65535");
  TORCH_CHECK(c >= 2 && c % 2 == 0, "C must be even");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(y.data_ptr()) % 4 == 0, "y must be 4-byte aligned");
  TORCH_CHECK(bias.is_cuda() && bias.device() == y.device() && bias.scalar_type() == torch::kFloat &&
                  bias.is_contiguous() && bias.numel() == c, "bias must be [C] contiguous float32 on y's device");
  TORCH_CHECK(rows / n <= INT32_MAX && n * c <= INT32_MAX, "y is too large");
  auto out = torch::empty({n, c}, y.options());
  const cudaError_t err = effhead::launch(reinterpret_cast<const __half*>(y.data_ptr<at::Half>()),
                                          bias.data_ptr<float>(), reinterpret_cast<__half*>(out.data_ptr<at::Half>()),
                                          static_cast<int>(n), static_cast<int>(rows / n), static_cast<int>(c),
                                          c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "effnet_head_pool launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("effnet_head_pool", &effnet_head_pool, "mean over each image's rows of SiLU(y + bias), NHWC fp16",
        py::arg("y"), py::arg("bias"), py::arg("n"));
}
