// PyTorch binding of the stride-2 ConvFirst kernel (its own extension, so that it builds and
// fails apart from the block-fusion one). Shape policy lives in cuda_kernels/convfirst_s2.py,
// which raises ValueError first; the checks here guard the raw op.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "convfirst_s2.h"

namespace {

void check(const torch::Tensor& t, const torch::Tensor& x, const char* name, torch::ScalarType dtype) {
  TORCH_CHECK(t.is_cuda() && t.device() == x.device(), name, " must be on x's CUDA device");
  TORCH_CHECK(t.scalar_type() == dtype, name, " has the wrong dtype");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

bool overlap(const torch::Tensor& a, const torch::Tensor& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.data_ptr()), b0 = reinterpret_cast<uintptr_t>(b.data_ptr());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// x: [N*H*W, C_in] fp16 (NHWC pixels); conv_w: [C_in/8, 9, 32] int32 fragments; conv_b: [C_in];
// w1: [hidden, C_in]; b1: [hidden]; w2: [C_out, hidden]; ws: [C_out, C_in]; bo: [C_out] (= b_V + b_S);
// out: [N*Ho*Wo, C_out] to write into, or empty to allocate. Returns out.
torch::Tensor convfirst_s2(torch::Tensor x, torch::Tensor conv_w, torch::Tensor conv_b, torch::Tensor w1,
                           torch::Tensor b1, torch::Tensor w2, torch::Tensor ws, torch::Tensor bo, int64_t N,
                           int64_t H, int64_t W, int64_t rows_per_tile, int64_t variant, torch::Tensor out) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  check(x, x, "x", torch::kHalf);
  TORCH_CHECK(x.dim() == 2, "x must be [pixels, channels]");
  const int64_t cin = x.size(1), hidden = w1.size(0), cout = w2.size(0);
  check(conv_w, x, "conv_w", torch::kInt);
  check(conv_b, x, "conv_b", torch::kFloat);
  check(w1, x, "w1", torch::kHalf);
  check(b1, x, "b1", torch::kFloat);
  check(w2, x, "w2", torch::kHalf);
  check(ws, x, "ws", torch::kHalf);
  check(bo, x, "bo", torch::kFloat);
  TORCH_CHECK(conv_w.numel() == cin / 8 * 9 * 32 && conv_b.numel() == cin, "conv weight shapes");
  TORCH_CHECK(w1.dim() == 2 && w1.size(1) == cin && b1.numel() == hidden, "expand weight shapes");
  TORCH_CHECK(w2.dim() == 2 && w2.size(1) == hidden && ws.dim() == 2 && ws.size(0) == cout && ws.size(1) == cin &&
                  bo.numel() == cout, "project / shortcut weight shapes");
  const int chunk = s2::hidden_chunk(static_cast<int>(cin), static_cast<int>(cout));
  TORCH_CHECK(chunk > 0, "unsupported channels ", cin, " -> ", cout);
  TORCH_CHECK(hidden > 0 && hidden % chunk == 0, "hidden ", hidden, " is not a multiple of ", chunk);
  TORCH_CHECK(N >= 1 && H >= 2 && W >= 2 && W <= 56 && x.size(0) == N * H * W, "bad N, H, W for x");
  const int64_t Ho = (H + 1) / 2, Wo = (W + 1) / 2;
  TORCH_CHECK(x.numel() < (int64_t(1) << 31) && N * Ho * Wo * cout < (int64_t(1) << 31), "tensor too large");
  if (out.numel() == 0) {
    out = torch::empty({N * Ho * Wo, cout}, x.options());
  } else {
    check(out, x, "out", torch::kHalf);
    TORCH_CHECK(out.dim() == 2 && out.size(0) == N * Ho * Wo && out.size(1) == cout, "out has the wrong shape");
    TORCH_CHECK(!overlap(out, x), "out must not overlap x");
  }
  s2::Params p{};
  p.x = reinterpret_cast<const __half*>(x.data_ptr<at::Half>());
  p.out = reinterpret_cast<__half*>(out.data_ptr<at::Half>());
  p.conv_w = reinterpret_cast<const uint32_t*>(conv_w.data_ptr<int32_t>());
  p.conv_b = conv_b.data_ptr<float>();
  p.w1 = reinterpret_cast<const __half*>(w1.data_ptr<at::Half>());
  p.b1 = b1.data_ptr<float>();
  p.w2 = reinterpret_cast<const __half*>(w2.data_ptr<at::Half>());
  p.ws = reinterpret_cast<const __half*>(ws.data_ptr<at::Half>());
  p.bo = bo.data_ptr<float>();
  p.N = static_cast<int>(N);
  p.H = static_cast<int>(H);
  p.W = static_cast<int>(W);
  p.Ho = static_cast<int>(Ho);
  p.Wo = static_cast<int>(Wo);
  p.hidden = static_cast<int>(hidden);
  p.rows_per_tile = static_cast<int>(rows_per_tile);
  const cudaError_t err =
      s2::launch_convfirst_s2(p, static_cast<int>(cin), static_cast<int>(cout), static_cast<int>(variant),
                               c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err != cudaErrorInvalidConfiguration,
              "convfirst_s2: the kernel needs more shared memory per block than this GPU offers");
  TORCH_CHECK(err != cudaErrorInvalidValue || variant == 0, "convfirst_s2: no variant ", variant, " for ", cin,
              " -> ", cout);
  TORCH_CHECK(err == cudaSuccess, "convfirst_s2 launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("convfirst_s2", &convfirst_s2, "Fused stride-2 ConvFirst block (NHWC fp16)");
  m.def("smem_bytes", &s2::smem_bytes, "Shared memory per block of the (C_in, C_out) kernel, 0 if unsupported");
  m.attr("num_variants") = s2::kVariants;
  m.def("hidden_chunk", &s2::hidden_chunk, "Hidden channels per chunk of the (C_in, C_out) kernel");
}
