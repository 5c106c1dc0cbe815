// Kernel 1 of the MBConv block, version 2 (see mbconv.cuh for the block and NOTES.md for the
// numbers). Same work as version 1 (mbconv_expand_dw.cuh); what changes is the depthwise, which
// version 1 ran at a few instructions per FMA:
//   - E is kept in shared memory as a zero-bordered tile (the convolution's padding is stored,
//     not tested per tap), e_rows x WE pixels for the band, so the tap loop has no branches;
//   - each thread computes OW neighbouring outputs of a row for its channel pair, loading each
//     input row segment once into registers ((OW - 1) s + k values for OW k taps);
//   - SiLU with a fast division (__fdividef: exact enough for an fp16 result, and 0 for
//     very negative inputs where 1 + exp(-x) overflows).
#pragma once
#include <type_traits>

#include "mbconv.cuh"
#include "pdl.h"
#include "ptx.cuh"

namespace mb {

__device__ __forceinline__ float silu_fast(float v) { return __fdividef(v, 1.f + __expf(-v)); }

// Version 3: SiLU(v) = v sigmoid(v) = h + h tanh(h), h = v / 2: one MUFU.TANH instead of
// MUFU.EX2 + MUFU.RCP (the SFU issues a quarter as fast as the FMA pipe). tanh.approx's error
// (about 2^-11 relative) is near fp16's half ulp, and D and E are stored as fp16.
__device__ __forceinline__ float silu_tanh(float v) {
  const float h = 0.5f * v;
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  return fmaf(h, t, h);
}

// SiLU(2h) = h + h tanh(h): version 3 carries h = v / 2 (taps and biases pre-halved, exact in
// fp32), saving the multiply.
__device__ __forceinline__ float silu_of_half(float h) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  return fmaf(h, t, h);
}

// The same in packed fp16 (kernel 1's D epilogue under CUDA_KERNELS_K1_DH2, mbconv_v8.cuh): h + h tanh(h) for both
// halves, tanh.approx.f16x2 (two MUFU.TANH.F16 on sm_90) and one HFMA2, rounded once to fp16 as D is stored.
__device__ __forceinline__ __half2 silu_of_half_h2(__half2 h) {
  uint32_t t;
  asm("tanh.approx.f16x2 %0, %1;" : "=r"(t) : "r"(*reinterpret_cast<const uint32_t*>(&h)));
  return __hfma2(h, *reinterpret_cast<const __half2*>(&t), h);
}

// q / d for 0 <= q, 0 < d, q + d < 2^22: (q + 1/2) / d lies at least 1 / (2d) from an integer,
// farther than the float product's error ((q / d + 1) 2^-23); inv_d = 1.f / d.
__device__ __forceinline__ int div_small(int q, float inv_d) { return __float2int_rz((q + 0.5f) * inv_d); }

template <bool V3>
__device__ __forceinline__ float silu_v(float v) {
  if constexpr (V3) return silu_tanh(v);
  else return silu_fast(v);
}

template <int S>
struct DwTile {
  static constexpr int OW = S == 1 ? 4 : 2;  // outputs per thread along a row
};

// One k16 step of the expand GEMM over a 16-pixel m-tile (kernel 1 versions 2, 3, 5, 7 and 8): A = X rows m0 ..
// m0 + 15 (pitch ldx halves) at column k0, B = the HC rows of U (pitch ldu) at k0, accumulated into acc; (a_row, a_k)
// and (b_row, b_k) are the lane's ldmatrix row and column offsets. expand_k16_at: the same step with the lane's A
// row address given (version 8's swizzled X, mbconv_v8.cuh expand_k16_tx).
// c (non-null): the step starts from C = c's per-column values instead of acc (mbconv_v8.cuh, the bias in the MMA).
template <int HC>
__device__ __forceinline__ void expand_k16_at(float (&acc)[HC / 8][4], uint32_t a_addr, const __half* Us, int ldu,
                                              int k0, int b_row, int b_k, const float (*c)[2] = nullptr) {
  uint32_t a[4];
  bf::ldmatrix_x4(a, a_addr);
#pragma unroll
  for (int np = 0; np < HC / 16; ++np) {
    uint32_t b[4];
    bf::ldmatrix_x4(b, bf::smem_addr(Us + (np * 16 + b_row) * ldu + k0 + b_k));
    if (c != nullptr) {
      bf::mma_m16n8k16_c(acc[2 * np], a, b[0], b[1], c[2 * np][0], c[2 * np][1]);
      bf::mma_m16n8k16_c(acc[2 * np + 1], a, b[2], b[3], c[2 * np + 1][0], c[2 * np + 1][1]);
    } else {
      bf::mma_m16n8k16(acc[2 * np], a, b[0], b[1]);
      bf::mma_m16n8k16(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}
template <int HC>
__device__ __forceinline__ void expand_k16(float (&acc)[HC / 8][4], const __half* Xs, int ldx, const __half* Us, int ldu,
                                           int m0, int k0, int a_row, int a_k, int b_row, int b_k,
                                           const float (*c)[2] = nullptr) {
  expand_k16_at<HC>(acc, bf::smem_addr(Xs + (m0 + a_row) * ldx + k0 + a_k), Us, ldu, k0, b_row, b_k, c);
}

// Shared memory of version 2's kernel 1: X band [m_pad x (k_pad + 8)] and U chunk (expand only),
// E tile [e_rows x WE x (HC + 8)], channel sums [HC]. cuda_kernels/mbconv.py mirrors it.
__host__ __device__ inline int expand_dw_v2_smem_bytes(int H, int W, int Wo, int rows, int ks, int stride, int k_pad,
                                                      int chunk, bool expand) {
  const int ow = stride == 1 ? 4 : 2;
  const int e_rows = (rows - 1) * stride + ks;
  const int we = (round_up(Wo, ow) - 1) * stride + ks;
  const int m_pad = round_up((e_rows < H ? e_rows : H) * W, 16);
  return (expand ? (m_pad + chunk) * (k_pad + 8) * 2 : 0) + e_rows * we * (chunk + 8) * 2 + chunk * 4;
}

// Version 5: the depthwise on tensor cores (NOTES.md, "MBConv version 5"). Over 8 channels a k x k
// depthwise is a sum over taps of (16 output pixels x 8 channels of E, shifted by the tap) times
// diag(w_tap), so one mma.m16n8k16 takes two taps: A = the two shifted windows of the fp16 E tile
// (one ldmatrix.x4: lanes 0-15 give the rows of tap 2j, lanes 16-31 those of tap 2j + 1), B =
// [diag(w_2j); diag(w_2j+1)] in fp16, accumulators (fp32) initialised with the bias. Taps and
// bias are halved, so the accumulators hold h = v / 2 (silu_of_half), as in version 3. The band's
// (group of 8 GW channels, 16-pixel tile) pairs, group-major, with the band's output pixels flattened
// row-major into tiles, are cut into 8 contiguous runs, one per warp: a warp builds B (KS * KS
// loads) once per group it meets, at most GRP / 8 + 2 times. The band's last tile may be partial
// (its missing rows read pixels of the band's last row and store nothing). Pool: the fp32 SiLU summed per lane, then
// over the 8 lanes of a column pair (three shuffles), one shared atomic per channel and group run.
template <int KS, int HC>
struct DwTc {
  static constexpr int NTAP = KS * KS, NPAIR = (NTAP + 1) / 2;
  // 8-channel groups per work item: k = 3 takes two, sharing the pixel addressing and loop
  // (2 x 10 B registers); k = 5 one (26 B registers each).
  static constexpr int GW = KS == 3 && HC % 16 == 0 ? 2 : 1;
};

template <int HC, int KS, int S>
__device__ __forceinline__ void depthwise_tc(const Params& p, const __half* Es, float* red, int WE, int oh0, int rows,
                                             int n, int c0) {
  using T = DwTc<KS, HC>;
  constexpr int LDE = HC + 8, NTAP = T::NTAP, NPAIR = T::NPAIR, GW = T::GW, GRP = HC / (8 * GW);
  constexpr int WARPS = kExpandThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3, hi = lane >> 4;
  const int npo = rows * p.Wo;  // output pixels of the band
  const int ntiles = (npo + 15) >> 4, total = GRP * ntiles, per_warp = (total + WARPS - 1) / WARPS;
  const float inv_wo = 1.f / p.Wo;
  const int dq = 16 / p.Wo, dr = 16 - dq * p.Wo;
  int toff[NPAIR];  // byte offset in E of this lane's tap of pair j (the 26th of k = 5 repeats the 25th; its B is 0)
#pragma unroll
  for (int j = 0; j < NPAIR; ++j) {
    const int t = min(2 * j + hi, NTAP - 1);
    toff[j] = ((t / KS) * WE + t % KS) * LDE * 2;
  }
  const uint32_t es = bf::smem_addr(Es);
  const size_t d_pix0 = ((size_t)n * p.Ho + oh0) * p.Wo;  // D pixel of the band's first output
  const size_t d_row8 = (size_t)8 * p.hidden;            // 8 pixels of D
  const bool diag = (g >> 1) == q;  // lane (g, q) holds B rows 2q, 2q + 1 of column g: the diagonal when g / 2 == q
  const int i0 = warp * per_warp, i1 = min(i0 + per_warp, total);
  int grp = i0 / ntiles, tile = i0 - grp * ntiles;
  for (int i = i0; i < i1; ++grp, tile = 0) {
    const int ch = c0 + grp * 8 * GW, tiles = min(i1 - i, ntiles - tile);  // this group's tiles in the run
    i += tiles;
    uint32_t b[GW][NPAIR][2];
    float bias[GW][2];
#pragma unroll
    for (int gi = 0; gi < GW; ++gi) {
      float w[2 * NPAIR];  // w(t, ch + 8 gi + g) / 2 on the diagonal lanes, 0 elsewhere and for t = KS * KS
      const float* wp = p.w_dw + ch + gi * 8 + g;
#pragma unroll
      for (int t = 0; t < 2 * NPAIR; ++t) {
        w[t] = t < NTAP ? __ldg(wp) : 0.f;
        if (t < NTAP) wp += p.hid_pad;
      }
#pragma unroll
      for (int j = 0; j < NPAIR; ++j)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const __half wh = __float2half_rn(diag ? 0.5f * w[2 * j + u] : 0.f), zero = __float2half_rn(0.f);
          const __half2 v = (g & 1) ? __halves2half2(zero, wh) : __halves2half2(wh, zero);
          b[gi][j][u] = *reinterpret_cast<const uint32_t*>(&v);
        }
#pragma unroll
      for (int u = 0; u < 2; ++u) bias[gi][u] = 0.5f * __ldg(p.b_dw + ch + gi * 8 + 2 * q + u);
    }
    __half* dst = p.d + (d_pix0 + tile * 16 + g) * p.hidden + ch + 2 * q;  // row g of the first tile
    // This lane's ldmatrix row is output pixel t * 16 + (lane & 15) of the band, at (r, c); it
    // advances by 16 = dq rows + dr columns per tile. Rows past the band (the last tile's missing
    // pixels) read the band's last row and store nothing.
    int r = div_small(tile * 16 + (lane & 15), inv_wo), c = tile * 16 + (lane & 15) - r * p.Wo;
    float sum[GW][2] = {};
#pragma unroll 2
    for (int t = tile; t < tile + tiles; ++t, dst += 2 * d_row8) {
      const uint32_t a_addr = es + ((min(r, rows - 1) * S * WE + c * S) * LDE + grp * 8 * GW) * 2;
      r += dq;
      c += dr;
      if (c >= p.Wo) {
        c -= p.Wo;
        ++r;
      }
      float acc[GW][4];
#pragma unroll
      for (int gi = 0; gi < GW; ++gi) {
        acc[gi][0] = acc[gi][2] = bias[gi][0];
        acc[gi][1] = acc[gi][3] = bias[gi][1];
      }
#pragma unroll
      for (int j = 0; j < NPAIR; ++j)
#pragma unroll
        for (int gi = 0; gi < GW; ++gi) {
          uint32_t a[4];
          bf::ldmatrix_x4(a, a_addr + toff[j] + gi * 16);
          bf::mma_m16n8k16(acc[gi], a, b[gi][j][0], b[gi][j][1]);
        }
      const int left = npo - t * 16;  // valid pixels of this tile (>= 16 but in the band's last)
      auto epilogue = [&](auto full) {  // full: every row of the tile is a pixel of the band
#pragma unroll
        for (int gi = 0; gi < GW; ++gi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // accumulator rows g and g + 8: pixels t * 16 + g (+ 8)
            const bool ok = decltype(full)::value || g + 8 * h < left;
            const float s0 = silu_of_half(acc[gi][2 * h]), s1 = silu_of_half(acc[gi][2 * h + 1]);
            sum[gi][0] += ok ? s0 : 0.f;
            sum[gi][1] += ok ? s1 : 0.f;
            if (ok && ch + gi * 8 < p.hidden)
              *reinterpret_cast<__half2*>(dst + h * d_row8 + gi * 8) = __floats2half2_rn(s0, s1);
          }
      };
      if (left >= 16)
        epilogue(std::true_type{});
      else
        epilogue(std::false_type{});
    }
#pragma unroll
    for (int gi = 0; gi < GW; ++gi)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) sum[gi][u] += __shfl_xor_sync(0xffffffffu, sum[gi][u], o);
        if (lane < 4) atomicAdd(red + grp * 8 * GW + gi * 8 + 2 * q + u, sum[gi][u]);
      }
  }
}

// Version 7 (NOTES.md, "MBConv version 7"): the squeeze-excitation of image n in kernel 1's last CTA of that
// image, so that no SE kernel runs between kernel 1 and the projection. Every CTA has stored its partial sums;
// it fences them, thread 0 counts the CTA in se_count_v7[n], and the CTA that counts last (all chunks and bands
// of the image done) resets the counter to 0 for the next launch and computes se_v3_kernel's arithmetic with
// this CTA's 256 threads (same per-lane partition of FC1's sums and the same rotated FC2 rows, so the scale
// equals version 3's for the same partial sums), reusing the kernel's dynamic shared memory: pooled [hid_pad],
// squeezed [sq rounded to 4], then 32 rows of W2 per FC2 warp (as many warps as fit, 1 to 8; the launcher
// sizes the shared memory for at least one).
// The counters: a device array per translation unit (one for k = 3, one for k = 5), zero when the module loads
// and left zero by every launch, so no memset runs per call (and Params, shared by every version, is unchanged).
// Launches on one device are assumed ordered (one stream, or a CUDA graph replayed in one stream): two streams
// running version-7 MBConvs with the same kernel size at once would share them.
// A variable template: only the translation units that instantiate the SE kernels hold one.
template <int KS>
__device__ int se_count_v7[kSECountMax];

template <int KS>
__device__ __forceinline__ void se_in_last_cta(const Params& p, int n, uint8_t* smem) {
  constexpr int WARPS = kExpandThreads / 32;
  int* flag = reinterpret_cast<int*>(smem);  // the pool's sums (red) were read by the partial stores above
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  __threadfence();  // this CTA's partial sums, before its count
  __syncthreads();
  if (tid == 0) {
    const int total = (int)(gridDim.x * gridDim.y);  // chunks x bands of one image
    const int before = atomicAdd(se_count_v7<KS> + n, 1);
    *flag = before == total - 1;
    if (*flag) se_count_v7<KS>[n] = 0;  // every CTA of the image has counted
  }
  __syncthreads();
  if (!*flag) return;
  __syncthreads();  // every thread has read the flag before pooled overwrites it
  __threadfence();  // the other CTAs' partial sums, read below from L2 (ld.global.cg)
  float* pooled = reinterpret_cast<float*>(smem);
  float* squeezed = pooled + p.hid_pad;
  float* stage = squeezed + round_up(p.sq, 4);
  const float inv = 1.f / float(p.Ho * p.Wo);
  for (int c = tid; c < p.hidden; c += kExpandThreads) {
    float s = 0.f;
    for (int b = 0; b < p.row_blocks; ++b) s += __ldcg(p.partial + ((size_t)n * p.row_blocks + b) * p.hid_pad + c);
    pooled[c] = s * inv;
  }
  __syncthreads();
  const int h4 = p.hidden / 4;
  const float4* pooled4 = reinterpret_cast<const float4*>(pooled);
  for (int jb = 0; jb < p.sq; jb += 4 * WARPS) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int c0 = lane; c0 < h4; c0 += 64) {
      float4 w[2][4];
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int j = jb + warp + u * WARPS, c = c0 + t * 32;
          w[t][u] = j < p.sq && c < h4 ? __ldg(reinterpret_cast<const float4*>(p.w_se1 + (size_t)j * p.hidden) + c)
                                       : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const float4 x = c0 + t * 32 < h4 ? pooled4[c0 + t * 32] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int u = 0; u < 4; ++u)
          acc[u] = fmaf(w[t][u].x, x.x, fmaf(w[t][u].y, x.y, fmaf(w[t][u].z, x.z, fmaf(w[t][u].w, x.w, acc[u]))));
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      float s = acc[u];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      const int j = jb + warp + u * WARPS;
      if (lane == 0 && j < p.sq) {
        const float v = s + p.b_se1[j];
        squeezed[j] = v / (1.f + expf(-v));
      }
    }
  }
  __syncthreads();
  uint32_t smem_bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem_bytes));
  const int base = (p.hid_pad + round_up(p.sq, 4)) * 4, per_warp = 32 * p.sq * 4;
  const int fc2_warps = max(1, min(WARPS, ((int)smem_bytes - base) / per_warp));
  if (warp >= fc2_warps) return;
  float* ws = stage + warp * 32 * p.sq;
  float4* ws4 = reinterpret_cast<float4*>(ws);
  for (int c0 = warp * 32; c0 < p.hidden; c0 += fc2_warps * 32) {
    const int rows = min(32, p.hidden - c0), n4 = rows * p.sq / 4;  // hidden % 8 == 0: rows * sq % 4 == 0
    const float4* src = reinterpret_cast<const float4*>(p.w_se2 + (size_t)c0 * p.sq);
    for (int i0 = lane; i0 < n4; i0 += 8 * 32) {
      float4 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = i0 + u * 32 < n4 ? __ldg(src + i0 + u * 32) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (i0 + u * 32 < n4) ws4[i0 + u * 32] = v[u];
    }
    __syncwarp();
    if (lane < rows) {
      const int c = c0 + lane;
      const float* wr = ws + lane * p.sq;
      float s = p.b_se2[c];
      int j = lane % p.sq;
      for (int t = 0; t < p.sq; ++t) {
        s = fmaf(wr[j], squeezed[j], s);
        if (++j == p.sq) j = 0;
      }
      p.scale[(size_t)n * p.hid_pad + c] = 1.f / (1.f + expf(-s));
    }
    __syncwarp();  // the next rows overwrite ws
  }
}

// Shared memory version 7's SE needs (se_in_last_cta: pooled, squeezed, one FC2 warp's 32 rows of W2).
__host__ __device__ inline int se_in_kernel1_min_smem(int hid_pad, int sq) { return (hid_pad + round_up(sq, 4) + 32 * sq) * 4; }

// V3 (version 3 of kernel 1; V3 = false is version 2 unchanged): SiLU through tanh, the zero
// border written by walking only the border (not every tile position with two divisions), and
// the depthwise work items stepped without a division per item.
// V3 with k = 5: at most 80 registers (three CTAs per SM; ptxas: 4 bytes of spill outside the
// depthwise loop in the expand variants), where version 2 takes 92-100 and fits two.
// TC (version 5; needs V3): the depthwise on tensor cores (depthwise_tc), two CTAs per SM.
// SE (version 7; needs V3, not TC): the image's last CTA computes its SE (se_in_last_cta).
// HF (needs V3, not TC; CUDA_KERNELS_K1_V3_HFMA2 in versions 9 and 10): the depthwise in packed fp16 as version 8's
// HF (mbconv_v8.cuh): the taps' sum in fp16 from zero, one HFMA2 per tap for a channel pair, the bias added in fp32.
template <int HC, int KS, int S, bool EXPAND, bool V3 = false, bool TC = false, bool SE = false, bool HF = false>
__global__ void __launch_bounds__(kExpandThreads, TC ? 2 : (V3 && KS == 5) ? 3 : 0) expand_dw_v2_kernel(const Params p) {
  static_assert(!TC || V3, "version 5 is version 3 with the depthwise on tensor cores");
  static_assert(!HF || (V3 && !TC), "HF is version 3's kernel 1 with the depthwise in HFMA2");
  static_assert(!SE || (V3 && !TC), "version 7 is version 3 with the SE in kernel 1");
  using bf::cp_async16;
  using bf::smem_addr;
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int LDE = HC + 8, PAD = KS / 2, OW = DwTile<S>::OW, IN = (OW - 1) * S + KS;
  const int tid = threadIdx.x;
  const int c0 = blockIdx.x * HC, band = blockIdx.y, n = blockIdx.z;
  const int oh0 = band * p.rows_per_tile;
  const int oh1 = min(oh0 + p.rows_per_tile, p.Ho);
  const int r0 = oh0 * S - PAD;                 // input row of the E tile's first row (may be < 0)
  const int e_rows = (oh1 - oh0 - 1) * S + KS;  // rows of the E tile
  const int ngroups = (p.Wo + OW - 1) / OW;
  const int WE = (ngroups * OW - 1) * S + KS;   // E tile width: column c holds input column c - PAD
  const int ih_lo = max(0, r0), ih_hi = min(p.H - 1, r0 + e_rows - 1);
  const int npix = (ih_hi - ih_lo + 1) * p.W;
  const int rows_max = (p.rows_per_tile - 1) * S + KS;
  const int m_pad = round_up(min(rows_max, p.H) * p.W, 16);
  const int ldx = p.k_pad + 8;
  __half* Xs = reinterpret_cast<__half*>(smem);
  __half* Us = Xs + (EXPAND ? m_pad * ldx : 0);
  __half* Es = Us + (EXPAND ? HC * ldx : 0);
  float* red = reinterpret_cast<float*>(Es + rows_max * WE * LDE);
  for (int i = tid; i < HC; i += kExpandThreads) red[i] = 0.f;

  // The zero border of E: every tile position outside the image (written by no one else).
  constexpr int ECH = HC / 8;
  if constexpr (V3) {
    // Tile rows er < in_lo and er > in_hi lie outside the image (whole rows); rows in between
    // have WE - W border columns: ec < PAD on the left, ec >= PAD + W on the right.
    const int in_lo = max(0, r0) - r0, in_hi = min(p.H - 1, r0 + e_rows - 1) - r0;
    const int top = in_lo * WE * ECH, bottom0 = (in_hi + 1) * WE * ECH, bottom = e_rows * WE * ECH - bottom0;
    for (int i = tid; i < top + bottom; i += kExpandThreads) {
      const int j = i < top ? i : bottom0 + i - top;
      const int e = j / ECH, c = j - e * ECH;
      *reinterpret_cast<uint4*>(Es + e * LDE + c * 8) = make_uint4(0, 0, 0, 0);
    }
    const int side = WE - p.W, per_row = side * ECH;
    for (int i = tid; i < (in_hi - in_lo + 1) * per_row; i += kExpandThreads) {
      const int r = i / per_row, rest = i - r * per_row;
      const int col = rest / ECH, c = rest - col * ECH;
      const int ec = col < PAD ? col : p.W + col;
      *reinterpret_cast<uint4*>(Es + ((in_lo + r) * WE + ec) * LDE + c * 8) = make_uint4(0, 0, 0, 0);
    }
  } else {
    for (int i = tid; i < e_rows * WE * ECH; i += kExpandThreads) {
      const int e = i / ECH, c = i - e * ECH;
      const int er = e / WE, ec = e - er * WE;
      const int ih = r0 + er, iw = ec - PAD;
      if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W)
        *reinterpret_cast<uint4*>(Es + e * LDE + c * 8) = make_uint4(0, 0, 0, 0);
    }
  }

  // PDL (pdl.h): the shared-memory setup above (E's zero border, the pool's partial sums) went ahead; x,
  // the weights and every global write follow. One CTA per (chunk, band, image): the trigger follows.
  pdl::wait();
  pdl::launch_dependents();
  const __half* xsrc = p.x + ((size_t)n * p.H + ih_lo) * p.W * p.C_in;
  const int e_off = (ih_lo - r0) * WE + PAD;  // E position of the band's first image pixel
  const float inv_w = 1.f / p.W;  // V3: divisions by W and kch as div_small
  if constexpr (EXPAND) {
    const int cch = p.C_in / 8, kch = p.k_pad / 8;
    const float inv_kch = 1.f / kch;
    for (int i = tid; i < npix * kch; i += kExpandThreads) {
      const int q = V3 ? div_small(i, inv_kch) : i / kch, c = i - q * kch;
      const bool valid = c < cch;
      cp_async16(smem_addr(Xs + q * ldx + c * 8), valid ? xsrc + (size_t)q * p.C_in + c * 8 : p.x, valid);
    }
    const __half* usrc = p.w_exp + (size_t)c0 * p.k_pad;
    for (int i = tid; i < HC * kch; i += kExpandThreads) {
      const int r = V3 ? div_small(i, inv_kch) : i / kch, c = i - r * kch;
      cp_async16(smem_addr(Us + r * ldx + c * 8), usrc + (size_t)r * p.k_pad + c * 8, true);
    }
    bf::cp_async_commit();
    bf::cp_async_wait<0>();
    __syncthreads();

    constexpr int NT = HC / 8;
    const int lane = tid & 31, warp = tid >> 5;
    const int a_row = lane & 15, a_k = (lane >> 4) * 8;
    const int b_row = (lane & 7) + ((lane >> 4) << 3), b_k = ((lane >> 3) & 1) * 8;
    const int mtiles = (npix + 15) / 16;
    float hbias[TC ? NT : 1][2];  // version 5: this lane's expand biases, halved, loaded once per CTA
    if constexpr (TC) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int u = 0; u < 2; ++u) hbias[nt][u] = 0.5f * __ldg(p.b_exp + c0 + nt * 8 + (lane & 3) * 2 + u);
    }
    for (int mt = warp; mt < mtiles; mt += kExpandThreads / 32) {
      float acc[NT][4];
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
      for (int k0 = 0; k0 < p.k_pad; k0 += 16) expand_k16<HC>(acc, Xs, ldx, Us, ldx, mt * 16, k0, a_row, a_k, b_row, b_k);
      int epos[2];
      bool ok[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = mt * 16 + (lane >> 2) + h * 8;
        ok[h] = q < npix;
        const int row = V3 ? div_small(q, inv_w) : q / p.W;
        epos[h] = e_off + row * WE + (q - row * p.W);
      }
      if constexpr (TC) {  // the SiLU of every row, then only the store tested: no branches
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const __half2 ev = __floats2half2_rn(silu_of_half(fmaf(acc[nt][2 * h], 0.5f, hbias[nt][0])),
                                                 silu_of_half(fmaf(acc[nt][2 * h + 1], 0.5f, hbias[nt][1])));
            if (ok[h]) *reinterpret_cast<__half2*>(Es + epos[h] * LDE + nt * 8 + (lane & 3) * 2) = ev;
          }
      } else {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int col = nt * 8 + (lane & 3) * 2;
          const float bias0 = __ldg(p.b_exp + c0 + col), bias1 = __ldg(p.b_exp + c0 + col + 1);
#pragma unroll
          for (int h = 0; h < 2; ++h)
            if (ok[h]) {
              __half2 ev;
              if constexpr (V3)  // h = (acc + bias) / 2 in one FFMA
                ev = __floats2half2_rn(silu_of_half(fmaf(acc[nt][2 * h], 0.5f, 0.5f * bias0)),
                                       silu_of_half(fmaf(acc[nt][2 * h + 1], 0.5f, 0.5f * bias1)));
              else
                ev = __floats2half2_rn(silu_v<V3>(acc[nt][2 * h] + bias0), silu_v<V3>(acc[nt][2 * h + 1] + bias1));
              *reinterpret_cast<__half2*>(Es + epos[h] * LDE + col) = ev;
            }
        }
      }
    }
  } else {
    for (int i = tid; i < npix * ECH; i += kExpandThreads) {
      const int q = i / ECH, c = i - q * ECH, ch = c0 + c * 8;
      const int row = V3 ? div_small(q, inv_w) : q / p.W;
      const bool valid = ch < p.C_in;
      cp_async16(smem_addr(Es + (e_off + row * WE + q - row * p.W) * LDE + c * 8),
                 valid ? xsrc + (size_t)q * p.C_in + ch : p.x, valid);
    }
    bf::cp_async_commit();
    bf::cp_async_wait<0>();
  }
  __syncthreads();

  constexpr int PAIRS = HC / 2, GROUPS = kExpandThreads / PAIRS;
  const int pair = tid % PAIRS, group = tid / PAIRS;
  if constexpr (TC) depthwise_tc<HC, KS, S>(p, Es, red, WE, oh0, oh1 - oh0, n, c0);
  else if (group < GROUPS) {
    const int ch = c0 + 2 * pair;
    float w0[HF ? 1 : KS * KS], w1[HF ? 1 : KS * KS];
    __half2 wh[HF ? KS * KS : 1];
#pragma unroll
    for (int t = 0; t < KS * KS; ++t) {
      if constexpr (HF) {  // halved (exact), as half2
        wh[t] = __floats2half2_rn(0.5f * __ldg(p.w_dw + (size_t)t * p.hid_pad + ch),
                                  0.5f * __ldg(p.w_dw + (size_t)t * p.hid_pad + ch + 1));
      } else {
        w0[t] = __ldg(p.w_dw + (size_t)t * p.hid_pad + ch);
        w1[t] = __ldg(p.w_dw + (size_t)t * p.hid_pad + ch + 1);
        if constexpr (V3) {  // the accumulators hold h = v / 2 (silu_of_half)
          w0[t] *= 0.5f;
          w1[t] *= 0.5f;
        }
      }
    }
    const float bias0 = (V3 ? 0.5f : 1.f) * __ldg(p.b_dw + ch), bias1 = (V3 ? 0.5f : 1.f) * __ldg(p.b_dw + ch + 1);
    const bool store = ch < p.hidden;
    float sum0 = 0.f, sum1 = 0.f;
    const int items = (oh1 - oh0) * ngroups;
    // V3: item = orow * ngroups + og, advanced by GROUPS = dq rows + dr groups without dividing
    const int dq = GROUPS / ngroups, dr = GROUPS - dq * ngroups;
    int v3_row = group / ngroups, v3_og = group - v3_row * ngroups;
    for (int it = group; it < items; it += GROUPS) {
      int orow, ow0;
      if constexpr (V3) {
        orow = v3_row;
        ow0 = v3_og * OW;
        v3_row += dq;
        v3_og += dr;
        if (v3_og >= ngroups) {
          v3_og -= ngroups;
          ++v3_row;
        }
      } else {
        orow = it / ngroups;
        ow0 = (it - orow * ngroups) * OW;
      }
      float acc0[OW], acc1[OW];
      __half2 acch[HF ? OW : 1];
#pragma unroll
      for (int o = 0; o < OW; ++o) {
        if constexpr (HF) {
          acch[o] = __float2half2_rn(0.f);
        } else {
          acc0[o] = bias0;
          acc1[o] = bias1;
        }
      }
      const __half* ebase = Es + (orow * S * WE + ow0 * S) * LDE + 2 * pair;
#pragma unroll
      for (int dy = 0; dy < KS; ++dy) {
        const __half* erow = ebase + dy * WE * LDE;
        if constexpr (HF) {
          __half2 eh[IN];
#pragma unroll
          for (int i = 0; i < IN; ++i) eh[i] = *reinterpret_cast<const __half2*>(erow + i * LDE);
#pragma unroll
          for (int o = 0; o < OW; ++o)
#pragma unroll
            for (int dx = 0; dx < KS; ++dx) acch[o] = __hfma2(eh[o * S + dx], wh[dy * KS + dx], acch[o]);
        } else {
          float2 e[IN];
#pragma unroll
          for (int i = 0; i < IN; ++i) e[i] = __half22float2(*reinterpret_cast<const __half2*>(erow + i * LDE));
#pragma unroll
          for (int o = 0; o < OW; ++o)
#pragma unroll
            for (int dx = 0; dx < KS; ++dx) {
              acc0[o] = fmaf(e[o * S + dx].x, w0[dy * KS + dx], acc0[o]);
              acc1[o] = fmaf(e[o * S + dx].y, w1[dy * KS + dx], acc1[o]);
            }
        }
      }
      if constexpr (HF) {  // the fp16 sums widened, the bias added in fp32
#pragma unroll
        for (int o = 0; o < OW; ++o) {
          const float2 f = __half22float2(acch[o]);
          acc0[o] = f.x + bias0;
          acc1[o] = f.y + bias1;
        }
      }
      const int oh = oh0 + orow;
      if constexpr (V3) {
        // All OW outputs inside the row (every group but a row's last when OW does not divide
        // Wo): no per-output test; one pointer stepped by `hidden`. The pool sums the fp32 SiLU.
        __half* dp = p.d + ((size_t)(n * p.Ho + oh) * p.Wo + ow0) * p.hidden + ch;
        const int valid = min(OW, p.Wo - ow0);
#pragma unroll
        for (int o = 0; o < OW; ++o) {
          if (valid < OW && o >= valid) break;
          const float s0 = silu_of_half(acc0[o]), s1 = silu_of_half(acc1[o]);
          if (store) *reinterpret_cast<__half2*>(dp) = __floats2half2_rn(s0, s1);
          dp += p.hidden;
          sum0 += s0;
          sum1 += s1;
        }
        continue;
      }
      __half* drow = p.d + (((size_t)n * p.Ho + oh) * p.Wo) * p.hidden + ch;
#pragma unroll
      for (int o = 0; o < OW; ++o) {
        if (ow0 + o >= p.Wo) break;
        const __half2 dv = __floats2half2_rn(silu_v<V3>(acc0[o]), silu_v<V3>(acc1[o]));
        if (store) *reinterpret_cast<__half2*>(drow + (size_t)(ow0 + o) * p.hidden) = dv;
        const float2 df = __half22float2(dv);
        sum0 += df.x;
        sum1 += df.y;
      }
    }
    atomicAdd(red + 2 * pair, sum0);
    atomicAdd(red + 2 * pair + 1, sum1);
  }
  __syncthreads();
  for (int i = tid; i < HC; i += kExpandThreads)
    p.partial[((size_t)n * p.row_blocks + band) * p.hid_pad + c0 + i] = red[i];
  if constexpr (SE) se_in_last_cta<KS>(p, n, smem);
}

// pdl: programmatic dependent launch (pdl.h; version 3 passes CUDA_KERNELS_PDL, the others false).
template <int HC, int KS, int S, bool EXPAND, bool V3, bool TC = false, bool SE = false, bool HF = false>
cudaError_t launch_expand_dw_v2(const Params& p, cudaStream_t stream, bool pdl = false) {
  constexpr int kMaxDevices = 64;
  static int configured[kMaxDevices] = {};
  int smem = expand_dw_v2_smem_bytes(p.H, p.W, p.Wo, p.rows_per_tile, KS, S, p.k_pad, HC, EXPAND);
  if (SE && smem < se_in_kernel1_min_smem(p.hid_pad, p.sq)) smem = se_in_kernel1_min_smem(p.hid_pad, p.sq);
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (smem > configured[dev]) {
    int optin = 0;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return err;
    if (smem > optin) return cudaErrorInvalidConfiguration;
    err = cudaFuncSetAttribute(expand_dw_v2_kernel<HC, KS, S, EXPAND, V3, TC, SE, HF>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               optin);
    if (err != cudaSuccess) return err;
    configured[dev] = optin;
  }
  const dim3 grid(p.hid_pad / HC, p.row_blocks, p.N);
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(expand_dw_v2_kernel<HC, KS, S, EXPAND, V3, TC, SE, HF>, grid, dim3(kExpandThreads), smem, stream, p);
  expand_dw_v2_kernel<HC, KS, S, EXPAND, V3, TC, SE, HF><<<grid, kExpandThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// hf (version 3 only; CUDA_KERNELS_K1_V3_HFMA2): the HF kernels, built for stride 1 (the blocks versions 9 and 10 give
// version 3's kernel 1: no expand conv, or k = 3 at <= 64 pixels); stride 2 runs the fp32 ones.
template <int KS, bool V3 = false, bool TC = false, bool SE = false>
cudaError_t launch_expand_dw_v2_ks(const Params& p, int chunk, cudaStream_t stream, bool pdl = false, bool hf = false) {
  const bool expand = p.w_exp != nullptr;
  if constexpr (V3 && !TC && !SE)
    if (hf && p.stride == 1) switch ((chunk == 48 ? 2 : chunk == 32 ? 0 : 4) + (expand ? 1 : 0)) {
        case 0: return launch_expand_dw_v2<32, KS, 1, false, true, false, false, true>(p, stream, pdl);
        case 1: return launch_expand_dw_v2<32, KS, 1, true, true, false, false, true>(p, stream, pdl);
        case 2: return launch_expand_dw_v2<48, KS, 1, false, true, false, false, true>(p, stream, pdl);
        case 3: return launch_expand_dw_v2<48, KS, 1, true, true, false, false, true>(p, stream, pdl);
        default: return cudaErrorInvalidValue;
      }
  switch ((chunk == 48 ? 4 : chunk == 32 ? 0 : 8) + (p.stride == 2 ? 2 : 0) + (expand ? 1 : 0)) {
    case 0: return launch_expand_dw_v2<32, KS, 1, false, V3, TC, SE>(p, stream, pdl);
    case 1: return launch_expand_dw_v2<32, KS, 1, true, V3, TC, SE>(p, stream, pdl);
    case 2: return launch_expand_dw_v2<32, KS, 2, false, V3, TC, SE>(p, stream, pdl);
    case 3: return launch_expand_dw_v2<32, KS, 2, true, V3, TC, SE>(p, stream, pdl);
    case 4: return launch_expand_dw_v2<48, KS, 1, false, V3, TC, SE>(p, stream, pdl);
    case 5: return launch_expand_dw_v2<48, KS, 1, true, V3, TC, SE>(p, stream, pdl);
    case 6: return launch_expand_dw_v2<48, KS, 2, false, V3, TC, SE>(p, stream, pdl);
    case 7: return launch_expand_dw_v2<48, KS, 2, true, V3, TC, SE>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mb
