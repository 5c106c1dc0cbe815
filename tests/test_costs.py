"""Cost formulas beyond convolutions, by literal arithmetic (op plan: one op, one kernel)."""
import pytest
import torch
from torch import nn

import perfmodel
from perfmodel.costs import REGISTRY, register

FP16 = 2


class Fn(nn.Module):
    def __init__(self, fn, *params):
        super().__init__()
        self.fn = fn
        self.params = nn.ParameterList(params)

    def forward(self, *xs):
        return self.fn(*xs, *self.params)


def kernels(fn, *shapes, params=()):
    r = perfmodel.analyze(Fn(fn, *params), [torch.empty(s) for s in shapes], plan="op")
    return [k.kernel for k in r.kernels], r


def test_max_pool_counts_window_compares():
    (k,), _ = kernels(lambda x: nn.functional.max_pool2d(x, 3, 2, 1), (2, 8, 16, 16))
    assert k.cost.other_ops == 2 * 8 * 8 * 8 * 9 and k.macs == 0
    assert k.dram_bytes == (2 * 8 * 16 * 16 + 2 * 8 * 8 * 8) * FP16  # indices unused: not written


def test_global_average_pool():
    (k,), _ = kernels(lambda x: nn.functional.adaptive_avg_pool2d(x, 1), (2, 8, 16, 16))
    assert k.cost.other_ops == 2 * 8 * 16 * 16
    assert k.output_bytes == 2 * 8 * FP16


def test_layer_norm_and_softmax():
    w, b = nn.Parameter(torch.ones(32)), nn.Parameter(torch.zeros(32))
    (k,), _ = kernels(lambda x, w, b: nn.functional.layer_norm(x, (32,), w, b), (4, 10, 32),
                      params=(w, b))
    assert k.cost.other_ops == 5 * 4 * 10 * 32
    assert k.weight_bytes == 2 * 32 * FP16 and k.input_bytes == k.output_bytes == 4 * 10 * 32 * FP16
    (k,), _ = kernels(lambda x: torch.softmax(x, -1), (4, 10, 32))
    assert k.cost.other_ops == 5 * 4 * 10 * 32


def test_cat_moves_bytes_and_views_are_free():
    (k,), _ = kernels(lambda a, b: torch.cat([a, b], 1), (2, 3, 4), (2, 5, 4))
    assert k.cost.other_ops == 0
    assert k.dram_bytes == 2 * (2 * 3 * 4 + 2 * 5 * 4) * FP16
    ks, r = kernels(lambda x: x.reshape(2, 12).t().unsqueeze(0), (2, 3, 4))
    assert ks == [] and r.graph.nodes == []


def test_matrix_products():
    w = nn.Parameter(torch.empty(48, 32))
    (k,), _ = kernels(lambda x, w: nn.functional.linear(x, w), (4, 10, 32), params=(w,))
    assert k.macs == 4 * 10 * 32 * 48
    (k,), _ = kernels(torch.bmm, (3, 5, 7), (3, 7, 2))
    assert k.macs == 3 * 5 * 7 * 2
    (k,), _ = kernels(lambda a, b: a @ b, (6, 9), (9, 4))
    assert k.macs == 6 * 9 * 4


def test_a_second_registration_is_an_error():
    assert "convolution" in REGISTRY
    with pytest.raises(ValueError, match="registered twice"):
        register("convolution", role="compute")(lambda *a, **k: None)
