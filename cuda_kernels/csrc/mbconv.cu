// Kernels 2 (squeeze-excitation) and 3 (scaled projection + shortcut) of the MBConv block, and
// the launcher of all three (see mbconv.cuh).
#include <cstdlib>
#include <cstring>

#include "mbconv.cuh"
#include "mbconv_launch.cuh"
#include "mbconv_ptx.cuh"
#include "mbconv_stem_dw.h"

namespace mb {

constexpr int kSEThreads = 256;

// One block per image: the pool from the bands' partial sums, then FC -> SiLU -> FC -> sigmoid.
// About 2 * hidden * sq MACs per image: small enough for one block of CUDA cores.
__global__ void __launch_bounds__(kSEThreads) se_kernel(const Params p) {
  extern __shared__ float se_smem[];
  float* pooled = se_smem;
  float* squeezed = se_smem + p.hid_pad;
  const int n = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float inv = 1.f / float(p.Ho * p.Wo);
  for (int c = tid; c < p.hidden; c += kSEThreads) {
    float s = 0.f;
    for (int b = 0; b < p.row_blocks; ++b) s += p.partial[((size_t)n * p.row_blocks + b) * p.hid_pad + c];
    pooled[c] = s * inv;
  }
  __syncthreads();
  for (int j = warp; j < p.sq; j += kSEThreads / 32) {
    float s = 0.f;
    for (int c = lane; c < p.hidden; c += 32) s = fmaf(p.w_se1[(size_t)j * p.hidden + c], pooled[c], s);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) {
      const float v = s + p.b_se1[j];
      squeezed[j] = v / (1.f + expf(-v));
    }
  }
  __syncthreads();
  for (int c = tid; c < p.hidden; c += kSEThreads) {
    float s = p.b_se2[c];
    for (int j = 0; j < p.sq; ++j) s = fmaf(p.w_se2[(size_t)c * p.sq + j], squeezed[j], s);
    p.scale[(size_t)n * p.hid_pad + c] = 1.f / (1.f + expf(-s));
  }
}

// out[P x C_out] = (D * scale[image]) V^T + b (+ x). 64 x 64 output tile per block, 4 warps of
// 32 x 32, k-steps of 32 double-buffered: D is read into registers, scaled in fp32, rounded and
// stored into shared memory; V arrives by cp.async (its padding makes every copy in range).
__global__ void __launch_bounds__(kProjectThreads) project_kernel(const Params p) {
  constexpr int BM = kProjectBM, BN = kProjectBN, BK = kProjectBK, LD = BK + 8;  // 80-byte rows
  __shared__ __align__(16) __half As[2][BM][LD];
  __shared__ __align__(16) __half Bs[2][BN][LD];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hw = p.Ho * p.Wo, P = p.N * hw;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  constexpr int LOADS = BM * BK / 8 / kProjectThreads;  // 16-byte chunks per thread and operand
  static_assert(BM == BN && LOADS * kProjectThreads * 8 == BM * BK, "loader split");

  uint4 ra[LOADS];
  auto fetch_a = [&](int k0) {
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
      const int i = tid + j * kProjectThreads, r = i / (BK / 8), c = (i % (BK / 8)) * 8;
      const int row = m0 + r, k = k0 + c;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (row < P && k < p.hidden) {
        v = __ldg(reinterpret_cast<const uint4*>(p.d + (size_t)row * p.hidden + k));
        const float* s = p.scale + (size_t)(row / hw) * p.hid_pad + k;
        const float4 s0 = *reinterpret_cast<const float4*>(s), s1 = *reinterpret_cast<const float4*>(s + 4);
        __half2* h = reinterpret_cast<__half2*>(&v);
        const float sc[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __half22float2(h[e]);
          h[e] = __floats2half2_rn(f.x * sc[2 * e], f.y * sc[2 * e + 1]);
        }
      }
      ra[j] = v;
    }
  };
  auto store_a = [&](int buf) {
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
      const int i = tid + j * kProjectThreads, r = i / (BK / 8), c = (i % (BK / 8)) * 8;
      *reinterpret_cast<uint4*>(&As[buf][r][c]) = ra[j];
    }
  };
  auto fetch_b = [&](int k0, int buf) {
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
      const int i = tid + j * kProjectThreads, r = i / (BK / 8), c = (i % (BK / 8)) * 8;
      cp_async16(smem_addr(&Bs[buf][r][c]), p.w_proj + (size_t)(n0 + r) * p.hk_pad + k0 + c, true);
    }
    cp_async_commit();
  };

  const int wm = warp >> 1, wn = warp & 1;
  const int a_row = lane & 15, a_k = (lane >> 4) * 8;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_k = ((lane >> 3) & 1) * 8;
  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;

  const int ktiles = p.hk_pad / BK;
  fetch_a(0);
  fetch_b(0, 0);
  store_a(0);
  cp_async_wait<0>();
  __syncthreads();
  for (int kt = 0; kt < ktiles; ++kt) {
    const int buf = kt & 1;
    const bool more = kt + 1 < ktiles;
    if (more) {  // buffer buf ^ 1 was last read before the barrier that ended step kt - 1
      fetch_a((kt + 1) * BK);
      fetch_b((kt + 1) * BK, buf ^ 1);
    }
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) ldmatrix_x4(a[mt], smem_addr(&As[buf][wm * 32 + mt * 16 + a_row][ks * 16 + a_k]));
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_addr(&Bs[buf][wn * 32 + np * 16 + b_row][ks * 16 + b_k]));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_m16n8k16(acc[mt][2 * np], a[mt], b[0], b[1]);
          mma_m16n8k16(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    if (more) {
      store_a(buf ^ 1);
      cp_async_wait<0>();
    }
    __syncthreads();
  }

#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int col = n0 + wn * 32 + nt * 8 + (lane & 3) * 2;
    if (col >= p.C_out) continue;  // C_out is even: both columns or neither
    const float bias0 = __ldg(p.b_proj + col), bias1 = __ldg(p.b_proj + col + 1);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + wm * 32 + mt * 16 + (lane >> 2) + h * 8;
        if (row >= P) continue;
        float v0 = acc[mt][nt][2 * h] + bias0, v1 = acc[mt][nt][2 * h + 1] + bias1;
        if (p.residual) {  // stride 1 and C_in == C_out: x has out's layout
          const float2 xv = __half22float2(*reinterpret_cast<const __half2*>(p.x + (size_t)row * p.C_out + col));
          v0 += xv.x;
          v1 += xv.y;
        }
        *reinterpret_cast<__half2*>(p.out + (size_t)row * p.C_out + col) = __floats2half2_rn(v0, v1);
      }
    }
  }
}

// Versions whose kernels use sm_90's bulk copies and mbarriers (version 6's projection, version 8's kernel 1 in 8-11;
// csrc/ptx_sm90.cuh); cuda_kernels/mbconv.py SM90_VERSIONS mirrors it.
constexpr bool version_needs_sm90(int version) { return version == 6 || (version >= 8 && version <= 11); }

// Compute capability 9.0 or newer, per device (cached).
static cudaError_t device_is_sm90(bool& yes) {
  static int cached[kMaxDevices] = {};  // 0 unknown, 1 no, 2 yes
  int dev = 0, major = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (cached[dev] == 0) {
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err != cudaSuccess) return err;
    cached[dev] = major >= 9 ? 2 : 1;
  }
  yes = cached[dev] == 2;
  return cudaSuccess;
}

// CUDA_KERNELS_ABLATE (a diagnostic, read at every call; versions 9-11): a comma-separated subset of "kernel1", "se"
// and "project" whose launches are skipped, so that a timed network shows what each part costs on its critical path
// (cuda_kernels/ablate_b0.py). The blocks' outputs are then wrong: it is never set for a run whose output matters
// (ablate_b0 checks the blocks first, without it).
static bool ablated(const char* part) {
  const char* v = std::getenv("CUDA_KERNELS_ABLATE");
  if (v == nullptr) return false;
  const size_t n = std::strlen(part);
  for (const char* s = v; (s = std::strstr(s, part)) != nullptr; s += n)
    if ((s == v || s[-1] == ',') && (s[n] == '\0' || s[n] == ',')) return true;
  return false;
}

// Versions 9-11 after kernel 1: version 3's SE (or SE version 4 where it applies), then the projection each version
// picks.
cudaError_t launch_se_project_v9(const Params& p, int version, cudaStream_t stream, bool pdl) {
  if (version < 9 || version > 11) return cudaErrorInvalidValue;
  cudaError_t err = ablated("se")                            ? cudaSuccess
                    : !se_v4_applies(p, se_v4_mode())         ? launch_se_v3(p, stream, pdl)
                    : se_v6_requested() && se_v6_fits(p) ? launch_se_v6(p, stream, pdl)
                    : se_v5_requested() && se_v5_fits(p) ? launch_se_v5(p, stream, pdl)
                                                          : launch_se_v4(p, stream, pdl);
  if (err != cudaSuccess) return err;
  if (ablated("project")) return cudaSuccess;
  if (project_wg_applies(p, project_wg_mode(version == 11))) return launch_project_wg(p, stream, pdl);  // v11: ring
  const int pv10 = project_v10_mode();  // CUDA_KERNELS_PROJ_V10: auto by default
  const bool p9 = project_v9_applies(p.hidden, p.C_out);
  if (pv10 == 2 || (pv10 == 1 && !p9) || (pv10 == 3 && !p9 && project_v10_auto(p)))
    return launch_project_v10(p, stream, pdl);
  return p9 ? launch_project_v9(p, stream, pdl) : launch_project_v3_only(p, stream, pdl);
}

cudaError_t launch_stem_mbconv(const Params& p, const StemDwParams& s, int version, cudaStream_t stream, bool pdl) {
  if (version < 9 || version > 11) return cudaErrorInvalidValue;
  const cudaError_t err = ablated("kernel1") ? cudaSuccess : launch_stem_dw(p, s, stream, pdl);
  return err != cudaSuccess ? err : launch_se_project_v9(p, version, stream, pdl);
}

cudaError_t launch_mbconv(const Params& p, int chunk, int version, cudaStream_t stream, bool pdl) {
  cudaError_t err = cudaErrorInvalidValue;
  if (version_needs_sm90(version)) {  // their kernels trap on an older GPU (ptx_sm90.cuh): refuse before a launch
    bool sm90 = false;
    err = device_is_sm90(sm90);
    if (err != cudaSuccess) return err;
    if (!sm90) return cudaErrorNotSupported;
    err = cudaErrorInvalidValue;
  }
  if (version == 1 && p.ksize == 3) err = launch_expand_dw_k3(p, chunk, stream);
  if (version == 1 && p.ksize == 5) err = launch_expand_dw_k5(p, chunk, stream);
  if (version == 2 && p.ksize == 3) err = launch_expand_dw_v2_k3(p, chunk, stream);
  if (version == 2 && p.ksize == 5) err = launch_expand_dw_v2_k5(p, chunk, stream);
  if (version == 3 && p.ksize == 3) err = launch_expand_dw_v3_k3(p, chunk, stream, pdl);
  if (version == 3 && p.ksize == 5) err = launch_expand_dw_v3_k5(p, chunk, stream, pdl);
  if ((version == 5 || version == 6) && p.ksize == 3) err = launch_expand_dw_v5_k3(p, chunk, stream);
  if ((version == 5 || version == 6) && p.ksize == 5) err = launch_expand_dw_v5_k5(p, chunk, stream);
  if (version == 7 && p.ksize == 3) err = launch_expand_dw_v7_k3(p, chunk, stream, pdl);
  if (version == 7 && p.ksize == 5) err = launch_expand_dw_v7_k5(p, chunk, stream, pdl);
  // version 10: version 9 with version 8's kernel 1 options on (2-image items, the depthwise in HFMA2); version 11:
  // version 10 with version 3's kernel 1 in HFMA2 and the projection on warpgroup MMAs past stage 4 (late)
  const bool v9 = version >= 9 && version <= 11, v10 = version >= 10 && version <= 11, v11 = version == 11;
  const bool v9_v3 = v9 && kernel1_v9_takes_v3(p.ksize, p.stride, p.Ho, p.Wo);  // version 3's kernel 1
  const bool v3_hf = v9_v3 && kernel1_v3_hfma2_requested(v11);
  if (v9 && ablated("kernel1")) return launch_se_project_v9(p, version, stream, pdl);  // CUDA_KERNELS_ABLATE
  if (v9_v3)
    err = p.ksize == 3 ? launch_expand_dw_v3_k3(p, chunk, stream, pdl, v3_hf)
                       : launch_expand_dw_v3_k5(p, chunk, stream, pdl, v3_hf);
  if ((version == 8 || (v9 && !v9_v3)) && p.ksize == 3) err = launch_expand_dw_v8_k3(p, chunk, stream, pdl, v10, v11);
  if ((version == 8 || (v9 && !v9_v3)) && p.ksize == 5) err = launch_expand_dw_v8_k5(p, chunk, stream, pdl, v10, v11);
  if (err != cudaSuccess) return err;
  if (version == 7)  // the SE ran in kernel 1's last CTA per image
    return project_v7_applies(p.Ho, p.Wo) ? launch_project_v7(p, stream, pdl) : launch_project_v3_only(p, stream, pdl);
  if (v9) return launch_se_project_v9(p, version, stream, pdl);
  if (version == 3 || version == 5 || version == 6 || version == 8)
    return launch_se_project_v3(p, stream, version == 6, (version == 3 || version == 8) && pdl);
  const int se_smem = (p.hid_pad + p.sq) * 4;
  if (se_smem > 48 * 1024) return cudaErrorInvalidConfiguration;
  se_kernel<<<p.N, kSEThreads, se_smem, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int P = p.N * p.Ho * p.Wo;
  const dim3 grid((P + kProjectBM - 1) / kProjectBM, (p.C_out + kProjectBN - 1) / kProjectBN);
  project_kernel<<<grid, kProjectThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mb
