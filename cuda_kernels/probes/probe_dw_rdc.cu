// Would kernel 1's depthwise run faster as a separately compiled function (NOTES.md, session 39)? In a kernel that
// holds a tensor-core instruction ptxas keeps every HFMA2 on the FMA pipe; under separate compilation (-rdc=true) a
// __noinline__ function without one gets ptxas's split between HFMA2 and HFMA2.MMA even though its caller holds the
// HMMA. This times kernel 1's k = 5 unit (B0's 3.1: 4 x 2 outputs of one channel pair a thread, 25 taps, 6 rows of 8 E
// values from shared memory: 200 HFMA2 and 48 LDS) four ways, each kernel holding a never-run mma.sync as kernel 1
// holds its expand: inline (today's form), and in a __noinline__ function called once for a run of UNITS units (5,
// a thread group's share of an item at 3.1) with the taps passed by value (through the stack), by pointer (the callee
// loads them), and by pointer with 32 of the caller's values live across the calls. Built with -rdc=true, so that the
// callee is compiled on its own (nvcc links the device code itself when it builds the executable):
//   nvcc -std=c++17 -O3 -arch=sm_90a -rdc=true cuda_kernels/probes/probe_dw_rdc.cu -o /tmp/pdr && /tmp/pdr
// One line a form: cycles a unit a warp and HFMA2 a clock an SM at 16 warps an SM (one CTA of 512 threads), the
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

// The same, the taps loaded by the callee from global memory (L1 hits after the first call), so that nothing goes
// through the stack: kernel 1 reads its taps from memory once an item anyway.
__device__ __noinline__ __half2 units_call_ptr(const __half2* e, const __half2* taps_g, int b0, int lane) {
  Taps taps;
#pragma unroll
  for (int t = 0; t < 25; ++t) taps.t[t] = taps_g[t * 32 + lane];
  return units_inline(e, taps, b0, lane);
}

// The forms: inline (kernel 1 today), the call with the taps by value, the call with the taps by pointer, and that
// with kLive registers of the caller's live across every call (kernel 1 keeps U's fragments and its item state in
// registers over the depthwise; the linked SASS keeps these in registers the callee does not use: 88, no spills).
enum Form { kInline, kByValue, kByPointer, kByPointerLive };
constexpr int kLive = 32;
constexpr const char* kFormNames[] = {"inline (as kernel 1: plain)", "noinline call (rdc: split)",
                                      "call, taps by pointer", "call, taps by pointer, 32 live"};

// Each kernel holds a never-run mma.sync, as kernel 1 does.
template <Form FORM>
__global__ void __launch_bounds__(kThreads) dw_kernel(const __half2* taps_g, long long* cycles, uint32_t* sink) {
  timed_dw<true>(taps_g, cycles, sink, [taps_g](const __half2* e, const Taps& taps, int lane) {
    // FORM == kByPointerLive: values loaded before the loop and needed after it (U's fragments' place); loaded from
    // memory the callee might write, so ptxas cannot reload them: they stay live across every call
    uint32_t live[kLive];
#pragma unroll
    for (int i = 0; i < kLive; ++i)
      live[i] = FORM == kByPointerLive ? reinterpret_cast<const uint32_t*>(taps_g)[i * 32 + lane] : 0u;
    __half2 total = __floats2half2_rn(0.f, 0.f);
#pragma unroll 1
    for (int run = 0; run < kRuns; ++run) {
      __half2 u;
      if constexpr (FORM == kInline) u = units_inline(e, taps, run, lane);
      else if constexpr (FORM == kByValue) u = units_call(e, taps, run, lane);
      else u = units_call_ptr(e, taps_g, run, lane);
      total = __hadd2(total, u);
    }
    uint32_t x = 0;
#pragma unroll
    for (int i = 0; i < kLive; ++i) x ^= live[i];
    return __hadd2(total, __halves2half2(__ushort_as_half((unsigned short)(x & 0x3ff)), __float2half(0.f)));
  });
}

template <Form FORM>
void time_form(int sms, const __half2* taps, long long* cycles_d, uint32_t* sink) {
  const double c = median_cycles(dw_kernel<FORM>, sms, kThreads, cycles_d, taps, cycles_d, sink);
  const double units = (double)kRuns * kUnits;
  std::printf("DWRDC %-32s %.1f cycles a unit a warp, %.3f HFMA2 a clock an SM (16 warps)\n", kFormNames[FORM],
              c / units, (double)(kThreads / 32) * units * 200 / c);
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
  std::vector<__half2> taps_h(kLive * 32, __floats2half2_rn(0.01f, -0.02f));
  CHECK(cudaMalloc(&taps, taps_h.size() * sizeof(__half2)));
  CHECK(cudaMemcpy(taps, taps_h.data(), taps_h.size() * sizeof(__half2), cudaMemcpyHostToDevice));
  time_form<kInline>(sms, taps, cycles_d, sink);
  time_form<kByValue>(sms, taps, cycles_d, sink);
  time_form<kByPointer>(sms, taps, cycles_d, sink);
  time_form<kByPointerLive>(sms, taps, cycles_d, sink);
  CHECK(cudaFree(taps));
  CHECK(cudaFree(sink));
  CHECK(cudaFree(cycles_d));
  return 0;
}
