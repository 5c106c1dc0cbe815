// Host-side checks of the raw ops' tensors, shared by every extension's bindings (bindings.cpp,
// mbconv_bindings.cpp, convfirst_s2_bindings.cpp, convfirst_c512_bindings.cpp). Each failure is a
// TORCH_CHECK (RuntimeError in Python) whose message names the tensor.
#pragma once
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

}  // namespace checks
