// Device pieces of EfficientNet's stem that its kernel (effnet_stem.cu) and the stem fused with block 1.0's kernel 1
// (effnet_stem_dw.cu) share: the conv 3x3 stride 2 (3 -> C) as a GEMM on mma.m16n8k16 over an image window in shared
// memory, with the ConvFirstNet stem's K layout (k = ky 10 + kx 3 + ci, rows padded to 10, then 32; stem.py
// pack_conv1), and the window's copy.
#pragma once
#include <cstdint>
#include <cuda_fp16.h>

#include "effnet_stem.h"
#include "ptx.cuh"

namespace effstem {

__device__ __forceinline__ float silu(float v) {  // v sigmoid(v) = h + h tanh(h), h = v / 2
  const float h = 0.5f * v;
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  return fmaf(h, t, h);
}

__device__ __forceinline__ float silu_of_half(float h) {  // SiLU(v) for h = v / 2: h + h tanh(h)
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  return fmaf(h, t, h);
}

// Window offset (halves) of the k pair (k, k + 1) from an output pixel's first tap: ky rows down, t = kx 3 + ci
// along; the pad pairs k >= 30 read ky = 2's pair 8-9 (zero weights).
__device__ __forceinline__ int pair_offset(int k, int pitch) {
  const int ky = k < 30 ? k / 10 : 2, t = k < 30 ? k - 10 * (k / 10) : 8;
  return ky * pitch + t;
}

// A lane's operands of the GEMM, constant over a CTA: the weights' B fragments, the bias of its accumulator columns,
// and its k pairs 16 s + 2 q (+ 8 h): their window offsets and the halves they keep (the pad k = 9, 19, 29 and 30-31
// read neighbouring pixels: zeroed in A as well as in B, so that an Inf or NaN there cannot reach an output).
template <int NT>
struct StemLane {
  uint32_t b[NT][2][2];
  float bi[NT][2];
  int off[2][2];
  uint32_t keep[2][2];

  __device__ __forceinline__ StemLane(const uint32_t* __restrict__ wb, const float* __restrict__ bias, int lane,
                                      int pitch) {
    const int q = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int r = 0; r < 2; ++r) b[nt][s][r] = __ldg(wb + ((nt * 2 + s) * 32 + lane) * 2 + r);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      bi[nt][0] = __ldg(bias + nt * 8 + 2 * q);
      bi[nt][1] = __ldg(bias + nt * 8 + 2 * q + 1);
    }
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = 16 * s + 2 * q + 8 * h;
        off[s][h] = pair_offset(k, pitch);
        keep[s][h] = k >= 30 ? 0u : (k % 10 == 8 ? 0x0000FFFFu : 0xFFFFFFFFu);
      }
  }

  // SiLU(acc + bias) of accumulator row g + 8 h, columns 8 nt + 2 q (+ 1), rounded once to fp16
  __device__ __forceinline__ __half2 act(const float (&acc)[NT][4], int h, int nt) const {
    return __floats2half2_rn(silu(acc[nt][2 * h] + bi[nt][0]), silu(acc[nt][2 * h + 1] + bi[nt][1]));
  }

  // acc = the conv of the m16 tile whose rows g and g + 8 have their first tap at window halves base[0], base[1];
  // BC: the first k step's C the bias (halve() first: acc = (conv + b) / 2, act_bc's argument)
  template <bool BC = false>
  __device__ __forceinline__ void mma(float (&acc)[NT][4], const __half* win, const int (&base)[2]) const {
    if constexpr (!BC) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      uint32_t a[4];  // (row g, k), (row g + 8, k), (row g, k + 8), (row g + 8, k + 8); k = 16 s + 2 q
#pragma unroll
      for (int j = 0; j < 4; ++j)  // base and off are even: 4-byte aligned
        a[j] = *reinterpret_cast<const uint32_t*>(win + base[j & 1] + off[s][j >> 1]) & keep[s][j >> 1];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (BC && s == 0)
          bf::mma_m16n8k16_c(acc[nt], a, b[nt][s][0], b[nt][s][1], bi[nt][0], bi[nt][1]);
        else
          bf::mma_m16n8k16(acc[nt], a, b[nt][s][0], b[nt][s][1]);
      }
    }
  }

  // The BC form (the stem + block 1.0 kernel, CUDA_KERNELS_STEM_DW_BC): B and the bias halved once (halving an fp16
  // value is exact above 2^-13), so that mma<true> leaves h = (conv + b) / 2 in acc and SiLU is h + h tanh(h): two
  // instructions an output (act_bc) instead of four (act: the bias add, the halving, tanh, the FMA).
  __device__ __forceinline__ void halve() {
    const __half2 half = __float2half2_rn(0.5f);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          __half2 w = *reinterpret_cast<const __half2*>(&b[nt][s][r]);
          w = __hmul2(w, half);
          b[nt][s][r] = *reinterpret_cast<const uint32_t*>(&w);
        }
      bi[nt][0] *= 0.5f;
      bi[nt][1] *= 0.5f;
    }
  }

  __device__ __forceinline__ __half2 act_bc(const float (&acc)[NT][4], int h, int nt) const {
    return __floats2half2_rn(silu_of_half(acc[nt][2 * h]), silu_of_half(acc[nt][2 * h + 1]));
  }
};

// The window one half per lane (version 1's copy; version 2's where the 16-byte pieces do not apply): row r's
// halves w0 .. w0 + row_halves - 1, half w0 + c = the image row's half c - 3, zero outside the image.
template <int THREADS>
__device__ __forceinline__ void copy_window_halves(__half* win, const __half* __restrict__ img, int H, int W, int iy0,
                                                   int rows, int tid, int pitch, int w0, int row_halves) {
  const int lane = tid & 31;
  for (int r = tid >> 5; r < rows; r += THREADS / 32) {
    const int iy = iy0 + r;
    const bool row_in = iy >= 0 && iy < H;
    const __half* src = img + (size_t)(row_in ? iy : 0) * W * 3;
    for (int c = lane; c < row_halves; c += 32) {
      const int i = c - 3;
      win[r * pitch + w0 + c] = row_in && i >= 0 && i < 3 * W ? src[i] : __float2half(0.f);
    }
  }
}

// The window of `rows` image rows from row iy0 of one image (img: [H, W, 3]; rows outside the image zero) at
// version 2's layout (effnet_stem.h: row r's half 0 at r pitch + kWindowOffsetV2, half c + 3 = the image row's half c,
// the padding columns zero): by 16-byte pieces where W % 8 == 0 and the image is 16-byte aligned (each piece's words
// rebuilt as (high half of word j - 2, low half of word j - 1) by a byte permute, the row's first two words and the
// word after its last piece apart), else one half per lane through half 3 W + 6 (the odd-W pad pair's last).
template <int THREADS>
__device__ __forceinline__ void copy_window_v2(__half* win, const __half* __restrict__ img, int H, int W, int iy0,
                                               int rows, int tid) {
  const int pitch = window_pitch_v2(W), w0 = kWindowOffsetV2;
  if (W % 8 == 0 && (reinterpret_cast<uintptr_t>(img) & 15) == 0) {
    const int pieces = 3 * W / 8;
    for (int i = tid; i < rows * pieces; i += THREADS) {
      const int r = i / pieces, t = i - r * pieces, iy = iy0 + r;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      uint32_t next = 0u;
      if (iy >= 0 && iy < H) {
        const uint32_t* src = reinterpret_cast<const uint32_t*>(img + (size_t)iy * W * 3) + 4 * t;
        v = __ldg(reinterpret_cast<const uint4*>(src));
        if (t + 1 < pieces) next = __ldg(src + 4);
      }
      const uint4 d = make_uint4(__byte_perm(v.x, v.y, 0x5432), __byte_perm(v.y, v.z, 0x5432),
                                 __byte_perm(v.z, v.w, 0x5432), __byte_perm(v.w, next, 0x5432));
      *reinterpret_cast<uint4*>(win + r * pitch + w0 + 8 * t + 4) = d;
    }
    for (int r = tid; r < rows; r += THREADS) {
      const int iy = iy0 + r;
      const uint32_t first = iy >= 0 && iy < H ? __half_as_ushort(img[(size_t)iy * W * 3]) : 0u;
      uint32_t* row = reinterpret_cast<uint32_t*>(win + r * pitch + w0);
      row[0] = 0u;              // column -1's channels 0-1
      row[1] = first << 16;     // column -1's channel 2, the image's half 0
      row[3 * W / 2 + 2] = 0u;  // column W's channels 1-2
    }
    return;
  }
  copy_window_halves<THREADS>(win, img, H, W, iy0, rows, tid, pitch, w0, 3 * W + 7);
}

}  // namespace effstem
