// The stride-2 raw op's weight, shape and output checks and its Params, shared by the two
// extensions that launch the stride-2 template: convfirst_s2_bindings.cpp (C_in 32..128) and the
// 256 -> 512 op in convfirst_c512_bindings.cpp.
#pragma once
#include <torch/extension.h>

#include "checks.h"
#include "convfirst_s2.h"

namespace s2 {

// x: [N*H*W, cin] fp16, already checked by the caller (under its device guard); conv_w: [cin/8, 9, 32]
// int32 fragments; conv_b: [cin]; w1: [hidden, cin]; b1: [hidden]; w2: [cout, hidden]; ws: [cout, cin];
// bo: [cout] (= b_V + b_S); chunk: the kernel's hidden chunk for (cin, cout), 0 if it has none;
// out: [N*Ho*Wo, cout] to write into, or empty, and then allocated here.
inline Params checked_params(const torch::Tensor& x, const torch::Tensor& conv_w, const torch::Tensor& conv_b,
                             const torch::Tensor& w1, const torch::Tensor& b1, const torch::Tensor& w2,
                             const torch::Tensor& ws, const torch::Tensor& bo, int64_t N, int64_t H, int64_t W,
                             int64_t rows_per_tile, int64_t cin, int64_t cout, int chunk, torch::Tensor& out) {
  const int64_t hidden = w1.size(0);
  checks::on_x_device(conv_w, x, "conv_w", torch::kInt);
  checks::on_x_device(conv_b, x, "conv_b", torch::kFloat);
  checks::on_x_device(w1, x, "w1", torch::kHalf);
  checks::on_x_device(b1, x, "b1", torch::kFloat);
  checks::on_x_device(w2, x, "w2", torch::kHalf);
  checks::on_x_device(ws, x, "ws", torch::kHalf);
  checks::on_x_device(bo, x, "bo", torch::kFloat);
  TORCH_CHECK(conv_w.numel() == cin / 8 * 9 * 32 && conv_b.numel() == cin, "conv weight shapes");
  TORCH_CHECK(w1.dim() == 2 && w1.size(1) == cin && b1.numel() == hidden, "expand weight shapes");
  TORCH_CHECK(w2.dim() == 2 && w2.size(0) == cout && w2.size(1) == hidden && ws.dim() == 2 && ws.size(0) == cout &&
                  ws.size(1) == cin && bo.numel() == cout, "project / shortcut weight shapes");
  TORCH_CHECK(chunk > 0, "unsupported channels ", checks::num(cin), " -> ", checks::num(cout));
  TORCH_CHECK(hidden > 0 && hidden % chunk == 0, "hidden ", checks::num(hidden), " is not a multiple of ", checks::num(chunk));
  TORCH_CHECK(N >= 1 && H >= 2 && W >= 2 && W <= 56 && x.size(0) == N * H * W, "bad N, H, W for x");
  const int64_t Ho = (H + 1) / 2, Wo = (W + 1) / 2;
  TORCH_CHECK(x.numel() < (int64_t(1) << 31) && N * Ho * Wo * cout < (int64_t(1) << 31), "tensor too large");
  if (out.numel() == 0) {
    out = torch::empty({N * Ho * Wo, cout}, x.options());
  } else {
    checks::on_x_device(out, x, "out", torch::kHalf);
    TORCH_CHECK(out.dim() == 2 && out.size(0) == N * Ho * Wo && out.size(1) == cout, "out has the wrong shape");
    TORCH_CHECK(!checks::overlap(out, x), "out must not overlap x");
  }
  Params p{};
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
  return p;
}

}  // namespace s2
