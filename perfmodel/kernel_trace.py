"""Every GPU kernel of a profiled run, attributed to the module that launched it.

The profiler (torch.profiler / Kineto) records three kinds of events that matter here:
CPU ranges named ``module:PATH`` (opened and closed around every module's forward by
`module_ranges`), the CUDA runtime or driver call that launched each kernel, and the
kernel itself on the GPU. A kernel and its launch share a correlation id; the launch runs
on the CPU inside the ranges of the modules that were executing, so the kernel belongs to
the innermost of them. This works for every launch that goes through the CUDA runtime or
driver - aten ops, cuDNN and cuBLAS calls, Triton kernels and an extension's own kernels
alike (the profiler's operator tree only knows kernels under aten ops, and loses the rest).

Kernels whose launch is not in the trace or not inside any module range are kept, under
the module `UNATTRIBUTED`; nothing is dropped. `attribute_kernels` works on the exported
Chrome-trace events, so it is tested on recorded traces without a GPU.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path

from .outputs import prepare_output

MODULE_TAG = "module:"
UNATTRIBUTED = "<unattributed>"  # module paths never contain '<'
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


@contextlib.contextmanager
def module_ranges(model):
    """A profiler range named ``module:PATH`` around every module's forward (the root's
    path is the empty string)."""
    import torch

    stack = []
    names = {id(m): n for n, m in model.named_modules()}

    def enter(module, _args):
        rf = torch.profiler.record_function(MODULE_TAG + names.get(id(module), "?"))
        rf.__enter__()
        stack.append(rf)

    def leave(_module, _args, _out):
        stack.pop().__exit__(None, None, None)

    handles = [m.register_forward_pre_hook(enter) for m in model.modules()]
    handles += [m.register_forward_hook(leave) for m in model.modules()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _innermost_module_at_launch(events: list[dict]) -> dict[int, str]:
    """correlation id -> innermost module range open on the launching thread at launch."""
    timeline: dict[object, list[tuple]] = defaultdict(list)
    for e in events:
        cat, name = e.get("cat"), e.get("name", "")
        if cat == "user_annotation" and name.startswith(MODULE_TAG):
            start, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
            path = name[len(MODULE_TAG):]
            # at equal times: open ranges, then launches, then close ranges
            timeline[e.get("tid")] += [(start, 0, path), (end, 2, path)]
        elif cat in LAUNCH_CATEGORIES and "correlation" in e.get("args", {}):
            timeline[e.get("tid")].append((float(e["ts"]), 1, e["args"]["correlation"]))
    owner: dict[int, str] = {}
    for items in timeline.values():
        stack: list[str] = []
        for _, kind, value in sorted(items, key=lambda t: (t[0], t[1])):
            if kind == 0:
                stack.append(value)
            elif kind == 2:
                if value in stack:  # ranges nest; remove the innermost with this path
                    del stack[len(stack) - 1 - stack[::-1].index(value)]
            elif stack:
                owner[value] = stack[-1]
    return owner


def attribute_kernels(events: list[dict], iterations: int = 1) -> list[dict]:
    """One row per (module, kernel name): ``name``, ``module``, ``duration_ms`` and ``count``
    per pass (the trace holds `iterations` passes). Kernels without a module range around
    their launch get the module `UNATTRIBUTED`."""
    owner = _innermost_module_at_launch(events)
    rows: dict[tuple[str, str], dict] = {}
    for e in events:
        if e.get("cat") not in GPU_CATEGORIES or e.get("ph", "X") != "X":
            continue
        module = owner.get(e.get("args", {}).get("correlation"), UNATTRIBUTED)
        name = e.get("name", "?")
        row = rows.setdefault((module, name), {"name": name, "module": module,
                                               "duration_ms": 0.0, "count": 0})
        row["duration_ms"] += float(e.get("dur", 0)) / 1e3 / iterations  # us -> ms per pass
        row["count"] += 1
    for row in rows.values():
        row["count"] = max(1, round(row["count"] / iterations))
    return sorted(rows.values(), key=lambda r: -r["duration_ms"])


def kernel_summary(rows: list[dict], latency_ms: float) -> dict:
    """Totals a measurement file keeps next to the rows: the sum of kernel times per pass
    beside the median latency, and how much of it has no module."""
    total = sum(r["duration_ms"] for r in rows)
    loose = sum(r["duration_ms"] for r in rows if r["module"] == UNATTRIBUTED)
    return {"kernel_sum_ms": total, "unattributed_ms": loose,
            "kernel_sum_over_latency": total / latency_ms if latency_ms else None,
            "kernels_per_pass": sum(r["count"] for r in rows)}


def read_trace(path: str | Path) -> list[dict]:
    """The events of a Chrome trace that torch.profiler exported (``.json`` or ``.json.gz``)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def trace_events(fn, iterations: int = 1, cpu: bool = True) -> list[dict]:
    """Run `fn` `iterations` times under torch.profiler (CPU and CUDA activity, or CUDA only) and return the
    events of its exported Chrome trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cpu else [ProfilerActivity.CUDA]
    with profile(activities=activities) as prof:
        for _ in range(iterations):
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(trace)
        return read_trace(trace)


def profile_kernels(model, fn, iterations: int = 3, keep_trace: str | Path | None = None):
    """Run `fn` `iterations` times under torch.profiler with module ranges around `model`'s
    forwards (None: no ranges, e.g. a compiled model) and return `attribute_kernels` rows.
    `keep_trace` saves the filtered trace (the events `attribute_kernels` reads), gzipped."""
    ranges = module_ranges(model) if model is not None else contextlib.nullcontext()
    with ranges:
        events = trace_events(fn, iterations)
    if keep_trace:
        keep = [e for e in events if e.get("cat") in GPU_CATEGORIES + LAUNCH_CATEGORIES
                or (e.get("cat") == "user_annotation" and e.get("name", "").startswith(MODULE_TAG))]
        with gzip.open(prepare_output(keep_trace, "--trace"), "wt") as f:
            json.dump({"traceEvents": keep, "iterations": iterations}, f)
    return attribute_kernels(events, iterations)
