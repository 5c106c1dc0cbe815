// PyTorch binding of the stride-2 ConvFirst kernel (its own extension, so that it builds and
// fails apart from the block-fusion one). Shape policy lives in cuda_kernels/convfirst_s2.py,
// which raises ValueError first; the checks here guard the raw op.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "convfirst_s2_op.h"

namespace {

// x: [N*H*W, C_in] fp16 (NHWC pixels); conv_w: [C_in/8, 9, 32] int32 fragments; conv_b: [C_in];
// w1: [hidden, C_in]; b1: [hidden]; w2: [C_out, hidden]; ws: [C_out, C_in]; bo: [C_out] (= b_V + b_S);
// out: [N*Ho*Wo, C_out] to write into, or empty to allocate. Returns out.
torch::Tensor convfirst_s2(torch::Tensor x, torch::Tensor conv_w, torch::Tensor conv_b, torch::Tensor w1,
                           torch::Tensor b1, torch::Tensor w2, torch::Tensor ws, torch::Tensor bo, int64_t N,
                           int64_t H, int64_t W, int64_t rows_per_tile, int64_t variant, torch::Tensor out,
                           bool pdl) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  checks::on_x_device(x, x, "x", torch::kHalf);
  TORCH_CHECK(x.dim() == 2, "x must be [pixels, channels]");
  const int64_t cin = x.size(1), cout = w2.size(0);
  const s2::Params p = s2::checked_params(x, conv_w, conv_b, w1, b1, w2, ws, bo, N, H, W, rows_per_tile, cin, cout,
                                          s2::hidden_chunk(static_cast<int>(cin), static_cast<int>(cout)), out);
  const cudaError_t err =
      s2::launch_convfirst_s2(p, static_cast<int>(cin), static_cast<int>(cout), static_cast<int>(variant),
                               c10::cuda::getCurrentCUDAStream(), pdl);  // pdl: CUDA_KERNELS_PDL, read by the caller
  TORCH_CHECK(err != cudaErrorInvalidConfiguration,
              "convfirst_s2: the kernel needs more shared memory per block than this GPU offers");
  TORCH_CHECK(err != cudaErrorInvalidValue || variant == 0, "convfirst_s2: no variant ", checks::num(variant), " for ",
              checks::num(cin), " -> ", checks::num(cout));
  TORCH_CHECK(err == cudaSuccess, "convfirst_s2 launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("convfirst_s2", &convfirst_s2, "Fused stride-2 ConvFirst block (NHWC fp16)", py::arg("x"), py::arg("conv_w"),
        py::arg("conv_b"), py::arg("w1"), py::arg("b1"), py::arg("w2"), py::arg("ws"), py::arg("bo"), py::arg("N"),
        py::arg("H"), py::arg("W"), py::arg("rows_per_tile"), py::arg("variant"), py::arg("out"),
        py::arg("pdl") = false);
  m.def("smem_bytes", &s2::smem_bytes, "Shared memory per block of the (C_in, C_out) kernel, 0 if unsupported");
  m.attr("num_variants") = s2::kVariants;
  m.def("hidden_chunk", &s2::hidden_chunk, "Hidden channels per chunk of the (C_in, C_out) kernel");
}
