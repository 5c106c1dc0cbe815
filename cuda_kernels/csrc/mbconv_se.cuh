// Pieces shared by SE versions 4 and 5 (mbconv_se_v4.cu, mbconv_se_v5.cu): the weight copies into shared memory and
// the pool over kernel 1's per-band partial sums. Loads are issued in batches of BATCH (every load of a batch before
// its first use): a loop of one load and one store per iteration waits out L2's latency each time (SE version 4's
// first build: its W1 copy made 24 round trips at hidden 1152, ~9 us).
#pragma once
#include <cuda_runtime.h>

#include "mbconv.cuh"

namespace mb {

// Rows 0 .. rows - 1 of a row-major fp32 matrix w (row pitch `stride` floats), columns col0 .. col0 + 4q (16-byte
// aligned), into dst with row pitch ld: q float4s a row, those at c4 >= valid4 stored as zeros (PAD; without it every
// column is valid).
template <int THREADS, int BATCH, bool PAD>
__device__ __forceinline__ void se_copy_columns(float* dst, int ld, const float* w, int stride, int col0, int q,
                                                int valid4, int rows, int tid) {
  for (int base = tid; base < rows * q; base += BATCH * THREADS) {
    float4 v[BATCH];
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int i = base + u * THREADS, j = i / q, c4 = i % q;
      v[u] = i < rows * q && (!PAD || c4 < valid4)
                 ? __ldg(reinterpret_cast<const float4*>(w + (size_t)j * stride + col0) + c4)
                 : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int i = base + u * THREADS, j = i / q, c4 = i % q;
      if (i < rows * q) {
        float* d = dst + j * ld + 4 * c4;
        d[0] = v[u].x, d[1] = v[u].y, d[2] = v[u].z, d[3] = v[u].w;
      }
    }
  }
}

// n4 float4s of contiguous fp32 rows of row_len floats (16-byte aligned) into dst with row pitch ld.
template <int THREADS, int BATCH>
__device__ __forceinline__ void se_copy_rows(float* dst, int ld, const float* src, int n4, int row_len, int tid) {
  const float4* src4 = reinterpret_cast<const float4*>(src);
  for (int base = tid; base < n4; base += BATCH * THREADS) {
    float4 v[BATCH];
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int i = base + u * THREADS;
      v[u] = i < n4 ? __ldg(src4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int i = base + u * THREADS;
      if (i < n4) {
        const float e[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
        if (row_len % 4 == 0) {  // the float4 within one row: one division
          const int r = 4 * i / row_len;
          float* d = dst + r * ld + 4 * i - r * row_len;
          d[0] = e[0], d[1] = e[1], d[2] = e[2], d[3] = e[3];
        } else {
#pragma unroll
          for (int t = 0; t < 4; ++t) dst[(4 * i + t) / row_len * ld + (4 * i + t) % row_len] = e[t];
        }
      }
    }
  }
}

// Image n's pool sums of channels c0 + 4 c4 .. + 3 (c0 a multiple of 4), over kernel 1's bands in band order.
__device__ __forceinline__ float4 se_pool4(const Params& p, int n, int c0, int c4) {
  const float4* src = reinterpret_cast<const float4*>(p.partial + (size_t)n * p.row_blocks * p.hid_pad + c0) + c4;
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int b = 0; b < p.row_blocks; ++b) {
    const float4 v = src[(size_t)b * (p.hid_pad / 4)];  // hid_pad is a multiple of the chunk (32 or 48)
    s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
  }
  return s;
}

}  // namespace mb
