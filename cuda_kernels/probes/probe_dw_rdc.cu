// Would kernel 1's depthwise run faster as a separately compiled function (NOTES.md, session 39)? In a kernel that
// holds a tensor-core instruction ptxas keeps every HFMA2 on the FMA pipe; under separate compilation (-rdc=true) a
// __noinline__ function without one gets ptxas's split between HFMA2 and HFMA2.MMA even though its caller holds the
// HMMA. This times kernel 1's k = 5 unit (B0's 3.1: 4 x 2 outputs of one channel pair a thread, 25 taps, 6 rows of 8 E
// values from shared memory: 200 HFMA2 and 48 LDS) three ways, each kernel holding a never-run mma.sync as kernel 1
// holds its expand: inline (today's form), and in a __noinline__ function called once for a run of UNITS units (5,
// a thread group's share of an item at 3.1) with the taps passed by value. Built with -rdc=true, so that the callee is
// compiled on its own (nvcc links the device code itself when it builds the executable):
//   nvcc -std=c++17 -O3 -arch=sm_90a -rdc=true cuda_kernels/probes/probe_dw_rdc.cu -o /tmp/pdr && /tmp/pdr
// One line per form: cycles a unit a warp and HFMA2 a clock an SM at 16 warps an SM (one CTA of 512 threads), the
// median over the SMs. Check the SASS (cuobjdump -sass): the callee's HFMA2.MMA, and no local memory for the taps.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

constexpr int kRuns = 128, kUnits = 5, kRows = 6, kCols = 8, kBases = 8, kThreads = 512;
constexpr int kHogBytes = 150 * 1024;  // unused dynamic shared memory: one CTA an SM

struct Taps {
  __half2 t[25];
};

// kUnits units from E (rows of kCols x 32 half2, lane = channel pair), the first at base index b0; returns the sum of
// the outputs (the pool's share) so that nothing is dead.
__device__ __forceinline__ __half2 units_inline(const __half2* e, const Taps& taps, int b0, int lane) {
  __half2 total = __floats2half2_rn(0.f, 0.f);
#pragma unroll 1
  for (int u = 0; u < kUnits; ++u) {
    const __half2* base = e + ((b0 + u) % kBases) * kCols * 32 + lane;
    __half2 acc[8];
#pragma unroll
    for (int o = 0; o < 8; ++o) acc[o] = taps.t[12];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      __half2 ev[kCols];
#pragma unroll
      for (int c = 0; c < kCols; ++c) ev[c] = base[(r * kCols + c) * 32];
#pragma unroll
      for (int orow = 0; orow < 2; ++orow) {
        const int tr = r - orow;
        if (tr < 0 || tr >= 5) continue;
#pragma unroll
        for (int ocol = 0; ocol < 4; ++ocol)
#pragma unroll
          for (int tc = 0; tc < 5; ++tc)
            acc[orow * 4 + ocol] = __hfma2(ev[ocol + tc], taps.t[tr * 5 + tc], acc[orow * 4 + ocol]);
      }
    }
#pragma unroll
    for (int o = 0; o < 8; ++o) total = __hadd2(total, acc[o]);
  }
  return total;
}

__device__ __noinline__ __half2 units_call(const __half2* e, Taps taps, int b0, int lane) {
  return units_inline(e, taps, b0, lane);
}

// CALL: the units through the separately compiled function; else inline. Both hold a never-run mma.sync.
template <bool CALL>
__global__ void __launch_bounds__(kThreads) dw_kernel(const __half2* taps_g, long long* cycles, uint32_t* sink) {
  __shared__ __half2 e[(kBases + kRows) * kCols * 32];
  const int lane = threadIdx.x & 31;
  for (int i = threadIdx.x; i < (kBases + kRows) * kCols * 32; i += blockDim.x)
    e[i] = __floats2half2_rn(0.001f * (i % 97), 0.002f * (i % 89));
  Taps taps;
#pragma unroll
  for (int t = 0; t < 25; ++t) taps.t[t] = taps_g[t * 32 + lane];
  __half2 total = __floats2half2_rn(0.f, 0.f);
  __syncthreads();
  const long long t0 = clock64();
#pragma unroll 1
  for (int run = 0; run < kRuns; ++run) {
    const __half2 s = CALL ? units_call(e, taps, run, lane) : units_inline(e, taps, run, lane);
    total = __hadd2(total, s);
  }
  __syncthreads();
  const long long t1 = clock64();
  const uint32_t x = *reinterpret_cast<uint32_t*>(&total);
  if (x == 0x9e3779b9u) sink[threadIdx.x] = x;
  if (x == 0x12345678u) {  // never true: the tensor-core instruction kernel 1 holds
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%4,%4}, {%0,%1,%2,%3};"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                 : "r"(x));
    sink[threadIdx.x] = __float_as_uint(d0 + d1 + d2 + d3);
  }
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <bool CALL>
void time_form(int sms, const __half2* taps, long long* cycles_d, uint32_t* sink) {
  CHECK(cudaFuncSetAttribute(dw_kernel<CALL>, cudaFuncAttributeMaxDynamicSharedMemorySize, kHogBytes));
  dw_kernel<CALL><<<sms, kThreads, kHogBytes>>>(taps, cycles_d, sink);  // warm-up
  dw_kernel<CALL><<<sms, kThreads, kHogBytes>>>(taps, cycles_d, sink);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<long long> cycles(sms);
  CHECK(cudaMemcpy(cycles.data(), cycles_d, sms * sizeof(long long), cudaMemcpyDeviceToHost));
  std::sort(cycles.begin(), cycles.end());
  const double c = (double)cycles[sms / 2], units = (double)kRuns * kUnits;
  std::printf("DWRDC %-32s %.1f cycles a unit a warp, %.3f HFMA2 a clock an SM (16 warps)\n",
              CALL ? "noinline call (rdc: split)" : "inline (as kernel 1: plain)", c / units,
              (double)(kThreads / 32) * units * 200 / c);
}

int main() {
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  long long* cycles_d = nullptr;
  uint32_t* sink = nullptr;
  __half2* taps = nullptr;
  CHECK(cudaMalloc(&cycles_d, sms * sizeof(long long)));
  CHECK(cudaMalloc(&sink, kThreads * sizeof(uint32_t)));
  std::vector<__half2> taps_h(25 * 32, __floats2half2_rn(0.01f, -0.02f));
  CHECK(cudaMalloc(&taps, taps_h.size() * sizeof(__half2)));
  CHECK(cudaMemcpy(taps, taps_h.data(), taps_h.size() * sizeof(__half2), cudaMemcpyHostToDevice));
  time_form<false>(sms, taps, cycles_d, sink);
  time_form<true>(sms, taps, cycles_d, sink);
  CHECK(cudaFree(taps));
  CHECK(cudaFree(sink));
  CHECK(cudaFree(cycles_d));
  return 0;
}
