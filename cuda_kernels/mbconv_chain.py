"""Where a fused MBConv block's time goes on its critical path: each kernel's start and end in one call.

    python -m cuda_kernels.mbconv_chain features.3.1 features.4.1 [--calls 20] [--no-flush] [-o chain.json]

Kernel durations (torch.profiler's, Nsight Compute's) do not add up to a block's time under programmatic dependent
launch: the SE and the projection start while kernel 1 still runs and wait in `griddepcontrol.wait`, so their
durations include waiting. Here each call's kernels are placed on one clock (CUPTI's start and end timestamps through
torch.profiler's trace), and the chain is read from the ends: kernel 1 from the call's first start to its end; each
later kernel from the previous kernel's end to its own end (its share of the critical path); the block from the
first start to the last end. L2 is flushed before each call unless --no-flush (then each call finds the previous
call's D, weights and output in L2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import torch

FUSED_PREFIXES = ("mb::", "void mb::")  # the MBConv extension's kernels (namespace mb)


def chain_from_events(events: list[dict], per_call: int) -> list[dict]:
    """Per-kernel medians over calls from chrome-trace kernel events ({"name", "ts", "dur"} in microseconds, one
    call's `per_call` fused kernels after another's; other kernels ignored): for kernel i of a call, `start` and `end`
    relative to the call's first start, and `after_previous` = end - the previous kernel's end (kernel 0: its end)."""
    fused = sorted((e for e in events if e["name"].startswith(FUSED_PREFIXES)), key=lambda e: e["ts"])
    if per_call < 1 or not fused or len(fused) % per_call:
        raise ValueError(f"{len(fused)} fused kernels in the trace, not a multiple of {per_call} a call")
    calls = [fused[i:i + per_call] for i in range(0, len(fused), per_call)]
    names = [e["name"] for e in calls[0]]
    if any([e["name"] for e in c] != names for c in calls):
        raise ValueError("the calls launched different kernels")
    rows = []
    for i, name in enumerate(names):
        start = [c[i]["ts"] - c[0]["ts"] for c in calls]
        end = [c[i]["ts"] + c[i]["dur"] - c[0]["ts"] for c in calls]
        prev_end = [0.0] * len(calls) if i == 0 else [c[i - 1]["ts"] + c[i - 1]["dur"] - c[0]["ts"] for c in calls]
        rows.append({"kernel": name, "start_us": statistics.median(start), "end_us": statistics.median(end),
                     "after_previous_us": statistics.median(e - p for e, p in zip(end, prev_end)),
                     "duration_us": statistics.median(c[i]["dur"] for c in calls)})
    return rows


def trace_events(fn, calls: int, flush: torch.Tensor | None) -> list[dict]:
    """Kernel events of `calls` calls of fn (after one untimed call), from torch.profiler's chrome trace."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            if flush is not None:
                flush.zero_()
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    return [{"name": e["name"], "ts": float(e["ts"]), "dur": float(e["dur"])}
            for e in trace.get("traceEvents", []) if e.get("cat") == "kernel" and "dur" in e]


def main(argv: list[str] | None = None) -> int:
    from cuda_kernels.mbconv_profile import block_arguments, fused_blocks
    from perfmodel.harness import environment

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    block_arguments(parser)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--no-flush", action="store_true", help="keep L2 between calls")
    parser.add_argument("-o", "--output", help="write the rows as JSON")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: mbconv_chain needs a CUDA GPU", file=sys.stderr)
        return 2
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = None if args.no_flush else torch.empty(4 * l2, dtype=torch.uint8, device="cuda")
    out = {"command": " ".join(["python -m cuda_kernels.mbconv_chain", *(sys.argv[1:] if argv is None else argv)]),
           "environment": environment(), "flush_l2": flush is not None, "calls": args.calls, "blocks": {}}
    for path, fused, x in fused_blocks(parser, args):
        with torch.no_grad():
            events = trace_events(lambda: fused(x), args.calls, flush)
            per_call = sum(e["name"].startswith(FUSED_PREFIXES) for e in events) // args.calls  # (checked below)
            rows = chain_from_events(events, per_call)
        out["blocks"][path] = rows
        print(f"CHAIN {path}: block {rows[-1]['end_us']:.1f} us = " +
              " + ".join(f"{r['kernel'].split('(')[0].split('::')[-1][:28]} {r['after_previous_us']:.1f}"
                         for r in rows) +
              " (durations " + ", ".join(f"{r['duration_us']:.1f}" for r in rows) +
              "; starts " + ", ".join(f"{r['start_us']:.1f}" for r in rows) + ")", flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
