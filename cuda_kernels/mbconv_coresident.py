"""Can the projection run beside kernel 1 on the same SMs? The premise of the one route to the per-block 3x left
unbuilt (NOTES.md, session 40): a persistent kernel whose CTAs take projection tasks between kernel-1 items only pays
if a memory-bound projection and the issue-bound kernel 1 share an SM without slowing each other much, and if kernel 1
keeps its rate with room left beside it. This measures both with the kernels as they are, before anything is built:

    python -m cuda_kernels.mbconv_coresident --block features.4.1 -o coresident.json

Per block of EfficientNet-B0 (random weights, realistic BN statistics, batch 128), each variant one CUDA graph timed
as replays (L2 flushed before each), in interleaved runs: the block; kernel 1 alone (the diagnostic
CUDA_KERNELS_ABLATE=se,project) at its occupancy and at one CTA an SM (CUDA_KERNELS_K1_CTAS=1); the projection alone
(ABLATE=kernel1,se: it reads whatever D and scale the buffers hold, which costs the same); and kernel 1 with the
projection on a second stream, at both occupancies. The switches are read when a launch is made, so each is set around
the call that a graph captures. Outputs are not checked (the ablated blocks' outputs are wrong by design); the block's
own correctness is the GPU suite's.

Reading: with kernel 1 at one CTA an SM, "both" near max(kernel 1, projection) means they share the SMs; near the sum
means they queue. Kernel 1 at one CTA an SM against its occupancy is what the room costs it.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager

import torch

from cuda_kernels.mbconv_split import b0_blocks, write_blocks_file
from perfmodel.harness import Timer, cuda_graph_replay

ABLATE, CTAS = "CUDA_KERNELS_ABLATE", "CUDA_KERNELS_K1_CTAS"


def _apply(values: dict[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextmanager
def switches(**values: str | None):
    """Set (a value) or unset (None) environment variables for the duration, then restore them."""
    old = {k: os.environ.get(k) for k in values}
    try:
        _apply(values)
        yield
    finally:
        _apply(old)


def variants(run, streams: list[torch.cuda.Stream]) -> dict:
    """The variants as callables; run() launches the block once (under whatever switches are set)."""
    def under(**values):
        def fn():
            with switches(**values):
                run()
        return fn

    def both(ctas):
        def fn():
            main = torch.cuda.current_stream()
            for s in streams:
                s.wait_stream(main)
            with torch.cuda.stream(streams[0]), switches(**{ABLATE: "se,project", CTAS: ctas}):
                run()
            with torch.cuda.stream(streams[1]), switches(**{ABLATE: "kernel1,se", CTAS: None}):
                run()
            for s in streams:
                main.wait_stream(s)
        return fn

    return {
        "block": under(**{ABLATE: None, CTAS: None}),
        "kernel 1": under(**{ABLATE: "se,project", CTAS: None}),
        "kernel 1, one CTA an SM": under(**{ABLATE: "se,project", CTAS: "1"}),
        "projection": under(**{ABLATE: "kernel1,se", CTAS: None}),
        "both": both(None),
        "both, kernel 1 at one CTA an SM": both("1"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", action="append", required=True, help="module path in EfficientNet-B0 (repeatable)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--runs", type=int, default=2, help="times each variant is timed (interleaved)")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    if os.environ.get(ABLATE) or os.environ.get(CTAS):
        parser.error(f"start with {ABLATE} and {CTAS} unset: this script sets them itself")
    from cuda_kernels import mbconv as mb

    timer = Timer(5, args.repeats, flush_l2=True)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    cases = []
    for path, params, weights, x in b0_blocks(args.block, args.batch):
        with torch.no_grad():
            out = mb.mbconv(x, params, weights)

        def run():
            mb.mbconv(x, params, weights, out=out)

        case = {"path": path, "batch": args.batch, "variants": {}}
        with torch.no_grad():
            replays = {}
            for name, fn in variants(run, streams).items():
                replay = cuda_graph_replay(fn)
                if replay is None:
                    case.setdefault("not_timed", []).append(name)
                    print(f"CORES {path} {name}: could not be captured in a CUDA graph; not timed", flush=True)
                else:
                    replays[name] = replay
            for _ in range(args.runs):
                for name, replay in replays.items():
                    case["variants"].setdefault(name, []).append(timer(replay))
        for name, runs in case["variants"].items():
            medians = " / ".join(f"{r['median'] * 1e3:.1f}" for r in runs)
            print(f"CORES {path} {name}: {medians} us", flush=True)
        cases.append(case)
        write_blocks_file(args.output, "cuda_kernels.mbconv_coresident", argv, args.batch, cases, {
            **timer.describe(), "cuda_graphs": "every variant one graph, timed as its replay", "runs": args.runs,
            "switches": f"{ABLATE} and {CTAS}, set around each captured launch",
            "check": "none: the ablated blocks' outputs are wrong by design"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
