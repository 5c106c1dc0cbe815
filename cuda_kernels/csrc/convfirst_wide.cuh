// Device pieces that the wide ConvFirst kernels share (convfirst_c512.cu, convfirst_c768.cu): the cluster's rank and
// barrier, the stage-2 warpgroup product by accumulator size, and the grouped 3 x 3 convolution of two 16-pixel
// m-tiles on mma.sync. Hopper only (the callers' kernels are built for sm_90a).
#pragma once
#include <cstdint>

#include "ptx.cuh"
#include "ptx_sm90.cuh"
#include "wgmma.cuh"

namespace cfwide {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ---- clusters: two CTAs share weight slots (c512's variant 1, every c768 kernel) ----
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// Every thread of both CTAs: orders the barrier initialisation (and, at the end, every remote arrive) across the
// cluster.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}

// The stage-2 product by accumulator size: n = 128 (64 registers) or n = 64 (32).
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t a, uint64_t b, int scale_d) {
  bf::wgmma_m64n128k16_ss(d, a, b, scale_d);
}
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t a, uint64_t b, int scale_d) {
  bf::wgmma_m64n64k16_ss(d, a, b, scale_d);
}

// The conv of two 16-pixel m-tiles, mt0 and mt0 + DMT, of the tile at p0 for one pair of groups (bfrag:
// their nine taps' B fragments): acc[j][gi] += the nine-tap m16n8k8 chain of m-tile j, group gi, the A
// rows from the halo (image row row_lo first; the lane's ldmatrix row reads 16-byte chunk local_group,
// the pair's first group for lanes 0..15, its second for 16..31); taps outside the image read the zero pixel.
template <int DMT>
__device__ __forceinline__ void conv_mtiles(float (&acc)[2][2][4], int P, int W, int H, int p0, int mt0, int lane,
                                            int row_lo, uint32_t halo, uint32_t zero_addr, int local_group,
                                            const uint32_t (&bfrag)[2][9]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int mt = mt0 + DMT * j;
    const int pix = p0 + mt * 16 + (lane & 15);
    const bool in_range = pix < P;
    const int grow = in_range ? pix / W : 0;
    const int w = in_range ? pix - grow * W : 0;
    const int h = grow % H;
    bf::conv3x3_taps(acc[j], in_range, grow, h, w, W, H, row_lo, halo, zero_addr, bfrag,
                     [&](int q) { return bf::panel_offset(q, local_group); });
  }
}
#endif

}  // namespace cfwide
