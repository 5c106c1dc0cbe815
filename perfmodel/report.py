"""Tables and text reports of analysis results (rich for the terminal; CSV and JSON)."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from .analysis import c_max_at
from .errors import InputError
from .fmt import pct, si, sig
from .outputs import write_text

if TYPE_CHECKING:
    from .api import Result
    from .compare import Comparison
    from .estimate import Estimate  # noqa: F401 (annotations)
    from .gap import GapPoint
    from .hardware import Hardware
    from .kernel_results import KernelCase, NetworkCase

COLUMNS = ("index", "module", "ops", "output_shape", "macs", "flops", "input_bytes",
           "weight_bytes", "output_bytes", "dram_bytes", "intensity", "t_min_ms", "bound")


def kernel_table(result: "Result", estimate: "Estimate | None" = None) -> list[dict]:
    """One row per kernel (what `perfmodel layers` prints and exports); with the result's
    calibrated `estimate`, each kernel's expected time and the calibration table behind it."""
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
        if estimate is not None:
            rows[-1] |= {"t_est_ms": estimate.kernels[i].t_est_ms,
                         "est_table": estimate.kernels[i].table}
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


def write_csv(result: "Result", path: str | Path, estimate: "Estimate | None" = None) -> None:
    """The kernel table as CSV."""
    rows = kernel_table(result, estimate)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(rows[0]) if rows else COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, text.getvalue(), field="--csv")


def write_json(result: "Result", path: str | Path, estimate: "Estimate | None" = None) -> None:
    """The summary and the kernel table as JSON."""
    summary = result.summary() | ({"t_est_ms": estimate.t_est_ms} if estimate else {})
    write_text(path, json.dumps({"summary": summary, "kernels": kernel_table(result, estimate)},
                                indent=1), field="--json")


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=160)


def print_summary(result: "Result", console: Console | None = None) -> None:
    console = console or _console()
    s, t = result.summary(), result.totals
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("model", s["model"]),
        ("hardware", f"{s['hardware']}  (op:byte {sig(s['op_byte'])} for {s['dtype']})"),
        ("plan", s["plan"]),
        ("batch, dtype", f"{s['batch']}, {s['dtype']}"),
        ("MACs per image", si(result.macs / result.batch)),
        ("matrix ops (flops)", f"{si(t.flops)}  (other arithmetic {si(result.other_ops)})"),
        ("DRAM traffic", f"{si(t.dram_bytes, 'B')}  ({s['byte_model']})"),
        ("ideal latency N/R", f"{sig(s['t_ideal_ms'])} ms"),
        ("T_min (waterline)", f"{sig(s['t_min_ms'])} ms"),
        ("C_max (waterline)", pct(s["c_max"])),
        ("mediant intensity", f"{sig(s['mediant_intensity'])} ops/byte"),
        ("C_max (mediant roofline)", pct(s["mediant_c_max"])),
        ("Amdahl f, I_mem", f"{sig(s['memory_fraction'], 3)}, {sig(s['memory_intensity'])} "
                            "ops/byte"),
        ("kernels", f"{s['kernels']} ({s['compute_bound']} compute-bound, "
                    f"{s['memory_bound']} memory-bound)"),
        ("unsupported ops", ", ".join(f"{k} x{v}" for k, v in s["unsupported_ops"].items())
         or "none"),
    ]
    for k, v in rows:
        table.add_row(k, str(v))
    console.print(table)


def print_kernels(result: "Result", console: Console | None = None, top: int | None = None,
                  estimate: "Estimate | None" = None) -> None:
    console = console or _console()
    rows = kernel_table(result, estimate)
    if top:
        rows = sorted(rows, key=lambda r: -r["t_min_ms"])[:top]
    table = Table(title=f"{result.model} on {result.hardware.name}, plan {result.plan}, "
                        f"batch {result.batch} {result.dtype}")
    columns = (("#", "right"), ("module", "left"), ("ops", "left"), ("output", "left"),
               ("MACs", "right"), ("read", "right"), ("weights", "right"),
               ("written", "right"), ("ops/B", "right"), ("t_min ms", "right"),
               ("bound", "left")) + ((("est. ms", "right"),) if estimate else ())
    for col, justify in columns:
        table.add_column(col, justify=justify, overflow="fold")
    for r in rows:
        table.add_row(str(r["index"]), r["module"], r["ops"], r["output_shape"],
                      si(r["macs"]), si(r["input_bytes"], "B"), si(r["weight_bytes"], "B"),
                      si(r["output_bytes"], "B"), sig(r["intensity"]), sig(r["t_min_ms"]),
                      "[red]memory[/]" if r["bound"] == "memory" else "compute",
                      *([sig(r["t_est_ms"])] if estimate else []))
    console.print(table)
    print_unsupported(result, console)


def print_unsupported(result: "Result", console: Console) -> None:
    """Ops without a cost formula: their bytes are counted, their arithmetic is not."""
    if result.unsupported:
        listed = ", ".join(f"{op} x{n}" for op, n in sorted(result.unsupported.items()))
        console.print(f"[yellow]unsupported ops (bytes counted, arithmetic not): {listed}[/]")


def roofline_line(result: "Result") -> str:
    t = result.totals
    return (f"{result.model}: mediant intensity {sig(t.mediant_intensity)} ops/byte, "
            f"mediant-roofline C_max {pct(t.mediant_c_max)}, waterline C_max {pct(t.c_max)}")


def amdahl_lines(results: "list[Result]", fuse_to: float | None = None) -> list[str]:
    """Each model's f, I_mem and C_max, and the speedup if fusion lifted its memory-bound
    kernels to intensity `fuse_to`. Fusion only raises intensity: a target below a model's
    I_mem is refused rather than reported as a 'speedup' below 1."""
    lines = []
    for r in results:
        t = r.totals
        line = (f"{r.model}: f {sig(t.memory_fraction, 3)}, I_mem {sig(t.memory_intensity)} "
                f"ops/byte, C_max {pct(t.c_max)}")
        if fuse_to:
            if t.memory_bytes and fuse_to < t.memory_intensity:
                raise InputError(f"{fuse_to:g} ops/byte is below {r.model}'s I_mem "
                                 f"{sig(t.memory_intensity)} ops/byte, the intensity its "
                                 f"memory-bound kernels have now; fusion raises intensity, so "
                                 f"give I above {sig(t.memory_intensity)}", field="--fuse-to")
            line += f"; fusing to I={fuse_to:g}: speedup x{sig(t.fusion_speedup(fuse_to), 3)}"
        lines.append(line)
    return lines


def intensity_line(curve) -> str:
    """One conv type's intensity at each channel count (`perfmodel intensity`)."""
    return f"{curve.name:20s} " + " ".join(f"{ch}:{sig(i)}" for ch, i in
                                           zip(curve.channels, curve.intensity))


def sweep_line(result: "Result", marks: "list[Hardware]") -> str:
    """The model's waterline C_max at each marked processor's op:byte (under the byte model
    the result's kernels were timed with)."""
    at = ", ".join(f"{hw.name} {pct(c_max_at(result.kernels, hw.op_byte(result.dtype)))}"
                   for hw in marks)
    return f"{result.model}: waterline C_max at {at}"


def gap_lines(points: "list[GapPoint]") -> list[str]:
    """The gap table; with runtime plans, C_impl split into the runtime's kernel boundaries
    (C_bound = T_min / T_runtime) and its kernels (C_kern = T_runtime / measured); with a
    calibration, the runtime plan's estimate beside the measured latency."""
    width = max([9] + [len(p.setting or p.backend) for p in points])
    split = any(p.t_runtime_ms for p in points)
    est = any(p.t_estimate_ms for p in points)
    lines = [f"{'model':22s} {'backend':{width}s} {'top-1':>6s} {'GMACs':>7s} {'ideal ms':>9s} "
             f"{'T_min ms':>9s} {'actual ms':>9s}" + (f" {'est. ms':>9s}" if est else "")
             + f" {'C':>7s} {'C_max':>7s} {'C_impl':>7s}"
             + (f" {'C_bound':>7s} {'C_kern':>7s}" if split else "")]
    for p in points:
        top1 = sig(p.accuracy) if p.accuracy is not None else "-"
        estimate = f" {sig(p.t_estimate_ms) if p.t_estimate_ms else '-':>9s}" if est else ""
        line = (f"{p.model:22s} {p.setting or p.backend:{width}s} {top1:>6s} "
                f"{sig(p.gmacs_per_image):>7s} {sig(p.t_ideal_ms):>9s} "
                f"{sig(p.t_min_ms):>9s} {sig(p.t_actual_ms):>9s}{estimate} {pct(p.c):>7s} "
                f"{pct(p.c_max):>7s} {pct(p.c_impl):>7s}")
        if split:
            line += (f" {pct(p.c_boundaries):>7s} {pct(p.c_kernels):>7s}" if p.t_runtime_ms
                     else f" {'-':>7s} {'-':>7s}")
        lines.append(line)
    return lines


def compare_lines(cmp: "Comparison") -> list[str]:
    r, m, g = cmp.result, cmp.measurement, cmp.gap
    lines = []
    if cmp.modules:
        lines.append(f"{'module':40s} {'t_min ms':>9s} {'meas. ms':>9s} {'ratio':>7s}  "
                     f"{'bound':7s} {'pred. MB':>9s} {'ncu MB':>9s}")
        for x in cmp.modules:
            ncu = f"{sig(x.measured_dram_bytes / 1e6):>9s}" if x.bytes_ratio is not None else ""
            lines.append(f"{x.module or '(root)':40s} {sig(x.predicted_ms):>9s} "
                         f"{sig(x.measured_ms):>9s} {sig(x.ratio, 3):>7s}  "
                         f"{'memory' if x.memory_bound else 'compute':7s} "
                         f"{sig(x.dram_bytes / 1e6):>9s} {ncu}")
    if cmp.median_bytes_ratio is not None:
        lines.append(f"DRAM bytes, Nsight Compute over predicted: median "
                     f"{sig(cmp.median_bytes_ratio)} over "
                     f"{sum(x.bytes_ratio is not None for x in cmp.modules)} modules")
    if not m.kernels:
        lines.append("no per-kernel rows in this file (`perfmodel bench --per-kernel` records "
                     "them): totals only")
    else:
        lines.append(f"kernels: {sig(m.kernel_sum_ms)} ms per pass beside the median latency "
                     f"{sig(m.latency_ms)} ms ({pct(m.kernel_sum_ms / m.latency_ms)})"
                     + (f"; unattributed {sig(cmp.unattributed_ms)} ms" if cmp.unattributed_ms
                        else ""))
    if cmp.unmatched:
        lines.append(f"unmatched measured kernels: {len(cmp.unmatched)}, "
                     f"{sig(cmp.unmatched_ms)} ms per pass")
    lines.append(f"{r.model} on {m.environment.get('gpu', '?')} ({m.backend}): ideal "
                 f"{sig(g.t_ideal_ms)} ms, T_min {sig(g.t_min_ms)} ms ({r.hardware.name}, "
                 f"plan {r.plan}), measured {sig(g.t_actual_ms)} ms")
    lines.append(f"C {pct(g.c)} = C_max {pct(g.c_max)} x C_impl {pct(g.c_impl)}")
    return lines


def hardware_table(configs: "list[Hardware]") -> list[str]:
    lines = [f"{'name':20s} {'fp16 TFLOP/s':>12s} {'DRAM GB/s':>10s} {'op:byte':>8s} "
             f"{'L2 MiB':>7s}  description"]
    for hw in configs:
        # configured values as written (:g), derived ones to significant digits
        lines.append(f"{hw.name:20s} {hw.peak_tflops.get('float16', float('nan')):12g} "
                     f"{hw.dram_gbps:10g} {sig(hw.op_byte('float16')):>8s} "
                     f"{hw.l2_mib or 0:7g}  {hw.description}")
    return lines


def hardware_lines(hw: "Hardware") -> list[str]:
    lines = [f"{hw.name} ({hw.vendor}): {hw.description}", f"  config: {hw.path}"]
    for dtype, tflops in hw.peak_tflops.items():
        lines.append(f"  peak {dtype:9s} {tflops:8g} TFLOP/s dense ({hw.accumulate} "
                     f"accumulate)  op:byte {sig(tflops * 1e12 / hw.dram_bytes_per_s):>7s}")
    for dtype, tflops in hw.vector_tflops.items():
        lines.append(f"  vector {dtype:7s} {tflops:8g} TFLOP/s")
    lines.append(f"  DRAM {hw.dram_gbps:g} GB/s, {hw.dram_gib or '?'} GiB; L2 {hw.l2_mib or '?'} "
                 f"MiB; {hw.sm_count or '?'} SMs at {hw.clock_mhz or '?'} MHz, "
                 f"{hw.smem_kib_per_sm or '?'} KiB shared memory each")
    lines.append(f"  source: {hw.source}")
    if hw.notes:
        lines.append(f"  notes: {hw.notes}")
    return lines


def kernel_case_lines(cases: "list[KernelCase | NetworkCase]") -> list[str]:
    """Bounds and measured medians per block shape or network ('-' where a backend was not
    measured)."""
    width = max([30] + [len(c.name) for c in cases])
    lines = [f"{'case':{width}s} {'block us':>9s} {'layer us':>9s} {'fused us':>9s} {'of bound':>8s} "
             f"{'compile us':>10s} {'eager us':>9s} {'x compile':>9s}"]
    for c in cases:
        fused, compiled, eager = (c.median_us.get(b) for b in ("cuda_kernels", "inductor", "eager"))
        cell = lambda v, fmt=sig: fmt(v) if v else "-"  # noqa: E731
        lines.append(f"{c.name:{width}s} {sig(c.block_t_min_us):>9s} {sig(c.layer_t_min_us):>9s} "
                     f"{cell(fused):>9s} {cell(fused and c.fraction_of_bound(), pct):>8s} "
                     f"{cell(compiled):>10s} {cell(eager):>9s} "
                     f"{cell(compiled and fused and compiled / fused, lambda x: sig(x, 3)):>9s}")
    return lines


def fidelity_lines(rows: "list[ByteFidelity]") -> list[str]:
    """One line per measurement: byte model against Nsight Compute, kernel by kernel."""
    band = f"+-{100 * rows[0].tolerance:g}%" if rows else ""
    lines = [f"{'model':16s} {'plan':8s} {'bytes':10s} {'cache':5s} {'units':>5s} {'paired':>6s} "
             f"{'within ' + band:>11s} {'>= 1 MB':>7s} {'within':>7s} {'total meas/pred':>15s} "
             f"{'kernels meas/pred':>17s}"]
    for f in rows:
        lines.append(f"{f.model:16s} {f.plan:8s} {f.byte_model:10s} {f.cache_control:5s} "
                     f"{len(f.units):5d} {f.paired_kernels:6d} {pct(f.share_within):>11s} "
                     f"{len(f.large):7d} {pct(f.share_large_within):>7s} {f.total_ratio:15.3f} "
                     f"{f'{f.measured_kernels}/{f.predicted_kernels}':>17s}")
    return lines
