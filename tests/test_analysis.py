"""Roofline, waterline, mediant and Amdahl's roofline by literal arithmetic."""
import pytest

from perfmodel.analysis import amdahl_roofline, amdahl_speedup, kernel_time, roofline, waterline
from perfmodel.costs import Cost
from perfmodel.hardware import load_hardware
from perfmodel.plan import Kernel

HW = load_hardware("a5000-paper")  # R = 76.7e12 ops/s, B = 480e9 B/s
R, B = 76.7e12, 480e9


def kernel(flops, nbytes):
    return Kernel("k", cost=Cost(macs=flops // 2), input_bytes=nbytes)


def test_op_byte_is_derived():
    assert HW.op_byte("float16") == pytest.approx(76.7e12 / 480e9)
    assert load_hardware("h200-sxm").op_byte("bf16") == pytest.approx(989.4e12 / 4800e9)


def test_kernel_time_is_max_of_compute_and_memory():
    assert kernel_time(2_000_000, 1_000, R, B) == pytest.approx(2e6 / 76.7e12)
    assert kernel_time(2_000, 1_000_000, R, B) == pytest.approx(1e6 / 480e9)
    assert roofline(10.0, R, B) == pytest.approx(480e9 * 10)
    assert roofline(1e6, R, B) == R


def test_waterline_of_a_mixed_sequence():
    # compute-bound: 1e12 ops over 1e9 bytes (I = 1000); memory-bound: 1e10 ops over 1e9 bytes (I = 10)
    ks = [kernel(10**12, 10**9), kernel(10**10, 10**9), kernel(0, 5 * 10**8)]
    times, total = waterline(ks, HW, "float16")
    t0, t1, t2 = 1e12 / R, 1e9 / B, 5e8 / B
    assert [t.t_min_s for t in times] == pytest.approx([t0, t1, t2])
    assert [t.memory_bound for t in times] == [False, True, True]
    assert total.t_min_s == pytest.approx(t0 + t1 + t2)
    n = 10**12 + 10**10
    assert total.c_max == pytest.approx(n / (R * (t0 + t1 + t2)))
    assert total.mediant_intensity == pytest.approx(n / 2.5e9)
    assert total.mediant_c_max == 1.0  # I_med = 404 > op:byte 160: the roofline says compute-bound
    assert total.c_max < 0.82  # while the waterline loses 19% to the memory-bound kernels
    # Amdahl's form reproduces the waterline exactly: f = N_mem / N, I_mem = N_mem / B_mem
    f, i_mem = 1e10 / n, 1e10 / 1.5e9
    assert total.memory_fraction == pytest.approx(f)
    assert total.memory_intensity == pytest.approx(i_mem)
    assert total.c_max == pytest.approx(1 / ((1 - f) + f * (R / B) / i_mem))


def test_amdahl_roofline_with_f_one_is_the_classic_roofline():
    rho = R / B
    for intensity in (1.0, 10.0, rho, 1000.0):
        assert amdahl_roofline(intensity, 1.0, R, rho) == pytest.approx(min(R, B * intensity))
    assert amdahl_roofline(1.0, 0.0, R, rho) == R  # no memory-bound ops: peak


def test_fusion_speedup():
    ks = [kernel(10**12, 10**9), kernel(10**10, 10**9)]
    _, total = waterline(ks, HW, "float16")
    rho = R / B
    before = 1e12 / R + 1e9 / B
    after = 1e12 / R + 1e10 / R  # lifted above the waterline: compute-bound
    assert total.fusion_speedup(2 * rho) == pytest.approx(before / after)
    assert amdahl_speedup(10, 0, 0, rho, 5.0) == 1.0
