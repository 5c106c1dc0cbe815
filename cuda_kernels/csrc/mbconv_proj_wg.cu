// The MBConv projection on Hopper warpgroup MMAs (sm_90a; NOTES.md, "The projection on warpgroup MMAs"):
// out = (D * s) V^T + b (+ x), D [P, hidden] from kernel 1, s [N, hid_pad] the SE scale, V [cout_pad, hk_pad].
//
// One warpgroup per CTA, one 64-row tile of D (rows across images where an image has fewer) times BN output channels
// (C_out, or half of it past 256). The hidden dimension streams in 64-channel chunks through kProjWgStages cp.async
// stages: A (D's 64 x 64) at a padded pitch for ldmatrix, B (V's BN x 64) in the 128-byte-swizzled K-major layout a
// wgmma descriptor reads. Each warp loads its 16 rows of A into the register layout of wgmma's A operand, scales them
// by s of each row's image (the product in fp32, rounded once to fp16: project_v3's A values), and the warpgroup runs
// four m64nBNk16 wgmmas per chunk with A from registers. The scales of the next chunk are loaded while the tensor
// cores work. Against project_v3 / v10 (mma.sync, 32-channel steps, 4-8 warps per 64-128 rows): one barrier per 64
// channels, and the whole BN-wide row block per warp, so D is read and scaled once per output tile.
// Products and sums: each output is a sum over k of the same fp16 products as project_v3's, in another order (the
// tensor core's k16 sums, then chunks): close, not bitwise.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "mbconv.cuh"
#include "mbconv_launch.cuh"
#include "mbconv_ptx.cuh"
#include "pdl.h"
#include "ptx_sm90.cuh"
#include "wgmma.cuh"

namespace mb {

constexpr int kProjWgRows = 64, kProjWgK = 64, kProjWgStages = 3, kProjWgLda = kProjWgK + 8;
constexpr int kProjWgThreads = 128;

// Shared memory (cuda_kernels/mbconv.py project_wg_smem_bytes mirrors it): 1 KB of alignment slack, then per stage
// B (BN rows of 128 bytes, 1024-aligned) and A (64 rows at kProjWgLda halves).
__host__ __device__ constexpr int project_wg_smem_bytes(int bn) {
  return 1024 + kProjWgStages * (bn * 128 + kProjWgRows * kProjWgLda * 2);
}

// The output tile width for C_out: C_out itself up to 256, else half of it (a multiple of 8); 0 where no wgmma shape
// is built (gen_wgmma.py). cuda_kernels/mbconv.py project_wg_bn mirrors it.
__host__ __device__ constexpr int project_wg_bn(int c_out) {
  const int bn = c_out <= 256 ? c_out : (c_out % 16 == 0 ? c_out / 2 : 0);
  return (bn == 16 || bn == 24 || bn == 40 || bn == 48 || bn == 80 || bn == 88 || bn == 112 || bn == 120 || bn == 160 ||
          bn == 176 || bn == 192 || bn == 208)
             ? bn
             : 0;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int BN>
__device__ __forceinline__ void wgmma_rs(float (&d)[BN / 2], const uint32_t (&a)[4], uint64_t desc) {
  if constexpr (BN == 16) bf::wgmma_m64n16k16_rs(d, a, desc, 1);
  else if constexpr (BN == 24) bf::wgmma_m64n24k16_rs(d, a, desc, 1);
  else if constexpr (BN == 40) bf::wgmma_m64n40k16_rs(d, a, desc, 1);
  else if constexpr (BN == 48) bf::wgmma_m64n48k16_rs(d, a, desc, 1);
  else if constexpr (BN == 80) bf::wgmma_m64n80k16_rs(d, a, desc, 1);
  else if constexpr (BN == 88) bf::wgmma_m64n88k16_rs(d, a, desc, 1);
  else if constexpr (BN == 112) bf::wgmma_m64n112k16_rs(d, a, desc, 1);
  else if constexpr (BN == 120) bf::wgmma_m64n120k16_rs(d, a, desc, 1);
  else if constexpr (BN == 160) bf::wgmma_m64n160k16_rs(d, a, desc, 1);
  else if constexpr (BN == 176) bf::wgmma_m64n176k16_rs(d, a, desc, 1);
  else if constexpr (BN == 192) bf::wgmma_m64n192k16_rs(d, a, desc, 1);
  else bf::wgmma_m64n208k16_rs(d, a, desc, 1);
}
#endif

template <int BN>
__global__ void __launch_bounds__(kProjWgThreads) project_wg_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int B_BYTES = BN * 128, A_BYTES = kProjWgRows * kProjWgLda * 2;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const uint32_t b_base = (smem_addr(smem_raw) + 1023) & ~1023u;  // B slots 1024-aligned (the swizzle's blocks)
  const uint32_t a_base = b_base + kProjWgStages * B_BYTES;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int HW = p.Ho * p.Wo, P = p.N * HW;
  const int m0 = blockIdx.x * kProjWgRows, n0 = blockIdx.y * BN;
  const int chunks = (p.hidden + kProjWgK - 1) / kProjWgK;
  pdl::wait();  // D and the scale are the previous kernels' output
  pdl::launch_dependents();

  // Chunk c into stage `slot`: 64-row x 64-channel A pieces and BN x 64 B pieces of 16 bytes, zero past P / hidden /
  // C_out / hk_pad (hidden and hk_pad are multiples of 8: a piece is wholly in or out); one commit group.
  auto load_chunk = [&](int c, int slot) {
    const int k0 = c * kProjWgK;
    for (int i = tid; i < kProjWgRows * 8; i += kProjWgThreads) {
      const int r = i >> 3, ch = i & 7, row = m0 + r, col = k0 + ch * 8;
      const bool ok = row < P && col < p.hidden;
      cp_async16(a_base + slot * A_BYTES + (r * kProjWgLda + ch * 8) * 2, p.d + (ok ? (size_t)row * p.hidden + col : 0),
                 ok);
    }
    for (int i = tid; i < BN * 8; i += kProjWgThreads) {
      const int r = i >> 3, ch = i & 7, n = n0 + r, col = k0 + ch * 8;
      const bool ok = n < p.C_out && col < p.hk_pad;
      cp_async16(b_base + slot * B_BYTES + bf::panel_offset(r, ch), p.w_proj + (ok ? (size_t)n * p.hk_pad + col : 0),
                 ok);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kProjWgStages - 1; ++s) {
    if (s < chunks) load_chunk(s, s);
    else cp_async_commit();  // empty groups keep the wait count uniform
  }

  // This lane's two rows (the wgmma A / accumulator layout: row lane / 4 and + 8 of the warp's 16) and their images'
  // scale rows (rows past P read the last image's: their A is zero)
  const int q = lane & 3, r_lo = m0 + warp * 16 + (lane >> 2), r_hi = r_lo + 8;
  const float* s_lo = p.scale + (size_t)(min(r_lo, P - 1) / HW) * p.hid_pad;
  const float* s_hi = p.scale + (size_t)(min(r_hi, P - 1) / HW) * p.hid_pad;
  // scales of chunk c, k16 step kk: [kk][0] (row lo, k..k+1), [1] (row hi, k..), [2] (lo, k+8..), [3] (hi, k+8..);
  // D is zero past hidden, so the clamped columns' scales multiply zeros
  auto load_scales = [&](int c, float2 (&sc)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int k = c * kProjWgK + kk * 16 + 2 * q;
      const int klo = min(k, p.hidden - 2), khi = min(k + 8, p.hidden - 2);
      sc[kk][0] = __ldg(reinterpret_cast<const float2*>(s_lo + klo));
      sc[kk][1] = __ldg(reinterpret_cast<const float2*>(s_hi + klo));
      sc[kk][2] = __ldg(reinterpret_cast<const float2*>(s_lo + khi));
      sc[kk][3] = __ldg(reinterpret_cast<const float2*>(s_hi + khi));
    }
  };
  float2 sc[4][4];
  load_scales(0, sc);

  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
  for (int c = 0; c < chunks; ++c) {
    cp_async_wait<kProjWgStages - 2>();  // this thread's pieces of chunk c
    bf::fence_proxy_async_smem();        // ... before the wgmma (async proxy) reads B
    __syncthreads();                     // every thread's pieces; chunk c - 1's wgmmas done (waited below)
    {
      const int next = c + kProjWgStages - 1;  // into the slot chunk c - 1 used
      if (next < chunks) load_chunk(next, next % kProjWgStages);
      else cp_async_commit();
    }
    const int slot = c % kProjWgStages;
    uint32_t a[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      ldmatrix_x4(a[kk], a_base + slot * A_BYTES + ((warp * 16 + (lane & 15)) * kProjWgLda + kk * 16 + (lane >> 4) * 8) * 2);
#pragma unroll
      for (int j = 0; j < 4; ++j) a[kk][j] = scale_half2(a[kk][j], sc[kk][j]);
    }
    if (c + 1 < chunks) load_scales(c + 1, sc);  // in flight during the MMAs and the next barrier
    bf::fence_registers(acc);
    bf::fence_registers(a);
    bf::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_rs<BN>(acc, a[kk], bf::smem_desc_sw128(b_base + slot * B_BYTES + kk * 32));
    bf::wgmma_commit();
    bf::wgmma_wait<0>();  // before a[] and this stage are reused
    bf::fence_registers(acc);
  }

  // Epilogue: + bias (+ x), fp16, from the accumulator layout: acc[4 nb + 2 h + u] is row (h ? r_hi : r_lo), column
  // n0 + 8 nb + 2 q + u
#pragma unroll
  for (int nb = 0; nb < BN / 8; ++nb) {
    const int col = n0 + nb * 8 + 2 * q;
    if (col >= p.C_out) continue;  // C_out is even: both columns or neither
    const float2 bias = __ldg(reinterpret_cast<const float2*>(p.b_proj + col));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = h ? r_hi : r_lo;
      if (row >= P) continue;
      float v0 = acc[4 * nb + 2 * h] + bias.x, v1 = acc[4 * nb + 2 * h + 1] + bias.y;
      if (p.residual) {  // stride 1 and C_in == C_out: x has out's layout
        const float2 xv = __half22float2(*reinterpret_cast<const __half2*>(p.x + (size_t)row * p.C_out + col));
        v0 += xv.x;
        v1 += xv.y;
      }
      *reinterpret_cast<__half2*>(p.out + (size_t)row * p.C_out + col) = __floats2half2_rn(v0, v1);
    }
  }
#endif
}

template <int BN>
cudaError_t launch_project_wg_bn(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  static bool sm90[kMaxDevices] = {};
  const auto kernel = project_wg_kernel<BN>;
  int dev = 0;
  cudaError_t err = prepare(kernel, slots, project_wg_smem_bytes(BN), kProjWgThreads, dev);
  if (err != cudaSuccess) return err;
  if (!sm90[dev]) {  // the kernel's body exists for sm_90a only (wgmma); elsewhere it would do nothing
    int major = 0, minor = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err != cudaSuccess) return err;
    if (major != 9 || minor != 0) return cudaErrorNotSupported;
    sm90[dev] = true;
  }
  const int P = p.N * p.Ho * p.Wo;
  const dim3 grid((P + kProjWgRows - 1) / kProjWgRows, (p.C_out + BN - 1) / BN);
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, grid, dim3(kProjWgThreads), project_wg_smem_bytes(BN), stream, p);
  kernel<<<grid, kProjWgThreads, project_wg_smem_bytes(BN), stream>>>(p);
  return cudaGetLastError();
}

// CUDA_KERNELS_PROJ_WG=off|late|all (read at every call; off by default until measured): the projection of versions 9
// and 10 on warpgroup MMAs where project_wg_bn has a shape and (late) project_v9 does not apply, or (all) everywhere
// it has one. 0 off, 1 late, 2 all.
int project_wg_mode() {
  const char* v = std::getenv("CUDA_KERNELS_PROJ_WG");
  if (v == nullptr) return 0;
  if (std::strcmp(v, "late") == 0) return 1;
  if (std::strcmp(v, "all") == 0) return 2;
  return 0;
}

bool project_wg_applies(const Params& p, int mode) {
  if (mode == 0 || project_wg_bn(p.C_out) == 0 || p.hidden % 8 || p.hidden < 8 || p.hk_pad % 8) return false;
  return mode == 2 || !project_v9_applies(p.hidden, p.C_out);
}

cudaError_t launch_project_wg(const Params& p, cudaStream_t stream, bool pdl) {
  switch (project_wg_bn(p.C_out)) {
    case 16: return launch_project_wg_bn<16>(p, stream, pdl);
    case 24: return launch_project_wg_bn<24>(p, stream, pdl);
    case 40: return launch_project_wg_bn<40>(p, stream, pdl);
    case 48: return launch_project_wg_bn<48>(p, stream, pdl);
    case 80: return launch_project_wg_bn<80>(p, stream, pdl);
    case 88: return launch_project_wg_bn<88>(p, stream, pdl);
    case 112: return launch_project_wg_bn<112>(p, stream, pdl);
    case 120: return launch_project_wg_bn<120>(p, stream, pdl);
    case 160: return launch_project_wg_bn<160>(p, stream, pdl);
    case 176: return launch_project_wg_bn<176>(p, stream, pdl);
    case 192: return launch_project_wg_bn<192>(p, stream, pdl);
    case 208: return launch_project_wg_bn<208>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mb
