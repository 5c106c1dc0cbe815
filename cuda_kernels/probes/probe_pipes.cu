// How many warp instructions an SM issues a clock for the arithmetic kernel 1 is made of (NOTES.md, session 39: is
// kernel 1 at B0's 3.1 bound by its HFMA2, i.e. does Hopper issue HFMA2 at FFMA's rate or half of it?). One CTA of
// 32 warps per SM, each thread running 8 independent chains of one instruction (inline PTX, so that nothing folds),
// timed by the SM's own clock (clock64 around the loop, after a barrier); the rate is warp instructions / cycles per
// SM, the median over the SMs. Also two mixes: HFMA2 beside MUFU.TANH (separate pipes would add) and HFMA2 beside
// FFMA (one pipe would share). A standalone program (no PyTorch); on the GPU machine:
//   nvcc -std=c++17 -O3 -arch=sm_90a cuda_kernels/probes/probe_pipes.cu -o /tmp/probe_pipes && /tmp/probe_pipes
// One line per case: warp instructions a clock an SM (the CUDA guide's 9.0 table: FFMA 4, 16-bit FMA 4 if 256
// results a clock, MUFU 0.5), and the SASS to check that each case is what it says (cuobjdump -sass). Then kernel 1's
// k = 5 depthwise unit itself, plain against split, at 16 and 32 warps an SM: what the split would buy that loop.
#include "probe_common.cuh"

constexpr int kChains = 8, kIters = 4096, kThreads = 1024;

// kHfma2: ptxas splits the chains between HFMA2 (the FMA pipe) and HFMA2.MMA; kHfma2Fma: the same chains in a kernel
// that also holds an mma.sync (never run), where ptxas emits every one as plain HFMA2, as in kernel 1 (any HMMA or
// HGMMA in a kernel does this: mbconv_v8_k3.cu's 3,796 HFMA2 are all plain).
enum Op { kFfma, kHfma2, kHfma2Fma, kHadd2, kTanhF32, kTanhF16x2, kImad, kHfma2Tanh, kHfma2Ffma, kOps };
const char* const kNames[kOps] = {"FFMA (fma.rn.f32)",
                                  "HFMA2, ptxas's split with .MMA",
                                  "HFMA2, all plain (HMMA in kernel)",
                                  "HADD2 (add.rn.f16x2)",
                                  "MUFU.TANH (tanh.approx.f32)",
                                  "tanh.approx.f16x2",
                                  "IMAD (mad.lo.u32)",
                                  "HFMA2 + MUFU.TANH, 4 + 4",
                                  "HFMA2 + FFMA, 4 + 4"};

// One instruction on one chain; LOW: the first half of the chains (the mixes put one op on each half).
template <Op OP, bool LOW>
__device__ __forceinline__ void one(uint32_t& r, uint32_t b) {
  if constexpr (OP == kFfma || (OP == kHfma2Ffma && !LOW)) {
    asm volatile("fma.rn.f32 %0, %0, %1, %1;" : "+r"(r) : "r"(b));
  } else if constexpr (OP == kHfma2 || OP == kHfma2Fma || ((OP == kHfma2Tanh || OP == kHfma2Ffma) && LOW)) {
    asm volatile("fma.rn.f16x2 %0, %0, %1, %1;" : "+r"(r) : "r"(b));
  } else if constexpr (OP == kHadd2) {
    asm volatile("add.rn.f16x2 %0, %0, %1;" : "+r"(r) : "r"(b));
  } else if constexpr (OP == kTanhF32 || OP == kHfma2Tanh) {
    asm volatile("tanh.approx.f32 %0, %0;" : "+r"(r));
  } else if constexpr (OP == kTanhF16x2) {
    asm volatile("tanh.approx.f16x2 %0, %0;" : "+r"(r));
  } else {
    asm volatile("mad.lo.u32 %0, %0, %1, %1;" : "+r"(r) : "r"(b));
  }
}

template <Op OP>
__device__ __forceinline__ void step(uint32_t (&r)[kChains], uint32_t b) {
#pragma unroll
  for (int i = 0; i < kChains / 2; ++i) one<OP, true>(r[i], b);
#pragma unroll
  for (int i = kChains / 2; i < kChains; ++i) one<OP, false>(r[i], b);
}

// cycles[blockIdx.x]: the CTA's clock64 span over the loop; sink keeps the chains' values alive.
template <Op OP>
__global__ void __launch_bounds__(kThreads) pipe_kernel(uint32_t b, long long* cycles, uint32_t* sink) {
  uint32_t r[kChains];
#pragma unroll
  for (int i = 0; i < kChains; ++i) r[i] = 0x3c003c00u ^ (threadIdx.x + i);  // 1.0 in both halves, perturbed
  __syncthreads();
  const long long t0 = clock64();
#pragma unroll 16  // 128 chain instructions a loop body: the loop's own ~3 instructions are ~2% of the issue
  for (int it = 0; it < kIters; ++it) step<OP>(r, b);
  __syncthreads();
  const long long t1 = clock64();
  uint32_t x = 0;
#pragma unroll
  for (int i = 0; i < kChains; ++i) x ^= r[i];
  if (x == 0x9e3779b9u) sink[threadIdx.x] = x;  // never true in practice; the compiler cannot know
  if constexpr (OP == kHfma2Fma) hold_a_tensor_instruction(x, sink);
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <Op OP>
double rate(int sms, long long* cycles_d, uint32_t* sink) {
  const uint32_t b = 0x3bff3bffu;  // just under 1.0 in fp16 halves (0x3f7fffff-ish as fp32: finite, no overflow)
  const double cycles = median_cycles(pipe_kernel<OP>, sms, kThreads, cycles_d, b, cycles_d, sink);
  return (double)(kThreads / 32) * kIters * kChains / cycles;
}

// Kernel 1's k = 5 depthwise unit (probe_common.cuh), PLAIN: with the never-run mma.sync in the kernel, so that ptxas
// keeps every HFMA2 on the FMA pipe, as in kernel 1; else ptxas's split. The unit's base moves each iteration so that
// the loads stay in the loop. Cycles a unit and HFMA2 a clock an SM, at 16 warps an SM (kernel 1's occupancy, 13.7
// achieved at 3.1) and 32.
constexpr int kDwUnits = 512;
template <bool PLAIN>
__global__ void __launch_bounds__(kThreads) dw_kernel(const __half2* taps_g, long long* cycles, uint32_t* sink) {
  timed_dw<PLAIN>(taps_g, cycles, sink, [](const __half2* e, const Taps& taps, int lane) {
    __half2 total = __floats2half2_rn(0.f, 0.f);
    for (int u = 0; u < kDwUnits; ++u) total = __hadd2(total, dw_unit_k5(e, taps, u, lane));
    return total;
  });
}

template <bool PLAIN>
void dw_rate(int sms, int threads, const __half2* taps, long long* cycles_d, uint32_t* sink) {
  const double c = median_cycles(dw_kernel<PLAIN>, sms, threads, cycles_d, taps, cycles_d, sink);
  const double hfma2 = (double)(threads / 32) * kDwUnits * 200;
  std::printf("PIPES depthwise unit, %-5s %2d warps: %.1f cycles a unit a warp, %.3f HFMA2 a clock an SM\n",
              PLAIN ? "plain" : "split", threads / 32, c / kDwUnits, hfma2 / c);
}

int main() {
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  long long* cycles_d = nullptr;
  uint32_t* sink = nullptr;
  CHECK(cudaMalloc(&cycles_d, sms * sizeof(long long)));
  CHECK(cudaMalloc(&sink, kThreads * sizeof(uint32_t)));
  std::printf("PIPES %s, %d SMs, one CTA of %d threads an SM, %d chains x %d iterations a thread\n", prop.name, sms,
              kThreads, kChains, kIters);
  const double rates[kOps] = {rate<kFfma>(sms, cycles_d, sink),       rate<kHfma2>(sms, cycles_d, sink),
                              rate<kHfma2Fma>(sms, cycles_d, sink),   rate<kHadd2>(sms, cycles_d, sink),
                              rate<kTanhF32>(sms, cycles_d, sink),    rate<kTanhF16x2>(sms, cycles_d, sink),
                              rate<kImad>(sms, cycles_d, sink),       rate<kHfma2Tanh>(sms, cycles_d, sink),
                              rate<kHfma2Ffma>(sms, cycles_d, sink)};
  for (int op = 0; op < kOps; ++op)
    std::printf("PIPES %-34s %.3f warp instructions a clock an SM\n", kNames[op], rates[op]);
  __half2* taps = nullptr;
  std::vector<__half2> taps_h(25 * 32, __floats2half2_rn(0.01f, -0.02f));
  CHECK(cudaMalloc(&taps, taps_h.size() * sizeof(__half2)));
  CHECK(cudaMemcpy(taps, taps_h.data(), taps_h.size() * sizeof(__half2), cudaMemcpyHostToDevice));
  for (int threads : {512, 1024}) {
    dw_rate<true>(sms, threads, taps, cycles_d, sink);
    dw_rate<false>(sms, threads, taps, cycles_d, sink);
  }
  CHECK(cudaFree(taps));
  CHECK(cudaFree(cycles_d));
  CHECK(cudaFree(sink));
  return 0;
}
