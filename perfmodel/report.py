"""Tables and text reports of analysis results (rich for the terminal; CSV and JSON)."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from .analysis import c_max_at

if TYPE_CHECKING:
    from .api import Result
    from .compare import Comparison
    from .gap import GapPoint
    from .hardware import Hardware
    from .kernel_results import KernelCase

COLUMNS = ("index", "module", "ops", "output_shape", "macs", "flops", "input_bytes",
           "weight_bytes", "output_bytes", "dram_bytes", "intensity", "t_min_ms", "bound")


def kernel_table(result: "Result") -> list[dict]:
    """One row per kernel (what `perfmodel layers` prints and exports)."""
    rows = []
    for i, kt in enumerate(result.kernels):
        k = kt.kernel
        rows.append({
            "index": i,
            "module": k.name or "(root)",
            "ops": "+".join(_compact(k.ops)),
            "output_shape": "x".join(map(str, k.output_shape)),
            "macs": k.macs,
            "flops": k.flops,
            "input_bytes": k.input_bytes,
            "weight_bytes": k.weight_bytes,
            "output_bytes": k.output_bytes,
            "l2_credit_bytes": kt.l2_credit,
            "dram_bytes": kt.dram_bytes,
            "intensity": kt.intensity,
            "t_min_ms": kt.t_min_ms,
            "bound": "memory" if kt.memory_bound else "compute",
            "unsupported": ";".join(k.unsupported),
        })
    return rows


def _compact(ops: list[str]) -> list[str]:
    """['convolution', 'native_batch_norm', 'relu_'] -> ['conv', 'bn', 'relu'].

    Long kernels (blocks) are summarised by counts: ['conv x3', 'bn x3', 'relu x3', 'add']."""
    short = {"convolution": "conv", "native_batch_norm": "bn",
             "_native_batch_norm_legit_no_training": "bn", "native_layer_norm": "layernorm",
             "max_pool2d_with_indices": "maxpool", "_adaptive_avg_pool2d": "avgpool"}
    out = []
    for op in ops:
        name = short.get(op, op).rstrip("_").lstrip("_")
        if not out or out[-1] != name:
            out.append(name)
    if len(out) <= 4:
        return out
    counts: dict[str, int] = {}
    for op in out:
        counts[op] = counts.get(op, 0) + 1
    return [f"{op}x{n}" if n > 1 else op for op, n in counts.items()]


def write_csv(result: "Result", path: str | Path) -> None:
    """The kernel table as CSV."""
    rows = kernel_table(result)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def write_json(result: "Result", path: str | Path) -> None:
    """The summary and the kernel table as JSON."""
    Path(path).write_text(json.dumps({"summary": result.summary(),
                                      "kernels": kernel_table(result)}, indent=1))


def _si(x: float, unit: str = "") -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {prefix}{unit}"
    return f"{x:.0f} {unit}".rstrip()


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=160)


def print_summary(result: "Result", console: Console | None = None) -> None:
    console = console or _console()
    s = result.summary()
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("model", s["model"]),
        ("hardware", f"{s['hardware']}  (op:byte {s['op_byte']:.1f} for {s['dtype']})"),
        ("plan", s["plan"]),
        ("batch, dtype", f"{s['batch']}, {s['dtype']}"),
        ("GMACs per image", f"{s['gmacs_per_image']:.3f}"),
        ("matrix ops (flops)", f"{s['gflops']:.1f} G  (other arithmetic {s['other_gops']:.2f} G)"),
        ("DRAM traffic", f"{s['dram_gb']:.3f} GB  ({s['byte_model']})"),
        ("ideal latency N/R", f"{s['t_ideal_ms']:.3f} ms"),
        ("T_min (waterline)", f"{s['t_min_ms']:.3f} ms"),
        ("C_max (waterline)", f"{100 * s['c_max']:.1f} %"),
        ("mediant intensity", f"{s['mediant_intensity']:.1f} ops/byte"),
        ("C_max (mediant roofline)", f"{100 * s['mediant_c_max']:.1f} %"),
        ("Amdahl f, I_mem", f"{s['memory_fraction']:.3f}, {s['memory_intensity']:.1f} ops/byte"),
        ("kernels", f"{s['kernels']} ({s['compute_bound']} compute-bound, "
                    f"{s['memory_bound']} memory-bound)"),
        ("unsupported ops", ", ".join(f"{k} x{v}" for k, v in s["unsupported_ops"].items())
         or "none"),
    ]
    for k, v in rows:
        table.add_row(k, str(v))
    console.print(table)


def print_kernels(result: "Result", console: Console | None = None, top: int | None = None) -> None:
    console = console or _console()
    rows = kernel_table(result)
    if top:
        rows = sorted(rows, key=lambda r: -r["t_min_ms"])[:top]
    table = Table(title=f"{result.model} on {result.hardware.name}, plan {result.plan}, "
                        f"batch {result.batch} {result.dtype}")
    for col, justify in (("#", "right"), ("module", "left"), ("ops", "left"),
                         ("output", "left"), ("MACs", "right"), ("read", "right"),
                         ("weights", "right"), ("written", "right"), ("ops/B", "right"),
                         ("t_min ms", "right"), ("bound", "left")):
        table.add_column(col, justify=justify, overflow="fold")
    for r in rows:
        table.add_row(str(r["index"]), r["module"], r["ops"], r["output_shape"],
                      _si(r["macs"]), _si(r["input_bytes"], "B"), _si(r["weight_bytes"], "B"),
                      _si(r["output_bytes"], "B"), f"{r['intensity']:.1f}",
                      f"{r['t_min_ms']:.4f}",
                      "[red]memory[/]" if r["bound"] == "memory" else "compute")
    console.print(table)
    print_unsupported(result, console)


def print_unsupported(result: "Result", console: Console) -> None:
    """Ops without a cost formula: their bytes are counted, their arithmetic is not."""
    if result.unsupported:
        listed = ", ".join(f"{op} x{n}" for op, n in sorted(result.unsupported.items()))
        console.print(f"[yellow]unsupported ops (bytes counted, arithmetic not): {listed}[/]")


def sweep_line(result: "Result", marks: "list[Hardware]") -> str:
    """The model's waterline C_max at each marked processor's op:byte (under the byte model
    the result's kernels were timed with)."""
    at = ", ".join(f"{hw.name} {100 * c_max_at(result.kernels, hw.op_byte(result.dtype)):.1f}%"
                   for hw in marks)
    return f"{result.model}: waterline C_max at {at}"


def gap_lines(points: "list[GapPoint]") -> list[str]:
    lines = [f"{'model':22s} {'backend':9s} {'top-1':>6s} {'GMACs':>7s} {'ideal ms':>9s} "
             f"{'T_min ms':>9s} {'actual ms':>9s} {'C':>6s} {'C_max':>6s} {'C_impl':>6s}"]
    for p in points:
        lines.append(f"{p.model:22s} {p.backend:9s} {p.accuracy:6.2f} {p.gmacs_per_image:7.3f} "
                     f"{p.t_ideal_ms:9.4g} {p.t_min_ms:9.4g} {p.t_actual_ms:9.4g} "
                     f"{100 * p.c:5.1f}% {100 * p.c_max:5.1f}% {100 * p.c_impl:5.1f}%")
    return lines


def compare_lines(cmp: "Comparison") -> list[str]:
    r, m, g = cmp.result, cmp.measurement, cmp.gap
    lines = []
    if cmp.modules:
        lines.append(f"{'module':40s} {'t_min ms':>9s} {'meas. ms':>9s} {'ratio':>7s}  "
                     f"{'bound':7s} {'pred. MB':>9s} {'ncu MB':>9s}")
        for x in cmp.modules:
            ncu = f"{x.measured_dram_bytes / 1e6:9.2f}" if x.bytes_ratio is not None else ""
            lines.append(f"{x.module or '(root)':40s} {x.predicted_ms:9.4f} {x.measured_ms:9.4f} "
                         f"{x.ratio:7.2f}  {'memory' if x.memory_bound else 'compute':7s} "
                         f"{x.dram_bytes / 1e6:9.2f} {ncu}")
    if cmp.median_bytes_ratio is not None:
        lines.append(f"DRAM bytes, Nsight Compute over predicted: median "
                     f"{cmp.median_bytes_ratio:.3f} over "
                     f"{sum(x.bytes_ratio is not None for x in cmp.modules)} modules")
    if not m.kernels:
        lines.append("no per-kernel rows in this file (`perfmodel bench --per-kernel` records "
                     "them): totals only")
    else:
        lines.append(f"kernels: {m.kernel_sum_ms:.4g} ms per pass beside the median latency "
                     f"{m.latency_ms:.4g} ms ({100 * m.kernel_sum_ms / m.latency_ms:.0f}%)"
                     + (f"; unattributed {cmp.unattributed_ms:.4g} ms" if cmp.unattributed_ms
                        else ""))
    if cmp.unmatched:
        lines.append(f"unmatched measured kernels: {len(cmp.unmatched)}, "
                     f"{cmp.unmatched_ms:.3f} ms per pass")
    lines.append(f"{r.model} on {m.environment.get('gpu', '?')} ({m.backend}): ideal "
                 f"{g.t_ideal_ms:.3f} ms, T_min {g.t_min_ms:.3f} ms ({r.hardware.name}, "
                 f"plan {r.plan}), measured {g.t_actual_ms:.3f} ms")
    lines.append(f"C {100 * g.c:.1f}% = C_max {100 * g.c_max:.1f}% x C_impl "
                 f"{100 * g.c_impl:.1f}%")
    return lines


def hardware_table(configs: "list[Hardware]") -> list[str]:
    lines = [f"{'name':20s} {'fp16 TFLOP/s':>12s} {'DRAM GB/s':>10s} {'op:byte':>8s} "
             f"{'L2 MiB':>7s}  description"]
    for hw in configs:
        lines.append(f"{hw.name:20s} {hw.peak_tflops.get('float16', float('nan')):12.1f} "
                     f"{hw.dram_gbps:10.0f} {hw.op_byte('float16'):8.1f} "
                     f"{hw.l2_mib or 0:7.0f}  {hw.description}")
    return lines


def hardware_lines(hw: "Hardware") -> list[str]:
    lines = [f"{hw.name} ({hw.vendor}): {hw.description}", f"  config: {hw.path}"]
    for dtype, tflops in hw.peak_tflops.items():
        lines.append(f"  peak {dtype:9s} {tflops:8.1f} TFLOP/s dense ({hw.accumulate} "
                     f"accumulate)  op:byte {tflops * 1e12 / hw.dram_bytes_per_s:7.1f}")
    for dtype, tflops in hw.vector_tflops.items():
        lines.append(f"  vector {dtype:7s} {tflops:8.1f} TFLOP/s")
    lines.append(f"  DRAM {hw.dram_gbps:g} GB/s, {hw.dram_gib or '?'} GiB; L2 {hw.l2_mib or '?'} "
                 f"MiB; {hw.sm_count or '?'} SMs at {hw.clock_mhz or '?'} MHz")
    lines.append(f"  source: {hw.source}")
    if hw.notes:
        lines.append(f"  notes: {hw.notes}")
    return lines


def kernel_case_lines(cases: "list[KernelCase]") -> list[str]:
    lines = [f"{'case':30s} {'block us':>9s} {'layer us':>9s} {'fused us':>9s} {'of bound':>8s} "
             f"{'compile us':>10s} {'eager us':>9s} {'x compile':>9s}"]
    for c in cases:
        fused, compiled = c.median_us.get("cuda_kernels"), c.median_us.get("inductor")
        lines.append(f"{c.name:30s} {c.block_t_min_us:9.1f} {c.layer_t_min_us:9.1f} "
                     f"{fused:9.1f} {100 * c.fraction_of_bound():7.1f}% {compiled:10.1f} "
                     f"{c.median_us.get('eager', float('nan')):9.1f} {compiled / fused:9.2f}")
    return lines
