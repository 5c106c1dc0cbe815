// Fused MBConv (MobileNetV2 / EfficientNet, torchvision's MBConv with BN folded), NHWC
// float16, fp32 accumulation. Version 1: the write-back design (NOTES.md, "MBConv"):
//
//   kernel 1 (expand_dw)  per (image, band of output rows, chunk of HC hidden channels):
//            X halo rows -> shared; E = SiLU(X U_chunk^T + a) on tensor cores (mma.sync
//            m16n8k16), E stays in shared memory (fp16, as PyTorch rounds it); depthwise k x k
//            (stride 1 or 2, zero padding k/2) + bias + SiLU on CUDA cores in fp32 -> D (fp16,
//            written once to DRAM); the band's per-channel sums of D -> partial[n][band][c]
//            (one slot per CTA, so the pool is deterministic). Expand ratio 1: E = X.
//   kernel 2 (se)         per image: pool = sum of the partials / (Ho Wo); FC, SiLU, FC,
//            sigmoid -> scale[n][c] (fp32).
//   kernel 3 (project)    out = (D * scale) V^T + b (+ x when the block has its shortcut);
//            64 x 64 output tiles, the scale applied while D is staged into shared memory.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace mb {

struct Params {
  const __half* x;        // [N, H, W, C_in]
  __half* d;              // [N, Ho, Wo, hidden]   depthwise output (after SiLU)
  __half* out;            // [N, Ho, Wo, C_out]
  const __half* w_exp;    // [hid_pad, k_pad] expand weight (zero-padded), null for expand ratio 1
  const float* b_exp;     // [hid_pad]
  const float* w_dw;      // [ksize * ksize, hid_pad] depthwise taps, channel fastest
  const float* b_dw;      // [hid_pad]
  const float* w_se1;     // [sq, hidden]
  const float* b_se1;     // [sq]
  const float* w_se2;     // [hidden, sq]
  const float* b_se2;     // [hidden]
  const __half* w_proj;   // [cout_pad, hk_pad] project weight (zero-padded)
  const float* b_proj;    // [cout_pad]
  float* partial;         // [N, row_blocks, hid_pad] per-band channel sums of D
  float* scale;           // [N, hid_pad] SE scale
  int N, H, W, C_in, Ho, Wo;
  int hidden, hid_pad, k_pad, sq, C_out, hk_pad;
  int ksize, stride, pad;
  int rows_per_tile, row_blocks, halo_pixels;  // kernel 1's bands of output rows
  int residual;
};

constexpr int kExpandThreads = 256;
constexpr int kProjectThreads = 128;
constexpr int kProjectBM = 64, kProjectBN = 64, kProjectBK = 32;

// Kernel 1's shared memory: X halo [m_pad x (k_pad + 8)] and U chunk [HC x (k_pad + 8)] (expand
// only), E [m_pad x (HC + 8)], channel sums [HC] fp32. Rows padded by 8 halves (16 bytes) so that
// ldmatrix's eight row reads fall into different banks. cuda_kernels/mbconv.py mirrors this to
// choose the band height (`kernel1_smem_bytes`).
__host__ __device__ constexpr int round_up(int a, int b) { return (a + b - 1) / b * b; }
__host__ __device__ inline int expand_dw_smem_bytes(int halo_pixels, int k_pad, int chunk, bool expand) {
  const int m_pad = round_up(halo_pixels, 16);
  return (expand ? (m_pad + chunk) * (k_pad + 8) * 2 : 0) + m_pad * (chunk + 8) * 2 + chunk * 4;
}

// chunk in {32, 48}, ksize in {3, 5}. cudaErrorInvalidValue for anything else;
// cudaErrorInvalidConfiguration when the shared memory exceeds the device's limit.
cudaError_t launch_expand_dw_k3(const Params& p, int chunk, cudaStream_t stream);
cudaError_t launch_expand_dw_k5(const Params& p, int chunk, cudaStream_t stream);
cudaError_t launch_expand_dw_v2_k3(const Params& p, int chunk, cudaStream_t stream);  // mbconv_v2.cuh
cudaError_t launch_expand_dw_v2_k5(const Params& p, int chunk, cudaStream_t stream);
// hf: the depthwise in HFMA2 at stride 1 (kernel1_v3_hfma2_requested, where versions 8-10 fall back to version 3)
cudaError_t launch_expand_dw_v3_k3(const Params& p, int chunk, cudaStream_t stream, bool pdl = false,
                                   bool hf = false);  // mbconv_v2.cuh, V3
cudaError_t launch_expand_dw_v3_k5(const Params& p, int chunk, cudaStream_t stream, bool pdl = false, bool hf = false);
// CUDA_KERNELS_K1_V3_HFMA2=0|1 (read at every call; on by default in version 11, else off): version 3's kernel 1,
// where versions 8-11 run it (blocks without an expand conv; in 9-11, k = 3 at stride 1 and <= 64 pixels too), its
// depthwise in HFMA2.
inline bool kernel1_v3_hfma2_requested(bool v11 = false) {
  const char* v = std::getenv("CUDA_KERNELS_K1_V3_HFMA2");
  if (v == nullptr) return v11;
  return v[0] == '1' && v[1] == '\0';
}
cudaError_t launch_expand_dw_v5_k3(const Params& p, int chunk, cudaStream_t stream);  // V3 + TC: the depthwise
cudaError_t launch_expand_dw_v5_k5(const Params& p, int chunk, cudaStream_t stream);  // on tensor cores
// Version 7 (NOTES.md, "MBConv version 7"): kernel 1 v3 whose last CTA per image computes the SE
// (mbconv_v2.cuh, SE = true; N <= kSECountMax), then project_v7 (mbconv_v7.cu) where it applies, else
// project_v3 alone.
constexpr int kSECountMax = 1 << 16;  // images per launch: version 7's per-image counters (mbconv_v2.cuh)
cudaError_t launch_expand_dw_v7_k3(const Params& p, int chunk, cudaStream_t stream, bool pdl = false);
cudaError_t launch_expand_dw_v7_k5(const Params& p, int chunk, cudaStream_t stream, bool pdl = false);
// Version 8 (NOTES.md, "MBConv version 8"): kernel 1 persistent over (chunk, image, band) items, X by bulk copy,
// atomic-free pool (mbconv_v8.cuh); version 3's kernel 1 for blocks without an expand conv; then version 3's SE and
// projection.
// v10: version 10's kernel 1 options by default (2-image items, the depthwise in HFMA2; mbconv_v8.cuh).
cudaError_t launch_expand_dw_v8_k3(const Params& p, int chunk, cudaStream_t stream, bool pdl = false, bool v10 = false,
                                   bool v11 = false);
cudaError_t launch_expand_dw_v8_k5(const Params& p, int chunk, cudaStream_t stream, bool pdl = false, bool v10 = false,
                                   bool v11 = false);
// Version 9 (NOTES.md, "MBConv version 9"): version 8's kernel 1 and version 3's SE, then project_v9 (mbconv_v3.cu:
// D streamed into the mma fragments by each warp, no shared memory for D) where project_v9_applies, else version 3's.
bool project_v9_applies(int hidden, int c_out);
bool project_v9_runs_ring(const Params& p);  // project_v9 where it applies: the ring of loads in registers
// project_v9s's tasks lie in one image each and its shared memory fits (structural: the loader switches ignored)
bool project_v9s_fits(const Params& p, bool staged_shortcut = false);
bool project_v9_staged_fits(const Params& p);  // project_v9s or project_v9t fits (the loader switches ignored)
// Version 9 runs version 3's kernel 1 where version 8's was measured slower: k = 3, stride 1 and at most 64 output
// pixels per image (B0's features.7.0, 7 x 7: 132.3 against 145.3 us per block, examples/measurements/mbconv/v8/
// mb8_blocks.json; one band per image, so version 8's halo reuse buys nothing there). mbconv.py mirrors it.
__host__ __device__ inline bool kernel1_v9_takes_v3(int ksize, int stride, int ho, int wo) {
  return ksize == 3 && stride == 1 && ho * wo <= 64;
}
cudaError_t launch_se_v3(const Params& p, cudaStream_t stream, bool pdl);
// The SE as two batched products (mbconv_se_v4.cu, NOTES.md "The SE as two batched products"): inside versions 9-11
// where se_v4_applies(p, se_v4_mode()) (CUDA_KERNELS_SE_V4=0 | 1 | all: 1 by default since session 18, B0 1.738 -> 1.710 ms;
// 1: where hidden >= 480). Its FC1 partial products live after the scale: the scale buffer holds N * hid_pad + se_v4_scratch_floats.
int se_v4_mode();
bool se_v4_applies(const Params& p, int mode);
size_t se_v4_scratch_floats(int n, int hidden, int sq);
cudaError_t launch_se_v4(const Params& p, cudaStream_t stream, bool pdl);
// SE version 5 (mbconv_se_v5.cu): one kernel, a cluster of 8 CTAs per 8 images, FC1's partial products summed through
// distributed shared memory; where SE version 4 applies, unless CUDA_KERNELS_SE_V5=0 (on by default since session 18).
bool se_v5_requested();
bool se_v5_fits(const Params& p);
cudaError_t launch_se_v5(const Params& p, cudaStream_t stream, bool pdl);
// SE version 6 (mbconv_se_v5.cu): version 5's cluster with its products register-blocked over the 8 images
bool se_v6_requested();
bool se_v6_fits(const Params& p);
cudaError_t launch_se_v6(const Params& p, cudaStream_t stream, bool pdl);
cudaError_t launch_project_v9(const Params& p, cudaStream_t stream, bool pdl);
// Version 10's projection (mbconv_v3.cu, NOTES.md "MBConv version 10"): 64-row tiles, 8 warps, each k step split
// between two warps; inside version 9 where project_v10_mode() says (CUDA_KERNELS_PROJ_V10=off | late | all | auto).
cudaError_t launch_project_v10(const Params& p, cudaStream_t stream, bool pdl);
// 0: off, 1: where project_v9 does not apply, 2: every version-9 projection, 3 (the default): auto, project_v10_auto
int project_v10_mode();
// The projection on warpgroup MMAs (mbconv_proj_wg.cu, NOTES.md "The projection on warpgroup MMAs"; sm_90a): inside
// versions 9-11 where project_wg_applies(p, project_wg_mode(v11)) (CUDA_KERNELS_PROJ_WG=off | late | all | ring |
// unstaged; unstaged by default in version 11, else off); CUDA_KERNELS_PROJ_WG_SPLIT=0 | 1 | auto: the hidden dimension over two
// warpgroups (auto, the default: where the tiles are at most the SMs).
int project_wg_mode(bool v11 = false);
bool project_wg_applies(const Params& p, int mode);
cudaError_t launch_project_wg(const Params& p, cudaStream_t stream, bool pdl);
bool project_v10_auto(const Params& p);  // project_v3 would have < 1.5 units per SM
bool project_v7_applies(int ho, int wo);
cudaError_t launch_project_v7(const Params& p, cudaStream_t stream, bool pdl = false);
cudaError_t launch_project_v3_only(const Params& p, cudaStream_t stream, bool pdl = false);  // mbconv_v3.cu, no SE
// Version 3's kernels 2 and 3 (mbconv_v3.cu): persistent pipelined projection, coalesced SE;
// bulk: version 6's projection (whole-K tiles through the copy engine) where project_bulk_applies.
constexpr int kProjBulkMaxSmem = 180 * 1024;  // B0: hidden <= 240 (two stages; one CTA per SM at 240)
bool project_bulk_applies(int hidden, int hk_pad, int c_out);
// pdl: programmatic dependent launch for the SE and project_v3 kernels (pdl.h; not project_bulk, which has no wait).
cudaError_t launch_se_project_v3(const Params& p, cudaStream_t stream, bool bulk = false, bool pdl = false);
// Versions 9-11's SE and projection after kernel 1 (mbconv.cu; also after the stem's fused kernel 1, mbconv_stem_dw.h).
cudaError_t launch_se_project_v9(const Params& p, int version, cudaStream_t stream, bool pdl);
// All three kernels; `version` picks the implementation: 1 and 2 differ in kernel 1 only;
// 3 is kernel 1 version 3 and mbconv_v3.cu's kernels 2 and 3; 5 is 3 with kernel 1's depthwise
// on tensor cores; 6 is 5 with the bulk-copy projection where it applies; 7 is kernel 1 v3 with the SE
// in its last CTA per image, then project_v7 (Ho Wo <= 400) or project_v3.
// 8 is 3 with kernel 1 version 8 (mbconv_v8.cuh) where the block has an expand conv.
// pdl (CUDA_KERNELS_PDL): version 3's and 8's three kernels and version 7's two with programmatic dependent launch;
// ignored by the others.
cudaError_t launch_mbconv(const Params& p, int chunk, int version, cudaStream_t stream, bool pdl = false);

}  // namespace mb
