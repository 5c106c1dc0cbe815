// PyTorch binding of the block-fusion kernels. Shape policy (which C, alpha, H, W are
// supported) lives in cuda_kernels/ops.py, which raises ValueError before calling here;
// the checks below only guard against misuse of the raw op.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_fp16.h>

#include "checks.h"
#include "params.h"
#include "variants.h"

namespace {

// x: [P, C] fp16; w1: [hidden, C] fp16; b1: [hidden] fp32; w2: [C, hidden] fp16; b2: [C] fp32;
// conv_w: [C/8, 9, 32] int32 (packed fragments) or empty; conv_b: [C] fp32 or empty;
// out: [P, C] fp16 to write into, or empty to allocate.
// The checks and Params fields every kernel shares: x [P, C] fp16, the biases b1 [hidden]
// and b2 [C] fp32, and the output, `out` checked against x or allocated when empty.
struct Activations {
  torch::Tensor out;
  bf::Params params{};
  int64_t P, C, hidden;
};

Activations activations(const torch::Tensor& x, const torch::Tensor& b1, const torch::Tensor& b2, bool residual,
                        torch::Tensor out) {
  checks::cuda_dense(x, "x", torch::kHalf);
  checks::cuda_dense(b1, "b1", torch::kFloat);
  checks::cuda_dense(b2, "b2", torch::kFloat);
  checks::same_device(b1, x, "b1");
  checks::same_device(b2, x, "b2");
  TORCH_CHECK(x.dim() == 2, "x must be [pixels, channels]");
  const int64_t P = x.size(0), C = x.size(1), hidden = b1.numel();
  TORCH_CHECK(b2.numel() == C, "bias shapes");
  TORCH_CHECK(P > 0 && P * C < (int64_t(1) << 31), "pixel count out of range");
  if (out.numel() == 0) {
    out = torch::empty_like(x);
  } else {
    checks::cuda_dense(out, "out", torch::kHalf);
    TORCH_CHECK(out.sizes() == x.sizes() && out.device() == x.device(), "out must match x");
    TORCH_CHECK(!checks::overlap(out, x), "out must not overlap x");
  }
  Activations a{out, {}, P, C, hidden};
  a.params.x = reinterpret_cast<const __half*>(x.data_ptr<at::Half>());
  a.params.out = reinterpret_cast<__half*>(out.data_ptr<at::Half>());
  a.params.b1 = b1.data_ptr<float>();
  a.params.b2 = b2.data_ptr<float>();
  a.params.P = static_cast<int>(P);
  a.params.hidden = static_cast<int>(hidden);
  a.params.residual = residual ? 1 : 0;
  return a;
}

torch::Tensor block_fusion(torch::Tensor x, torch::Tensor w1, torch::Tensor b1, torch::Tensor w2,
                           torch::Tensor b2, torch::Tensor conv_w, torch::Tensor conv_b, int64_t H,
                           int64_t W, bool residual, int64_t variant, torch::Tensor out, bool pdl) {
  const c10::cuda::CUDAGuard guard(x.device());
  Activations a = activations(x, b1, b2, residual, out);
  const int64_t P = a.P, C = a.C, hidden = a.hidden;
  checks::cuda_dense(w1, "w1", torch::kHalf);
  checks::cuda_dense(w2, "w2", torch::kHalf);
  checks::same_device(w1, x, "w1");
  checks::same_device(w2, x, "w2");
  TORCH_CHECK(w1.size(0) == hidden && w1.size(1) == C && w2.size(0) == C && w2.size(1) == hidden, "weight shapes");
  const bool conv = conv_w.numel() > 0;
  if (conv) {
    checks::cuda_dense(conv_w, "conv_w", torch::kInt);
    checks::cuda_dense(conv_b, "conv_b", torch::kFloat);
    checks::same_device(conv_w, x, "conv_w");
    checks::same_device(conv_b, x, "conv_b");
    TORCH_CHECK(conv_w.numel() == C / 8 * 9 * 32 && conv_b.numel() == C, "conv weight shapes");
    TORCH_CHECK(W > 0 && H > 0 && P % (H * W) == 0, "H, W do not divide the pixel count");
  }
  bf::Params& p = a.params;
  p.w1 = reinterpret_cast<const __half*>(w1.data_ptr<at::Half>());
  p.w2 = reinterpret_cast<const __half*>(w2.data_ptr<at::Half>());
  p.conv_w = conv ? reinterpret_cast<const uint32_t*>(conv_w.data_ptr<int32_t>()) : nullptr;
  p.conv_b = conv ? conv_b.data_ptr<float>() : nullptr;
  p.H = static_cast<int>(H);
  p.W = static_cast<int>(W);
  p.pdl = pdl ? 1 : 0;  // programmatic dependent launch (CUDA_KERNELS_PDL, read by the caller)
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cudaError_t err = cudaErrorInvalidValue;
  switch (C) {
    case 32: err = bf::launch_c32(p, conv, static_cast<int>(variant), stream); break;
    case 64: err = bf::launch_c64(p, conv, static_cast<int>(variant), stream); break;
    case 96: err = bf::launch_c96(p, conv, static_cast<int>(variant), stream); break;
    case 128: err = bf::launch_c128(p, conv, static_cast<int>(variant), stream); break;
    case 192: err = bf::launch_c192(p, conv, static_cast<int>(variant), stream); break;
    case 256: err = bf::launch_c256(p, conv, static_cast<int>(variant), stream); break;
    default: TORCH_CHECK(false, "unsupported channel count ", checks::num(C));
  }
  checks::launch(err, "block_fusion");
  return a.out;
}

// Fused FFN on warpgroup MMAs (sm_90a). wpack: the weights in the kernel's shared-memory
// layout (cuda_kernels.ops.pack_wgmma_weights), uint8 of 2 * hidden * C * 2 bytes.
torch::Tensor ffn_wgmma(torch::Tensor x, torch::Tensor wpack, torch::Tensor b1, torch::Tensor b2, bool residual,
                        torch::Tensor out) {
#ifndef BF_SM90A
  TORCH_CHECK(false, "ffn_wgmma: this build has no sm_90a code (build with 9.0 in TORCH_CUDA_ARCH_LIST)");
#endif
  const c10::cuda::CUDAGuard guard(x.device());
  Activations a = activations(x, b1, b2, residual, out);
  checks::cuda_dense(wpack, "wpack", torch::kByte);
  checks::same_device(wpack, x, "wpack");
  TORCH_CHECK(wpack.numel() == 4 * a.hidden * a.C, "weight shapes");
  const cudaError_t err =
      bf::launch_ffn_wgmma(a.params, static_cast<int>(a.C), wpack.data_ptr(), c10::cuda::getCurrentCUDAStream());
  checks::launch(err, "ffn_wgmma");
  return a.out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("block_fusion", &block_fusion, "Fused FFN / ConvFirst block (NHWC fp16)", py::arg("x"), py::arg("w1"),
        py::arg("b1"), py::arg("w2"), py::arg("b2"), py::arg("conv_w"), py::arg("conv_b"), py::arg("H"), py::arg("W"),
        py::arg("residual"), py::arg("variant"), py::arg("out"), py::arg("pdl") = false);
  m.def("ffn_wgmma", &ffn_wgmma, "Fused FFN on warpgroup MMAs, sm_90a (NHWC fp16)");
  m.attr("num_variants") = bf::kVariants;
#ifdef BF_SM90A
  m.attr("has_wgmma") = true;
#else
  m.attr("has_wgmma") = false;
#endif
}
