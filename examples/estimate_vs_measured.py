"""Calibrated latency estimate against the measured median (issue 14, item 3; README,
"The calibrated estimate").

For every committed H200 measurement (eager and Inductor, batch 128, fp16): the estimate of
the plan that models the runtime (eager -> `eager`, Inductor -> `inductor`) from the
microbenchmarks in configs/hardware/calibration/h200-sxm.yaml, beside T_min and the measured
median, and how many land within +-20%. Nothing is fitted to these models: every number in
the estimate comes from the calibration file.

    python examples/estimate_vs_measured.py [-o examples/estimate_vs_measured.md]
"""
from __future__ import annotations

import argparse
import glob
import warnings
from pathlib import Path

import perfmodel
from perfmodel.estimate import calibration_of, estimate
from perfmodel.estimate_report import TOLERANCE, estimate_markdown, estimate_row
from perfmodel.measure import load_measurement
from perfmodel.measured import check_measurements

HERE = Path(__file__).parent


def breakdown(est) -> list[str]:
    """Per calibration table: kernels, summed T_min and summed estimate."""
    lines = ["| table | kernels | T_min ms | estimate ms | estimate / T_min |",
             "|---|---:|---:|---:|---:|"]
    for name, (n, t_min, t_est) in sorted(est.by_table().items(), key=lambda x: -x[1][2]):
        ratio = f"{t_est / t_min:.2f}" if t_min > 1e-6 else "-"
        lines.append(f"| {name} | {n} | {t_min * 1e3:.3f} | {t_est * 1e3:.3f} | {ratio} |")
    return lines


def by_kind(est, profiled) -> list[str]:
    """Estimate against a profiled eager pass, module by module, summed over the modules whose
    kernels the same calibration tables serve (the per-kernel files name each kernel's module;
    a module's estimate is its plan kernels' device times)."""
    measured: dict[str, float] = {}
    for k in profiled.kernels:
        measured[k.module] = measured.get(k.module, 0.0) + k.duration_ms  # all its launches
    estimated: dict[str, float] = {}
    tables: dict[str, set] = {}
    for k in est.kernels:
        name = k.timed.kernel.name
        estimated[name] = estimated.get(name, 0.0) + k.t_est_ms
        tables.setdefault(name, set()).add(k.table)
    groups: dict[str, list[float]] = {}
    for module in set(measured) | set(estimated):
        key = " + ".join(sorted(tables.get(module, {"(no plan kernel)"})))
        g = groups.setdefault(key, [0, 0.0, 0.0])
        g[0] += 1
        g[1] += measured.get(module, 0.0)
        g[2] += estimated.get(module, 0.0)
    lines = ["| tables of the module's kernels | modules | profiled ms | estimate ms | est/prof |",
             "|---|---:|---:|---:|---:|"]
    for key, (n, m, e) in sorted(groups.items(), key=lambda x: -x[1][1]):
        ratio = f"{e / m:.2f}" if m > 0.01 else "-"
        lines.append(f"| {key} | {n} | {m:.3f} | {e:.3f} | {ratio} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default=str(HERE / "estimate_vs_measured.md"))
    parser.add_argument("--hardware", default="h200-sxm")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    hw = perfmodel.load_hardware(args.hardware)
    cal = calibration_of(hw)
    files = sorted(glob.glob(str(HERE / "measurements" / "h200_*_eager.json"))) + \
        sorted(glob.glob(str(HERE / "measurements" / "h200_*_inductor.json")))
    checked = check_measurements([load_measurement(f) for f in files], hw)
    estimates = [estimate(c.runtime, cal) for c in checked]
    rows = [estimate_row(c.measurement, e) for c, e in zip(checked, estimates)]
    env = cal.environment
    text = [
        "# Calibrated latency estimate vs measured median (H200, batch 128, fp16)", "",
        "Written by `python examples/estimate_vs_measured.py`. Per kernel of the plan that "
        "models the runtime, `max(T_min / e, t_tiny) + (t_stream - t_graph)`, with `e` the "
        "fraction of its roofline time that microbenchmarks of the same kernel kind attained "
        "(interpolated in log space over the calibrated shapes); the model through a "
        "host/device pipeline (host time per eager op, per eager library call, per kernel of "
        "Inductor's generated code). No parameter is fitted to these models.", "",
        f"Calibration: `{Path(cal.path).relative_to(HERE.parent)}`, {env.get('gpu')}, torch "
        f"{env.get('torch')}, cuDNN {env.get('cudnn')}; "
        f"{sum(len(t.rows) for t in cal.tables.values())} kernels in {len(cal.tables)} tables; "
        f"launch: " + ", ".join(f"{k} {v:g}" for k, v in cal.launch.items()) + ".", "",
        f"Commands: `{cal.command}`", "",
        estimate_markdown(rows, TOLERANCE),
        "## Where the Inductor estimate goes", "",
    ]
    for c, e in zip(checked, estimates):
        if c.measurement.backend == "inductor" and c.spec.name in ("ConvNeXt-T", "EfficientNet-B0",
                                                                   "ResNet-50"):
            text += [f"### {c.spec.name} (measured {c.measurement.latency_ms:.3g} ms, "
                     f"estimate {e.t_est_ms:.3g} ms)", ""] + breakdown(e) + [""]
    held = [HERE / "measurements" / "mbconv"
            / "h200_efficientnet_b0_inductor_freezing_graphs.json"]
    held += sorted((HERE / "measurements" / "convfirstnet_e2e").glob(
        "h200_convfirstnet_*_[ei][an]*.json"))  # eager and inductor, not the fused kernels
    held = [f for f in held if f.exists()]
    if held:
        other = check_measurements([load_measurement(f) for f in held], hw)
        text += ["## Held out: other measured runs", "",
                 "Runs measured by other work, not looked at while the estimate was built: "
                 "torch.compile "
                 "with freezing, with and without CUDA graphs (a replayed graph has no launch "
                 "costs: `estimate(..., graphs=True)`), and the zoo's ConvFirstNets.", "",
                 "| model | run | T_min ms | estimate ms | measured ms | est/meas |",
                 "|---|---|---:|---:|---:|---:|"]
        for c in other:
            m = c.measurement
            e = estimate(c.runtime or c.result, cal, graphs=bool(m.method.get("cuda_graphs")))
            text.append(f"| {c.spec.name} | {m.setting} | {e.t_min_s * 1e3:.3f} | "
                        f"{e.t_est_ms:.3f} | {m.latency_ms:.3f} | "
                        f"{e.t_est_ms / m.latency_ms:.2f} |")
        text.append("")
    text += ["## Per kernel kind, against profiled eager passes", "",
             "The per-kernel files (torch.profiler, three passes averaged) name the module of "
             "every kernel; the estimate of the eager plan's kernels, module by module, summed "
             "over modules whose kernels the same tables serve.", ""]
    for c, e in zip(checked, estimates):
        profiled = HERE / "measurements" / f"h200_{c.measurement.spec}_eager_kernels.json"
        if c.measurement.backend == "eager" and profiled.exists():
            p = load_measurement(profiled)
            text += [f"### {c.spec.name} (kernels profiled {p.kernel_sum_ms:.3g} ms, "
                     f"estimated {e.t_kernels_s * 1e3:.3g} ms)", ""] + by_kind(e, p) + [""]
    Path(args.output).write_text("\n".join(text))
    print("\n".join(text[-40:]))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
