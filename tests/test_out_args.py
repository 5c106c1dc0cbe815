"""Ops called with out= trace and count like their functional forms: the out tensor is
written, never read (op plan: one op, one kernel)."""
import torch
from torch import nn

import perfmodel

FP16, FP32 = 2, 4


class Into(nn.Module):
    """Calls `fn(*inputs, out=y)` on a fresh y of `out_shape` (empty: the op resizes it)."""

    def __init__(self, fn, out_shape):
        super().__init__()
        self.fn, self.out_shape = fn, out_shape

    def forward(self, *xs):
        y = torch.empty(self.out_shape, dtype=xs[0].dtype)
        self.fn(*xs, out=y)
        return y


def analyze(fn, out_shape, *shapes, dtype="float16"):
    return perfmodel.analyze(Into(fn, out_shape), [torch.empty(s) for s in shapes], plan="op",
                             dtype=dtype)


def test_mm_out_counts_the_product_and_writes_without_reading():
    r = analyze(torch.mm, (4, 10), (4, 5), (5, 10))
    (k,) = [k.kernel for k in r.kernels]
    assert r.unsupported == {}
    assert list(k.ops) == ["mm"]
    assert k.macs == 4 * 5 * 10 and k.flops == 2 * 4 * 5 * 10
    assert k.dram_bytes == (4 * 5 + 5 * 10 + 4 * 10) * FP16  # a, b read; y written only


def test_mm_out_matches_torch_flop_counter_test():
    """PyTorch's test_flop_counter.py::test_addmm_out: mm of 10x10 by 10x10 into out= is 2000."""
    r = analyze(torch.mm, (10, 10), (10, 10), (10, 10), dtype="float32")
    assert r.kernels[0].kernel.flops == 2 * 10 * 10 * 10 == 2000
    assert r.kernels[0].kernel.dram_bytes == 3 * 10 * 10 * FP32


def test_add_out_is_one_pointwise_op():
    r = analyze(torch.add, (4, 5), (4, 5), (4, 5))
    (k,) = [k.kernel for k in r.kernels]
    assert k.cost.other_ops == 4 * 5 and k.macs == 0
    assert k.dram_bytes == 3 * 4 * 5 * FP16


def test_cat_out_into_an_empty_tensor_the_op_resizes():
    r = perfmodel.analyze(Into(lambda a, b, out: torch.cat([a, b], out=out), (0,)),
                          [torch.empty(2, 3), torch.empty(5, 3)], plan="op")
    (k,) = [k.kernel for k in r.kernels]
    assert k.output_shape == (2 + 5, 3)
    assert k.dram_bytes == 2 * (2 * 3 + 5 * 3) * FP16  # inputs read, the resized y written


class IntoView(nn.Module):
    """mm into the top rows of a buffer, then reads the whole buffer."""

    def forward(self, a, b):
        buf = torch.zeros(8, 10, dtype=a.dtype)
        torch.mm(a, b, out=buf[:4])
        return buf * 2


def test_out_into_a_view_writes_the_view_and_versions_the_buffer():
    r = perfmodel.analyze(IntoView(), [torch.empty(4, 5), torch.empty(5, 10)], plan="op")
    mm, mul = [k.kernel for k in r.kernels]
    assert mm.macs == 4 * 5 * 10
    assert mm.dram_bytes == (4 * 5 + 5 * 10 + 4 * 10) * FP16
    assert mul.input_bytes == 8 * 10 * FP16  # the buffer, now produced by mm
