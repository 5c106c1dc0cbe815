"""The one registry of per-op cost formulas.

Conventions (stated once, here):

- ``macs``: multiply-accumulates of tensor-matrix products and convolutions.
- ``bias_ops``: bias additions of those products, counted as the paper's eq. 22 does
  (K additions for a bias vector of K elements).
- ``flops`` = 2 * macs + bias_ops: the operations that enter roofline, waterline and
  efficiency. Everything else (element-wise, normalization, pooling, softmax) is
  ``other_ops``: counted and reported, but it never raises a kernel's intensity.
- Bytes are mostly not computed here: the trace knows each op's tensors, and every tensor
  an op reads or writes moves ``elements x dtype size`` bytes (views read what they view).
  A formula may say that an op reads only part of its first input (``input_elements``).

Each formula is a small pure function of the op's recorded arguments (tensors replaced by
:class:`~perfmodel.trace.TensorMeta`) and its output, registered for one or more aten ops
together with the op's *role* in execution plans. Registering an op twice is an error.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Callable

import torch

from .trace import Graph, OpNode, TensorMeta

# Roles decide how plans group ops into kernels (see plan.py).
COMPUTE = "compute"  # convolution / matrix product: starts a kernel, can absorb a batchnorm
POINTWISE = "pointwise"  # fuses into the kernel that produced its input
BATCHNORM = "batchnorm"  # folds into a preceding conv/linear, else acts as pointwise
KERNEL = "kernel"  # pooling, reductions, normalizations, softmax, copies: starts a kernel


@dataclass(frozen=True, slots=True)
class Cost:
    macs: int = 0
    bias_ops: int = 0
    other_ops: int = 0
    # Elements of the first input the op actually reads, where that is fewer than all of
    # them (a 1x1 conv of stride 2 never touches three pixels in four); None: all.
    input_elements: int | None = None

    @property
    def flops(self) -> int:
        """Ops that enter the roofline: 2 x MACs + bias adds (eq. 22)."""
        return 2 * self.macs + self.bias_ops

    def __add__(self, other: "Cost") -> "Cost":
        """Arithmetic adds; `input_elements` belongs to one op and does not carry over."""
        return Cost(self.macs + other.macs, self.bias_ops + other.bias_ops,
                    self.other_ops + other.other_ops)


ZERO = Cost()


@dataclass(frozen=True, slots=True)
class Entry:
    formula: Callable[..., Cost]
    role: str


REGISTRY: dict[str, Entry] = {}  # keyed by aten op name without overload, e.g. "convolution"


def register(*ops, role: str):
    """Decorator: register `formula` for aten ops named without overload ("convolution").

    Names rather than op objects keep the registry importable on torch versions that lack
    some of the ops."""

    def wrap(formula):
        for name in ops:
            if name in REGISTRY:
                raise ValueError(f"cost formula for aten.{name} registered twice")
            REGISTRY[name] = Entry(formula, role)
        return formula

    return wrap


def lookup(node: OpNode) -> Entry | None:
    return REGISTRY.get(node.name)


def node_cost(node: OpNode) -> Cost | None:
    """The node's cost, or None where no formula is registered (reported as unsupported)."""
    entry = REGISTRY.get(node.name)
    return None if entry is None else entry.formula(*node.args, out=node.out, **node.kwargs)


def graph_costs(graph: Graph) -> list[Cost | None]:
    return [node_cost(n) for n in graph.nodes]


# --------------------------------------------------------------------------- helpers
def _first(out) -> TensorMeta:
    return out[0] if isinstance(out, (tuple, list)) else out


def conv_macs(x: TensorMeta, w: TensorMeta, out: TensorMeta, transposed: bool, groups: int) -> int:
    """MACs of an N-d (grouped, strided, dilated or transposed) convolution.

    Forward: every output element takes (C/G) * prod(kernel) MACs. Transposed: every input
    element scatters into (K/G) * prod(kernel) outputs.
    """
    kernel = prod(w.shape[2:])
    if transposed:  # weight is (C_in, K_out/G, *kernel)
        return x.numel * w.shape[1] * kernel
    return out.numel * w.shape[1] * kernel  # weight is (K, C/G, *kernel)


def matmul_macs(a: TensorMeta, b: TensorMeta) -> int:
    """MACs of a (batched) matrix product a @ b with broadcasting over leading dims."""
    batch = prod(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])) if len(a.shape) > 2 or len(b.shape) > 2 else 1
    return batch * a.shape[-2] * a.shape[-1] * b.shape[-1]


# --------------------------------------------------------------------------- products
def conv_input_elements(x: TensorMeta, w: TensorMeta, out: TensorMeta, stride, padding,
                        dilation) -> int | None:
    """Input elements a forward convolution touches, or None if it touches them all.

    Along a spatial axis the windows leave gaps only when the dilated kernel is narrower
    than the stride (a 1x1 conv of stride 2 reads every other row and column)."""
    spatial = len(x.shape) - 2
    touched_total, full = 1, True
    for axis in range(spatial):
        size, kernel, o = x.shape[2 + axis], w.shape[2 + axis], out.shape[2 + axis]
        s, p, d = (v[axis] if len(v) > 1 else v[0] for v in (stride, padding, dilation))
        if d * (kernel - 1) + 1 >= s:
            touched = size
        else:
            touched = len({i * s + j * d - p for i in range(o) for j in range(kernel)}
                          & set(range(size)))
            full = full and touched == size
        touched_total *= touched
    return None if full else x.shape[0] * x.shape[1] * touched_total


@register("convolution", "_convolution", role=COMPUTE)
def _conv(x, w, bias, stride=(1,), padding=(0,), dilation=(1,), transposed=False,
          output_padding=None, groups=1, *args, out, **kwargs):
    k = w.shape[1] * groups if transposed else w.shape[0]
    touched = None if transposed else conv_input_elements(x, w, _first(out), stride, padding,
                                                          dilation)
    return Cost(macs=conv_macs(x, w, _first(out), transposed, groups),
                bias_ops=k if bias is not None else 0, input_elements=touched)


@register("mm", role=COMPUTE)
def _mm(a, b, *, out, **kwargs):
    return Cost(macs=matmul_macs(a, b))


@register("addmm", role=COMPUTE)
def _addmm(bias, a, b, *args, out, **kwargs):
    return Cost(macs=matmul_macs(a, b), bias_ops=b.shape[-1])


@register("bmm", "matmul", role=COMPUTE)
def _bmm(a, b, *, out, **kwargs):
    return Cost(macs=matmul_macs(a, b))


@register("baddbmm", role=COMPUTE)
def _baddbmm(bias, a, b, *args, out, **kwargs):
    return Cost(macs=matmul_macs(a, b), bias_ops=b.shape[-1])


@register("_scaled_mm", role=COMPUTE)
def _scaled_mm(a, b, scale_a, scale_b, bias=None, *args, out, **kwargs):
    """A float8 product; the trace's bytes are already fp8 operands and an out_dtype result."""
    return Cost(macs=matmul_macs(a, b), bias_ops=b.shape[-1] if bias is not None else 0)


@register("linear", role=COMPUTE)
def _linear(x, w, bias=None, *, out, **kwargs):
    return Cost(macs=x.numel // x.shape[-1] * w.shape[0] * w.shape[1],
                bias_ops=w.shape[0] if bias is not None else 0)


def attention_cost(scores: int, e: int, ev: int) -> Cost:
    """Q·K^T and P·V over `scores` query-key pairs (all heads, E and Ev wide); the softmax
    over the scores is other arithmetic. Causal masks and windows are not credited, as in
    torch.utils.flop_counter."""
    return Cost(macs=scores * (e + ev), other_ops=5 * scores)


def packed_scores(q: TensorMeta, k: TensorMeta, max_q: int, max_k: int) -> int:
    """Query-key pairs of variable-length attention on packed (..., T, H, E) tensors.

    The sequence lengths are values of the cum_seq tensors, unknown on meta tensors.
    torch.utils.flop_counter then takes every sequence at its maximum length; the token
    counts bound the sum of Lq·Lk more tightly (equal when all lengths are equal)."""
    return q.shape[-2] * min(q.shape[-3] * max_k, k.shape[-3] * max_q)


@register("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
          "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
          "_scaled_dot_product_flash_attention_for_cpu",
          "_scaled_dot_product_fused_attention_overrideable",
          "_scaled_dot_product_attention_math", "_scaled_dot_product_attention_math_for_mps",
          role=COMPUTE)
def _sdpa(q, k, v, *args, out, **kwargs):
    """Layout (..., H, L, E); K and V may have fewer heads (grouped-query attention)."""
    return attention_cost(prod(q.shape[:-1]) * k.shape[-2], q.shape[-1], v.shape[-1])


@register("_flash_attention_forward", "_varlen_attn", role=COMPUTE)
def _flash_attention(q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, *args, out, **kwargs):
    """Layout (B, L, H, E), or packed (T, H, E) with cumulative sequence offsets."""
    if cum_seq_q is None:
        return attention_cost(prod(q.shape[:-1]) * k.shape[-3], q.shape[-1], v.shape[-1])
    return attention_cost(packed_scores(q, k, max_q, max_k), q.shape[-1], v.shape[-1])


@register("_flash_attention_forward_no_dropout_inplace", "_varlen_attn_out", role=COMPUTE)
def _flash_attention_into(into, q, k, v, *args, out, **kwargs):
    """The same kernel, writing its result into the tensor `into`."""
    return _flash_attention(q, k, v, *args, out=out, **kwargs)


@register("_efficient_attention_forward", role=COMPUTE)
def _efficient_attention(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, max_q, max_k, *args, out,
                         **kwargs):
    """Layout (B, L, H, E), or packed (1, T, H, E) with cumulative sequence offsets."""
    return _flash_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, out=out)


# --------------------------------------------------------------------------- element-wise
def pointwise(ops_per_element: int):
    """Formula factory: `ops_per_element` ops for every output element."""

    def formula(*args, out, **kwargs):
        return Cost(other_ops=ops_per_element * _first(out).numel)

    return formula


register("add", "sub", "mul", "div", "neg", "relu", "relu_", "add_",
         "sub_", "mul_", "div_", "maximum", "minimum", "where",
         "masked_fill", "masked_fill_", "eq", "ne", "lt", "gt", "le",
         "ge", "clamp", "clamp_", "clamp_min", "clamp_min_", "clamp_max",
         "hardtanh", "hardtanh_", "abs", "sign", "reciprocal", "rsub",
         "threshold", "threshold_", "leaky_relu", "leaky_relu_", "logical_not",
         "bitwise_not", "floor", "ceil", "round", "trunc", "fill_",
         "zero_", "addcmul", "lerp", "square", "scalar_tensor",
         role=POINTWISE)(pointwise(1))
register("sigmoid", "sigmoid_", "tanh", "tanh_", "exp", "log", "sqrt",
         "rsqrt", "pow", "sin", "cos", "erf", "hardsigmoid",
         "hardsigmoid_", "hardswish", "hardswish_", "elu", "elu_",
         role=POINTWISE)(pointwise(4))
register("silu", "silu_", "gelu", "gelu_", "mish", "mish_", "softplus",
         role=POINTWISE)(pointwise(8))
# Data movement: zero arithmetic; their bytes are the tensors they read and write.
register("_to_copy", "copy_", "clone", "contiguous", "lift_fresh_copy",
         role=POINTWISE)(pointwise(0))
register("cat", "stack", "constant_pad_nd", "roll", "index", "gather",
         "index_select", "flip", "repeat", "slice_scatter",
         "select_scatter", "reflection_pad2d", "replication_pad2d", "pixel_shuffle",
         "channel_shuffle", "native_channel_shuffle", "tril", "triu",
         role=KERNEL)(pointwise(0))


@register("embedding", role=KERNEL)
def _embedding(weight, indices, *args, out, **kwargs):
    """A lookup reads only the rows it gathers, not the whole table."""
    return Cost(input_elements=min(weight.numel, indices.numel * weight.shape[-1]))


# --------------------------------------------------------------------------- normalization
@register("native_batch_norm", "_native_batch_norm_legit_no_training",
          "_native_batch_norm_legit", "batch_norm", "cudnn_batch_norm",
          role=BATCHNORM)
def _batch_norm(x, *args, out, **kwargs):
    return Cost(other_ops=2 * x.numel)  # inference: one scale and one shift per element


@register("native_layer_norm", "native_group_norm", "layer_norm", "group_norm",
          "rms_norm", "_fused_rms_norm", "instance_norm", role=KERNEL)
def _norm(x, *args, out, **kwargs):
    return Cost(other_ops=5 * x.numel)  # mean, variance, normalize, scale, shift


@register("_softmax", "_safe_softmax", "softmax", "_log_softmax",
          "log_softmax", role=KERNEL)
def _softmax(x, *args, out, **kwargs):
    return Cost(other_ops=5 * x.numel)  # max, subtract, exp, sum, divide


# --------------------------------------------------------------------------- pooling, reductions
@register("max_pool2d_with_indices", "max_pool2d", "max_pool3d_with_indices",
          "avg_pool2d", "avg_pool3d", "max_pool1d", "avg_pool1d", role=KERNEL)
def _pool(x, kernel_size, *args, out, **kwargs):
    window = prod(kernel_size) if isinstance(kernel_size, (list, tuple)) else kernel_size ** 2
    return Cost(other_ops=_first(out).numel * window)


def weighted_sum_ops(taps: int) -> int:
    """Ops of a weighted sum of `taps` inputs: a multiply each, and taps - 1 adds."""
    return 2 * taps - 1


# Interpolation: ops per output element; nearest copies one input element, no arithmetic.
register("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
         "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
         role=KERNEL)(pointwise(0))
register("upsample_linear1d", role=KERNEL)(pointwise(weighted_sum_ops(2)))
register("upsample_bilinear2d", role=KERNEL)(pointwise(weighted_sum_ops(2 * 2)))
register("upsample_trilinear3d", role=KERNEL)(pointwise(weighted_sum_ops(2 * 2 * 2)))
register("upsample_bicubic2d", role=KERNEL)(pointwise(weighted_sum_ops(4 * 4)))


@register("_adaptive_avg_pool2d", "adaptive_max_pool2d", "_adaptive_avg_pool3d",
          "adaptive_avg_pool1d", "adaptive_max_pool1d", role=KERNEL)
def _adaptive_pool(x, output_size, *args, out, **kwargs):
    return Cost(other_ops=x.numel)  # every input element enters one window (non-overlapping)


@register("mean", "sum", "amax", "amin", "max", "min", "var", "std",
          "var_mean", "std_mean", "argmax", "argmin", "prod", "norm",
          "linalg_vector_norm", "logsumexp", "any", "all", role=KERNEL)
def _reduction(x, *args, out, **kwargs):
    return Cost(other_ops=x.numel)


def unsupported_ops(graph: Graph) -> dict[str, int]:
    """Aten ops in the graph with no cost formula, with how often each occurs."""
    counts: dict[str, int] = {}
    for node in graph.nodes:
        if node.name not in REGISTRY:
            counts[str(node.func)] = counts.get(str(node.func), 0) + 1
    return counts
