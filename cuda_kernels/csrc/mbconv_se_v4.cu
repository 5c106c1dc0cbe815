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
#include "mbconv_se.cuh"
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

constexpr int kSeV4Batch = 8;  // loads in flight per batch (mbconv_se.cuh)

__global__ void __launch_bounds__(kSeV4Threads1) se_v4_fc1_kernel(const Params p) {
  extern __shared__ __align__(16) float se4_smem1[];
  constexpr int ld = kSeV4K + 1;  // W1's slice rows: lanes reading rows j, j + 1, ... hit distinct banks
  constexpr int q = kSeV4K / 4;   // float4s per slice row
  float* w1s = se4_smem1;                    // [sq][ld]
  float* pooled = se4_smem1 + p.sq * ld;     // [kSeV4Images1][kSeV4K]
  const int tid = threadIdx.x, slice = blockIdx.x, k0 = slice * kSeV4K, kw4 = min(kSeV4K, p.hidden - k0) / 4;
  const int n0 = blockIdx.y * kSeV4Images1;
  // weights only: ahead of the wait. Row j's slice is q float4s from w_se1 + j * hidden + k0 (16-byte aligned: hidden
  // and k0 are multiples of 8); kw4 < q in the last slice, zeros past it.
  se_copy_columns<kSeV4Threads1, kSeV4Batch, true>(w1s, ld, p.w_se1, p.hidden, k0, q, kw4, p.sq, tid);
  pdl::wait();  // kernel 1's partial sums
  pdl::launch_dependents();
  // the pool: thread (image m, float4 c4) sums its 4 channels over the bands, in band order
  static_assert(kSeV4Threads1 == kSeV4Images1 * q, "one float4 of the pool per thread");
  {
    const int m = tid / q, c4 = tid % q, n = n0 + m;
    const float4 s = n < p.N && c4 < kw4 ? se_pool4(p, n, k0, c4) : make_float4(0.f, 0.f, 0.f, 0.f);
    const float inv = 1.f / float(p.Ho * p.Wo);
    float* d = pooled + m * kSeV4K + 4 * c4;
    d[0] = s.x * inv, d[1] = s.y * inv, d[2] = s.z * inv, d[3] = s.w * inv;
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
  // W2's rows c0 .. c0 + cw - 1: cw * sq contiguous floats (16-byte aligned, a multiple of 4: cw % 8 == 0)
  se_copy_rows<kSeV4Threads2, kSeV4Batch>(w2s, ld, p.w_se2 + (size_t)c0 * p.sq, cw * p.sq / 4, p.sq, tid);
  pdl::wait();  // se_v4_fc1's partial products
  pdl::launch_dependents();
  // h: the group's images' sq values are contiguous in each slice ([slice][n][sq]); thread tid sums values tid + 256u
  // over the slices, in slice order, all of a slice's loads before its adds
  const float* hpart = p.scale + (size_t)p.N * p.hid_pad;
  const int slices = se_v4_slices(p.hidden), count = min(kSeV4Images2, p.N - n0) * p.sq;
  constexpr int kH = kSeV4Images2 * kSeV4MaxSq / kSeV4Threads2;
  float acc[kH];
#pragma unroll
  for (int u = 0; u < kH; ++u) acc[u] = 0.f;
#pragma unroll 2
  for (int k = 0; k < slices; ++k) {
    const float* row = hpart + ((size_t)k * p.N + n0) * p.sq;
#pragma unroll
    for (int u = 0; u < kH; ++u) {
      const int o = tid + u * kSeV4Threads2;
      if (o < count) acc[u] += row[o];
    }
  }
#pragma unroll
  for (int u = 0; u < kH; ++u) {
    const int o = tid + u * kSeV4Threads2;
    if (o < kSeV4Images2 * p.sq) {
      const float v = acc[u] + p.b_se1[o % p.sq];  // images past N: finite values, never stored
      h[o] = v / (1.f + expf(-v));
    }
  }
  __syncthreads();
  const int c = tid % kSeV4C, lane = tid / kSeV4C;
  if (c >= cw) return;
  constexpr int kPer = kSeV4Images2 / kSeV4Lanes2;
  float out[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) out[i] = 0.f;
  const float* w = w2s + c * ld;
  for (int j = 0; j < p.sq; ++j) {
    const float wj = w[j];
#pragma unroll
    for (int i = 0; i < kPer; ++i) out[i] = fmaf(wj, h[(lane + kSeV4Lanes2 * i) * p.sq + j], out[i]);
  }
  const float b = __ldg(p.b_se2 + c0 + c);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int n = n0 + lane + kSeV4Lanes2 * i;
    if (n < p.N) p.scale[(size_t)n * p.hid_pad + c0 + c] = 1.f / (1.f + expf(-(out[i] + b)));
  }
}

}  // namespace

size_t se_v4_scratch_floats(int n, int hidden, int sq) { return (size_t)se_v4_slices(hidden) * n * sq; }

int se_v4_mode() {
  const char* v = std::getenv("CUDA_KERNELS_SE_V4");
  if (v == nullptr) return 1;  // the default since session 18 (s18 call 5: B0 1.738 -> 1.710 ms; "all" 1.719)
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
