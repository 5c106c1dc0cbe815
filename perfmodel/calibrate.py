"""GPU microbenchmarks for the calibrated latency estimate (perfmodel.estimate).

``python -m perfmodel.calibrate -o configs/hardware/calibration/h200-sxm.yaml`` times, on
this machine's GPU, the library and compiler kernels the models' plans are made of, over a
grid of shapes, and writes a calibration file (perfmodel.calibration):

- dense, grouped and depthwise convolutions (cuDNN, channels-last, cudnn.benchmark on, as
  `perfmodel bench` runs), and matrix products with a bias (cuBLAS, as nn.Linear runs);
- eager element-wise kernels against size, per op (add, relu, silu, gelu ...), broadcast
  element-wise kernels (a per-channel scale or bias), inference batchnorm, layer norm, the
  mean over height and width, max pooling;
- Inductor's Triton kernels for a fused affine + activation (+ residual) epilogue and a layer
  norm (torch.compile, dynamic shapes: one compilation serves every size);
- launch overheads: a tiny kernel replayed in a CUDA graph, the same on a busy stream, and the
  host's time per eager op.

Every kernel is timed by the one harness Timer as CUDA-graph replays of calls back to back,
with enough input sets in rotation that a call does not find its inputs in L2. The grid
covers the sizes that convolutions and products at batch 128 produce (7 to 112 pixels a side,
16 to 2048 channels): microbenchmarks of kernel kinds, never the models the estimate predicts.
The file is written after every section, so an interrupted run keeps what it measured.
What is timed, at which shapes, is perfmodel.calibration_cases; this module times it.
"""
from __future__ import annotations

import argparse
import math
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml

from .calibration import SCHEMA, dump_calibration
from .errors import InputError
from .outputs import prepare_output
from .calibration_cases import (BUDGET_S, CUDA_ONLY, FEATURES, KERNELS_PER_CALL, SECTIONS, Case,
                                Ctx, Grid)

TARGET_MS = 0.3  # a timed graph replay lasts about this long
MAX_CALLS = 64  # calls per graph
ROTATE_BYTES = 256 << 20  # input sets in rotation move at least this much (about 5x L2)
MAX_SETS = 16


def _conv_bn_relu(x, w, p):
    return torch.relu(F.batch_norm(F.conv2d(x, w, None, 1, 1), p[0], p[1], p[2], p[3], False))


def _conv_bn_relu_chain(x, w, p):
    for _ in range(CHAIN):
        x = _conv_bn_relu(x, w, p)
    return x


CHAIN = 16


def _host_us(fn, calls: int = 10, repeats: int = 7) -> float:
    """Host time of one call (microseconds): the calls only queue tiny kernels, so the host
    clock reads the cost of issuing them, not the GPU's work."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def compiled_issue_us(ctx: Ctx) -> float:
    """Host time per kernel of Inductor's generated code (no CUDA graphs), for kernels as a
    convolutional network has them: a chain of CHAIN links of a library 3x3 convolution and a
    Triton epilogue (an unfolded batchnorm and a ReLU, six arguments), less the same with one
    link, over the 2 x (CHAIN - 1) kernels between them. Tiny tensors: the host's time."""
    x = ctx.rand(1, 8, 8, 8, channels_last=True)
    w = ctx.rand(8, 8, 3, 3, channels_last=True) * 0.1
    p = (ctx.rand(8), torch.rand(8, device=ctx.device, dtype=ctx.dtype) + 0.5, ctx.rand(8),
         ctx.rand(8))
    chain, once = torch.compile(_conv_bn_relu_chain), torch.compile(_conv_bn_relu)
    return (_host_us(lambda: chain(x, w, p)) - _host_us(lambda: once(x, w, p))) / (2 * (CHAIN - 1))


# ---------------------------------------------------------------- timing
class WallTimer:
    """Host-clock stand-in for harness.Timer where there is no GPU (the plumbing tests): the
    same call and result, median in milliseconds."""

    def __init__(self, warmup: int = 1, repeats: int = 3):
        self.warmup, self.repeats = warmup, repeats

    def __call__(self, fn) -> dict:
        for _ in range(self.warmup):
            fn()
        times = []
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return {"median": statistics.median(times)}


def _timer(ctx: Ctx, warmup: int, repeats: int):
    if ctx.device.type == "cuda":
        from .harness import Timer

        return Timer(warmup, repeats)
    return WallTimer(warmup, repeats)


def per_call_us(ctx: Ctx, case: Case, repeats: int = 5) -> float:
    """Time of one call in microseconds: CUDA-graph replays of k calls over rotating inputs."""
    sets = max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / max(case.dram_bytes, 1))))
    calls = [case.make() for _ in range(sets)]
    for call in calls[:2]:
        call()  # cudnn.benchmark chooses its algorithm here; Triton compiles
    rough_ms = _timer(ctx, 1, 3)(calls[0])["median"]
    k = max(sets, min(MAX_CALLS, math.ceil(TARGET_MS / max(rough_ms, 1e-4))))
    seq = [calls[i % sets] for i in range(k)]
    timer = _timer(ctx, 2, repeats)
    if ctx.device.type != "cuda":
        return timer(lambda: [c() for c in seq])["median"] * 1e3 / k
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [c() for c in seq]  # kept alive: every call writes its own output
    median = timer(graph.replay)["median"]
    del outs, graph
    return median * 1e3 / k


def launch_overheads(ctx: Ctx, n: int = 200) -> dict:
    """Per-kernel costs of tiny kernels: replayed in a CUDA graph, on a stream the host has
    filled ahead of the GPU (behind a sleep kernel), and the host's issue time per eager op."""
    x = torch.zeros(8, device=ctx.device, dtype=ctx.dtype)
    tiny = Case("launch", (), 0, 0, lambda: (lambda: x.add(1)))
    graph_us = per_call_us(ctx, tiny)
    issue_us = _timer(ctx, 3, 7)(lambda: [x.add(1) for _ in range(n)])["median"] * 1e3 / n
    img, w = ctx.rand(1, 8, 8, 8, channels_last=True), ctx.rand(8, 8, 3, 3, channels_last=True)
    library_us = _timer(ctx, 3, 7)(lambda: [F.conv2d(img, w, None, 1, 1)
                                            for _ in range(n)])["median"] * 1e3 / n
    stream_us = graph_us
    if ctx.device.type == "cuda" and hasattr(torch.cuda, "_sleep"):
        cycles = 40_000_000  # about 20 ms at 2 GHz: long enough for the host to queue n ops
        timer = _timer(ctx, 2, 7)
        busy = timer(lambda: [torch.cuda._sleep(cycles)] + [x.add(1) for _ in range(n)])
        alone = timer(lambda: torch.cuda._sleep(cycles))
        stream_us = max(graph_us, (busy["median"] - alone["median"]) * 1e3 / n)
    return {"graph_kernel_us": round(graph_us, 3), "stream_kernel_us": round(stream_us, 3),
            "eager_issue_us": round(issue_us, 3), "eager_library_issue_us": round(library_us, 3)}


# ---------------------------------------------------------------- the run
def _environment(ctx: Ctx) -> dict:
    if ctx.device.type == "cuda":
        from .harness import environment

        return environment()
    import platform

    return {"gpu": None, "device": "cpu", "torch": torch.__version__,
            "python": platform.python_version()}


def run(output: str | Path, *, grid: Grid | None = None, sections: list[str] | None = None,
        device: str | None = None, dtype: torch.dtype = torch.float16, hardware: str = "",
        command: str = "", budget_scale: float = 1.0, base: dict | None = None,
        log=print) -> dict:
    """Time every section and write the calibration file after each; returns the document.

    With `base` (an earlier calibration document), its tables that these sections do not
    measure are kept, and the commands are listed in order, separated by '; '."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    ctx = Ctx(grid or Grid.full(), dev, dtype)
    names = sections or [s for s in SECTIONS if dev.type == "cuda" or s not in CUDA_ONLY]
    unknown = [s for s in names if s not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown section {unknown[0]!r} (choose from {', '.join(SECTIONS)})")
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
    start = time.perf_counter()
    doc = {"schema": SCHEMA, "hardware": hardware, "command": command,
           "environment": _environment(ctx),
           "method": {"timer": "perfmodel.harness.Timer (CUDA events)" if dev.type == "cuda"
                      else "host clock (no GPU)", "graphs": dev.type == "cuda",
                      "per_call": "median of 5 replays of a graph of calls back to back / calls",
                      "rotation_bytes": ROTATE_BYTES, "cudnn_benchmark": dev.type == "cuda",
                      "memory_format": "channels_last", "batch": ctx.grid.batch,
                      "seconds": None},
           "dtype": str(dtype).removeprefix("torch."), "launch": {}, "tables": {}}
    with torch.inference_mode():
        doc["launch"] = launch_overheads(ctx)
        if dev.type == "cuda" and "compiled" in names:
            doc["launch"]["compiled_issue_us"] = round(compiled_issue_us(ctx), 3)
        log(f"launch {doc['launch']}")
        for name in names:
            t0 = time.perf_counter()
            count = failed = 0
            cases = [c for c in SECTIONS[name](ctx) if c is not None]
            random.Random(0).shuffle(cases)
            for i, case in enumerate(cases):
                if time.perf_counter() - t0 > BUDGET_S[name] * budget_scale:
                    log(f"{name}: time budget spent, {len(cases) - i} of {len(cases)} left out")
                    break
                try:
                    us = per_call_us(ctx, case)
                except Exception as exc:  # one shape a library rejects must not end the run
                    failed += 1
                    log(f"{case.table} {case.features}: {type(exc).__name__}: {exc}"[:300])
                    continue
                kind = case.table.split("/")[0]
                table = doc["tables"].setdefault(case.table, {
                    "features": list(FEATURES[kind]),
                    "kernels_per_call": KERNELS_PER_CALL.get(kind, 1), "rows": []})
                table["rows"].append([*case.features, case.flops, case.dram_bytes, round(us, 3)])
                count += 1
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            doc["method"]["seconds"] = round(time.perf_counter() - start, 1)
            dump_calibration(_merged(base, doc), output)
            log(f"{name}: {count} kernels ({failed} failed) in {time.perf_counter() - t0:.1f} s "
                f"(total {time.perf_counter() - start:.1f} s)")
    return doc


def _merged(base: dict | None, doc: dict) -> dict:
    """`doc` over `base`: base's tables that doc does not have, doc's launch keys over base's,
    both commands and both runs' environment and method."""
    if not base:
        return doc
    out = dict(doc)
    out["command"] = f"{base.get('command', '')}; {doc['command']}"
    out["launch"] = {**base.get("launch", {}), **doc["launch"]}
    out["tables"] = {**{k: v for k, v in base.get("tables", {}).items()
                        if k not in doc["tables"]}, **doc["tables"]}
    out["method"] = {**doc["method"], "earlier_runs": [
        {"command": base.get("command"), "environment": base.get("environment"),
         "method": {k: v for k, v in base.get("method", {}).items() if k != "earlier_runs"}}]
        + base.get("method", {}).get("earlier_runs", [])}
    return out


def calibrate(output: str | Path, *, hardware: str = "", sections: str | None = None,
              quick: bool = False, device: str | None = None, update: bool = False,
              command: str = "", log=print) -> dict:
    """The command line's entry (python -m perfmodel.calibrate, perfmodel calibrate): float16
    on a GPU, float32 on the CPU (--quick checks the plumbing there)."""
    names = [n.strip() for n in sections.split(",")] if sections else None
    unknown = [n for n in names or [] if n not in SECTIONS]
    if unknown:
        raise InputError(f"unknown section {unknown[0]!r} (choose from {', '.join(SECTIONS)})",
                         field="--sections")
    if update and not Path(output).is_file():
        raise InputError("--update needs an existing calibration file", file=str(output))
    base = yaml.safe_load(Path(output).read_text()) if update else None
    prepare_output(output)  # before the minutes of timing
    on_gpu = (device or "cuda") == "cuda" and torch.cuda.is_available()
    return run(output, grid=Grid.quick() if quick else Grid.full(), sections=names,
               device=device, dtype=torch.float16 if on_gpu else torch.float32,
               hardware=hardware, command=command, base=base, log=log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfmodel.calibrate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", required=True, help="calibration file to write (.yaml)")
    parser.add_argument("--hardware", default="", help="the hardware config it calibrates")
    parser.add_argument("--sections", help=f"comma-separated subset of: {', '.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="a tiny grid (checks the plumbing)")
    parser.add_argument("--device", help="cuda (default where available) or cpu")
    parser.add_argument("--update", action="store_true", help="keep the tables of an existing "
                        "OUTPUT that --sections does not measure (the command is appended)")
    args = parser.parse_args(argv)
    command = "python -m perfmodel.calibrate " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    try:
        calibrate(args.output, hardware=args.hardware, sections=args.sections, quick=args.quick,
                  device=args.device, update=args.update, command=command)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
