"""Benchmark the C = 512 ConvFirst kernel (wgmma) beside the same block in PyTorch eager and
under torch.compile, all in one run.

    python -m cuda_kernels.bench_c512 --out c512.json [--case 6:7 ...] [--modes default,...]
    ncu ... python -m cuda_kernels.bench_c512 --launch-only --case 6:7   # one launch per variant

Per shape (C = 512, batch 128 unless given; --case alpha:size[:batch]): the kernel's error and
PyTorch fp16's against the float64 zoo block first (the kernel is only timed when within 2x),
then median latencies of both variants (CUDA events, L2 flushed before every repeat; cudnn.benchmark on) with
TFLOP/s and the fraction of the block-plan bound. Cases, ceilings and rates are the ones
cuda_kernels.bench uses.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

import torch

from cuda_kernels.bench import Case, make_block, measure_ceilings, rate_metrics
from perfmodel.harness import Timer, environment, reference_precision, relative_error

DEFAULT_CASES = [Case("convfirst", 512, 6, 7), Case("convfirst", 512, 4, 7), Case("convfirst", 512, 6, 14)]


def bench_case(case: Case, timer: Timer, ceilings: dict, modes: list[str]) -> dict:
    from cuda_kernels import convfirst_c512 as c512

    torch.manual_seed(0)
    block = make_block(case)
    x = torch.randn(case.batch, case.channels, case.size, case.size, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last)
    conv, expand, project = block.conv, block.ffn.expand, block.ffn.project
    weights = c512.prepare_weights(conv.weight, conv.bias, expand.weight, expand.bias, project.weight, project.bias)
    with torch.no_grad(), reference_precision():
        exact = block.double()(x.double())
    with torch.no_grad():
        block_fp16 = block.half()
        torch_error = relative_error(block_fp16(x), exact)
    entry = {"name": case.name, "channels": case.channels,
             "expansion": case.expansion, "size": case.size, "batch": case.batch, "macs": case.macs,
             "flops": 2 * case.macs, "dram_bytes": case.dram_bytes, "tiles": -(-case.pixels // c512.TILE_PIXELS),
             "backends": {}, "correctness": {"torch_fp16_rel_error": torch_error, "variants": {}}}
    fused = {}
    for variant in c512.VARIANTS:
        out = torch.full_like(x, float("nan"))
        err = relative_error(c512.run(x, weights, out=out, variant=variant), exact)
        ok = 0 < torch_error and err <= 2 * torch_error
        entry["correctness"]["variants"][variant] = {"rel_error": err, "passed": ok}
        if ok:
            lat = timer(lambda v=variant: c512.run(x, weights, variant=v))
            fused[variant] = {"latency_ms": lat, **rate_metrics(case, lat["median"], ceilings)}
            entry["backends"][f"cuda_kernels_v{variant}"] = fused[variant]
    passed = bool(fused)
    if passed:
        best = min(fused, key=lambda v: fused[v]["latency_ms"]["median"])
        entry["backends"]["cuda_kernels"] = {"variant": best, **fused[best]}
    with torch.no_grad():
        lat = timer(lambda: block_fp16(x))
        entry["backends"]["eager"] = {"latency_ms": lat, **rate_metrics(case, lat["median"], ceilings)}
        for mode in modes:
            torch._dynamo.reset()  # a fresh, static compile per shape (NOTES.md, v2)
            t0 = time.perf_counter()
            compiled = torch.compile(block_fp16, mode=None if mode == "default" else mode, dynamic=False)
            compile_err = relative_error(compiled(x), exact)
            torch.cuda.synchronize()
            lat = timer(lambda: compiled(x))
            entry["backends"][f"inductor_{mode}"] = {"latency_ms": lat, "compile_s": time.perf_counter() - t0,
                                                     "rel_error": compile_err,
                                                     **rate_metrics(case, lat["median"], ceilings)}
    if passed:
        t = entry["backends"]["cuda_kernels"]["latency_ms"]["median"]
        baselines = {k: v["latency_ms"]["median"] for k, v in entry["backends"].items()
                     if not k.startswith("cuda_kernels")}
        entry["speedups"] = {k: v / t for k, v in baselines.items()}
    return entry


def launch_once(case: Case) -> None:
    """One launch of each variant on `case`, for a profiler to capture (no reference, no timing)."""
    from cuda_kernels import convfirst_c512 as c512

    block = make_block(case)
    x = torch.randn(case.batch, case.channels, case.size, case.size, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last)
    conv, expand, project = block.conv, block.ffn.expand, block.ffn.project
    weights = c512.prepare_weights(conv.weight, conv.bias, expand.weight, expand.bias, project.weight, project.bias)
    for variant in c512.VARIANTS:
        c512.run(x, weights, variant=variant)
        torch.cuda.synchronize()
        print(f"launched {case.name} variant {variant}", flush=True)


def row(r: dict) -> str:
    base = " ".join(f"{k}={v['latency_ms']['median'] * 1e3:.1f}us" for k, v in r["backends"].items()
                    if k != "cuda_kernels")  # the per-variant kernel times included
    f = r["backends"].get("cuda_kernels")
    if f is None:
        return f"{r['name']:34s} FAILED correctness {r['correctness']} | {base}"
    speedups = " ".join(f"x{v:.2f} vs {k}" for k, v in r.get("speedups", {}).items())
    return (f"{r['name']:34s} fused {f['latency_ms']['median'] * 1e3:7.1f}us {f['tflops']:6.1f} TFLOP/s "
            f"bound {100 * f['waterline_fraction_datasheet']:5.1f}% ({r['tiles']} tiles) | {base} | {speedups}")


def parse_case(text: str) -> Case:
    return Case("convfirst", 512, *(int(v) for v in text.split(":")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="measurement file (required unless --launch-only)")
    parser.add_argument("--launch-only", action="store_true", help="launch each variant once per case, for ncu")
    parser.add_argument("--case", action="append", type=parse_case, help="alpha:size[:batch], e.g. 6:7")
    parser.add_argument("--modes", default="default", help="torch.compile modes to time beside eager ('' for none)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--hardware", default="h200-sxm")
    args = parser.parse_args(argv)
    cases = args.case or DEFAULT_CASES
    if args.launch_only:
        for case in cases:
            launch_once(case)
        return 0
    if not args.out:
        parser.error("--out is required")
    modes = [m for m in args.modes.split(",") if m]
    command = "python -m cuda_kernels.bench_c512 " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    torch.backends.cudnn.benchmark = True

    from cuda_kernels._build import load_convfirst_c512_extension
    from perfmodel.hardware import load_hardware
    from perfmodel.measure import write_measurement

    t0 = time.perf_counter()
    load_convfirst_c512_extension()
    build_s = time.perf_counter() - t0
    timer = Timer(args.warmup, args.repeats, flush_l2=True)
    hw = load_hardware(args.hardware)
    ceilings = {"datasheet": {"name": hw.name, "fp16_tflops": hw.peak_tflops["float16"], "dram_gbps": hw.dram_gbps},
                "measured": measure_ceilings(timer)}
    results = []
    for case in cases:
        results.append(bench_case(case, timer, ceilings, modes))
        print(row(results[-1]), flush=True)
        # rewritten after every case: a run stopped at its time limit keeps the cases it finished
        write_measurement(
            args.out, command=command, environment=environment(),
            workload={"kind": "blocks", "blocks": ["convfirst_c512"], "dtype": "float16",
                      "memory_format": "channels_last",
                      "backends": ["cuda_kernels", "eager", *(f"inductor_{m}" for m in modes)],
                      "plan": "block (one kernel per block; bytes = input + output + weights)"},
            method={**timer.describe(), "cuda_graphs": False, "cudnn_benchmark": True,
                    "inductor": "torch.compile(block, mode, dynamic=False) after torch._dynamo.reset(), per shape",
                    "correctness": "rel. L2 error vs the float64 zoo block <= 2x PyTorch fp16's before timing",
                    "extension_build_s": build_s, "cases_planned": [c.name for c in cases]},
            results={"ceilings": ceilings, "cases": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
