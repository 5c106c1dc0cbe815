"""What each part of EfficientNet-B0's fused blocks costs on the network's critical path: the fused network (the rest
compiled with freezing, CUDA graphs, PDL as in `perfmodel bench --backend cuda_kernels --compile-rest --freezing
--cuda-graphs`) timed as it is and with parts of every fused block skipped (CUDA_KERNELS_ABLATE, csrc/mbconv.cu):

    python -m cuda_kernels.ablate_b0 [--repeats 30] [--runs 2] [-o ablate.json]

The blocks are checked against PyTorch first, with nothing skipped (fused_model's check before timing); each
variant is then captured in its own CUDA graph (the launcher reads the switch at every launch, so a capture keeps
what was set when it was made) and timed, the variants interleaved `--runs` times. Skipping a part leaves its
outputs stale: the timings are for diagnosis only, and the file says so. A part's cost is the full network's median
minus the network's without it: what no faster version of that part can win beyond.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

ABLATE = "CUDA_KERNELS_ABLATE"
VARIANTS = ("", "se", "project", "kernel1", "se,project")  # "" = nothing skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="efficientnet_b0")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=2, help="times each variant is timed (interleaved)")
    parser.add_argument("--variants", default=";".join(VARIANTS),
                        help='";"-separated CUDA_KERNELS_ABLATE values ("" = none); default: %(default)s')
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args(argv)

    from perfmodel.bench import fused_model
    from perfmodel.harness import (Timer, build_cuda_model, compiled_runner, environment, example_input,
                                   require_cuda)
    from perfmodel.spec import load_spec

    require_cuda()
    if os.environ.get(ABLATE):
        parser.error(f"unset {ABLATE}: the blocks are checked with nothing skipped")
    torch.backends.cudnn.benchmark = True
    spec = load_spec(args.model)
    model = build_cuda_model(spec)
    inputs = [example_input(meta) for meta in spec.input_metas]
    model, fusion = fused_model(model, inputs)  # the check before timing, nothing skipped
    runner = compiled_runner(model, "default", True)

    def forward():
        with torch.inference_mode():
            return runner(*inputs)

    variants = args.variants.split(";")
    graphs = {}
    for v in variants:  # one capture per variant, under its switch
        os.environ[ABLATE] = v
        for _ in range(3):
            forward()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward()
        graphs[v] = graph
    os.environ.pop(ABLATE, None)
    timer = Timer(args.warmup, args.repeats)
    results = {v: [] for v in variants}
    for _ in range(args.runs):
        for v in variants:
            results[v].append(timer(graphs[v].replay))
    full = min(r["median"] for r in results[""]) if "" in results else None
    for v in variants:
        medians = [r["median"] for r in results[v]]
        cost = f", the skipped part's cost {1e3 * (full - min(medians)):.1f} us" if full is not None and v else ""
        print(f"ABLATE {v or 'none'}: median {' / '.join(f'{m:.3f}' for m in medians)} ms{cost}", flush=True)
    if args.output:
        args.output.write_text(json.dumps({
            "note": "diagnostic: variants skip launches (CUDA_KERNELS_ABLATE), so their outputs are wrong",
            "command": " ".join([sys.executable, "-m", "cuda_kernels.ablate_b0", *(argv or sys.argv[1:])]),
            "environment": environment(), "model": spec.name, "batch": spec.batch, "fusion": fusion,
            "method": {**timer.describe(), "cuda_graphs": True, "compile_rest": True, "freezing": True},
            "results": {v or "none": r for v, r in results.items()}}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
