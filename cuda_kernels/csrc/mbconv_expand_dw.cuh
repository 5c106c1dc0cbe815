// Kernel 1 of the MBConv block (see mbconv.cuh): expand + SiLU -> depthwise + SiLU -> D and the
// pool's partial sums, for one image, one band of output rows and one chunk of HC channels.
#pragma once
#include "mbconv.cuh"
#include "mbconv_ptx.cuh"

namespace mb {

__device__ __forceinline__ float silu(float v) { return v / (1.f + __expf(-v)); }

template <int HC, int KS, bool EXPAND>
__global__ void __launch_bounds__(kExpandThreads) expand_dw_kernel(const Params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int LDE = HC + 8;
  const int tid = threadIdx.x;
  const int c0 = blockIdx.x * HC, band = blockIdx.y, n = blockIdx.z;
  const int oh0 = band * p.rows_per_tile;
  const int oh1 = min(oh0 + p.rows_per_tile, p.Ho);
  // The input rows the band's taps touch, clipped to the image (padding rows are skipped).
  const int ih_lo = max(0, oh0 * p.stride - p.pad);
  const int ih_hi = min(p.H - 1, (oh1 - 1) * p.stride - p.pad + KS - 1);
  const int npix = (ih_hi - ih_lo + 1) * p.W;
  const int m_pad = round_up(p.halo_pixels, 16);
  const int ldx = p.k_pad + 8;
  __half* Xs = reinterpret_cast<__half*>(smem);
  __half* Us = Xs + (EXPAND ? m_pad * ldx : 0);
  __half* Es = Us + (EXPAND ? HC * ldx : 0);
  float* red = reinterpret_cast<float*>(Es + m_pad * LDE);
  for (int i = tid; i < HC; i += kExpandThreads) red[i] = 0.f;

  const __half* xsrc = p.x + ((size_t)n * p.H + ih_lo) * p.W * p.C_in;
  if constexpr (EXPAND) {
    const int cch = p.C_in / 8, kch = p.k_pad / 8;
    for (int i = tid; i < npix * kch; i += kExpandThreads) {
      const int q = i / kch, c = i - q * kch;
      const bool valid = c < cch;  // columns C_in..k_pad are zero (the weights' padding is zero too)
      cp_async16(smem_addr(Xs + q * ldx + c * 8), valid ? xsrc + (size_t)q * p.C_in + c * 8 : p.x, valid);
    }
    const __half* usrc = p.w_exp + (size_t)c0 * p.k_pad;
    for (int i = tid; i < HC * kch; i += kExpandThreads) {
      const int r = i / kch, c = i - r * kch;
      cp_async16(smem_addr(Us + r * ldx + c * 8), usrc + (size_t)r * p.k_pad + c * 8, true);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    // E = SiLU(X U^T + a): each warp takes 16-pixel m-tiles in turn, all HC columns. Rows past
    // npix read uninitialised shared memory; they only reach their own (unwritten) output rows.
    constexpr int NT = HC / 8, NP = HC / 16;
    const int lane = tid & 31, warp = tid >> 5;
    const int a_row = lane & 15, a_k = (lane >> 4) * 8;
    const int b_row = (lane & 7) + ((lane >> 4) << 3), b_k = ((lane >> 3) & 1) * 8;
    const int mtiles = (npix + 15) / 16;
    for (int mt = warp; mt < mtiles; mt += kExpandThreads / 32) {
      float acc[NT][4];
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
      for (int k0 = 0; k0 < p.k_pad; k0 += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, smem_addr(Xs + (mt * 16 + a_row) * ldx + k0 + a_k));
#pragma unroll
        for (int np = 0; np < NP; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, smem_addr(Us + (np * 16 + b_row) * ldx + k0 + b_k));
          mma_m16n8k16(acc[2 * np], a, b[0], b[1]);
          mma_m16n8k16(acc[2 * np + 1], a, b[2], b[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int col = nt * 8 + (lane & 3) * 2;
        const float bias0 = __ldg(p.b_exp + c0 + col), bias1 = __ldg(p.b_exp + c0 + col + 1);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = mt * 16 + (lane >> 2) + h * 8;
          if (row < npix)
            *reinterpret_cast<__half2*>(Es + row * LDE + col) =
                __floats2half2_rn(silu(acc[nt][2 * h] + bias0), silu(acc[nt][2 * h + 1] + bias1));
        }
      }
    }
  } else {
    // Expand ratio 1: the depthwise runs on the input itself (hidden = C_in).
    constexpr int ECH = HC / 8;
    for (int i = tid; i < npix * ECH; i += kExpandThreads) {
      const int q = i / ECH, c = i - q * ECH, ch = c0 + c * 8;
      const bool valid = ch < p.C_in;
      cp_async16(smem_addr(Es + q * LDE + c * 8), valid ? xsrc + (size_t)q * p.C_in + ch : p.x, valid);
    }
    cp_async_commit();
    cp_async_wait<0>();
  }
  __syncthreads();

  // Depthwise k x k + bias + SiLU: each thread owns one channel pair (its taps in registers)
  // and walks the band's output pixels with the other threads of its pair.
  constexpr int PAIRS = HC / 2, GROUPS = kExpandThreads / PAIRS;
  const int pair = tid % PAIRS, group = tid / PAIRS;
  if (group < GROUPS) {
    const int ch = c0 + 2 * pair;
    float w0[KS * KS], w1[KS * KS];
#pragma unroll
    for (int t = 0; t < KS * KS; ++t) {
      w0[t] = __ldg(p.w_dw + (size_t)t * p.hid_pad + ch);
      w1[t] = __ldg(p.w_dw + (size_t)t * p.hid_pad + ch + 1);
    }
    const float bias0 = __ldg(p.b_dw + ch), bias1 = __ldg(p.b_dw + ch + 1);
    const bool store = ch < p.hidden;  // hidden is a multiple of 8: both channels or neither
    float sum0 = 0.f, sum1 = 0.f;
    const int nout = (oh1 - oh0) * p.Wo;
    for (int o = group; o < nout; o += GROUPS) {
      const int oh = oh0 + o / p.Wo, ow = o % p.Wo;
      const int ihb = oh * p.stride - p.pad, iwb = ow * p.stride - p.pad;
      float a0 = bias0, a1 = bias1;
#pragma unroll
      for (int dy = 0; dy < KS; ++dy) {
        const int ih = ihb + dy;
        if (ih < 0 || ih >= p.H) continue;
        const __half* erow = Es + (ih - ih_lo) * p.W * LDE + 2 * pair;
#pragma unroll
        for (int dx = 0; dx < KS; ++dx) {
          const int iw = iwb + dx;
          if (iw < 0 || iw >= p.W) continue;
          const float2 e = __half22float2(*reinterpret_cast<const __half2*>(erow + iw * LDE));
          a0 = fmaf(e.x, w0[dy * KS + dx], a0);
          a1 = fmaf(e.y, w1[dy * KS + dx], a1);
        }
      }
      const __half2 dv = __floats2half2_rn(silu(a0), silu(a1));
      if (store) *reinterpret_cast<__half2*>(p.d + (((size_t)n * p.Ho + oh) * p.Wo + ow) * p.hidden + ch) = dv;
      const float2 df = __half22float2(dv);  // the pool averages D as stored
      sum0 += df.x;
      sum1 += df.y;
    }
    atomicAdd(red + 2 * pair, sum0);
    atomicAdd(red + 2 * pair + 1, sum1);
  }
  __syncthreads();
  for (int i = tid; i < HC; i += kExpandThreads)
    p.partial[((size_t)n * p.row_blocks + band) * p.hid_pad + c0 + i] = red[i];
}

template <int HC, int KS, bool EXPAND>
cudaError_t launch_expand_dw(const Params& p, cudaStream_t stream) {
  constexpr int kMaxDevices = 64;
  static int configured[kMaxDevices] = {};  // dynamic shared memory already allowed, per device
  const int smem = expand_dw_smem_bytes(p.halo_pixels, p.k_pad, HC, EXPAND);
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (smem > configured[dev]) {
    int optin = 0;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return err;
    if (smem > optin) return cudaErrorInvalidConfiguration;
    err = cudaFuncSetAttribute(expand_dw_kernel<HC, KS, EXPAND>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    if (err != cudaSuccess) return err;
    configured[dev] = optin;
  }
  const dim3 grid(p.hid_pad / HC, p.row_blocks, p.N);
  expand_dw_kernel<HC, KS, EXPAND><<<grid, kExpandThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <int KS>
cudaError_t launch_expand_dw_ks(const Params& p, int chunk, cudaStream_t stream) {
  const bool expand = p.w_exp != nullptr;
  switch (chunk * 2 + (expand ? 1 : 0)) {
    case 64: return launch_expand_dw<32, KS, false>(p, stream);
    case 65: return launch_expand_dw<32, KS, true>(p, stream);
    case 96: return launch_expand_dw<48, KS, false>(p, stream);
    case 97: return launch_expand_dw<48, KS, true>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mb
