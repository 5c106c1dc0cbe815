// Host-side checks of the raw ops' tensors and launches, shared by every extension's bindings
// (bindings.cpp, mbconv_bindings.cpp, convfirst_s2_bindings.cpp, convfirst_c512_bindings.cpp,
// convfirst_c768_bindings.cpp, convfirst_s2_wgmma_bindings.cpp). Each failure is a TORCH_CHECK
// (RuntimeError in Python) whose message names the tensor or the kernel.
#pragma once
#include <cuda_runtime_api.h>
#include <torch/extension.h>

#include <cstdint>
#include <string>

namespace checks {

// A number in a TORCH_CHECK message. On the device machines (their /opt/gcc toolchain builds the
// extensions), a number streamed into the message (c10::str's std::ostringstream << long) crashes
// the process with a segmentation fault inside the extension (cuda-gdb: std::basic_ostream::
// _M_insert<long>), where a message of strings raises as it should (cuda_kernels/probe_torch_check.py,
// examples/measurements/convfirst_c256/). So every message formats its numbers here, as strings.
inline std::string num(int64_t v) { return std::to_string(v); }

inline void cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
}

inline void same_device(const torch::Tensor& t, const torch::Tensor& x, const char* name) {
  TORCH_CHECK(t.device() == x.device(), name, " is on ", t.device().str(), ", x on ", x.device().str());
}

// The expected dtype, contiguous, 16-byte aligned (the kernels move 16-byte chunks with cp.async
// and bulk copies).
inline void dense(const torch::Tensor& t, const char* name, torch::ScalarType dtype) {
  TORCH_CHECK(t.scalar_type() == dtype, name, " has the wrong dtype");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

// A CUDA tensor, then `dense` (bindings.cpp; the device against x is `same_device`).
inline void cuda_dense(const torch::Tensor& t, const char* name, torch::ScalarType dtype) {
  cuda(t, name);
  dense(t, name, dtype);
}

// A CUDA tensor on x's device (two checks, two messages), then `dense` (mbconv_bindings.cpp).
inline void cuda_like_x(const torch::Tensor& t, const char* name, torch::ScalarType dtype, const torch::Tensor& x) {
  cuda(t, name);
  same_device(t, x, name);
  dense(t, name, dtype);
}

// On x's CUDA device (one check, one message), then `dense` (the ConvFirst extensions).
inline void on_x_device(const torch::Tensor& t, const torch::Tensor& x, const char* name, torch::ScalarType dtype) {
  TORCH_CHECK(t.is_cuda() && t.device() == x.device(), name, " must be on x's CUDA device");
  dense(t, name, dtype);
}

inline bool overlap(const torch::Tensor& a, const torch::Tensor& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.data_ptr()), b0 = reinterpret_cast<uintptr_t>(b.data_ptr());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// A failed launch of the sm_90a kernels, with the two refusals their launchers make before
// launching spelled out (no kernel image for this GPU; more shared memory than it offers).
inline void launch(cudaError_t err, const char* kernel) {
  TORCH_CHECK(err != cudaErrorInvalidConfiguration, kernel,
              ": the kernel needs more shared memory per block than this GPU offers");
  TORCH_CHECK(err != cudaErrorNoKernelImageForDevice, kernel,
              ": needs a compute capability 9.0 GPU (H100, H200) and an sm_90a build");
  TORCH_CHECK(err == cudaSuccess, kernel, " launch failed: ", cudaGetErrorString(err));
}

}  // namespace checks
