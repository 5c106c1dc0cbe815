// How many clusters of a given size the GPU holds at once (cudaOccupancyMaxActiveClusters), for CTAs shaped like the
// SE kernels: threads and dynamic shared memory set so that 1, 2 or 3 CTAs fit an SM. If fewer clusters fit than a
// kernel launches (16 at batch 128), the rest run in a second wave. Build and run on the GPU machine:
//   nvcc -std=c++17 -arch=sm_90a cuda_kernels/probes/probe_clusters.cu -o /tmp/probe_clusters && /tmp/probe_clusters
#include <cstdio>

#include <cuda_runtime.h>

__global__ void probe_kernel(float* out) {
  extern __shared__ float smem[];
  smem[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (out) out[threadIdx.x] = smem[threadIdx.x ^ 1];
}

int main() {
  cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
  cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s: %d SMs\n", prop.name, prop.multiProcessorCount);
  const int shapes[][2] = {{512, 120 * 1024}, {512, 79104}, {256, 63744}, {256, 120 * 1024}, {128, 30 * 1024}};
  for (const auto& shape : shapes) {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, probe_kernel, shape[0], shape[1]);
    std::printf("threads %d smem %d: %d CTAs/SM; max active clusters:", shape[0], shape[1], per_sm);
    for (int size : {1, 2, 4, 8, 16}) {
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(size * 16);
      config.blockDim = dim3(shape[0]);
      config.dynamicSmemBytes = shape[1];
      cudaLaunchAttribute attribute;
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim.x = size;
      attribute.val.clusterDim.y = 1;
      attribute.val.clusterDim.z = 1;
      config.attrs = &attribute;
      config.numAttrs = 1;
      int clusters = -1;
      cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, probe_kernel, &config);
      std::printf(" %d:%d%s", size, clusters, err == cudaSuccess ? "" : "(err)");
    }
    std::printf("\n");
  }
  return 0;
}
