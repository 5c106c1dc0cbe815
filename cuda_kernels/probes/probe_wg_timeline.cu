// Where a CTA of the wgmma projection spends its time (session 33, NOTES.md "Current state"): project_wg's kernel
// as the extension builds it, with MB_WG_STAMP defined to record %globaltimer and clock64 at points of each CTA's
// path (0 after the PDL wait, 1 + i once chunk i's TMA boxes have arrived, 14 after the last chunk's MMAs, 15 after
// the epilogue), at B0's 4.1 and 5.1 shapes (batch 128, 392 row tiles of 64 rows), with L2 flushed before the launch
// and with D already in L2 (the launch before it read the same D). Stall samples say what a warp waits on; these say
// how long each step of a CTA's one tile takes. Build and run on the GPU machine, from the repository root:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DBF_SM90A -Icuda_kernels/csrc \
//     cuda_kernels/probes/probe_wg_timeline.cu -o /tmp/probe_wg_timeline && /tmp/probe_wg_timeline
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

constexpr int kMaxCtas = 4096, kSlots = 16;
__device__ unsigned long long g_time[kMaxCtas][kSlots];
__device__ long long g_clock[kMaxCtas][kSlots];
__device__ unsigned g_smid[kMaxCtas];

__device__ __forceinline__ void mb_wg_stamp(int slot) {
  if (threadIdx.x != 0 || blockIdx.y != 0 || blockIdx.x >= kMaxCtas || slot >= kSlots) return;
  unsigned long long t;
  unsigned sm;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  g_time[blockIdx.x][slot] = t;
  g_clock[blockIdx.x][slot] = clock64();
  g_smid[blockIdx.x] = sm;
}
#define MB_WG_STAMP(slot) mb_wg_stamp(slot)
#include "../csrc/mbconv_proj_wg.cu"

namespace mb {  // project_wg_applies' routing lives in mbconv_v3.cu; the probe launches project_wg directly
bool project_v9_applies(int, int) { return false; }
bool project_v9s_fits(const Params&, bool) { return false; }
bool project_v9_staged_fits(const Params&) { return false; }
}  // namespace mb

#define CHECK(x)                                                                        \
  do {                                                                                  \
    const cudaError_t e = (x);                                                          \
    if (e != cudaSuccess) {                                                             \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));     \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

template <typename T>
T* device_fill(size_t n, float lo, float hi, unsigned seed) {
  std::vector<T> h(n);
  uint32_t s = seed;
  for (auto& v : h) {
    s = s * 1664525u + 1013904223u;
    v = T(lo + (hi - lo) * float(s >> 8) / float(1u << 24));
  }
  T* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(T)));
  CHECK(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[std::min(v.size() - 1, size_t(q * (v.size() - 1) + 0.5))];
}

void run(const char* name, int hidden, int c_out) {
  const int N = 128, H = 14, W = 14, P = N * H * W, hk_pad = (hidden + 31) / 32 * 32, cout_pad = (c_out + 63) / 64 * 64;
  mb::Params p = {};
  p.N = N, p.H = p.Ho = H, p.W = p.Wo = W, p.C_in = c_out, p.hidden = hidden, p.hid_pad = hidden, p.hk_pad = hk_pad;
  p.C_out = c_out, p.residual = 1, p.sq = hidden / 24;
  p.d = device_fill<__half>((size_t)P * hidden, -1.f, 1.f, 1);
  p.scale = device_fill<float>((size_t)N * hidden, 0.f, 1.f, 2);
  p.w_proj = device_fill<__half>((size_t)cout_pad * hk_pad, -0.05f, 0.05f, 3);
  p.b_proj = device_fill<float>(cout_pad, -0.1f, 0.1f, 4);
  p.x = device_fill<__half>((size_t)P * c_out, -1.f, 1.f, 5);
  CHECK(cudaMalloc(&p.out, (size_t)P * c_out * sizeof(__half)));
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  const size_t flush_bytes = 4 * (size_t)l2;
  void* flush = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int mode = 0; mode < 2; ++mode) {  // 0: L2 flushed before the launch; 1: D in L2 (the same launch just before)
    for (int rep = 0; rep < 3; ++rep) {
      CHECK(cudaMemset(flush, rep, flush_bytes));
      if (mode == 1) CHECK(mb::launch_project_wg(p, 0, false));
      void* stamps = nullptr;
      CHECK(cudaGetSymbolAddress(&stamps, g_time));
      CHECK(cudaMemset(stamps, 0, sizeof(g_time)));
      CHECK(cudaEventRecord(a));
      CHECK(mb::launch_project_wg(p, 0, false));
      CHECK(cudaEventRecord(b));
      CHECK(cudaDeviceSynchronize());
    }
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    static unsigned long long t[kMaxCtas][kSlots];
    static long long c[kMaxCtas][kSlots];
    static unsigned sm[kMaxCtas];
    CHECK(cudaMemcpyFromSymbol(t, g_time, sizeof(t)));
    CHECK(cudaMemcpyFromSymbol(c, g_clock, sizeof(c)));
    CHECK(cudaMemcpyFromSymbol(sm, g_smid, sizeof(sm)));
    // the CTAs that ran: a persistent grid has fewer than the tiles where fewer CTAs fit an SM (each then stamps its
    // last tile's steps over its first's)
    const int tiles = (P + 63) / 64;
    int ctas = 0;
    while (ctas < std::min(tiles, kMaxCtas) && t[ctas][0] != 0) ++ctas;
    unsigned long long t0 = ~0ull, t1 = 0;
    std::vector<int> per_sm(256, 0);
    for (int i = 0; i < ctas; ++i) {
      t0 = std::min(t0, t[i][0]);
      t1 = std::max(t1, t[i][15]);
      per_sm[sm[i] & 255]++;
    }
    const int chunks = (hidden + 63) / 64;
    std::printf("%s (hidden %d, C_out %d) %s: event %.2f us; %d CTAs for %d tiles; CTAs' first stamp to last %.2f us; "
                "CTAs an SM: max %d\n", name, hidden, c_out, mode ? "D in L2" : "L2 flushed", 1e3 * ms, ctas, tiles,
                (t1 - t0) * 1e-3, *std::max_element(per_sm.begin(), per_sm.end()));
    std::vector<double> start, v;
    for (int i = 0; i < ctas; ++i) start.push_back((t[i][0] - t0) * 1e-3);
    std::printf("  CTA start after the first (us): p10 %.2f p50 %.2f p90 %.2f max %.2f\n", pct(start, .1),
                pct(start, .5), pct(start, .9), pct(start, 1.));
    auto row = [&](const char* what, int s0, int s1) {  // us by globaltimer and cycles by clock64, per CTA
      std::vector<double> us, cy;
      for (int i = 0; i < ctas; ++i) {
        us.push_back((double)(t[i][s1] - t[i][s0]) * 1e-3);
        cy.push_back((double)(c[i][s1] - c[i][s0]));
      }
      std::printf("  %-28s us p10 %6.2f p50 %6.2f p90 %6.2f | cycles p50 %8.0f p90 %8.0f\n", what, pct(us, .1),
                  pct(us, .5), pct(us, .9), pct(cy, .5), pct(cy, .9));
    };
    row("wait -> chunk 0's boxes", 0, 1);
    for (int k = 1; k < chunks; ++k) {
      char label[64];
      std::snprintf(label, sizeof(label), "chunk %d -> chunk %d's boxes", k - 1, k);
      row(label, k, k + 1);
    }
    row("last chunk -> its MMAs done", chunks, 14);
    row("epilogue", 14, 15);
    row("whole CTA", 0, 15);
  }
  CHECK(cudaFree(flush));
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  run("B0 4.1", 480, 80);
  run("B0 5.1", 672, 112);
  return 0;
}
