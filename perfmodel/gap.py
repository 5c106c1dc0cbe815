"""The efficiency gap (paper section 3, eqs. 1-9) of measured models, with its
decomposition C = C_max * C_impl (see analysis.EfficiencyGap)."""
from __future__ import annotations

from dataclasses import dataclass

from .analysis import EfficiencyGap
from .api import Result
from .errors import InputError
from .hardware import Hardware
from .measure import Measurement
from .spec import ModelSpec


@dataclass(frozen=True)
class GapPoint(EfficiencyGap):
    """One measured model on the efficiency-gap plot."""

    model: str = ""
    family: str = ""
    backend: str = ""
    accuracy: float | None = None  # top-1 %; None for an untrained model
    gmacs_per_image: float = 0.0
    setting: str = ""  # the backend with its speed settings (Measurement.setting)
    t_runtime_ms: float | None = None  # T_min of the plan modelling the runtime's kernels
    t_estimate_ms: float | None = None  # the calibrated estimate of that plan (perfmodel.estimate)

    @property
    def c_boundaries(self) -> float | None:
        """T_min / T_runtime: what the runtime's kernel boundaries (the eager or inductor
        plan's extra kernels and bytes) cost against the chosen plan."""
        return self.t_min_ms / self.t_runtime_ms if self.t_runtime_ms else None

    @property
    def c_kernels(self) -> float | None:
        """T_runtime / t_actual: what the runtime's kernels lose against their own bound.
        C_impl = C_boundaries x C_kernels."""
        return self.t_runtime_ms / self.t_actual_ms if self.t_runtime_ms else None


def family_of(name: str) -> str:
    """'EfficientNet-B0' -> 'EfficientNet'; 'ResNeXt-101 32x8d' -> 'ResNeXt'."""
    return name.split("-")[0].strip()


def accuracy_of(spec: ModelSpec, required: bool = True) -> float | None:
    """Top-1 %: the spec's, else torchvision's metadata for weights at the spec's crop size;
    None for a model without either (an untrained zoo network) unless `required`."""
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
    if not required:
        return None
    raise InputError("no top-1 accuracy: add 'accuracy:' to the spec", file=spec.path,
                     field="accuracy")


def gap_point(measurement: Measurement, spec: ModelSpec, result: Result,
              runtime: Result | None = None, estimate_ms: float | None = None) -> GapPoint:
    """One measured model on the efficiency-gap plot, against `result`'s T_min (an untrained
    model, without accuracy, goes on the latency-vs-complexity panel only); `runtime`, the
    analysis under the plan that models the runtime's kernels, splits C_impl; `estimate_ms` is
    its calibrated estimate, where the hardware has a calibration."""
    t = result.totals
    return GapPoint(t.t_ideal_s * 1e3, t.t_min_s * 1e3, measurement.latency_ms, model=spec.name,
                    family=family_of(spec.name), backend=measurement.backend,
                    accuracy=accuracy_of(spec, required=False),
                    gmacs_per_image=result.gmacs_per_image, setting=measurement.setting,
                    t_runtime_ms=runtime.totals.t_min_s * 1e3 if runtime else None,
                    t_estimate_ms=estimate_ms)


def gap_title(hardware: Hardware, measurements: list[Measurement]) -> str:
    batches = "/".join(map(str, sorted({m.batch for m in measurements})))
    dtypes = "/".join(sorted({str(m.dtype) for m in measurements}))
    return f"Efficiency gap on {hardware.name}: batch {batches}, {dtypes}"
