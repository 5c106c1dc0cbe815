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

from cuda_kernels._bench_common import bench_cases, prepare, speedups, time_fused_variants, time_torch_baselines
from cuda_kernels.bench import Case, make_block
from perfmodel.harness import Timer, reference_precision, relative_error


def bench_stride1(case: Case, timer: Timer, ceilings: dict, modes: list[str]) -> dict:
    from cuda_kernels import convfirst_c768 as c768

    torch.manual_seed(0)
    block = make_block(case)
    x = torch.randn(case.batch, case.channels, case.size, case.size, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last)
    conv, expand, project = block.conv, block.ffn.expand, block.ffn.project
    weights = c768.prepare_weights(conv.weight, conv.bias, expand.weight, expand.bias, project.weight, project.bias)
    with torch.no_grad(), reference_precision():
        exact = block.double()(x.double())
    with torch.no_grad():
        block_fp16 = block.half()
        torch_error = relative_error(block_fp16(x), exact)
    entry = {"name": case.name, "channels": case.channels, "expansion": case.expansion, "size": case.size,
             "batch": case.batch, "macs": case.macs, "flops": 2 * case.macs, "dram_bytes": case.dram_bytes,
             "tiles": -(-case.pixels // c768.TILE_PIXELS), "thread_blocks": 2 * -(-case.pixels // c768.TILE_PIXELS),
             "backends": {}, "correctness": {"torch_fp16_rel_error": torch_error, "variants": {}}}
    time_fused_variants(entry, c768.VARIANTS, lambda v, out: c768.run(x, weights, out=out, variant=v),
                        lambda: torch.full_like(x, float("nan")), exact, timer, case, ceilings)
    time_torch_baselines(entry, block_fp16, x, exact, modes, timer, case, ceilings)
    if "cuda_kernels" in entry["backends"]:
        entry["speedups"] = speedups(entry)
    return entry


def row(r: dict) -> str:
    f = r["backends"].get("cuda_kernels")
    base = " ".join(f"{k}={v['latency_ms']['median'] * 1e3:.1f}us" for k, v in r["backends"].items()
                    if not k.startswith("cuda_kernels"))
    if f is None:
        return f"{r['name']:38s} FAILED correctness {r['correctness']} | {base}"
    ratios = " ".join(f"x{v:.2f} vs {k}" for k, v in r.get("speedups", {}).items())
    return (f"{r['name']:38s} fused {f['latency_ms']['median'] * 1e3:7.1f}us {f['tflops']:6.1f} TFLOP/s "
            f"bound {100 * f['waterline_fraction_datasheet']:5.1f}% | {base} | {ratios}")


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
    parser.add_argument("--modes", default="default", help="torch.compile modes to time beside eager ('' for none)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--hardware", default="h200-sxm")
    args = parser.parse_args(argv)
    os.environ.setdefault("CUDA_KERNELS_C768", "1")
    from cuda_kernels._build import load_convfirst_c768_extension

    modes, command, build_s, timer, ceilings = prepare("cuda_kernels.bench_c768", argv, args,
                                                       load_convfirst_c768_extension)
    texts = args.case or (["6:7"] if args.stride == 1 else ["6:14"])
    if args.stride == 1:
        cases = [Case("convfirst", 768, *(int(v) for v in t.split(":"))) for t in texts]
        backends = ["cuda_kernels", "eager", *(f"inductor_{m}" for m in modes)]
        bench_cases(args.out, command, "convfirst_c768", backends, cases,
                    lambda case: bench_stride1(case, timer, ceilings, modes), row, timer, ceilings, build_s)
    else:
        from cuda_kernels import bench_s2

        cases = [bench_s2.DownCase(384, *(int(v) for v in t.split(":"))) for t in texts]
        backends = ["cuda_kernels", *(["eager"] if modes else []), *(f"inductor_{m}" for m in modes)]
        bench_cases(args.out, command, "convfirst_s2", backends, cases,
                    lambda case: bench_s2.bench_case(case, timer, ceilings, modes), bench_s2.row, timer, ceilings,
                    build_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
