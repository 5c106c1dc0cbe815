// Kernel 1 of the MBConv block, version 8 (NOTES.md, "Next: kernel 1 version 8" and "MBConv version 8:
// what was built"): version 3's arithmetic (mbconv_v2.cuh, V3 = true), reorganised so that fewer instructions
// run per CTA item and fewer of them wait:
//   - persistent CTAs (as many as fit: two per SM) walk a contiguous range of (chunk, image, band) items,
//     chunk-major, bands top to bottom (kernel1_v8_item: item i = (chunk, image, band) of i = (chunk * N + n)
//     * bands + band); the chunk's expand biases (halved) and depthwise taps (halved) and bias stay in
//     registers while the chunk lasts, its U rows in shared memory (cp.async, version 3's padded layout);
//   - X of the next item arrives by one bulk copy (a band's rows of x are one contiguous NHWC range) into a
//     dense X buffer (row pitch C_in), issued right after the barrier that ends the expand, so it lands during
//     the depthwise on an mbarrier; the k16 steps past C_in (k_pad = C_in + 8) read the next pixel's first
//     channels times U's zero columns (products +-0); the buffer is zeroed once per CTA so that every value
//     read is finite. Where the dense pitch makes ldmatrix conflict (x_padded_v8: C_in = 80, 112, 192, ...),
//     version 3's padded rows, one bulk copy per pixel spread over the CTA's threads;
//   - E's side border (the padding columns) is written once per CTA; the rows above / below the image at
//     the top / bottom bands per item;
//   - the expand epilogue: biases from registers, no per-store test except in a band's last m-tile;
//   - the depthwise over vertical segments (an item = a column group of OW outputs x R = 4 (k = 3) / 2 (k = 5)
//     output rows), each E row loaded once per item into registers and added to every output row it feeds,
//     with E's pixel pitch 60 halves (conflict-free half2 loads across a warp's two groups);
//   - the pool without atomics: each depthwise group writes its HC sums to red[group][HC]; HC threads add
//     them in group order during the next item's expand (and after the last item).
//   - E's halo rows kept between consecutive bands of one (chunk, image) (halo_v8: not at k = 5, stride 1): the
//     next band's X copy and expand cover only the input rows under them.
// Each output's taps are added in version 3's order from its bias, E and D round where version 3's do, so D is
// version 3's bit for bit; the pool's per-thread sums and their sum over groups are in another order than
// version 3's (its atomics), so the SE scale and the block's output match version 3 closely, not bitwise.
// Chunks of 48 only, with an expand conv (launch_expand_dw_v8_ks; version 3's kernel 1 otherwise).
#pragma once
#include <algorithm>
#include <cstdlib>

#include "fastdiv.h"
#include "mbconv_v2.cuh"
#include "ptx_sm90.cuh"
#include "tensor_map.h"
#include "wgmma.cuh"
#ifdef MB_D_L2_HINTS
#include "mbconv_ptx.cuh"  // store_d_pair, l2_evict_last
#endif

namespace mb {

template <int HC>
struct V8Dw {
  static constexpr int PAIRS = HC / 2, GROUPS = kExpandThreads / PAIRS;  // version 3's depthwise partition
  // E's pixel pitch in halves: 60 (4 pixels = 480 B = 96 mod 128: the next group's 8 lanes of a warp fall on
  // the 8 banks its first 24 lanes leave free; version 3's 56 put them on 8 of the same banks)
  static constexpr int LDE = 60;
  static_assert(HC == 48, "version 8 runs chunks of 48 (launch_expand_dw_v8_ks)");
};

// Output rows per depthwise segment (mbconv.py v8_segment_rows mirrors it): 4 at k = 3, stride 1, else 2 (NOTES.md,
// "Next: kernel 1 version 8", item 4). At stride 2 and k = 3 the bands are short (B0's 2.0: 2 output rows, E 113
// pixels wide), and a segment of 4 summed 4 rows for 2 valid ones: half of 2.0's HFMA2s (session 17).
template <int KS, int S>
struct V8Seg {
  static constexpr int R = KS == 3 && S == 1 ? 4 : 2;
};

// E's halo rows kept between consecutive bands of one (chunk, image) in a CTA (item 2): the k - s input rows under
// a band are the top rows of the next; each thread carries at most kV8HaloMax 8-byte pieces of them across the
// barrier that frees E. halo_v8: whether a launch keeps them (mbconv.py kernel1_v8_halo mirrors it): not at k = 5,
// stride 1, where the pieces held across the barrier made ptxas spill (16-84 bytes for 6-12 pieces); elsewhere
// where the pieces fit (every B0 / B2 block with k = 3 or stride 2).
constexpr int kV8HaloMax = 12;
__host__ __device__ inline bool halo_v8(int WE, int ks, int stride, int chunk) {
  return !(ks == 5 && stride == 1) && (ks - stride) * WE * (chunk / 4) <= kExpandThreads * kV8HaloMax;
}

// X's layout: dense rows (pitch C_in halves, one bulk copy per item) where ldmatrix's 8 rows at that pitch fall on
// 8 distinct 16-byte bank groups or the pixels are short (C_in < 64: 24 and 40 are conflict-free, 16 2-way), else
// version 3's padded rows (pitch k_pad + 8, one bulk copy per pixel: C_in = 80 / 112 / 208 2-way, 192 8-way,
// 352 4-way at the dense pitch). cuda_kernels/mbconv.py x_rows_padded_v8 mirrors it.
__host__ __device__ inline bool x_padded_v8(int C_in) { return C_in >= 64 && (C_in / 2) % 8 != 4; }
__host__ __device__ inline int x_halves_v8(int m_pad, int C_in, int k_pad) {
  return x_padded_v8(C_in) ? m_pad * (k_pad + 8) : round_up(m_pad * C_in + 8, 8);
}

// X by the tensor memory accelerator (CUDA_KERNELS_K1_TMA_X=1, off until measured; NOTES.md "Kernel 1's stall
// reasons"): where the rows would be padded, the item's pixels arrive as boxes of m_pad pixels x 64 channels (128
// bytes a pixel, the 128-byte swizzle), one per 64 channels, issued by one thread, instead of one bulk copy per pixel
// (which the compiler issues one lane at a time: 5-10% of kernel 1's samples at 4.1-6.1). Box b holds channels
// 64 b .. 64 b + 63 (past C_in: zeros) of m_pad pixels at 128 bytes each, 1024-aligned; the 16-byte piece j of
// pixel r's row sits at piece j ^ (r % 8) (x_tx_offset), so ldmatrix's 8 rows of a k16 step fall on 8 distinct
// 16-byte bank groups without padding. The expand reads the same values in the same order: D and the block's
// output are the padded layout's bit for bit. Shared memory: 1 KB of alignment slack plus the boxes.
constexpr int kV8TxCols = 64;   // channels per box (128 bytes: the swizzle's row)
constexpr int kV8TxMaxRows = 256;  // a box dimension's limit
__host__ __device__ inline int x_boxes_v8(int k_pad) { return (k_pad + kV8TxCols - 1) / kV8TxCols; }
__host__ __device__ inline int x_tx_bytes_v8(int m_pad, int k_pad) { return 1024 + x_boxes_v8(k_pad) * m_pad * 128; }
// The half offset of X[r][k] (k a multiple of 8) from the first box.
__host__ __device__ inline int x_tx_offset(int r, int k, int m_pad) {
  return (k / kV8TxCols) * m_pad * kV8TxCols + r * kV8TxCols + ((((k % kV8TxCols) / 8) ^ (r % 8)) * 8);
}

// The expand on warpgroup MMAs (CUDA_KERNELS_K1_WGMMA=1, off until measured; with X by the tensor memory accelerator):
// each of the two warpgroups runs m64n48k16 wgmmas over 64-pixel tiles of the item, A = X's boxes and B = U, both
// K-major in the 128-byte swizzle (matrix descriptors, ptx_sm90.cuh smem_desc_sw128), committed and waited once per
// tile, instead of each warp's chain of ldmatrix -> mma.sync steps over 16-pixel tiles (14-15% of kernel 1's samples
// at 4.1-6.1, NOTES.md "Kernel 1's stall reasons"). U then sits in X's layout with HC rows (row r, channel k at
// x_tx_offset(r, k, HC)), 1024-aligned after X's boxes. The accumulators of an m64n48 tile hold, per
// warp of the warpgroup, the 16 rows 16 (warp % 4) .. + 15 in mma.sync's m16n8 layout per 8 columns, so the expand's
// epilogue runs unchanged on them. The products are summed in k16 steps in the same order; within a step the
// hardware's order may differ from mma.sync's, so the GPU tests ask float64's closeness, not bits.
constexpr int kV8WgRows = 64;  // pixels per warpgroup tile
__host__ __device__ inline int u_bytes_v8(int k_pad, int chunk, bool wg) {
  return wg ? x_boxes_v8(k_pad) * chunk * 128 : chunk * (k_pad + 8) * 2;
}

// Shared memory of version 8's kernel 1 (cuda_kernels/mbconv.py kernel1_smem_bytes(version=8) mirrors it):
// X (x_halves_v8: dense [m_pad x C_in + 8 halves], the last row's k16 tail reading 8 halves past the band, or
// padded [m_pad x (k_pad + 8)]), U chunk
// [HC x (k_pad + 8)], E tile [e_rows x WE x LDE] (V8Dw::LDE), the pool's per-group sums [GROUPS x HC] fp32, the chunk's
// depthwise taps and bias, halved, as float2 per channel pair [(k k + 1) x HC / 2], one mbarrier.
// images: G images per item (kernel1_v8_images; 1 otherwise): X, E and the per-group sums G times.
// tx: X by the tensor memory accelerator (x_tx_bytes_v8 in place of X's halves); wg: U in the wgmma expand's layout.
// The regions' byte offsets from X's first byte (v8_smem; the kernel carves its shared memory with it): X, U, E (G
// tiles of e_tile pixels at V8Dw::LDE = 60 halves), the per-group sums, the taps and bias, the mbarrier; X starts at
// the dynamic shared memory's base or, with tx, at its first 1024-byte boundary within 1 KB of slack.
// dh (D's epilogue in packed fp16, CUDA_KERNELS_K1_DH2): the taps as half2 [k k x HC / 2], the bias right after them as
// float2 [HC / 2] (the HFMA2 kernels use only the first half of a float2 tap's slot): k k HC x 2 bytes less, which lets
// X come by the tensor memory accelerator (and the expand run on wgmma) at B0's 5.0-5.2 within two CTAs an SM.
// tg (with dh; CUDA_KERNELS_K1_TAPS_G, on by default in version 11): no taps and bias in shared memory at all - each
// thread loads its pair's from global memory (L1) per item - so that taller stride-2 bands fit two CTAs (B0's 3.0: 4
// rows).
struct V8Smem {
  int u, e, red, wdw, bar, end;
};
__host__ __device__ inline V8Smem v8_smem(int m_pad, int C_in, int k_pad, int e_tile, int images, int ks, int chunk,
                                          bool tx, bool wg, bool dh = false, bool tg = false) {
  V8Smem r;
  r.u = tx ? x_tx_bytes_v8(m_pad, k_pad) - 1024 : x_halves_v8(m_pad, C_in, k_pad) * 2;
  r.e = r.u + u_bytes_v8(k_pad, chunk, wg);
  r.red = r.e + images * e_tile * 60 * 2;
  r.wdw = r.red + images * (kExpandThreads / (chunk / 2)) * chunk * 4;
  r.bar = r.wdw + (tg ? 0 : dh ? ks * ks * chunk * 2 + chunk * 4 : (ks * ks + 1) * chunk * 4);
  r.end = r.bar + 8;
  return r;
}
__host__ __device__ inline int expand_dw_v8_m_pad(int H, int W, int rows, int ks, int stride, int images) {
  const int e_rows = (rows - 1) * stride + ks;
  return round_up(images * (e_rows < H ? e_rows : H) * W, 16);
}
// HK (E's halo kept at k = 5, expand_dw_v8_kernel_dhurfwsh): with at most two bands each band touches the image's
// top or bottom, so an item's X holds at most e_rows - k / 2 input rows (B0's 3.1 in bands of 14: 16 of 18), and
// a continuing band fewer
__host__ __device__ inline int expand_dw_v8_m_pad_hk(int H, int W, int rows, int ks, int stride) {
  const int e_rows = (rows - 1) * stride + ks, bands = ((H - 1) / stride + rows) / rows;
  const int x_rows = e_rows - (bands <= 2 ? ks / 2 : 0);
  return round_up((x_rows < H ? x_rows : H) * W, 16);
}
__host__ __device__ inline int expand_dw_v8_smem_bytes(int H, int W, int Wo, int rows, int ks, int stride, int C_in,
                                                      int k_pad, int chunk, int images = 1, bool tx = false,
                                                      bool wg = false, bool dh = false, bool tg = false,
                                                      bool hk = false) {
  const int ow = stride == 1 ? 4 : 2;
  const int e_rows = (rows - 1) * stride + ks;
  const int we = (round_up(Wo, ow) - 1) * stride + ks;
  const int m_pad = hk ? expand_dw_v8_m_pad_hk(H, W, rows, ks, stride) : expand_dw_v8_m_pad(H, W, rows, ks, stride, images);
  return (tx ? 1024 : 0) + v8_smem(m_pad, C_in, k_pad, e_rows * we, images, ks, chunk, tx, wg, dh, tg).end;
}

// Items of G images (NOTES.md, "Design sketch: kernel 1 items of G images"; CUDA_KERNELS_K1_IMAGES, 1 by default):
// where a band is the whole image (row_blocks == 1) and G images' shared memory fits two CTAs per SM, an item is
// (chunk, group of G consecutive images): one X copy, one expand over G H W pixels into G zero-bordered E tiles, the
// depthwise over the G images' segments, G partial rows. Every D value is formed as with G = 1 (the same taps in the
// same order): D is version 8's bit for bit; the second image's segments fall to other thread groups than with
// G = 1, so its pool sum is added in another order (close, not bitwise). cuda_kernels/mbconv.py kernel1_v8_images
// mirrors the rule.
constexpr int kV8TwoCtaSmem = 113 * 1024;
__host__ __device__ inline int kernel1_v8_images(int requested, int row_blocks, int H, int W, int Wo, int rows, int ks,
                                                 int stride, int C_in, int k_pad, int chunk) {
  if (requested <= 1 || row_blocks != 1 || stride != 1) return 1;  // built for stride 1 (launch_expand_dw_v8_ks)
  return expand_dw_v8_smem_bytes(H, W, Wo, rows, ks, stride, C_in, k_pad, chunk, requested) <= kV8TwoCtaSmem
             ? requested : 1;
}

// Whether a launch takes X by the tensor memory accelerator (mbconv.py kernel1_v8_tx mirrors it): asked for, X's
// rows padded otherwise, a box's m_pad rows within the limit, and no fewer CTAs per SM than the padded layout allows;
// wg: with the expand on warpgroup MMAs (its U layout counted); dh: the packed-fp16 epilogue's smaller taps (v8_smem).
__host__ __device__ inline bool kernel1_v8_tx(bool requested, int H, int W, int Wo, int rows, int ks, int stride,
                                              int C_in, int k_pad, int chunk, int images, bool wg = false,
                                              bool dh = false) {
  if (!requested || !x_padded_v8(C_in) || expand_dw_v8_m_pad(H, W, rows, ks, stride, images) > kV8TxMaxRows)
    return false;
  const int tx = expand_dw_v8_smem_bytes(H, W, Wo, rows, ks, stride, C_in, k_pad, chunk, images, true, wg, dh);
  return tx <= kV8TwoCtaSmem ||
         tx <= expand_dw_v8_smem_bytes(H, W, Wo, rows, ks, stride, C_in, k_pad, chunk, images, false, false, dh);
}

// Item i of the launch: chunk c, image n, band b with i = (c * N + n) * bands + b.
struct V8Item {
  int chunk, n, band;
  __device__ V8Item(int i, int N, int bands) {
    const int per_chunk = N * bands;
    chunk = i / per_chunk;
    const int r = i - chunk * per_chunk;
    n = r / bands;
    band = r - n * bands;
  }
  // the same with the divisions by N bands and by bands as multiplies (V8Div)
  __device__ V8Item(int i, int N, int bands, const FastDiv& by_per_chunk, const FastDiv& by_bands) {
    chunk = by_per_chunk.div(i);
    const int r = i - chunk * (N * bands);
    n = by_bands.div(r);
    band = r - n * bands;
  }
};

// The per-item divisors of a launch as multipliers (CUDA_KERNELS_K1_FASTDIV, on by default in version 11 where _dhur
// runs; NOTES.md "Session 25"): N bands and bands (V8Item), the grid (the end of a CTA's item range) and the
// depthwise's column groups. Each division by one of them was ~20 dependent instructions that every warp ran before
// barrier A, several times an item (session 23's 3.1 profile: ~110 instructions a warp an item in the item's head, 4%
// of the stall samples beside the barrier's). launch_expand_dw_v8 fills it (v8_div) where (ctaid + 1) total < 2^31.
struct V8Div {
  FastDiv per_chunk, bands, grid, ngroups;
};

// expand_k16 (mbconv_v2.cuh) with A from X's swizzled boxes (x_tx_offset): the same fragments, so the same sums.
template <int HC>
__device__ __forceinline__ void expand_k16_tx(float (&acc)[HC / 8][4], const __half* Xs, int m_pad, const __half* Us,
                                              int ldu, int m0, int k0, int a_row, int a_k, int b_row, int b_k,
                                              const float (*c)[2] = nullptr) {
  expand_k16_at<HC>(acc, bf::smem_addr(Xs + x_tx_offset(m0 + a_row, k0 + a_k, m_pad)), Us, ldu, k0, b_row, b_k, c);
}

// An MMA tile's accumulators set to zero (the expand's m-tiles before their first k16 step).
template <int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[NT][4]) {
#pragma unroll
  for (int a = 0; a < NT; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) acc[a][b] = 0.f;
}

// The kernel's body (expand_dw_v8_kernel and expand_dw_v8_kernel_tx: two CTAs per SM, <= 128 registers; session 16
// measured it at three CTAs per SM, 80 registers and one-image items, 6.1's kernel 1 49.1 -> 55.4 us, and removed
// that entry point: NOTES.md, "Kernel 1's stall reasons"). TX: X by the tensor memory accelerator through the tensor
// map at xmap (kernel1_v8_tx; null otherwise); WG (with TX): the expand on warpgroup MMAs.
template <int HC, int KS, int S, int G, bool HF, bool TX = false, bool WG = false, bool BC = false, bool DH = false,
          bool TG = false, int UR = 0, bool FD = false, bool WU = false, int UOW = 0, int URS = 0, bool HK = false,
          bool BE = false>
__device__ __forceinline__ void expand_dw_v8_body(const Params& p, const CUtensorMap* xmap = nullptr,
                                                  const V8Div* fd = nullptr) {
  static_assert(!WG || TX, "the wgmma expand reads X's swizzled boxes");
  static_assert(!UR || (!TX && !BC), "U in registers: the bulk-copied X's mma.sync expand from zeros");
  static_assert(!DH || HF, "D's epilogue in packed fp16 takes the HFMA2 depthwise's fp16 sums");
  static_assert(!TG || DH, "the taps from global memory are built on the packed-fp16 epilogue's kernels");
  static_assert(!BC || (S == 2 && !TX), "the bias in the MMA is built for the stride-2 kernels (bulk-copied X)");
  using bf::cp_async16;
  using bf::smem_addr;
  extern __shared__ __align__(16) uint8_t smem[];
  // UOW, URS (> 0): the depthwise unit's output columns and rows instead of DwTile's and V8Seg's (expand_dw_v8_kernel_
  // txdhsw, CUDA_KERNELS_K1_ROW_UNITS)
  constexpr int LDE = V8Dw<HC>::LDE, PAD = KS / 2, OW = UOW > 0 ? UOW : DwTile<S>::OW, IN = (OW - 1) * S + KS,
                ECH = HC / 4;
  constexpr int R = URS > 0 ? URS : V8Seg<KS, S>::R, SEG_E = (R - 1) * S + KS;  // a segment's output rows, E rows
  constexpr int KH = KS - S;  // E rows shared by consecutive bands
  // halo_v8's static part (G > 1: one band per image); HK: kept at k = 5, stride 1 too (CUDA_KERNELS_K1_HALO5)
  constexpr bool HALO = (!(KS == 5 && S == 1) || HK) && G == 1;
  constexpr int NT = HC / 8, KK = KS * KS;
  constexpr int PAIRS = V8Dw<HC>::PAIRS, GROUPS = V8Dw<HC>::GROUPS;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int bands = p.row_blocks;  // 1 where G > 1
  // items count images (G = 1) or groups of G images: "n" of V8Item is then a group, its first image G n
  // (a macro-like lambda, not a local: at G = 1 every use reads p.N itself, as before G existed, so that the
  // G = 1 kernel's code is unchanged)
  auto NI = [&]() { return G > 1 ? (p.N + G - 1) / G : p.N; };
  const int total = p.hid_pad / HC * NI() * bands;
  // this CTA's items: [i_begin, items_end()), a contiguous share of the list (the launcher keeps gridDim.x <= total)
  const int i_begin = (int)((long long)blockIdx.x * total / gridDim.x);
  // the end of the range is recomputed where it is needed (once per item): kept in a register across the item
  // loop, it was one of the values ptxas spilled at k = 5, stride 1
  auto items_end = [&]() {
    uint32_t b;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(b));
    if constexpr (FD)
      return fd->grid.div((int)((b + 1) * (uint32_t)total));
    else
      return (int)((long long)(b + 1) * total / gridDim.x);
  };
  auto item_at = [&](int i) {
    if constexpr (FD)
      return V8Item(i, NI(), bands, fd->per_chunk, fd->bands);
    else
      return V8Item(i, NI(), bands);
  };
  const int ngroups = (p.Wo + OW - 1) / OW;
  const int WE = (ngroups * OW - 1) * S + KS;  // E tile width: column c holds input column c - PAD
  const int rows_max = (p.rows_per_tile - 1) * S + KS;
  const int m_pad = HK ? expand_dw_v8_m_pad_hk(p.H, p.W, p.rows_per_tile, KS, S)
                       : round_up(G * min(rows_max, p.H) * p.W, 16);
  const bool x_padded = x_padded_v8(p.C_in);
  const int e_tile = rows_max * WE;  // pixels of one image's E tile (G tiles stacked where G > 1)
  static_assert(LDE == 60, "v8_smem counts E's pixels at 60 halves");
  const V8Smem L = v8_smem(m_pad, p.C_in, p.k_pad, e_tile, G, KS, HC, TX, WG, DH, TG);  // (TX: the regions' offsets)
  const int x_halves = TX ? L.u / 2 : x_halves_v8(m_pad, p.C_in, p.k_pad);
  const int ldx = x_padded ? p.k_pad + 8 : p.C_in;
  const int ldu = p.k_pad + 8;
  // TX: the boxes from the first 1024-byte boundary (the swizzle's period), within the 1 KB of slack
  uint8_t* const base = smem + (TX ? (1024 - smem_addr(smem) % 1024) % 1024 : 0);
  __half* Xs = reinterpret_cast<__half*>(base);
  __half* Us = Xs + x_halves;  // TX: 1024-aligned (the boxes are m_pad x 128 bytes each)
  __half* Es = TX ? reinterpret_cast<__half*>(base + L.e) : Us + HC * ldu;  // (WG: U's swizzled rows are longer)
  float* red = reinterpret_cast<float*>(Es + G * e_tile * LDE);  // [G][GROUPS][HC]
  float2* wdw = reinterpret_cast<float2*>(red + G * GROUPS * HC);  // [KK + 1][PAIRS]: taps, then the bias
  // DH: the taps as half2 [KK][PAIRS], the bias after them (v8_smem)
  float2* const wdw_bias =
      DH ? reinterpret_cast<float2*>(reinterpret_cast<__half2*>(wdw) + KK * PAIRS) : wdw + KK * PAIRS;
  const uint32_t bar = smem_addr(TG ? wdw : wdw_bias + PAIRS);  // TG: no taps region

  // Once per CTA: X zeroed (every value the expand reads is finite), E's side columns (never written by the
  // expand, which stores columns PAD .. PAD + W - 1 only), the mbarrier.
  for (int i = tid; i < x_halves / 8; i += kExpandThreads) reinterpret_cast<uint4*>(Xs)[i] = make_uint4(0, 0, 0, 0);
  {
    const int side = WE - p.W, per_row = side * ECH;
    for (int i = tid; i < G * rows_max * per_row; i += kExpandThreads) {  // the G tiles' rows are consecutive
      const int r = i / per_row, rest = i - r * per_row;
      const int col = rest / ECH, c = rest - col * ECH;
      const int ec = col < PAD ? col : p.W + col;
      *reinterpret_cast<uint2*>(Es + (r * WE + ec) * LDE + c * 4) = make_uint2(0, 0);
    }
    if constexpr (G > 1) {  // one band per image: the PAD rows above and below each tile, once per CTA too
      const int per_tile = 2 * PAD * WE * ECH;
#pragma unroll 1
      for (int i = tid; i < G * per_tile; i += kExpandThreads) {
        const int m = i / per_tile, r = i - m * per_tile, px = r / ECH, c = r - px * ECH;
        const int rs = px / WE, col = px - rs * WE, row = rs < PAD ? rs : p.H + rs;
        *reinterpret_cast<uint2*>(Es + (m * e_tile + row * WE + col) * LDE + c * 4) = make_uint2(0, 0);
      }
    }
  }
  if (tid == 0) {
    bf::mbar_init(bar, 1);
    bf::fence_barrier_init();
  }
  bf::fence_proxy_async_smem();  // the zeros of X before the bulk copies into it
  __syncthreads();
  // PDL (pdl.h): x, the weights and every global write follow the wait; the dependents' own wait holds them
  // until this grid has finished, so the trigger may follow.
  pdl::wait();
  pdl::launch_dependents();

  // The band geometry of an item (version 3's, per CTA there).
  auto band_rows_of = [&](int band, int& ih_lo, int& ih_hi) {
    const int oh0 = band * p.rows_per_tile, oh1 = min(oh0 + p.rows_per_tile, p.Ho);
    const int r0 = oh0 * S - PAD, e_rows = (oh1 - oh0 - 1) * S + KS;
    ih_lo = max(0, r0);
    ih_hi = min(p.H - 1, r0 + e_rows - 1);
  };
  // Every thread: the item's X band, one bulk copy by thread 0 (dense rows) or one per pixel, pixel q by thread
  // q mod 256 (padded rows: a warp's per-lane copies are issued one lane at a time, so they are spread over the
  // warps). Thread 0 arrives with the expected bytes; a copy completing before that leaves the transaction count
  // negative, which the mbarrier allows, and the phase cannot complete before the arrival.
  // The input rows an item expands: ih_first .. ih_hi, all of the band's (clipped to the image) or, continuing
  // the previous band of its (chunk, image) with the halo kept, those under the halo (none past the image bottom).
  const bool halo = HALO && (HK || halo_v8(WE, KS, S, HC));  // (HK copies the rows in a loop: no cap on them)
  auto expand_rows = [&](int band, bool cont, int& ih_first, int& ih_hi) {
    int ih_lo;
    band_rows_of(band, ih_lo, ih_hi);
    ih_first = cont ? band * p.rows_per_tile * S - PAD + KH : ih_lo;
  };
  auto issue_x = [&](int i, bool cont) {
    const V8Item it = item_at(i);
    int ih_lo, ih_hi;
    expand_rows(it.band, cont, ih_lo, ih_hi);
    // 0: a continuing band below the image's last row; G > 1: the group's images (one band each) are one range
    const int npix = max(0, ih_hi - ih_lo + 1) * p.W * (G > 1 ? min(G, p.N - G * it.n) : 1);
    if constexpr (TX) {  // m_pad pixels from the item's first (past the item: finite, unused; past x: zeros)
      if (tid == 0) {
        const int pix0 = ((G > 1 ? G * it.n : it.n) * p.H + ih_lo) * p.W, boxes = npix > 0 ? x_boxes_v8(p.k_pad) : 0;
        bf::mbar_arrive_expect_tx(bar, (uint32_t)(boxes * m_pad * 128));
        for (int b = 0; b < boxes; ++b)
          bf::tma_load_2d(smem_addr(Xs + b * m_pad * kV8TxCols), xmap, b * kV8TxCols, pix0, bar);
      }
      return;
    }
    const __half* src = p.x + ((size_t)(G > 1 ? G * it.n : it.n) * p.H + ih_lo) * p.W * p.C_in;
    if (tid == 0) {
      bf::mbar_arrive_expect_tx(bar, (uint32_t)(npix * p.C_in * 2));
      if (!x_padded && npix > 0) bf::bulk_copy_g2s(smem_addr(Xs), src, (uint32_t)(npix * p.C_in * 2), bar);
    }
    if (x_padded)
      for (int q = tid; q < npix; q += kExpandThreads)
        bf::bulk_copy_g2s(smem_addr(Xs + q * ldx), src + (size_t)q * p.C_in, (uint32_t)(p.C_in * 2), bar);
  };
  auto issue_u = [&](int c0) {  // every thread: the chunk's U rows (version 3's padded layout), one commit group
    const int kch = p.k_pad / 8;
    const float inv_kch = 1.f / kch;
    const __half* usrc = p.w_exp + (size_t)c0 * p.k_pad;
    for (int i = tid; i < HC * kch; i += kExpandThreads) {
      const int r = div_small(i, inv_kch), c = i - r * kch;
      __half* dst = WG ? Us + x_tx_offset(r, c * 8, HC) : Us + r * ldu + c * 8;
      cp_async16(smem_addr(dst), usrc + (size_t)r * p.k_pad + c * 8, true);
    }
    bf::cp_async_commit();
  };
  // The pool's sums of item i: channel tid of the chunk, the groups' sums added in group order.
  auto pool_store = [&](int i) {
    if (tid < HC) {
      const V8Item it = item_at(i);
      if constexpr (G == 1) {
        float s = 0.f;
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) s += red[g * HC + tid];
        p.partial[((size_t)it.n * bands + it.band) * p.hid_pad + it.chunk * HC + tid] = s;
      } else {  // one band per image: image G n + m's sums in red[m]
        const int ng = min(G, p.N - G * it.n);
        for (int m = 0; m < ng; ++m) {
          float s = 0.f;
#pragma unroll
          for (int g = 0; g < GROUPS; ++g) s += red[(m * GROUPS + g) * HC + tid];
          p.partial[(size_t)(G * it.n + m) * p.hid_pad + it.chunk * HC + tid] = s;
        }
      }
    }
  };

  if (i_begin >= items_end()) return;
  issue_x(i_begin, false);
  issue_u(item_at(i_begin).chunk * HC);

  const int pair = tid % PAIRS, group = tid / PAIRS;
  // The chunk's depthwise taps and bias, halved (version 3's values), live in wdw (written after barrier A of the
  // chunk's first item); the expand's biases are loaded once per item (below).
  uint32_t phase = 0;
  for (int i = i_begin;; ++i) {
    const bool last = i + 1 == items_end();
    const V8Item it = item_at(i);
    const int ng = G > 1 ? min(G, p.N - G * it.n) : 1;  // images of this item
    const int c0 = it.chunk * HC;
    // BE: the expand's biases (this lane's, halved) loaded here, before the waits for X and barrier A, whose time
    // hides their latency (CUDA_KERNELS_K1_BIAS_EARLY; s30 call 2: at 4.1 the multiplies by 0.5 waiting on them took
    // 4.5% of kernel 1's stall samples)
    float hbias_e[BE ? NT : 1][2];
    if constexpr (BE) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int u = 0; u < 2; ++u) hbias_e[nt][u] = 0.5f * __ldg(p.b_exp + c0 + nt * 8 + (lane & 3) * 2 + u);
    }
    const bool new_chunk = i == i_begin || (it.n == 0 && it.band == 0);  // chunk-major: a chunk starts at (0, 0)
    const bool cont = halo && i > i_begin && it.band > 0;  // the previous item was band - 1 of this (chunk, image)
    const int oh0 = it.band * p.rows_per_tile;
    const int oh1 = min(oh0 + p.rows_per_tile, p.Ho);
    const int r0 = oh0 * S - PAD;
    const int e_rows = (oh1 - oh0 - 1) * S + KS;
    int ih_lo, ih_hi, ih_first;
    band_rows_of(it.band, ih_lo, ih_hi);
    expand_rows(it.band, cont, ih_first, ih_hi);
    const int npix = max(0, ih_hi - ih_first + 1) * p.W * ng;
    // The halo: the previous (full) band's last KH E rows, read before barrier A (nobody writes E before it),
    // written as this band's first KH rows after it (the previous depthwise has read them; the expand below
    // writes rows >= KH only). HK: read and written after barrier A instead, then a barrier before the expand
    // writes them over (held across barrier A at k = 5, the pieces made ptxas spill).
    uint2 hv[HALO && !HK ? kV8HaloMax : 1];
    const int hcount = KH * WE * ECH;
    if (HALO && !HK && cont) {
#pragma unroll
      for (int k = 0; k < kV8HaloMax; ++k) {
        const int j = tid + k * kExpandThreads, pix = j / ECH;
        if (j < hcount) hv[k] = *reinterpret_cast<const uint2*>(Es + ((rows_max - KH) * WE + pix) * LDE + (j - pix * ECH) * 4);
      }
    }
    bf::cp_async_wait<0>();  // U of a new chunk (an empty wait otherwise)
    if constexpr (WG) bf::fence_proxy_async_smem();  // U's cp.async writes before the wgmmas read them
    bf::mbar_wait(bar, phase);
    phase ^= 1;
    __syncthreads();  // barrier A: X and U in place; E and red free (the previous item's depthwise is done)
    if (i > i_begin) pool_store(i - 1);
    if (HALO && !HK && cont) {
#pragma unroll
      for (int k = 0; k < kV8HaloMax; ++k) {
        const int j = tid + k * kExpandThreads, pix = j / ECH;
        if (j < hcount) *reinterpret_cast<uint2*>(Es + pix * LDE + (j - pix * ECH) * 4) = hv[k];
      }
    }
    if (HK && cont) {  // rows rows_max - KH .. to rows 0 .. KH - 1 (disjoint), then every read done before the expand
#pragma unroll 1
      for (int j = tid; j < hcount; j += kExpandThreads) {
        const int pix = j / ECH, ofs = pix * LDE + (j - pix * ECH) * 4;
        *reinterpret_cast<uint2*>(Es + ofs) = *reinterpret_cast<const uint2*>(Es + (rows_max - KH) * WE * LDE + ofs);
      }
      __syncthreads();
    }
    if (!TG && new_chunk)  // the previous chunk's depthwise is done (barrier A); read after barrier B
      for (int j = tid; j < (KK + 1) * PAIRS; j += kExpandThreads) {
        const int t = j / PAIRS, ch = c0 + 2 * (j - t * PAIRS);
        const float* src = t < KK ? p.w_dw + (size_t)t * p.hid_pad + ch : p.b_dw + ch;
        if (HF && t < KK)  // HF: the taps (halved: exact) as half2 in the first half of their rows; the bias as before
          reinterpret_cast<__half2*>(wdw)[j] = __floats2half2_rn(0.5f * __ldg(src), 0.5f * __ldg(src + 1));
        else if (DH)  // the bias after the half2 taps
          wdw_bias[j - KK * PAIRS] = make_float2(0.5f * __ldg(src), 0.5f * __ldg(src + 1));
        else
          wdw[j] = make_float2(0.5f * __ldg(src), 0.5f * __ldg(src + 1));
      }

    if constexpr (BC) {  // U halved in place once per chunk (its cp.async copies landed before barrier A)
      if (new_chunk) {
        const __half2 half = __float2half2_rn(0.5f);
        for (int j = tid; j < (int)(Es - Us) / 8; j += kExpandThreads) {
          uint4 v = reinterpret_cast<uint4*>(Us)[j];
          __half2* h = reinterpret_cast<__half2*>(&v);
#pragma unroll
          for (int k = 0; k < 4; ++k) h[k] = __hmul2(h[k], half);
          reinterpret_cast<uint4*>(Us)[j] = v;
        }
        __syncthreads();
      }
    }

    // E rows above / below the image (whole rows, at the top and bottom bands only; G > 1: written once per CTA,
    // above: the per-item form of this loop over the G tiles stored past E at k = 3 under compute-sanitizer, at
    // bounds the source does not give; its SASS recomputes the trip count with a max over H itself, not -H; not
    // understood further: examples/measurements/mbconv/s13/README.md, call 2)
    if constexpr (G == 1) {
      const int in_lo = ih_lo - r0, in_hi = ih_hi - r0;
      const int top = in_lo * WE * ECH, bottom0 = (in_hi + 1) * WE * ECH, bottom = e_rows * WE * ECH - bottom0;
      for (int j0 = tid; j0 < ng * (top + bottom); j0 += kExpandThreads) {  // (ng = 1: the G = 1 kernels' code)
        const int m = G > 1 ? j0 / (top + bottom) : 0, j1 = j0 - m * (top + bottom);
        const int j = j1 < top ? j1 : bottom0 + j1 - top;
        const int e = j / ECH, c = j - e * ECH;
        *reinterpret_cast<uint2*>(Es + (m * e_tile + e) * LDE + c * 4) = make_uint2(0, 0);
      }
    }

    // The expand: E = SiLU(X U^T + a) (version 3's fragments and rounding; X rows at pitch C_in)
    {
      // this lane's expand biases, halved, once per item (version 3 loaded them per m-tile; held across the whole
      // item loop, with the depthwise's taps, k = 5 spilled)
      float hbias[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          if constexpr (BE)
            hbias[nt][u] = hbias_e[nt][u];
          else
            hbias[nt][u] = 0.5f * __ldg(p.b_exp + c0 + nt * 8 + (lane & 3) * 2 + u);
        }
      const int e_off = (ih_first - r0) * WE + PAD;  // E position of the first pixel expanded
      const float inv_w = 1.f / p.W, inv_hw = 1.f / (p.H * p.W);
      const int a_row = lane & 15, a_k = (lane >> 4) * 8;
      const int b_row = (lane & 7) + ((lane >> 4) << 3), b_k = ((lane >> 3) & 1) * 8;
      // E = SiLU(acc / 2 + a / 2) (BC: SiLU(acc), U halved and acc started from a / 2: CUDA_KERNELS_K1_BIAS_C) of the
      // 16-pixel m-tile mt (mma.sync's accumulator layout, which wgmma's per-warp accumulators share), stored at the
      // pixels' E positions. (In packed fp16, tanh.approx.f16x2 and HFMA2: 7 SASS instructions a pair against 8, but
      // slower: B0 1.745 -> 1.752 ms, session 17 call 4; removed.)
      auto store_tile = [&](int mt, const float (&acc)[NT][4]) {
        __half* ep[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          int q = mt * 16 + (lane >> 2) + h * 8, m = 0;  // G > 1: pixel q of the group is image m's q - m H W
          if constexpr (G > 1) {
            m = div_small(q, inv_hw);
            q -= m * p.H * p.W;
          }
          const int row = div_small(q, inv_w);
          ep[h] = Es + (m * e_tile + e_off + row * WE + (q - row * p.W)) * LDE + (lane & 3) * 2;
        }
        auto epilogue = [&](auto full) {  // full: all 16 rows are pixels of the band (every m-tile but the last)
          const int left = npix - mt * 16;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (!decltype(full)::value && (lane >> 2) + h * 8 >= left) continue;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              __half2 e;
              if constexpr (BC)  // acc = X U / 2 + a / 2 already
                e = __floats2half2_rn(silu_of_half(acc[nt][2 * h]), silu_of_half(acc[nt][2 * h + 1]));
              else
                e = __floats2half2_rn(silu_of_half(fmaf(acc[nt][2 * h], 0.5f, hbias[nt][0])),
                                      silu_of_half(fmaf(acc[nt][2 * h + 1], 0.5f, hbias[nt][1])));
              *reinterpret_cast<__half2*>(ep[h] + nt * 8) = e;
            }
          }
        };
        if (mt * 16 + 16 <= npix)
          epilogue(std::true_type{});
        else
          epilogue(std::false_type{});
      };
      if constexpr (WG) {  // warpgroup w: 64-pixel tiles w, w + 2, ...; its warp i stores the tile's rows 16 i ..
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        const uint64_t a_desc = bf::smem_desc_sw128(smem_addr(Xs)), b_desc = bf::smem_desc_sw128(smem_addr(Us));
        // The warpgroup's index through a shuffle, which the compiler knows to be warp-uniform (as CUTLASS's
        // canonical_warp_group_idx): from warp / 4 each k step's descriptors were rebuilt in vector registers and
        // moved over, ~27 instructions a wgmma (session 24: 4.1's kernel 1 39.0 -> 36.8 us, B0 -23 us). X's and U's
        // boxes are 64 channels wide, so the k16 steps within a box are constant offsets from the box's descriptors
        // (x_tx_offset(64 m64, k0, m_pad): no swizzle term at a multiple of 8 rows; k_pad % 16 == 0).
        const int wgi = __shfl_sync(0xffffffffu, warp / 4, 0);
        const uint32_t a_box = 2u * m_pad * kV8TxCols, b_box = 2u * HC * kV8TxCols;
        for (int m64 = wgi; m64 * kV8WgRows < npix; m64 += kExpandThreads / 128) {
          float acc[NT][4];
          zero_acc(acc);
          float(&d)[NT * 4] = reinterpret_cast<float(&)[NT * 4]>(acc);
          uint64_t ad = bf::desc_advance(a_desc, 2u * m64 * kV8WgRows * kV8TxCols), bd = b_desc;
          bf::wgmma_fence();
          int kb = 0;  // whole boxes, 4 wgmmas each; then the last box's k16 steps (a wgmma under a condition
                       // between two others made ptxas serialize them)
#pragma unroll 1
          for (; kb + kV8TxCols <= p.k_pad; kb += kV8TxCols, ad = bf::desc_advance(ad, a_box),
                                            bd = bf::desc_advance(bd, b_box)) {
#pragma unroll
            for (int kk = 0; kk < kV8TxCols; kk += 16)
              bf::wgmma_m64n48k16_ss(d, bf::desc_advance(ad, 2 * kk), bf::desc_advance(bd, 2 * kk), 1);
          }
#pragma unroll 1
          for (int kk = 0; kb + kk < p.k_pad; kk += 16)
            bf::wgmma_m64n48k16_ss(d, bf::desc_advance(ad, 2 * kk), bf::desc_advance(bd, 2 * kk), 1);
          bf::wgmma_commit();
          bf::wgmma_wait<0>();
          bf::fence_registers(d);
          const int mt = m64 * (kV8WgRows / 16) + warp % 4;
          if (mt * 16 < npix) store_tile(mt, acc);
        }
#else
        __trap();  // sm_90a only (kernel1_v8_wg_requested is honoured on a Hopper GPU only)
#endif
      } else if constexpr (UR > 0) {  // U's fragments in registers, loaded once an item (k_pad == 16 UR)
        // B of every k16 step and 16-channel pair, as expand_k16_at loads it per m-tile: the warp's m-tiles then
        // wait for their A fragments only (2.1: 28 m-tiles on 8 warps read U 3.5 times a warp an item)
        uint32_t ub[UR][HC / 16][4];
#pragma unroll
        for (int ks = 0; ks < UR; ++ks)
#pragma unroll
          for (int np = 0; np < HC / 16; ++np)
            bf::ldmatrix_x4(ub[ks][np], bf::smem_addr(Us + (np * 16 + b_row) * ldu + ks * 16 + b_k));
        const int mtiles = (npix + 15) / 16;
        for (int mt = warp; mt < mtiles; mt += kExpandThreads / 32) {
          float acc[NT][4];
          zero_acc(acc);
#pragma unroll
          for (int ks = 0; ks < UR; ++ks) {
            uint32_t a[4];
            bf::ldmatrix_x4(a, bf::smem_addr(Xs + (mt * 16 + a_row) * ldx + ks * 16 + a_k));
#pragma unroll
            for (int np = 0; np < HC / 16; ++np) {
              bf::mma_m16n8k16(acc[2 * np], a, ub[ks][np][0], ub[ks][np][1]);
              bf::mma_m16n8k16(acc[2 * np + 1], a, ub[ks][np][2], ub[ks][np][3]);
            }
          }
          store_tile(mt, acc);
        }
      } else {
        const int mtiles = (npix + 15) / 16;
        for (int mt = warp; mt < mtiles; mt += kExpandThreads / 32) {
          float acc[NT][4];
          int k0 = 0;
          if constexpr (BC) {  // the first k16 step from C = the halved bias (read from hbias: no copies, no zeros)
            expand_k16<HC>(acc, Xs, ldx, Us, ldu, mt * 16, 0, a_row, a_k, b_row, b_k, hbias);
            k0 = 16;
          } else {
            zero_acc(acc);
          }
          // k = 5: not unrolled (unrolled, its fragment loads in flight took the registers the depthwise needs:
          // spills)
#pragma unroll (KS == 3 ? 2 : 1)
          for (; k0 < p.k_pad; k0 += 16) {
            if constexpr (TX)
              expand_k16_tx<HC>(acc, Xs, m_pad, Us, ldu, mt * 16, k0, a_row, a_k, b_row, b_k);
            else
              expand_k16<HC>(acc, Xs, ldx, Us, ldu, mt * 16, k0, a_row, a_k, b_row, b_k);
          }
          store_tile(mt, acc);
        }
      }
    }
    __syncthreads();  // barrier B: E complete; X and U dead; the previous item's red read
    if (!last) {  // the next item's X (and U, for a new chunk) land during the depthwise
      const V8Item nx = item_at(i + 1);
      issue_x(i + 1, halo && nx.band > 0);
      const int next_chunk = item_at(i + 1).chunk;
      if (next_chunk != it.chunk) issue_u(next_chunk * HC);
    }

    // The depthwise over vertical segments: an item is (column group of OW outputs, segment of R output rows),
    // column groups first (consecutive groups read neighbouring pixels: lanes 24-31 of a warp, the next group's,
    // land on the banks lanes 0-23 leave free at E's pitch); the thread loads each E row of the segment once and
    // adds it to the (at most KS / S + 1) output rows it feeds, each output's taps in version 3's order (dy
    // outer, dx inner, from its bias): D is version 3's bit for bit. Rows past the band (the band's last,
    // short segment) read the segment's last needed E row again and are neither stored nor summed.
    if (group < GROUPS) {
      const int ch = c0 + 2 * pair;
      // HF: the taps as half2 (HFMA2: both channels of the pair per instruction), summed in fp16 from zero; the bias
      // is added in fp32 to the widened sum (started from the bias, the fp16 sums lost its low bits: 1.3-1.7x the
      // error, 2.09x PyTorch's at features.3.0 in s13 call 3; from zero, as fp32 sums in a float64 model)
      float w0[HF ? 1 : KK], w1[HF ? 1 : KK];
      __half2 wh[HF ? KK : 1];
      if constexpr (TG) {  // the values the shared copy holds, from global memory (L1): halved, then rounded
#pragma unroll
        for (int t = 0; t < KK; ++t) {
          const float2 w = __ldg(reinterpret_cast<const float2*>(p.w_dw + (size_t)t * p.hid_pad + ch));
          wh[t] = __floats2half2_rn(0.5f * w.x, 0.5f * w.y);
        }
      } else if constexpr (HF) {
        const __half2* wdh = reinterpret_cast<const __half2*>(wdw);
#pragma unroll
        for (int t = 0; t < KK; ++t) wh[t] = wdh[t * PAIRS + pair];
      } else {
#pragma unroll
        for (int t = 0; t < KK; ++t) {
          const float2 w = wdw[t * PAIRS + pair];
          w0[t] = w.x;
          w1[t] = w.y;
        }
      }
      const float2 db = TG   ? make_float2(0.5f * __ldg(p.b_dw + ch), 0.5f * __ldg(p.b_dw + ch + 1))
                        : DH ? wdw_bias[pair]
                             : wdw[KK * PAIRS + pair];
      const float dbias0 = db.x, dbias1 = db.y;
      const __half2 dbias_h = DH ? __floats2half2_rn(dbias0, dbias1) : __half2{};  // DH: the bias rounded to fp16
      const bool store = ch < p.hidden;
      float sum0 = 0.f, sum1 = 0.f;
      const int rows = oh1 - oh0, nseg = (rows + R - 1) / R;
      const int items = nseg * ngroups * ng;  // G > 1: the images' segments one after another
      const int dq = FD ? fd->ngroups.div(GROUPS) : GROUPS / ngroups, dr = GROUPS - dq * ngroups;
      int seg = FD ? fd->ngroups.div(group) : group / ngroups, og = group - seg * ngroups;
      int m = 0, m_sum = 0;  // G > 1: the image of the item, and of the sums in sum0 / sum1
      if constexpr (G > 1) {
        while (seg >= nseg) {
          seg -= nseg;
          ++m;
        }
        for (int k = 0; k < G; ++k)  // this thread's slots: images it has no segment of add nothing
          *reinterpret_cast<float2*>(red + (k * GROUPS + group) * HC + 2 * pair) = make_float2(0.f, 0.f);
        m_sum = m;
      }
      // WU: every unit of the launch is whole - its OW x R outputs inside the image, its channels real (the launcher
      // asks it of the geometry: kernel1_v8_all_whole) - so no clamp of its E rows and no test before each output
      // (CUDA_KERNELS_K1_WHOLE, on by default in version 11 since session 26; NOTES.md "Session 25")
      constexpr bool W = WU;
      for (int j = group; j < items; j += GROUPS) {
        const int orow0 = seg * R, ow0 = og * OW, mi = m;
        seg += dq;
        og += dr;
        if (og >= ngroups) {
          og -= ngroups;
          ++seg;
        }
        if constexpr (G > 1) {
          while (seg >= nseg) {
            seg -= nseg;
            ++m;
          }
          if (mi != m_sum) {  // a new image: the previous image's sums to its slot
            *reinterpret_cast<float2*>(red + (m_sum * GROUPS + group) * HC + 2 * pair) = make_float2(sum0, sum1);
            sum0 = sum1 = 0.f;
            m_sum = mi;
          }
        }
        const int valid_rows = min(R, rows - orow0), e_last = (valid_rows - 1) * S + KS - 1;
        const int valid = min(OW, p.Wo - ow0);
        const __half* ebase = Es + (mi * e_tile + orow0 * S * WE + ow0 * S) * LDE + 2 * pair;
        // D's element offset (< 2^31: the binding checks N Ho Wo hid_pad), widened at each store
        const int d0 = (((G > 1 ? G * it.n + mi : it.n) * p.Ho + oh0 + orow0) * p.Wo + ow0) * p.hidden + ch;
        float acc0[HF ? 1 : R][OW], acc1[HF ? 1 : R][OW];
        __half2 acch[HF ? R : 1][OW];
#pragma unroll
        for (int er = 0; er < SEG_E; ++er) {
          const __half* erow = ebase + (W ? er : min(er, e_last)) * WE * LDE;
          float2 e[HF ? 1 : IN];
          __half2 eh[HF ? IN : 1];
#pragma unroll
          for (int x = 0; x < IN; ++x) {
            if constexpr (HF)
              eh[x] = *reinterpret_cast<const __half2*>(erow + x * LDE);
            else
              e[x] = __half22float2(*reinterpret_cast<const __half2*>(erow + x * LDE));
          }
#pragma unroll
          for (int o = 0; o < R; ++o) {
            const int dy = er - o * S;  // known at compile time
            if (dy < 0 || dy >= KS) continue;
            if (dy == 0)
#pragma unroll
              for (int u = 0; u < OW; ++u) {
                if constexpr (HF) {
                  acch[o][u] = __float2half2_rn(0.f);
                } else {
                  acc0[o][u] = dbias0;
                  acc1[o][u] = dbias1;
                }
              }
#pragma unroll
            for (int u = 0; u < OW; ++u)
#pragma unroll
              for (int dx = 0; dx < KS; ++dx) {
                if constexpr (HF) {
                  acch[o][u] = __hfma2(eh[u * S + dx], wh[dy * KS + dx], acch[o][u]);
                } else {
                  acc0[o][u] = fmaf(e[u * S + dx].x, w0[dy * KS + dx], acc0[o][u]);
                  acc1[o][u] = fmaf(e[u * S + dx].y, w1[dy * KS + dx], acc1[o][u]);
                }
              }
            if (dy == KS - 1 && (W || o < valid_rows)) {  // output row o is complete
              int dofs = d0 + o * p.Wo * p.hidden;
              if constexpr (DH) {  // packed fp16: the bias, SiLU and the row's pool sum on half2 (silu_of_half_h2)
                __half2 row_sum;
#pragma unroll
                for (int u = 0; u < OW; ++u) {
                  if (!W && valid < OW && u >= valid) break;
                  const __half2 s = silu_of_half_h2(__hadd2(acch[o][u], dbias_h));
#ifdef MB_D_L2_HINTS
                  if (W || store) store_d_pair(p.d + dofs, s, l2_evict_last());
#else
                  if (W || store) *reinterpret_cast<__half2*>(p.d + dofs) = s;
#endif
                  dofs += p.hidden;
                  row_sum = u == 0 ? s : __hadd2(row_sum, s);
                }
                const float2 f = __half22float2(row_sum);
                sum0 += f.x;
                sum1 += f.y;
              } else {
#pragma unroll
                for (int u = 0; u < OW; ++u) {
                  if (!W && valid < OW && u >= valid) break;
                  float h0, h1;  // the pre-activation, halved (HF: the fp16 sums, widened)
                  if constexpr (HF) {
                    const float2 f = __half22float2(acch[o][u]);
                    h0 = f.x + dbias0;
                    h1 = f.y + dbias1;
                  } else {
                    h0 = acc0[o][u];
                    h1 = acc1[o][u];
                  }
                  const float s0 = silu_of_half(h0), s1 = silu_of_half(h1);
#ifdef MB_D_L2_HINTS
                  if (W || store) store_d_pair(p.d + dofs, __floats2half2_rn(s0, s1), l2_evict_last());
#else
                  if (W || store) *reinterpret_cast<__half2*>(p.d + dofs) = __floats2half2_rn(s0, s1);
#endif
                  dofs += p.hidden;
                  sum0 += s0;
                  sum1 += s1;
                }
              }
            }
          }
        }
      }
      // G > 1: a group with no segment left (its first item past the last image) has nothing to add
      if (G == 1 || m_sum < ng)
        *reinterpret_cast<float2*>(red + (m_sum * GROUPS + group) * HC + 2 * pair) = make_float2(sum0, sum1);
    }
    if (last) {
      __syncthreads();
      pool_store(i);
      break;
    }
  }
}

template <int HC, int KS, int S, int G = 1, bool HF = false>
__global__ void __launch_bounds__(kExpandThreads, 2) expand_dw_v8_kernel(const Params p) {
  expand_dw_v8_body<HC, KS, S, G, HF>(p);
}
// X by the tensor memory accelerator (kernel1_v8_tx): x as a [N H W, C_in] matrix in boxes of m_pad x 64; WG: the
// expand on warpgroup MMAs.
template <int HC, int KS, int S, int G = 1, bool HF = false, bool WG = false>
__global__ void __launch_bounds__(kExpandThreads, 2)
    expand_dw_v8_kernel_tx(const Params p, const __grid_constant__ CUtensorMap xmap) {
  expand_dw_v8_body<HC, KS, S, G, HF, true, WG>(p, &xmap);
}

// The expand's bias and halving in the MMA (CUDA_KERNELS_K1_BIAS_C, stride 2): the same kernel under its own name
// (the profiler and Nsight Compute tell them apart; the default kernels' names unchanged).
template <int HC, int KS, int S, int G = 1, bool HF = false>
__global__ void __launch_bounds__(kExpandThreads, 2) expand_dw_v8_kernel_bc(const Params p) {
  expand_dw_v8_body<HC, KS, S, G, HF, false, false, true>(p);
}

// D's epilogue in packed fp16 (CUDA_KERNELS_K1_DH2, kernel1_v8_dh_requested; NOTES.md "Session 23"): the three entry
// points above with DH, under their own names (the fp32 epilogue's kernels, names and code unchanged).
template <int HC, int KS, int S, int G = 1>
__global__ void __launch_bounds__(kExpandThreads, 2) expand_dw_v8_kernel_dh(const Params p) {
  expand_dw_v8_body<HC, KS, S, G, true, false, false, false, true>(p);
}
template <int HC, int KS, int S, int G = 1, bool WG = false>
__global__ void __launch_bounds__(kExpandThreads, 2)
    expand_dw_v8_kernel_txdh(const Params p, const __grid_constant__ CUtensorMap xmap) {
  expand_dw_v8_body<HC, KS, S, G, true, true, WG, false, true>(p, &xmap);
}
template <int HC, int KS, int S, int G = 1>
__global__ void __launch_bounds__(kExpandThreads, 2) expand_dw_v8_kernel_bcdh(const Params p) {
  expand_dw_v8_body<HC, KS, S, G, true, false, false, true, true>(p);
}
// ... and _dh with U's fragments in registers, UR k16 steps (CUDA_KERNELS_K1_U_REG, on by default in version 11)
template <int HC, int KS, int S, int G = 1, int UR = 2>
__global__ void __launch_bounds__(kExpandThreads, 2) expand_dw_v8_kernel_dhur(const Params p) {
  expand_dw_v8_body<HC, KS, S, G, true, false, false, false, true, false, UR>(p);
}
// ... _dhur with the per-item divisions as multiplies (CUDA_KERNELS_K1_FASTDIV, on by default in version 11; V8Div)
template <int HC, int KS, int S, int G = 1, int UR = 2>
__global__ void __launch_bounds__(kExpandThreads, 2)
    expand_dw_v8_kernel_dhurf(const Params p, const __grid_constant__ V8Div dv) {
  expand_dw_v8_body<HC, KS, S, G, true, false, false, false, true, false, UR, true>(p, nullptr, &dv);
}
// ... and _bcdh with the taps from global memory (CUDA_KERNELS_K1_TAPS_G, on by default in version 11; v8_smem's tg).
template <int HC, int KS, int S, int G = 1>
__global__ void __launch_bounds__(kExpandThreads, 2) expand_dw_v8_kernel_bcdhg(const Params p) {
  expand_dw_v8_body<HC, KS, S, G, true, false, false, true, true, true>(p);
}
// Version 11's defaults where every depthwise unit is whole (CUDA_KERNELS_K1_WHOLE, on by default in version 11;
// kernel1_v8_all_whole): _dhurf, _bcdh and _bcdhg, each with a w.
template <int HC, int KS, int S, int G = 1, int UR = 2>
__global__ void __launch_bounds__(kExpandThreads, 2)
    expand_dw_v8_kernel_dhurfw(const Params p, const __grid_constant__ V8Div dv) {
  expand_dw_v8_body<HC, KS, S, G, true, false, false, false, true, false, UR, true, true>(p, nullptr, &dv);
}
template <int HC, int KS, int S, int G = 1>
__global__ void __launch_bounds__(kExpandThreads, 2) expand_dw_v8_kernel_bcdhw(const Params p) {
  expand_dw_v8_body<HC, KS, S, G, true, false, false, true, true, false, 0, false, true>(p);
}
template <int HC, int KS, int S, int G = 1>
__global__ void __launch_bounds__(kExpandThreads, 2) expand_dw_v8_kernel_bcdhgw(const Params p) {
  expand_dw_v8_body<HC, KS, S, G, true, false, false, true, true, true, 0, false, true>(p);
}

// Static shapes (CUDA_KERNELS_K1_STATIC, on by default in version 11 since session 26; NOTES.md "Session 26"): the
// whole-unit kernels above compiled for one input shape each, its sizes constants (a local copy of the parameters
// with those fields set), so that every address, bound and division by them folds: B0's 2.0-3.1 at 224 x 224, where
// _dhurfw / _bcdhw / _bcdhgw run. By static count 2.1's item loop goes from 1,810 to 1,360 SASS instructions and its
// 20 bytes of spills go; the same arithmetic, so the same bits. N stays a launch value (any batch). kernel1_v8_static
// picks the entry whose every field the launch's parameters match (0: none). Entries 5-10 are the rest of B0's
// version-8 kernels 1 (_bcdh / _bcdhg at stride 2, the wgmma _txdh at stride 1), behind CUDA_KERNELS_K1_STATIC_REST
// (on by default since session 27). Entries 11-18 are EfficientNet-B2's (since session 28), computed by
// cuda_kernels/static_shapes.py. Other models' entries follow where the extension is built with
// CUDA_KERNELS_STATIC_MODELS (static_shapes.py computes them and their routes, _build.py writes them).
// The route an entry's launch takes in version 11 at its defaults (launch_expand_dw_v8_hf), which names the static
// kernel it is compiled as; each route's launcher instantiates its entries only (launch_v8_static).
enum V8Route : int {
  kV8RouteUrWhole = 1,  // stride 1, U's fragments in registers, whole units: _dhurfws (UR = k_pad / 16)
  kV8RouteBcWhole,      // stride 2, whole units: _bcdhws (k = 5: the taps from global memory)
  kV8RouteBc,           // stride 2: _bcdhs (k = 5: the taps from global memory)
  kV8RouteTx1,          // stride 1, X by the TMA and the wgmma expand, one image an item: _txdhs
  kV8RouteTx2,          // ... two images an item
};
struct V8Static {
  int H, W, ks, stride, C_in, k_pad, hidden, rows, route;  // input, depthwise k and stride, channels, padded k, band
                                                           // rows, V8Route
};
constexpr V8Static kV8Static[] = {{0, 0, 0, 0, 0, 0, 0, 0, 0},
                                  {112, 112, 3, 2, 16, 16, 96, 2, kV8RouteBcWhole},    // 1: B0's 2.0 (_bcdhw)
                                  {56, 56, 3, 1, 24, 32, 144, 8, kV8RouteUrWhole},     // 2: 2.1 (_dhurfw)
                                  {56, 56, 5, 2, 24, 32, 144, 4, kV8RouteBcWhole},     // 3: 3.0 (_bcdhgw)
                                  {28, 28, 5, 1, 40, 48, 240, 10, kV8RouteUrWhole},    // 4: 3.1 (_dhurfw)
                                  {28, 28, 3, 2, 40, 48, 240, 7, kV8RouteBc},          // 5: 4.0 (_bcdh)
                                  {14, 14, 3, 1, 80, 80, 480, 14, kV8RouteTx1},        // 6: 4.1, 4.2 (_txdh)
                                  {14, 14, 5, 1, 80, 80, 480, 14, kV8RouteTx1},        // 7: 5.0 (_txdh)
                                  {14, 14, 5, 1, 112, 112, 672, 14, kV8RouteTx1},      // 8: 5.1, 5.2 (_txdh)
                                  {14, 14, 5, 2, 112, 112, 672, 7, kV8RouteBc},        // 9: 6.0 (_bcdhg)
                                  {7, 7, 5, 1, 192, 192, 1152, 7, kV8RouteTx2},        // 10: 6.1-6.3 (_txdh)
                                  // EfficientNet-B2 at 288 x 288 (static_shapes.py's entries; s28 call 2: B2 -190 us)
                                  {144, 144, 3, 2, 16, 16, 96, 1, kV8RouteBc},         // 11: B2's 2.0
                                  {72, 72, 5, 2, 24, 32, 144, 2, kV8RouteBcWhole},     // 12: 3.0
                                  {36, 36, 5, 1, 48, 48, 288, 8, kV8RouteUrWhole},     // 13: 3.1, 3.2
                                  {36, 36, 3, 2, 48, 48, 288, 6, kV8RouteBcWhole},     // 14: 4.0
                                  {18, 18, 5, 2, 120, 128, 720, 5, kV8RouteBc},        // 15: 6.0
                                  {9, 9, 5, 1, 208, 208, 1248, 9, kV8RouteTx1},        // 16: 6.1-6.4
                                  {9, 9, 3, 1, 208, 208, 1248, 9, kV8RouteTx1},        // 17: 7.0
                                  {9, 9, 3, 1, 352, 352, 2112, 5, kV8RouteTx1}         // 18: 7.1
#ifdef MB_V8_STATIC_MORE  // other models' shapes: CUDA_KERNELS_STATIC_MODELS (cuda_kernels/static_shapes.py)
#include <mbconv_v8_static_more.h>
#endif
};
constexpr int kV8StaticCount = (int)(sizeof(kV8Static) / sizeof(kV8Static[0]));
__host__ __device__ constexpr int v8_static_out(int h, int ks, int s) { return (h + 2 * (ks / 2) - ks) / s + 1; }

template <int KS, int SH>
__device__ __forceinline__ void v8_static_params(Params& p) {
  constexpr V8Static sh = kV8Static[SH];
  static_assert(sh.ks == KS, "a static shape's depthwise k");
  constexpr int out = v8_static_out(sh.H, KS, sh.stride);
  p.H = sh.H;
  p.W = sh.W;
  p.Ho = p.Wo = out;
  p.C_in = sh.C_in;
  p.k_pad = sh.k_pad;
  p.hidden = p.hid_pad = sh.hidden;
  p.rows_per_tile = sh.rows;
  p.row_blocks = (out + sh.rows - 1) / sh.rows;
  p.ksize = KS;
  p.stride = sh.stride;
  p.pad = KS / 2;
}
template <int HC, int KS, int S, int G, int UR, int SH>
__global__ void __launch_bounds__(kExpandThreads, 2)
    expand_dw_v8_kernel_dhurfws(const Params p_in, const __grid_constant__ V8Div dv) {
  Params p = p_in;
  v8_static_params<KS, SH>(p);
  expand_dw_v8_body<HC, KS, S, G, true, false, false, false, true, false, UR, true, true>(p, nullptr, &dv);
}
// ... and with E's halo rows kept between bands at k = 5 (CUDA_KERNELS_K1_HALO5); RO > 0: in taller bands of RO
// output rows than the entry's (kV8HaloBands; =2, version 11's default since session 30)
template <int HC, int KS, int S, int G, int UR, int SH, int RO = 0>
__global__ void __launch_bounds__(kExpandThreads, 2)
    expand_dw_v8_kernel_dhurfwsh(const Params p_in, const __grid_constant__ V8Div dv) {
  Params p = p_in;
  v8_static_params<KS, SH>(p);
  if constexpr (RO > 0) {
    constexpr int out = v8_static_out(kV8Static[SH].H, KS, kV8Static[SH].stride);
    p.rows_per_tile = RO;
    p.row_blocks = (out + RO - 1) / RO;
  }
  expand_dw_v8_body<HC, KS, S, G, true, false, false, false, true, false, UR, true, true, 0, 0, true>(p, nullptr, &dv);
}
template <int HC, int KS, int S, int G, bool TG, int SH>
__global__ void __launch_bounds__(kExpandThreads, 2) expand_dw_v8_kernel_bcdhws(const Params p_in) {
  Params p = p_in;
  v8_static_params<KS, SH>(p);
  expand_dw_v8_body<HC, KS, S, G, true, false, false, true, true, TG, 0, false, true>(p);
}
// ... and the kernels whose units are not all whole (CUDA_KERNELS_K1_STATIC_REST, off until measured): _bcdh(g) at
// stride 2, the wgmma _txdh at stride 1 (their edge tests fold against the constant sizes too)
template <int HC, int KS, int S, int G, bool TG, int SH>
__global__ void __launch_bounds__(kExpandThreads, 2) expand_dw_v8_kernel_bcdhs(const Params p_in) {
  Params p = p_in;
  v8_static_params<KS, SH>(p);
  expand_dw_v8_body<HC, KS, S, G, true, false, false, true, true, TG>(p);
}
template <int HC, int KS, int S, int G, bool WG, int SH>
__global__ void __launch_bounds__(kExpandThreads, 2)
    expand_dw_v8_kernel_txdhs(const Params p_in, const __grid_constant__ CUtensorMap xmap) {
  Params p = p_in;
  v8_static_params<KS, SH>(p);
  expand_dw_v8_body<HC, KS, S, G, true, true, WG, false, true>(p, &xmap);
}
// ... with depthwise units of UOW columns x URS rows that tile the entry's output exactly, so every unit is whole
// (CUDA_KERNELS_K1_ROW_UNITS, on in version 11 since session 29: units of one output row)
template <int HC, int KS, int S, int G, bool WG, int SH, int UOW, int URS>
__global__ void __launch_bounds__(kExpandThreads, 2)
    expand_dw_v8_kernel_txdhsw(const Params p_in, const __grid_constant__ CUtensorMap xmap) {
  Params p = p_in;
  v8_static_params<KS, SH>(p);
  expand_dw_v8_body<HC, KS, S, G, true, true, WG, false, true, false, 0, false, true, UOW, URS>(p, &xmap);
}
// ... with the expand's biases loaded before the item's waits (CUDA_KERNELS_K1_BIAS_EARLY, off until measured)
template <int HC, int KS, int S, int G, bool WG, int SH, int UOW, int URS>
__global__ void __launch_bounds__(kExpandThreads, 2)
    expand_dw_v8_kernel_txdhswb(const Params p_in, const __grid_constant__ CUtensorMap xmap) {
  Params p = p_in;
  v8_static_params<KS, SH>(p);
  expand_dw_v8_body<HC, KS, S, G, true, true, WG, false, true, false, 0, false, true, UOW, URS, false, true>(p, &xmap);
}

// V8Div of a launch of `grid` CTAs with the depthwise's column groups of OW outputs (expand_dw_v8_body's divisors).
inline V8Div v8_div(const Params& p, int G, int OW, int grid) {
  V8Div d;
  d.per_chunk = FastDiv::of((uint32_t)(((p.N + G - 1) / G) * p.row_blocks));
  d.bands = FastDiv::of((uint32_t)p.row_blocks);
  d.grid = FastDiv::of((uint32_t)grid);
  d.ngroups = FastDiv::of((uint32_t)((p.Wo + OW - 1) / OW));
  return d;
}

// Persistent: as many CTAs as fit on the device (two per SM at <= 113 KB), at most one per item.
// CUDA_KERNELS_K1_CTAS=1 (a diagnostic, read at every call; unset by default): at most one kernel-1 CTA an SM (the
// grid capped at the SM count), so that another stream's CTAs can share each SM with it (cuda_kernels/
// mbconv_coresident.py, NOTES.md session 40). The kernels are the same; only the grid changes.
inline long long kernel1_v8_ctas_per_sm(int occupancy) {
  const char* v = std::getenv("CUDA_KERNELS_K1_CTAS");
  return v != nullptr && v[0] == '1' && v[1] == '\0' ? 1 : occupancy;
}

template <int HC, int KS, int S, int G = 1, bool HF = false, bool TX = false, bool WG = false, bool BC = false,
          bool DH = false, bool TG = false, int UR = 0, bool FD = false, bool WU = false, int SH = 0, int UOW = 0,
          int URS = 0, bool HK = false, int HR = 0, bool BE = false>
cudaError_t launch_expand_dw_v8(const Params& p, cudaStream_t stream, bool pdl) {
  static_assert(!HK || (SH && UR > 0 && KS == 5 && S == 1), "the halo at k = 5: the static U-in-registers kernels");
  static_assert(!HR || HK, "taller bands: with the halo kept at k = 5");
  static_assert(!BE || UOW > 0, "the biases loaded early: the static wgmma row-unit kernels (_txdhswb)");
  static_assert(!SH || (kV8Static[SH].stride == S && kV8Static[SH].ks == KS && DH && (WU || TX || BC)),
                "static shapes: version 11's packed-fp16 kernels, at their k and stride");
  static_assert(!WU || (DH && G == 1 && !TX && (UR > 0 ? FD : BC)), "whole units: version 11's _dhurf, _bcdh(g)");
  static_assert(!UR || (DH && !TX && !BC), "U in registers: the bulk-copied X's packed-fp16 kernel only");
  static_assert(!FD || (G == 1 && UR > 0), "the multiplies: _dhur only (the wgmma _txdh's were slower at k = 5)");
  static_assert(!DH || HF, "D's epilogue in packed fp16 takes the HFMA2 depthwise");
  static_assert(!TG || (BC && DH), "the taps from global memory: the stride-2 packed-fp16 kernel only");
  static_assert(!UOW || (SH && TX && URS > 0 && v8_static_out(kV8Static[SH].W, KS, S) % (UOW > 0 ? UOW : 1) == 0 &&
                         kV8Static[SH].rows % (URS > 0 ? URS : 1) == 0 && kV8Static[SH].hidden % HC == 0),
                "units of another shape: the static _txdhs kernels where they tile the output exactly");
  constexpr int kMaxDevices = 64;
  static int configured[kMaxDevices] = {}, last_smem[kMaxDevices] = {}, last_ctas[kMaxDevices] = {},
             sms[kMaxDevices] = {};
  const auto kernel = [] {  // (the TX kernel instantiated only where TX asks for it)
    if constexpr (UOW > 0 && BE)
      return expand_dw_v8_kernel_txdhswb<HC, KS, S, G, WG, SH, UOW, URS>;
    else if constexpr (UOW > 0)
      return expand_dw_v8_kernel_txdhsw<HC, KS, S, G, WG, SH, UOW, URS>;
    else if constexpr (SH > 0 && UR > 0 && HK)
      return expand_dw_v8_kernel_dhurfwsh<HC, KS, S, G, UR, SH, HR>;
    else if constexpr (SH > 0 && UR > 0)
      return expand_dw_v8_kernel_dhurfws<HC, KS, S, G, UR, SH>;
    else if constexpr (SH > 0 && WU)
      return expand_dw_v8_kernel_bcdhws<HC, KS, S, G, TG, SH>;
    else if constexpr (SH > 0 && TX)
      return expand_dw_v8_kernel_txdhs<HC, KS, S, G, WG, SH>;
    else if constexpr (SH > 0)
      return expand_dw_v8_kernel_bcdhs<HC, KS, S, G, TG, SH>;
    else if constexpr (WU && UR > 0)
      return expand_dw_v8_kernel_dhurfw<HC, KS, S, G, UR>;
    else if constexpr (WU && TG)
      return expand_dw_v8_kernel_bcdhgw<HC, KS, S, G>;
    else if constexpr (WU)
      return expand_dw_v8_kernel_bcdhw<HC, KS, S, G>;
    else if constexpr (FD)
      return expand_dw_v8_kernel_dhurf<HC, KS, S, G, UR>;
    else if constexpr (UR > 0)
      return expand_dw_v8_kernel_dhur<HC, KS, S, G, UR>;
    else if constexpr (TX && DH)
      return expand_dw_v8_kernel_txdh<HC, KS, S, G, WG>;
    else if constexpr (TX)
      return expand_dw_v8_kernel_tx<HC, KS, S, G, HF, WG>;
    else if constexpr (TG)
      return expand_dw_v8_kernel_bcdhg<HC, KS, S, G>;
    else if constexpr (BC && DH)
      return expand_dw_v8_kernel_bcdh<HC, KS, S, G>;
    else if constexpr (BC)
      return expand_dw_v8_kernel_bc<HC, KS, S, G, HF>;
    else if constexpr (DH)
      return expand_dw_v8_kernel_dh<HC, KS, S, G>;
    else
      return expand_dw_v8_kernel<HC, KS, S, G, HF>;
  }();
  const int smem =
      expand_dw_v8_smem_bytes(p.H, p.W, p.Wo, p.rows_per_tile, KS, S, p.C_in, p.k_pad, HC, G, TX, WG, DH, TG, HK);
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (smem > configured[dev]) {
    int optin = 0;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return err;
    if (smem > optin) return cudaErrorInvalidConfiguration;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    if (err != cudaSuccess) return err;
    configured[dev] = optin;
    last_smem[dev] = 0;
  }
  if (smem != last_smem[dev]) {  // the occupancy of this shared-memory size (cached for the last size asked)
    err = cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&last_ctas[dev], kernel, kExpandThreads, smem);
    if (err != cudaSuccess) return err;
    if (last_ctas[dev] < 1) return cudaErrorInvalidConfiguration;
    last_smem[dev] = smem;
  }
  const long long total = (long long)(p.hid_pad / HC) * ((p.N + G - 1) / G) * p.row_blocks;
  if (total >= (1ll << 31)) return cudaErrorInvalidValue;
  const int grid = (int)std::min<long long>(total, kernel1_v8_ctas_per_sm(last_ctas[dev]) * sms[dev]);
  if (FD && total * grid >= (1ll << 31)) return cudaErrorInvalidValue;  // V8Div's dividends (the launcher checks)
  const auto go = [&](const auto&... args) {
    if (pdl && pdl::device_supports(dev))
      return pdl::launch(kernel, dim3(grid), dim3(kExpandThreads), smem, stream, args...);
    kernel<<<grid, kExpandThreads, smem, stream>>>(args...);
    return cudaGetLastError();
  };
  if constexpr (TX) {
    CUtensorMap xmap;  // encoded at each call (x moves between calls); passed by value
    const int m_pad = expand_dw_v8_m_pad(p.H, p.W, p.rows_per_tile, KS, S, G);
    err = tmap::half_2d_sw128(&xmap, p.x, (unsigned long long)p.N * p.H * p.W, p.C_in, p.C_in, m_pad, kV8TxCols);
    if (err != cudaSuccess) return err;
    return go(p, xmap);
  } else {
    if constexpr (FD)
      return go(p, v8_div(p, G, DwTile<S>::OW, grid));
    else
      return go(p);
  }
}

// Version 8 where it applies (kernel1_v8_applies: an expand conv and chunks of 48 channels, i.e. every expand
// block of EfficientNet-B0 / B2), else version 3's kernel 1: blocks without an expand conv (features.1.x), and
// chunks of 32 (hidden not a multiple of 48; at k = 5, stride 1 that instantiation needed 129+ registers and
// spilled 20 bytes under the 128 that two CTAs per SM allow).
// CUDA_KERNELS_K1_IMAGES=1|2 (read at every call; version 10: 2 by default, else 1): items of 2 images at stride 1
// where kernel1_v8_images allows it.
inline const char* kernel1_switch(const char* name) {  // "0", "1" or "2", else null
  const char* v = std::getenv(name);
  return v != nullptr && v[0] >= '0' && v[0] <= '2' && v[1] == '\0' ? v : nullptr;
}
inline int kernel1_v8_images_requested(bool v10) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_IMAGES");
  return v != nullptr ? (v[0] == '2' ? 2 : 1) : (v10 ? 2 : 1);
}

// CUDA_KERNELS_K1_HFMA2=0|1 (read at every call; version 10: on by default, else off): the depthwise in packed fp16
// (HFMA2: the taps' sum in fp16 from zero in version 3's order, the bias added in fp32; NOTES.md, "Session 13").
inline bool kernel1_v8_hfma2_requested(bool v10) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_HFMA2");
  return v != nullptr ? v[0] == '1' : v10;
}

// CUDA_KERNELS_K1_TMA_X=0|1 (read at every call; on by default since session 17: 4.1's kernel 1 45.3 -> 40.4 us, B0
// 1.798 -> 1.772 ms): X by the tensor memory accelerator where kernel1_v8_tx allows it, x 16-byte aligned; built for
// stride 1 with the depthwise in HFMA2 (versions 10, 11).
inline bool kernel1_v8_tx_requested() {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_TMA_X");
  return v == nullptr || v[0] == '1';
}
// CUDA_KERNELS_K1_WGMMA=0|1 (read at every call; on by default since session 17: 6.1's kernel 1 46.2 -> 43.9 us over
// the TMA X): the expand on warpgroup MMAs over the TMA X (so not with CUDA_KERNELS_K1_TMA_X=0) where kernel1_v8_tx
// allows it with the wgmma U layout, in an sm_90a build (version 8's kernel 1 runs on Hopper GPUs only:
// mbconv.py runnable_version); the mma.sync expand over the TMA X where only that fits (5.0: U's swizzled rows do not).
inline bool kernel1_v8_wg_requested() {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_WGMMA");
  return v == nullptr || v[0] == '1';
}
// CUDA_KERNELS_K1_BIAS_C=0|1 (read at every call; on by default since session 18: 2.0's kernel 1 174.3 -> 170.3 us,
// B0 1.755 / 1.758 -> 1.750 / 1.747 ms): the expand's bias and halving in the MMA (U halved in shared memory once per chunk, each m-tile's first k16 step from C = the halved bias; no
// zeroing, no FFMA per E element) at stride 2, with the depthwise in HFMA2 (versions 10, 11): where the expand is
// 4 pixels per output (at k = 3, stride 1 the peeled step spilled 8-48 bytes).
inline bool kernel1_v8_bc_requested() {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_BIAS_C");
  return v == nullptr || v[0] == '1';
}
// CUDA_KERNELS_K1_DH2=0|1 (read at every call; on by default in version 11 since session 23: B0 -16.6 us, 5.1's
// kernel 1 73.6 -> 65.8 us; NOTES.md "Session 23"): D's epilogue in packed fp16 with the HFMA2 depthwise - the bias
// added to the fp16 sums in fp16 (one rounding, as PyTorch's fp16 conv output), SiLU by tanh.approx.f16x2 and one
// HFMA2 (D was rounded to fp16 after an fp32 SiLU), each output row's pool sum of OW values in fp16 before it joins the
// fp32 sums (12 -> ~8 instructions an output pair), and the taps as half2 (v8_smem's dh), which lets X come by TMA
// at 5.x.
inline bool kernel1_v8_dh_requested(bool v11) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_DH2");
  return v != nullptr ? v[0] == '1' : v11;
}
// CUDA_KERNELS_K1_TAPS_G=0|1 (read at every call; on by default in version 11 since session 24: B0's 3.0 kernel 1
// 99.5 -> 93.2 us, B0 -5.2 us; NOTES.md "Session 24"): at stride 2, k = 5, with the packed-fp16 epilogue and the bias
// in the MMA, the taps and bias from global memory instead of a shared copy (expand_dw_v8_kernel_bcdhg), 2.6 KB less,
// for the taller bands mbconv.py band_rows then chooses (mbconv.py kernel1_taps_global mirrors when).
inline bool kernel1_v8_tg_requested(bool v11) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_TAPS_G");
  return v != nullptr ? v[0] == '1' : v11;
}
// CUDA_KERNELS_K1_U_REG=0|1 (read at every call; on by default in version 11 since session 25: 2.1's kernel 1
// 117.2 -> 110.4 us, 3.1's 80.9 -> 76.1, B0 -13.0 us; NOTES.md "Session 25"): where the packed-fp16 kernel runs the
// mma.sync expand over bulk-copied X at stride 1, one image an item, k = 3 with k_pad = 32 (B0's and B2's 2.1: C_in
// 24) or k = 5 with k_pad = 48 (3.1: C_in 40, 48), U's fragments in registers (24 and 36), loaded once an item
// instead of once an m-tile (expand_dw_v8_kernel_dhur).
inline bool kernel1_v8_ur_requested(bool v11) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_U_REG");
  return v != nullptr ? v[0] == '1' : v11;
}
// CUDA_KERNELS_K1_FASTDIV=0|1 (read at every call; on by default in version 11 since session 25: 2.1's kernel 1
// 110.5 -> 102.6 us, 3.1's 75.6 -> 71.7; NOTES.md "Session 25"): where version 11 runs _dhur (2.1, 3.1), its per-item
// divisions as multiplies (V8Div; expand_dw_v8_kernel_dhurf), where the dividends stay below 2^31. (The wgmma _txdh's
// were measured too: 4.1 36.7 -> 36.0 us, 5.1 61.9 -> 63.9; not kept.)
inline bool kernel1_v8_fd_requested(const Params& p, bool v11) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_FASTDIV");
  const long long total = (long long)(p.hid_pad / 48) * p.N * p.row_blocks;  // items at one image an item
  return (v != nullptr ? v[0] == '1' : v11) && total * total < (1ll << 31);  // (grid <= total)
}
// CUDA_KERNELS_K1_WHOLE=0|1 (read at every call; on by default in version 11 since session 26: 2.1's kernel 1
// 102.6 -> 95.3 us, 2.0's 169.6 -> 157.3, B0 -32.2 us; NOTES.md "Session 26"): where version 11 runs _dhurf (2.1,
// 3.1), _bcdh at k = 3 or _bcdhg (stride 2) and every depthwise unit of the launch is whole - the column groups of OW
// outputs fill Wo, the segments of R rows fill every band, the channels are all real - the kernel without the clamp
// of each E row and the tests before each output (expand_dw_v8_kernel_*w). B0: 2.0, 2.1, 3.0, 3.1 (4.x-6.x: 14 and
// 7 columns are not multiples of 4).
template <int KS, int S>
inline bool kernel1_v8_all_whole(const Params& p, bool v11) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_WHOLE");
  constexpr int OW = DwTile<S>::OW, R = V8Seg<KS, S>::R;
  return (v != nullptr ? v[0] == '1' : v11) && p.Wo % OW == 0 && p.rows_per_tile % R == 0 &&
         p.Ho % p.rows_per_tile % R == 0 && p.hidden == p.hid_pad;
}
template <int KS>
inline bool v8_static_matches(const Params& p, const V8Static& s, int rows) {  // s's shape in bands of `rows`
  const int out = v8_static_out(s.H, KS, s.stride);
  return s.ks == KS && p.H == s.H && p.W == s.W && p.stride == s.stride && p.ksize == KS && p.pad == KS / 2 &&
         p.Ho == out && p.Wo == out && p.C_in == s.C_in && p.k_pad == s.k_pad && p.hidden == s.hidden &&
         p.hid_pad == s.hidden && p.rows_per_tile == rows && p.row_blocks == (out + rows - 1) / rows;
}
template <int KS>
inline int v8_static_entry(const Params& p) {  // the kV8Static entry of the launch's shape, 0 for none
  for (int i = 1; i < kV8StaticCount; ++i)
    if (v8_static_matches<KS>(p, kV8Static[i], kV8Static[i].rows)) return i;
  return 0;
}
// CUDA_KERNELS_K1_STATIC=0|1 (read at every call; on by default in version 11 since session 26: kernel 1 2.0 158.3
// -> 125.2 us, 2.1 93.3 -> 82.3, 3.0 87.3 -> 76.4, 3.1 68.7 -> 64.1, B0 -58.9 us; NOTES.md "Session 26"): where a
// whole-unit kernel runs and the launch's shape is an entry of kV8Static (B0's 2.0-3.1 at 224 x 224), that kernel
// compiled for the shape (expand_dw_v8_kernel_dhurfws / _bcdhws). Returns the entry, 0 where the switch is off or
// none matches.
inline bool kernel1_v8_static_requested(bool v11) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_STATIC");
  return v != nullptr ? v[0] == '1' : v11;
}
template <int KS>
inline int kernel1_v8_static(const Params& p, bool v11) {
  return kernel1_v8_static_requested(v11) ? v8_static_entry<KS>(p) : 0;
}
// CUDA_KERNELS_K1_STATIC_REST=0|1 (read at every call; on by default in version 11 since session 27: kernel 1 4.0
// 37.7 -> 32.4 us, 4.1 36.1 -> 31.7, 5.1 61.9 -> 56.5, 6.0 56.3 -> 51.0, B0 -49.1 us; NOTES.md "Session 27"): the
// same for the rest of B0's version-8 kernels 1, whose units are not all whole (kV8Static 5-10: 4.0-6.3;
// expand_dw_v8_kernel_bcdhs / _txdhs).
template <int KS>
inline int kernel1_v8_static_rest(const Params& p, bool v11) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_STATIC_REST");
  return (v != nullptr ? v[0] == '1' : v11) ? v8_static_entry<KS>(p) : 0;
}
// CUDA_KERNELS_K1_ROW_UNITS=0|1 (read at every call; on by default in version 11 since session 29: kernel 1 4.1
// 31.9 -> 27.4 us, 5.1 56.9 -> 51.6, 6.1 36.9 -> 32.4, B0 -35.5 us, B2 -84.1; NOTES.md "Current state"): at the
// static wgmma entries, the depthwise in whole units of one output row (expand_dw_v8_kernel_txdhsw<..., cols, 1>)
// instead of 4 x R, where they tile the output: 7 wide where 7 divides the width (B0's 4.1-5.2 at 14 x 14: 28 units an
// item on the 10 thread groups, the slowest 21 outputs where 4 x 4 gave it 32; 6.1-6.3 at 7 x 7, two images an item),
// else the whole row up to 9 (B2's 6.1-7.1 at 9 x 9: 9 units, one round). D the same values; the pool's fp16 row
// sums over the unit's outputs instead of 4.
inline bool kernel1_v8_row_units_requested(bool v11) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_ROW_UNITS");
  return v != nullptr ? v[0] == '1' : v11;
}
// CUDA_KERNELS_K1_HALO5=0|1|2 (read at every call; NOTES.md "Current state", s30 call 2): E's 4 halo rows kept between
// consecutive bands of a (chunk, image) at k = 5 as at k = 3 (expand_dw_v8_kernel_dhurfwsh). 2, the default in version
// 11 since session 30: where kV8HaloBands lists the static entry, in its taller bands, which only the halo kernel's
// smaller X fits in two CTAs an SM (B0's 3.1 in 2 bands of 14: kernel 1 64.5 -> 54.3 us, B0 -10.8 us; Python asks the
// rows, cuda_kernels/mbconv.py K1_HALO5_BANDS); elsewhere the default kernels. 1: the halo at every static
// U-in-registers entry with k = 5 in today's bands (B0's 3.1, B2's 3.1 / 3.2; measured flat: 64.5 -> 64.4 us, B0 -2.2
// us, B2 +1.3). 0: off.
inline int kernel1_v8_halo5_requested(bool v11) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_HALO5");
  return v != nullptr ? v[0] - '0' : v11 ? 2 : 0;
}
// Static entries also compiled in taller bands with the halo kept (CUDA_KERNELS_K1_HALO5=2): bands that fit two CTAs
// an SM only with HK's smaller X (expand_dw_v8_m_pad_hk). B0's 3.1 in 2 bands of 14 rows instead of 3 of 10: 1,280
// items instead of 1,920 (5 rounds of 264 CTAs instead of 8), 49 depthwise units a band on the 10 thread groups
// (5 rounds, where 35 took 4 and 28 took 3), rows expanded an image 16 + 12 = 28 (as bands of 10 with the halo).
struct V8HaloBands {
  int sh, rows;  // kV8Static entry, output rows per band
};
constexpr V8HaloBands kV8HaloBands[] = {{4, 14}};  // 4: B0's 3.1 (119,992 -> 114,872 bytes: two CTAs an SM)
constexpr int kV8HaloBandsCount = (int)(sizeof(kV8HaloBands) / sizeof(kV8HaloBands[0]));
// CUDA_KERNELS_K1_BIAS_EARLY (read at every call; on unless 0 in version 11 since session 31): the static wgmma
// row-unit kernels (B0's 4.1-6.3, B2's 6.1-7.1) with the expand's biases loaded at the item's start, before its waits
// (expand_dw_v8_kernel_txdhswb; s31 call 1: kernel 1 at 4.1 27.6 -> 27.2 us, 5.1 50.8 -> 49.9, B0 -5.4 us, B2 -10.0).
inline bool kernel1_v8_bias_early_requested(bool v11) {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_BIAS_EARLY");
  return v != nullptr ? v[0] == '1' : v11;
}
// The row unit's width at entry SH (0: none; all its channels real, as whole units need)
template <int SH, int KS>
constexpr int v8_row_unit_cols() {
  constexpr int out = v8_static_out(kV8Static[SH].W, KS, kV8Static[SH].stride);
  return kV8Static[SH].hidden % 48 != 0 ? 0 : out % 7 == 0 ? 7 : out <= 9 ? out : 0;
}
// Where entry sh of kV8Static belongs to route ROUTE at depthwise k KS (and, KPAD > 0, that padded C_in: the
// U-in-registers kernels' k16 steps), err = launch(std::integral_constant<int, sh>) and true; false for any other sh.
// Only the route's entries are instantiated.
template <int ROUTE, int KS, int KPAD = 0, int SH = 1, typename Launch>
bool launch_v8_static(int sh, const Launch& launch, cudaError_t& err) {
  if constexpr (SH < kV8StaticCount) {
    constexpr V8Static e = kV8Static[SH];
    if constexpr (e.route == ROUTE && e.ks == KS && (KPAD == 0 || e.k_pad == KPAD))
      if (sh == SH) {
        err = launch(std::integral_constant<int, SH>{});
        return true;
      }
    return launch_v8_static<ROUTE, KS, KPAD, SH + 1>(sh, launch, err);
  } else {
    return false;
  }
}
inline bool sm90a_build() {  // the extension defines BF_SM90A where it builds for sm_90a (cuda_kernels/_build.py)
#ifdef BF_SM90A
  return true;
#else
  return false;
#endif
}

// The U-in-registers kernel (UR k16 steps; packed-fp16 epilogue, one image an item) and the switches that refine it:
// the divisions as multiplies (FASTDIV) and whole units (WHOLE, where the geometry allows), both on in version 11,
// each combination a kernel of its own name.
template <int KS, int UR, bool HF, int T = 0>
bool launch_v8_halo_bands(const Params& p, cudaStream_t stream, bool pdl, cudaError_t& err) {  // (kV8HaloBands)
  if constexpr (T < kV8HaloBandsCount) {
    constexpr V8HaloBands b = kV8HaloBands[T];
    constexpr V8Static e = kV8Static[b.sh];
    if constexpr (e.route == kV8RouteUrWhole && e.ks == KS && e.k_pad == 16 * UR)
      if (v8_static_matches<KS>(p, e, b.rows)) {
        err = launch_expand_dw_v8<48, KS, 1, 1, HF, false, false, false, true, false, UR, true, true, b.sh, 0, 0, true,
                                  b.rows>(p, stream, pdl);
        return true;
      }
    return launch_v8_halo_bands<KS, UR, HF, T + 1>(p, stream, pdl, err);
  } else {
    return false;
  }
}
template <int KS, int UR, bool HF>
cudaError_t launch_expand_dw_v8_ur(const Params& p, cudaStream_t stream, bool pdl, bool v11) {
  if (!kernel1_v8_fd_requested(p, v11))
    return launch_expand_dw_v8<48, KS, 1, 1, HF, false, false, false, true, false, UR>(p, stream, pdl);
  if (kernel1_v8_all_whole<KS, 1>(p, v11)) {
    cudaError_t err;
    const int halo5 = KS == 5 ? kernel1_v8_halo5_requested(v11) : 0;
    if (halo5 == 2 && kernel1_v8_static_requested(v11) && launch_v8_halo_bands<KS, UR, HF>(p, stream, pdl, err))
      return err;  // (Python asked its rows)
    if (launch_v8_static<kV8RouteUrWhole, KS, 16 * UR>(kernel1_v8_static<KS>(p, v11), [&](auto sh) {
          if constexpr (KS == 5)
            if (halo5 == 1)
              return launch_expand_dw_v8<48, KS, 1, 1, HF, false, false, false, true, false, UR, true, true,
                                         decltype(sh)::value, 0, 0, true>(p, stream, pdl);
          return launch_expand_dw_v8<48, KS, 1, 1, HF, false, false, false, true, false, UR, true, true,
                                     decltype(sh)::value>(p, stream, pdl);
        }, err))
      return err;
    return launch_expand_dw_v8<48, KS, 1, 1, HF, false, false, false, true, false, UR, true, true>(p, stream, pdl);
  }
  return launch_expand_dw_v8<48, KS, 1, 1, HF, false, false, false, true, false, UR, true>(p, stream, pdl);
}

template <int KS, bool HF, bool DH = false>
cudaError_t launch_expand_dw_v8_hf(const Params& p, cudaStream_t stream, bool pdl, bool v10, bool v11) {
  if constexpr (HF && !DH)
    if (kernel1_v8_dh_requested(v11)) return launch_expand_dw_v8_hf<KS, true, true>(p, stream, pdl, v10, v11);
  if (p.stride == 2) {
    if constexpr (HF)
      if (kernel1_v8_bc_requested()) {
        if constexpr (DH && KS == 5)  // (k = 3: 2.0's and 4.0's bands would not grow; it spilled 8 bytes there)
          if (kernel1_v8_tg_requested(v11)) {
            cudaError_t err;
            if (!kernel1_v8_all_whole<KS, 2>(p, v11)) {
              if (launch_v8_static<kV8RouteBc, KS>(kernel1_v8_static_rest<KS>(p, v11), [&](auto sh) {  // B0's 6.0
                    return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, true, DH, true, 0, false, false,
                                               decltype(sh)::value>(p, stream, pdl);
                  }, err))
                return err;
              return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, true, DH, true>(p, stream, pdl);
            }
            if (launch_v8_static<kV8RouteBcWhole, KS>(kernel1_v8_static<KS>(p, v11), [&](auto sh) {  // B0's 3.0
                  return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, true, DH, true, 0, false, true,
                                             decltype(sh)::value>(p, stream, pdl);
                }, err))
              return err;
            return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, true, DH, true, 0, false, true>(p, stream, pdl);
          }
        if constexpr (DH && KS == 3) {
          cudaError_t err;
          if (kernel1_v8_all_whole<KS, 2>(p, v11)) {
            if (launch_v8_static<kV8RouteBcWhole, KS>(kernel1_v8_static<KS>(p, v11), [&](auto sh) {  // B0's 2.0
                  return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, true, DH, false, 0, false, true,
                                             decltype(sh)::value>(p, stream, pdl);
                }, err))
              return err;
            return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, true, DH, false, 0, false, true>(p, stream, pdl);
          }
          if (launch_v8_static<kV8RouteBc, KS>(kernel1_v8_static_rest<KS>(p, v11), [&](auto sh) {  // B0's 4.0
                return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, true, DH, false, 0, false, false,
                                           decltype(sh)::value>(p, stream, pdl);
              }, err))
            return err;
        }
        return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, true, DH>(p, stream, pdl);
      }
    return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, false, DH>(p, stream, pdl);
  }
  const int g = kernel1_v8_images(kernel1_v8_images_requested(v10), p.row_blocks, p.H, p.W, p.Wo, p.rows_per_tile,
                                  KS, 1, p.C_in, p.k_pad, 48);
  if constexpr (HF) {
    const bool tx = kernel1_v8_tx_requested(), wg = tx && kernel1_v8_wg_requested() && sm90a_build();
    const bool aligned = reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
    const auto tx_fits = [&](bool with_wg) {
      return kernel1_v8_tx(true, p.H, p.W, p.Wo, p.rows_per_tile, KS, 1, p.C_in, p.k_pad, 48, g, with_wg, DH);
    };
    if (wg && aligned && tx_fits(true)) {
      if constexpr (DH) {  // B0's 4.1-6.3 (one image an item at 4.1-5.2, two at 6.1-6.3)
        const int sh = kernel1_v8_static_rest<KS>(p, v11);
        cudaError_t err;
        const bool row_units = kernel1_v8_row_units_requested(v11), bias_early = kernel1_v8_bias_early_requested(v11);
        const auto launch_static = [&](auto e, auto images) {  // entry e's static kernel, items of `images` images
          constexpr int SH = decltype(e)::value, G = decltype(images)::value, UC = v8_row_unit_cols<SH, KS>();
          if constexpr (UC > 0)
            if (row_units) {
              if (bias_early)
                return launch_expand_dw_v8<48, KS, 1, G, HF, true, true, false, DH, false, 0, false, false, SH, UC, 1,
                                           false, 0, true>(p, stream, pdl);
              return launch_expand_dw_v8<48, KS, 1, G, HF, true, true, false, DH, false, 0, false, false, SH, UC, 1>(
                  p, stream, pdl);
            }
          return launch_expand_dw_v8<48, KS, 1, G, HF, true, true, false, DH, false, 0, false, false, SH>(p, stream,
                                                                                                          pdl);
        };
        if (g == 1 && launch_v8_static<kV8RouteTx1, KS>(sh, [&](auto e) {
              return launch_static(e, std::integral_constant<int, 1>{});
            }, err))
          return err;
        if (g == 2 && launch_v8_static<kV8RouteTx2, KS>(sh, [&](auto e) {
              return launch_static(e, std::integral_constant<int, 2>{});
            }, err))
          return err;
      }
      return g == 2 ? launch_expand_dw_v8<48, KS, 1, 2, HF, true, true, false, DH>(p, stream, pdl)
                    : launch_expand_dw_v8<48, KS, 1, 1, HF, true, true, false, DH>(p, stream, pdl);
    }
    if (tx && aligned && tx_fits(false))
      return g == 2 ? launch_expand_dw_v8<48, KS, 1, 2, HF, true, false, false, DH>(p, stream, pdl)
                    : launch_expand_dw_v8<48, KS, 1, 1, HF, true, false, false, DH>(p, stream, pdl);
  }
  if (g == 2) return launch_expand_dw_v8<48, KS, 1, 2, HF, false, false, false, DH>(p, stream, pdl);
  if constexpr (DH && KS == 3)
    if (p.k_pad == 32 && kernel1_v8_ur_requested(v11)) return launch_expand_dw_v8_ur<KS, 2, HF>(p, stream, pdl, v11);
  if constexpr (DH && KS == 5)
    if (p.k_pad == 48 && kernel1_v8_ur_requested(v11)) return launch_expand_dw_v8_ur<KS, 3, HF>(p, stream, pdl, v11);
  return launch_expand_dw_v8<48, KS, 1, 1, HF, false, false, false, DH>(p, stream, pdl);
}

template <int KS>
cudaError_t launch_expand_dw_v8_ks(const Params& p, int chunk, cudaStream_t stream, bool pdl, bool v10, bool v11) {
  if (p.w_exp == nullptr || chunk != 48)
    return KS == 3 ? launch_expand_dw_v3_k3(p, chunk, stream, pdl, kernel1_v3_hfma2_requested(v11))
                   : launch_expand_dw_v3_k5(p, chunk, stream, pdl, kernel1_v3_hfma2_requested(v11));
  return kernel1_v8_hfma2_requested(v10) ? launch_expand_dw_v8_hf<KS, true>(p, stream, pdl, v10, v11)
                                         : launch_expand_dw_v8_hf<KS, false>(p, stream, pdl, v10, v11);
}

}  // namespace mb
