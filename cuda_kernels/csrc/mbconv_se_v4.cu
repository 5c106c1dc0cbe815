// The squeeze-excitation as two small batched products (SE version 4; NOTES.md "The SE as two batched products",
// session 18): the same arithmetic as se_v3_kernel (pool -> FC1 -> SiLU -> FC2 -> sigmoid), organised so that each
// weight is read from L2 by a few CTAs instead of once per image.
//
// se_v3 runs one CTA per image, and each streams all of W1 and W2 (442 KB fp32 at hidden 1152): 128 images pull 57 MB
// through L2 in one wave, ~20 us at B0's 6.x (one image's FC1 + FC2 is only 0.1 MFLOP). Here:
//   se_v4_fc1: CTA (k slice of kSeV4K hidden channels, group of kSeV4Images1 images) sums the pool's per-band
//     partials of its slice, scales by 1 / (Ho Wo), and writes FC1's partial product over the slice,
//     hpart[slice][n][j] = sum_{c in slice} W1[j][c] pooled[n][c]; W1's slice (sq x 64 fp32) is in shared memory
//     before the wait on kernel 1 (PDL).
//   se_v4_fc2: CTA (kSeV4C hidden channels, group of kSeV4Images2 images) loads W2's rows (kSeV4C x sq) before its
//     wait, then h[n][j] = SiLU(b1[j] + sum over slices of hpart, in slice order), and scale[n][c] = sigmoid(b2[c] +
//     sum_j W2[c][j] h[n][j]).
// W1 and W2 are read once per image group (16 and 8 groups at batch 128) instead of once per image. Deterministic:
// every sum has a fixed order (no atomics). hpart lives after the scale in the scale buffer (se_v4_scratch_floats).
#include <cstdlib>
#include <cstring>

#include "mbconv.cuh"
#include "mbconv_launch.cuh"
#include "pdl.h"

namespace mb {

namespace {

constexpr int kSeV4Threads1 = 128, kSeV4Threads2 = 256;
constexpr int kSeV4K = 64;          // hidden channels per FC1 slice
constexpr int kSeV4Images1 = 8;     // images per FC1 CTA
constexpr int kSeV4C = 64;          // hidden channels per FC2 CTA
constexpr int kSeV4Images2 = 16;    // images per FC2 CTA
constexpr int kSeV4Lanes2 = kSeV4Threads2 / kSeV4C;  // image lanes per FC2 CTA: thread (c, lane) takes images lane + 4i
constexpr int kSeV4MinHidden = 480;  // mode 1: where se_v3 measured >= ~7 us (B0 4.x-7.0; NOTES.md)
constexpr int kSeV4MaxSq = 128;      // shared memory: W1's slice sq x 65 fp32 (33 KB), W2's rows 64 x (sq | 1)

__host__ __device__ constexpr int se_v4_slices(int hidden) { return (hidden + kSeV4K - 1) / kSeV4K; }
__host__ __device__ constexpr int se_v4_pitch2(int sq) { return sq | 1; }  // odd: lanes' rows in distinct banks

__host__ __device__ constexpr int se_v4_fc1_smem(int sq) { return (sq * (kSeV4K + 1) + kSeV4Images1 * kSeV4K) * 4; }
__host__ __device__ constexpr int se_v4_fc2_smem(int sq) {
  return (kSeV4C * se_v4_pitch2(sq) + kSeV4Images2 * sq) * 4;
}

__global__ void __launch_bounds__(kSeV4Threads1) se_v4_fc1_kernel(const Params p) {
  extern __shared__ __align__(16) float se4_smem1[];
  constexpr int ld = kSeV4K + 1;  // W1's slice rows: lanes reading rows j, j + 1, ... hit distinct banks
  float* w1s = se4_smem1;                    // [sq][ld]
  float* pooled = se4_smem1 + p.sq * ld;     // [kSeV4Images1][kSeV4K]
  const int tid = threadIdx.x, slice = blockIdx.x, k0 = slice * kSeV4K, kw = min(kSeV4K, p.hidden - k0);
  const int n0 = blockIdx.y * kSeV4Images1;
  for (int i = tid; i < p.sq * kSeV4K; i += kSeV4Threads1) {  // weights only: ahead of the wait
    const int j = i / kSeV4K, c = i % kSeV4K;
    w1s[j * ld + c] = c < kw ? __ldg(p.w_se1 + (size_t)j * p.hidden + k0 + c) : 0.f;
  }
  pdl::wait();  // kernel 1's partial sums
  pdl::launch_dependents();
  const float inv = 1.f / float(p.Ho * p.Wo);
  for (int i = tid; i < kSeV4Images1 * kSeV4K; i += kSeV4Threads1) {
    const int m = i / kSeV4K, c = i % kSeV4K, n = n0 + m;
    float s = 0.f;
    if (n < p.N && c < kw)
      for (int b = 0; b < p.row_blocks; ++b) s += p.partial[((size_t)n * p.row_blocks + b) * p.hid_pad + k0 + c];
    pooled[i] = s * inv;
  }
  __syncthreads();
  float* hpart = p.scale + (size_t)p.N * p.hid_pad;
  for (int o = tid; o < kSeV4Images1 * p.sq; o += kSeV4Threads1) {
    const int m = o / p.sq, j = o % p.sq, n = n0 + m;
    if (n >= p.N) break;  // o grows with m
    const float* w = w1s + j * ld;
    const float* x = pooled + m * kSeV4K;
    float a0 = 0.f, a1 = 0.f;
#pragma unroll 8
    for (int c = 0; c < kSeV4K; c += 2) {
      a0 = fmaf(w[c], x[c], a0);
      a1 = fmaf(w[c + 1], x[c + 1], a1);
    }
    hpart[((size_t)slice * p.N + n) * p.sq + j] = a0 + a1;
  }
}

__global__ void __launch_bounds__(kSeV4Threads2) se_v4_fc2_kernel(const Params p) {
  extern __shared__ __align__(16) float se4_smem2[];
  const int ld = se_v4_pitch2(p.sq);
  float* w2s = se4_smem2;                      // [kSeV4C][ld]
  float* h = se4_smem2 + kSeV4C * ld;          // [kSeV4Images2][sq]
  const int tid = threadIdx.x, c0 = blockIdx.x * kSeV4C, cw = min(kSeV4C, p.hidden - c0);
  const int n0 = blockIdx.y * kSeV4Images2;
  for (int i = tid; i < cw * p.sq; i += kSeV4Threads2) {  // W2's rows c0 .. c0 + cw - 1 are contiguous
    const int r = i / p.sq, j = i % p.sq;
    w2s[r * ld + j] = __ldg(p.w_se2 + (size_t)c0 * p.sq + i);
  }
  pdl::wait();  // se_v4_fc1's partial products
  pdl::launch_dependents();
  const float* hpart = p.scale + (size_t)p.N * p.hid_pad;
  const int slices = se_v4_slices(p.hidden);
  for (int o = tid; o < kSeV4Images2 * p.sq; o += kSeV4Threads2) {
    const int m = o / p.sq, j = o % p.sq, n = n0 + m;
    float s = 0.f;
    if (n < p.N)
      for (int k = 0; k < slices; ++k) s += hpart[((size_t)k * p.N + n) * p.sq + j];
    const float v = s + p.b_se1[j];
    h[o] = v / (1.f + expf(-v));
  }
  __syncthreads();
  const int c = tid % kSeV4C, lane = tid / kSeV4C;
  if (c >= cw) return;
  constexpr int kPer = kSeV4Images2 / kSeV4Lanes2;
  float acc[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) acc[i] = 0.f;
  const float* w = w2s + c * ld;
  for (int j = 0; j < p.sq; ++j) {
    const float wj = w[j];
#pragma unroll
    for (int i = 0; i < kPer; ++i) acc[i] = fmaf(wj, h[(lane + kSeV4Lanes2 * i) * p.sq + j], acc[i]);
  }
  const float b = __ldg(p.b_se2 + c0 + c);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int n = n0 + lane + kSeV4Lanes2 * i;
    if (n < p.N) p.scale[(size_t)n * p.hid_pad + c0 + c] = 1.f / (1.f + expf(-(acc[i] + b)));
  }
}

}  // namespace

size_t se_v4_scratch_floats(int n, int hidden, int sq) { return (size_t)se_v4_slices(hidden) * n * sq; }

int se_v4_mode() {
  const char* v = std::getenv("CUDA_KERNELS_SE_V4");
  if (v == nullptr) return 0;
  if (std::strcmp(v, "1") == 0) return 1;
  if (std::strcmp(v, "all") == 0) return 2;
  return 0;
}

bool se_v4_applies(const Params& p, int mode) {
  if (mode == 0 || p.sq < 1 || p.sq > kSeV4MaxSq || p.hidden % 8 || p.hidden < 8) return false;
  return mode == 2 || p.hidden >= kSeV4MinHidden;
}

cudaError_t launch_se_v4(const Params& p, cudaStream_t stream, bool pdl) {
  if (p.sq < 1 || p.sq > kSeV4MaxSq || p.hidden % 8 || p.hidden < 8) return cudaErrorInvalidValue;
  static DeviceSlots slots1, slots2;
  const int smem1 = se_v4_fc1_smem(p.sq), smem2 = se_v4_fc2_smem(p.sq);
  int dev = 0;
  cudaError_t err = prepare(se_v4_fc1_kernel, slots1, smem1, kSeV4Threads1, dev);
  if (err == cudaSuccess) err = prepare(se_v4_fc2_kernel, slots2, smem2, kSeV4Threads2, dev);
  if (err != cudaSuccess) return err;
  const dim3 grid1(se_v4_slices(p.hidden), (p.N + kSeV4Images1 - 1) / kSeV4Images1);
  const dim3 grid2((p.hidden + kSeV4C - 1) / kSeV4C, (p.N + kSeV4Images2 - 1) / kSeV4Images2);
  if (pdl && pdl::device_supports(dev)) {
    err = pdl::launch(se_v4_fc1_kernel, grid1, dim3(kSeV4Threads1), smem1, stream, p);
    return err != cudaSuccess ? err : pdl::launch(se_v4_fc2_kernel, grid2, dim3(kSeV4Threads2), smem2, stream, p);
  }
  se_v4_fc1_kernel<<<grid1, kSeV4Threads1, smem1, stream>>>(p);
  se_v4_fc2_kernel<<<grid2, kSeV4Threads2, smem2, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mb
