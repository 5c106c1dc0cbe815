// Fused ConvFirstNet stem: y = ReLU(conv2(ReLU(conv1(x) + b1)) + b2), conv1 3x3 stride 2 pad 1
// (3 -> C1), conv2 3x3 stride 2 pad 1 (C1 -> C2 = 2 C1), NHWC float16, fp32 accumulation, BN folded
// (cuda_kernels/stem.py; NOTES.md "Fused stem").
//
// One persistent block of 256 threads (8 warps) per SM slot walks output tiles of 8 x 16 pixels:
//   1. The tile's input window (35 rows x 68 columns x 3 channels, zero outside the image) sits
//      in shared memory as fp16 halves (loaded by rows: warp w rows w, w + 8, ...); the next
//      tile's window is loaded into registers while conv2 of this one runs, and stored after it.
//   2. conv1 for the 17 x 33 conv1 pixels conv2 needs (the tile with its halo) on mma.m16n8k16:
//      K = 27 ordered (ky, kx, ci) with each ky row padded to 10, so that every k pair a thread
//      holds is two adjacent halves of one input row (one 32-bit shared load; the input tile's
//      width is even, so the loads are aligned); the pad k = 9, 19, 29 is masked to zero in the
//      A fragment and has zero weight, k 30-31 are zero. Weights as B fragments packed on the
//      host; accumulators start at the bias; fp16 rounding, ReLU, then zero where the conv1 pixel
//      is outside the conv1 image (conv2's zero padding), stored into shared memory. A table built
//      once per block maps each conv1 GEMM row to its window offset, position and smem offset.
//   3. conv2 as an implicit GEMM (M = 128 pixels, N = C2, K = 9 C1) from shared memory: A by
//      ldmatrix from the conv1 tile, B by ldmatrix from the conv2 weights (loaded once per block,
//      rows padded by 16 bytes: conflict-free). Bias + ReLU, fp16, stored to global memory.
//
// conv1 tile layout: each of the 17 rows holds its 17 even columns, then its 16 odd columns
// ("planes"), then 7 unused (rows of 40 pixels), so the stride-2 taps of conv2 read consecutive
// pixels; pixel P's 16-byte channel chunks are XOR-swizzled with P so that ldmatrix's 8 row reads
// of consecutive pixels hit 8 different 16-byte bank groups (c1_off), and with 40-pixel rows the
// swizzle depends on the column only (Cfg::pix).
#include "stem.h"

#include "ptx.cuh"
#include "pdl.h"

namespace stem {
namespace {

using bf::ldmatrix_x4;
using bf::mma_m16n8k16;
using bf::smem_addr;

constexpr int TH2 = kTileRows, TW2 = kTileCols;
constexpr int R1 = 2 * TH2 + 1;           // conv1 rows of a tile: 17
constexpr int PE = TW2 + 1, PO = TW2;     // even / odd conv1 columns: 17 / 16
constexpr int PW = PE + PO;               // conv1 pixels per row: 33
constexpr int NP1 = R1 * PW;              // conv1 pixels per tile: 561 (the conv1 GEMM's rows)
constexpr int PWS = 40;                   // conv1 pixels per row in shared memory: 33 + 7 unused, a
                                          // multiple of 8 so that the chunk swizzle ignores the row
constexpr int MT1 = (NP1 + 15) / 16;      // their m16 tiles: 36
constexpr int RI = 4 * TH2 + 3;           // input rows: 35
constexpr int WI = 4 * TW2 + 4;           // input columns: 67 needed + 1 (the padded k pair's read), even
constexpr int ROWH = WI * 3;              // halves per input row: 204
constexpr int NIN = RI * ROWH;            // halves per input tile: 7140
constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int KCH = (ROWH + 31) / 32;                 // 32-half chunks per window row: 7
constexpr int RPW = (RI + WARPS - 1) / WARPS;         // window rows per warp: 5 (the 5th for warps 0-2)
constexpr int VREGS = (RPW * KCH + 1) / 2;            // two halves per register while in flight: 18
static_assert(WI % 2 == 0, "the 32-bit A loads of conv1 need an even input-tile width");

template <int C1>
struct Cfg {
  static constexpr int C2 = 2 * C1;
  static constexpr int CH = C1 / 8;         // 16-byte chunks per conv1 pixel
  // chunk slots per conv1 pixel in shared memory: C1 = 48's 6 chunks sit in 8 slots (128 bytes, chunk c at slot
  // c ^ (pp % 8): NOTES.md "Fused stem C1 = 48"), so that the XOR swizzle stays a permutation of the slots
  static constexpr int CHS = C1 == 48 ? 8 : CH;
  static constexpr int PB = CHS * 16;       // bytes per conv1 pixel in shared memory (C1 * 2 for C1 = 16 / 32)
  static constexpr int NT1 = C1 / 8;        // conv1 n8 tiles
  static constexpr int K2 = 9 * C1;         // conv2 K
  static constexpr int W2S = K2 + 8;        // conv2 weight row in shared memory (halves): + 16 bytes
  static constexpr int NWARPS = C1 == 48 ? 12 : WARPS;  // C1 = 48 (version 2 only): 12 warps, one block per SM
  static constexpr int NTHREADS = NWARPS * 32;
  static constexpr int WARPS_N = C2 / 32;   // each warp computes 32 output channels
  static constexpr int WARPS_M = NWARPS / WARPS_N;
  static constexpr int MR = TH2 / WARPS_M;  // output rows (m16 tiles) per warp
  static constexpr int KS = C1 / 16;        // k16 steps per tap
  static constexpr int SMEM_W2 = C2 * W2S * 2;
  static constexpr int SMEM_C1 = R1 * PWS * PB;
  static constexpr int SMEM_IN = NIN * 2;
  static constexpr int SMEM_TAB = MT1 * 16 * 8;  // conv1 row table (two words per GEMM row)
  static constexpr int SMEM = SMEM_W2 + SMEM_C1 + SMEM_IN + SMEM_TAB;
  static constexpr int PPL = 8 / CHS;            // conv1 pixels per 128-byte line (c1_off)

  static_assert(C1 == 16 || C1 == 32 || C1 == 48, "kernels for C1 in {16, 32} (version 1), {16, 32, 48} (version 2)");
  static_assert(WARPS_M * WARPS_N == NWARPS && MR * WARPS_M == TH2, "warp layout");
  static_assert(SMEM_W2 % 16 == 0 && SMEM_C1 % 16 == 0, "ldmatrix needs 16-byte aligned regions");
  static_assert(PWS % (PPL * CHS) == 0 && PWS >= PW, "row-independent swizzle");
  static_assert((SMEM_W2 + SMEM_C1 + SMEM_IN) % 8 == 0, "the table's uint2 entries need 8-byte alignment");
  // byte offset of chunk c of conv1 pixel (lr, pp) in shared memory: c1_off(lr * PWS + pp, c)
  static __device__ __forceinline__ uint32_t pix(int lr, int pp, int c) {
    return static_cast<uint32_t>(lr * (PWS * PB) + pp * PB + ((c ^ ((pp / PPL) % CHS)) << 4));
  }
  static_assert(((W2S * 2) / 16) % 2 == 1, "odd number of 16-byte chunks per weight row: conflict-free ldmatrix");
};

// ReLU of two fp32 values rounded to fp16, as a half2 word (lo in the low half).
__device__ __forceinline__ uint32_t relu_half2(float lo, float hi) {
  __half2 h = __hmax2(__floats2half2_rn(lo, hi), __float2half2_rn(0.f));
  return *reinterpret_cast<uint32_t*>(&h);
}

// Round to fp16 and clamp at zero in one instruction (lo in the low half).
__device__ __forceinline__ uint32_t relu_cvt(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.relu.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Byte offset of 16-byte chunk c of conv1 pixel P: 8 / CH pixels per 128-byte line, the chunk
// XOR-ed with the line index, so any 8 consecutive pixels' chunk c fill the 8 bank groups.
template <int CH>
__device__ __forceinline__ uint32_t c1_off(int P, int c) {
  constexpr int PPL = 8 / CH;
  return static_cast<uint32_t>(P * (CH * 16) + ((c ^ ((P / PPL) % CH)) << 4));
}

struct Tile {
  int n, oy0, ox0;
};

__device__ __forceinline__ Tile decode(const Params& p, int tile) {
  const int tx = tile % p.tiles_x;
  const int rest = tile / p.tiles_x;
  const int ty = rest % p.tiles_y;
  return {rest / p.tiles_y, ty * TH2, tx * TW2};
}

// conv2 of tile t as an implicit GEMM from shared memory (A by ldmatrix from the conv1 tile, B from the conv2 weights,
// the accumulators started at the bias), then ReLU and fp16 to global memory: warp (wm, wn)'s rows and 32 channels,
// its lanes' fragment indices lxA, chA (A) and nB, chB (B). ODD: the odd plane's first entry in a conv1 row (v1 PE,
// v2 v2::ODD); CVT: the pair rounded and clamped by relu_cvt (v2), else relu_half2 (v1; the same values).
template <int C1, int ODD, bool CVT>
__device__ __forceinline__ void conv2_tile(const Params& p, const Tile& t, uint32_t s_w2_addr, uint32_t s_c1_addr,
                                           int lxA, int chA, int nB, int chB, int wm, int wn, int g, int t4) {
  using C = Cfg<C1>;
  float acc[C::MR][4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float b0 = __ldg(p.b2 + wn * 32 + j * 8 + 2 * t4), b1 = __ldg(p.b2 + wn * 32 + j * 8 + 2 * t4 + 1);
#pragma unroll
    for (int mi = 0; mi < C::MR; ++mi) {
      acc[mi][j][0] = acc[mi][j][2] = b0;
      acc[mi][j][1] = acc[mi][j][3] = b1;
    }
  }
#pragma unroll
  for (int dy = 0; dy < 3; ++dy) {
#pragma unroll
    for (int dx = 0; dx < 3; ++dx) {
      // conv1 column 2 lx + dx: odd plane entry lx (dx = 1), even plane entry lx + dx / 2
      const int pp = dx == 1 ? ODD + lxA : lxA + (dx >> 1);
#pragma unroll
      for (int kk = 0; kk < C::KS; ++kk) {
        const int kc = ((dy * 3 + dx) * C1 + kk * 16) / 8;
        uint32_t b[4][2];
#pragma unroll
        for (int pr = 0; pr < 2; ++pr) {
          uint32_t r[4];
          ldmatrix_x4(r, s_w2_addr + static_cast<uint32_t>(((nB + pr * 16) * C::W2S + (kc + chB) * 8) * 2));
          b[2 * pr][0] = r[0];
          b[2 * pr][1] = r[1];
          b[2 * pr + 1][0] = r[2];
          b[2 * pr + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < C::MR; ++mi) {
          const int lr = 2 * (wm * C::MR + mi) + dy;
          uint32_t a[4];
          ldmatrix_x4(a, s_c1_addr + C::pix(lr, pp, kk * 2 + chA));  // lr: an immediate offset
#pragma unroll
          for (int j = 0; j < 4; ++j) mma_m16n8k16(acc[mi][j], a, b[j][0], b[j][1]);
        }
      }
    }
  }
#pragma unroll
  for (int mi = 0; mi < C::MR; ++mi) {
    const int oy = t.oy0 + wm * C::MR + mi;
    if (oy >= p.Ho) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int ox = t.ox0 + g + 8 * h;
      if (ox >= p.Wo) continue;
      __half* o = p.out + (static_cast<int64_t>(t.n * p.Ho + oy) * p.Wo + ox) * C::C2 + wn * 32 + 2 * t4;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float lo = acc[mi][j][2 * h], hi = acc[mi][j][2 * h + 1];
        *reinterpret_cast<uint32_t*>(o + j * 8) = CVT ? relu_cvt(lo, hi) : relu_half2(lo, hi);
      }
    }
  }
}

// The tile's input window into registers: window element rr * ROWH + e (e = col * 3 + ch) is the
// half (4 oy0 - 3 + rr, 4 ox0 - 3 + col, ch) of the image, zero outside it. Warp w loads window rows
// w + 8 j, its lanes 32 consecutive halves of the row per chunk k (coalesced); whether a chunk's
// column is inside the image is the same for every row, so each element costs a predicated load.
__device__ __forceinline__ void load_input(const Params& p, int tile, uint32_t (&v)[VREGS]) {
  const Tile t = decode(p, tile);
  const int iy0 = 4 * t.oy0 - 3, ix0 = 4 * t.ox0 - 3;
  // the thread index through a volatile move: otherwise the compiler hoists the per-lane column
  // tests' tile-independent parts out of the tile loop and holds them in registers
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  const int warp = tid >> 5, lane = tid & 31;
  const uint16_t* x = reinterpret_cast<const uint16_t*>(p.x);
  bool colok[KCH];
#pragma unroll
  for (int k = 0; k < KCH; ++k) {
    const int e = lane + 32 * k;
    colok[k] = e < ROWH && static_cast<unsigned>(ix0 + e / 3) < static_cast<unsigned>(p.W);
  }
#pragma unroll
  for (int j = 0; j < RPW; ++j) {
    const int rr = warp + WARPS * j, gy = iy0 + rr;
    const bool rowok = rr < RI && static_cast<unsigned>(gy) < static_cast<unsigned>(p.H);
    // offset of the lane's half in chunk 0 (negative outside the image: then never dereferenced)
    const int64_t off = (static_cast<int64_t>(t.n) * p.H + gy) * p.W * 3 + 3 * ix0 + lane;
#pragma unroll
    for (int k = 0; k < KCH; ++k) {
      const int i = j * KCH + k;
      uint32_t val = 0;
      if (rowok && colok[k]) val = __ldg(x + (off + 32 * k));
      if (i % 2 == 0) v[i / 2] = val;
      else v[i / 2] |= val << 16;
    }
  }
}

__device__ __forceinline__ void store_input(uint16_t* s_in, const uint32_t (&v)[VREGS]) {
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
#pragma unroll
  for (int j = 0; j < RPW; ++j) {
    const int rr = warp + WARPS * j;
#pragma unroll
    for (int k = 0; k < KCH; ++k) {
      const int i = j * KCH + k, e = lane + 32 * k;
      if (rr < RI && e < ROWH) s_in[rr * ROWH + e] = static_cast<uint16_t>(v[i / 2] >> (16 * (i % 2)));
    }
  }
}

template <int C1>
__global__ void __launch_bounds__(THREADS, 2) stem_kernel(const Params p) {
  using C = Cfg<C1>;
  extern __shared__ __align__(16) unsigned char smem[];
  uint16_t* s_w2 = reinterpret_cast<uint16_t*>(smem);
  unsigned char* s_c1 = smem + C::SMEM_W2;
  uint16_t* s_in = reinterpret_cast<uint16_t*>(smem + C::SMEM_W2 + C::SMEM_C1);
  uint2* s_tab = reinterpret_cast<uint2*>(smem + C::SMEM_W2 + C::SMEM_C1 + C::SMEM_IN);

  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;

  // conv2 weights into shared memory, once per block (16-byte copies, rows padded by 16 bytes)
  {
    constexpr int CPR = C::K2 / 8;  // 16-byte chunks per row
    const uint4* src = reinterpret_cast<const uint4*>(p.w2);
    for (int i = tid; i < C::C2 * CPR; i += THREADS) {
      const int row = i / CPR, c = i - row * CPR;
      *reinterpret_cast<uint4*>(s_w2 + row * C::W2S + c * 8) = __ldg(src + i);
    }
  }
  // conv1 row table, the same for every tile: for row i of a tile's conv1 GEMM (pixel (lr, pp) =
  // (i / 33, i % 33)), x = the half offset of its input window in s_in (bits 0-15), lr (bits 16-23;
  // 255 for the padding rows i >= NP1, which read pixel NP1 - 1 and are not stored) and the conv1
  // column lc (bits 24-31); y = the pixel's byte offset in s_c1 (bits 0-15) and its chunk swizzle
  // (bits 16-31), so that chunk c of it is at y + ((c ^ swizzle) << 4)
  for (int i = tid; i < MT1 * 16; i += THREADS) {
    const int P = min(i, NP1 - 1);
    const int lr = P / PW, pp = P - lr * PW;
    const int lc = pp < PE ? 2 * pp : 2 * (pp - PE) + 1;
    const uint32_t pixel = static_cast<uint32_t>(lr * (PWS * C1 * 2) + pp * (C1 * 2));  // pix() without the chunk
    s_tab[i] = make_uint2(static_cast<uint32_t>(2 * lr * ROWH + 6 * lc) |
                              (static_cast<uint32_t>(i < NP1 ? lr : 255) << 16) | (static_cast<uint32_t>(lc) << 24),
                          pixel | (static_cast<uint32_t>((pp / C::PPL) % C::CH) << 16));
  }
  static_assert(2 * (R1 - 1) * ROWH + 6 * (2 * PE) < 65536 && R1 < 255, "conv1 table fields");
  static_assert(C::SMEM_C1 <= 65536, "conv1 pixel offsets in 16 bits");
  const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  const uint32_t s_c1_addr = smem_addr(s_c1), s_w2_addr = smem_addr(s_w2);
  // conv2 ldmatrix lanes: A row (output column) and chunk; B row (output channel) and chunk
  const int lxA = (lane & 7) + ((lane >> 3) & 1) * 8, chA = lane >> 4;
  const int nB = wn * 32 + (lane & 7) + ((lane >> 4) << 3), chB = (lane >> 3) & 1;

  int tile = static_cast<int>(blockIdx.x);
  uint32_t v[VREGS];
  // PDL (pdl.h): conv2's weights and the row table (constants) went ahead; the input and out come after.
  // The grid is one wave (at most the resident blocks, each walking its tiles), so every block is already
  // resident: the trigger can follow the wait, as the dependent's blocks only take what exiting blocks free.
  pdl::wait();
  pdl::launch_dependents();
  if (tile < p.num_tiles) {
    load_input(p, tile, v);
    store_input(s_in, v);
  }
  __syncthreads();

  for (; tile < p.num_tiles; tile += static_cast<int>(gridDim.x)) {
    const Tile t = decode(p, tile);
    // ---- conv1 + bias + ReLU into shared memory -------------------------------------------
    {
      const int r1_0 = 2 * t.oy0 - 1, c1_0 = 2 * t.ox0 - 1;  // conv1 coordinates of local (0, 0)
      // conv1 weights (B fragments, packed on the host) and bias: loaded per tile (L1 hits), so that
      // they do not hold registers through conv2
      uint32_t bw[C::NT1][2][2];
      float bias1[C::NT1][2];
#pragma unroll
      for (int nt = 0; nt < C::NT1; ++nt) {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const uint2 w = __ldg(reinterpret_cast<const uint2*>(p.w1) + (nt * 2 + s) * 32 + lane);
          bw[nt][s][0] = w.x;
          bw[nt][s][1] = w.y;
        }
        bias1[nt][0] = __ldg(p.b1 + nt * 8 + 2 * t4);
        bias1[nt][1] = __ldg(p.b1 + nt * 8 + 2 * t4 + 1);
      }
      // this thread's k pairs q = t4 + 4 j (j = 0..3) sit at ky = q / 5, halves 2 (q % 5) and
      // 2 (q % 5) + 1 of the 9 (+1 pad) of that input row; the pad half (q % 5 == 4) and the pair
      // q = 15 (k 30-31, past K) are masked to zero
      int qoff[4];
      uint32_t qmask[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int q = t4 + 4 * j;
        qoff[j] = q == 15 ? 0 : (q / 5) * ROWH + 2 * (q % 5);
        qmask[j] = q == 15 ? 0u : (q % 5 == 4 ? 0x0000ffffu : 0xffffffffu);
      }
      for (int mt = warp; mt < MT1; mt += WARPS) {
        uint32_t a[2][4];
        uint2 row[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          row[h] = s_tab[mt * 16 + g + 8 * h];
          const uint16_t* base = s_in + (row[h].x & 0xffffu);
#pragma unroll
          for (int j = 0; j < 4; ++j)
            a[j >> 1][(j & 1) * 2 + h] = *reinterpret_cast<const uint32_t*>(base + qoff[j]) & qmask[j];
        }
        float acc[C::NT1][4];  // starts at the bias: the epilogue only rounds and clamps
#pragma unroll
        for (int nt = 0; nt < C::NT1; ++nt) {
          acc[nt][0] = acc[nt][2] = bias1[nt][0];
          acc[nt][1] = acc[nt][3] = bias1[nt][1];
          mma_m16n8k16(acc[nt], a[0], bw[nt][0][0], bw[nt][0][1]);
          mma_m16n8k16(acc[nt], a[1], bw[nt][1][0], bw[nt][1][1]);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int lr = static_cast<int>((row[h].x >> 16) & 0xffu), lc = static_cast<int>(row[h].x >> 24);
          if (lr != 255) {
            const bool inside = static_cast<unsigned>(r1_0 + lr) < static_cast<unsigned>(p.H1) &&
                                static_cast<unsigned>(c1_0 + lc) < static_cast<unsigned>(p.W1);
            unsigned char* dst = s_c1 + (row[h].y & 0xffffu) + 4 * t4;
            const int swz = static_cast<int>(row[h].y >> 16);
#pragma unroll
            for (int nt = 0; nt < C::NT1; ++nt) {
              // ReLU after the fp16 rounding (the same value: rounding is monotone), on the pair
              const uint32_t v = relu_half2(acc[nt][2 * h], acc[nt][2 * h + 1]);
              *reinterpret_cast<uint32_t*>(dst + ((nt ^ swz) << 4)) = inside ? v : 0u;
            }
          }
        }
      }
    }
    __syncthreads();

    // the next tile's input window: in flight while conv2 runs
    const int next = tile + static_cast<int>(gridDim.x);
    if (next < p.num_tiles) load_input(p, next, v);

    // ---- conv2 + bias + ReLU to global memory -----------------------------------------------
    conv2_tile<C1, PE, false>(p, t, s_w2_addr, s_c1_addr, lxA, chA, nB, chB, wm, wn, g, t4);
    if (next < p.num_tiles) store_input(s_in, v);  // conv1 of this tile finished reading s_in
    __syncthreads();
  }
}

// ==== v2 (CUDA_KERNELS_STEM_V2=1; NOTES.md "Fused stem v2") =====================================
// C1 = 48 (ConvFirstNet-L 3 -> 48 -> 96; version 2 only; NOTES.md "Fused stem C1 = 48"): 12 warps, one block per
// SM; conv2's warp is C1 = 32's (2 output rows x 32 channels, N = 96 = 3 warp columns x 4 warp rows, K = 432 = 27
// k16 steps); conv1's 36 m-tiles 3 per warp (warps 2 k + plane: rows k, k + 6, k + 12; warps 10, 11 the last
// column); the window rows warp + 12 i. A conv1 pixel's 6 chunks sit in 8 slots of 16 bytes (Cfg::CHS, PB = 128),
// chunk c at slot c ^ (pp % 8). Bank groups (16 bytes each, 8 per 128-byte line; a pixel is one line, a conv1 row
// 40 lines, so only pp matters):
//   - conv2's A ldmatrix: each 8-lane matrix reads chunk c of 8 consecutive plane pixels pp0 + i (i = 0..7): the
//     slots c ^ (pp % 8) are c XOR 8 different values, 8 different groups: conflict-free;
//   - conv1's stores (per n-tile nt and half h): lane (g, t4) writes word t4 of chunk nt of pixel g + 8 h (+ ODD =
//     24 in the odd plane, a multiple of 8): bank 4 (nt ^ g) + t4, 32 different banks: conflict-free; the two
//     last-column m-tiles (pixel 16 of 8 rows, swizzle 0) are 8-way, as at C1 = 16 / 32 (24 of 216 stores);
//   - conv2's B ldmatrix: weight rows of 432 + 8 halves = 55 chunks (odd): 8 consecutive rows, 8 groups.
// The same tiles and conv2; what changes:
//   - the input window by 16-byte cp.async: the window's first byte in an image row is 24 ox0 - 18
//     (ox0 = 16 tx, so 24 ox0 is a multiple of 16); the aligned chunks from 24 ox0 - 32 put window half e at
//     shared half e + SHIFT (7) of its row (26 chunks used, a 512-byte pitch). Needs x 16-byte aligned and
//     W % 8 == 0 (then a chunk is wholly inside or outside an image row); other inputs run v1 (launch_v2).
//   - conv1's K ordered (ky, [pad, kx, ci]): with the odd shift, every k pair is one aligned 32-bit word
//     (the pad, the previous pixel's ci 2, is the low half of pair 0, masked to zero); each block re-packs
//     v1's B fragments into this order once (s_w1), so both versions take the same weights.
//   - conv1's m-tiles follow conv1 rows: m-tile 2 lr + plane holds the 16 pixels of conv1 row lr with
//     columns 2 j + plane (j = 0..15); warp w takes m-tiles w, w + 8, ... (plane w & 1, rows w / 2 + 4 i)
//     and warps 2 and 3 one of the two m-tiles of the last even column (32) of rows 0-15 and 16. No table:
//     a lane's addresses are a per-lane constant plus the row's term.
//   - the odd plane of a conv1 row starts at pixel 24 (not 17), so a regular m-tile pixel's chunk swizzle
//     depends on g only; rows stay 40 pixels.
namespace v2 {
constexpr int NCH = 26;                // 16-byte chunks of a window row that conv1 reads
constexpr int RPB = 32 * 16;           // bytes per window row in shared memory: 512, one chunk per lane (the
                                       // lanes >= NCH write zeros there: no branch around the copies)
constexpr int SHIFT = 7;               // window half e sits at half e + SHIFT of its row
constexpr int SMEM_IN = RI * RPB;      // 17,920
constexpr int ODD = 24;                // first pixel of the odd plane in a conv1 row
static_assert(SHIFT >= 1 && SHIFT + 6 * (2 * TW2) + 8 < NCH * 8, "the window's halves used by conv1 fit a row");
static_assert(ODD >= PE && ODD + PO <= PWS && ODD % 8 == 0, "odd plane position");
}  // namespace v2

// The tile's input window into s_in by 16-byte cp.async (one commit group); zero-filled outside the image.
// Lane c of warp w copies chunk c of window rows w + NW k (NW = 8 warps: k = 0..4; 12 at C1 = 48: k = 0..2; lanes
// c >= 26 zero-fill the row's unused end): the column test once per tile, the row test uniform, the addresses
// stepped by NW rows.
template <int NW>
__device__ __forceinline__ void load_window_v2(const Params& p, const Tile& t, uint32_t s_in_addr, int warp, int lane) {
  const int rowbytes = p.W * 6;
  const int b = 24 * t.ox0 - 32 + 16 * lane;  // byte of this lane's chunk in an image row
  const bool colok = lane < v2::NCH && static_cast<unsigned>(b) < static_cast<unsigned>(rowbytes);
  const int gy0 = 4 * t.oy0 - 3 + warp;
  const unsigned char* src = reinterpret_cast<const unsigned char*>(p.x) +
                             (static_cast<int64_t>(t.n) * p.H + gy0) * rowbytes + b;
  uint32_t dst = s_in_addr + static_cast<uint32_t>(warp * v2::RPB + 16 * lane);
#pragma unroll
  for (int k = 0; k < (RI + NW - 1) / NW; ++k) {
    if (NW * (k + 1) <= RI || warp + NW * k < RI) {  // a test for the last k only
      const bool ok = colok && static_cast<unsigned>(gy0 + NW * k) < static_cast<unsigned>(p.H);
      bf::cp_async16(dst, ok ? static_cast<const void*>(src) : static_cast<const void*>(p.x), ok);
    }
    src += static_cast<int64_t>(NW) * rowbytes;
    dst += NW * v2::RPB;
  }
  bf::cp_async_commit();
}

// One conv1 m-tile: lane rows g (h = 0) and g + 8 (h = 1) read their k pairs at in[h] + qoff[j] (bytes),
// (masked, and k 30 = 1.0: the bias row of B), write chunk nt of their pixel at dst[h] + ((nt ^ swz) << 4)
// when st[h], zero where !ok[h].
template <int NT1>
__device__ __forceinline__ void conv1_mtile(const unsigned char* in0, const unsigned char* in1, const int (&qoff)[4],
                                            const uint32_t (&qmask)[4], const uint32_t (&qor)[4],
                                            const uint32_t (&bw)[NT1][2][2], unsigned char* dst0, unsigned char* dst1,
                                            bool ok0, bool ok1, bool st0, bool st1, int swz) {
  uint32_t a[2][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    a[j >> 1][(j & 1) * 2 + 0] = (*reinterpret_cast<const uint32_t*>(in0 + qoff[j]) & qmask[j]) | qor[j];
    a[j >> 1][(j & 1) * 2 + 1] = (*reinterpret_cast<const uint32_t*>(in1 + qoff[j]) & qmask[j]) | qor[j];
  }
  float acc[NT1][4];
#pragma unroll
  for (int nt = 0; nt < NT1; ++nt) {
    acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;  // the bias comes in through k 30
    mma_m16n8k16(acc[nt], a[0], bw[nt][0][0], bw[nt][0][1]);
    mma_m16n8k16(acc[nt], a[1], bw[nt][1][0], bw[nt][1][1]);
  }
#pragma unroll
  for (int nt = 0; nt < NT1; ++nt) {
    const uint32_t v0 = relu_cvt(acc[nt][0], acc[nt][1]), v1 = relu_cvt(acc[nt][2], acc[nt][3]);
    if (st0) *reinterpret_cast<uint32_t*>(dst0 + ((nt ^ swz) << 4)) = ok0 ? v0 : 0u;
    if (st1) *reinterpret_cast<uint32_t*>(dst1 + ((nt ^ swz) << 4)) = ok1 ? v1 : 0u;
  }
}

// Three blocks per SM at C1 = 16 (80 registers, 50.5 KB shared: 24 warps to hide latency), two at C1 = 32; C1 = 48
// (ConvFirstNet-L; NOTES.md "Fused stem C1 = 48"): one block of 12 warps (384 threads, 192.5 KB shared).
template <int C1>
__global__ void __launch_bounds__(Cfg<C1>::NTHREADS, C1 == 16 ? 3 : (C1 == 48 ? 1 : 2)) stem_kernel_v2(const Params p) {
  using C = Cfg<C1>;
  constexpr int NW = C::NWARPS, NTH = C::NTHREADS;
  constexpr int NW1 = C1 / 8 * 2 * 32 * 2;  // conv1 fragment words
  extern __shared__ __align__(16) unsigned char smem[];
  uint16_t* s_w2 = reinterpret_cast<uint16_t*>(smem);
  unsigned char* s_c1 = smem + C::SMEM_W2;
  unsigned char* s_in = s_c1 + C::SMEM_C1;
  uint32_t* s_w1 = reinterpret_cast<uint32_t*>(s_in + v2::SMEM_IN);
  // the decoded tiles (n, oy0, ox0) of this and the next step, by parity: thread 0 decodes the next tile
  // (two integer divisions) once for the block instead of every thread twice
  int* s_tiles = reinterpret_cast<int*>(s_w1 + NW1);

  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;

  {  // conv2 weights into shared memory, once per block (as v1)
    constexpr int CPR = C::K2 / 8;
    const uint4* src = reinterpret_cast<const uint4*>(p.w2);
    for (int i = tid; i < C::C2 * CPR; i += NTH) {
      const int row = i / CPR, c = i - row * CPR;
      *reinterpret_cast<uint4*>(s_w2 + row * C::W2S + c * 8) = __ldg(src + i);
    }
  }
  {  // conv1's B fragments from v1's K order (ky, kx, ci, pad) to v2's (ky, pad, kx, ci), once per block,
     // with the bias (rounded to fp16, as PyTorch's fp16 conv holds it) as k 30, against A's constant 1.0
    uint32_t* m1 = reinterpret_cast<uint32_t*>(s_c1);  // scratch: [C1][16] k pairs in v1's order
    for (int i = tid; i < NW1; i += NTH) {
      const int nt = i >> 7, s = (i >> 6) & 1, l = (i >> 1) & 31, r = i & 1;
      m1[(nt * 8 + (l >> 2)) * 16 + s * 8 + (l & 3) + 4 * r] = __ldg(p.w1 + i);
    }
    __syncthreads();
    const uint16_t* h1 = reinterpret_cast<const uint16_t*>(m1);
    for (int i = tid; i < NW1; i += NTH) {
      const int nt = i >> 7, s = (i >> 6) & 1, l = (i >> 1) & 31, r = i & 1;
      const int n = nt * 8 + (l >> 2), k = 2 * (s * 8 + (l & 3) + 4 * r);
      uint32_t w = 0;
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int kk = k + u;  // v2's k = 10 ky + i: i = 0 the pad, i = 1 + 3 kx + ci is v1's k - 1
        if (kk < 30 && kk % 10 != 0) w |= static_cast<uint32_t>(h1[n * 32 + kk - 1]) << (16 * u);
        if (kk == 30) w |= static_cast<uint32_t>(__half_as_ushort(__float2half_rn(__ldg(p.b1 + n)))) << (16 * u);
      }
      s_w1[i] = w;
    }
  }
  const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  const uint32_t s_c1_addr = smem_addr(s_c1), s_w2_addr = smem_addr(s_w2), s_in_addr = smem_addr(s_in);
  const int lxA = (lane & 7) + ((lane >> 3) & 1) * 8, chA = lane >> 4;
  const int nB = wn * 32 + (lane & 7) + ((lane >> 4) << 3), chB = (lane >> 3) & 1;

  // this thread's conv1 k pairs q = t4 + 4 j (j = 0..3): ky = q / 5, pair q % 5 of the 10 halves
  // [pad, 9 values] of that row, at window half 6 lc - 1 + 2 (q % 5) = shared half 6 lc + SHIFT - 1 + ...;
  // bytes from the pixel's row-0 start; the pad (q % 5 == 0, low half) masked; q = 15 is (1.0, 0): k 30
  // multiplies the bias row of B
  int qoff[4];
  uint32_t qmask[4], qor[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int q = t4 + 4 * j;
    qoff[j] = q == 15 ? 0 : (q / 5) * v2::RPB + 2 * (v2::SHIFT - 1 + 2 * (q % 5));
    qmask[j] = q == 15 ? 0u : (q % 5 == 0 ? 0xffff0000u : 0xffffffffu);
    qor[j] = q == 15 ? 0x3c00u : 0u;  // fp16 1.0 in the low half
  }
  // regular m-tiles: plane warp & 1, pixel j = g + 8 h: conv1 column 2 j + plane (window half 6 (2 j + plane))
  const int plane = warp & 1;
  const int in_lane = 24 * g + 12 * plane;
  const int swz = (g / C::PPL) % C::CHS;  // C1 = 48: g (pixel g + 8 h + 24 plane: pp % 8 = g)
  const int st_lane = (v2::ODD * plane + g) * C::PB + 4 * t4;
  constexpr int ROWB1 = PWS * C::PB;  // bytes per conv1 row in shared memory

  int tile = static_cast<int>(blockIdx.x);
  pdl::wait();
  pdl::launch_dependents();
  if (tile < p.num_tiles) {
    const Tile t0 = decode(p, tile);
    load_window_v2<NW>(p, t0, s_in_addr, warp, lane);
    if (tid == 0) {
      s_tiles[0] = t0.n;
      s_tiles[1] = t0.oy0;
      s_tiles[2] = t0.ox0;
    }
  }
  bf::cp_async_wait<0>();
  __syncthreads();

  for (int it = 0; tile < p.num_tiles; tile += static_cast<int>(gridDim.x), it ^= 1) {
    const Tile t{s_tiles[4 * it], s_tiles[4 * it + 1], s_tiles[4 * it + 2]};
    const int next = tile + static_cast<int>(gridDim.x);
    if (tid == 0 && next < p.num_tiles) {  // read after the barrier below; slot it ^ 1 was last read before
      const Tile tn = decode(p, next);     // the previous step's final barrier
      s_tiles[4 * (it ^ 1)] = tn.n;
      s_tiles[4 * (it ^ 1) + 1] = tn.oy0;
      s_tiles[4 * (it ^ 1) + 2] = tn.ox0;
    }
    {  // ---- conv1 + bias + ReLU into shared memory ----
      const int r1_0 = 2 * t.oy0 - 1, c1_0 = 2 * t.ox0 - 1;
      uint32_t bw[C::NT1][2][2];
#pragma unroll
      for (int nt = 0; nt < C::NT1; ++nt) {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const uint2 w = reinterpret_cast<const uint2*>(s_w1)[(nt * 2 + s) * 32 + lane];
          bw[nt][s][0] = w.x;
          bw[nt][s][1] = w.y;
        }
      }
      const bool col0 = static_cast<unsigned>(c1_0 + 2 * g + plane) < static_cast<unsigned>(p.W1);
      const bool col1 = static_cast<unsigned>(c1_0 + 2 * (g + 8) + plane) < static_cast<unsigned>(p.W1);
      for (int lr = warp >> 1; lr < R1; lr += NW / 2) {  // NW = 12: rows k, k + 6, k + 12 for warps 2 k, 2 k + 1
        const bool rowok = static_cast<unsigned>(r1_0 + lr) < static_cast<unsigned>(p.H1);
        const unsigned char* in0 = s_in + 2 * lr * v2::RPB + in_lane;
        unsigned char* d0 = s_c1 + lr * ROWB1 + st_lane;
        conv1_mtile<C::NT1>(in0, in0 + 6 * 16 * 2, qoff, qmask, qor, bw, d0, d0 + 8 * C::PB, rowok && col0,
                            rowok && col1, true, true, swz);
      }
      // the last even column (32): rows 16 m + g + 8 h, m = warp - LW (LW = 2; 10 at C1 = 48: the two warps with
      // one regular m-tile fewer)
      constexpr int LW = NW == 12 ? 10 : 2;
      if (warp == LW || warp == LW + 1) {
        const int m = warp - LW;
        const int lr0 = 16 * m + g, lr1 = lr0 + 8;  // lr1 >= 16 only for m = 1 (then not stored)
        const bool colok = static_cast<unsigned>(c1_0 + 2 * PO) < static_cast<unsigned>(p.W1);
        const int l0 = min(lr0, R1 - 1), l1 = min(lr1, R1 - 1);
        conv1_mtile<C::NT1>(s_in + 2 * l0 * v2::RPB + 6 * 2 * PO * 2, s_in + 2 * l1 * v2::RPB + 6 * 2 * PO * 2, qoff,
                            qmask, qor, bw, s_c1 + l0 * ROWB1 + PO * C::PB + 4 * t4,
                            s_c1 + l1 * ROWB1 + PO * C::PB + 4 * t4,
                            colok && static_cast<unsigned>(r1_0 + lr0) < static_cast<unsigned>(p.H1),
                            colok && static_cast<unsigned>(r1_0 + lr1) < static_cast<unsigned>(p.H1), lr0 < R1,
                            lr1 < R1, 0);
      }
    }
    __syncthreads();

    if (next < p.num_tiles)
      load_window_v2<NW>(p, Tile{s_tiles[4 * (it ^ 1)], s_tiles[4 * (it ^ 1) + 1], s_tiles[4 * (it ^ 1) + 2]}, s_in_addr,
                     warp, lane);  // s_in is free: in flight during conv2

    // ---- conv2 + bias + ReLU to global memory (as v1; the odd plane at ODD) ----
    conv2_tile<C1, v2::ODD, true>(p, t, s_w2_addr, s_c1_addr, lxA, chA, nB, chB, wm, wn, g, t4);
    bf::cp_async_wait<0>();  // the next window has landed (this thread's chunks) ...
    __syncthreads();         // ... everyone's, and conv2 is done with s_c1
  }
}

// Grid size per (kernel, device): blocks per SM (occupancy) x SMs, after the shared-memory opt-in.
constexpr int kMaxDevices = 64;

template <int C1>
cudaError_t launch_t(const Params& p, cudaStream_t stream) {
  static int slots[kMaxDevices] = {};  // 0: not set up yet on that device
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (slots[dev] == 0) {
    int optin = 0, sms = 0, per_sm = 0;
    if ((err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess) return err;
    if (optin < Cfg<C1>::SMEM) return cudaErrorInvalidConfiguration;
    if ((err = cudaFuncSetAttribute(stem_kernel<C1>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<C1>::SMEM)) !=
        cudaSuccess)
      return err;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return err;
    if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, stem_kernel<C1>, THREADS, Cfg<C1>::SMEM)) !=
        cudaSuccess)
      return err;
    if (per_sm < 1) return cudaErrorInvalidConfiguration;
    slots[dev] = per_sm * sms;
  }
  if (p.num_tiles <= 0) return cudaSuccess;
  const int grid = p.num_tiles < slots[dev] ? p.num_tiles : slots[dev];
  if (p.pdl && pdl::device_supports(dev))
    return pdl::launch(stem_kernel<C1>, dim3(grid), dim3(THREADS), Cfg<C1>::SMEM, stream, p);
  stem_kernel<C1><<<grid, THREADS, Cfg<C1>::SMEM, stream>>>(p);
  return cudaGetLastError();
}

template <int C1>
constexpr int smem_v2() {
  return Cfg<C1>::SMEM_W2 + Cfg<C1>::SMEM_C1 + v2::SMEM_IN + C1 * 64 + 32;  // + conv1's fragments, the tiles
}

template <int C1>
cudaError_t launch_t2(const Params& p, cudaStream_t stream) {
  constexpr int SMEM = smem_v2<C1>();
  static int slots[kMaxDevices] = {};
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (slots[dev] == 0) {
    int optin = 0, sms = 0, per_sm = 0;
    if ((err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess) return err;
    if (optin < SMEM) return cudaErrorInvalidConfiguration;
    if ((err = cudaFuncSetAttribute(stem_kernel_v2<C1>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM)) !=
        cudaSuccess)
      return err;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return err;
    if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, stem_kernel_v2<C1>, Cfg<C1>::NTHREADS, SMEM)) !=
        cudaSuccess)
      return err;
    if (per_sm < 1) return cudaErrorInvalidConfiguration;
    slots[dev] = per_sm * sms;
  }
  if (p.num_tiles <= 0) return cudaSuccess;
  const int grid = p.num_tiles < slots[dev] ? p.num_tiles : slots[dev];
  if (p.pdl && pdl::device_supports(dev))
    return pdl::launch(stem_kernel_v2<C1>, dim3(grid), dim3(Cfg<C1>::NTHREADS), SMEM, stream, p);
  stem_kernel_v2<C1><<<grid, Cfg<C1>::NTHREADS, SMEM, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

int smem_bytes(int c1) {
  if (c1 == 16) return Cfg<16>::SMEM;
  if (c1 == 32) return Cfg<32>::SMEM;
  return 0;
}

cudaError_t launch(const Params& p, int c1, cudaStream_t stream) {
  if (c1 == 16) return launch_t<16>(p, stream);
  if (c1 == 32) return launch_t<32>(p, stream);
  return cudaErrorInvalidValue;
}

}  // namespace stem

namespace stem {

// (W < 2^28: an image row's bytes, 6 W, in 32 bits)
bool v2_applies(const void* x, int W) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && W % 8 == 0 && W < (1 << 28);
}

int smem_bytes_v2(int c1) {
  if (c1 == 16) return smem_v2<16>();
  if (c1 == 32) return smem_v2<32>();
  if (c1 == 48) return smem_v2<48>();
  return 0;
}

cudaError_t launch_v2(const Params& p, int c1, cudaStream_t stream) {
  if (!v2_applies(p.x, p.W)) return launch(p, c1, stream);  // v1 takes any 2-byte aligned input
  if (c1 == 16) return launch_t2<16>(p, stream);
  if (c1 == 32) return launch_t2<32>(p, stream);
  if (c1 == 48) return launch_t2<48>(p, stream);  // version 2 only (the caller checked v2_applies)
  return cudaErrorInvalidValue;
}

}  // namespace stem
