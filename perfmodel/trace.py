"""Trace a torch.nn.Module into an aten-level dataflow graph on meta tensors.

No activation memory is allocated: parameters, buffers and inputs are replaced by meta
tensors of the same shapes (in the analysis dtype) and the model runs under a
TorchDispatchMode that records every aten op with the module path it ran in.

Dataflow is kept at the level of *values*: each op output is a value; a view (reshape,
permute, slice, expand ...) is not an op but an alias of the value it views, and a
consumer that reads a view reads ``min(view elements, viewed value elements)``. An
in-place op (``relu_``, ``add_``) produces a new version of the value it writes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .aten_args import map_tensors, tensors_in
from .errors import TraceError
from .meta_cache import MetaCache

aten = torch.ops.aten


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """Shape and dtype of a tensor, standing in for it in recorded op arguments."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass(frozen=True, slots=True)
class Frame:
    """One module on the call stack: its path in the model and its class name."""

    path: str
    cls: str


INPUT, WEIGHT, CONSTANT, ACTIVATION = "input", "weight", "constant", "activation"


@dataclass(slots=True)
class Value:
    id: int
    meta: TensorMeta
    kind: str  # input | weight | constant | activation
    producer: int | None = None  # index of the producing OpNode
    name: str = ""  # parameter/buffer/input name where known


@dataclass(slots=True)
class OpNode:
    index: int
    func: Any  # torch OpOverload
    args: tuple  # tensors replaced by TensorMeta
    kwargs: dict
    out: Any  # pytree of TensorMeta
    reads: tuple[tuple[int, int], ...]  # (value id, bytes read)
    writes: tuple[tuple[int, int], ...]  # (value id, bytes written)
    scope: tuple[Frame, ...]

    @property
    def name(self) -> str:
        """Short aten name without overload, e.g. ``convolution``."""
        return self.func._opname

    @property
    def module_path(self) -> str:
        return self.scope[-1].path if self.scope else ""


@dataclass
class Graph:
    """Recorded ops in execution order and the values that flow between them."""

    nodes: list[OpNode]
    values: list[Value]
    inputs: list[int]
    outputs: list[int]
    model_class: str = ""
    _consumers: list[list[int]] | None = field(default=None, repr=False)

    def consumers(self, vid: int) -> list[int]:
        if self._consumers is None:
            cons: list[list[int]] = [[] for _ in self.values]
            for node in self.nodes:
                for v, _ in node.reads:
                    if not cons[v] or cons[v][-1] != node.index:
                        cons[v].append(node.index)
            self._consumers = cons
        return self._consumers[vid]


# Ops that are aliases of their input although the schema does not mark them as views.
_EXTRA_VIEWS = {"_unsafe_view", "as_strided_", "squeeze_", "unsqueeze_", "t_", "transpose_",
                "_reshape_alias", "lift_fresh", "detach_", "set_"}
# Ops that create a tensor without reading the data of their tensor arguments.
_FACTORIES = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
              "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided"}


def _is_view(func) -> bool:
    return func.is_view or func._opname in _EXTRA_VIEWS


def _written_args(func, args, kwargs) -> tuple[list[torch.Tensor], set[str]]:
    """Tensors the op writes in place (``Tensor(a!)`` in its schema), and the names of its
    ``out=`` arguments (keyword-only by aten's convention), which it writes without reading."""
    written, out_names = [], set()
    for i, name, kwarg_only in _written_schema(func):
        value = args[i] if i < len(args) and not kwarg_only else kwargs.get(name)
        written += tensors_in(value)
        if kwarg_only:
            out_names.add(name)
    return written, out_names


@functools.lru_cache(maxsize=None)
def _written_schema(func) -> tuple[tuple[int, str, bool], ...]:
    """(position, name, keyword-only) of each argument the op's schema marks written."""
    schema = getattr(func, "_schema", None)
    return tuple((i, arg.name, arg.kwarg_only)
                 for i, arg in enumerate(schema.arguments if schema is not None else ())
                 if arg.alias_info is not None and arg.alias_info.is_write)


def _unique(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return list({id(t): t for t in tensors}.values())


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.nodes: list[OpNode] = []
        self.values: list[Value] = []
        self.tensors: dict[int, tuple[int, int]] = {}  # id(tensor) -> (value id, numel)
        self.newer: dict[int, int] = {}  # value id -> id of its newer in-place version
        self.keep: list[torch.Tensor] = []  # keeps ids unique while tracing
        self.scope: tuple[Frame, ...] = ()
        self.current_op = None  # the op being dispatched, for error messages
        self.suspended = False  # inside a fused function recorded as one op
        self.meta = MetaCache()

    # -- values ---------------------------------------------------------------
    def new_value(self, t: torch.Tensor, kind: str, producer=None, name="") -> int:
        vid = len(self.values)
        self.values.append(Value(vid, TensorMeta(tuple(t.shape), t.dtype), kind, producer, name))
        self.tensors[id(t)] = (vid, t.numel())
        self.keep.append(t)
        return vid

    def lookup(self, t: torch.Tensor) -> tuple[int, int]:
        entry = self.tensors.get(id(t))
        if entry is None:  # a tensor made outside the trace: a constant
            vid = self.new_value(t, CONSTANT, name="constant")
            return vid, self.values[vid].meta.nbytes
        vid, numel = entry
        while vid in self.newer:
            vid = self.newer[vid]
        meta = self.values[vid].meta
        return vid, min(numel, meta.numel) * meta.itemsize

    # -- dispatch -------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.suspended:
            return func(*args, **kwargs)
        self.current_op = func
        if func is aten._local_scalar_dense.default:
            raise TraceError(f"{_where(self.scope)} reads a tensor's value (.item() or a "
                             "data-dependent branch), so it cannot be traced on meta tensors")
        try:
            out = self.meta.run(func, args, kwargs)
        except Exception as exc:
            raise TraceError(f"op {func} failed in {_where(self.scope)}: "
                             f"{type(exc).__name__}: {_first_line(exc)}") from exc
        written, out_names = _written_args(func, args, kwargs)
        if out_names:  # out= tensors are written, not read; formulas receive them as `out`
            kwargs = {k: v for k, v in kwargs.items() if k not in out_names}
        in_tensors = tensors_in((args, kwargs))
        out_tensors = _unique(tensors_in(out) + written)
        if _is_view(func) and in_tensors:
            vid, _ = self.lookup(in_tensors[0])
            for o in out_tensors:
                if o is not in_tensors[0]:
                    self.tensors[id(o)] = (vid, o.numel())
                    self.keep.append(o)
            return out
        if not in_tensors or func._opname in _FACTORIES:
            for o in out_tensors:
                self.new_value(o, CONSTANT, name=func._opname)
            return out
        self._record(func, args, kwargs, out, in_tensors, out_tensors, written)
        return out

    def record_fused(self, op, args, kwargs, out):
        """Record a whole function (e.g. attention) as the single op `op`."""
        self._record(op, args, kwargs, out, tensors_in((args, kwargs)), tensors_in(out))

    def _record(self, func, args, kwargs, out, in_tensors, out_tensors, written=()):
        index = len(self.nodes)
        # several views of one value (attention's q, k and v, slices of one projection) are
        # read in sum, at most the whole value; the same view twice is read once
        reads: dict[int, int] = {}
        seen: set[int] = set()
        for t in in_tensors:
            vid, nbytes = self.lookup(t)
            if id(t) not in seen:
                seen.add(id(t))
                reads[vid] = min(reads.get(vid, 0) + nbytes, self.values[vid].meta.nbytes)
        writes = []
        ids_in = {id(t) for t in in_tensors} | {id(t) for t in written}
        for o in out_tensors:
            if id(o) in ids_in:  # in place or out=: a new version of the value it writes
                old, nbytes = self.lookup(o)
                meta = self.values[old].meta
                if o.numel() != self.tensors[id(o)][1]:  # an out= tensor the op resized
                    meta, nbytes = TensorMeta(tuple(o.shape), o.dtype), o.numel() * o.itemsize
                    self.tensors[id(o)] = (old, o.numel())
                vid = len(self.values)
                self.values.append(Value(vid, meta, ACTIVATION, index))
                self.newer[old] = vid
                writes.append((vid, nbytes))
            else:
                vid = self.new_value(o, ACTIVATION, index)
                writes.append((vid, self.values[vid].meta.nbytes))
        self.nodes.append(OpNode(index, func, _metas(args), _metas(kwargs), _metas(out),
                                 tuple(reads.items()), tuple(writes), self.scope))

    # -- module scopes ----------------------------------------------------------
    def push(self, frame: Frame):
        self.scope = self.scope + (frame,)

    def pop(self):
        self.scope = self.scope[:-1]


# Functions that one fused kernel computes on a GPU, recorded as one op instead of the
# aten ops they decompose into on meta tensors (attention: no score matrix in DRAM).
_FUSED_FUNCTIONS = {"scaled_dot_product_attention": aten.scaled_dot_product_attention.default}


@contextlib.contextmanager
def _fused_functions(rec: _Recorder):
    """Wrap torch.nn.functional's fused functions so each call is recorded as one op.

    A function mode would not see them: nn.MultiheadAttention calls attention from inside
    another overridable function, where modes are off. Callers look the function up in
    torch.nn.functional at call time, so replacing the attribute reaches them."""
    functional = torch.nn.functional
    originals = {name: getattr(functional, name) for name in _FUSED_FUNCTIONS}

    def wrap(name, fn):
        def fused(*args, **kwargs):
            if rec.suspended:
                return fn(*args, **kwargs)
            rec.suspended = True
            try:
                out = fn(*args, **kwargs)
            finally:
                rec.suspended = False
            rec.record_fused(_FUSED_FUNCTIONS[name], args, kwargs, out)
            return out
        return fused

    for name, fn in originals.items():
        setattr(functional, name, wrap(name, fn))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(functional, name, fn)


def _meta_of(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(tuple(t.shape), t.dtype)


def _metas(tree):
    return map_tensors(tree, _meta_of)


def _where(scope: Sequence[Frame]) -> str:
    if not scope:
        return "the model's forward"
    f = scope[-1]
    return f"module '{f.path or '(root)'}' ({f.cls})"


# flex_attention refuses meta tensors before it reaches an op the trace could record.
_FLEX_ATTENTION_SOURCE = "torch/nn/attention/flex_attention.py"


def _raised_in(exc: BaseException, source: str) -> bool:
    """Whether the traceback of `exc` passes through the file ending in `source`."""
    return any(frame.f_code.co_filename.replace("\\", "/").endswith(source)
               for frame, _ in traceback.walk_tb(exc.__traceback__))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


@contextlib.contextmanager
def _module_hooks(model: torch.nn.Module, rec: _Recorder):
    names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}

    def pre(module, _inputs):
        rec.push(Frame(names.get(id(module), "?"), type(module).__name__))

    def post(_module, _inputs, _output):
        rec.pop()

    h1 = torch.nn.modules.module.register_module_forward_pre_hook(pre)
    h2 = torch.nn.modules.module.register_module_forward_hook(post)
    try:
        yield
    finally:
        h1.remove()
        h2.remove()


def _check_call(model: torch.nn.Module, example: list) -> None:
    """The inputs go to forward positionally, in order: say so where forward cannot take
    them (a required keyword-only input, too many inputs) instead of failing inside it."""
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):  # no signature to check: let the call decide
        return
    try:
        signature.bind(*example)
    except TypeError as exc:
        raise TraceError(f"{type(model).__name__}.forward{signature} cannot take the "
                         f"{len(example)} input(s) given ({exc}): perfmodel passes a spec's "
                         "inputs positionally, in order; wrap the model in a module whose "
                         "forward takes them that way") from None


def _output_tensors(out) -> list[torch.Tensor]:
    """Tensors in a forward's output: any pytree (tuple, list, dict, transformers'
    ModelOutput), and dataclasses that are not registered as pytrees."""
    found = []
    for leaf in tree_flatten(out)[0]:
        if isinstance(leaf, torch.Tensor):
            found.append(leaf)
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            found += _output_tensors([getattr(leaf, f.name) for f in dataclasses.fields(leaf)])
    return found


def _as_meta(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    target = dtype if t.is_floating_point() else t.dtype
    return torch.empty(t.shape, dtype=target, device="meta")


def trace(model: torch.nn.Module, inputs: Iterable[TensorMeta | Sequence[int]],
          dtype: torch.dtype = torch.float16) -> Graph:
    """Run `model` on meta tensors of the given full input shapes and record its ops.

    `inputs` are full shapes (batch included) or TensorMeta; floating-point parameters,
    buffers and inputs take `dtype`. The model itself is not modified.
    """
    rec = _Recorder()
    state = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        state[name] = _as_meta(t, dtype)
        rec.new_value(state[name], WEIGHT, name=name)
    example = []
    for i, spec in enumerate(inputs):
        shape, dt = (spec.shape, spec.dtype) if isinstance(spec, TensorMeta) else (spec, dtype)
        x = torch.empty(tuple(shape), dtype=dt, device="meta")
        rec.new_value(x, INPUT, name=f"input{i}")
        example.append(x)
    input_ids = [rec.tensors[id(x)][0] for x in example]
    _check_call(model, example)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.device("meta"), _module_hooks(model, rec), \
                _fused_functions(rec), rec:
            out = torch.func.functional_call(model, state, tuple(example), strict=False)
    except TraceError:
        raise
    except Exception as exc:
        if _raised_in(exc, _FLEX_ATTENTION_SOURCE):
            raise TraceError(f"{_where(rec.scope)} calls flex_attention, which PyTorch cannot "
                             "run on the meta tensors perfmodel traces with (nor can "
                             "torch.utils.flop_counter count it there); trace the model with "
                             "F.scaled_dot_product_attention instead") from exc
        raise TraceError(f"tracing failed in {_where(rec.scope)} after op {rec.current_op or '-'}: "
                         f"{type(exc).__name__}: {_first_line(exc)}") from exc
    finally:
        model.train(was_training)
    tensors = _output_tensors(out)
    if not tensors:
        raise TraceError(f"the forward of {type(model).__name__} returned "
                         f"{type(out).__name__}, with no tensor in it: perfmodel needs the "
                         "outputs to know which tensors the last kernels write")
    outputs = [rec.lookup(o)[0] for o in tensors]
    return Graph(rec.nodes, rec.values, input_ids, outputs, type(model).__name__)
