// Kernels 2 and 3 of the MBConv block, version 3 (NOTES.md, "MBConv version 3"): same results
// as version 1's se_kernel and project_kernel (mbconv.cu), same rounding points; what changes is
// how they keep the memory system busy.
//
//   project_v3: persistent CTAs (as many as fit on the GPU) walk a list of 128-row x BN-column
//     output tiles, N tiles of one M tile adjacent so that D is read once from DRAM; the
//     (tile, k-step) sequence is flattened into one 4-stage cp.async pipeline, so that the next
//     tile's D streams in while this one computes and stores (version 1 held one 4 KB k-step per
//     CTA in flight and waited for it: 156 us for features.1.0's 154 MB). The SE scale is applied
//     to the A fragments in registers after ldmatrix (fp32 product, one rounding, as version 1),
//     from per-row offsets computed once per tile. BN in {16, 32, 48, 64}, chosen per C_out
//     (fewest N tiles, then the narrowest), instead of 64 for every C_out.
//   se_v3: one block of 512 threads per image; FC1 with four rows of W1 per warp in flight;
//     FC2 reads W2 ([hidden, sq]) coalesced: each warp copies 32 contiguous rows into shared
//     memory, then each lane reduces its row (version 1 read W2 column-wise across a warp,
//     32 sectors per load: 34 us for the 7x7 blocks).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "mbconv.cuh"
#include "mbconv_launch.cuh"
#include "pdl.h"
#include "mbconv_ptx.cuh"
#include "ptx_sm90.cuh"

namespace mb {

constexpr int kProjV3BM = 128, kProjV3BK = 32, kProjV3LD = kProjV3BK + 8, kProjV3Stages = 4;
constexpr int kSEV3Threads = 512, kSEV3Warps = kSEV3Threads / 32;

__host__ __device__ constexpr int project_v3_smem_bytes(int bn) {
  return kProjV3Stages * (kProjV3BM + bn) * kProjV3LD * 2;
}

// The units (output tiles) of a persistent CTA: blockIdx.x, + gridDim.x, ...; unit u is M tile
// u / n_tiles, N tile u % n_tiles, stepped without dividing.
struct UnitWalk {
  int m, n, step_m, step_n, n_tiles;
  __device__ explicit UnitWalk(int tiles)
      : m((int)blockIdx.x / tiles), n((int)blockIdx.x % tiles), step_m((int)gridDim.x / tiles),
        step_n((int)gridDim.x % tiles), n_tiles(tiles) {}
  __device__ void next() {
    m += step_m;
    n += step_n;
    if (n >= n_tiles) {
      n -= n_tiles;
      ++m;
    }
  }
};

// The (tile, 32-channel k step) steps of a persistent CTA whose tiles are blockIdx.x, + gridDim.x, ... of `units`.
__device__ __forceinline__ int cta_steps(int units, int ktiles) {
  const int my_units = (int)blockIdx.x < units ? (units - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
  return my_units * ktiles;
}

// Pieces of the projection shared by project_v3, project_bulk (version 6) and project_v10. A warp owns MT m16
// fragments, rows r0 .. r0 + 16 MT - 1 of the M tile (project_v3: MT = 2, r0 = 32 warp of a 128-row tile; project_v10:
// MT = 1 of a 64-row tile), all NT = BN / 8 columns of its N tile.

// The SE-scale offset (image * hid_pad) of this thread's 2 MT fragment rows of the M tile at m0:
// one division per tile. Rows past P read zeros (or are never stored); any image serves.
template <int MT = 2>
__device__ __forceinline__ void project_scale_rows(const Params& p, int m0, int hw, int r0, int g,
                                                   int (&soff)[MT][2]) {
  const int img0 = m0 / hw, rem0 = m0 - img0 * hw;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = rem0 + r0 + mt * 16 + g + h * 8;  // < hw + BM (BM <= kProjV3BM)
      const int img = hw >= kProjV3BM ? img0 + (r >= hw) : img0 + r / hw;
      soff[mt][h] = min(img, p.N - 1) * p.hid_pad;
    }
}

// One 16-deep k step: the warp's MT 16-row A fragments (D rows r0 .., row stride lda halves, from a_s at
// column `col`) scaled by the SE (channel k = the step's first channel), times the BN rows of V
// (row stride ldb, from b_s at column `col`), into acc.
template <int NP, int MT = 2>
__device__ __forceinline__ void project_k16(const Params& p, float (&acc)[MT][2 * NP][4], const __half* a_s, int lda,
                                            const __half* b_s, int ldb, int col, int k, const int (&soff)[MT][2],
                                            int r0, int lane) {
  const int q = lane & 3;
  const int a_row = lane & 15, a_k = (lane >> 4) * 8;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_k = ((lane >> 3) & 1) * 8;
  // D is zero past `hidden`, so any finite scale serves there; clamping keeps the read in
  // the row (hk_pad may exceed hid_pad, and the tail of scale is never written).
  const int klo = min(k + 2 * q, p.hidden - 2), khi = min(k + 2 * q + 8, p.hidden - 2);
  uint32_t a[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    ldmatrix_x4(a[mt], smem_addr(a_s + (r0 + mt * 16 + a_row) * lda + col + a_k));
    // a[mt][0]: (row g, k..k+1), [1]: (row g+8, k..), [2]: (row g, k+8..), [3]: (row g+8, k+8..)
    a[mt][0] = scale_half2(a[mt][0], __ldg(reinterpret_cast<const float2*>(p.scale + soff[mt][0] + klo)));
    a[mt][1] = scale_half2(a[mt][1], __ldg(reinterpret_cast<const float2*>(p.scale + soff[mt][1] + klo)));
    a[mt][2] = scale_half2(a[mt][2], __ldg(reinterpret_cast<const float2*>(p.scale + soff[mt][0] + khi)));
    a[mt][3] = scale_half2(a[mt][3], __ldg(reinterpret_cast<const float2*>(p.scale + soff[mt][1] + khi)));
  }
#pragma unroll
  for (int np = 0; np < NP; ++np) {
    uint32_t b[4];
    ldmatrix_x4(b, smem_addr(b_s + (np * 16 + b_row) * ldb + col + b_k));
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      mma_m16n8k16(acc[mt][2 * np], a[mt], b[0], b[1]);
      mma_m16n8k16(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
    }
  }
}

// The tile's epilogue: + bias (+ x), fp16 store of the rows < P and columns < C_out; zeroes acc.
template <int NT, int MT = 2>
__device__ __forceinline__ void project_epilogue(const Params& p, float (&acc)[MT][NT][4], int m0, int n0, int P,
                                                 int r0, int lane) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int col = n0 + nt * 8 + 2 * q;
    const bool col_ok = col < p.C_out;  // C_out is even: both columns or neither
    const float bias0 = col_ok ? __ldg(p.b_proj + col) : 0.f, bias1 = col_ok ? __ldg(p.b_proj + col + 1) : 0.f;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + r0 + mt * 16 + g + h * 8;
        float v0 = acc[mt][nt][2 * h] + bias0, v1 = acc[mt][nt][2 * h + 1] + bias1;
        acc[mt][nt][2 * h] = acc[mt][nt][2 * h + 1] = 0.f;
        if (!col_ok || row >= P) continue;
        if (p.residual) {  // stride 1 and C_in == C_out: x has out's layout
          const float2 xv = __half22float2(*reinterpret_cast<const __half2*>(p.x + (size_t)row * p.C_out + col));
          v0 += xv.x;
          v1 += xv.y;
        }
        *reinterpret_cast<__half2*>(p.out + (size_t)row * p.C_out + col) = __floats2half2_rn(v0, v1);
      }
  }
}

// out[P x C_out] = (D * scale[image]) V^T + b (+ x). 4 warps, each 32 rows x BN columns.
template <int BN>
__global__ void __launch_bounds__(kProjectThreads) project_v3_kernel(const Params p, int n_tiles) {
  // PDL (pdl.h): d (kernel 1's output) is loaded with the weights in the same cp.async groups from the
  // first issue() on, so the wait leads (placed before the first issue() instead, ptxas rescheduled a few
  // hundred instructions). The grid is one wave (at most the resident CTAs, each walking its units), so
  // every CTA is already resident and the trigger follows the wait.
  pdl::wait();
  pdl::launch_dependents();
  constexpr int BM = kProjV3BM, BK = kProjV3BK, LD = kProjV3LD, STAGES = kProjV3Stages;
  constexpr int NT = BN / 8, NP = BN / 16;
  static_assert(BN % 16 == 0 && BN <= 64, "BN");
  extern __shared__ __align__(16) uint8_t smem[];
  __half* As = reinterpret_cast<__half*>(smem);  // [STAGES][BM][LD]
  __half* Bs = As + STAGES * BM * LD;             // [STAGES][BN][LD]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hw = p.Ho * p.Wo, P = p.N * hw, ktiles = p.hk_pad / BK;
  const int steps = cta_steps((P + BM - 1) / BM * n_tiles, ktiles);  // the launcher keeps the units < 2^31

  // Units (tiles) of this CTA: the loader and the consumer each step through them (UnitWalk).
  // Loader: the step whose operands are fetched next (it runs STAGES - 1 steps ahead). Thread
  // tid copies rows tid / 4 + 32 j (j < 4) of the A tile, 8 channels at column (tid % 4) * 8.
  const int ld_r = tid >> 2, ld_c = (tid & 3) * 8;
  int ld_step = 0, ld_kt = 0;
  UnitWalk ld(n_tiles);
  auto issue = [&]() {
    if (ld_step < steps) {
      const int stage = ld_step % STAGES;
      const int row0 = ld.m * BM + ld_r, n0 = ld.n * BN, k = ld_kt * BK + ld_c;
      __half* a = As + stage * BM * LD + ld_r * LD + ld_c;
      const __half* src = p.d + (size_t)row0 * p.hidden + k;
#pragma unroll
      for (int j = 0; j < BM / 32; ++j) {
        const bool valid = row0 + 32 * j < P && k < p.hidden;  // zeros past the batch and hidden
        cp_async16(smem_addr(a + 32 * j * LD), valid ? src + (size_t)(32 * j) * p.hidden : p.d, valid);
      }
      __half* b = Bs + stage * BN * LD;
#pragma unroll
      for (int j = 0; j < (BN * BK / 8 + kProjectThreads - 1) / kProjectThreads; ++j) {
        const int i = tid + j * kProjectThreads, r = i >> 2, c = (i & 3) * 8;
        if (BN * BK / 8 % kProjectThreads && i >= BN * BK / 8) break;
        const bool valid = n0 + r < p.C_out;
        cp_async16(smem_addr(b + r * LD + c),
                   valid ? p.w_proj + (size_t)(n0 + r) * p.hk_pad + ld_kt * BK + c : p.w_proj, valid);
      }
    }
    cp_async_commit();  // an empty group past the end keeps wait_group's count uniform
    ++ld_step;
    if (++ld_kt == ktiles) {
      ld_kt = 0;
      ld.next();
    }
  };

  const int g = lane >> 2;
  float acc[2][NT][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;
  int soff[2][2];  // scale offset (image * hid_pad) of this thread's four fragment rows

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) issue();
  int kt = 0;
  UnitWalk cu(n_tiles);
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // step s has landed; everyone is done with step s - 1, whose buffer is refilled next
    issue();
    const int m0 = cu.m * BM, n0 = cu.n * BN;
    if (kt == 0) project_scale_rows(p, m0, hw, warp * 32, g, soff);  // the image of each fragment row
    const __half* a_s = As + (s % STAGES) * BM * LD;
    const __half* b_s = Bs + (s % STAGES) * BN * LD;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks)
      project_k16<NP>(p, acc, a_s, LD, b_s, LD, ks * 16, kt * BK + ks * 16, soff, warp * 32, lane);
    if (++kt < ktiles) continue;
    kt = 0;
    cu.next();
    project_epilogue<NT>(p, acc, m0, n0, P, warp * 32, lane);
  }
  cp_async_wait<0>();
}

// Version 10's projection (NOTES.md, "MBConv version 10"): project_v3's products for the blocks past stage 4, where
// project_v3's 128-row tiles leave one warp per scheduler (features.6.1: 147 CTAs of 4 warps, 7% of the warp slots,
// 65 us for 14.5 MB of D). 64-row x BN tiles, 8 warps: warp w computes the 16 rows 16 (w % 4) of the tile and, of
// each 32-deep k step, the 16 channels 16 (w / 4): two warps per output fragment, each on half the products, their
// sums added through shared memory at the tile's end (red, fp32). Same 4-stage cp.async pipeline, same scaled A
// fragments (project_k16), same epilogue (project_epilogue) as project_v3; the products are summed in another order
// (two fp32 halves), so the output is close to project_v3's, not equal.
constexpr int kProjV10BM = 64, kProjV10Threads = 256;

__host__ __device__ constexpr int project_v10_smem_bytes(int bn) {
  return kProjV3Stages * (kProjV10BM + bn) * kProjV3LD * 2 + 4 * (bn / 8) * 4 * 32 * 4;  // stages + red
}

template <int BN>
__global__ void __launch_bounds__(kProjV10Threads, 3) project_v10_kernel(const Params p, int n_tiles) {
  pdl::wait();  // as project_v3: D is read from the first issue() on; the grid is one wave
  pdl::launch_dependents();
  constexpr int BM = kProjV10BM, BK = kProjV3BK, LD = kProjV3LD, STAGES = kProjV3Stages;
  constexpr int NT = BN / 8, NP = BN / 16;
  static_assert(BN % 16 == 0 && BN <= 64 && BK == 32, "BN");
  extern __shared__ __align__(16) uint8_t smem[];
  __half* As = reinterpret_cast<__half*>(smem);  // [STAGES][BM][LD]
  __half* Bs = As + STAGES * BM * LD;             // [STAGES][BN][LD]
  float* red = reinterpret_cast<float*>(Bs + STAGES * BN * LD);  // [4 row warps][NT][4][32 lanes]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int mw = warp & 3, kh = warp >> 2;  // rows 16 mw .. of the tile; channels 16 kh .. of each k step
  const int hw = p.Ho * p.Wo, P = p.N * hw, ktiles = p.hk_pad / BK;
  const int steps = cta_steps((P + BM - 1) / BM * n_tiles, ktiles);  // the launcher keeps the units < 2^31

  // Loader: thread tid copies row tid / 4 of the A tile and, for tid < 4 BN, row tid / 4 of the B tile, 8 channels
  // at column (tid % 4) * 8: one 16-byte cp.async each per step.
  const int ld_r = tid >> 2, ld_c = (tid & 3) * 8;
  int ld_step = 0, ld_kt = 0;
  UnitWalk ld(n_tiles);
  auto issue = [&]() {
    if (ld_step < steps) {
      const int stage = ld_step % STAGES;
      const int row = ld.m * BM + ld_r, n0 = ld.n * BN, k = ld_kt * BK + ld_c;
      const bool valid = row < P && k < p.hidden;  // zeros past the batch and hidden
      cp_async16(smem_addr(As + stage * BM * LD + ld_r * LD + ld_c), valid ? p.d + (size_t)row * p.hidden + k : p.d,
                 valid);
      if (tid < 4 * BN) {
        const bool bvalid = n0 + ld_r < p.C_out;
        cp_async16(smem_addr(Bs + stage * BN * LD + ld_r * LD + ld_c),
                   bvalid ? p.w_proj + (size_t)(n0 + ld_r) * p.hk_pad + k : p.w_proj, bvalid);
      }
    }
    cp_async_commit();  // an empty group past the end keeps wait_group's count uniform
    ++ld_step;
    if (++ld_kt == ktiles) {
      ld_kt = 0;
      ld.next();
    }
  };

  const int g = lane >> 2;
  float acc[1][NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[0][j][k] = 0.f;
  int soff[1][2];

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) issue();
  int kt = 0;
  UnitWalk cu(n_tiles);
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // step s has landed; everyone is done with step s - 1 (and with red), whose buffer is refilled
    issue();
    const int m0 = cu.m * BM, n0 = cu.n * BN;
    if (kt == 0) project_scale_rows<1>(p, m0, hw, mw * 16, g, soff);
    project_k16<NP, 1>(p, acc, As + (s % STAGES) * BM * LD, LD, Bs + (s % STAGES) * BN * LD, LD, kh * 16,
                       kt * BK + kh * 16, soff, mw * 16, lane);
    if (++kt < ktiles) continue;
    kt = 0;
    cu.next();
    float* r = red + mw * NT * 4 * 32 + lane;
    if (kh == 1) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          r[(nt * 4 + j) * 32] = acc[0][nt][j];
          acc[0][nt][j] = 0.f;
        }
    }
    __syncthreads();  // the k-half sums are in red
    if (kh == 0) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[0][nt][j] += r[(nt * 4 + j) * 32];
      project_epilogue<NT, 1>(p, acc, m0, n0, P, mw * 16, lane);  // zeroes acc
    }
  }
  cp_async_wait<0>();
}

// Version 6's projection: the units of project_v3, but a unit's whole K arrives at once through
// the copy engine, two units deep: one bulk copy of D rows m0 .. m0 + 127 (contiguous: 128 x
// hidden halves) and one of V's BN rows (BN x hk_pad halves), issued by thread 0 and completing
// on the stage's mbarrier; then every warp computes its 32 rows (project_k16 per 16 channels,
// ldmatrix on the unpadded rows: 2-way bank conflicts at hidden = 144 or 240, 4-way at 32 or 96)
// and stores (project_epilogue), and a __syncthreads frees the stage for the unit after next.
// project_v3 streams D with cp.async (16 bytes a lane) and reached only 1.65-1.75 TB/s
// (NOTES.md, "MBConv version 6").
constexpr int kProjBulkStages = 2;

__host__ __device__ constexpr int project_bulk_stage_bytes(int hidden, int hk_pad, int bn) {
  return (kProjV3BM * hidden + bn * hk_pad) * 2;
}
__host__ __device__ constexpr int project_bulk_smem_bytes(int hidden, int hk_pad, int bn) {
  return kProjBulkStages * project_bulk_stage_bytes(hidden, hk_pad, bn) + 8 * kProjBulkStages;  // + the mbarriers
}

template <int BN>
__global__ void __launch_bounds__(kProjectThreads) project_bulk_kernel(const Params p, int n_tiles) {
  constexpr int BM = kProjV3BM, NT = BN / 8, NP = BN / 16, STAGES = kProjBulkStages;
  static_assert(BN % 16 == 0 && BN <= 64, "BN");
  extern __shared__ __align__(16) uint8_t smem[];
  const int stage_bytes = project_bulk_stage_bytes(p.hidden, p.hk_pad, BN);
  const uint32_t bars = smem_addr(smem + STAGES * stage_bytes);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hw = p.Ho * p.Wo, P = p.N * hw;
  const int units = (P + BM - 1) / BM * n_tiles;  // the launcher keeps units < 2^31
  const int my_units = (int)blockIdx.x < units ? (units - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) bf::mbar_init(bars + 8 * s, 1);
    bf::fence_barrier_init();
  }
  __syncthreads();
  UnitWalk ld(n_tiles), cu(n_tiles);
  auto issue = [&](int i) {  // thread 0: local unit i into stage i % STAGES
    const uint32_t bar = bars + 8 * (i % STAGES), a = smem_addr(smem + (i % STAGES) * stage_bytes);
    const int m0 = ld.m * BM, rows = min(BM, P - m0);
    const uint32_t a_bytes = rows * p.hidden * 2, b_bytes = BN * p.hk_pad * 2;  // V: cout_pad >= n_tiles * BN rows
    bf::mbar_arrive_expect_tx(bar, a_bytes + b_bytes);
    bf::bulk_copy_g2s(a, p.d + (size_t)m0 * p.hidden, a_bytes, bar);
    bf::bulk_copy_g2s(a + BM * p.hidden * 2, p.w_proj + (size_t)ld.n * BN * p.hk_pad, b_bytes, bar);
    ld.next();
  };
  float acc[2][NT][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;
  int soff[2][2];
  if (tid == 0 && my_units > 0) issue(0);
  for (int i = 0; i < my_units; ++i) {
    if (tid == 0 && i + 1 < my_units) issue(i + 1);  // its stage was freed by the __syncthreads closing unit i - 1
    bf::mbar_wait(bars + 8 * (i % STAGES), (i / STAGES) & 1);
    const int m0 = cu.m * BM, n0 = cu.n * BN;
    project_scale_rows(p, m0, hw, warp * 32, lane >> 2, soff);
    const __half* a_s = reinterpret_cast<const __half*>(smem + (i % STAGES) * stage_bytes);
    // rows past P (the last M tile) hold stale values: their products are never stored
    for (int k = 0; k < p.hidden; k += 16)
      project_k16<NP>(p, acc, a_s, p.hidden, a_s + BM * p.hidden, p.hk_pad, k, k, soff, warp * 32, lane);
    project_epilogue<NT>(p, acc, m0, n0, P, warp * 32, lane);
    cu.next();
    __syncthreads();
  }
}

// Version 9's projection (NOTES.md, "MBConv version 9"): project_v3's products, without shared memory for D and
// without a barrier after the prologue. Each warp owns 16-row tasks (task w, w + warps, ... of the ceil(P / 16))
// and streams D straight from global memory into its mma A fragments: the hidden channels go in units of 16, and a
// unit's mma k order is permuted so that lane (g, t) needs D's channels 4t .. 4t + 3 of rows g and g + 8, one
// 8-byte load each (mma k 2t + h <-> channel 4t + h, k 2t + 8 + h <-> channel 4t + 2 + h, h = 0, 1); V's rows,
// in shared memory for the CTA's life, are read with the same permutation (one 8-byte load per 8 columns). The
// loads of the warp's next kProjV9Depth units (across its task boundaries) are in flight while it computes one:
// ~4 KB per warp, with no CTA-wide barrier to wait for. The SE scale is applied to the fp16 A fragment in fp32
// with one rounding, as project_v3 does. For C_out = 8 NT <= 88 whose V fits kProjV9MaxSmem (project_v9_applies).
constexpr int kProjV9Threads = 256, kProjV9Warps = kProjV9Threads / 32, kProjV9Depth = 8;
// CUDA_KERNELS_PROJ_V9_DEPTH=16 (read by the launcher at every call): a ring of 16 units, ~8 KB per warp in flight
// (the experiment of NOTES.md, "MBConv version 9: measured"); 8 otherwise.
constexpr int kProjV9MaxSmem = 110 * 1024;
constexpr int kProjV9TMaxSmem = 200 * 1024;  // project_v9t: V and the warps' task rings
constexpr int kProjV9SMaxSmem = 227 * 1024;  // project_v9s: with the staged rows (the most a CTA may have)

// V's row pitch in halves: 2 * pitch = 32 mod 128 bytes, so that the 8-byte loads of a quarter warp (rows g .. g +
// 3, 32 bytes each) fall into distinct banks.
__host__ __device__ constexpr int project_v9_ldb(int hidden) { return round_up(hidden, 64) + 16; }
__host__ __device__ constexpr int project_v9_smem_bytes(int hidden, int c_out) {
  return c_out * project_v9_ldb(hidden) * 2;
}

// Pieces of project_v9 shared by its two loaders (the ring of loads in registers, project_v9_kernel, and the task
// staged in the warp's shared memory, project_v9t_kernel). Lane (g, t); a task is rows 16 task .. 16 task + 15.

// V's rows (C_out = 8 NT) into shared memory and the lane's biases: weights, read before the PDL wait; then the
// wait (D and the scale follow it) and the trigger (the dependents wait for this grid).
template <int NT>
__device__ __forceinline__ void v9_prologue(const Params& p, __half* b_s, int ldb, float2 (&bias)[NT], int tid, int t) {
  const int kc = p.hidden / 8;
  for (int i = tid; i < NT * 8 * kc; i += kProjV9Threads) {
    const int r = i / kc, c = i - r * kc;
    *reinterpret_cast<uint4*>(b_s + r * ldb + c * 8) =
        __ldg(reinterpret_cast<const uint4*>(p.w_proj + (size_t)r * p.hk_pad) + c);
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) bias[nt] = __ldg(reinterpret_cast<const float2*>(p.b_proj + nt * 8 + 2 * t));
  __syncthreads();
  pdl::wait();  // pdl.h
  pdl::launch_dependents();
}

// The shortcut's values of the lane's outputs of `task` (rows g and g + 8, columns nt 8 + 2t ..), requested now and
// added in the epilogue.
template <int NT>
__device__ __forceinline__ void v9_shortcut_load(const Params& p, int task, int g, int t, int P, uint32_t (&res)[2][NT]) {
  const int r = task * 16 + g;
  if (p.residual)  // stride 1 and C_in == C_out: x has out's layout
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        res[h][nt] = r + 8 * h < P ? __ldcs(reinterpret_cast<const unsigned int*>(p.x + (size_t)(r + 8 * h) * p.C_out +
                                                                                 nt * 8 + 2 * t))
                                   : 0u;
}

// At a task's start: the scale rows of the lane's two rows (rows past P: any image; they are never stored) and the
// shortcut's values of its outputs.
template <int NT>
__device__ __forceinline__ void v9_task_start(const Params& p, int task, int g, int t, int hw, int P, const float*& s_lo,
                                              const float*& s_hi, uint32_t (&res)[2][NT]) {
  const int r = task * 16 + g;
  s_lo = p.scale + (size_t)min(r / hw, p.N - 1) * p.hid_pad + 4 * t;
  s_hi = p.scale + (size_t)min((r + 8) / hw, p.N - 1) * p.hid_pad + 4 * t;
  v9_shortcut_load<NT>(p, task, g, t, P, res);
}

// One unit (16 channels, k permuted): lo / hi = D's channels 16 u + 4t .. + 3 of rows g and g + 8, sl / sh their
// SE scales.
template <int NT>
__device__ __forceinline__ void v9_unit_scaled(float (&acc)[NT][4], uint2 lo, uint2 hi, float4 sl, float4 sh,
                                               const __half* b_s, int ldb, int u, int g, int t) {
  uint32_t a[4];  // (row g, k 2t..), (row g + 8, k 2t..), (row g, k 2t + 8..), (row g + 8, k 2t + 8..)
  a[0] = scale_half2(lo.x, make_float2(sl.x, sl.y));
  a[1] = scale_half2(hi.x, make_float2(sh.x, sh.y));
  a[2] = scale_half2(lo.y, make_float2(sl.z, sl.w));
  a[3] = scale_half2(hi.y, make_float2(sh.z, sh.w));
  const __half* b_row = b_s + g * ldb + u * 16 + 4 * t;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const uint2 b = *reinterpret_cast<const uint2*>(b_row + nt * 8 * ldb);
    mma_m16n8k16(acc[nt], a, b.x, b.y);
  }
}

// v9_unit_scaled with the scales read from global memory (s_lo / s_hi: the scale rows of rows g and g + 8, at 4t).
template <int NT>
__device__ __forceinline__ void v9_unit(float (&acc)[NT][4], uint2 lo, uint2 hi, const float* s_lo, const float* s_hi,
                                        const __half* b_s, int ldb, int u, int g, int t) {
  const float4 sl = __ldg(reinterpret_cast<const float4*>(s_lo + u * 16));
  const float4 sh = __ldg(reinterpret_cast<const float4*>(s_hi + u * 16));
  v9_unit_scaled<NT>(acc, lo, hi, sl, sh, b_s, ldb, u, g, t);
}

// The task's epilogue: + bias (+ x), fp16 store of the rows < P; zeroes acc.
template <int NT>
__device__ __forceinline__ void v9_epilogue(const Params& p, float (&acc)[NT][4], const float2 (&bias)[NT],
                                            const uint32_t (&res)[2][NT], int task, int g, int t, int P) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = task * 16 + g + 8 * h;
    if (row < P) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int col = nt * 8 + 2 * t;
        float v0 = acc[nt][2 * h] + bias[nt].x, v1 = acc[nt][2 * h + 1] + bias[nt].y;
        if (p.residual) {
          const float2 xv = __half22float2(*reinterpret_cast<const __half2*>(&res[h][nt]));
          v0 += xv.x;
          v1 += xv.y;
        }
        *reinterpret_cast<__half2*>(p.out + (size_t)row * p.C_out + col) = __floats2half2_rn(v0, v1);
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
}

template <int NT, int DEPTH>
__global__ void __launch_bounds__(kProjV9Threads) project_v9_kernel(const Params p) {
  extern __shared__ __align__(16) uint8_t smem9[];
  __half* b_s = reinterpret_cast<__half*>(smem9);
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int ldb = project_v9_ldb(p.hidden);
  float2 bias[NT];
  v9_prologue<NT>(p, b_s, ldb, bias, tid, t);

  const int P = p.N * p.Ho * p.Wo, hw = p.Ho * p.Wo, tasks = (P + 15) / 16, units = p.hidden / 16;
  const int step = (int)gridDim.x * kProjV9Warps;
  int ctask = (int)blockIdx.x * kProjV9Warps + (tid >> 5), cu = 0;  // the unit computed next
  if (ctask >= tasks) return;
  int ltask = ctask, lu = 0;  // the unit loaded next
  uint2 buf[DEPTH][2];
  auto load = [&](uint2(&dst)[2]) {
    if (ltask >= tasks) return;
    const int r = ltask * 16 + g;
    const uint2* src = reinterpret_cast<const uint2*>(p.d + (size_t)r * p.hidden + lu * 16 + 4 * t);
    dst[0] = r < P ? __ldcs(src) : make_uint2(0, 0);
    dst[1] = r + 8 < P ? __ldcs(src + 2 * p.hidden) : make_uint2(0, 0);  // 8 rows on: 8 * hidden halves
    if (++lu == units) {
      lu = 0;
      ltask += step;
    }
  };
#pragma unroll
  for (int d = 0; d < DEPTH; ++d) load(buf[d]);
  const float *s_lo, *s_hi;
  uint32_t res[2][NT];
  v9_task_start<NT>(p, ctask, g, t, hw, P, s_lo, s_hi, res);
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  for (;;) {
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      v9_unit<NT>(acc, buf[d][0], buf[d][1], s_lo, s_hi, b_s, ldb, cu, g, t);
      load(buf[d]);  // the slot just read takes the unit DEPTH ahead
      if (++cu < units) continue;
      v9_epilogue<NT>(p, acc, bias, res, ctask, g, t, P);
      cu = 0;
      ctask += step;
      if (ctask >= tasks) return;
      v9_task_start<NT>(p, ctask, g, t, hw, P, s_lo, s_hi, res);
    }
  }
}

// project_v9 with the task staged (the default where it fits; CUDA_KERNELS_PROJ_V9_LOAD=ring for the ring; NOTES.md,
// "Session 11 results"): the ring
// kernel's loads are 32-byte pieces of 16 rows (a row's hidden x 2 bytes apart), so DRAM sees each page opened once
// per unit; here each warp copies its next task's 16 x hidden halves, one contiguous range, with 16-byte cp.async in
// address order into its own half of a two-task ring in shared memory, and computes the current task from there
// (8-byte shared loads of the same fragments). No CTA barrier after the prologue: the warp waits for its own copies
// (cp.async.wait_group) and __syncwarp.
// BULK (CUDA_KERNELS_PROJ_V9_BULK=1, off until measured; NOTES.md "Session 19: the projections' read pattern"): each
// task by one bulk copy (lane 0, cp.async.bulk) completing on the slot's mbarrier, two per warp after the rings,
// instead of hidden / 16 16-byte cp.async a lane (nine at B0's 2.1).
// SS (project_v9s, on unless CUDA_KERNELS_PROJ_V9_SS=0; NOTES.md "Session 20: the projections wait on their scale
// loads"): the task's SE scale row copied with its D rows (cp.async, the same group) into a per-slot row after the
// rings, and read from there, instead of two global float4 loads a unit that the unit's multiplies wait on. SX
// (CUDA_KERNELS_PROJ_V9_SX=1, off: neutral in s20 call 4, 2.1 40.4 -> 43.2 us, 3.1 22.4 -> 21.3): with a shortcut,
// the task's 16 rows of x staged likewise (one contiguous range: x has out's layout), after the scale rows, instead
// of global loads that the epilogue waits on. RX (CUDA_KERNELS_PROJ_V9_RX=1, off until measured): the shortcut's
// values loaded into registers one task ahead instead (2 NT words a lane), so that a task's epilogue finds the loads
// issued a whole task earlier. Where H x W is a multiple of 16, so that a task lies in one image and no task is
// partial (project_v9s_runs).
__host__ __device__ constexpr int project_v9t_smem_bytes(int hidden, int c_out, bool bulk = false, bool ss = false,
                                                         bool residual = false) {
  return project_v9_smem_bytes(hidden, c_out) + kProjV9Warps * 2 * 16 * hidden * 2 + (bulk ? kProjV9Warps * 16 : 0) +
         (ss ? kProjV9Warps * 2 * hidden * 4 : 0) + (ss && residual ? kProjV9Warps * 2 * 16 * c_out * 2 : 0);
}

template <int NT, bool BULK, bool SS = false, bool SX = false, bool RX = false, bool EF = false>
__device__ __forceinline__ void project_v9t_body(const Params& p) {
  static_assert(!(BULK && SS) && (SS || !SX), "the staged rows ride on the cp.async loader");
  static_assert(!RX || (SS && !SX), "the shortcut one task ahead is project_v9s's option");
  extern __shared__ __align__(16) uint8_t smem9[];
  __half* b_s = reinterpret_cast<__half*>(smem9);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int ldb = project_v9_ldb(p.hidden), task_halves = 16 * p.hidden;
  __half* mine = reinterpret_cast<__half*>(smem9 + project_v9_smem_bytes(p.hidden, p.C_out)) + warp * 2 * task_halves;
  uint8_t* const rings_end = smem9 + project_v9t_smem_bytes(p.hidden, p.C_out);
  // BULK: the warp's two mbarriers, after every warp's ring
  const uint32_t bars = smem_addr(rings_end) + warp * 16;
  // SS: the warp's two scale rows, after every warp's ring (where BULK's mbarriers would be)
  float* scales = reinterpret_cast<float*>(rings_end) + warp * 2 * p.hidden;
  // SS with a shortcut: the warp's two slots of 16 rows of x, after every warp's scale rows
  __half* res_s = reinterpret_cast<__half*>(smem9 + project_v9t_smem_bytes(p.hidden, p.C_out, false, true)) +
                  warp * 2 * 16 * p.C_out;
  float2 bias[NT];
  v9_prologue<NT>(p, b_s, ldb, bias, tid, t);

  const int P = p.N * p.Ho * p.Wo, hw = p.Ho * p.Wo, tasks = (P + 15) / 16, units = p.hidden / 16;
  const int step = (int)gridDim.x * kProjV9Warps;
  int task = (int)blockIdx.x * kProjV9Warps + warp;
  if (task >= tasks) return;
  if constexpr (BULK) {
    if (lane < 2) bf::mbar_init(bars + 8 * lane, 1);
    bf::fence_barrier_init();
    __syncwarp();
  }
  // the task's rows (fewer past P: the stale rows of the buffer feed only outputs that are never stored)
  auto issue = [&](int tk, int slot) {
    if constexpr (BULK) {
      if (lane == 0 && tk < tasks) {
        const uint32_t bytes = (uint32_t)(min(16, P - tk * 16) * p.hidden * 2), bar = bars + 8 * slot;
        bf::fence_proxy_async_smem();  // the lanes' reads of the slot (before the last __syncwarp) first
        bf::mbar_arrive_expect_tx(bar, bytes);
        bf::bulk_copy_g2s(smem_addr(mine + slot * task_halves), p.d + (size_t)tk * task_halves, bytes, bar);
      }
      return;
    }
    if (tk < tasks) {
      const int pieces = min(16, P - tk * 16) * p.hidden / 8;
      const __half* src = p.d + (size_t)tk * task_halves;
      const uint32_t dst = smem_addr(mine + slot * task_halves);
#ifdef MB_D_L2_HINTS
      constexpr bool evict_first = true;
#else
      constexpr bool evict_first = EF;
#endif
      if constexpr (evict_first) {  // EF (project_v9se_kernel): D's consumed lines are the first victims in L2
        const uint64_t policy = l2_evict_first();
        for (int i = lane; i < pieces; i += 32) cp_async16_d(dst + i * 16, src + i * 8, policy);
      } else {
        for (int i = lane; i < pieces; i += 32) cp_async16(dst + i * 16, src + i * 8, true);
      }
      if constexpr (SS) {  // the image's scale row (the task lies in one image)
        const float* row = p.scale + (size_t)(tk * 16 / hw) * p.hid_pad;
        const uint32_t to = smem_addr(scales + slot * p.hidden);
        for (int i = lane; i < p.hidden / 4; i += 32) cp_async16(to + i * 16, row + i * 4, true);
        if (SX && p.residual) {  // the task's 16 rows of x: 2 C_out 16-byte pieces
          const __half* xs = p.x + (size_t)tk * 16 * p.C_out;
          const uint32_t xd = smem_addr(res_s + slot * 16 * p.C_out);
          for (int i = lane; i < 2 * p.C_out; i += 32) cp_async16(xd + i * 16, xs + i * 8, true);
        }
      }
    }
    bf::cp_async_commit();  // a group per task, empty past the last: the wait below counts one behind
  };
  issue(task, 0);
  const float *s_lo, *s_hi;
  uint32_t res[2][NT], res_next[2][NT];  // RX: the next task's shortcut values
  if constexpr (RX) v9_shortcut_load<NT>(p, task, g, t, P, res);
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  for (int k = 0;; ++k) {
    issue(task + step, (k + 1) & 1);
    if constexpr (!SS) {
      v9_task_start<NT>(p, task, g, t, hw, P, s_lo, s_hi, res);
    } else if constexpr (RX) {
      v9_shortcut_load<NT>(p, task + step, g, t, P, res_next);  // past the last task: rows past P, nothing loaded
    } else if constexpr (!SX) {
      v9_shortcut_load<NT>(p, task, g, t, P, res);  // the scales come from the staged rows
    }
    if constexpr (BULK) {
      bf::mbar_wait(bars + 8 * (k & 1), (k >> 1) & 1);  // slot k & 1's (k >> 1)-th copy
    } else {
      cp_async_wait<1>();
      __syncwarp();
    }
    const __half* a_lo = mine + (k & 1) * task_halves + g * p.hidden + 4 * t;
    const __half* a_hi = a_lo + 8 * p.hidden;
    if constexpr (SS) {
      const float* s_row = scales + (k & 1) * p.hidden + 4 * t;
#pragma unroll 3
      for (int u = 0; u < units; ++u) {
        const float4 s = *reinterpret_cast<const float4*>(s_row + u * 16);
        v9_unit_scaled<NT>(acc, *reinterpret_cast<const uint2*>(a_lo + u * 16),
                           *reinterpret_cast<const uint2*>(a_hi + u * 16), s, s, b_s, ldb, u, g, t);
      }
    } else {
#pragma unroll 3
      for (int u = 0; u < units; ++u)
        v9_unit<NT>(acc, *reinterpret_cast<const uint2*>(a_lo + u * 16), *reinterpret_cast<const uint2*>(a_hi + u * 16),
                    s_lo, s_hi, b_s, ldb, u, g, t);
    }
    if constexpr (SX) {
      if (p.residual) {  // the lane's shortcut values from the staged rows (rows g and g + 8, columns nt 8 + 2t ..)
        const __half* xr = res_s + (k & 1) * 16 * p.C_out + g * p.C_out + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            res[h][nt] = *reinterpret_cast<const uint32_t*>(xr + 8 * h * p.C_out + nt * 8);
      }
    }
    v9_epilogue<NT>(p, acc, bias, res, task, g, t, P);
    if constexpr (RX) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) res[h][nt] = res_next[h][nt];
    }
    __syncwarp();  // every lane has read this slot before the copy issued next iteration refills it
    task += step;
    if (task >= tasks) break;
  }
  if constexpr (!BULK) cp_async_wait<0>();  // (BULK: every copy issued was for a task this loop waited on)
}

template <int NT>
__global__ void __launch_bounds__(kProjV9Threads) project_v9t_kernel(const Params p) {
  project_v9t_body<NT, false>(p);
}

template <int NT>
__global__ void __launch_bounds__(kProjV9Threads) project_v9b_kernel(const Params p) {  // the bulk-copy loader
  project_v9t_body<NT, true>(p);
}

template <int NT>
__global__ void __launch_bounds__(kProjV9Threads) project_v9s_kernel(const Params p) {  // the staged scale rows
  project_v9t_body<NT, false, true>(p);
}

template <int NT>
__global__ void __launch_bounds__(kProjV9Threads) project_v9se_kernel(const Params p) {  // D read evict_first
  project_v9t_body<NT, false, true, false, false, true>(p);
}

template <int NT>
__global__ void __launch_bounds__(kProjV9Threads) project_v9sx_kernel(const Params p) {  // and the shortcut's rows
  project_v9t_body<NT, false, true, true>(p);
}

template <int NT>
__global__ void __launch_bounds__(kProjV9Threads) project_v9sr_kernel(const Params p) {  // the shortcut a task ahead
  project_v9t_body<NT, false, true, false, true>(p);
}

// One block per image: pool, FC1 -> SiLU, FC2 -> sigmoid. Shared memory: pooled [hid_pad],
// squeezed [sq rounded to 4], then 32 rows of W2 per FC2 warp ([fc2_warps][32 * sq]).
// PRE (se_v3p_kernel, CUDA_KERNELS_SE_V3_PRE on unless "0", since session 22): W1 [sq][hidden] and W2 [hidden][sq]
// copied whole into shared memory after `squeezed` by cp.async before the wait on kernel 1 (they do not depend on it;
// SE version 5 does the same), so that FC1 and FC2 read shared memory where they waited on global loads after the pool: the same
// products in the same order (the same bits). Where both fit se_v3_pre_fits (B0's 1.0-4.0, the blocks that run
// se_v3 in versions 9-11).
template <bool PRE>
__device__ __forceinline__ void se_v3_body(const Params& p, int fc2_warps) {
  extern __shared__ __align__(16) float se3_smem[];
  float* pooled = se3_smem;
  float* squeezed = pooled + p.hid_pad;
  float* stage = squeezed + round_up(p.sq, 4);
  const int n = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float inv = 1.f / float(p.Ho * p.Wo);
  float* const w1s = stage;                    // PRE: W1 [sq][hidden]
  float* const w2s = stage + p.sq * p.hidden;  // PRE: W2 [hidden][sq] (hidden % 8 == 0: 16-byte aligned)
  if constexpr (PRE) {
    const int n4 = p.sq * p.hidden / 4;
    for (int i = tid; i < n4; i += kSEV3Threads) {
      cp_async16(smem_addr(w1s + 4 * i), p.w_se1 + 4 * i, true);
      cp_async16(smem_addr(w2s + 4 * i), p.w_se2 + 4 * i, true);
    }
    bf::cp_async_commit();
  }
  // PDL (pdl.h): the pool reads kernel 1's partial sums at once: the wait leads; one CTA per image, the
  // trigger follows.
  pdl::wait();
  pdl::launch_dependents();
  for (int c = tid; c < p.hidden; c += kSEV3Threads) {
    float s = 0.f;
    for (int b = 0; b < p.row_blocks; ++b) s += p.partial[((size_t)n * p.row_blocks + b) * p.hid_pad + c];
    pooled[c] = s * inv;
  }
  if constexpr (PRE) cp_async_wait<0>();  // this thread's copies of W1 and W2; the barrier makes them everyone's
  __syncthreads();

  // FC1: warp w owns rows w, w + 16, w + 32, w + 48 of W1 (of each group of 64); lanes stride
  // the hidden channels four at a time, two steps per batch: 8 independent 16-byte loads.
  const int h4 = p.hidden / 4;
  const float4* pooled4 = reinterpret_cast<const float4*>(pooled);
  for (int jb = 0; jb < p.sq; jb += 4 * kSEV3Warps) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int c0 = lane; c0 < h4; c0 += 64) {
      float4 w[2][4];
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int j = jb + warp + u * kSEV3Warps, c = c0 + t * 32;
          if constexpr (PRE)
            w[t][u] = j < p.sq && c < h4 ? reinterpret_cast<const float4*>(w1s + j * p.hidden)[c]
                                         : make_float4(0.f, 0.f, 0.f, 0.f);
          else
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
      const int j = jb + warp + u * kSEV3Warps;
      if (lane == 0 && j < p.sq) {
        const float v = s + p.b_se1[j];
        squeezed[j] = v / (1.f + expf(-v));
      }
    }
  }
  __syncthreads();

  // FC2: W2 rows c0 .. c0 + 31 are 32 * sq contiguous floats; copy them (coalesced, 16 bytes a
  // lane, 8 loads in flight), then lane l reduces row c0 + l, starting at column l mod sq so that
  // a bank serves at most two words per step for sq >= 20 (up to 32 with sq = 32 or 64 unrotated).
  if (warp >= fc2_warps) return;
  float* ws = stage + warp * 32 * p.sq;
  float4* ws4 = reinterpret_cast<float4*>(ws);
  for (int c0 = warp * 32; c0 < p.hidden; c0 += fc2_warps * 32) {
    const int rows = min(32, p.hidden - c0), n4 = rows * p.sq / 4;  // hidden % 8 == 0: rows * sq % 4 == 0
    if constexpr (PRE) {
      ws = w2s + c0 * p.sq;  // the rows are in shared memory already
    } else {
      const float4* src = reinterpret_cast<const float4*>(p.w_se2 + (size_t)c0 * p.sq);
      for (int i0 = lane; i0 < n4; i0 += 8 * 32) {
        float4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u)
          v[u] = i0 + u * 32 < n4 ? __ldg(src + i0 + u * 32) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int u = 0; u < 8; ++u)
          if (i0 + u * 32 < n4) ws4[i0 + u * 32] = v[u];
      }
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

__global__ void __launch_bounds__(kSEV3Threads) se_v3_kernel(const Params p, int fc2_warps) {
  se_v3_body<false>(p, fc2_warps);
}

__global__ void __launch_bounds__(kSEV3Threads) se_v3p_kernel(const Params p, int fc2_warps) {  // W1, W2 prefetched
  se_v3_body<true>(p, fc2_warps);
}

// BN of project_v3 for C_out: the fewest 64-wide N tiles, then the narrowest multiple of 16
// that covers C_out in that many tiles (16 -> 16, 24 -> 32, 40 -> 48, 80 -> 2 x 48, 320 -> 5 x 64).
__host__ __device__ constexpr int project_v3_bn(int c_out) {
  return round_up((c_out + round_up(c_out, 64) / 64 - 1) / (round_up(c_out, 64) / 64), 16);
}

namespace {

// project_v3 (BULK = false: fixed shared memory, occupancy cached) or project_bulk (shared memory
// by hidden, occupancy asked per call), persistent: as many CTAs as fit, at most one per unit.
// pdl: programmatic dependent launch (project_v3 only: project_bulk has no wait, so BULK ignores it).
template <int BN, bool BULK>
cudaError_t launch_project_bn(const Params& p, cudaStream_t stream, bool pdl = false) {
  static DeviceSlots slots;
  const auto kernel = BULK ? project_bulk_kernel<BN> : project_v3_kernel<BN>;
  const int smem = BULK ? project_bulk_smem_bytes(p.hidden, p.hk_pad, BN) : project_v3_smem_bytes(BN);
  int dev = 0;
  cudaError_t err = prepare(kernel, slots, smem, kProjectThreads, dev, BULK);
  if (err != cudaSuccess) return err;
  const int n_tiles = (p.C_out + BN - 1) / BN;
  const long long units = (long long)((p.N * p.Ho * p.Wo + kProjV3BM - 1) / kProjV3BM) * n_tiles;
  const int grid = (int)std::min<long long>(units, (long long)slots.ctas_per_sm[dev] * slots.sms[dev]);
  if (!BULK && pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, dim3(grid), dim3(kProjectThreads), smem, stream, p, n_tiles);
  kernel<<<grid, kProjectThreads, smem, stream>>>(p, n_tiles);
  return cudaGetLastError();
}

// project_v10, persistent: as many CTAs as fit, at most one per unit.
template <int BN>
cudaError_t launch_project_v10_bn(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  const auto kernel = project_v10_kernel<BN>;
  const int smem = project_v10_smem_bytes(BN);
  int dev = 0;
  cudaError_t err = prepare(kernel, slots, smem, kProjV10Threads, dev);
  if (err != cudaSuccess) return err;
  const int n_tiles = (p.C_out + BN - 1) / BN;
  const long long units = (long long)((p.N * p.Ho * p.Wo + kProjV10BM - 1) / kProjV10BM) * n_tiles;
  const int grid = (int)std::min<long long>(units, (long long)slots.ctas_per_sm[dev] * slots.sms[dev]);
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, dim3(grid), dim3(kProjV10Threads), smem, stream, p, n_tiles);
  kernel<<<grid, kProjV10Threads, smem, stream>>>(p, n_tiles);
  return cudaGetLastError();
}

// project_v9 / v9t: as many CTAs as fit (shared memory by hidden and C_out: occupancy asked per call), at most one per
// kProjV9Warps tasks.
template <typename Kernel>
cudaError_t launch_v9(Kernel kernel, DeviceSlots& slots, int smem, const Params& p, cudaStream_t stream, bool pdl) {
  int dev = 0;
  cudaError_t err = prepare(kernel, slots, smem, kProjV9Threads, dev, true);
  if (err != cudaSuccess) return err;
  const long long tasks = ((long long)p.N * p.Ho * p.Wo + 15) / 16;
  const int grid = (int)std::min<long long>((tasks + kProjV9Warps - 1) / kProjV9Warps,
                                            (long long)slots.ctas_per_sm[dev] * slots.sms[dev]);
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, dim3(grid), dim3(kProjV9Threads), smem, stream, p);
  kernel<<<grid, kProjV9Threads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <int NT, int DEPTH>
cudaError_t launch_project_v9_nt_depth(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  return launch_v9(project_v9_kernel<NT, DEPTH>, slots, project_v9_smem_bytes(p.hidden, p.C_out), p, stream, pdl);
}

template <int NT, bool BULK>
cudaError_t launch_project_v9t_nt(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  const auto kernel = BULK ? project_v9b_kernel<NT> : project_v9t_kernel<NT>;
  return launch_v9(kernel, slots, project_v9t_smem_bytes(p.hidden, p.C_out, BULK), p, stream, pdl);
}

bool project_v9sx_requested() {  // "1": the shortcut's rows staged too (project_v9sx_kernel)
  const char* v = std::getenv("CUDA_KERNELS_PROJ_V9_SX");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

bool project_v9sr_requested() {  // "1": the shortcut in registers one task ahead (project_v9sr_kernel)
  const char* v = std::getenv("CUDA_KERNELS_PROJ_V9_RX");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

template <int NT>
cudaError_t launch_project_v9sr_nt(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  return launch_v9(project_v9sr_kernel<NT>, slots, project_v9t_smem_bytes(p.hidden, p.C_out, false, true), p, stream,
                   pdl);
}

// CUDA_KERNELS_PROJ_V9_EF (read at every call; on unless "0" since session 38): project_v9s reads D from L2
// evict_first (project_v9se_kernel), the read half of the MB_D_L2_HINTS build chosen per launch instead of per build:
// the blocks whose D is larger than L2 (B0's 2.0 / 2.1: 87 / 115 MB) keep the lines not yet read. s38 call 4: B0's
// 2.1 alone 129.9 -> 125.4 us, 2.0 -1, 3.0 / 3.1 unchanged; B0 end to end -5.9 us, B2 +0.5 (the hints build as a
// whole, stores and reads, cost B2 85 us in s37 call 2).
bool project_v9_evict_first_requested() {
  const char* v = std::getenv("CUDA_KERNELS_PROJ_V9_EF");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

template <int NT>
cudaError_t launch_project_v9se_nt(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  return launch_v9(project_v9se_kernel<NT>, slots, project_v9t_smem_bytes(p.hidden, p.C_out, false, true), p, stream,
                   pdl);
}

template <int NT, bool SX>
cudaError_t launch_project_v9s_nt(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  const auto kernel = SX ? project_v9sx_kernel<NT> : project_v9s_kernel<NT>;
  return launch_v9(kernel, slots, project_v9t_smem_bytes(p.hidden, p.C_out, false, true, SX && p.residual), p, stream,
                   pdl);
}

// project_v9s unless CUDA_KERNELS_PROJ_V9_SS=0 (default since session 20: B0 1.685 -> 1.635 ms in s20 call 3), where
// its tasks lie in one image each and its shared memory fits.
bool project_v9s_runs(const Params& p) {
  const char* v = std::getenv("CUDA_KERNELS_PROJ_V9_SS");
  return (v == nullptr || std::strcmp(v, "0") != 0) && project_v9s_fits(p, p.residual && project_v9sx_requested());
}

bool project_v9_bulk_requested() {  // "1": the bulk-copy loader (off: measured +0.4 us on B0 in s20 call 1)
  const char* v = std::getenv("CUDA_KERNELS_PROJ_V9_BULK");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

template <int NT>
cudaError_t launch_project_v9_nt(const Params& p, cudaStream_t stream, bool pdl) {
  const bool bulk = project_v9_bulk_requested();
  if (!project_v9_runs_ring(p)) {
    if (!bulk && project_v9s_runs(p)) {
      if (project_v9sx_requested()) return launch_project_v9s_nt<NT, true>(p, stream, pdl);
      if (project_v9sr_requested() && p.residual) return launch_project_v9sr_nt<NT>(p, stream, pdl);
      if (project_v9_evict_first_requested()) return launch_project_v9se_nt<NT>(p, stream, pdl);
      return launch_project_v9s_nt<NT, false>(p, stream, pdl);
    }
    return bulk ? launch_project_v9t_nt<NT, true>(p, stream, pdl) : launch_project_v9t_nt<NT, false>(p, stream, pdl);
  }
  const char* depth = std::getenv("CUDA_KERNELS_PROJ_V9_DEPTH");
  if (depth != nullptr && std::strcmp(depth, "16") == 0) return launch_project_v9_nt_depth<NT, 16>(p, stream, pdl);
  return launch_project_v9_nt_depth<NT, kProjV9Depth>(p, stream, pdl);
}

}  // namespace

// Whether project_v9 runs its ring of loads in registers (project_v9_kernel): where the task-staged loaders
// (project_v9s / v9t) do not fit, or with CUDA_KERNELS_PROJ_V9_LOAD=ring. They fit where the ring lost (B0 2.347 ms
// against the ring's 2.406, examples/measurements/mbconv/v9/call3).
bool project_v9_runs_ring(const Params& p) {
  const char* load = std::getenv("CUDA_KERNELS_PROJ_V9_LOAD");
  if (load != nullptr && std::strcmp(load, "ring") == 0) return true;
  const bool bulk = project_v9_bulk_requested();
  if (!bulk && project_v9s_runs(p)) return false;
  return project_v9t_smem_bytes(p.hidden, p.C_out, bulk) > kProjV9TMaxSmem;
}

bool project_v9s_fits(const Params& p, bool staged_shortcut) {
  return (p.Ho * p.Wo) % 16 == 0 &&
         project_v9t_smem_bytes(p.hidden, p.C_out, false, true, staged_shortcut) <= kProjV9SMaxSmem;
}

// Whether one of project_v9's task-staged loaders fits (project_v9s, or project_v9t with the loader switches at
// their defaults): structural, unlike project_v9_runs_ring, which also follows CUDA_KERNELS_PROJ_V9_LOAD=ring.
bool project_v9_staged_fits(const Params& p) {
  return project_v9s_runs(p) || project_v9t_smem_bytes(p.hidden, p.C_out) <= kProjV9TMaxSmem;
}


bool project_bulk_applies(int hidden, int hk_pad, int c_out) {
  return hidden % 16 == 0 && project_bulk_smem_bytes(hidden, hk_pad, project_v3_bn(c_out)) <= kProjBulkMaxSmem;
}

// Version 7 where project_v7 does not apply: version 3's projection alone (kernel 1 wrote the scale).
cudaError_t launch_project_v3_only(const Params& p, cudaStream_t stream, bool pdl) {
  if (p.hidden % 8 || p.hidden < 8) return cudaErrorInvalidValue;
  switch (project_v3_bn(p.C_out)) {
    case 16: return launch_project_bn<16, false>(p, stream, pdl);
    case 32: return launch_project_bn<32, false>(p, stream, pdl);
    case 48: return launch_project_bn<48, false>(p, stream, pdl);
    case 64: return launch_project_bn<64, false>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

bool project_v9_applies(int hidden, int c_out) {
  const int nt = c_out / 8;
  return hidden % 16 == 0 && c_out % 8 == 0 && (nt == 2 || nt == 3 || nt == 5 || nt == 6 || nt == 10 || nt == 11) &&
         project_v9_smem_bytes(hidden, c_out) <= kProjV9MaxSmem;
}

cudaError_t launch_project_v9(const Params& p, cudaStream_t stream, bool pdl) {
  if (!project_v9_applies(p.hidden, p.C_out)) return cudaErrorInvalidValue;
  switch (p.C_out / 8) {
    case 2: return launch_project_v9_nt<2>(p, stream, pdl);
    case 3: return launch_project_v9_nt<3>(p, stream, pdl);
    case 5: return launch_project_v9_nt<5>(p, stream, pdl);
    case 6: return launch_project_v9_nt<6>(p, stream, pdl);
    case 10: return launch_project_v9_nt<10>(p, stream, pdl);
    case 11: return launch_project_v9_nt<11>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

// CUDA_KERNELS_PROJ_V10 (read at every call): "off" never runs project_v10, "late" runs it wherever project_v9 does
// not apply, "all" wherever version 9 projects; unset or anything else is "auto": where project_v9 does not apply and
// project_v3 would have fewer than 1.5 units (128-row x BN tiles) per SM, i.e. under 6 warps per SM (project_v10_auto;
// measured: B0's features.6.0-6.3, 147 units on 132 SMs, 35.9 -> 27.2 and 64.4 -> 44.3 us, while at 5.x (392 units)
// and 7.0 (245) project_v3 stays faster, examples/measurements/mbconv/s12/call2).
int project_v10_mode() {
  const char* v = std::getenv("CUDA_KERNELS_PROJ_V10");
  if (v == nullptr) return 3;
  if (std::strcmp(v, "off") == 0) return 0;
  if (std::strcmp(v, "late") == 0) return 1;
  if (std::strcmp(v, "all") == 0) return 2;
  return 3;
}

bool project_v10_auto(const Params& p) {
  static int sms[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev >= kMaxDevices) return false;
  if (sms[dev] == 0 && cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return false;
  const int bn = project_v3_bn(p.C_out);
  const long long units = (long long)((p.N * p.Ho * p.Wo + kProjV3BM - 1) / kProjV3BM) * ((p.C_out + bn - 1) / bn);
  return 2 * units < 3LL * sms[dev];
}

cudaError_t launch_project_v10(const Params& p, cudaStream_t stream, bool pdl) {
  if (p.hidden % 8 || p.hidden < 8) return cudaErrorInvalidValue;
  switch (project_v3_bn(p.C_out)) {
    case 16: return launch_project_v10_bn<16>(p, stream, pdl);
    case 32: return launch_project_v10_bn<32>(p, stream, pdl);
    case 48: return launch_project_v10_bn<48>(p, stream, pdl);
    case 64: return launch_project_v10_bn<64>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

// se_v3p_kernel's shared memory: pooled, squeezed, W1 and W2 whole (se_v3_body's PRE).
int se_v3_pre_smem_bytes(const Params& p) { return (p.hid_pad + round_up(p.sq, 4) + 2 * p.sq * p.hidden) * 4; }

// CUDA_KERNELS_SE_V3_PRE, on unless "0" (read at every call; default since session 22: B0 -5.6 us in s22 call 1):
// se_v3p_kernel where its shared memory is at most kSEV3PreMaxSmem (B0's 1.0-4.0: 1.5-20 KB; not hidden 1152's 443 KB).
constexpr int kSEV3PreMaxSmem = 100 * 1024;
bool se_v3_pre(const Params& p) {
  const char* v = std::getenv("CUDA_KERNELS_SE_V3_PRE");
  return (v == nullptr || std::strcmp(v, "0") != 0) && se_v3_pre_smem_bytes(p) <= kSEV3PreMaxSmem;
}

// One CTA per image of se_v3_kernel or se_v3p_kernel (the same signature) with `smem` bytes and `fc2_warps`.
cudaError_t launch_se_v3_kernel(void (*kernel)(const Params, int), DeviceSlots& slots, int smem, int fc2_warps,
                                const Params& p, cudaStream_t stream, bool pdl) {
  int dev = 0;
  const cudaError_t err = prepare(kernel, slots, smem, kSEV3Threads, dev);
  if (err != cudaSuccess) return err;
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, dim3(p.N), dim3(kSEV3Threads), smem, stream, p, fc2_warps);
  kernel<<<p.N, kSEV3Threads, smem, stream>>>(p, fc2_warps);
  return cudaGetLastError();
}

cudaError_t launch_se_v3(const Params& p, cudaStream_t stream, bool pdl) {
  if (p.hidden % 8 || p.hidden < 8 || p.sq < 1) return cudaErrorInvalidValue;
  if (se_v3_pre(p)) {
    static DeviceSlots pre_slots;
    return launch_se_v3_kernel(se_v3p_kernel, pre_slots, se_v3_pre_smem_bytes(p), kSEV3Warps, p, stream, pdl);
  }
  static DeviceSlots slots;
  const int base = (p.hid_pad + round_up(p.sq, 4)) * 4, per_warp = 32 * p.sq * 4;
  const int fc2_warps = std::max(1, std::min(kSEV3Warps, (110 * 1024 - base) / per_warp));
  return launch_se_v3_kernel(se_v3_kernel, slots, base + fc2_warps * per_warp, fc2_warps, p, stream, pdl);
}

cudaError_t launch_se_project_v3(const Params& p, cudaStream_t stream, bool bulk, bool pdl) {
  cudaError_t err = launch_se_v3(p, stream, pdl);
  if (err != cudaSuccess) return err;
  if (bulk && project_bulk_applies(p.hidden, p.hk_pad, p.C_out)) switch (project_v3_bn(p.C_out)) {
      case 16: return launch_project_bn<16, true>(p, stream);
      case 32: return launch_project_bn<32, true>(p, stream);
      case 48: return launch_project_bn<48, true>(p, stream);
      case 64: return launch_project_bn<64, true>(p, stream);
      default: return cudaErrorInvalidValue;
    }
  switch (project_v3_bn(p.C_out)) {
    case 16: return launch_project_bn<16, false>(p, stream, pdl);
    case 32: return launch_project_bn<32, false>(p, stream, pdl);
    case 48: return launch_project_bn<48, false>(p, stream, pdl);
    case 64: return launch_project_bn<64, false>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mb
