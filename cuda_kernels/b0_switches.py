"""Time EfficientNet-B0's fused network under several settings of the launch-time kernel switches, in one process.

The switches are ``CUDA_KERNELS_*`` environment variables that the launchers read in C++ at every launch. The
network is built, swapped and checked once (fused_model's check before timing, under the settings the process started
with), compiled once (the rest by Inductor with freezing), then captured in one CUDA graph per variant (the launchers
read the switches while the graph is captured, so each capture keeps its variant's kernels) and the graphs are timed
interleaved, ``--runs`` times. One process instead of one per variant: each variant costs seconds, not a ~35-second
``perfmodel bench`` run, and every variant runs the same compiled graph.

    python -m cuda_kernels.b0_switches CUDA_KERNELS_SE_V6=1 "CUDA_KERNELS_STEM_DW_BC=1 CUDA_KERNELS_STEM_DW_SEG=8"
    python -m cuda_kernels.b0_switches --ablation        # what kernel 1, the SE and the projection cost

Each variant is a space-separated list of NAME=VALUE (the first variant is always the settings as started: "as is").
Switches read in Python when the network is swapped (``CUDA_KERNELS_EFFNET_HEAD``, the stems' switches) cannot
change between captures: ``perfmodel bench`` runs are needed for those. The variants are not checked against PyTorch
here (their GPU tests do that); ``--ablation`` (CUDA_KERNELS_ABLATE, csrc/mbconv.cu) skips launches, so its outputs
are wrong by design: a part's cost on the critical path is the median as is minus the median without it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

ABLATE = "CUDA_KERNELS_ABLATE"
ABLATIONS = ("se", "project", "kernel1", "se,project")


def parse_variant(text: str) -> dict[str, str]:
    """ "A=1 B=8" -> {"A": "1", "B": "8"}; only CUDA_KERNELS_* names (ValueError otherwise)."""
    settings = {}
    for item in text.split():
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("CUDA_KERNELS_"):
            raise ValueError(f"{item!r}: expected CUDA_KERNELS_NAME=VALUE")
        settings[name] = value
    return settings


def label(settings: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in settings.items()) or "as is"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help='"NAME=VALUE [NAME=VALUE ...]" per variant')
    parser.add_argument("--ablation", action="store_true", help=f"add {ABLATE}={' / '.join(ABLATIONS)}")
    parser.add_argument("--model", default="efficientnet_b0")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=2, help="times each variant is timed (interleaved)")
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args(argv)
    try:
        variants = [{}] + [parse_variant(v) for v in args.variants]
    except ValueError as exc:
        parser.error(str(exc))
    variants += [{ABLATE: a} for a in ABLATIONS] if args.ablation else []
    if os.environ.get(ABLATE):
        parser.error(f"unset {ABLATE}: the blocks are checked as the process starts")

    from perfmodel.bench import fused_model
    from perfmodel.harness import (Timer, build_cuda_model, compiled_runner, environment, example_input,
                                   require_cuda)
    from perfmodel.spec import load_spec

    from perfmodel.errors import InputError

    try:
        require_cuda()
    except InputError as exc:
        parser.exit(2, f"error: {exc}\n")
    torch.backends.cudnn.benchmark = True
    spec = load_spec(args.model)
    model = build_cuda_model(spec)
    inputs = [example_input(meta) for meta in spec.input_metas]
    model, fusion = fused_model(model, inputs)  # the check before timing, as the process started
    runner = compiled_runner(model, "default", True)

    def forward():
        with torch.inference_mode():
            return runner(*inputs)

    started = dict(os.environ)
    graphs = []
    for settings in variants:  # one capture per variant, under its settings
        os.environ.update(settings)
        for _ in range(3):
            forward()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward()
        graphs.append(graph)
        for name in settings:  # back to the settings as started
            if name in started:
                os.environ[name] = started[name]
            else:
                del os.environ[name]
    timer = Timer(args.warmup, args.repeats)
    results = [[] for _ in variants]
    for _ in range(args.runs):
        for i, graph in enumerate(graphs):
            results[i].append(timer(graph.replay))
    base = min(r["median"] for r in results[0])
    for settings, runs in zip(variants, results):
        medians = [r["median"] for r in runs]
        delta = f", {1e3 * (min(medians) - base):+.1f} us against as is" if settings else ""
        print(f"SWITCHES {label(settings)}: median {' / '.join(f'{m:.3f}' for m in medians)} ms{delta}", flush=True)
    if args.output:
        args.output.write_text(json.dumps({
            "note": ("one process: checked once as started, one CUDA graph per variant, timed interleaved; "
                     f"{ABLATE} variants skip launches (their outputs are wrong by design)"),
            "command": " ".join(["python -m cuda_kernels.b0_switches", *(sys.argv[1:] if argv is None else argv)]),
            "environment": environment(), "model": spec.name, "batch": spec.batch, "fusion": fusion,
            "method": {**timer.describe(), "cuda_graphs": True, "compile_rest": True, "freezing": True,
                       "runs": args.runs},
            "results": [{"variant": label(s), "settings": s, "latency_ms": r} for s, r in zip(variants, results)]},
            indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
