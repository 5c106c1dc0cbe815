"""The efficiency gap (paper section 3, eqs. 1-9) of measured models, with its decomposition.

For each measured model: ideal latency N/R, waterline T_min and actual latency t_a, so
that C = t_ideal/t_a = C_max * C_impl with C_max = t_ideal/T_min (what the memory system
forces on the plan) and C_impl = T_min/t_a (what the software leaves on the table).
"""
from __future__ import annotations

from dataclasses import dataclass

from .api import analyze_spec
from .errors import InputError
from .hardware import Hardware
from .measure import Measurement
from .spec import ModelSpec, load_spec


@dataclass(frozen=True)
class GapPoint:
    model: str
    family: str
    backend: str
    accuracy: float
    gmacs_per_image: float
    t_ideal_ms: float
    t_min_ms: float
    t_actual_ms: float

    @property
    def c(self) -> float:
        """Computational efficiency t_ideal / t_a (eq. 7)."""
        return self.t_ideal_ms / self.t_actual_ms

    @property
    def c_max(self) -> float:
        return self.t_ideal_ms / self.t_min_ms

    @property
    def c_impl(self) -> float:
        return self.t_min_ms / self.t_actual_ms


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


def gap_point(m: Measurement, hardware: Hardware | str, plan: str | None = None) -> GapPoint:
    spec = load_spec(m.spec)
    result = analyze_spec(spec, batch=m.batch, dtype=m.dtype, hardware=hardware, plan=plan)
    t = result.totals
    return GapPoint(spec.name, family_of(spec.name), m.backend, accuracy_of(spec),
                    result.gmacs_per_image, t.t_ideal_s * 1e3, t.t_min_s * 1e3, m.latency_ms)
