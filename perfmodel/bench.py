"""Measure a model on a CUDA GPU and write a measurement file (DESIGN.md section 9).

Random weights (no download), channels-last, the spec's batch and dtype; warm-up, then
CUDA-event timing of whole forward passes (median, p20, p80). With ``per_kernel``, every
GPU kernel's duration is recorded with torch.profiler and attributed to the innermost
module whose forward launched it (eager); kernels launched outside any module, or whose
module cannot be known (Inductor's fused kernels), keep their kernel name and an empty
module, so nothing is dropped.
"""
from __future__ import annotations

import contextlib
import copy
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from .dtypes import torch_dtype
from .errors import AnalysisError, InputError
from .measure import BACKENDS, write_measurement
from .resources import builtin_dir
from .spec import ModelSpec, resolve_callable

_MODULE_TAG = "module:"


def require_cuda() -> None:
    if not torch.cuda.is_available():
        raise InputError("perfmodel bench needs an NVIDIA GPU with CUDA "
                         "(torch.cuda.is_available() is False on this machine)")


def environment() -> dict:
    props = torch.cuda.get_device_properties(0)
    env = {"gpu": props.name, "sm_count": props.multi_processor_count,
           "memory_gib": round(props.total_memory / 2**30, 1),
           "capability": f"{props.major}.{props.minor}", "torch": torch.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(),
           "host": platform.node()}
    with contextlib.suppress(Exception):
        query = "driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit"
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        fields = [f.strip() for f in out.splitlines()[0].split(",")]
        env.update(dict(zip(("driver", "clock_sm", "clock_mem", "clock_sm_max", "power_limit"),
                            fields)))
    return env


def build_cuda_model(spec: ModelSpec) -> torch.nn.Module:
    base = Path(spec.path).parent if spec.path else None
    fn = resolve_callable(spec.model, base=base, file=spec.path)
    kwargs = dict(spec.kwargs)
    if spec.model.startswith("torchvision.models"):
        kwargs.setdefault("weights", None)
    with torch.device("cuda"):
        model = fn(**kwargs)
    return model.eval().to(dtype=torch_dtype(spec.dtype), memory_format=torch.channels_last)


def example_input(meta) -> torch.Tensor:
    """A random CUDA input: channels-last images, small token ids for integer inputs."""
    if meta.dtype.is_floating_point:
        x = torch.randn(meta.shape, device="cuda", dtype=meta.dtype)
        return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
    return torch.randint(0, 2 if meta.dtype == torch.bool else 100, meta.shape,
                         device="cuda").to(meta.dtype)


def time_forward(fn, warmup: int, repeats: int) -> list[float]:
    """Milliseconds of each of `repeats` calls, timed with CUDA events after `warmup` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@contextlib.contextmanager
def _module_ranges(model: torch.nn.Module):
    """Label every module's forward with a profiler range named after its path."""
    stack = []

    def pre(module, _):
        rf = torch.profiler.record_function(_MODULE_TAG + names.get(id(module), "?"))
        rf.__enter__()
        stack.append(rf)

    def post(module, _, __):
        stack.pop().__exit__(None, None, None)

    names = {id(m): n for n, m in model.named_modules()}
    handles = [m.register_forward_pre_hook(pre) for m in model.modules()]
    handles += [m.register_forward_hook(post) for m in model.modules()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def per_kernel(model, fn, iterations: int = 3) -> list[dict]:
    """GPU kernels of `iterations` forward passes, each attributed to its innermost module
    (when `model` is given: eager; a compiled model launches fused kernels instead)."""
    from torch.profiler import ProfilerActivity, profile

    ranges = _module_ranges(model) if model is not None else contextlib.nullcontext()
    with ranges, profile(activities=[ProfilerActivity.CPU,
                                                    ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            fn()
        torch.cuda.synchronize()
    rows: dict[tuple[str, str], dict] = {}
    for event in prof.events():
        for kernel in getattr(event, "kernels", []):
            module = _innermost_module(event)
            key = (module, kernel.name)
            row = rows.setdefault(key, {"name": kernel.name, "module": module,
                                        "duration_ms": 0.0, "count": 0})
            row["duration_ms"] += kernel.duration / 1e3 / iterations  # us -> ms per pass
            row["count"] += 1
    for row in rows.values():
        row["count"] = max(1, round(row["count"] / iterations))
    return list(rows.values())


def _innermost_module(event) -> str:
    parent = event
    while parent is not None:
        if parent.name.startswith(_MODULE_TAG):
            return parent.name[len(_MODULE_TAG):]
        parent = parent.cpu_parent
    return ""


def _spec_reference(spec: ModelSpec) -> str:
    """A built-in spec by name (portable across machines), any other by its path."""
    path = Path(spec.path) if spec.path else None
    if path is not None and path.resolve().parent == builtin_dir("models").resolve():
        return path.stem
    return str(path) if path else spec.name


FUSED_TOLERANCE = 1e-2  # per block; a guard against wrong results (tests/ check accuracy)


def fused_model(model: torch.nn.Module, inputs: list[torch.Tensor]) -> tuple[torch.nn.Module, dict]:
    """`model` with batchnorm folded and every zoo block the block-fusion kernels support
    (ConvFirst, FFN) running on them; the rest stays in PyTorch.

    One forward pass checks every fused block against the folded PyTorch block on the same
    input (a whole-network check is too weak: the classifier's pooling averages block-level
    differences away). Returns the model and what was replaced, with the largest relative
    difference of a block."""
    try:
        import cuda_kernels
    except ImportError as exc:
        raise InputError("the cuda_kernels backend needs the repository's cuda_kernels/ package "
                         "(run from a source checkout; `pip install .` installs perfmodel only)") from exc
    from .zoo import fold_batchnorm

    folded = fold_batchnorm(model)
    fused = copy.deepcopy(folded)
    counts = cuda_kernels.replace_blocks(fused)
    if not any(counts.values()):
        raise InputError("the model has no ConvFirst or FFN block (perfmodel.zoo) that the "
                         "block-fusion kernels support, so cuda_kernels would time plain eager")
    reference = dict(folded.named_modules())
    differences: dict[str, float] = {}

    def check(name: str):
        def hook(module, args, out):
            expected = reference[name](*args).float()
            differences[name] = ((out.float() - expected).norm() / expected.norm()).item()
        return hook

    fused_types = (cuda_kernels.FusedConvFirstBlock, cuda_kernels.FusedFFN)
    handles = [m.register_forward_hook(check(name)) for name, m in fused.named_modules()
               if isinstance(m, fused_types)]
    try:
        with torch.inference_mode():
            fused(*inputs)
    finally:
        for h in handles:
            h.remove()
    bad = {name: d for name, d in differences.items() if not d <= FUSED_TOLERANCE}  # NaN too
    if bad:
        name, d = next(iter(bad.items()))
        raise AnalysisError(f"fused block {name} differs from PyTorch by {d:.3g} (relative; more "
                            f"than {FUSED_TOLERANCE}), and {len(bad) - 1} more: a kernel is wrong")
    return fused, {"replaced_blocks": counts, "blocks_checked": len(differences),
                   "max_block_relative_difference": max(differences.values())}


def bench(spec: ModelSpec, *, backend: str = "eager", warmup: int = 10, repeats: int = 50,
          cuda_graphs: bool = False, kernels: bool = False, ncu: bool = False,
          output: str | Path, command: str | None = None) -> Path:
    """Measure `spec` and write the measurement file; returns its path.

    backend: "eager", "inductor" (torch.compile) or "cuda_kernels" (fused_model)."""
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if ncu and backend != "eager":  # the ncu worker runs the model in eager
        raise InputError(f"--ncu profiles the eager model only, not --backend {backend}")
    require_cuda()
    torch.backends.cudnn.benchmark = True
    model = build_cuda_model(spec)
    inputs = [example_input(meta) for meta in spec.input_metas]
    fusion = None
    if backend == "cuda_kernels":
        model, fusion = fused_model(model, inputs)
    runner = torch.compile(model) if backend == "inductor" else model

    def forward():
        with torch.inference_mode():
            return runner(*inputs)

    fn = forward
    if cuda_graphs:
        for _ in range(3):
            forward()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward()
        fn = graph.replay
    times = time_forward(fn, warmup, repeats)
    results = {"latency_ms": {"median": statistics.median(times), "p20": percentile(times, 0.2),
                              "p80": percentile(times, 0.8), "min": min(times)}}
    if kernels:
        results["kernels"] = per_kernel(model if backend != "inductor" else None, forward)
    if ncu:  # the raw CSV is kept beside the file, so the rows can always be re-derived
        from .ncu import collect_csv, parse_csv

        text = collect_csv(_spec_reference(spec), spec.batch, spec.dtype)
        Path(output).with_suffix(".ncu.csv").write_text(text)
        try:
            results["ncu"] = parse_csv(text)
        except (KeyError, IndexError, ValueError) as exc:
            results["ncu_error"] = f"{type(exc).__name__}: {exc}"
    return write_measurement(
        output, command=command or " ".join(["perfmodel"] + sys.argv[1:]),
        environment=environment(),
        workload={"spec": _spec_reference(spec), "model": spec.name,
                  "batch": spec.batch, "dtype": spec.dtype,
                  "input": [list(s) for s in spec.inputs], "memory_format": "channels_last",
                  "backend": backend, **({"fusion": fusion} if fusion else {})},
        method={"warmup": warmup, "repeats": repeats, "statistic": "median",
                "timer": "cuda_events", "cuda_graphs": cuda_graphs,
                "cudnn_benchmark": True, "inference_mode": True,
                "per_kernel": "torch.profiler, 3 passes averaged" if kernels else None,
                "ncu": "ncu --clock-control none --cache-control none, one pass, kernels "
                       "renamed by module NVTX ranges" if ncu else None},
        results=results)
