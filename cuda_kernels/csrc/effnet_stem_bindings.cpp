// PyTorch binding of EfficientNet's fused stem (csrc/effnet_stem.cu; its own extension, perfmodel_effnet_stem).
// Shape policy lives in cuda_kernels/effnet_stem.py, which raises ValueError first; the checks here guard the raw op.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "effnet_stem.h"

namespace {

// x: [N, 3, H, W] float16 channels_last; wb: [C / 8 * 2 * 32 * 2] int32 (stem.py pack_conv1); bias: [C] fp32;
// out: [N, C, Ho, Wo] channels_last to write into, or an empty tensor to allocate one. Returns out.
torch::Tensor effnet_stem_forward(torch::Tensor x, torch::Tensor wb, torch::Tensor bias, torch::Tensor out,
                                  bool pdl) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  int major = 0;
  TORCH_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, x.device().index()) == cudaSuccess,
              "effnet_stem: cannot read the device's compute capability");
  TORCH_CHECK(major >= 8, "effnet_stem needs compute capability 8.0 or newer (mma.sync m16n8k16)");
  TORCH_CHECK(x.scalar_type() == torch::kHalf && x.dim() == 4 && x.size(1) == 3, "x must be [N, 3, H, W] float16");
  TORCH_CHECK(x.is_contiguous(at::MemoryFormat::ChannelsLast), "x must be channels_last contiguous");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(x.data_ptr()) % 2 == 0, "x must be 2-byte aligned");
  const int64_t c = bias.numel(), n = x.size(0), h = x.size(2), w = x.size(3);
  TORCH_CHECK(c == 32 || c == 40 || c == 48, "effnet_stem: C must be 32, 40 or 48");
  TORCH_CHECK(bias.is_cuda() && bias.device() == x.device() && bias.scalar_type() == torch::kFloat &&
                  bias.is_contiguous(), "bias must be a contiguous float32 tensor on x's device");
  TORCH_CHECK(wb.is_cuda() && wb.device() == x.device() && wb.scalar_type() == torch::kInt && wb.is_contiguous() &&
                  wb.numel() == c / 8 * 2 * 32 * 2, "wb must be the packed conv (stem.py pack_conv1) on x's device");
  TORCH_CHECK(n >= 1 && h >= 1 && w >= 1 && w <= effstem::kMaxWidth, "effnet_stem: 1 <= W <= 448");
  const int64_t ho = (h + 1) / 2, wo = (w + 1) / 2;
  if (out.numel() == 0)
    out = torch::empty({n, c, ho, wo}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  TORCH_CHECK(out.is_cuda() && out.device() == x.device() && out.scalar_type() == torch::kHalf &&
                  out.sizes() == torch::IntArrayRef({n, c, ho, wo}) &&
                  out.is_contiguous(at::MemoryFormat::ChannelsLast),
              "out must be [N, C, Ho, Wo] float16 channels_last on x's device");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(out.data_ptr()) % 4 == 0, "out must be 4-byte aligned");
  const auto* xp = reinterpret_cast<const __half*>(x.data_ptr<at::Half>());
  const auto* wp = reinterpret_cast<const uint32_t*>(wb.data_ptr<int>());
  auto* yp = reinterpret_cast<__half*>(out.data_ptr<at::Half>());
  const cudaError_t err = effstem::launch(xp, wp, bias.data_ptr<float>(), yp, static_cast<int>(n), static_cast<int>(h),
                                         static_cast<int>(w), static_cast<int>(c),
                                         c10::cuda::getCurrentCUDAStream(), pdl);
  TORCH_CHECK(err == cudaSuccess, "effnet_stem launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("effnet_stem", &effnet_stem_forward, "EfficientNet's stem: SiLU(conv 3x3 s2 (3 -> C) + b), NHWC fp16",
        py::arg("x"), py::arg("wb"), py::arg("bias"), py::arg("out"), py::arg("pdl"));
}
