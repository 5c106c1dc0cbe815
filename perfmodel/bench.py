"""Measure a model on a CUDA GPU and write a measurement file (perfmodel.measure).

Random weights (no download) with realistic batchnorm statistics, channels-last, the
spec's batch and dtype; warm-up, then CUDA-event timing of whole forward passes (median,
p20, p80) through the one harness (`perfmodel.harness`). With ``kernels``, every GPU kernel
of three profiled passes is recorded and attributed to the module that launched it
(`perfmodel.kernel_trace`); kernels outside any module stay, as an unattributed row.
"""
from __future__ import annotations

import copy
import os
import sys
import warnings
from pathlib import Path

import torch

from .errors import AnalysisError, InputError
from .harness import (COMPILE_MODES, Timer, build_cuda_model, compiled_runner, environment,
                      example_input, reference_precision, relative_error, require_cuda)
from .kernel_trace import kernel_summary, profile_kernels
from .measure import BACKENDS, write_measurement
from .ncu import note as ncu_note
from .outputs import prepare_output, write_text
from .resources import builtin_dir
from .spec import ModelSpec

ERROR_RATIO_LIMIT = 2.0  # a fused block may err up to 2x PyTorch's own low-precision error


def _spec_reference(spec: ModelSpec) -> str:
    """A built-in spec by name (portable across machines), any other by its path."""
    path = Path(spec.path) if spec.path else None
    if path is not None and path.resolve().parent == builtin_dir("models").resolve():
        return path.stem
    return str(path) if path else spec.name


def check_blocks(model: torch.nn.Module, reference: torch.nn.Module, inputs: list[torch.Tensor],
                 is_fused) -> dict:
    """Run `model` once and check every submodule for which `is_fused(module)` holds
    against the submodule of the same path in `reference`, on the input it received.

    Each block's output and PyTorch's (the reference block in the model's dtype) are
    compared with the reference block run in float64; a block passes when its relative
    error is at most ERROR_RATIO_LIMIT times PyTorch's own. Raises AnalysisError naming
    every block that fails; returns what was checked, for the measurement file."""
    blocks = dict(reference.named_modules())
    rows: dict[str, dict] = {}

    def check(name: str, module: torch.nn.Module):
        # a fused unit that replaces several blocks names them (reference_paths): they run in sequence
        paths = getattr(module, "reference_paths", (name,))
        ref_block = blocks[name] if len(paths) == 1 else torch.nn.Sequential(*(blocks[p] for p in paths))

        def hook(_module, args, out):
            with reference_precision():
                exact = copy.deepcopy(ref_block).double()(*(a.double() for a in args))
            torch_error = relative_error(ref_block(*args), exact)
            error = relative_error(out, exact)
            # PyTorch exactly on the float64 result would make the tolerance zero: a blind check
            ratio = error / torch_error if torch_error else float("inf")
            rows[name] = {"relative_error": error, "torch_relative_error": torch_error,
                          "error_ratio": ratio, "passed": ratio <= ERROR_RATIO_LIMIT}
        return hook

    handles = [m.register_forward_hook(check(name, m)) for name, m in model.named_modules()
               if is_fused(m)]
    try:
        with torch.inference_mode():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    failed = [name for name, row in rows.items() if not row["passed"]]
    if failed:
        row = rows[failed[0]]
        raise AnalysisError(
            f"fused block {failed[0]} has relative error {row['relative_error']:.3g} against a "
            f"float64 reference, more than {ERROR_RATIO_LIMIT:g}x PyTorch's own "
            f"{row['torch_relative_error']:.3g}, and {len(failed) - 1} more block(s) fail: "
            "a kernel is wrong (or PyTorch matched float64 exactly, and the check is blind)")
    worst = max(rows, key=lambda n: rows[n]["error_ratio"], default=None)
    return {"reference": "the PyTorch block in float64 on the same input",
            "tolerance": f"relative error <= {ERROR_RATIO_LIMIT:g}x PyTorch's own in the model dtype",
            "blocks_checked": len(rows),
            "max_relative_error": max((r["relative_error"] for r in rows.values()), default=None),
            "worst_block": worst,
            "worst_error_ratio": rows[worst]["error_ratio"] if worst else None,
            "blocks": rows}


def fused_model(model: torch.nn.Module, inputs: list[torch.Tensor]) -> tuple[torch.nn.Module, dict]:
    """`model` with batchnorm folded and every block the block-fusion kernels support
    (zoo ConvFirst, FFN; torchvision MBConv) running on them; the rest stays in PyTorch.

    Every fused block is checked against its folded PyTorch block on the input it gets in
    one forward pass (`check_blocks`; a whole-network check is too weak: the classifier's
    pooling averages block-level differences away). Blocks of a supported family whose
    shape the kernels do not support fall back to PyTorch with a warning. Returns the model
    and the record of what was fused, what fell back and what was checked."""
    try:
        import cuda_kernels
    except ImportError as exc:
        raise InputError("the cuda_kernels backend needs the repository's cuda_kernels/ package "
                         "(run from a source checkout; `pip install .` installs perfmodel only)") from exc
    from .zoo import fold_batchnorm

    folded = fold_batchnorm(model)
    fused = copy.deepcopy(folded)
    swap = cuda_kernels.replace_blocks(fused)
    if not any(swap.fused.values()):
        why = "; ".join(f"{p}: {r}" for p, r in list(swap.fallback.items())[:3])
        raise InputError("the model has no ConvFirst or FFN block (perfmodel.zoo) nor torchvision "
                         "MBConv that the "
                         "block-fusion kernels support, so cuda_kernels would time plain eager"
                         + (f" ({len(swap.fallback)} unsupported, e.g. {why})" if why else ""))
    if swap.fallback:
        warnings.warn(f"{len(swap.fallback)} block(s) run in PyTorch, their shape has no fused "
                      f"kernel: {', '.join(f'{p} ({why})' for p, why in swap.fallback.items())}",
                      stacklevel=2)
    check = check_blocks(fused, folded, inputs,
                         lambda m: isinstance(m, cuda_kernels.FUSED_MODULES))
    # the kernel switches in effect (variants, widths, PDL): two runs differing only there stay distinguishable
    switches = {k: v for k, v in sorted(os.environ.items()) if k.startswith("CUDA_KERNELS_")}
    info = {"fused_blocks": swap.fused, "fallback_blocks": dict(swap.fallback),
            "fallback_count": len(swap.fallback), "switches": switches, "check": check}
    from cuda_kernels import mbconv

    ran = sorted({mbconv.runnable_version(m.version, inputs[0].device) for m in fused.modules()
                  if isinstance(m, mbconv.FusedMBConv)})
    if ran:  # the MBConv implementation that ran on this GPU (its default, or the fallback on an older GPU)
        info["mbconv_versions"] = ran
    return fused, info


def bench(spec: ModelSpec, *, backend: str = "eager", warmup: int = 10, repeats: int = 50,
          cuda_graphs: bool = False, kernels: bool = False, ncu: bool = False,
          ncu_cache_control: str = "none",
          compile_mode: str = "default", freezing: bool = False, compile_rest: bool = False,
          trace: str | Path | None = None, output: str | Path,
          command: str | None = None) -> Path:
    """Measure `spec` and write the measurement file; returns its path.

    backend: "eager", "inductor" (torch.compile with `compile_mode`, optionally `freezing`)
    or "cuda_kernels" (fused_model; with `compile_rest`, the fused model is compiled too:
    Inductor compiles what is not a fused block and calls each fused block as one opaque
    operator). `kernels` adds the per-kernel rows; `trace` keeps the profiler events they
    were derived from (gzipped JSON)."""
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if compile_mode not in COMPILE_MODES:
        raise InputError(f"unknown compile mode {compile_mode!r} (choose from "
                         f"{', '.join(COMPILE_MODES)})", field="--compile-mode")
    if compile_rest and backend != "cuda_kernels":
        raise InputError(f"--compile-rest applies to --backend cuda_kernels, not {backend}")
    compiled = backend == "inductor" or compile_rest
    if not compiled and (compile_mode != "default" or freezing):
        raise InputError("--compile-mode and --freezing apply to --backend inductor and to "
                         "cuda_kernels with --compile-rest")
    if ncu and backend not in ("eager", "inductor"):  # the ncu worker's two ways to run it
        raise InputError(f"--ncu profiles the eager or the inductor model, not --backend {backend}")
    if ncu and compile_mode != "default":
        raise InputError("--ncu compiles in the default mode only", field="--compile-mode")
    if trace and not kernels:
        raise InputError("--trace keeps the per-kernel profile: add --per-kernel")
    output = prepare_output(output)  # both before the measuring
    if trace:
        prepare_output(trace, "--trace")
    require_cuda()
    torch.backends.cudnn.benchmark = True
    model = build_cuda_model(spec)
    inputs = [example_input(meta) for meta in spec.input_metas]
    fusion = None
    if backend == "cuda_kernels":
        model, fusion = fused_model(model, inputs)
    runner = compiled_runner(model, compile_mode, freezing) if compiled else model

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
    timer = Timer(warmup, repeats)
    results = {"latency_ms": timer(fn)}
    if kernels:  # eager modules launch their own kernels; a compiled graph's are its own
        rows = profile_kernels(None if compiled else model, forward, keep_trace=trace)
        results["kernels"] = rows
        results["kernel_totals"] = kernel_summary(rows, results["latency_ms"]["median"])
    if ncu:  # the raw CSV is kept beside the file, so the rows can always be re-derived
        from .ncu import collect_csv, parse_csv

        text = collect_csv(_spec_reference(spec), spec.batch, spec.dtype, ncu_cache_control,
                           backend, freezing)
        write_text(output.with_suffix(".ncu.csv"), text)
        try:
            results["ncu"] = parse_csv(text)
        except (KeyError, IndexError, ValueError) as exc:
            results["ncu_error"] = f"{type(exc).__name__}: {exc}"
    settings = {"compile_mode": compile_mode, "freezing": freezing} if compiled else {}
    if backend == "cuda_kernels":
        settings["compile_rest"] = compile_rest
    return write_measurement(
        output, command=command or " ".join(["perfmodel"] + sys.argv[1:]),
        environment=environment(),
        workload={"spec": _spec_reference(spec), "model": spec.name,
                  "batch": spec.batch, "dtype": spec.dtype,
                  "input": [list(s) for s in spec.inputs], "memory_format": "channels_last",
                  "backend": backend, **settings, **({"fusion": fusion} if fusion else {})},
        method={**timer.describe(), "cuda_graphs": cuda_graphs,
                "cudnn_benchmark": True, "inference_mode": True,
                "weights": "random, batchnorm statistics randomized (harness.randomize_batchnorm)",
                "per_kernel": ("torch.profiler, 3 passes averaged; kernels attributed to the "
                               "innermost module range open at their launch (correlation id)")
                if kernels else None,
                "ncu": ncu_note(ncu_cache_control) if ncu else None},
        results=results)
