"""Model specs: which model, at what input, batch, dtype, hardware and plan.

A spec is a YAML file (``configs/models/*.yaml`` or any path)::

    name: ResNet-101
    model: torchvision.models:resnet101   # module:callable (or module.callable), or path/to/net.py:build
    kwargs: {}
    input: [3, 224, 224]                  # per-sample shape; a list of shapes for several;
                                          # {shape: [128], dtype: int64} for token ids
    batch: 128
    dtype: float16
    hardware: a5000-paper
    plan: layer                           # op | layer | block | block:CNBlock,layer3.*
    groups: []                            # optional custom kernels: lists of module globs
    accuracy: 77.374                      # optional top-1 %

Any field can be overridden from the command line or the Python API.
"""
from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .dtypes import FLOAT16, INPUT_DTYPE_NAMES, DType, parse_dtype
from .errors import InputError
from .plan_spec import PlanSpec
from .resources import builtin_names, resolve_config
from .yamlio import Fields, load_mapping

if TYPE_CHECKING:  # loading a spec needs no torch; building and tracing its model do
    import torch

    from .trace import TensorMeta

_FIELDS = {"name", "model", "kwargs", "input", "batch", "dtype", "hardware", "plan", "groups",
           "accuracy", "notes"}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model: str
    inputs: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str | None, ...] = ()  # per input; None: the spec's dtype
    kwargs: dict[str, Any] = field(default_factory=dict)
    batch: int = 128
    dtype: DType = FLOAT16
    hardware: str = "a5000-paper"
    plan: PlanSpec = PlanSpec()
    accuracy: float | None = None
    notes: str = ""
    path: str | None = None

    def with_overrides(self, *, batch=None, dtype=None, hardware=None, plan=None) -> "ModelSpec":
        """A copy with command-line overrides applied (None keeps the spec's value)."""
        changes: dict[str, Any] = {}
        if batch is not None:
            changes["batch"] = check_batch(batch, field="--batch")
        if dtype is not None:
            changes["dtype"] = parse_dtype(dtype, field="--dtype")
        if hardware is not None:
            changes["hardware"] = hardware  # a name, a path or a Hardware
        if plan is not None:
            parsed = plan if isinstance(plan, PlanSpec) else PlanSpec.parse(plan, field="--plan")
            changes["plan"] = replace(parsed, groups=self.plan.groups)
        return replace(self, **changes)

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        """Full input shapes, batch first."""
        return [(self.batch, *shape) for shape in self.inputs]

    @property
    def input_text(self) -> str:
        """The spec's `input` as it is written: [3, 224, 224] for one input, a list of them
        for several, {shape: [128], dtype: int64} for one with its own dtype."""
        dtypes = self.input_dtypes or (None,) * len(self.inputs)
        entries = [f"{{shape: {list(s)}, dtype: {d}}}" if d else str(list(s))
                   for s, d in zip(self.inputs, dtypes)]
        return entries[0] if len(entries) == 1 else f"[{', '.join(entries)}]"

    @property
    def input_metas(self) -> list[TensorMeta]:
        """Full input shapes with their dtypes (integer inputs such as token ids keep theirs)."""
        return input_metas(self.inputs, self.input_dtypes, self.batch, self.dtype)


def input_metas(inputs, input_dtypes, batch: int, dtype: DType) -> list[TensorMeta]:
    """Per-sample shapes and input dtypes (None: `dtype`) -> full shapes, batch first."""
    import torch

    from .trace import TensorMeta

    dtypes = input_dtypes or (None,) * len(inputs)
    return [TensorMeta((batch, *shape), getattr(torch, d) if d else dtype.torch)
            for shape, d in zip(inputs, dtypes)]


def check_batch(batch, *, file: str | None = None, field: str = "batch") -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
        raise InputError(f"must be a positive integer, got {batch!r}", file=file, field=field)
    return batch


def parse_inputs(raw, *, file: str | None = None, field: str = "input"
                 ) -> tuple[tuple[tuple[int, ...], ...], tuple[str | None, ...]]:
    """`[3, 224, 224]`, `{shape: [128], dtype: int64}`, or a list of either -> per-sample
    shapes and their dtypes (`()` when every input takes the model's dtype)."""
    if isinstance(raw, dict):
        entries = [raw]
    elif isinstance(raw, (list, tuple)) and raw and isinstance(raw[0], (list, tuple, dict)):
        entries = list(raw)
    else:
        entries = [raw]
    shapes, dtypes = [], []
    for entry in entries:
        if isinstance(entry, dict) and set(entry) - {"shape", "dtype"}:
            raise InputError(f"unknown key {sorted(set(entry) - {'shape', 'dtype'})[0]!r} in "
                             f"{entry!r} (an input takes shape and dtype)", file=file, field=field)
        shape, dtype = (entry.get("shape"), entry.get("dtype")) if isinstance(entry, dict) \
            else (entry, None)
        if not isinstance(shape, (list, tuple)) or not shape or not all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
            raise InputError(f"expected a per-sample shape of positive integers such as "
                             f"[3, 224, 224], {{shape: [128], dtype: int64}} or a list of them, "
                             f"got {raw!r}", file=file, field=field)
        if dtype is not None and (not isinstance(dtype, str) or dtype not in INPUT_DTYPE_NAMES):
            raise InputError(f"unknown input dtype {dtype!r} (integer inputs: "
                             f"{', '.join(INPUT_DTYPE_NAMES)}; floating inputs take 'dtype')",
                             file=file, field=field)
        shapes.append(tuple(shape))
        dtypes.append(dtype)
    return tuple(shapes), tuple(dtypes) if any(dtypes) else ()


def _plan(f: Fields) -> PlanSpec:
    plan = PlanSpec.parse(f.get("plan", "layer", str), file=f.file)
    groups = f.get("groups", [], list)
    for i, g in enumerate(groups):
        if not isinstance(g, list) or not g or not all(isinstance(x, str) for x in g):
            raise f.error(f"groups[{i}]", "expected a list of module-path globs such as "
                                          "['features.1.*', 'features.2.*']")
    return replace(plan, groups=tuple(tuple(g) for g in groups))


def parse_spec(data: dict, file: str) -> ModelSpec:
    f = Fields(data, file, _FIELDS)
    model = f.get("model", types=str)
    if ":" not in model and "." in model.strip(".") and not model.endswith(".py"):
        model = ":".join(model.rsplit(".", 1))  # the dotted form, torchvision.models.resnet18
    if ":" not in model:
        raise f.error("model", f"expected 'module:callable' (or module.callable) or "
                               f"'path/to/file.py:callable', got {model!r}")
    inputs, input_dtypes = parse_inputs(f.get("input", types=(list, dict)), file=file)
    accuracy = f.get("accuracy", None, (int, float))
    if accuracy is not None and not 0 <= accuracy <= 100:
        raise f.error("accuracy", f"must be a top-1 percentage in [0, 100], got {accuracy}")
    return ModelSpec(
        name=f.get("name", Path(file).stem, str),
        model=model,
        kwargs=f.get("kwargs", {}, dict),
        inputs=inputs,
        input_dtypes=input_dtypes,
        batch=f.positive("batch", 128, integer=True),
        dtype=parse_dtype(f.get("dtype", "float16", str), file=file),
        hardware=str(f.get("hardware", "a5000-paper", str)),
        plan=_plan(f),
        accuracy=accuracy,
        notes=f.get("notes", "", str),
        path=file,
    )


def load_spec(name_or_path: str | Path) -> ModelSpec:
    """Load a model spec from a YAML path or a built-in name (``resnet50``)."""
    path = resolve_config(name_or_path, "models")
    if path is None:
        if str(name_or_path).endswith((".yaml", ".yml")):
            raise InputError("file not found", file=str(name_or_path))
        raise InputError(f"no such file and no built-in model '{name_or_path}' (built-in: "
                         f"{', '.join(list_models())})")
    return parse_spec(load_mapping(path), str(path))


def list_models() -> list[str]:
    return builtin_names("models")


def resolve_callable(target: str, *, base: Path | None = None, file: str | None = None):
    """Import ``module:callable`` or ``path/to/file.py:callable``."""
    module_name, _, attr = target.rpartition(":")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_absolute() and base is not None:
                path = base / path
            if not path.is_file():
                raise InputError(f"model file {path} not found", file=file, field="model")
            spec = importlib.util.spec_from_file_location(f"perfmodel_user_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"cannot import '{module_name}': {type(exc).__name__}: {exc}",
                         file=file, field="model") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise InputError(f"'{module_name}' has no callable '{attr}'{_callable_hint(module, module_name, attr)}",
                         file=file, field="model")
    return fn


def _callable_hint(module, module_name: str, attr: str) -> str:
    """'; did you mean ...?' for a callable that lives one level down (``timm:efficientnet_b0`` is
    ``timm.models:efficientnet_b0``, ``torchvision:resnet50`` ``torchvision.models:resnet50``) or is a near
    spelling of one the module has; empty when there is nothing to suggest."""
    sub = getattr(module, "models", None)
    if sub is None and not module_name.endswith(".py"):
        try:
            sub = importlib.import_module(f"{module_name}.models")
        except Exception:
            sub = None
    if callable(getattr(sub, attr, None)):
        return f"; did you mean '{module_name}.models:{attr}'?"
    names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n, None))]
    close = difflib.get_close_matches(attr, names, n=1, cutoff=0.8)
    return f"; did you mean '{module_name}:{close[0]}'?" if close else ""


def build_model(spec: ModelSpec) -> "torch.nn.Module":
    """Construct the spec's model with its weights on the meta device (no memory, no init)."""
    import torch

    from .build import meta_init

    base = Path(spec.path).parent if spec.path else None
    fn = resolve_callable(spec.model, base=base, file=spec.path)
    try:
        with meta_init():
            model = fn(**spec.kwargs)
    except Exception as exc:
        raise InputError(f"calling {spec.model}(**kwargs) failed: {type(exc).__name__}: {exc}",
                         file=spec.path, field="kwargs" if spec.kwargs else "model") from exc
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"{spec.model} returned {type(model).__name__}, not a torch.nn.Module",
                         file=spec.path, field="model")
    return model
