"""Benchmark ConvFirstNet-L's C = 768 kernels beside the same blocks in PyTorch eager and under
torch.compile, in one run: the stride-1 block at C = 768 (cuda_kernels.convfirst_c768) and the stride-2
block 384 -> 768 (csrc/convfirst_s2_c768.cu through cuda_kernels.convfirst_s2).

    python -m cuda_kernels.bench_c768 --stride 1 --out c768.json [--case 6:7[:batch]] [--modes default]
    python -m cuda_kernels.bench_c768 --stride 2 --out s2_c768.json [--case 6:14[:batch]]

Per shape (batch 128 unless given; ConvFirstNet-L's stages.3.1-3, alpha 6 at 7x7, and stages.3.0, alpha 6
at 14x14 -> 7x7, by default): the kernel's error and PyTorch fp16's against the float64 zoo block first
(the kernel is only timed when within 2x), then median latencies (CUDA events, L2 flushed before every
repeat; cudnn.benchmark on), TFLOP/s and the fraction of the block-plan bound, as cuda_kernels.bench_c512
and bench_s2 record them. Switches the C = 768 kernels on for this process (CUDA_KERNELS_C768).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from cuda_kernels._bench_common import (add_common_arguments, backend_names, baseline_latencies, check_and_time_kernel,
                                        fused_latency, random_nhwc, record_speedups, run_benchmark, speedups_text,
                                        time_torch_baselines)
from cuda_kernels._fused import block_tensors
from cuda_kernels.bench import Case, make_block
from cuda_kernels.bench_c512 import case_head
from perfmodel.harness import Timer


def bench_stride1(case: Case, timer: Timer, ceilings: dict, modes: list[str]) -> dict:
    from cuda_kernels import convfirst_c768 as c768

    torch.manual_seed(0)
    block = make_block(case)
    x = random_nhwc(case.batch, case.channels, case.size)
    weights = c768.prepare_weights(*block_tensors(block))
    tiles = -(-case.pixels // c768.TILE_PIXELS)
    entry, exact, block_fp16 = check_and_time_kernel(case, block, x,
                                                     lambda v, out: c768.run(x, weights, out=out, variant=v),
                                                     c768.VARIANTS, case_head(case), timer, ceilings,
                                                     {"tiles": tiles, "thread_blocks": 2 * tiles})
    time_torch_baselines(entry, block_fp16, x, exact, modes, timer, case, ceilings)
    record_speedups(entry)
    return entry


def row(r: dict) -> str:
    f = r["backends"].get("cuda_kernels")
    base = baseline_latencies(r)
    if f is None:
        return f"{r['name']:38s} FAILED correctness {r['correctness']} | {base}"
    return (f"{r['name']:38s} {fused_latency(f)} {f['tflops']:6.1f} TFLOP/s "
            f"bound {100 * f['waterline_fraction_datasheet']:5.1f}% | {base} | {speedups_text(r)}")


def best_variant(path: str, fallback: int = 0) -> int:
    """The fastest variant that passed its check in a bench_c768 file (its first case), else `fallback`."""
    import json

    try:
        for entry in json.load(open(path))["results"]["cases"]:
            if "cuda_kernels" in entry["backends"]:
                return int(entry["backends"]["cuda_kernels"]["variant"])
    except (OSError, ValueError, KeyError):
        pass
    return fallback


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--stride", type=int, choices=(1, 2), default=1)
    parser.add_argument("--case", action="append", help="alpha:size[:batch] (stride 2: the input size)")
    add_common_arguments(parser, "default")
    args = parser.parse_args(argv)
    os.environ.setdefault("CUDA_KERNELS_C768", "1")
    from cuda_kernels import bench_s2
    from cuda_kernels._build import load_convfirst_c768_extension

    texts = args.case or (["6:7"] if args.stride == 1 else ["6:14"])
    if args.stride == 1:
        cases = [Case("convfirst", 768, *(int(v) for v in t.split(":"))) for t in texts]
        run_benchmark("cuda_kernels.bench_c768", argv, args, load_convfirst_c768_extension, "convfirst_c768", cases,
                      bench_stride1, row, backend_names)
    else:
        cases = [bench_s2.DownCase(384, *(int(v) for v in t.split(":"))) for t in texts]
        run_benchmark("cuda_kernels.bench_c768", argv, args, load_convfirst_c768_extension, "convfirst_s2", cases,
                      bench_s2.bench_case, bench_s2.row, bench_s2.backends)
    return 0


if __name__ == "__main__":
    sys.exit(main())
