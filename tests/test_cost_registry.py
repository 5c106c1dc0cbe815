"""Every registry entry's formula by literal arithmetic on the shapes of one case.

A new entry in perfmodel.costs.REGISTRY fails `test_every_registered_op_has_a_case` until a
case for it is written here. Bytes are not the formulas' business (the trace counts every
tensor an op reads or writes); they are tested through the trace in test_costs.py,
test_attention.py and test_out_args.py.
"""
from dataclasses import dataclass, field

import pytest
import torch

from perfmodel.costs import REGISTRY, Cost
from perfmodel.trace import TensorMeta


def t(*shape, dtype=torch.float16) -> TensorMeta:
    return TensorMeta(shape, dtype)


@dataclass(frozen=True)
class Case:
    args: tuple
    out: object
    expected: Cost
    kwargs: dict = field(default_factory=dict)


I32, F32, FP8, BF16 = torch.int32, torch.float32, torch.float8_e4m3fn, torch.bfloat16
X = t(2, 3, 4)  # the input and output of the element-wise cases
CU = t(4, dtype=I32)  # cumulative offsets of 3 packed sequences

# GQA attention: 8 query heads, 2 key/value heads, 16 queries, 24 keys, E = 32, Ev = 40.
SDPA = Case((t(2, 8, 16, 32), t(2, 2, 24, 32), t(2, 2, 24, 40)), t(2, 8, 16, 40),
            Cost(macs=2 * 8 * 16 * 24 * (32 + 40), other_ops=5 * 2 * 8 * 16 * 24))
# The same in the (B, L, H, E) layout of the flash and efficient kernels.
BLHE = (t(2, 16, 8, 32), t(2, 24, 2, 32), t(2, 24, 2, 40))
# Packed: 10 query tokens, 12 key tokens, the longest sequences 4 and 6 long; the pairs are
# bounded by 10 * 6 and by 12 * 4, per query head.
PACKED = (t(10, 8, 32), t(12, 2, 32), t(12, 2, 40))
PACKED_COST = Cost(macs=8 * (12 * 4) * (32 + 40), other_ops=5 * 8 * (12 * 4))

CASES: dict[tuple[str, ...], list[Case]] = {
    ("convolution", "_convolution"): [
        Case((t(2, 4, 8, 8), t(8, 4, 3, 3), t(8), [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
             t(2, 8, 8, 8), Cost(macs=2 * 8 * 8 * 8 * (4 * 3 * 3), bias_ops=8)),
        # 1x1 of stride 2: reads every other row and column of the input
        Case((t(2, 4, 8, 8), t(8, 4, 1, 1), None, [2, 2], [0, 0], [1, 1], False, [0, 0], 1),
             t(2, 8, 4, 4), Cost(macs=2 * 4 * 4 * 8 * 4, input_elements=2 * 4 * 4 * 4)),
        # transposed, 2 groups: each input element scatters into (K/G) * R * S outputs
        Case((t(2, 4, 8, 8), t(4, 3, 3, 3), None, [2, 2], [1, 1], [1, 1], True, [1, 1], 2),
             t(2, 6, 16, 16), Cost(macs=2 * 4 * 8 * 8 * 3 * 3 * 3)),
    ],
    ("mm",): [Case((t(4, 5), t(5, 10)), t(4, 10), Cost(macs=4 * 5 * 10))],
    ("addmm",): [Case((t(10), t(4, 5), t(5, 10)), t(4, 10), Cost(macs=4 * 5 * 10, bias_ops=10))],
    ("bmm", "matmul"): [Case((t(3, 4, 5), t(3, 5, 6)), t(3, 4, 6), Cost(macs=3 * 4 * 5 * 6))],
    ("baddbmm",): [Case((t(3, 4, 6), t(3, 4, 5), t(3, 5, 6)), t(3, 4, 6),
                        Cost(macs=3 * 4 * 5 * 6, bias_ops=6))],
    ("_scaled_mm",): [
        Case((t(16, 32, dtype=FP8), t(32, 48, dtype=FP8), t(dtype=F32), t(dtype=F32)),
             t(16, 48, dtype=BF16), Cost(macs=16 * 32 * 48)),
        Case((t(16, 32, dtype=FP8), t(32, 48, dtype=FP8), t(dtype=F32), t(dtype=F32),
              t(48, dtype=BF16)), t(16, 48, dtype=BF16), Cost(macs=16 * 32 * 48, bias_ops=48)),
    ],
    ("linear",): [Case((t(2, 3, 32), t(48, 32), t(48)), t(2, 3, 48),
                       Cost(macs=2 * 3 * 32 * 48, bias_ops=48))],
    ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
     "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
     "_scaled_dot_product_flash_attention_for_cpu",
     "_scaled_dot_product_fused_attention_overrideable", "_scaled_dot_product_attention_math",
     "_scaled_dot_product_attention_math_for_mps"): [SDPA],
    ("_flash_attention_forward", "_varlen_attn"): [
        Case((*BLHE, None, None, 16, 24, 0.0, False, False), t(2, 16, 8, 40), SDPA.expected),
        Case((*PACKED, CU, CU, 4, 6, 0.0, False, False), t(10, 8, 40), PACKED_COST),
    ],
    ("_flash_attention_forward_no_dropout_inplace", "_varlen_attn_out"): [
        Case((t(10, 8, 40), *PACKED, CU, CU, 4, 6), t(4, 10), PACKED_COST),
    ],
    ("_efficient_attention_forward",): [
        Case((*BLHE, None, None, None, None, None, 0.0, 0), t(2, 16, 8, 40), SDPA.expected),
        Case((*(t(1, *q.shape) for q in PACKED), None, CU, CU, 4, 6, 0.0, 0), t(1, 10, 8, 40),
             PACKED_COST),
    ],
    ("add", "sub", "mul", "div", "neg", "relu", "relu_", "add_", "sub_", "mul_", "div_",
     "maximum", "minimum", "where", "masked_fill", "masked_fill_", "eq", "ne", "lt", "gt", "le",
     "ge", "clamp", "clamp_", "clamp_min", "clamp_min_", "clamp_max", "hardtanh", "hardtanh_",
     "abs", "sign", "reciprocal", "rsub", "threshold", "threshold_", "leaky_relu",
     "leaky_relu_", "logical_not", "bitwise_not", "floor", "ceil", "round", "trunc", "fill_",
     "zero_", "addcmul", "lerp", "square", "scalar_tensor"): [
        Case((X, X), X, Cost(other_ops=1 * 2 * 3 * 4))],
    ("sigmoid", "sigmoid_", "tanh", "tanh_", "exp", "log", "sqrt", "rsqrt", "pow", "sin", "cos",
     "erf", "hardsigmoid", "hardsigmoid_", "hardswish", "hardswish_", "elu", "elu_"): [
        Case((X,), X, Cost(other_ops=4 * 2 * 3 * 4))],
    ("silu", "silu_", "gelu", "gelu_", "mish", "mish_", "softplus"): [
        Case((X,), X, Cost(other_ops=8 * 2 * 3 * 4))],
    ("_to_copy", "copy_", "clone", "contiguous", "lift_fresh_copy", "cat", "stack",
     "constant_pad_nd", "roll", "index", "gather", "index_select", "flip", "repeat",
     "slice_scatter", "select_scatter", "reflection_pad2d", "replication_pad2d", "pixel_shuffle",
     "channel_shuffle", "native_channel_shuffle", "tril", "triu"): [Case((X,), X, Cost())],
    ("embedding",): [Case((t(1000, 64), t(2, 16, dtype=torch.int64)), t(2, 16, 64),
                          Cost(input_elements=2 * 16 * 64))],  # the gathered rows only
    ("native_batch_norm", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit",
     "batch_norm", "cudnn_batch_norm"): [
        Case((t(2, 8, 4, 4), t(8), t(8)), t(2, 8, 4, 4), Cost(other_ops=2 * 2 * 8 * 4 * 4))],
    ("native_layer_norm", "native_group_norm", "layer_norm", "group_norm", "rms_norm",
     "_fused_rms_norm", "instance_norm"): [
        Case((t(2, 10, 32), [32]), t(2, 10, 32), Cost(other_ops=5 * 2 * 10 * 32))],
    ("_softmax", "_safe_softmax", "softmax", "_log_softmax", "log_softmax"): [
        Case((t(2, 10, 32), -1), t(2, 10, 32), Cost(other_ops=5 * 2 * 10 * 32))],
    ("max_pool2d_with_indices", "max_pool2d", "max_pool3d_with_indices", "avg_pool2d",
     "avg_pool3d", "max_pool1d", "avg_pool1d"): [
        Case((t(2, 8, 16, 16), [3, 3], [2, 2]), t(2, 8, 8, 8),
             Cost(other_ops=2 * 8 * 8 * 8 * 3 * 3))],
    ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
     "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d"): [
        Case((t(1, 2, 4, 4), [8, 8]), t(1, 2, 8, 8), Cost())],  # a copy: no arithmetic
    # a weighted sum of n taps per output element: n multiplies and n - 1 adds
    ("upsample_linear1d",): [Case((t(1, 2, 4), [8], False), t(1, 2, 8),
                                  Cost(other_ops=(2 + 1) * 1 * 2 * 8))],
    ("upsample_bilinear2d",): [Case((t(1, 2, 4, 4), [8, 8], False), t(1, 2, 8, 8),
                                    Cost(other_ops=(4 + 3) * 1 * 2 * 8 * 8))],
    ("upsample_trilinear3d",): [Case((t(1, 2, 4, 4, 4), [8, 8, 8], False), t(1, 2, 8, 8, 8),
                                     Cost(other_ops=(8 + 7) * 1 * 2 * 8 * 8 * 8))],
    ("upsample_bicubic2d",): [Case((t(1, 2, 4, 4), [8, 8], False), t(1, 2, 8, 8),
                                   Cost(other_ops=(16 + 15) * 1 * 2 * 8 * 8))],
    ("_adaptive_avg_pool2d", "adaptive_max_pool2d", "_adaptive_avg_pool3d",
     "adaptive_avg_pool1d", "adaptive_max_pool1d"): [
        Case((t(2, 8, 16, 16), [1, 1]), t(2, 8, 1, 1), Cost(other_ops=2 * 8 * 16 * 16))],
    ("mean", "sum", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "argmax",
     "argmin", "prod", "norm", "linalg_vector_norm", "logsumexp", "any", "all"): [
        Case((t(2, 8, 16), [-1]), t(2, 8), Cost(other_ops=2 * 8 * 16))],
}

PARAMS = [pytest.param(name, case, id=f"{name}-{i}")
          for names, cases in CASES.items() for name in names for i, case in enumerate(cases)]


@pytest.mark.parametrize("name, case", PARAMS)
def test_formula(name, case):
    cost = REGISTRY[name].formula(*case.args, out=case.out, **case.kwargs)
    assert cost == case.expected


def test_every_registered_op_has_a_case():
    covered = [name for names in CASES for name in names]
    assert len(covered) == len(set(covered)), "an op listed in two cases"
    assert set(REGISTRY) - set(covered) == set(), "registered ops without a case here"
    assert set(covered) - set(REGISTRY) == set(), "cases for ops no longer registered"
