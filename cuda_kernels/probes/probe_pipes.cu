// How many warp instructions an SM issues a clock for the arithmetic kernel 1 is made of (NOTES.md, session 39: is
// kernel 1 at B0's 3.1 bound by its HFMA2, i.e. does Hopper issue HFMA2 at FFMA's rate or half of it?). One CTA of
// 32 warps per SM, each thread running 8 independent chains of one instruction (inline PTX, so that nothing folds),
// timed by the SM's own clock (clock64 around the loop, after a barrier); the rate is warp instructions / cycles per
// SM, the median over the SMs. Also two mixes: HFMA2 beside MUFU.TANH (separate pipes would add) and HFMA2 beside
// FFMA (one pipe would share). A standalone program (no PyTorch); on the GPU machine:
//   nvcc -std=c++17 -O3 -arch=sm_90a cuda_kernels/probes/probe_pipes.cu -o /tmp/probe_pipes && /tmp/probe_pipes
// One line per case: warp instructions a clock an SM (the CUDA guide's 9.0 table: FFMA 4, 16-bit FMA 4 if 256
// results a clock, MUFU 0.5), and the SASS to check that each case is what it says (cuobjdump -sass).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

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
  if constexpr (OP == kHfma2Fma) {  // an mma.sync that never runs (b is never 0): its presence is the point
    if (b == 0) {
      float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
          : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
          : "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]));
      sink[threadIdx.x] = __float_as_uint(d0 + d1 + d2 + d3);
    }
  }
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <Op OP>
double rate(int sms, long long* cycles_d, uint32_t* sink) {
  const uint32_t b = 0x3bff3bffu;  // just under 1.0 in fp16 halves (0x3f7fffff-ish as fp32: finite, no overflow)
  pipe_kernel<OP><<<sms, kThreads>>>(b, cycles_d, sink);  // warm-up
  pipe_kernel<OP><<<sms, kThreads>>>(b, cycles_d, sink);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<long long> cycles(sms);
  CHECK(cudaMemcpy(cycles.data(), cycles_d, sms * sizeof(long long), cudaMemcpyDeviceToHost));
  std::sort(cycles.begin(), cycles.end());
  const double warp_instructions = (double)(kThreads / 32) * kIters * kChains;
  return warp_instructions / (double)cycles[sms / 2];
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
  CHECK(cudaFree(cycles_d));
  CHECK(cudaFree(sink));
  return 0;
}
