"""Attention is one fused kernel (as flash attention runs it), not bmm + softmax + bmm."""
import torch
from torch import nn
from torch.nn import functional as F

import perfmodel


class Attention(nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q)


def test_sdpa_is_one_kernel_with_literal_macs_and_bytes():
    b, h, l, e = 2, 4, 64, 32
    r = perfmodel.analyze(Attention(), torch.empty(b, h, l, e), plan="op")
    assert [k.kernel.ops for k in r.kernels] == [("scaled_dot_product_attention",)]
    k = r.kernels[0].kernel
    assert k.macs == b * h * l * l * e * 2  # Q K^T and P V
    assert k.dram_bytes == 2 * (b * h * l * e) * 2  # q (= k = v) read once, out written
    assert k.cost.other_ops == 5 * b * h * l * l  # the softmax


def test_vit_attention_runs_in_twelve_fused_kernels():
    r = perfmodel.analyze_spec("vit_b_16", batch=2)
    fused = [k for k in r.kernels if k.kernel.ops[0] == "scaled_dot_product_attention"]
    assert len(fused) == 12
    assert not any("bmm" in k.kernel.ops and "_softmax" in k.kernel.ops for k in r.kernels)
    assert abs(r.gmacs_per_image - 17.564) < 0.0005  # torchvision's published _ops
