// How many CTAs of 256 threads and ~100-115 KB of shared memory run at once when launched in clusters of two
// (session 34: the fused-image kernels, NOTES.md "Session 34"): the occupancy API's answers, and a launch of 2 x 128
// CTAs that each spin ~20 us and record their SM and start time, with and without the cluster attribute.
// Build and run on the GPU machine, from the repository root:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a cuda_kernels/probes/probe_cluster_occupancy.cu \
//     -o /tmp/probe_cluster && /tmp/probe_cluster
#include <algorithm>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(x)                                                                      \
  do {                                                                                \
    const cudaError_t e = (x);                                                        \
    if (e != cudaSuccess) {                                                           \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));   \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

__global__ void __launch_bounds__(256, 2) spin(unsigned long long* start, unsigned* sm, int spin_ns) {
  extern __shared__ unsigned char smem[];
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  if (threadIdx.x == 0) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    start[blockIdx.x] = t0;
    sm[blockIdx.x] = s;
    smem[0] = 1;
  }
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < (unsigned long long)spin_ns);
}

int main() {
  const int ctas = 256, sizes[] = {104104, 114872};
  unsigned long long* d_start;
  unsigned* d_sm;
  CHECK(cudaMalloc(&d_start, ctas * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&d_sm, ctas * sizeof(unsigned)));
  CHECK(cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  for (int smem : sizes) {
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, spin, 256, smem));
    for (int cluster : {1, 2}) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(ctas);
      cfg.blockDim = dim3(256);
      cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = cluster;
      attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = cluster > 1 ? 1 : 0;
      int clusters = -1;
      if (cluster > 1) CHECK(cudaOccupancyMaxActiveClusters(&clusters, spin, &cfg));
      for (int rep = 0; rep < 2; ++rep) {
        CHECK(cudaLaunchKernelEx(&cfg, spin, d_start, d_sm, 20000));
        CHECK(cudaDeviceSynchronize());
      }
      std::vector<unsigned long long> st(ctas);
      std::vector<unsigned> sm(ctas);
      CHECK(cudaMemcpy(st.data(), d_start, ctas * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(sm.data(), d_sm, ctas * sizeof(unsigned), cudaMemcpyDeviceToHost));
      const unsigned long long t0 = *std::min_element(st.begin(), st.end());
      int late = 0, same_sm_pairs = 0;
      std::vector<int> per(256, 0);
      for (int i = 0; i < ctas; ++i) {
        late += st[i] - t0 > 10000;  // started after the first wave's 20-us spin was half over
        per[sm[i]]++;
      }
      for (int i = 0; i + 1 < ctas; i += 2) same_sm_pairs += sm[i] == sm[i + 1];
      const int used = (int)std::count_if(per.begin(), per.end(), [](int c) { return c > 0; });
      std::printf("smem %d: %d CTAs an SM (occupancy API); cluster %d: max active clusters %d; %d CTAs on %d SMs, "
                  "%d started > 10 us late; pairs (2k, 2k+1) on one SM: %d\n",
                  smem, per_sm, cluster, clusters, ctas, used, late, same_sm_pairs);
    }
  }
  return 0;
}
