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
#include "probe_common.cuh"

constexpr int kRuns = 128, kUnits = 5, kThreads = 512;

// kUnits units from E, the first at unit b0 (probe_common.cuh's dw_unit_k5); the sum of their outputs.
__device__ __forceinline__ __half2 units_inline(const __half2* e, const Taps& taps, int b0, int lane) {
  __half2 total = __floats2half2_rn(0.f, 0.f);
#pragma unroll 1
  for (int u = 0; u < kUnits; ++u) total = __hadd2(total, dw_unit_k5(e, taps, b0 + u, lane));
  return total;
}

__device__ __noinline__ __half2 units_call(const __half2* e, Taps taps, int b0, int lane) {
  return units_inline(e, taps, b0, lane);
}

// CALL: the units through the separately compiled function; else inline. Both hold a never-run mma.sync.
template <bool CALL>
__global__ void __launch_bounds__(kThreads) dw_kernel(const __half2* taps_g, long long* cycles, uint32_t* sink) {
  timed_dw<true>(taps_g, cycles, sink, [](const __half2* e, const Taps& taps, int lane) {
    __half2 total = __floats2half2_rn(0.f, 0.f);
#pragma unroll 1
    for (int run = 0; run < kRuns; ++run)
      total = __hadd2(total, CALL ? units_call(e, taps, run, lane) : units_inline(e, taps, run, lane));
    return total;
  });
}

template <bool CALL>
void time_form(int sms, const __half2* taps, long long* cycles_d, uint32_t* sink) {
  const double c = median_cycles(dw_kernel<CALL>, sms, kThreads, cycles_d, taps, cycles_d, sink);
  const double units = (double)kRuns * kUnits;
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
