// Fused FFN on Hopper warpgroup MMAs (sm_90a): Z = ReLU(X U^T + a) V^T + b (+ X).
//
// Persistent grid, one thread block per SM, 2 consumer warpgroups + 1 producer warpgroup
// (one thread of it issues copies; setmaxnreg moves its registers to the consumers).
// A tile is 128 consecutive pixels; consumer warpgroup w owns rows 64w..64w+63 and runs
//   for each hidden chunk j of HC channels (64 for C = 256, else 128: registers allow it):
//     stage 1  acc1 = X . U_j^T      wgmma m64nHCk16, A = X and B = U_j from shared memory
//     H = ReLU(acc1 + a_j) as fp16 in registers: the accumulator layout of stage 1 is the
//              register-A layout of stage 2, so H never touches shared memory
//     stage 2  acc2 += H . V_j^T     wgmma m64nCk16, A = H from registers, B = V_j
// Stage 2 of chunk j and stage 1 of chunk j+1 are in flight together; the other warpgroup's
// MMAs fill the tensor cores while this one applies bias and ReLU.
// The producer thread streams U_j and V_j (pre-swizzled on the host into the exact shared
// layout, so each is one contiguous bulk copy) through a ring of slots guarded by mbarriers;
// it runs ahead across chunks and tiles. Each warpgroup prefetches its next tile's X with
// cp.async as soon as its last stage 1 has read X, so the load overlaps the last stage 2
// and the epilogue (O + b + shortcut, written straight from registers). (Two X buffers,
// loading a whole tile ahead, made C <= 128 3-4% slower: NOTES.md, v4.3.)
#include "params.h"
#include "ptx.cuh"
#include "ptx_sm90.cuh"
#include "wgmma.cuh"

namespace bf {
namespace sm90 {

constexpr int kConsumers = 2;                       // warpgroups
constexpr int kThreads = 128 * (kConsumers + 1);   // + one producer warpgroup (one thread works)
constexpr int kRowsPerWG = 64;
constexpr int kBM = kRowsPerWG * kConsumers;
constexpr int kRingBytes = 160 * 1024;

template <int C>
struct Cfg {
  // Hidden channels per chunk: acc1 (HC/2 registers) lives beside acc2 (C/2 registers).
  static constexpr int HC = C == 256 ? 64 : 128;
  static constexpr int KP = C / 64;                 // 64-wide k panels of X and U_j
  static constexpr int SLOT = C * HC * 2;           // U_j (HC rows x C) or V_j (C rows x HC)
  static constexpr int U_PANEL = HC * 128;          // U_j: KP panels of HC rows x 64 k
  static constexpr int V_PANEL = C * 128;           // V_j: HC/64 panels of C rows x 64 k
  static constexpr int STAGES = kRingBytes / SLOT;
  static constexpr int X_PANEL = kRowsPerWG * 128;  // one warpgroup's rows of one panel
  static constexpr int X_WG = KP * X_PANEL;         // one warpgroup's X buffer
  static constexpr int RING_OFFSET = kConsumers * X_WG;
  static constexpr int BAR_OFFSET = RING_OFFSET + STAGES * SLOT;
  static constexpr int SMEM_BYTES = 1024 + BAR_OFFSET + 2 * STAGES * 8;  // + alignment slack
  static_assert(C % 64 == 0 && C <= 256, "C");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per block");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int HC>
__device__ __forceinline__ void stage1(float (&acc)[HC / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  if constexpr (HC == 128) wgmma_m64n128k16_ss(acc, desc_a, desc_b, scale_d);
  else wgmma_m64n64k16_ss(acc, desc_a, desc_b, scale_d);
}

template <int C>
__device__ __forceinline__ void stage2(float (&acc)[C / 2], const uint32_t (&a)[4], uint64_t desc) {
  if constexpr (C == 256) wgmma_m64n256k16_rs(acc, a, desc, 1);
  else if constexpr (C == 128) wgmma_m64n128k16_rs(acc, a, desc, 1);
  else wgmma_m64n64k16_rs(acc, a, desc, 1);
}

// One warpgroup's 64 rows of X (row p0..p0+63) into its panels, 16 bytes per cp.async;
// rows past the end are zero-filled. Commits one cp.async group.
template <int C>
__device__ __forceinline__ void load_x(const Params& p, uint32_t x_wg, int p0, int t) {
  constexpr int CH = C / 8;
#pragma unroll 4
  for (int i = t; i < kRowsPerWG * CH; i += 128) {
    const int r = i / CH, c = i % CH;
    const bool valid = p0 + r < p.P;
    const __half* src = valid ? p.x + (size_t)(p0 + r) * C + c * 8 : p.x;
    cp_async16(x_wg + (c >> 3) * Cfg<C>::X_PANEL + panel_offset(r, c & 7), src, valid);
  }
  cp_async_commit();
}
#endif

template <int C>
__global__ void __launch_bounds__(kThreads, 1) ffn_wgmma_kernel(const Params p, const uint8_t* __restrict__ wpack) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using K = Cfg<C>;
  constexpr int HC = K::HC;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;  // 1024-aligned for the swizzle
  const uint32_t x_s = base, ring = base + K::RING_OFFSET;
  const uint32_t full_bar = base + K::BAR_OFFSET, empty_bar = full_bar + K::STAGES * 8;
  const int nchunks = p.hidden / HC;
  const int ntiles = (p.P + kBM - 1) / kBM;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  if (threadIdx.x == 0) {
    for (int s = 0; s < K::STAGES; ++s) {
      mbar_init(full_bar + 8 * s, 1);                // the producer's arrive + the copy's bytes
      mbar_init(empty_bar + 8 * s, 4 * kConsumers);  // one arrive per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warp >= 4 * kConsumers) {
    // ---- producer: U_0 V_0 U_1 V_1 ... for every tile of this block ----
    setmaxnreg_dec<40>();
    if (warp == 4 * kConsumers && lane == 0) {
      int it = 0;
      for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        for (int s = 0; s < 2 * nchunks; ++s, ++it) {
          const int slot = it % K::STAGES;
          mbar_wait(empty_bar + 8 * slot, ((it / K::STAGES) & 1) ^ 1);
          mbar_arrive_expect_tx(full_bar + 8 * slot, K::SLOT);
          bulk_copy_g2s(ring + slot * K::SLOT, wpack + (size_t)s * K::SLOT, K::SLOT, full_bar + 8 * slot);
        }
      }
    }
  } else {
  // ---- consumers ----
  setmaxnreg_inc<232>();
  const int wg = warp >> 2, t = threadIdx.x & 127, wq = warp & 3;
  const uint32_t x_wg = x_s + wg * K::X_WG;
  const int bar_id = 1 + wg;
  if (blockIdx.x < ntiles) load_x<C>(p, x_wg, blockIdx.x * kBM + wg * kRowsPerWG, t);

  int it = 0;
  for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const int p0 = tile * kBM + wg * kRowsPerWG;
    cp_async_wait<0>();
    fence_proxy_async_smem();
    named_barrier_sync(bar_id, 128);

    float acc2[C / 2];
#pragma unroll
    for (int i = 0; i < C / 2; ++i) acc2[i] = 0.f;
    int prev_v_slot = -1;

    for (int j = 0; j < nchunks; ++j) {
      // this chunk's bias pairs, loaded now so that they have arrived when stage 1 has
      float2 bias[HC / 8];
      const float* a = p.b1 + j * HC + 2 * (lane & 3);
#pragma unroll
      for (int n = 0; n < HC / 8; ++n) bias[n] = __ldg(reinterpret_cast<const float2*>(a + 8 * n));

      // stage 1: acc1 = X . U_j^T over C / 16 k steps
      const int u_slot = it % K::STAGES;
      mbar_wait(full_bar + 8 * u_slot, (it / K::STAGES) & 1);
      ++it;
      float acc1[HC / 2];
      fence_registers(acc1);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < C / 16; ++ks) {
        const uint32_t koff = (ks >> 2) * K::X_PANEL + (ks & 3) * 32;
        const uint32_t uoff = (ks >> 2) * K::U_PANEL + (ks & 3) * 32;
        stage1<HC>(acc1, smem_desc_sw128(x_wg + koff), smem_desc_sw128(ring + u_slot * K::SLOT + uoff), ks > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();  // this chunk's stage 1 and the previous chunk's stage 2
      fence_registers(acc1);
      fence_registers(acc2);
      if (lane == 0) {
        mbar_arrive(empty_bar + 8 * u_slot);
        if (prev_v_slot >= 0) mbar_arrive(empty_bar + 8 * prev_v_slot);
      }
      if (j == nchunks - 1) {
        // X is no longer read by this tile: fetch the next tile's rows into the same panels.
        named_barrier_sync(bar_id, 128);
        const int next = tile + gridDim.x;
        if (next < ntiles) load_x<C>(p, x_wg, next * kBM + wg * kRowsPerWG, t);
      }

      // H = ReLU(acc1 + a_j), packed fp16 in the register-A layout of stage 2
      uint32_t h[HC / 16][4];
#pragma unroll
      for (int n = 0; n < HC / 8; ++n) {
        h[n >> 1][(n & 1) * 2 + 0] = pack_half2(fmaxf(acc1[4 * n + 0] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 1] + bias[n].y, 0.f));
        h[n >> 1][(n & 1) * 2 + 1] = pack_half2(fmaxf(acc1[4 * n + 2] + bias[n].x, 0.f), fmaxf(acc1[4 * n + 3] + bias[n].y, 0.f));
      }

      // stage 2: acc2 += H . V_j^T over HC / 16 k steps
      const int v_slot = it % K::STAGES;
      mbar_wait(full_bar + 8 * v_slot, (it / K::STAGES) & 1);
      ++it;
      fence_registers(h);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < HC / 16; ++kk)
        stage2<C>(acc2, h[kk], smem_desc_sw128(ring + v_slot * K::SLOT + (kk >> 2) * K::V_PANEL + (kk & 3) * 32));
      wgmma_commit();
      prev_v_slot = v_slot;
    }
    wgmma_wait<0>();
    fence_registers(acc2);
    if (lane == 0) mbar_arrive(empty_bar + 8 * prev_v_slot);

    // epilogue: out = acc2 + b (+ x), from the accumulator layout (row lane/4 and +8 of the
    // warp's 16, columns 8n + 2(lane%4) and +1)
    const int r0 = p0 + wq * 16 + (lane >> 2);
    const __half* __restrict__ xr = p.x;
    __half* __restrict__ outr = p.out;
#pragma unroll
    for (int g = 0; g < C / 64; ++g) {
      __half2 sc[8][2];
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = r0 + 8 * hr, col = 8 * (8 * g + n) + 2 * (lane & 3);
          sc[n][hr] = (p.residual && row < p.P) ? __ldg(reinterpret_cast<const __half2*>(xr + (size_t)row * C + col))
                                                 : __float2half2_rn(0.f);
        }
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int nb = 8 * g + n, col = 8 * nb + 2 * (lane & 3);
        const float2 bias = __ldg(reinterpret_cast<const float2*>(p.b2 + col));
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = r0 + 8 * hr;
          if (row >= p.P) continue;
          const float2 s = __half22float2(sc[n][hr]);
          const float v0 = acc2[4 * nb + 2 * hr] + bias.x + s.x, v1 = acc2[4 * nb + 2 * hr + 1] + bias.y + s.y;
          *reinterpret_cast<__half2*>(outr + (size_t)row * C + col) = __floats2half2_rn(v0, v1);
        }
      }
    }
  }
  }
#endif
}

// Per device: the SM count sizes the persistent grid, the shared-memory limit is checked and
// the attribute set once; a device that is not compute capability 9.0 is refused
// (cudaErrorNoKernelImageForDevice: the kernel body exists only in the sm_90a image).
constexpr int kMaxDevices = 64;

template <int C>
cudaError_t launch_impl(const Params& p, const void* wpack, cudaStream_t stream) {
  static int sms_of[kMaxDevices] = {};
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (sms_of[dev] == 0) {
    int major = 0, minor = 0, optin = 0, sms = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err == cudaSuccess && (major != 9 || minor != 0)) err = cudaErrorNoKernelImageForDevice;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess && Cfg<C>::SMEM_BYTES > optin) err = cudaErrorInvalidConfiguration;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(ffn_wgmma_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<C>::SMEM_BYTES);
    if (err != cudaSuccess) return err;
    sms_of[dev] = sms;
  }
  const int sms = sms_of[dev];
  const int ntiles = (p.P + kBM - 1) / kBM;
  const int grid = ntiles < sms ? ntiles : sms;
  ffn_wgmma_kernel<C><<<grid, kThreads, Cfg<C>::SMEM_BYTES, stream>>>(p, static_cast<const uint8_t*>(wpack));
  return cudaGetLastError();
}

}  // namespace sm90

cudaError_t launch_ffn_wgmma(const Params& p, int channels, const void* wpack, cudaStream_t stream) {
  switch (channels) {
    case 64: return p.hidden % sm90::Cfg<64>::HC ? cudaErrorInvalidValue : sm90::launch_impl<64>(p, wpack, stream);
    case 128: return p.hidden % sm90::Cfg<128>::HC ? cudaErrorInvalidValue : sm90::launch_impl<128>(p, wpack, stream);
    case 256: return p.hidden % sm90::Cfg<256>::HC ? cudaErrorInvalidValue : sm90::launch_impl<256>(p, wpack, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace bf
