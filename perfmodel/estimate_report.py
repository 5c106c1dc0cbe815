"""Estimate against measurement: per measured model, the calibrated estimate of the plan that
models its runtime (eager plan for eager files, inductor plan for Inductor files) beside the
measured median, and how many land within a tolerance. Readers take results: the caller
passes estimates and measurements; nothing here runs the pipeline."""
from __future__ import annotations

from dataclasses import dataclass

from .estimate import Estimate
from .fmt import sig
from .measure import Measurement

TOLERANCE = 0.20


@dataclass(frozen=True)
class EstimateRow:
    model: str
    backend: str
    plan: str
    t_ideal_ms: float
    t_min_ms: float
    t_est_ms: float
    t_measured_ms: float

    @property
    def ratio(self) -> float:
        """Estimate over measured median."""
        return self.t_est_ms / self.t_measured_ms

    def within(self, tolerance: float = TOLERANCE) -> bool:
        return abs(self.ratio - 1) <= tolerance


def estimate_row(measurement: Measurement, est: Estimate) -> EstimateRow:
    return EstimateRow(est.model, measurement.setting, est.plan, est.t_ideal_s * 1e3,
                       est.t_min_s * 1e3, est.t_est_ms, measurement.latency_ms)


def _counts(rows: list[EstimateRow], tolerance: float) -> list[str]:
    out = []
    for backend in dict.fromkeys(r.backend for r in rows):
        mine = [r for r in rows if r.backend == backend]
        out.append(f"{backend}: {sum(r.within(tolerance) for r in mine)} of {len(mine)} "
                   f"within +-{tolerance:.0%}")
    return out


def estimate_lines(rows: list[EstimateRow], tolerance: float = TOLERANCE) -> list[str]:
    width = max([8] + [len(r.backend) for r in rows])
    lines = [f"{'model':22s} {'backend':{width}s} {'plan':9s} {'ideal ms':>9s} {'T_min ms':>9s} "
             f"{'est. ms':>9s} {'meas. ms':>9s} {'est/meas':>8s}"]
    for r in rows:
        mark = "" if r.within(tolerance) else "  *"
        lines.append(f"{r.model:22s} {r.backend:{width}s} {r.plan:9s} {sig(r.t_ideal_ms):>9s} "
                     f"{sig(r.t_min_ms):>9s} {sig(r.t_est_ms):>9s} {sig(r.t_measured_ms):>9s} "
                     f"{r.ratio:8.2f}{mark}")
    return lines + _counts(rows, tolerance) + [f"(* outside +-{tolerance:.0%})"]


def estimate_markdown(rows: list[EstimateRow], tolerance: float = TOLERANCE) -> str:
    """The same table as markdown: one line per model, both backends side by side."""
    backends = list(dict.fromkeys(r.backend for r in rows))
    by_model: dict[str, dict[str, EstimateRow]] = {}
    for r in rows:
        by_model.setdefault(r.model, {})[r.backend] = r
    head = "| model | " + " | ".join(f"{b} T_min ms | {b} estimate ms | {b} measured ms | "
                                      f"{b} est/meas" for b in backends) + " |"
    rule = "|---|" + "---:|" * (4 * len(backends))
    lines = [head, rule]
    for model, cells in by_model.items():
        parts = []
        for b in backends:
            r = cells.get(b)
            parts += ([sig(r.t_min_ms), sig(r.t_est_ms), sig(r.t_measured_ms),
                       f"{r.ratio:.2f}" + ("" if r.within(tolerance) else " ✗")]
                      if r else ["-"] * 4)
        lines.append(f"| {model} | " + " | ".join(parts) + " |")
    return "\n".join(lines + [""] + [f"- {c}" for c in _counts(rows, tolerance)]) + "\n"
