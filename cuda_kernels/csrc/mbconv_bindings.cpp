// PyTorch binding of the fused MBConv kernels (mbconv.cuh). Shape policy and weight packing live
// in cuda_kernels/mbconv.py, which refuses unsupported blocks with a reason before calling here;
// the checks below guard the raw op against misuse.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "checks.h"
#include "mbconv.cuh"
#include "mbconv_stem_dw.h"

namespace {

// The Params of a block whose input is [N, H, W, C_in] fp16 NHWC on `like`'s device (x itself, or, for the stem's
// fused kernel 1, the image: the block's input then never exists), with d, partial and scale allocated and `out`
// checked or allocated. Weights as cuda_kernels.mbconv.prepare_weights packs them: w_exp [hid_pad, k_pad] fp16 or
// empty (expand ratio 1), b_exp [hid_pad], w_dw [k*k, hid_pad], b_dw [hid_pad], w_se1 [sq, hidden], b_se1 [>= sq]
// (zero-padded), w_se2 [hidden, sq], b_se2 [hidden] (fp32), w_proj [cout_pad, hk_pad] fp16, b_proj [cout_pad] fp32.
struct Prepared {
  mb::Params p{};
  torch::Tensor out, d, partial, scale;
};

Prepared prepare(const torch::Tensor& like, int64_t n, int64_t h, int64_t w, int64_t c_in, torch::Tensor w_exp,
                 torch::Tensor b_exp, torch::Tensor w_dw, torch::Tensor b_dw, torch::Tensor w_se1, torch::Tensor b_se1,
                 torch::Tensor w_se2, torch::Tensor b_se2, torch::Tensor w_proj, torch::Tensor b_proj, int64_t ksize,
                 int64_t stride, int64_t c_out, int64_t rows_per_tile, int64_t chunk, bool residual,
                 torch::Tensor out, int64_t version) {
  const bool expand = w_exp.numel() > 0;
  if (expand) checks::cuda_like_x(w_exp, "w_exp", torch::kHalf, like);
  checks::cuda_like_x(b_exp, "b_exp", torch::kFloat, like);
  checks::cuda_like_x(w_dw, "w_dw", torch::kFloat, like);
  checks::cuda_like_x(b_dw, "b_dw", torch::kFloat, like);
  checks::cuda_like_x(w_se1, "w_se1", torch::kFloat, like);
  checks::cuda_like_x(b_se1, "b_se1", torch::kFloat, like);
  checks::cuda_like_x(w_se2, "w_se2", torch::kFloat, like);
  checks::cuda_like_x(b_se2, "b_se2", torch::kFloat, like);
  checks::cuda_like_x(w_proj, "w_proj", torch::kHalf, like);
  checks::cuda_like_x(b_proj, "b_proj", torch::kFloat, like);

  Prepared r;
  mb::Params& p = r.p;
  p.N = n;
  p.H = h;
  p.W = w;
  p.C_in = c_in;
  p.ksize = ksize;
  p.stride = stride;
  p.pad = ksize / 2;
  p.hidden = w_se2.size(0);
  p.sq = w_se1.size(0);
  p.hid_pad = b_dw.numel();
  p.k_pad = expand ? w_exp.size(1) : 0;
  p.C_out = c_out;
  p.hk_pad = w_proj.size(1);
  p.Ho = (p.H + 2 * p.pad - ksize) / stride + 1;
  p.Wo = (p.W + 2 * p.pad - ksize) / stride + 1;
  TORCH_CHECK(ksize == 3 || ksize == 5, "kernel size must be 3 or 5");
  TORCH_CHECK(version != 7 || p.N <= mb::kSECountMax, "version 7 takes at most ", mb::kSECountMax, " images");
  TORCH_CHECK(stride == 1 || stride == 2, "stride must be 1 or 2");
  TORCH_CHECK(chunk == 32 || chunk == 48, "chunk must be 32 or 48");
  TORCH_CHECK((version >= 1 && version <= 3) || (version >= 5 && version <= 11),
              "version must be 1, 2, 3, 5, 6, 7, 8, 9, 10 or 11");
  TORCH_CHECK(p.C_in % 8 == 0 && p.hidden % 8 == 0 && c_out % 8 == 0, "channel counts must be multiples of 8");
  TORCH_CHECK(p.hid_pad % chunk == 0 && p.hid_pad >= p.hidden, "b_dw must be padded to a multiple of the chunk");
  TORCH_CHECK(expand || p.hidden == p.C_in, "without an expand conv, hidden must equal C_in");
  TORCH_CHECK(!expand || (w_exp.size(0) == p.hid_pad && p.k_pad % 16 == 0 && p.k_pad >= p.C_in), "w_exp shape");
  TORCH_CHECK(b_exp.numel() == (expand ? p.hid_pad : 0), "b_exp shape");
  TORCH_CHECK(w_dw.numel() == ksize * ksize * p.hid_pad, "w_dw shape");
  TORCH_CHECK(w_se1.size(1) == p.hidden && b_se1.numel() >= p.sq && w_se2.size(1) == p.sq &&
                  b_se2.numel() == p.hidden, "SE weight shapes");
  TORCH_CHECK(w_proj.size(0) % mb::kProjectBN == 0 && w_proj.size(0) >= c_out && p.hk_pad % mb::kProjectBK == 0 &&
                  p.hk_pad >= p.hidden && b_proj.numel() == w_proj.size(0), "w_proj / b_proj shapes");
  TORCH_CHECK(!residual || (stride == 1 && p.C_in == c_out), "a shortcut needs stride 1 and C_in == C_out");
  TORCH_CHECK(rows_per_tile >= 1 && rows_per_tile <= p.Ho, "rows_per_tile out of range");
  TORCH_CHECK((int64_t)p.N * p.H * p.W * std::max<int64_t>(p.C_in, p.hidden) < (int64_t(1) << 31) &&
                  (int64_t)p.N * p.Ho * p.Wo * std::max<int64_t>(p.hid_pad, c_out) < (int64_t(1) << 31),
              "tensor too large");
  p.rows_per_tile = rows_per_tile;
  p.row_blocks = (p.Ho + rows_per_tile - 1) / rows_per_tile;
  p.halo_pixels = std::min<int>(p.H, (rows_per_tile - 1) * stride + ksize) * p.W;
  p.residual = residual ? 1 : 0;

  const auto half = like.options().dtype(torch::kHalf);
  const auto f32 = like.options().dtype(torch::kFloat);
  if (out.numel() == 0) {
    out = torch::empty({p.N, p.Ho, p.Wo, c_out}, half);
  } else {
    checks::cuda_like_x(out, "out", torch::kHalf, like);
    TORCH_CHECK(out.sizes() == torch::IntArrayRef({p.N, p.Ho, p.Wo, c_out}), "out must be [N, Ho, Wo, C_out]");
    TORCH_CHECK(!checks::overlap(out, like), "out must not overlap x");
  }
  r.out = out;
  r.d = torch::empty({p.N, p.Ho, p.Wo, p.hidden}, half);
  r.partial = torch::empty({p.N, p.row_blocks, p.hid_pad}, f32);
  // the SE scale [N, hid_pad], then SE version 4's FC1 partial products (mbconv_se_v4.cu)
  r.scale = torch::empty({(int64_t)p.N * p.hid_pad + (int64_t)mb::se_v4_scratch_floats(p.N, p.hidden, p.sq)}, f32);
  p.d = reinterpret_cast<__half*>(r.d.data_ptr<at::Half>());
  p.out = reinterpret_cast<__half*>(out.data_ptr<at::Half>());
  p.w_exp = expand ? reinterpret_cast<const __half*>(w_exp.data_ptr<at::Half>()) : nullptr;
  p.b_exp = expand ? b_exp.data_ptr<float>() : nullptr;
  p.w_dw = w_dw.data_ptr<float>();
  p.b_dw = b_dw.data_ptr<float>();
  p.w_se1 = w_se1.data_ptr<float>();
  p.b_se1 = b_se1.data_ptr<float>();
  p.w_se2 = w_se2.data_ptr<float>();
  p.b_se2 = b_se2.data_ptr<float>();
  p.w_proj = reinterpret_cast<const __half*>(w_proj.data_ptr<at::Half>());
  p.b_proj = b_proj.data_ptr<float>();
  p.partial = r.partial.data_ptr<float>();
  p.scale = r.scale.data_ptr<float>();
  return r;
}

void check_launch(cudaError_t err, int64_t version) {
  TORCH_CHECK(err != cudaErrorInvalidConfiguration,
              "mbconv: the band of rows needs more shared memory per block than this GPU offers");
  TORCH_CHECK(err != cudaErrorNotSupported, "mbconv: version ", version,
              " needs compute capability 9.0 or newer (Hopper); versions 1-5 and 7 run on older GPUs");
  TORCH_CHECK(err == cudaSuccess, "mbconv launch failed: ", cudaGetErrorString(err));
}

// x: [N, H, W, C_in] fp16 (NHWC, contiguous); the weights as `prepare` takes them. Returns out [N, Ho, Wo, C_out],
// written into `out` when it is not empty. `version` picks the kernels' implementation (1, 2, 3, 5-11, NOTES.md).
torch::Tensor mbconv(torch::Tensor x, torch::Tensor w_exp, torch::Tensor b_exp, torch::Tensor w_dw,
                     torch::Tensor b_dw, torch::Tensor w_se1, torch::Tensor b_se1, torch::Tensor w_se2,
                     torch::Tensor b_se2, torch::Tensor w_proj, torch::Tensor b_proj, int64_t ksize,
                     int64_t stride, int64_t c_out, int64_t rows_per_tile, int64_t chunk, bool residual,
                     torch::Tensor out, int64_t version, bool pdl) {
  const c10::cuda::CUDAGuard guard(x.device());
  checks::cuda_like_x(x, "x", torch::kHalf, x);
  TORCH_CHECK(x.dim() == 4, "x must be [N, H, W, C] (NHWC)");
  Prepared r = prepare(x, x.size(0), x.size(1), x.size(2), x.size(3), w_exp, b_exp, w_dw, b_dw, w_se1, b_se1, w_se2,
                       b_se2, w_proj, b_proj, ksize, stride, c_out, rows_per_tile, chunk, residual, out, version);
  r.p.x = reinterpret_cast<const __half*>(x.data_ptr<at::Half>());
  check_launch(mb::launch_mbconv(r.p, static_cast<int>(chunk), static_cast<int>(version),
                                 c10::cuda::getCurrentCUDAStream(), pdl),  // pdl: CUDA_KERNELS_PDL
               version);
  return r.out;
}

// EfficientNet's stem and block features.1.0 (expand ratio 1, C = 32, depthwise 3x3 stride 1) with the stem's output
// never written (mbconv_stem_dw.h): img [N, H, W, 3] fp16 (NHWC, contiguous), the stem's packed conv (effnet_stem.py
// prepare_weights: wb, bias), then block 1.0's weights as `prepare` takes them (w_exp and b_exp empty). Returns
// out [N, Ho, Wo, C_out] (Ho, Wo the stem's output size). `version` 9, 10 or 11 picks the SE and projection.
torch::Tensor stem_mbconv(torch::Tensor img, torch::Tensor stem_wb, torch::Tensor stem_bias, torch::Tensor w_dw,
                          torch::Tensor b_dw, torch::Tensor w_se1, torch::Tensor b_se1, torch::Tensor w_se2,
                          torch::Tensor b_se2, torch::Tensor w_proj, torch::Tensor b_proj, int64_t c_out,
                          torch::Tensor out, int64_t version, bool pdl) {
  const c10::cuda::CUDAGuard guard(img.device());
  checks::cuda_like_x(img, "img", torch::kHalf, img);
  TORCH_CHECK(img.dim() == 4 && img.size(3) == 3, "img must be [N, H, W, 3] (NHWC)");
  TORCH_CHECK(img.size(2) >= 1 && img.size(2) <= effstem::kMaxWidth, "stem_mbconv: 1 <= W <= ",
              effstem::kMaxWidth);
  checks::cuda_like_x(stem_wb, "stem_wb", torch::kInt, img);
  checks::cuda_like_x(stem_bias, "stem_bias", torch::kFloat, img);
  TORCH_CHECK(stem_bias.numel() == 32 && stem_wb.numel() == 32 / 8 * 2 * 32 * 2,
              "stem_mbconv: the stem must be 3 -> 32 (stem.py pack_conv1)");
  TORCH_CHECK(version >= 9 && version <= 11, "stem_mbconv: version must be 9, 10 or 11");
  const int64_t ho = (img.size(1) + 1) / 2, wo = (img.size(2) + 1) / 2;
  const torch::Tensor none = torch::empty({0}, img.options().dtype(torch::kHalf));
  Prepared r = prepare(img, img.size(0), ho, wo, 32, none, none.to(torch::kFloat), w_dw, b_dw, w_se1, b_se1, w_se2,
                       b_se2, w_proj, b_proj, 3, 1, c_out, std::min<int64_t>(mb::kStemDwRows, ho), 32, false, out,
                       version);
  TORCH_CHECK(r.p.hidden == 32 && r.p.hid_pad == 32, "stem_mbconv: block 1.0 must have 32 channels");
  TORCH_CHECK(ho >= mb::kStemDwRows, "stem_mbconv: the stem's output needs at least ", mb::kStemDwRows, " rows");
  mb::StemDwParams s{};
  s.img = reinterpret_cast<const __half*>(img.data_ptr<at::Half>());
  s.wb = reinterpret_cast<const uint32_t*>(stem_wb.data_ptr<int>());
  s.bias = stem_bias.data_ptr<float>();
  s.H = img.size(1);
  s.W = img.size(2);
  check_launch(mb::launch_stem_mbconv(r.p, s, static_cast<int>(version), c10::cuda::getCurrentCUDAStream(), pdl),
               version);
  return r.out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("mbconv", &mbconv, "Fused MBConv block, write-back design (NHWC fp16)", py::arg("x"), py::arg("w_exp"),
        py::arg("b_exp"), py::arg("w_dw"), py::arg("b_dw"), py::arg("w_se1"), py::arg("b_se1"), py::arg("w_se2"),
        py::arg("b_se2"), py::arg("w_proj"), py::arg("b_proj"), py::arg("ksize"), py::arg("stride"), py::arg("c_out"),
        py::arg("rows_per_tile"), py::arg("chunk"), py::arg("residual"), py::arg("out"), py::arg("version"),
        py::arg("pdl") = false);
  m.def("stem_mbconv", &stem_mbconv, "EfficientNet's stem and block 1.0 with the stem's output never written",
        py::arg("img"), py::arg("stem_wb"), py::arg("stem_bias"), py::arg("w_dw"), py::arg("b_dw"), py::arg("w_se1"),
        py::arg("b_se1"), py::arg("w_se2"), py::arg("b_se2"), py::arg("w_proj"), py::arg("b_proj"), py::arg("c_out"),
        py::arg("out"), py::arg("version"), py::arg("pdl") = false);
  m.attr("expand_threads") = mb::kExpandThreads;
}
