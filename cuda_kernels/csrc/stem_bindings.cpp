// PyTorch binding of the fused ConvFirstNet stem (csrc/stem.cu; its own extension, perfmodel_stem).
// Shape policy lives in cuda_kernels/stem.py, which raises ValueError first; the checks here guard
// the raw op.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "checks.h"
#include "stem.h"

namespace {

// Every tensor on x's CUDA device, of its dtype, contiguous (no 16-byte rule: x has 3 channels).
void on_device(const torch::Tensor& t, const torch::Tensor& x, const char* name, torch::ScalarType dtype) {
  TORCH_CHECK(t.is_cuda() && t.device() == x.device(), name, " must be on x's CUDA device");
  TORCH_CHECK(t.scalar_type() == dtype, name, " has the wrong dtype");
}

// x: [N, 3, H, W] float16 channels_last; w1: [C1 / 8 * 2 * 32 * 2] int32 (B fragments); b1: [C1] fp32;
// w2: [C2, 9 * C1] fp16 (k = (dy * 3 + dx) * C1 + ci); b2: [C2] fp32; out: [N, C2, Ho, Wo] channels_last
// to write into, or an empty tensor to allocate one; version 1 or 2 (2 runs version 1 where x is not 16-byte
// aligned or W % 8 != 0: stem::v2_applies; C1 = 48 is version 2 only and refuses such x). Returns out.
torch::Tensor stem_forward(torch::Tensor x, torch::Tensor w1, torch::Tensor b1, torch::Tensor w2, torch::Tensor b2,
                           torch::Tensor out, bool pdl, int64_t version) {
  TORCH_CHECK(version == 1 || version == 2, "stem: version must be 1 or 2");
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  int major = 0;
  TORCH_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, x.device().index()) == cudaSuccess,
              "stem: cannot read the device's compute capability");
  TORCH_CHECK(major >= 8, "the fused stem needs compute capability 8.0 or newer (mma.sync m16n8k16)");
  on_device(x, x, "x", torch::kHalf);
  TORCH_CHECK(x.dim() == 4 && x.size(1) == 3, "x must be [N, 3, H, W]");
  TORCH_CHECK(x.is_contiguous(at::MemoryFormat::ChannelsLast), "x must be channels_last contiguous");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(x.data_ptr()) % 2 == 0, "x must be 2-byte aligned");
  const int64_t c2 = w2.size(0), c1 = c2 / 2;
  TORCH_CHECK(w2.dim() == 2 && w2.size(1) == 9 * c1 && c2 == 2 * c1, "w2 must be [C2, 9 * C2 / 2]");
  TORCH_CHECK(stem::smem_bytes(static_cast<int>(c1)) > 0 || (version == 2 && stem::smem_bytes_v2(static_cast<int>(c1)) > 0),
              "no stem kernel for C1 = ", checks::num(c1), " (kernels for 16 and 32; 48 in version 2 only)");
  // C1 = 48 has no version-1 kernel to take what version 2 cannot (stem.py refuses such x with a ValueError first)
  TORCH_CHECK(c1 != 48 || stem::v2_applies(x.data_ptr(), static_cast<int>(x.size(3))),
              "stem C1 = 48 runs version 2 only: x must be 16-byte aligned with W % 8 == 0 (W = ",
              checks::num(x.size(3)), ")");
  on_device(w1, x, "w1", torch::kInt);
  on_device(b1, x, "b1", torch::kFloat);
  on_device(b2, x, "b2", torch::kFloat);
  checks::on_x_device(w2, x, "w2", torch::kHalf);  // + contiguous, 16-byte aligned (uint4 copies)
  for (const torch::Tensor* t : {&w1, &b1, &b2}) TORCH_CHECK(t->is_contiguous(), "weights must be contiguous");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(w1.data_ptr()) % 8 == 0, "w1 must be 8-byte aligned");
  TORCH_CHECK(w1.numel() == c1 / 8 * 2 * 32 * 2, "w1 must hold C1 / 8 * 128 fragment words");
  TORCH_CHECK(b1.numel() == c1 && b2.numel() == c2, "b1 / b2 must have C1 / C2 elements");
  const int64_t n = x.size(0), h = x.size(2), w = x.size(3);
  TORCH_CHECK(n >= 1 && h >= 1 && w >= 1, "x must not be empty");
  const int64_t h1 = (h + 1) / 2, w1s = (w + 1) / 2, ho = (h1 + 1) / 2, wo = (w1s + 1) / 2;
  TORCH_CHECK(x.numel() < (int64_t(1) << 31) && n * ho * wo * c2 < (int64_t(1) << 31),
              "x is too large for the kernel's 32-bit tile indices");
  if (out.numel() == 0) {
    out = torch::empty({n, c2, ho, wo}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  } else {
    on_device(out, x, "out", torch::kHalf);
    TORCH_CHECK(out.dim() == 4 && out.size(0) == n && out.size(1) == c2 && out.size(2) == ho && out.size(3) == wo,
                "out has the wrong shape");
    TORCH_CHECK(out.is_contiguous(at::MemoryFormat::ChannelsLast), "out must be channels_last contiguous");
    TORCH_CHECK(reinterpret_cast<uintptr_t>(out.data_ptr()) % 4 == 0, "out must be 4-byte aligned");
    for (const torch::Tensor* t : {&x, &w1, &b1, &w2, &b2})
      TORCH_CHECK(!checks::overlap(out, *t), "out must not overlap x or the weights");
  }
  stem::Params p{};
  p.x = reinterpret_cast<const __half*>(x.data_ptr());
  p.w1 = reinterpret_cast<const uint32_t*>(w1.data_ptr());
  p.b1 = b1.data_ptr<float>();
  p.w2 = reinterpret_cast<const __half*>(w2.data_ptr());
  p.b2 = b2.data_ptr<float>();
  p.out = reinterpret_cast<__half*>(out.data_ptr());
  p.N = static_cast<int>(n);
  p.H = static_cast<int>(h);
  p.W = static_cast<int>(w);
  p.H1 = static_cast<int>(h1);
  p.W1 = static_cast<int>(w1s);
  p.Ho = static_cast<int>(ho);
  p.Wo = static_cast<int>(wo);
  p.tiles_x = static_cast<int>((wo + stem::kTileCols - 1) / stem::kTileCols);
  p.tiles_y = static_cast<int>((ho + stem::kTileRows - 1) / stem::kTileRows);
  p.num_tiles = static_cast<int>(n) * p.tiles_x * p.tiles_y;
  p.pdl = pdl ? 1 : 0;  // programmatic dependent launch (CUDA_KERNELS_PDL, read by the caller)
  const cudaError_t err = version == 2 ? stem::launch_v2(p, static_cast<int>(c1), c10::cuda::getCurrentCUDAStream())
                                       : stem::launch(p, static_cast<int>(c1), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err != cudaErrorInvalidConfiguration,
              "stem: the kernel needs more shared memory per block than this GPU offers");
  TORCH_CHECK(err == cudaSuccess, "stem launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("stem", &stem_forward, "Fused ConvFirstNet stem: two conv 3x3 s2 + bias + ReLU (NHWC fp16)", py::arg("x"),
        py::arg("w1"), py::arg("b1"), py::arg("w2"), py::arg("b2"), py::arg("out"), py::arg("pdl") = false,
        py::arg("version") = 1);
  m.def(
      "stem_v2",
      [](torch::Tensor x, torch::Tensor w1, torch::Tensor b1, torch::Tensor w2, torch::Tensor b2, torch::Tensor out,
         bool pdl) { return stem_forward(x, w1, b1, w2, b2, out, pdl, 2); },
      "The fused stem's version 2 (version 1 where x is not 16-byte aligned or W % 8 != 0)", py::arg("x"),
      py::arg("w1"), py::arg("b1"), py::arg("w2"), py::arg("b2"), py::arg("out"), py::arg("pdl") = false);
  m.def("smem_bytes", &stem::smem_bytes, "Shared memory per block of the C1 kernel, 0 if unsupported");
  m.def("smem_bytes_v2", &stem::smem_bytes_v2, "Shared memory per block of the C1 version-2 kernel, 0 if unsupported");
  m.attr("tile_rows") = stem::kTileRows;
  m.attr("tile_cols") = stem::kTileCols;
}
