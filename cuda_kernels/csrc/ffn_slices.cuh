// The FFN's warp-tiled steps on swizzled shared-memory panels (ptx.cuh's panel_offset): one k-slice
// of mma.sync products (the stride-2 ConvFirst kernel's stage 1, shortcut and stage 2,
// convfirst_s2.cuh) and the hidden activations written back as fp16 panels (that kernel and the
// block-fusion one, block_fusion.cuh). block_fusion.cuh keeps its own copies of the slice loops:
// through mma_slice, nvcc orders its accumulator zeroing differently (the SASS is not identical).
#pragma once
#include <cstdint>

#include "ptx.cuh"

namespace bf {

// ldmatrix lane roles: A rows (lane & 15), k half (lane >> 4); B rows (lane & 7) + 8 * (lane >> 4),
// k half (lane >> 3) & 1.
struct LaneRoles {
  int a_row, a_chunk, b_row, b_chunk;
  __device__ __forceinline__ explicit LaneRoles(int lane)
      : a_row(lane & 15), a_chunk(lane >> 4), b_row((lane & 7) + ((lane >> 4) << 3)), b_chunk((lane >> 3) & 1) {}
};

// acc += A . B^T over KWIDTH columns: A is the panel at a_base, of which this warp reads the MT
// 16-row tiles from row wm * TM; B is the slot at b_base (rows = output columns, 128-byte rows),
// of which it reads NT 8-row tiles from row wn * TN.
template <int MT, int NT, int TM, int TN, int KWIDTH>
__device__ __forceinline__ void mma_slice(float (&acc)[MT][NT][4], uint32_t a_base, uint32_t b_base, int wm, int wn,
                                          const LaneRoles& r) {
#pragma unroll
  for (int ks = 0; ks < KWIDTH / 16; ++ks) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldmatrix_x4(a[mt], a_base + panel_offset(wm * TM + mt * 16 + r.a_row, ks * 2 + r.a_chunk));
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, b_base + panel_offset(wn * TN + np * 16 + r.b_row, ks * 2 + r.b_chunk));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_m16n8k16(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma_m16n8k16(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// H = ReLU(acc + bias[offset + c]) for hidden column c of the chunk, as fp16 into the panels at H_s
// (PANEL bytes apart, 64 columns each): the warp's tiles as mma_slice laid them out.
template <int MT, int NT, int TM, int TN, int PANEL>
__device__ __forceinline__ void store_relu_half(uint8_t* H_s, const float (&acc)[MT][NT][4], const float* bias,
                                                int offset, int wm, int wn, int lane) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int col = wn * TN + nt * 8 + (lane & 3) * 2;
    const float bias0 = __ldg(bias + offset + col), bias1 = __ldg(bias + offset + col + 1);
    uint8_t* panel = H_s + (col >> 6) * PANEL;
    const int c16 = (col & 63) >> 3, within = (col & 7) * 2;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int row = wm * TM + mt * 16 + (lane >> 2);
      const float* v = acc[mt][nt];
      *reinterpret_cast<uint32_t*>(panel + panel_offset(row, c16) + within) =
          pack_half2(fmaxf(v[0] + bias0, 0.f), fmaxf(v[1] + bias1, 0.f));
      *reinterpret_cast<uint32_t*>(panel + panel_offset(row + 8, c16) + within) =
          pack_half2(fmaxf(v[2] + bias0, 0.f), fmaxf(v[3] + bias1, 0.f));
    }
  }
}

}  // namespace bf
