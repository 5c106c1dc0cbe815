// PyTorch binding of the C = 512 ConvFirst kernel (its own extension, so that it builds and
// fails apart from the others). Shape policy lives in cuda_kernels/convfirst_c512.py, which
// raises ValueError first; the checks here guard the raw op.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "convfirst_c512.h"

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

// x: [N*H*W, 512] fp16 (NHWC pixels); conv_w: [64, 9, 32] int32 fragments; conv_b: [512] fp32;
// wpack: uint8 weight slots (4 * hidden * 512 bytes); b1: [hidden] fp32; b2: [512] fp32;
// out: [N*H*W, 512] to write into, or empty to allocate. Returns out.
torch::Tensor convfirst_c512(torch::Tensor x, torch::Tensor conv_w, torch::Tensor conv_b, torch::Tensor wpack,
                             torch::Tensor b1, torch::Tensor b2, int64_t H, int64_t W, torch::Tensor out) {
#ifndef BF_SM90A
  TORCH_CHECK(false, "convfirst_c512: this build has no sm_90a code (build with 9.0 in TORCH_CUDA_ARCH_LIST)");
#endif
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  check(x, x, "x", torch::kHalf);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == c512::kChannels, "x must be [pixels, 512]");
  const int64_t P = x.size(0), hidden = b1.numel();
  check(conv_w, x, "conv_w", torch::kInt);
  check(conv_b, x, "conv_b", torch::kFloat);
  check(wpack, x, "wpack", torch::kByte);
  check(b1, x, "b1", torch::kFloat);
  check(b2, x, "b2", torch::kFloat);
  TORCH_CHECK(conv_w.numel() == c512::kChannels / 8 * 9 * 32 && conv_b.numel() == c512::kChannels,
              "conv weight shapes");
  TORCH_CHECK(hidden > 0 && hidden % c512::kHiddenChunk == 0, "hidden ", hidden, " is not a multiple of ",
              c512::kHiddenChunk);
  TORCH_CHECK(wpack.numel() == 4 * hidden * c512::kChannels && b2.numel() == c512::kChannels, "weight shapes");
  TORCH_CHECK(H >= 1 && W >= 1 && W <= c512::kMaxWidth && P > 0 && P % (H * W) == 0, "bad H, W for x");
  TORCH_CHECK(P * c512::kChannels < (int64_t(1) << 31), "x too large for 32-bit pixel offsets");
  if (out.numel() == 0) {
    out = torch::empty_like(x);
  } else {
    check(out, x, "out", torch::kHalf);
    TORCH_CHECK(out.sizes() == x.sizes(), "out has the wrong shape");
    TORCH_CHECK(!overlap(out, x), "out must not overlap x");
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
  p.H = static_cast<int>(H);
  p.W = static_cast<int>(W);
  const cudaError_t err = c512::launch(p, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err != cudaErrorNoKernelImageForDevice, "convfirst_c512: needs a compute capability 9.0 GPU (H100, H200)");
  TORCH_CHECK(err != cudaErrorInvalidConfiguration,
              "convfirst_c512: the kernel needs more shared memory per block than this GPU offers");
  TORCH_CHECK(err == cudaSuccess, "convfirst_c512 launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("convfirst_c512", &convfirst_c512, "Fused stride-1 ConvFirst block at C = 512 on wgmma (NHWC fp16)");
  m.def("smem_bytes", &c512::smem_bytes, "Shared memory per block of the kernel");
  m.attr("hidden_chunk") = c512::kHiddenChunk;
  m.attr("max_width") = c512::kMaxWidth;
  m.attr("slot_bytes") = c512::kSlotBytes;
#ifdef BF_SM90A
  m.attr("has_sm90a") = true;
#else
  m.attr("has_sm90a") = false;
#endif
}
