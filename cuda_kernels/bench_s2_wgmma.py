"""Benchmark the stride-2 ConvFirst kernel on wgmma (convfirst_s2_wgmma) beside the mma.sync stride-2 kernel's
variants, PyTorch eager and torch.compile, in one run (the ConvFirstNet-H200 / -M shapes by default).

    python -m cuda_kernels.bench_s2_wgmma --out s2w.json [--case 64:6:56 ...] [--modes default,...]
        [--persistent] [--mma-variants 0,2]

Each kernel variant's error against the float64 zoo block first (timed only within 2x PyTorch fp16's), then
median latencies (CUDA events, L2 flushed before every repeat) as cuda_kernels.bench_s2 measures them: the
wgmma kernel is variant "wgmma" (backend cuda_kernels_vwgmma), its persistent variant (``--persistent``, C_in 64
and 128) "wgmma_persistent", the mma.sync kernel's are 0, 1, ...
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

import torch

from cuda_kernels._bench_common import (add_common_arguments, backend_names, case_entry, nan_nhwc, random_nhwc,
                                        reference, run_benchmark, summarize_speedups, time_fused_variants,
                                        time_torch_baselines)
from cuda_kernels.bench_s2 import DownCase, make_block
from perfmodel.harness import Timer

H200_CASES = [DownCase(64, 6, 56), DownCase(128, 6, 28), DownCase(256, 6, 14)]  # ConvFirstNet-H200
M_CASES = [DownCase(64, 4, 56), DownCase(128, 4, 28), DownCase(256, 4, 14)]  # ConvFirstNet-M


PERSISTENT = "wgmma_persistent"  # the persistent variant's name in the results (--persistent)


def bench_case(case: DownCase, timer: Timer, ceilings: dict, modes: list[str], persistent: bool = False,
               mma_variants: tuple[int, ...] | None = None) -> dict:
    from cuda_kernels import convfirst_s2 as s2
    from cuda_kernels import convfirst_s2_wgmma as s2w

    torch.manual_seed(0)
    block = make_block(case)
    x = random_nhwc(case.batch, case.in_channels, case.size)
    folded = s2.FoldedWeights.from_block(block)
    weights, wgmma_weights = s2.prepare_weights(folded), s2w.prepare_weights(folded)
    exact, block_fp16, torch_error = reference(block, x)
    entry = case_entry(case, torch_error, {**asdict(case), "name": case.name})

    def run(variant, out):
        if variant == "wgmma":
            return s2w.run(x, wgmma_weights, out=out, persistent=False)
        if variant == PERSISTENT:
            return s2w.run(x, wgmma_weights, out=out, persistent=True)
        return s2.run(x, weights, variant=variant, out=out)

    mma = s2.VARIANTS[case.in_channels] if mma_variants is None else \
        tuple(v for v in mma_variants if v in s2.VARIANTS[case.in_channels])
    extra = [PERSISTENT] if persistent and case.in_channels in s2w.PERSISTENT_IN_CHANNELS else []
    time_fused_variants(entry, ["wgmma", *extra, *mma], run, lambda: nan_nhwc(exact), exact, timer, case, ceilings)
    time_torch_baselines(entry, block_fp16, x, exact, modes, timer, case, ceilings)  # eager, then each mode
    if "cuda_kernels" in entry["backends"]:
        summarize_speedups(entry)
    return entry


def row(r: dict) -> str:
    kernels = " ".join(f"{k.removeprefix('cuda_kernels_')}={v['latency_ms']['median'] * 1e3:.1f}us"
                       for k, v in r["backends"].items() if k.startswith("cuda_kernels_v"))
    base = " ".join(f"{k}={v['latency_ms']['median'] * 1e3:.1f}us" for k, v in r["backends"].items()
                    if not k.startswith("cuda_kernels"))
    failed = [str(v) for v, c in r["correctness"]["variants"].items() if not c["passed"]]
    return f"{r['name']:38s} {kernels} | {base}" + (f" | FAILED correctness: {', '.join(failed)}" if failed else "")


def parse_case(text: str) -> DownCase:
    return DownCase(*(int(v) for v in text.split(":")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--case", action="append", type=parse_case, help="C_in:alpha:size[:batch], e.g. 64:6:56")
    parser.add_argument("--m", action="store_true", help="add the ConvFirstNet-M shapes (alpha 4)")
    parser.add_argument("--persistent", action="store_true",
                        help="also time the persistent variant (C_in 64, 128) as variant wgmma_persistent")
    parser.add_argument("--mma-variants", default=None,
                        help="comma list of the mma.sync kernel's variants to time (default: all of the width's)")
    add_common_arguments(parser, "default", "torch.compile modes to time beside eager (always timed; '' for none)")
    args = parser.parse_args(argv)
    cases = (args.case or H200_CASES) + (M_CASES if args.m else [])

    def load():
        from cuda_kernels._build import (load_convfirst_c512_extension, load_convfirst_s2_extension,
                                         load_convfirst_s2_wgmma_extension)

        load_convfirst_s2_wgmma_extension()
        load_convfirst_s2_extension()
        load_convfirst_c512_extension()  # 256 -> 512 on the mma.sync template

    mma = None if args.mma_variants is None else tuple(int(v) for v in args.mma_variants.split(",") if v.strip())

    def bench(case, timer, ceilings, modes):
        return bench_case(case, timer, ceilings, modes, persistent=args.persistent, mma_variants=mma)

    run_benchmark("cuda_kernels.bench_s2_wgmma", argv, args, load, "convfirst_s2", cases, bench, row,
                  lambda modes: backend_names(modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
