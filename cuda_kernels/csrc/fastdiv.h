// Division by a launch constant as one multiply-high, one add and one shift (Granlund and Montgomery, "Division by
// invariant integers using multiplication", 1994; CUTLASS's FastDivmod does the same): the host finds the
// multiplier once, the kernel reads it from its parameters. For a divisor d >= 1, s = ceil(log2 d) and
// m = floor(2^32 (2^s - d) / d) + 1, every n with 0 <= n < 2^31 has n / d == (umulhi(n, m) + n) >> s (the sum stays
// below 2^32). A division by a runtime value costs ~20 dependent SASS instructions (I2F, MUFU.RCP, F2I, two
// IMAD.HI and corrections); this costs 3. tests/test_fastdiv.py compiles this header with the host compiler and
// checks it against / for every divisor up to 4,096 and edge dividends.
#pragma once
#include <cstdint>

namespace mb {

struct FastDiv {
  uint32_t mul = 1, shift = 0;  // d = 1: (umulhi(n, 1) + n) >> 0 == n

  static FastDiv of(uint32_t d) {  // d >= 1
    FastDiv f;
    while ((1ull << f.shift) < d) ++f.shift;
    f.mul = (uint32_t)(((1ull << 32) * ((1ull << f.shift) - d)) / d + 1);
    return f;
  }
#if defined(__CUDACC__)
  __host__ __device__
#endif
  int div(int n) const {  // 0 <= n < 2^31
#if defined(__CUDA_ARCH__)
    return (int)((__umulhi((uint32_t)n, mul) + (uint32_t)n) >> shift);
#else
    return (int)(((uint32_t)(((uint64_t)(uint32_t)n * mul) >> 32) + (uint32_t)n) >> shift);
#endif
  }
};

}  // namespace mb
