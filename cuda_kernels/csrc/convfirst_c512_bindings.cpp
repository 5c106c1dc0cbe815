// PyTorch binding of the stride-1 ConvFirst kernel on wgmma (C = 512, 256, 128; its own
// extension, so that it builds and fails apart from the others). Shape policy lives in cuda_kernels/convfirst_c512.py, which
// raises ValueError first; the checks here guard the raw op.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "checks.h"
#include "convfirst_c512.h"
#include "convfirst_s2_op.h"
#include "convfirst_s2_wide.h"

namespace {

// The checks both ops make of the weights, H and W (x checked by the op), `out` allocated where empty or checked, and
// the kernel parameters filled; the op keeps its CUDAGuard in scope around this.
c512::Params checked_params(const torch::Tensor& x, const torch::Tensor& conv_w, const torch::Tensor& conv_b,
                            const torch::Tensor& wpack, const torch::Tensor& b1, const torch::Tensor& b2, int64_t H,
                            int64_t W, torch::Tensor& out, bool pdl) {
  const int64_t P = x.size(0), C = x.size(1), hidden = b1.numel();
  checks::on_x_device(conv_w, x, "conv_w", torch::kInt);
  checks::on_x_device(conv_b, x, "conv_b", torch::kFloat);
  checks::on_x_device(wpack, x, "wpack", torch::kByte);
  checks::on_x_device(b1, x, "b1", torch::kFloat);
  checks::on_x_device(b2, x, "b2", torch::kFloat);
  TORCH_CHECK(conv_w.numel() == C / 8 * 9 * 32 && conv_b.numel() == C, "conv weight shapes");
  TORCH_CHECK(hidden > 0 && hidden % c512::kHiddenChunk == 0, "hidden ", checks::num(hidden),
              " is not a multiple of ", checks::num(c512::kHiddenChunk));
  TORCH_CHECK(wpack.numel() == 4 * hidden * C && b2.numel() == C, "weight shapes");
  TORCH_CHECK(H >= 1 && W >= 1 && W <= c512::max_width(static_cast<int>(C)) && P > 0 && P % (H * W) == 0,
              "bad H, W for x");
  TORCH_CHECK(P * C < (int64_t(1) << 31), "x too large for 32-bit pixel offsets");
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
  p.pdl = pdl ? 1 : 0;  // programmatic dependent launch (CUDA_KERNELS_PDL, read by the caller)
  return p;
}

// x: [N*H*W, C] fp16 (NHWC pixels), C in c512::kChannelCounts (W <= c512::max_width(C): 56 at C = 64, else 28); conv_w: [C / 8, 9, 32] int32 fragments;
// conv_b: [C] fp32; wpack: uint8 weight slots (4 * hidden * C bytes); b1: [hidden] fp32; b2: [C] fp32;
// variant: 0, 1, 4 (W <= 18), or at C <= 256 also 2 and 3, at C = 128 also 5, at C = 128 and 256 also 7 (variant 8: convfirst_c512_v8); at C = 64 only 0, 2, 3, 5, 6 (c512::has_variant; 6 needs hidden <= c512::kPingPongMaxHidden); out: [N*H*W, C] to write into, or empty to allocate. Returns out.
torch::Tensor convfirst_c512(torch::Tensor x, torch::Tensor conv_w, torch::Tensor conv_b, torch::Tensor wpack,
                             torch::Tensor b1, torch::Tensor b2, int64_t H, int64_t W, int64_t variant,
                             torch::Tensor out, bool pdl) {
#ifndef BF_SM90A
  TORCH_CHECK(false, "convfirst_c512: this build has no sm_90a code (build with 9.0 in TORCH_CUDA_ARCH_LIST)");
#endif
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  checks::on_x_device(x, x, "x", torch::kHalf);
  TORCH_CHECK(x.dim() == 2 && c512::smem_bytes(static_cast<int>(x.size(1))) > 0,
              "x must be [pixels, C] with C in 64, 128, 256, 384, 512");
  const int64_t C = x.size(1), hidden = b1.numel();
  TORCH_CHECK(variant >= 0 && variant < c512::kVariants && c512::has_variant(static_cast<int>(C), static_cast<int>(variant)),
              "convfirst_c512: no variant ", checks::num(variant), " at C = ", checks::num(C));
  TORCH_CHECK(variant != 8, "convfirst_c512: variant 8 has its own op with the conv scratch (convfirst_c512_v8)");
  TORCH_CHECK(variant != 4 || W <= c512::kSplitHMaxWidth, "convfirst_c512: variant 4 needs W <= ",
              checks::num(c512::kSplitHMaxWidth));
  TORCH_CHECK(variant != 6 || hidden <= c512::kPingPongMaxHidden, "convfirst_c512: variant 6 needs hidden <= ",
              checks::num(c512::kPingPongMaxHidden), " (resident weights), got ", checks::num(hidden));
  c512::Params p = checked_params(x, conv_w, conv_b, wpack, b1, b2, H, W, out, pdl);
  const cudaError_t err = c512::launch(p, static_cast<int>(variant), c10::cuda::getCurrentCUDAStream());
  checks::launch(err, "convfirst_c512");
  return out;
}

// Variant 8 (C = 256): the conv kernel writes X = conv(x) + b_c into `xconv` (uint8, at least conv8_scratch_bytes(P) bytes:
// whole 64-pixel tiles of C / 64 128-byte-swizzled 8 KB panels; empty to allocate), then the fused FFN kernel reads it.
// The other arguments as convfirst_c512's without the variant; xconv must not overlap x or out. Returns out.
torch::Tensor convfirst_c512_v8(torch::Tensor x, torch::Tensor conv_w, torch::Tensor conv_b, torch::Tensor wpack,
                                torch::Tensor b1, torch::Tensor b2, int64_t H, int64_t W, torch::Tensor out,
                                torch::Tensor xconv, bool pdl, bool conv8b) {
#ifndef BF_SM90A
  TORCH_CHECK(false, "convfirst_c512: this build has no sm_90a code (build with 9.0 in TORCH_CUDA_ARCH_LIST)");
#endif
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  checks::on_x_device(x, x, "x", torch::kHalf);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == 256, "convfirst_c512 variant 8: x must be [pixels, 256]");
  const int64_t P = x.size(0);
  c512::Params p = checked_params(x, conv_w, conv_b, wpack, b1, b2, H, W, out, pdl);  // p.pdl: both kernels
  const int64_t need = c512::conv8_scratch_bytes_host(P);
  if (xconv.numel() == 0) {
    xconv = torch::empty({need}, x.options().dtype(torch::kByte));
  } else {
    checks::on_x_device(xconv, x, "xconv", torch::kByte);
    TORCH_CHECK(xconv.numel() >= need, "xconv has ", checks::num(xconv.numel()), " bytes, variant 8 needs ",
                checks::num(need));
    TORCH_CHECK(reinterpret_cast<uintptr_t>(xconv.data_ptr()) % 16 == 0, "xconv must be 16-byte aligned");
    TORCH_CHECK(!checks::overlap(xconv, x) && !checks::overlap(xconv, out), "xconv must not overlap x or out");
  }
  // conv8b: the conv kernel's version b (CUDA_KERNELS_CONV8B, read by the caller; the same X bit for bit)
  const cudaError_t err =
      c512::launch_v8(p, xconv.data_ptr<uint8_t>(), c10::cuda::getCurrentCUDAStream(), conv8b ? 1 : 0);
  checks::launch(err, "convfirst_c512 variant 8");
  return out;
}

// The stride-2 block 256 -> 512 on the stride-2 template (convfirst_s2_wide.cu); the arguments of
// convfirst_s2_bindings.cpp's op without the variant: x [N*H*W, 256], conv_w [32, 9, 32], conv_b
// [256], w1 [hidden, 256], b1 [hidden], w2 [512, hidden], ws [512, 256], bo [512] (= b_V + b_S),
// out [N*Ho*Wo, 512] or empty. Returns out.
torch::Tensor convfirst_s2_wide(torch::Tensor x, torch::Tensor conv_w, torch::Tensor conv_b, torch::Tensor w1,
                                torch::Tensor b1, torch::Tensor w2, torch::Tensor ws, torch::Tensor bo, int64_t N,
                                int64_t H, int64_t W, int64_t rows_per_tile, torch::Tensor out, bool pdl) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  checks::on_x_device(x, x, "x", torch::kHalf);
  constexpr int64_t cin = 256, cout = 512;
  TORCH_CHECK(x.dim() == 2 && x.size(1) == cin, "x must be [pixels, 256]");
  const s2::Params p = s2::checked_params(x, conv_w, conv_b, w1, b1, w2, ws, bo, N, H, W, rows_per_tile, cin, cout,
                                          s2::hidden_chunk_256_512(), out);
  const cudaError_t err = s2::launch_256_512(p, c10::cuda::getCurrentCUDAStream(), pdl);  // pdl: CUDA_KERNELS_PDL
  TORCH_CHECK(err != cudaErrorInvalidConfiguration,
              "convfirst_s2 256 -> 512: the kernel needs more shared memory per block than this GPU offers");
  TORCH_CHECK(err == cudaSuccess, "convfirst_s2 256 -> 512 launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("convfirst_c512", &convfirst_c512, "Fused stride-1 ConvFirst block at C = 512, 256, 128 on wgmma (NHWC fp16)",
        py::arg("x"), py::arg("conv_w"), py::arg("conv_b"), py::arg("wpack"), py::arg("b1"), py::arg("b2"), py::arg("H"),
        py::arg("W"), py::arg("variant"), py::arg("out"), py::arg("pdl") = false);
  m.def("convfirst_c512_v8", &convfirst_c512_v8,
        "Variant 8 of the stride-1 ConvFirst block at C = 256: the conv kernel into the scratch xconv, then the fused FFN",
        py::arg("x"), py::arg("conv_w"), py::arg("conv_b"), py::arg("wpack"), py::arg("b1"), py::arg("b2"), py::arg("H"),
        py::arg("W"), py::arg("out"), py::arg("xconv"), py::arg("pdl") = false, py::arg("conv8b") = false);
  m.def("conv8_scratch_bytes", &c512::conv8_scratch_bytes_host,
        "Bytes of variant 8's conv scratch for P pixels (whole 64-pixel tiles of C / 64 8 KB panels, C = 256)",
        py::arg("pixels"));
  m.def("smem_bytes", &c512::smem_bytes, "Shared memory per block of the kernel's instance for C and a variant (0: none)",
        py::arg("channels"), py::arg("variant") = 0);
  m.attr("hidden_chunk") = c512::kHiddenChunk;
  m.attr("num_variants") = c512::kVariants;
  m.def("convfirst_s2_wide", &convfirst_s2_wide, "Fused stride-2 ConvFirst block 256 -> 512 (NHWC fp16, mma.sync)",
        py::arg("x"), py::arg("conv_w"), py::arg("conv_b"), py::arg("w1"), py::arg("b1"), py::arg("w2"), py::arg("ws"),
        py::arg("bo"), py::arg("N"), py::arg("H"), py::arg("W"), py::arg("rows_per_tile"), py::arg("out"),
        py::arg("pdl") = false);
  m.def("s2_wide_smem_bytes", &s2::smem_bytes_256_512, "Shared memory per block of the 256 -> 512 kernel");
  m.attr("s2_wide_hidden_chunk") = s2::hidden_chunk_256_512();
  m.attr("max_width") = c512::kMaxWidth;
  m.attr("max_width_c64") = c512::kMaxWidth64;
  m.attr("slot_bytes") = c512::kSlotBytes;
#ifdef BF_SM90A
  m.attr("has_sm90a") = true;
#else
  m.attr("has_sm90a") = false;
#endif
}
