// Host side of the MBConv launchers: a kernel's per-device launch state (opt-in shared memory set once, CTAs per SM
// cached) and the one function that fills it (mbconv_v3.cu's SE and projections, mbconv_proj_wg.cu).
#pragma once
#include <cuda_runtime.h>

namespace mb {
namespace {

constexpr int kMaxDevices = 64;

struct DeviceSlots {  // per-device state of one kernel: opt-in shared memory set, CTAs per SM
  int configured[kMaxDevices] = {};
  int ctas_per_sm[kMaxDevices] = {};
  int sms[kMaxDevices] = {};
};

// per_call: the occupancy for this `smem` every call (kernels whose shared memory varies per block).
template <typename Kernel>
cudaError_t prepare(Kernel kernel, DeviceSlots& slots, int smem, int threads, int& dev, bool per_call = false) {
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (smem > slots.configured[dev]) {
    int optin = 0;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return err;
    if (smem > optin) return cudaErrorInvalidConfiguration;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    if (err != cudaSuccess) return err;
    slots.configured[dev] = optin;
    slots.ctas_per_sm[dev] = 0;
  }
  if (slots.ctas_per_sm[dev] == 0 || per_call) {
    err = cudaDeviceGetAttribute(&slots.sms[dev], cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&slots.ctas_per_sm[dev], kernel, threads, smem);
    if (err != cudaSuccess) return err;
    if (slots.ctas_per_sm[dev] < 1) return cudaErrorInvalidConfiguration;
  }
  return cudaSuccess;
}

}  // namespace
}  // namespace mb
