// Programmatic dependent launch (Hopper, CUDA 12+), behind the host switch CUDA_KERNELS_PDL (default off;
// cuda_kernels/_pdl.py reads it at each launch and the bindings pass it in the kernel's Params as `pdl`).
//
// Device side: griddepcontrol.wait makes the executing thread wait until the prerequisite grids in flight
// have completed and their memory operations are visible; griddepcontrol.launch_dependents lets the
// dependent grid be scheduled once every CTA of this grid has issued it or exited (repeats within a CTA
// have no further effect). A kernel launched without the programmatic attribute has no prerequisite grid
// in flight when it starts (the stream serialises it), so the wait returns at once and the trigger does
// nothing: the kernels execute both unconditionally, with the switch on or off. Each kernel issues the
// wait, in every thread that reads the previous kernel's output or writes global memory, before the first
// such access, and the trigger only after its own wait, so a chain of PDL kernels stays ordered: kernel
// n + 1 passes its wait only once kernel n completed, which needed kernel n's waits, i.e. kernel n - 1
// complete. A predecessor launched without the attribute (a Triton or cuDNN kernel) never triggers, so
// the dependent starts when it completes: an ordinary dependency.
// Compiled only for sm_90+ (PTX ISA 7.8); on sm_80 images both are empty.
#pragma once
#include <cuda_runtime.h>
#include <utility>

namespace pdl {

__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Host: whether the current device takes the attribute (compute capability 9.0 or newer), cached per device.
inline bool device_supports(int dev) {
  static int cached[64] = {};  // 0 unknown, 1 no, 2 yes
  if (dev < 0 || dev >= 64) return false;
  if (cached[dev] == 0) {
    int major = 0;
    cached[dev] = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9
                      ? 2 : 1;
  }
  return cached[dev] == 2;
}

// Appends the programmatic-stream-serialisation attribute to `attrs` (room for one more) when `on`.
inline void add_attribute(cudaLaunchAttribute* attrs, unsigned& count, bool on) {
  if (!on) return;
  attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[count].val.programmaticStreamSerializationAllowed = 1;
  ++count;
}

// cudaLaunchKernelEx of `kernel` on grid x block threads with smem bytes on stream: in clusters of `cluster` CTAs
// (no cluster attribute where it is 1 x 1 x 1) and with the PDL attribute where `on`.
template <typename... KArgs, typename... Args>
cudaError_t launch_ex(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, dim3 cluster,
                      bool on, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  unsigned count = 0;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = cluster.x;
    attribute[0].val.clusterDim.y = cluster.y;
    attribute[0].val.clusterDim.z = cluster.z;
    count = 1;
  }
  add_attribute(attribute, count, on);
  config.attrs = attribute;
  config.numAttrs = count;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  return err != cudaSuccess ? err : cudaGetLastError();
}

// A plain launch (no other attribute) with the attribute: the <<<grid, block, smem, stream>>> equivalent.
template <typename... KArgs, typename... Args>
cudaError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  return launch_ex(kernel, grid, block, smem, stream, dim3(1, 1, 1), true, std::forward<Args>(args)...);
}

}  // namespace pdl
