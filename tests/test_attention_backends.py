"""The fused attention kernels PyTorch dispatches to, called directly (on meta tensors
F.scaled_dot_product_attention never reaches them), and flex_attention's clear refusal."""
import pytest
import torch
from torch import nn

import perfmodel

aten = torch.ops.aten
FP16 = 2
# grouped-query attention: 8 query heads, 2 key/value heads, 16 queries, 24 keys, E = 32
B, HQ, HKV, L, S, E = 2, 8, 2, 16, 24, 32
SCORES = B * HQ * L * S
MACS = SCORES * E * 2  # Q K^T and P V
QKV_OUT_BYTES = (B * HQ * L * E + 2 * B * HKV * S * E + B * HQ * L * E) * FP16


class Call(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def one_kernel(fn, *shapes):
    r = perfmodel.analyze(Call(fn), [torch.empty(s) for s in shapes], plan="op")
    assert r.unsupported == {}
    (k,) = [k.kernel for k in r.kernels]
    return k


BHLE = ((B, HQ, L, E), (B, HKV, S, E), (B, HKV, S, E))
SDPA_BACKENDS = {
    "_scaled_dot_product_flash_attention":
        lambda q, k, v: aten._scaled_dot_product_flash_attention(q, k, v)[0],
    "_scaled_dot_product_efficient_attention":
        lambda q, k, v: aten._scaled_dot_product_efficient_attention(q, k, v, None, False)[0],
    "_scaled_dot_product_cudnn_attention":
        lambda q, k, v: aten._scaled_dot_product_cudnn_attention(q, k, v, None, False)[0],
    "_scaled_dot_product_flash_attention_for_cpu":
        lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)[0],
    "_scaled_dot_product_fused_attention_overrideable":
        lambda q, k, v: aten._scaled_dot_product_fused_attention_overrideable(q, k, v)[0],
}


@pytest.mark.parametrize("name", [n for n in SDPA_BACKENDS if hasattr(aten, n)])
def test_sdpa_backends_count_like_sdpa(name):
    k = one_kernel(SDPA_BACKENDS[name], *BHLE)
    assert list(k.ops) == [name]
    assert k.macs == MACS and k.flops == 2 * MACS
    assert k.cost.other_ops == 5 * SCORES
    assert k.dram_bytes == QKV_OUT_BYTES


BLHE = ((B, L, HQ, E), (B, S, HKV, E), (B, S, HKV, E))


def test_flash_attention_forward_in_its_b_l_h_e_layout():
    k = one_kernel(lambda q, k, v: aten._flash_attention_forward(
        q, k, v, None, None, L, S, 0.0, False, False)[0], *BLHE)
    assert k.macs == MACS and k.cost.other_ops == 5 * SCORES
    assert k.dram_bytes == QKV_OUT_BYTES


def test_efficient_attention_forward_in_its_b_l_h_e_layout():
    k = one_kernel(lambda q, k, v: aten._efficient_attention_forward(
        q, k, v, None, None, None, None, None, 0.0, 0)[0], *BLHE)
    assert k.macs == MACS and k.cost.other_ops == 5 * SCORES
    assert k.dram_bytes == QKV_OUT_BYTES


def offsets(*lengths):
    return torch.tensor([sum(lengths[:i]) for i in range(len(lengths) + 1)], dtype=torch.int32)


def test_packed_flash_attention_bounds_pairs_by_tokens():
    """Sequences of 3 and 5 tokens, 4 heads: 4 * (3*3 + 5*5) pairs really; the lengths are
    unknown on meta tensors, so 4 * 8 tokens * 5 (the longest) is the count."""
    k = one_kernel(lambda q: aten._flash_attention_forward(
        q, q, q, offsets(3, 5), offsets(3, 5), 5, 5, 0.0, False, False)[0], (3 + 5, 4, 16))
    assert k.macs == 4 * (8 * 5) * (16 + 16)
    assert k.cost.other_ops == 5 * 4 * (8 * 5)


def test_varlen_attn():
    varlen = pytest.importorskip("torch.nn.attention.varlen")
    k = one_kernel(lambda q: varlen.varlen_attn(q, q, q, offsets(4, 4), offsets(4, 4), 4, 4),
                   (4 + 4, 2, 16))
    assert list(k.ops) == ["_varlen_attn"]
    assert k.macs == 2 * (4 * 4 + 4 * 4) * (16 + 16)  # equal lengths: exact


class Flex(nn.Module):
    def forward(self, q):
        from torch.nn.attention.flex_attention import flex_attention

        return flex_attention(q, q, q)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Flex()

    def forward(self, q):
        return self.attn(q)


def test_flex_attention_is_a_one_line_trace_error():
    pytest.importorskip("torch.nn.attention.flex_attention")
    with pytest.raises(perfmodel.InputError) as info:
        perfmodel.analyze(Block(), torch.empty(B, HQ, L, E))
    message = str(info.value)
    assert "\n" not in message
    assert "module 'attn' (Flex) calls flex_attention" in message
    assert "meta tensors" in message
