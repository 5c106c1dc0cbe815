// Kernel 2 of the MBConv block, version 7 (NOTES.md, "MBConv version 7"): the projection at the late stages
// (Ho Wo <= 400), where version 3's 128-row persistent tiles leave 4-12 warps per SM (147-392 CTAs of 4 warps)
// and each warp spends ~460 instructions per 32 channels (per-row scale addresses, copy addresses).
//
//   Rows are *virtual*: image n's pixels are virtual rows n * hw16 .. n * hw16 + hw - 1 (hw16 = Ho Wo rounded
//   up to 16; the rest of each image's rows are zero-filled and never stored), so every 16-row MMA fragment lies
//   in one image and takes its SE scale from one row of `scale` (2 loads per 16 channels, not 8).
//   A CTA owns 64 virtual rows x BN output columns (one unit; not persistent): 4 row warps of 16 rows x BN, times
//   KS k-groups (8 or 16 warps). Each cp.async stage brings 64 channels of D and V (3 stages); k-group kh
//   multiplies the stage's 16-channel slices kh, kh + KS, ... At the end the groups 1 .. KS-1 leave their
//   accumulators in shared memory, group 0 adds them and runs version 3's epilogue (bias, shortcut, fp16 store).
//   Rounding as PyTorch's fp16 block: the scale rounded to fp16, the fp16 product of the A fragment with it
//   (version 3 multiplies in fp32 by the fp32 scale); the sums over k per k-group, then the groups added.
#include <algorithm>

#include "mbconv.cuh"
#include "mbconv_ptx.cuh"
#include "pdl.h"

namespace mb {

constexpr int kP7BM = 64, kP7BK = 64, kP7LD = kP7BK + 8, kP7Stages = 3, kP7MaxHW = 400;

__host__ __device__ constexpr int project_v7_smem_bytes(int bn) { return kP7Stages * (kP7BM + bn) * kP7LD * 2; }
// The k-groups' exchange of accumulators reuses the stages: (KS - 1) x 64 rows x BN fp32.
static_assert(3 * kP7BM * 64 * 4 <= project_v7_smem_bytes(64) && 3 * kP7BM * 16 * 4 <= project_v7_smem_bytes(16),
              "the reduction fits the stages");

// project_v3_bn (mbconv_v3.cu): the fewest 64-wide N tiles, then the narrowest multiple of 16.
__host__ __device__ constexpr int project_v7_bn(int c_out) {
  return round_up((c_out + round_up(c_out, 64) / 64 - 1) / (round_up(c_out, 64) / 64), 16);
}
__host__ __device__ constexpr int project_v7_ks(int hw) { return round_up(hw, 16) <= 64 ? 4 : 2; }

// The SE scale on an A fragment as PyTorch's fp16 block rounds it: the scale to fp16 (the block's sigmoid output
// is fp16), then the fp16 product, correctly rounded (HMUL2): 2 conversions and 4 HMUL2 per 16 x 16 fragment,
// where version 3's fp32 product takes 8 + 8 + 4 (the two differ by at most one fp16 rounding of the scale).
__device__ __forceinline__ void scale_fragment_v7(uint32_t (&a)[4], float2 slo, float2 shi) {
  const __half2 lo = __float22half2_rn(slo), hi = __float22half2_rn(shi);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const __half2 v = __hmul2(*reinterpret_cast<const __half2*>(&a[r]), r < 2 ? lo : hi);
    a[r] = *reinterpret_cast<const uint32_t*>(&v);
  }
}

// out[P x C_out] = (D * scale[image]) V^T + b (+ x) over virtual rows; blockIdx.x = M tile * n_tiles + N tile.
template <int BN, int KS>
__global__ void __launch_bounds__(128 * KS, KS == 4 ? 2 : 3) project_v7_kernel(const Params p, int n_tiles, int hw16) {
  constexpr int BM = kP7BM, BK = kP7BK, LD = kP7LD, STAGES = kP7Stages, THREADS = 128 * KS;
  constexpr int NT = BN / 8, NP = BN / 16, J = BK / 16 / KS;
  constexpr int A_COPIES = BM * BK / 8 / THREADS, B_CHUNKS = BN * BK / 8;
  constexpr int B_COPIES = (B_CHUNKS + THREADS - 1) / THREADS;
  static_assert(BN % 16 == 0 && BN <= 64 && (KS == 1 || KS == 2 || KS == 4) && A_COPIES >= 1, "config");
  extern __shared__ __align__(16) uint8_t smem[];
  __half* As = reinterpret_cast<__half*>(smem);  // [STAGES][BM][LD]
  __half* Bs = As + STAGES * BM * LD;             // [STAGES][BN][LD]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wr = warp & 3, kh = warp >> 2;
  const int hw = p.Ho * p.Wo;
  const int m_tile = (int)blockIdx.x / n_tiles, n0 = ((int)blockIdx.x - m_tile * n_tiles) * BN, v0 = m_tile * BM;
  const int ktiles = (p.hidden + BK - 1) / BK;
  // PDL (pdl.h): every copy reads D (kernel 1's output) and every thread copies: the wait leads; one unit per
  // CTA, so the trigger follows at once (the dependents launch when the last wave runs).
  pdl::wait();
  pdl::launch_dependents();

  // This thread's copy slots, fixed for the CTA: A chunk i = tid + j THREADS is virtual row i / 8, channels
  // c = (tid % 8) * 8 of each stage (the same c for every j); its source steps by BK per stage; rows past their
  // image (or the batch), channels past `hidden` (A) or hk_pad (B) and V rows past C_out are zero-filled.
  const int c = (tid & 7) * 8;
  const __half* a_src[A_COPIES];
  bool a_row_ok[A_COPIES];
#pragma unroll
  for (int j = 0; j < A_COPIES; ++j) {
    const int v = v0 + (tid + j * THREADS) / 8, im = v / hw16, rr = v - im * hw16;
    a_row_ok[j] = im < p.N && rr < hw;
    a_src[j] = p.d + (a_row_ok[j] ? (size_t)(im * hw + rr) * p.hidden + c : 0);
  }
  int b_src[B_COPIES];  // element offsets in V (small: 32 bits spare registers at 80 a thread)
  bool b_row_ok[B_COPIES];
#pragma unroll
  for (int j = 0; j < B_COPIES; ++j) {
    const int r = (tid + j * THREADS) / 8;
    b_row_ok[j] = n0 + r < p.C_out;
    b_src[j] = b_row_ok[j] ? (n0 + r) * p.hk_pad + c : 0;
  }
  const uint32_t a_dst = smem_addr(As + (tid / 8) * LD + c), b_dst = smem_addr(Bs + (tid / 8) * LD + c);
  int ld_kt = 0, ld_stage = 0;  // the next stage to fill (issue runs STAGES - 1 ahead)
  auto issue = [&]() {
    if (ld_kt < ktiles) {
      const int k = ld_kt * BK + c;
      const bool a_k = k < p.hidden, b_k = k < p.hk_pad;
#pragma unroll
      for (int j = 0; j < A_COPIES; ++j) {
        cp_async16(a_dst + (ld_stage * BM + j * (THREADS / 8)) * LD * 2, a_src[j], a_k && a_row_ok[j]);
        a_src[j] += BK;
      }
#pragma unroll
      for (int j = 0; j < B_COPIES; ++j) {
        if (B_CHUNKS % THREADS && tid + j * THREADS >= B_CHUNKS) break;
        cp_async16(b_dst + (ld_stage * BN + j * (THREADS / 8)) * LD * 2, p.w_proj + b_src[j], b_k && b_row_ok[j]);
        b_src[j] += BK;
      }
    }
    cp_async_commit();  // an empty group past the end keeps wait_group's count uniform
    ++ld_kt;
    if (++ld_stage == STAGES) ld_stage = 0;
  };

  // This warp's fragment: virtual rows vw .. vw + 15, all of image img (clamped: a fragment past the batch is
  // zeros and never stored).
  const int vw = v0 + wr * 16, img = min(vw / hw16, p.N - 1);
  const float* srow = p.scale + (size_t)img * p.hid_pad;
  const int g = lane >> 2, q = lane & 3;
  const int a_row = lane & 15, a_k = (lane >> 4) * 8;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_k = ((lane >> 3) & 1) * 8;
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[j][k] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) issue();
  int stage = 0;
  constexpr int UNROLL = KS == 2 ? 1 : 2;  // KS = 2, BN = 64 unrolled by 2 spills at 80 registers
#pragma unroll UNROLL
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage kt has landed; everyone is done with stage kt - 1, which is refilled next
    issue();  // stage kt + STAGES - 1
    const __half* a_s = As + stage * BM * LD + (wr * 16 + a_row) * LD + a_k;
    const __half* b_s = Bs + stage * BN * LD + b_row * LD + b_k;
#pragma unroll
    for (int jj = 0; jj < J; ++jj) {
      const int col = (kh + jj * KS) * 16, k = kt * BK + col;
      // D is zero past `hidden`: any finite scale serves; clamped to stay in the row (the tail is never written).
      const float2 slo = __ldg(reinterpret_cast<const float2*>(srow + min(k + 2 * q, p.hidden - 2)));
      const float2 shi = __ldg(reinterpret_cast<const float2*>(srow + min(k + 2 * q + 8, p.hidden - 2)));
      uint32_t a[4];
      ldmatrix_x4(a, smem_addr(a_s + col));
      // a[0]: (row g, k..k+1), a[1]: (row g+8, k..), a[2]: (row g, k+8..), a[3]: (row g+8, k+8..)
      scale_fragment_v7(a, slo, shi);
#pragma unroll
      for (int np = 0; np < NP; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_addr(b_s + np * 16 * LD + col));
        mma_m16n8k16(acc[2 * np], a, b[0], b[1]);
        mma_m16n8k16(acc[2 * np + 1], a, b[2], b[3]);
      }
    }
    if (++stage == STAGES) stage = 0;
  }
  cp_async_wait<0>();

  float* red = reinterpret_cast<float*>(smem);  // groups 1 .. KS-1 hand their sums to group 0 (lane-major)
  if constexpr (KS > 1) {
    __syncthreads();  // every warp is done with the stages
    if (kh > 0) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k) red[(((kh - 1) * 4 + wr) * NT * 4 + j * 4 + k) * 32 + lane] = acc[j][k];
    }
    __syncthreads();
    if (kh > 0) return;
  }

  // Epilogue (group 0): the other groups' sums, + bias (+ x), fp16 store of the fragment rows inside the image
  // and the columns < C_out. Element offsets fit 32 bits (the binding keeps out < 2^31 elements).
  const int rr0 = vw - (vw / hw16) * hw16 + g;  // the image's pixel of fragment row g (row g + 8: rr0 + 8)
  const bool img_ok = vw / hw16 < p.N;
  const int row0 = (img * hw + rr0) * p.C_out;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int o = 0; o < KS - 1; ++o)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[nt][k] += red[((o * 4 + wr) * NT * 4 + nt * 4 + k) * 32 + lane];
    const int col = n0 + nt * 8 + 2 * q;
    const bool col_ok = col < p.C_out;  // C_out is even: both columns or neither
    const float bias0 = col_ok ? __ldg(p.b_proj + col) : 0.f, bias1 = col_ok ? __ldg(p.b_proj + col + 1) : 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!col_ok || !img_ok || rr0 + 8 * h >= hw) continue;
      const int off = row0 + 8 * h * p.C_out + col;
      float v0 = acc[nt][2 * h] + bias0, v1 = acc[nt][2 * h + 1] + bias1;
      if (p.residual) {  // stride 1 and C_in == C_out: x has out's layout
        const float2 xv = __half22float2(*reinterpret_cast<const __half2*>(p.x + off));
        v0 += xv.x;
        v1 += xv.y;
      }
      *reinterpret_cast<__half2*>(p.out + off) = __floats2half2_rn(v0, v1);
    }
  }
}

namespace {

template <int BN, int KS>
cudaError_t launch_v7(const Params& p, cudaStream_t stream, bool pdl) {
  constexpr int kMaxDevices = 64;
  static int configured[kMaxDevices] = {};
  const auto kernel = project_v7_kernel<BN, KS>;
  const int smem = project_v7_smem_bytes(BN);
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (!configured[dev]) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    configured[dev] = 1;
  }
  const int hw16 = round_up(p.Ho * p.Wo, 16), n_tiles = (p.C_out + BN - 1) / BN;
  const long long units = ((long long)p.N * hw16 + kP7BM - 1) / kP7BM * n_tiles;
  if (units >= (1LL << 31)) return cudaErrorInvalidValue;
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, dim3((unsigned)units), dim3(128 * KS), smem, stream, p, n_tiles, hw16);
  kernel<<<(unsigned)units, 128 * KS, smem, stream>>>(p, n_tiles, hw16);
  return cudaGetLastError();
}

template <int KS>
cudaError_t launch_v7_ks(const Params& p, cudaStream_t stream, bool pdl) {
  switch (project_v7_bn(p.C_out)) {
    case 16: return launch_v7<16, KS>(p, stream, pdl);
    case 32: return launch_v7<32, KS>(p, stream, pdl);
    case 48: return launch_v7<48, KS>(p, stream, pdl);
    case 64: return launch_v7<64, KS>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool project_v7_applies(int ho, int wo) { return ho * wo <= kP7MaxHW; }

cudaError_t launch_project_v7(const Params& p, cudaStream_t stream, bool pdl) {
  if (p.hidden % 8 || p.hidden < 8 || !project_v7_applies(p.Ho, p.Wo)) return cudaErrorInvalidValue;
  return project_v7_ks(p.Ho * p.Wo) == 4 ? launch_v7_ks<4>(p, stream, pdl) : launch_v7_ks<2>(p, stream, pdl);
}

}  // namespace mb
