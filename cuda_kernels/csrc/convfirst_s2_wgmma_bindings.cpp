// PyTorch binding of the stride-2 ConvFirst kernel on wgmma (convfirst_s2_wgmma.cu; its own extension, so that
// it builds and fails apart from the others). Shape policy lives in cuda_kernels/convfirst_s2_wgmma.py, which
// raises ValueError first; the checks here guard the raw op.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "checks.h"
#include "convfirst_s2_wgmma.h"

namespace {

// x: [N*H*W, C_in] fp16 (NHWC pixels), C_in in 64, 128, 256; conv_w: [C_in / 8, 9, 32] int32 fragments;
// conv_b: [C_in] fp32; wpack: uint8 weight slots (convfirst_s2_wgmma.pack_weights); b1: [hidden] fp32;
// bo: [2 C_in] fp32 (= b_V + b_S); rows_per_tile: output rows per tile (<= 0: 64 / Wo); out: [N*Ho*Wo, 2 C_in]
// to write into, or empty to allocate; pdl: launch with programmatic dependent launch (csrc/pdl.h). Returns out.
// persistent: the persistent variant (C_in 64, 128) on at most grid_limit CTAs (<= 0: the SM count).
torch::Tensor run_kernel(torch::Tensor x, torch::Tensor conv_w, torch::Tensor conv_b, torch::Tensor wpack,
                         torch::Tensor b1, torch::Tensor bo, int64_t N, int64_t H, int64_t W, int64_t rows_per_tile,
                         torch::Tensor out, bool pdl, bool persistent, int64_t grid_limit) {
#ifndef BF_SM90A
  TORCH_CHECK(false, "convfirst_s2_wgmma: this build has no sm_90a code (build with 9.0 in TORCH_CUDA_ARCH_LIST)");
#endif
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  checks::on_x_device(x, x, "x", torch::kHalf);
  TORCH_CHECK(x.dim() == 2 && s2w::smem_bytes(static_cast<int>(x.size(1))) > 0,
              "x must be [pixels, C_in] with C_in in 64, 128, 256");
  TORCH_CHECK(!persistent || s2w::smem_bytes_persistent(static_cast<int>(x.size(1))) > 0,
              "the persistent variant takes C_in in 64, 128");
  const int64_t cin = x.size(1), cout = 2 * cin, hidden = b1.numel();
  checks::on_x_device(conv_w, x, "conv_w", torch::kInt);
  checks::on_x_device(conv_b, x, "conv_b", torch::kFloat);
  checks::on_x_device(wpack, x, "wpack", torch::kByte);
  checks::on_x_device(b1, x, "b1", torch::kFloat);
  checks::on_x_device(bo, x, "bo", torch::kFloat);
  TORCH_CHECK(conv_w.numel() == cin / 8 * 9 * 32 && conv_b.numel() == cin, "conv weight shapes");
  TORCH_CHECK(hidden > 0 && hidden % s2w::kHiddenChunk == 0, "hidden ", checks::num(hidden),
              " is not a multiple of ", checks::num(s2w::kHiddenChunk));
  const int c = static_cast<int>(cin);
  const int64_t slots = s2w::shortcut_slots(c) + hidden / s2w::kHiddenChunk * s2w::slots_per_chunk(c);
  TORCH_CHECK(wpack.numel() == slots * s2w::kSlotBytes && bo.numel() == cout, "weight shapes");
  TORCH_CHECK(N >= 1 && H >= 2 && W >= 2 && W <= s2w::kMaxWidth && x.size(0) == N * H * W, "bad N, H, W for x");
  const int64_t Ho = (H + 1) / 2, Wo = (W + 1) / 2;
  TORCH_CHECK(x.numel() < (int64_t(1) << 31) && N * Ho * Wo * cout < (int64_t(1) << 31), "tensor too large");
  TORCH_CHECK(rows_per_tile * Wo <= s2w::kTilePixels, "rows_per_tile x Wo exceeds the 64-pixel tile");
  if (out.numel() == 0) {
    out = torch::empty({N * Ho * Wo, cout}, x.options());
  } else {
    checks::on_x_device(out, x, "out", torch::kHalf);
    TORCH_CHECK(out.dim() == 2 && out.size(0) == N * Ho * Wo && out.size(1) == cout, "out has the wrong shape");
    TORCH_CHECK(!checks::overlap(out, x), "out must not overlap x");
  }
  s2w::Params p{};
  p.x = reinterpret_cast<const __half*>(x.data_ptr<at::Half>());
  p.out = reinterpret_cast<__half*>(out.data_ptr<at::Half>());
  p.conv_w = reinterpret_cast<const uint32_t*>(conv_w.data_ptr<int32_t>());
  p.conv_b = conv_b.data_ptr<float>();
  p.wpack = wpack.data_ptr<uint8_t>();
  p.b1 = b1.data_ptr<float>();
  p.bo = bo.data_ptr<float>();
  p.N = static_cast<int>(N);
  p.H = static_cast<int>(H);
  p.W = static_cast<int>(W);
  p.Ho = static_cast<int>(Ho);
  p.Wo = static_cast<int>(Wo);
  p.hidden = static_cast<int>(hidden);
  p.cin = c;
  p.rows_per_tile = static_cast<int>(rows_per_tile);
  p.pdl = pdl ? 1 : 0;
  p.grid_limit = static_cast<int>(grid_limit);
  const cudaError_t err = persistent ? s2w::launch_persistent(p, c10::cuda::getCurrentCUDAStream())
                                     : s2w::launch(p, c10::cuda::getCurrentCUDAStream());
  checks::launch(err, persistent ? "convfirst_s2_wgmma (persistent)" : "convfirst_s2_wgmma");
  return out;
}

torch::Tensor convfirst_s2_wgmma(torch::Tensor x, torch::Tensor conv_w, torch::Tensor conv_b, torch::Tensor wpack,
                                 torch::Tensor b1, torch::Tensor bo, int64_t N, int64_t H, int64_t W,
                                 int64_t rows_per_tile, torch::Tensor out, bool pdl) {
  return run_kernel(x, conv_w, conv_b, wpack, b1, bo, N, H, W, rows_per_tile, out, pdl, false, 0);
}

torch::Tensor convfirst_s2_wgmma_persistent(torch::Tensor x, torch::Tensor conv_w, torch::Tensor conv_b,
                                            torch::Tensor wpack, torch::Tensor b1, torch::Tensor bo, int64_t N,
                                            int64_t H, int64_t W, int64_t rows_per_tile, torch::Tensor out, bool pdl,
                                            int64_t grid_limit) {
  return run_kernel(x, conv_w, conv_b, wpack, b1, bo, N, H, W, rows_per_tile, out, pdl, true, grid_limit);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("convfirst_s2_wgmma", &convfirst_s2_wgmma,
        "Fused stride-2 ConvFirst block C_in -> 2 C_in on wgmma (NHWC fp16, sm_90a)", py::arg("x"), py::arg("conv_w"),
        py::arg("conv_b"), py::arg("wpack"), py::arg("b1"), py::arg("bo"), py::arg("N"), py::arg("H"), py::arg("W"),
        py::arg("rows_per_tile"), py::arg("out"), py::arg("pdl") = false);
  m.def("convfirst_s2_wgmma_persistent", &convfirst_s2_wgmma_persistent,
        "The same block on the persistent variant (C_in 64, 128; a conv warpgroup one tile ahead)", py::arg("x"),
        py::arg("conv_w"), py::arg("conv_b"), py::arg("wpack"), py::arg("b1"), py::arg("bo"), py::arg("N"),
        py::arg("H"), py::arg("W"), py::arg("rows_per_tile"), py::arg("out"), py::arg("pdl") = false,
        py::arg("grid_limit") = 0);
  m.def("smem_bytes_persistent", &s2w::smem_bytes_persistent,
        "Shared memory per block of the persistent variant's C_in instance, 0 if unsupported");
  m.def("smem_bytes", &s2w::smem_bytes, "Shared memory per block of the C_in instance, 0 if unsupported");
  m.def("shortcut_slots", &s2w::shortcut_slots, "Weight slots of the shortcut per tile for C_in");
  m.def("slots_per_chunk", &s2w::slots_per_chunk, "Weight slots per hidden chunk of 128 for C_in");
}
