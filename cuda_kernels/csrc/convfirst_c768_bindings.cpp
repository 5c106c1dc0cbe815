// PyTorch binding of ConvFirstNet-L's C = 768 kernels (their own extension, perfmodel_convfirst_c768, so
// that they build and fail apart from the others): the stride-1 block at C = 768 (convfirst_c768.cu) and
// the stride-2 block 384 -> 768 (convfirst_s2_c768.cu). Shape policy lives in cuda_kernels/convfirst_c768.py
// and convfirst_s2.py, which raise ValueError first; the checks here guard the raw ops.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "checks.h"
#include "convfirst_c768.h"
#include "convfirst_s2_op.h"

namespace {

// x: [N*H*W, 768] fp16 (NHWC pixels); conv_w: [96, 9, 32] int32 fragments; conv_b: [768] fp32; wpack:
// uint8 weight slots (4 * hidden * 768 bytes, convfirst_c768.pack_weights); b1: [hidden] fp32; b2: [768]
// fp32; variant: 0 (the conv split between the ranks) or 1; out: [N*H*W, 768] to write into, or empty to
// allocate. Returns out.
torch::Tensor convfirst_c768(torch::Tensor x, torch::Tensor conv_w, torch::Tensor conv_b, torch::Tensor wpack,
                             torch::Tensor b1, torch::Tensor b2, int64_t H, int64_t W, int64_t variant,
                             torch::Tensor out) {
#ifndef BF_SM90A
  TORCH_CHECK(false, "convfirst_c768: this build has no sm_90a code (build with 9.0 in TORCH_CUDA_ARCH_LIST)");
#endif
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  checks::on_x_device(x, x, "x", torch::kHalf);
  constexpr int64_t C = 768;
  TORCH_CHECK(x.dim() == 2 && x.size(1) == C, "x must be [pixels, 768]");
  const int64_t P = x.size(0), hidden = b1.numel();
  checks::on_x_device(conv_w, x, "conv_w", torch::kInt);
  checks::on_x_device(conv_b, x, "conv_b", torch::kFloat);
  checks::on_x_device(wpack, x, "wpack", torch::kByte);
  checks::on_x_device(b1, x, "b1", torch::kFloat);
  checks::on_x_device(b2, x, "b2", torch::kFloat);
  TORCH_CHECK(conv_w.numel() == C / 8 * 9 * 32 && conv_b.numel() == C, "conv weight shapes");
  TORCH_CHECK(hidden > 0 && hidden % c512::kHiddenChunk == 0, "hidden ", checks::num(hidden),
              " is not a multiple of ", checks::num(c512::kHiddenChunk));
  TORCH_CHECK(wpack.numel() == 4 * hidden * C && b2.numel() == C, "weight shapes");
  TORCH_CHECK(H >= 1 && W >= 1 && W <= c512::kMaxWidth && P > 0 && P % (H * W) == 0, "bad H, W for x");
  TORCH_CHECK(P * C < (int64_t(1) << 31), "x too large for 32-bit pixel offsets");
  TORCH_CHECK(variant >= 0 && variant < c768::kVariants, "convfirst_c768: no variant ", checks::num(variant));
  if (out.numel() == 0) {
    out = torch::empty_like(x);
  } else {
    checks::on_x_device(out, x, "out", torch::kHalf);
    TORCH_CHECK(out.sizes() == x.sizes(), "out has the wrong shape");
    TORCH_CHECK(!checks::overlap(out, x), "out must not overlap x");
  }
  c512::Params p{};
  p.x = reinterpret_cast<const __half*>(x.data_ptr<at::Half>());
  p.out = reinterpret_cast<__half*>(out.data_ptr<at::Half>());
  p.conv_w = reinterpret_cast<const uint32_t*>(conv_w.data_ptr<int32_t>());
  p.conv_b = conv_b.data_ptr<float>();
  p.wpack = wpack.data_ptr<uint8_t>();
  p.b1 = b1.data_ptr<float>();
  p.b2 = b2.data_ptr<float>();
  p.P = static_cast<int>(P);
  p.hidden = static_cast<int>(hidden);
  p.C = static_cast<int>(C);
  p.H = static_cast<int>(H);
  p.W = static_cast<int>(W);
  const cudaError_t err = c768::launch(p, static_cast<int>(variant), c10::cuda::getCurrentCUDAStream());
  checks::launch(err, "convfirst_c768");
  return out;
}

// The stride-2 block 384 -> 768: convfirst_s2_bindings.cpp's arguments (variant 0 or 1, s2::kS2Variants).
torch::Tensor convfirst_s2_c768(torch::Tensor x, torch::Tensor conv_w, torch::Tensor conv_b, torch::Tensor w1,
                                torch::Tensor b1, torch::Tensor w2, torch::Tensor ws, torch::Tensor bo, int64_t N,
                                int64_t H, int64_t W, int64_t rows_per_tile, int64_t variant, torch::Tensor out) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  checks::on_x_device(x, x, "x", torch::kHalf);
  constexpr int64_t cin = 384, cout = 768;
  TORCH_CHECK(x.dim() == 2 && x.size(1) == cin, "x must be [pixels, 384]");
  TORCH_CHECK(variant >= 0 && variant < s2::kS2Variants, "convfirst_s2 384 -> 768: no variant ", checks::num(variant));
  const s2::Params p = s2::checked_params(x, conv_w, conv_b, w1, b1, w2, ws, bo, N, H, W, rows_per_tile, cin, cout,
                                          s2::hidden_chunk_384_768(), out);
  const cudaError_t err = s2::launch_384_768(p, static_cast<int>(variant), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err != cudaErrorInvalidConfiguration,
              "convfirst_s2 384 -> 768: the kernel needs more shared memory per block than this GPU offers");
  TORCH_CHECK(err == cudaSuccess, "convfirst_s2 384 -> 768 launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("convfirst_c768", &convfirst_c768, "Fused stride-1 ConvFirst block at C = 768 on wgmma, two-CTA clusters (NHWC fp16)");
  m.def("smem_bytes", &c768::smem_bytes, "Shared memory per block of the C = 768 kernel");
  m.attr("slots_per_chunk") = c768::kSlotsPerChunk;
  m.attr("num_variants") = c768::kVariants;
  m.def("convfirst_s2_c768", &convfirst_s2_c768, "Fused stride-2 ConvFirst block 384 -> 768 (NHWC fp16, mma.sync)");
  m.def("s2_smem_bytes", &s2::smem_bytes_384_768, "Shared memory per block of the 384 -> 768 kernel");
  m.attr("s2_hidden_chunk") = s2::hidden_chunk_384_768();
#ifdef BF_SM90A
  m.attr("has_sm90a") = true;
#else
  m.attr("has_sm90a") = false;
#endif
}
