"""Division by a launch constant as a multiply-high, an add and a shift (cuda_kernels/csrc/fastdiv.h), compiled with the
host compiler and checked against C++'s `/`: every divisor 1..4,096 with the dividends around 0, around its multiples
near 2^31 and 200 pseudo-random ones, and a few large divisors at the edges. The kernel runs the same expression
with __umulhi (the host path spells the multiply-high out)."""

import shutil
import subprocess
from pathlib import Path

import pytest

import cuda_kernels

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"

PROGRAM = r"""
#include "fastdiv.h"
#include <cstdio>
#include <initializer_list>
int main() {
  long long checks = 0, wrong = 0;
  auto check = [&](uint32_t d, long long n) {
    if (n < 0 || n >= (1ll << 31)) return;
    ++checks;
    if (mb::FastDiv::of(d).div((int)n) != (int)(n / d) && wrong++ < 5) std::printf("wrong: %lld / %u\n", n, d);
  };
  const long long top = (1ll << 31) - 1;
  for (uint32_t d = 1; d <= 4096; ++d) {
    for (long long n = 0; n < 3 * d + 3; ++n) check(d, n);
    for (long long k = top / d - 2; k <= top / d + 1; ++k)
      for (int e = -1; e <= 1; ++e) check(d, k * d + e);
    unsigned s = d;
    for (int r = 0; r < 200; ++r) {
      s = s * 1664525u + 1013904223u;
      check(d, s & 0x7fffffff);
    }
  }
  for (uint32_t d : {8191u, 65537u, 1000003u, (1u << 30) + 1, (1u << 31) - 1, 1u << 30})
    for (long long n : {0ll, 1ll, (long long)d - 1, (long long)d, (long long)d + 1, top - 1, top}) check(d, n);
  std::printf("%lld %lld\n", checks, wrong);
  return 0;
}
"""


def _compiler():
    return shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


@pytest.mark.skipif(_compiler() is None, reason="needs a C++ compiler")
def test_the_multiply_equals_division_for_every_small_divisor(tmp_path):
    src = tmp_path / "fastdiv_check.cpp"
    src.write_text(PROGRAM)
    exe = tmp_path / "fastdiv_check"
    subprocess.run([_compiler(), "-std=c++17", "-O2", f"-I{CSRC}", str(src), "-o", str(exe)], check=True)
    checks, wrong = map(int, subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()[-2:])
    # 4,096 divisors: 3 d + 3 small dividends each (3 x 4,096 x 4,097 / 2 + 3 x 4,096 = 25,184,256 in all), 12 near
    # 2^31, 200 random; 6 x 7 at the edges
    small = sum(3 * d + 3 for d in range(1, 4097))
    assert small == 25_184_256
    assert checks > small + 4096 * 200 and wrong == 0


def test_the_constants_by_hand():
    """s = ceil(log2 d), m = floor(2^32 (2^s - d) / d) + 1: d = 3 -> s 2, m 1,431,655,766; d = 7 (B0's 2.1 bands) ->
    s 3, m 613,566,757; d = 1 -> s 0, m 1 (the quotient is n itself)."""
    def of(d):
        s = (d - 1).bit_length()
        return (2**32 * (2**s - d)) // d + 1, s

    assert of(3) == (1_431_655_766, 2) and of(7) == (613_566_757, 3) and of(1) == (1, 0)
    m, s = of(7)
    assert all(((n * m >> 32) + n) >> s == n // 7 for n in (0, 6, 7, 2688, 2**31 - 1))
    text = (CSRC / "fastdiv.h").read_text()
    assert "f.mul = (uint32_t)(((1ull << 32) * ((1ull << f.shift) - d)) / d + 1);" in text
    assert "return (int)((__umulhi((uint32_t)n, mul) + (uint32_t)n) >> shift);" in text
