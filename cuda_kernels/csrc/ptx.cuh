// Thin wrappers over the PTX instructions the block-fusion kernels use:
// cp.async (global -> shared, 16 bytes), ldmatrix (shared -> mma fragments) and
// mma.sync (m16n8k16 for the FFN, m16n8k8 for the group-width-8 convolution).
// All of them exist on sm_80 and newer.
#pragma once
#include <cstdint>
#include <cuda_fp16.h>

namespace bf {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes, or writes 16 zero bytes when `valid` is false (src-size 0).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D += A(16x16, row) * B(16x8, col), fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D = A(16x16, row) * B(16x8, col) + C with C's rows all (c0, c1) per lane (a per-column bias read straight from
// registers: no copy into D first).
__device__ __forceinline__ void mma_m16n8k16_c(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                               float c0, float c1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%10,%11};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c0), "f"(c1));
}

// D += A(16x8, row) * B(8x8, col): 16 pixels x 8 input channels x 8 output channels.
__device__ __forceinline__ void mma_m16n8k8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// Shared-memory matrices are stored as panels of 64 fp16 columns: one 128-byte row
// per matrix row, the eight 16-byte chunks of a row XOR-swizzled with the row index,
// so that ldmatrix's eight row reads of one 8x8 matrix hit eight different bank groups.
__device__ __forceinline__ uint32_t panel_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + (((chunk ^ row) & 7) << 4));
}

// The grouped 3 x 3 convolution's nine-tap chain for one 16-pixel m-tile and one pair of groups (group width 8: one
// m16n8k8 per group and tap). The lane's pixel sits at global image row grow (row h of its image), column w; tap (dy,
// dx) reads halo row q = (grow + dy - row_lo) W + w + dx at halo + offset(q), or the zero pixel at zero_addr where the
// tap falls outside the image (or the pixel outside the tile: !in_range); acc[gi] += A . bfrag[gi][tap].
template <typename Offset>
__device__ __forceinline__ void conv3x3_taps(float (&acc)[2][4], bool in_range, int grow, int h, int w, int W, int H,
                                             int row_lo, uint32_t halo, uint32_t zero_addr,
                                             const uint32_t (&bfrag)[2][9], Offset offset) {
#pragma unroll
  for (int tap = 0; tap < 9; ++tap) {
    const int dy = tap / 3 - 1, dx = tap % 3 - 1;
    const bool ok = in_range && h + dy >= 0 && h + dy < H && w + dx >= 0 && w + dx < W;
    const int q = (grow + dy - row_lo) * W + w + dx;
    uint32_t a[4];
    ldmatrix_x4(a, ok ? halo + offset(q) : zero_addr);
    mma_m16n8k8(acc[0], a[0], a[1], bfrag[0][tap]);
    mma_m16n8k8(acc[1], a[2], a[3], bfrag[1][tap]);
  }
}

}  // namespace bf
