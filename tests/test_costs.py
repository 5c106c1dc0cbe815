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


@pytest.mark.parametrize("mode, shape, scale_shape, taps", [
    ("nearest", (2, 3, 4, 4), (2, 3, 8, 8), 0),
    ("nearest-exact", (2, 3, 4, 4), (2, 3, 8, 8), 0),
    ("nearest", (2, 3, 4), (2, 3, 8), 0),
    ("nearest", (2, 3, 4, 4, 4), (2, 3, 8, 8, 8), 0),
    ("linear", (2, 3, 4), (2, 3, 8), 2),
    ("bilinear", (2, 3, 4, 4), (2, 3, 8, 8), 2 * 2),
    ("bicubic", (2, 3, 4, 4), (2, 3, 8, 8), 4 * 4),
    ("trilinear", (2, 3, 4, 4, 4), (2, 3, 8, 8, 8), 2 * 2 * 2),
])
def test_upsample_reads_its_input_and_writes_its_output(mode, shape, scale_shape, taps):
    (k,), r = kernels(lambda x: nn.functional.interpolate(x, scale_factor=2, mode=mode), shape)
    assert r.unsupported == {} and k.macs == 0
    n_in, n_out = 2 * 3 * 4 ** (len(shape) - 2), 2 * 3 * 8 ** (len(shape) - 2)
    # a weighted sum of `taps` inputs per output element; nearest only copies
    assert k.cost.other_ops == (taps + taps - 1 if taps else 0) * n_out
    assert k.dram_bytes == (n_in + n_out) * FP16


def test_scaled_mm_reads_fp8_operands_and_writes_its_out_dtype():
    def fp8_product(a, b):
        scale_a, scale_b = torch.ones((), dtype=torch.float32), torch.ones((), dtype=torch.float32)
        return torch._scaled_mm(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t(),
                                scale_a, scale_b, out_dtype=torch.bfloat16)

    ks, r = kernels(fp8_product, (16, 32), (48, 32))
    assert r.unsupported == {}
    k = ks[-1]  # after the two casts to fp8
    assert list(k.ops) == ["_scaled_mm"]
    assert k.macs == 16 * 32 * 48 and k.flops == 2 * 16 * 32 * 48
    # fp8 operands (1 byte), two fp32 scales, a bfloat16 result
    assert k.dram_bytes == (16 * 32 + 32 * 48) * 1 + 2 * 4 + 16 * 48 * 2
