"""Execution plans: group the traced ops into the kernels a GPU would run.

- ``op``: every aten op is a kernel (eager PyTorch without fusion).
- ``layer`` (default): batchnorm folds into the preceding conv/linear; pointwise ops fuse
  into the kernel that produced their latest input; products, poolings, reductions,
  normalizations, softmax and copies each start a kernel.
- ``block``: every module matching a pattern (class name or module-path glob) is one
  kernel; the rest follows ``layer``.
- custom groups: lists of module-path globs, each list one kernel; the rest follows the
  base plan.

A kernel's DRAM bytes are its compulsory loads (eq. 23): each external input and weight
read once, each output that leaves the kernel written once. A tensor produced and
consumed inside one kernel costs nothing.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from types import MappingProxyType
from typing import Mapping

from .costs import BATCHNORM, COMPUTE, POINTWISE, ZERO, Cost, lookup, node_cost
from .errors import InputError
from .plan_spec import DEFAULT_BLOCKS, PLAN_KINDS, PlanSpec  # noqa: F401 (re-exported)
from .trace import ACTIVATION, INPUT, Frame, Graph, OpNode


@dataclass(frozen=True)
class Kernel:
    """One kernel of a plan: its ops, arithmetic and compulsory DRAM traffic."""

    name: str
    nodes: tuple[int, ...] = ()
    ops: tuple[str, ...] = ()
    cost: Cost = ZERO
    input_bytes: int = 0  # activations read from DRAM
    weight_bytes: int = 0  # weights, biases and constants read from DRAM
    output_bytes: int = 0  # activations written to DRAM
    output_shape: tuple[int, ...] = ()
    unsupported: tuple[str, ...] = ()
    # activation value -> bytes read; value -> bytes written (for the L2-carry refinement)
    reads: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}), repr=False,
                                     compare=False)
    writes: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}),
                                      repr=False, compare=False)

    @property
    def macs(self) -> int:
        return self.cost.macs

    @property
    def flops(self) -> int:
        return self.cost.flops

    @property
    def dram_bytes(self) -> int:
        return self.input_bytes + self.weight_bytes + self.output_bytes

    @property
    def intensity(self) -> float:
        """Operational intensity in ops per DRAM byte (eq. 24)."""
        return self.flops / self.dram_bytes if self.dram_bytes else 0.0


def _matches(frame: Frame, pattern: str) -> bool:
    return frame.cls == pattern or fnmatchcase(frame.path, pattern)


def _group_of(scope: tuple[Frame, ...], spec: PlanSpec) -> str | None:
    """The group key of a node: its custom group, or the outermost matching block."""
    for globs in spec.groups:
        if any(fnmatchcase(f.path, g) for f in scope for g in globs):
            return ",".join(globs)  # the kernel is named by its globs
    if spec.kind == "block":
        for f in scope:
            if any(_matches(f, p) for p in spec.block_patterns):
                return f.path
    return None


def make_kernels(graph: Graph, spec: PlanSpec | str = "layer") -> list[Kernel]:
    """Group the graph's ops into kernels under `spec` and count each kernel's traffic."""
    if isinstance(spec, str):
        spec = PlanSpec.parse(spec)
    fuse = spec.kind not in ("op", "eager")  # layer, inductor and block fuse
    costs = [node_cost(n) for n in graph.nodes]
    kernel_of: dict[int, int] = {}  # node index -> kernel index
    names: list[str] = []  # per kernel
    members: list[list[int]] = []  # per kernel: its nodes, in order
    by_group: dict[str, int] = {}
    affine: dict[int, tuple[int, int]] = {}  # batchnorm -> (weight elements, bias ops) it adds
    constant = _constant_nodes(graph, costs) if fuse else set()

    for node in graph.nodes:
        if node.index in constant:
            continue
        entry = lookup(node)
        role = entry.role if entry else None
        group = _group_of(node.scope, spec) if fuse else None
        target = by_group.get(group) if group is not None else None
        if fuse and role == BATCHNORM:
            target, affine[node.index] = _fold(graph, node, kernel_of, costs, target, group)
        if target is not None and group is not None:
            _check_contiguous(graph, node, kernel_of, target, group, names)
        if target is None and group is None and fuse and role in (POINTWISE, BATCHNORM):
            producers = [kernel_of[p] for p in _producers(graph, node) if p in kernel_of]
            target = max(producers) if producers else None
        elif target is None and spec.kind == "eager" and role == POINTWISE:
            target = mha_fast_path(graph, node, kernel_of, names)
        if target is None:
            target = len(names)
            names.append(group if group is not None else node.module_path)
            members.append([])
            if group is not None:
                by_group[group] = target
        kernel_of[node.index] = target
        members[target].append(node.index)
    _check_matched(graph, spec)
    if spec.kind == "inductor":
        names, members = library_epilogue_split(graph, names, members)
        names, members = epilogue_merge(graph, names, members)
    kernels = [_kernel(graph, name, nodes, affine, constant, costs,
                       dead_outputs_written=spec.kind == "eager")
               for name, nodes in zip(names, members)]
    if spec.kind == "eager":
        kernels = [k for kernel in kernels for split in conv_bias_split(graph, kernel)
                   for k in batchnorm_stat_kernels(split)]
    if spec.kind == "inductor":
        kernels = se_pool_fusion(graph, kernels, float32=not spec.freezing)
    return kernels


# ---- named rules: the kernels a runtime really launches, each found by measurement

# the ops default-mode Inductor hands to a library (cuDNN, cuBLAS) as extern kernels
LIBRARY_OPS = frozenset({"convolution", "addmm", "mm", "bmm", "baddbmm"})


def library_epilogue_split(graph: Graph, names: list[str], members: list[list[int]]):
    """Rule `library-epilogue-split` (the inductor plan): torch.compile in its default mode
    runs convolutions and matrix products as library kernels, and the element-wise ops the
    layer plan fuses into them (batchnorm, activation, residual add, layer scale) as a
    separate Triton kernel, so each such product's output is written, read and written again.
    Nsight Compute on torch.compile'd ResNet-50 (H200, batch 128): a library convolution then
    a Triton kernel for its batchnorm and ReLU. Inductor fuses epilogues only into its own
    Triton templates, which it uses under max-autotune (torch/_inductor/utils.py,
    use_triton_template); a matrix product's bias stays in the cuBLAS call (addmm)."""
    out_names, out_members = [], []
    for name, nodes in zip(names, members):
        first = graph.nodes[nodes[0]]
        if first.name in LIBRARY_OPS and len(nodes) > 1:
            out_names += [first.module_path, name]
            out_members += [nodes[:1], nodes[1:]]
        else:
            out_names.append(name)
            out_members.append(nodes)
    return out_names, out_members


def epilogue_merge(graph: Graph, names: list[str], members: list[list[int]]):
    """Rule `epilogue-merge` (the inductor plan, after `library-epilogue-split`): an element-wise
    kernel whose every output is read only by one later element-wise kernel is fused into it,
    as Inductor's scheduler fuses a pointwise producer into its pointwise consumer. In a
    ResNet bottleneck that joins the last convolution's batchnorm with the shortcut's
    batchnorm, the add and the ReLU: one kernel after the two convolutions (Nsight Compute on
    torch.compile'd ResNet-50, H200)."""
    def elementwise(nodes):
        return _elementwise(graph, nodes)

    kernel_of = {i: k for k, nodes in enumerate(members) for i in nodes}
    into: dict[int, int] = {}
    for k, nodes in enumerate(members):
        if not elementwise(nodes):
            continue
        inside = set(nodes)
        readers = {kernel_of[c] for i in nodes for vid, _ in graph.nodes[i].writes
                   for c in graph.consumers(vid) if c not in inside and c in kernel_of}
        outputs = {vid for i in nodes for vid, _ in graph.nodes[i].writes} & set(graph.outputs)
        if len(readers) == 1 and not outputs:
            [j] = readers
            if j > k and elementwise(members[j]):
                into[k] = j
    out_names, out_members = [], []
    pending: dict[int, list[int]] = {}
    for k, (name, nodes) in enumerate(zip(names, members)):
        nodes = pending.pop(k, []) + nodes
        if k in into:
            pending[into[k]] = pending.get(into[k], []) + nodes
            continue
        out_names.append(name)
        out_members.append(nodes)
    return out_names, out_members


def _elementwise(graph: Graph, nodes) -> bool:
    return bool(nodes) and all((lookup(graph.nodes[i]) or None)
                               and lookup(graph.nodes[i]).role in (POINTWISE, BATCHNORM)
                               for i in nodes)


def se_pool_fusion(graph: Graph, kernels: list[Kernel], *, float32: bool = True) -> list[Kernel]:
    """Rule `se-pool-fusion` (the inductor plan, on the kernels): Inductor fuses a global mean
    (a squeeze-excitation's pool) into the element-wise kernel that produces the tensor it
    reduces, when that tensor has one other reader, an element-wise kernel later on (the SE
    scale). The fused reduction kernel stores the activation's input instead of the
    activation, and the scale kernel recomputes the activation from it. Where that input is a
    batchnorm's output it is stored in float32, the precision Inductor's batchnorm computes
    in, so it moves twice the bytes of the float16 activation. Nsight Compute on
    torch.compile'd EfficientNet-B0 (H200, batch 128, fp16, no flush): per MBConv block a
    `triton_red_fused_..._batch_norm_..._mean_silu` kernel that reads the depthwise output once
    and writes twice its size, and a `triton_poi_fused_..._mul_sigmoid_silu` scale kernel that
    reads twice that size and writes the float16 output; Inductor's generated code (a
    reduction kernel storing the batchnorm output, the scale kernel applying SiLU to it).

    With freezing (`inductor:freezing`, `float32=False`) the batchnorm is folded into the
    convolution's weights and bias, and the stored tensor is the biased convolution output in
    the activation's own dtype: a prediction, not yet checked against Nsight Compute."""
    where = {vid: k for k, kernel in enumerate(kernels) for vid in kernel.writes}
    readers: dict[int, list[int]] = {}
    for k, kernel in enumerate(kernels):
        for vid in kernel.reads:
            readers.setdefault(vid, []).append(k)
    out, dropped = list(kernels), set()
    for m, mean in enumerate(kernels):
        if mean.ops != ("mean",) or len(mean.reads) != 1:
            continue
        [v] = mean.reads
        a = where.get(v)
        others = [k for k in readers.get(v, []) if k != m]
        if a != m - 1 or a in dropped or len(others) != 1 or others[0] <= m:
            continue
        s = others[0]
        act, scale = out[a], out[s]
        if not (_elementwise(graph, act.nodes) and _elementwise(graph, scale.nodes)):
            continue
        stored, nbytes = v, act.writes[v]
        bns = [i for i in act.nodes if lookup(graph.nodes[i]).role == BATCHNORM]
        if bns:  # the batchnorm's output (in float32 unless freezing folded it away)
            stored = graph.nodes[bns[-1]].writes[0][0]
            meta = graph.values[stored].meta
            nbytes = meta.numel * (4 if float32 else meta.itemsize)
        writes = {vid: b for vid, b in act.writes.items() if vid != v}
        writes[stored] = nbytes
        writes.update(mean.writes)
        out[a] = replace(act, nodes=act.nodes + mean.nodes, ops=act.ops + mean.ops,
                         cost=act.cost + mean.cost, weight_bytes=act.weight_bytes + mean.weight_bytes,
                         output_bytes=sum(writes.values()), writes=MappingProxyType(writes),
                         unsupported=act.unsupported + mean.unsupported)
        reads = {vid: b for vid, b in scale.reads.items() if vid != v}
        reads[stored] = nbytes
        out[s] = replace(scale, input_bytes=scale.input_bytes - scale.reads[v] + nbytes,
                         reads=MappingProxyType(reads))
        dropped.add(m)
    return [kernel for k, kernel in enumerate(out) if k not in dropped]


def mha_fast_path(graph: Graph, node, kernel_of: dict[int, int], names: list[str]) -> int | None:
    """Rule `mha-fast-path`: in inference, eager PyTorch runs ``nn.MultiheadAttention`` as its
    fused fast path: the input projection with its bias in one matrix product, one fused
    attention kernel, the output projection (Nsight Compute on ViT-B/16, H200: three kernels
    per attention module, where op by op there are six). Inside such a module an element-wise
    op or copy joins the kernel of its producer, as in the layer plan; never across the
    module's boundary. (A trace on the meta device takes the unfused path, which is why the
    graph has the six ops.) Returns the kernel to join, or None."""
    if not any(frame.cls == "MultiheadAttention" for frame in node.scope):
        return None
    producers = [kernel_of[p] for p in _producers(graph, node)
                 if p in kernel_of and names[kernel_of[p]] == node.module_path]
    return max(producers) if producers else None


def conv_bias_split(graph: Graph, kernel: Kernel) -> tuple[Kernel, ...]:
    """Rule `conv-bias-split`: eager PyTorch runs a convolution with a bias as cuDNN's
    convolution, then a separate element-wise bias add, which reads the output and writes it
    again (Nsight Compute on ConvNeXt-T's 7x7 depthwise and stem convolutions, H200: their
    modules moved 1.9-2.3x the one-kernel prediction). The convolution keeps the arithmetic."""
    node = graph.nodes[kernel.nodes[0]] if len(kernel.nodes) == 1 else None
    if node is None or kernel.ops != ("convolution",) or not kernel.cost.bias_ops:
        return (kernel,)
    bias_bytes = kernel.cost.bias_ops * node.args[0].itemsize
    [(vid, out_bytes)] = list(kernel.writes.items()) or [(None, kernel.output_bytes)]
    conv = replace(kernel, weight_bytes=kernel.weight_bytes - bias_bytes)
    add = Kernel(kernel.name, kernel.nodes, ("bias add (conv-bias-split)",), ZERO, out_bytes,
                 bias_bytes, out_bytes, kernel.output_shape, (),
                 MappingProxyType({vid: out_bytes} if vid is not None else {}),
                 MappingProxyType(dict(kernel.writes)))
    return conv, add


def batchnorm_stat_kernels(kernel: Kernel) -> tuple[Kernel, ...]:
    """Rule `bn-stat-kernels`: eager PyTorch runs an inference batchnorm as two small
    element-wise kernels over its parameters (a copy and a transform, a few kB and about
    2.5 us each on the H200) and then the transform of the input (Nsight Compute on
    ResNet-50 and EfficientNet-B0: three kernels per batchnorm module). Each small kernel
    is modelled as reading and writing the batchnorm's parameters once."""
    if kernel.ops != ("native_batch_norm",):
        return (kernel,)
    params = kernel.weight_bytes
    stat = replace(kernel, ops=("batchnorm parameters (bn-stat-kernels)",), cost=ZERO,
                   input_bytes=0, weight_bytes=params, output_bytes=params, output_shape=(),
                   reads=MappingProxyType({}), writes=MappingProxyType({}))
    return stat, stat, kernel


def _check_matched(graph: Graph, spec: PlanSpec) -> None:
    """A pattern or glob the user named that matches no module is an error; default block
    classes that match nothing are a warning. Neither is a silent no-op."""
    frames = {f for n in graph.nodes for f in n.scope}
    classes = sorted({f.cls for f in frames})
    here = (f"module classes here: {', '.join(classes[:12])}"
            f"{', ...' if len(classes) > 12 else ''}")
    for i, globs in enumerate(spec.groups):
        missing = [g for g in globs if not any(fnmatchcase(f.path, g) for f in frames)]
        if missing:
            raise InputError(f"module-path glob {missing[0]!r} matched no module "
                             f"(top-level modules here: {_top_level(frames)})",
                             field=f"groups[{i}]")
    if spec.kind != "block":
        return
    if spec.blocks:
        missing = [p for p in spec.blocks if not any(_matches(f, p) for f in frames)]
        if missing:
            raise InputError(f"block pattern(s) {', '.join(missing)} matched no module "
                             f"({here})", field="plan")
    elif not any(_matches(f, p) for f in frames for p in DEFAULT_BLOCKS):
        # the defaults finding nothing is an answer (no residual blocks), not a typo
        warnings.warn("block plan: no module matched the default block classes (the residual "
                      "blocks of torchvision, timm, transformers and the zoo), so this is the "
                      "layer plan; name this model's blocks with block:CLASS or a path glob "
                      f"({here})",
                      stacklevel=2)


def _top_level(frames) -> str:
    names = sorted({f.path.split(".")[0] for f in frames if f.path})
    return ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")


def _check_contiguous(graph: Graph, node: OpNode, kernel_of: dict[int, int], target: int,
                      group: str, names: list[str]) -> None:
    """A fused group cannot wait for a kernel that runs after it started."""
    later = [kernel_of[p] for p in _producers(graph, node) if kernel_of.get(p, -1) > target]
    if later:
        raise InputError(f"kernel '{group}' needs the output of '{names[later[0]]}', "
                         f"which runs after it started (at op {node.func} in "
                         f"'{node.module_path}'): a fused group must be contiguous",
                         field="groups")


def _producers(graph: Graph, node: OpNode) -> list[int]:
    out = []
    for vid, _ in node.reads:
        value = graph.values[vid]
        if value.kind == ACTIVATION and value.producer is not None:
            out.append(value.producer)
    return out


def _constant_nodes(graph: Graph, costs: list[Cost | None]) -> set[int]:
    """Arithmetic-free ops on weights and constants only: an inference compiler folds them."""
    constant: set[int] = set()
    for node in graph.nodes:
        cost = costs[node.index]
        if cost is None or cost.macs:
            continue
        if all(graph.values[v].kind not in (ACTIVATION, INPUT)
               or graph.values[v].producer in constant for v, _ in node.reads):
            constant.add(node.index)
    return constant


def _fold(graph: Graph, bn: OpNode, kernel_of: dict[int, int], costs: list[Cost | None],
          target: int | None, group: str | None) -> tuple[int | None, tuple[int, int]]:
    """Fold an inference batchnorm into the conv/linear whose output only it reads.

    Folded, it costs nothing but a bias of K elements (and K bias adds, eq. 22) where the
    producer had none. Otherwise it is a per-channel scale and shift: 2 x C weights.
    """
    x = graph.values[bn.reads[0][0]]
    channels = bn.args[0].shape[1]
    p = x.producer
    foldable = (p is not None and p in kernel_of and costs[p] is not None
                and lookup(graph.nodes[p]).role == COMPUTE
                and graph.consumers(x.id) == [bn.index]
                and (group is None or target == kernel_of[p]))
    if not foldable:
        return target, (2 * channels, 0)
    return kernel_of[p], (0, 0) if costs[p].bias_ops else (channels, channels)


def _kernel(graph: Graph, name: str, nodes: list[int], affine, constant: set[int],
            costs: list[Cost | None], dead_outputs_written: bool = False) -> Kernel:
    """The kernel of these nodes: their arithmetic and the kernel's compulsory traffic.

    Rule `dead-outputs-written` (the eager plan): an eager op writes every output it returns,
    also those nobody reads (max pooling's int64 indices: Nsight Compute on ResNet-50's max
    pool, H200, batch 128: 257 MB written where the pooled output is 51 MB, minus what stays
    in L2). A compiler never materialises them. Inference batchnorm is the exception: on the
    GPU its saved statistics are empty tensors."""
    members = set(nodes)
    cost, weight_bytes, input_bytes, output_bytes = ZERO, 0, 0, 0
    for i in nodes:
        if costs[i] is not None:
            cost = cost + costs[i]
    reads: dict[int, int] = {}
    for i in nodes:
        node = graph.nodes[i]
        node_reads = node.reads[:1] if i in affine else node.reads  # BN stats are folded
        partial = costs[i].input_elements if costs[i] is not None else None
        for j, (vid, nbytes) in enumerate(node_reads):
            if j == 0 and partial is not None:  # e.g. a strided 1x1 conv skips pixels
                nbytes = min(nbytes, partial * graph.values[vid].meta.itemsize)
            if graph.values[vid].producer in members:
                continue
            reads[vid] = max(nbytes, reads.get(vid, 0))
        if i in affine:
            elements, bias_ops = affine[i]
            cost = cost + Cost(bias_ops=bias_ops)
            weight_bytes += elements * node.args[0].itemsize
    activation_reads: dict[int, int] = {}
    for vid, nbytes in reads.items():
        value = graph.values[vid]
        is_weight = value.kind not in (ACTIVATION, INPUT) or value.producer in constant
        if is_weight:
            weight_bytes += nbytes
        else:
            input_bytes += nbytes
            activation_reads[vid] = nbytes
    outputs = set(graph.outputs)
    writes: dict[int, int] = {}
    output_shape: tuple[int, ...] = ()
    for i in nodes:
        for vid, nbytes in graph.nodes[i].writes:
            # written if read by another kernel or returned; dead outputs (unused
            # max-pool indices, batchnorm's saved statistics) are never materialised
            consumers = graph.consumers(vid)
            if (vid in outputs or any(c not in members for c in consumers)
                    or (dead_outputs_written and not consumers
                        and graph.nodes[i].name != "native_batch_norm")):
                output_bytes += nbytes
                writes[vid] = nbytes
                output_shape = graph.values[vid].meta.shape
    if not output_shape and nodes:
        last = graph.nodes[nodes[-1]]
        output_shape = graph.values[last.writes[0][0]].meta.shape if last.writes else ()
    return Kernel(name, tuple(nodes), tuple(graph.nodes[i].name for i in nodes), cost,
                  input_bytes, weight_bytes, output_bytes, output_shape,
                  tuple(str(graph.nodes[i].func) for i in nodes if costs[i] is None),
                  MappingProxyType(activation_reads), MappingProxyType(writes))
