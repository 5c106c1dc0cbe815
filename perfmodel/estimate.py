"""The calibrated latency estimate, beside the bound (README, "The calibrated estimate").

For each kernel of an analysed plan: its roofline time t_min = max(n/R, b/B) (eq. 11), divided
by the efficiency e that kernels of its kind and shape attained in the microbenchmarks of the
hardware's calibration file (perfmodel.calibrate), plus what a kernel launched on a stream pays
over one replayed in a CUDA graph:

    t_est = max(t_min / e, t_tiny) + (t_stream - t_graph)        e = t_roof,cal / t_cal <= 1

e is interpolated in log space over the calibrated rows of the kernel's kind (inverse-distance
weights over the nearest rows, features such as M, N, K or elements on log2 axes), so a shape
between grid points takes a value between theirs; t_tiny is the calibrated time of a tiny
kernel. The model's estimate runs the kernels through a two-stage pipeline: the host issues
kernel i (eager PyTorch: the calibrated time per op or library call; Inductor's generated
code: per kernel it launches) and the device runs it once issued and once kernel i - 1 is
done, so the latency is the sum of the kernels' times where the device is the bottleneck and
the host's where it is. Since e <= 1, ideal <= T_min <= estimate for every kernel and in
total. Which calibration table serves a kernel depends on the runtime its plan models: eager
PyTorch's ATen kernels (plans op, eager) or Inductor's Triton kernels (the fusing plans);
library convolutions and matrix products are the same in both, except that Inductor runs a
1x1 convolution of stride 1 as a product.

Data flows one way: an analysis result and a calibration in, plain data out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .analysis import KernelTime
from .calibration import Calibration, Table, load_calibration
from .errors import InputError

NEIGHBOURS = 8
# How far apart one doubling of a feature puts two rows; kernel size and stride change the
# kernel a library picks, so rows with another one are far.
FEATURE_WEIGHT = {"r": 4.0, "stride": 4.0}
EAGER_PLANS = ("op", "eager")
_POINTWISE_NAMES = {"relu": "relu", "threshold": "relu", "clamp_min": "relu", "silu": "silu",
                    "gelu": "gelu", "hardtanh": "hardtanh", "clamp": "hardtanh",
                    "sigmoid": "sigmoid", "clone": "clone", "_to_copy": "clone", "copy": "clone",
                    "contiguous": "clone"}
# Inductor's fused element-wise kernels (a batchnorm affine map, activation, residual add):
# one or two full-size inputs read and one output written, at the bandwidth the calibration's
# vectorized ATen kernels of the same traffic (relu: 1 in, 1 out; add: 2 in, 1 out) attained.
# This is the fallback where a calibration has no triton_pointwise tables (statically compiled
# Triton kernels, timed by the runner since 2026-11-30). The committed H200 file's
# compiled_pointwise tables are never used: they time Triton kernels compiled for dynamic row
# counts, which ran at 0.2 TB/s where a model's statically compiled ones stream near the
# bandwidth (Nsight Compute on ResNet-50 under torch.compile: 2.7-4.3 TB/s); the compiled
# layer norm, also dynamic in its rows, ran at 4.2 TB/s and is used.
COMPILED_POINTWISE = {False: "eager_pointwise/relu", True: "eager_pointwise/add"}
_MATMUL = ("addmm", "mm", "bmm", "matmul", "linear", "baddbmm")
_POOL = ("max_pool2d_with_indices", "max_pool2d", "avg_pool2d")
_NORM = ("native_layer_norm", "layer_norm", "native_group_norm", "group_norm", "rms_norm",
         "_softmax", "softmax", "_log_softmax", "_safe_softmax")
_BATCHNORM = ("native_batch_norm", "_native_batch_norm_legit_no_training",
              "_native_batch_norm_legit", "batch_norm", "cudnn_batch_norm")
_REDUCE = ("mean", "sum", "amax", "amin", "_adaptive_avg_pool2d", "adaptive_max_pool2d", "var",
           "var_mean", "std", "prod", "norm", "linalg_vector_norm", "logsumexp")


@dataclass(frozen=True)
class KernelEstimate:
    """One kernel: its bound, the calibration table that served it and the estimate."""

    timed: KernelTime
    table: str
    efficiency: float  # share of the roofline time calibrated kernels of this kind attained
    t_est_s: float  # on the device
    t_issue_s: float = 0.0  # on the host, to launch it

    @property
    def t_min_s(self) -> float:
        return self.timed.t_min_s

    @property
    def t_est_ms(self) -> float:
        return self.t_est_s * 1e3


@dataclass(frozen=True)
class Estimate:
    """A model's expected latency from its kernels' calibrated times."""

    model: str
    hardware: str
    plan: str
    runtime: str  # eager | compiled
    kernels: tuple[KernelEstimate, ...]
    t_ideal_s: float
    t_min_s: float
    t_est_s: float  # the host-device pipeline's latency
    calibration: str | None = None

    @property
    def t_kernels_s(self) -> float:
        """The kernels' device time alone."""
        return sum(k.t_est_s for k in self.kernels)

    @property
    def t_host_s(self) -> float:
        """The host's time to issue every kernel alone."""
        return sum(k.t_issue_s for k in self.kernels)

    @property
    def t_est_ms(self) -> float:
        return self.t_est_s * 1e3

    def by_table(self) -> dict[str, tuple[int, float, float]]:
        """Per calibration table: kernels, summed T_min and summed estimate (seconds)."""
        out: dict[str, tuple[int, float, float]] = {}
        for k in self.kernels:
            n, t_min, t_est = out.get(k.table, (0, 0.0, 0.0))
            out[k.table] = (n + 1, t_min + k.t_min_s, t_est + k.t_est_s)
        return out


def pipeline(kernels: "list[KernelEstimate] | tuple[KernelEstimate, ...]") -> float:
    """Latency of kernels issued in order by the host and run in order by the device."""
    issued = done = 0.0
    for k in kernels:
        issued += k.t_issue_s
        done = max(done, issued) + k.t_est_s
    return done


LIBRARY_TABLES = ("conv", "conv_stem", "conv_grouped", "conv_depthwise", "matmul")


# the plans that model a runtime's kernels: the estimate is of those; layer and block are
# ideals no runtime launches (their kernels have no calibrated counterpart)
ESTIMATED_PLANS = EAGER_PLANS + ("inductor",)


def runtime_of(plan_kind: str) -> str:
    if plan_kind not in ESTIMATED_PLANS:
        raise InputError(f"the calibrated estimate models the kernels a runtime launches: plans "
                         f"{', '.join(ESTIMATED_PLANS)}, not {plan_kind}", field="plan")
    return "eager" if plan_kind in EAGER_PLANS else "compiled"


def calibration_of(hardware) -> Calibration:
    """The calibration file a hardware config names (InputError naming the config if none)."""
    if not getattr(hardware, "calibration", None):
        raise InputError(f"hardware '{hardware.name}' has no calibration (add a `calibration:` "
                         "file written by `python -m perfmodel.calibrate`)", file=hardware.path,
                         field="calibration")
    return load_calibration(hardware.calibration)


def estimate_or_none(result, *, graphs: bool = False) -> "Estimate | None":
    """The estimate where the result's hardware has a calibration and its plan models a
    runtime (ESTIMATED_PLANS), else None."""
    if not getattr(result.hardware, "calibration", None) or result.plan.kind not in ESTIMATED_PLANS:
        return None
    return estimate(result, graphs=graphs)


# ---------------------------------------------------------------- which table, which features
def _shape(x) -> tuple[int, ...]:
    return tuple(getattr(x, "shape", ()) or ())


def _numel(shape) -> int:
    return math.prod(shape) if shape else 1


def _conv_kind(node, runtime: str) -> tuple[list[str], dict]:
    x, w = node.args[0], node.args[1]
    stride = node.args[3] if len(node.args) > 3 else (1,)
    padding = node.args[4] if len(node.args) > 4 else (0,)
    groups = node.args[8] if len(node.args) > 8 else 1
    out = node.out[0] if isinstance(node.out, (tuple, list)) else node.out
    k, c, r = w.shape[0], x.shape[1], w.shape[2] if len(w.shape) > 2 else 1
    m = max(1, out.numel // k)
    s = stride[0] if isinstance(stride, (list, tuple)) else stride
    if groups == 1 and c <= 4:
        return ["conv_stem", "conv"], {"m": m, "n": k, "r": r, "stride": s, "k_red": c * r * r}
    features = {"m": m, "n": k, "k_red": w.shape[1] * r * r, "r": r, "stride": s, "k": c}
    if groups == 1 and runtime == "compiled" and r == 1 and s == 1 and not any(padding):
        # Inductor runs a 1x1 convolution of stride 1 as a matrix product on cuBLAS (Nsight
        # Compute on ResNet-50 under torch.compile, H200: nvjet kernels where eager has cuDNN's)
        return ["matmul", "conv"], features
    if groups == 1:
        return ["conv"], features
    if w.shape[1] == 1:
        return ["conv_depthwise", "conv_grouped"], {"m": m, "c": c, "r": r, "stride": s,
                                                    "group_width": 1}
    return ["conv_grouped", "conv_depthwise"], {"m": m, "c": c, "group_width": w.shape[1],
                                                "r": r, "stride": 1}


def _matmul_kind(node) -> tuple[list[str], dict]:
    name, args = node.name, node.args
    if name == "linear":
        x, w = _shape(args[0]), _shape(args[1])
        return ["matmul"], {"m": _numel(x[:-1]), "k": x[-1], "n": w[0]}
    a, b = (args[1], args[2]) if name in ("addmm", "baddbmm") else (args[0], args[1])
    a, b = _shape(a), _shape(b)
    return ["matmul"], {"m": _numel(a[:-1]), "k": a[-1], "n": b[-1]}


def kernel_kind(timed: KernelTime, graph, runtime: str, itemsize: int) -> tuple[list[str], dict]:
    """The calibration tables that can serve this kernel, best first, and its features."""
    k = timed.kernel
    nodes = [graph.nodes[i] for i in k.nodes]
    names = [n.name for n in nodes]
    elements = max(1, max(k.output_bytes, k.input_bytes) // itemsize)
    fallback = ["eager_pointwise/clone", "eager_pointwise/add"]
    if k.ops and k.ops[0] not in names:  # a kernel a runtime rule added beside an op's own
        if "bias" in k.ops[0]:  # conv-bias-split: the bias added to the output
            c = k.output_shape[1] if len(k.output_shape) > 1 else 1
            return ["eager_broadcast/add_channel"] + fallback, {"elements": elements, "c": c}
        return fallback, {"elements": elements}  # bn-stat-kernels: parameter-sized copies
    for node in nodes:
        if node.name in ("convolution", "_convolution"):
            return _conv_kind(node, runtime)
    for node in nodes:
        if node.name in _MATMUL:
            return _matmul_kind(node)
    for node in nodes:
        if node.name in _NORM:
            x = _shape(node.args[0])
            c = _numel(node.args[1]) if node.name in ("native_layer_norm", "layer_norm") \
                and isinstance(node.args[1], (list, tuple)) else x[-1]
            table = "eager_layernorm" if runtime == "eager" else "compiled_layernorm"
            return [table, "eager_layernorm"], {"rows": max(1, _numel(x) // c), "c": c}
        if node.name in _POOL:
            x = _shape(node.args[0])
            return ["pool"] + fallback, {"elements": _numel(x), "c": x[1] if len(x) > 1 else 1}
        if node.name in _REDUCE:
            x = _shape(node.args[0])
            out = node.out[0] if isinstance(node.out, (tuple, list)) else node.out
            tables = ["triton_reduce", "reduce"] if runtime == "compiled" else ["reduce"]
            return tables + fallback, {"elements": _numel(x),
                                       "spatial": max(1, _numel(x) // max(1, out.numel))}
    if runtime == "compiled":
        return _compiled_pointwise_kind(k, nodes, elements, fallback)
    if any(n in _BATCHNORM for n in names):
        x = _shape(nodes[names.index(next(n for n in names if n in _BATCHNORM))].args[0])
        return ["eager_batchnorm"] + fallback, {"elements": _numel(x),
                                                "c": x[1] if len(x) > 1 else 1}
    if not nodes:
        return fallback, {"elements": elements}
    return _pointwise_kind(nodes[0], elements, fallback)


def _compiled_pointwise_kind(k, nodes, elements: int, fallback: list[str]):
    """A Triton element-wise kernel: one with a per-sample, per-channel operand (a
    squeeze-excitation scale), else by its full-size inputs (one: an affine map and an
    activation; two or more: with a residual add). Without triton_* tables, the vectorized
    ATen kernel that moves the same tensors (COMPILED_POINTWISE)."""
    full = sum(1 for n in k.reads.values() if n >= 0.5 * k.output_bytes > 0)
    out = k.output_shape
    per_sample = any(len(_shape(a)) == len(out) > 1 and _shape(a)[0] == out[0] > 1
                     and 1 < _numel(_shape(a)) < _numel(out)
                     for node in nodes for a in node.args if hasattr(a, "shape"))
    table = ("triton_pointwise/scale_sample_channel" if per_sample
             else f"triton_pointwise/affine{'_add' if full >= 2 else ''}_relu")
    return [table, COMPILED_POINTWISE[full >= 2]] + fallback, {"elements": elements}


def _pointwise_kind(node, elements: int, fallback: list[str]) -> tuple[list[str], dict]:
    base = node.name.rstrip("_")
    out = node.out[0] if isinstance(node.out, (tuple, list)) else node.out
    out_shape = _shape(out)
    smaller = [_shape(a) for a in node.args if hasattr(a, "shape")
               and 1 < _numel(_shape(a)) < _numel(out_shape)]
    if smaller and base in ("mul", "add", "sub", "div"):
        per_sample = any(len(s) > 0 and len(out_shape) > 0 and s[0] == out_shape[0] > 1
                         for s in smaller)
        op = "mul" if base in ("mul", "div") else "add"
        table = f"eager_broadcast/{op}_{'sample_channel' if per_sample else 'channel'}"
        c = out_shape[1] if len(out_shape) > 1 else 1
        return [table, "eager_broadcast/mul_channel"] + fallback, {"elements": elements, "c": c}
    name = _POINTWISE_NAMES.get(base, "add")
    return [f"eager_pointwise/{name}"] + fallback, {"elements": elements}


# ---------------------------------------------------------------- interpolation
class _Interpolator:
    """log(efficiency) of a table's rows on log2 feature axes, for one processor."""

    def __init__(self, table: Table, peak_ops: float, bandwidth: float, tiny_s: float,
                 file: str | None = None):
        self.table, self.file = table, file
        feats = np.array([table.feature_values(r) for r in table.rows], dtype=float)
        weights = np.array([FEATURE_WEIGHT.get(f, 1.0) for f in table.features])
        self.weights = weights
        self.points = np.log2(np.maximum(feats, 1.0)) * weights
        flops = np.array([r[-3] for r in table.rows], dtype=float)
        nbytes = np.array([r[-2] for r in table.rows], dtype=float)
        t = np.array([r[-1] for r in table.rows], dtype=float) * 1e-6
        t = t - (table.kernels_per_call - 1) * tiny_s  # the call's other, tiny kernels
        roof = np.maximum(flops / peak_ops, nbytes / bandwidth)
        self.log_eff = np.log(np.clip(roof / np.maximum(t, 1e-9), 1e-6, 1.0))

    def efficiency(self, features: dict) -> float:
        missing = [f for f in self.table.features if f not in features]
        if missing:
            raise InputError(f"kernel has no feature '{missing[0]}' for table "
                             f"'{self.table.name}'", file=self.file,
                             field=f"tables.{self.table.name}.features")
        x = np.log2(np.maximum([float(features[f]) for f in self.table.features], 1.0))
        d2 = (((self.points - x * self.weights)) ** 2).sum(axis=1)
        order = np.argsort(d2)[:NEIGHBOURS]
        if d2[order[0]] < 1e-12:
            return float(np.exp(self.log_eff[order[0]]))
        w = 1.0 / d2[order]
        return float(np.exp((w * self.log_eff[order]).sum() / w.sum()))


def estimate(result, calibration: Calibration | None = None, *, graphs: bool = False) -> Estimate:
    """Expected time of every kernel of `result` and of the model (see the module doc).

    `graphs`: the model is replayed as a CUDA graph, so its kernels run back to back as the
    calibration's did (no stream gap) and the host issues nothing while they run."""
    cal = calibration or calibration_of(result.hardware)
    runtime = runtime_of(result.plan.kind)
    peak, bw = result.hardware.peak_ops(result.dtype), result.hardware.dram_bytes_per_s
    tiny_s = cal.graph_kernel_us * 1e-6
    extra_s = 0.0 if graphs else cal.stream_extra_us * 1e-6
    itemsize = result.dtype.torch.itemsize
    issue_us = ((0.0, 0.0) if graphs
                else (cal.eager_issue_us, cal.eager_library_issue_us) if runtime == "eager"
                else (cal.compiled_issue_us, cal.compiled_issue_us))  # (other, library)
    cache: dict[str, _Interpolator] = {}
    out = []
    for timed in result.kernels:
        candidates, features = kernel_kind(timed, result.graph, runtime, itemsize)
        name = next((c for c in candidates if c in cal.tables), None)
        if name is None:
            raise InputError(f"no table for kernel '{timed.kernel.name}' (needs one of: "
                             f"{', '.join(candidates)})", file=cal.path, field="tables")
        if name not in cache:
            cache[name] = _Interpolator(cal.tables[name], peak, bw, tiny_s, cal.path)
        eff = cache[name].efficiency(features)
        t = max(timed.t_min_s / eff, tiny_s) + extra_s
        out.append(KernelEstimate(timed, name, eff, t, issue_us[name in LIBRARY_TABLES] * 1e-6))
    totals = result.totals
    return Estimate(result.model, result.hardware.name, str(result.plan),
                    runtime + (", CUDA graphs" if graphs else ""), tuple(out),
                    totals.t_ideal_s, totals.t_min_s, pipeline(out), cal.path)
