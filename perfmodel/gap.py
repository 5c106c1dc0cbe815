"""The efficiency gap (paper section 3, eqs. 1-9) of measured models, with its
decomposition C = C_max * C_impl (see analysis.EfficiencyGap)."""
from __future__ import annotations

from dataclasses import dataclass

from .analysis import EfficiencyGap
from .api import analyze_spec
from .errors import InputError
from .hardware import Hardware
from .measure import Measurement
from .spec import ModelSpec, load_spec


@dataclass(frozen=True)
class GapPoint(EfficiencyGap):
    """One measured model on the efficiency-gap plot."""

    model: str = ""
    family: str = ""
    backend: str = ""
    accuracy: float = 0.0
    gmacs_per_image: float = 0.0


def family_of(name: str) -> str:
    """'EfficientNet-B0' -> 'EfficientNet'; 'ResNeXt-101 32x8d' -> 'ResNeXt'."""
    return name.split("-")[0].strip()


def accuracy_of(spec: ModelSpec) -> float:
    """Top-1 %: the spec's, else torchvision's metadata for weights at the spec's crop size."""
    if spec.accuracy is not None:
        return float(spec.accuracy)
    module, _, fn = spec.model.rpartition(":")
    if module.startswith("torchvision.models"):
        import torchvision

        try:
            enum = torchvision.models.get_model_weights(fn)
            entries = [enum.DEFAULT] + list(enum)  # the recommended weights first
        except (ValueError, KeyError, AttributeError):
            entries = []
        crop = spec.inputs[0][-1]
        for weights in entries:
            if weights.transforms().crop_size[0] == crop:
                return float(weights.meta["_metrics"]["ImageNet-1K"]["acc@1"])
    raise InputError("no top-1 accuracy: add 'accuracy:' to the spec", file=spec.path,
                     field="accuracy")


def gap_points(measurements: list[Measurement], hardware: Hardware | str,
               plan: str | None = None) -> list[GapPoint]:
    """One point per measurement; each spec is analysed once per batch and dtype, however
    many backends measured it."""
    analysed: dict[tuple, tuple] = {}
    points = []
    for m in measurements:
        key = (m.spec, m.batch, m.dtype)
        if key not in analysed:
            spec = load_spec(m.spec)
            result = analyze_spec(spec, batch=m.batch, dtype=m.dtype, hardware=hardware,
                                  plan=plan)
            analysed[key] = spec, result
        spec, result = analysed[key]
        t = result.totals
        points.append(GapPoint(t.t_ideal_s * 1e3, t.t_min_s * 1e3, m.latency_ms, model=spec.name,
                               family=family_of(spec.name), backend=m.backend,
                               accuracy=accuracy_of(spec), gmacs_per_image=result.gmacs_per_image))
    return points
