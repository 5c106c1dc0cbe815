"""Benchmark the stride-1 ConvFirst kernel on wgmma (C = 512, 384, 256, 128, 64) beside the same block in
PyTorch eager and under torch.compile, and at C < 512 beside the mma.sync kernel, all in one run.

    python -m cuda_kernels.bench_c512 --out c512.json [--case 6:7 --case c256:6:14 ...] [--modes default,...]
    ncu ... python -m cuda_kernels.bench_c512 --launch-only --case 6:7   # one launch per variant

Per shape (--case [cC:]alpha:size[:batch]; C = 512 and batch 128 unless given): the kernel's error
and PyTorch fp16's against the float64 zoo block first (a kernel is only timed when within 2x),
then median latencies of both variants (CUDA events, L2 flushed before every repeat; cudnn.benchmark on) with
TFLOP/s and the fraction of the block-plan bound; at C < 512 also the mma.sync kernel
(`cuda_kernels.run_block`, its default variant: what `FusedConvFirstBlock` runs) as backend
``mma_sync``. Cases, ceilings and rates are the ones cuda_kernels.bench uses.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import torch

from cuda_kernels._bench_common import (MODES_HELP, add_timing_arguments, backend_names, baseline_latencies,
                                        check_and_time_kernel, fused_latency, random_nhwc, rate_metrics,
                                        record_speedups, run_benchmark, speedups_text, time_torch_baselines)
from cuda_kernels._fused import block_tensors
from cuda_kernels.bench import Case, make_block
from perfmodel.harness import Timer, relative_error

DEFAULT_CASES = [Case("convfirst", 512, 6, 7), Case("convfirst", 512, 4, 7), Case("convfirst", 512, 6, 14)]


def time_mma_sync(entry: dict, block, x: torch.Tensor, exact: torch.Tensor, timer: Timer, case: Case,
                  ceilings: dict) -> None:
    """The mma.sync block-fusion kernel on the same block (C < 512), correctness first, as backend
    ``mma_sync`` (a baseline in the speedups)."""
    import cuda_kernels
    from cuda_kernels.bench import fused_weights

    weights = fused_weights(case, block)
    err = relative_error(cuda_kernels.run_block(x, weights, True, out=torch.full_like(x, float("nan"))), exact)
    torch_error = entry["correctness"]["torch_fp16_rel_error"]
    entry["correctness"]["mma_sync"] = {"rel_error": err, "passed": 0 < torch_error and err <= 2 * torch_error}
    if entry["correctness"]["mma_sync"]["passed"]:
        lat = timer(lambda: cuda_kernels.run_block(x, weights, True))
        entry["backends"]["mma_sync"] = {"latency_ms": lat, **rate_metrics(case, lat["median"], ceilings)}


def case_variants(channels: int, wanted: tuple[int, ...] | None = None, size: int | None = None) -> tuple[int, ...]:
    """The kernel's variants at this width (and image width: variant 4 needs W <= 18), restricted to
    `wanted` (None: all of them)."""
    from cuda_kernels import convfirst_c512 as c512

    return tuple(v for v in c512.variants(channels) if (wanted is None or v in wanted) and
                 not (v == 4 and size is not None and size > c512.SPLIT_H_MAX_WIDTH))


def bench_case(case: Case, timer: Timer, ceilings: dict, modes: list[str], mma_sync: bool = True,
               wanted: tuple[int, ...] | None = None) -> dict:
    from cuda_kernels import convfirst_c512 as c512

    torch.manual_seed(0)
    block = make_block(case)
    x = random_nhwc(case.batch, case.channels, case.size)
    weights = c512.prepare_weights(*block_tensors(block))
    entry, exact, block_fp16 = check_and_time_kernel(case, block, x,
                                                     lambda v, out: c512.run(x, weights, out=out, variant=v),
                                                     case_variants(case.channels, wanted, case.size), case_head(case),
                                                     timer, ceilings, {"tiles": -(-case.pixels // c512.TILE_PIXELS)})
    if case.channels <= 256 and mma_sync:  # the mma.sync kernel's widths
        time_mma_sync(entry, block, x, exact, timer, case, ceilings)
    time_torch_baselines(entry, block_fp16, x, exact, modes, timer, case, ceilings)
    record_speedups(entry)
    return entry


def case_head(case: Case) -> dict:
    """The first fields of a stride-1 case's entry (bench_c512, bench_c768): name, C, alpha, size, batch."""
    return {"name": case.name, "channels": case.channels, "expansion": case.expansion, "size": case.size,
            "batch": case.batch}


def launch_once(case: Case, wanted: tuple[int, ...] | None = None) -> None:
    """One launch of each variant on `case`, for a profiler to capture (no reference, no timing)."""
    from cuda_kernels import convfirst_c512 as c512

    block = make_block(case)
    x = random_nhwc(case.batch, case.channels, case.size)
    weights = c512.prepare_weights(*block_tensors(block))
    for variant in case_variants(case.channels, wanted, case.size):
        c512.run(x, weights, variant=variant)
        torch.cuda.synchronize()
        print(f"launched {case.name} variant {variant}", flush=True)


def row(r: dict) -> str:
    base = baseline_latencies(r, variants=True)  # the per-variant kernel times included
    f = r["backends"].get("cuda_kernels")
    if f is None:
        return f"{r['name']:34s} FAILED correctness {r['correctness']} | {base}"
    return (f"{r['name']:34s} {fused_latency(f)} {f['tflops']:6.1f} TFLOP/s "
            f"bound {100 * f['waterline_fraction_datasheet']:5.1f}% ({r['tiles']} tiles) | {base} | {speedups_text(r)}")


def parse_case(text: str) -> Case:
    """``alpha:size[:batch]`` at C = 512, or ``cC:alpha:size[:batch]``."""
    parts = text.split(":")
    channels = int(parts.pop(0)[1:]) if parts[0].startswith("c") else 512
    return Case("convfirst", channels, *(int(v) for v in parts))


def parse_variants(text: str) -> tuple[int, ...]:
    """``0,2,3`` -> (0, 2, 3)."""
    return tuple(int(v) for v in text.split(",") if v.strip())


def best_variant(path: str, channels: int = 256, expansion: int = 6, fallback: int = 2) -> int:
    """The fastest variant that passed its check in a bench_c512 file, for the case (C, alpha) given."""
    import json

    try:
        cases = json.load(open(path))["results"]["cases"]
    except (OSError, ValueError, KeyError):
        return fallback
    for entry in cases:
        if (entry["channels"], entry["expansion"]) == (channels, expansion) and "cuda_kernels" in entry["backends"]:
            return int(entry["backends"]["cuda_kernels"]["variant"])
    return fallback


def wgmma_beats_mma_sync(path: str, channels: int = 128) -> bool:
    """Whether the wgmma kernel's best variant beat the mma.sync kernel at this width in a bench_c512 file."""
    import json

    try:
        cases = json.load(open(path))["results"]["cases"]
    except (OSError, ValueError, KeyError):
        return False
    for entry in cases:
        b = entry["backends"]
        if entry["channels"] == channels and "cuda_kernels" in b and "mma_sync" in b:
            return b["cuda_kernels"]["latency_ms"]["median"] < b["mma_sync"]["latency_ms"]["median"]
    return False


def smoke_case(case: str) -> tuple:
    """A device script's smoke case ``C:alpha:batch:size`` on the GPU: the zoo block with random batch-norm statistics,
    folded (seed 0), x (seed 0, fp16 channels-last), the block's float64 output, PyTorch fp16's relative error and the
    kernel's weights: (x, weights, exact, torch_err)."""
    from cuda_kernels import convfirst_c512 as c512
    from perfmodel.harness import randomize_batchnorm
    from perfmodel.zoo import ConvFirstBlock, fold_batchnorm

    channels, alpha, batch, size = map(int, case.split(":"))
    torch.manual_seed(0)
    block = fold_batchnorm(randomize_batchnorm(ConvFirstBlock(channels, alpha), seed=0)).cuda()
    x = torch.randn(batch, channels, size, size, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        exact = block.double()(x.double())
        torch_err = relative_error(block.half()(x), exact)
        weights = c512.prepare_weights(block.conv.weight, block.conv.bias, block.ffn.expand.weight,
                                       block.ffn.expand.bias, block.ffn.project.weight, block.ffn.project.bias)
    return x, weights, exact, torch_err


def variant_lines(path: str, variants: tuple[int, ...] = (3, 5), tag: str = "V5") -> list[str]:
    """``V5 c64:6:56 v3=177.0us v5=120.4us`` per case of a bench_c512 file: each variant's median (``failed``
    where it failed its check or was not timed; ``:batch`` after the size where it is not 128)."""
    import json

    try:
        cases = json.load(open(path))["results"]["cases"]
    except (OSError, ValueError, KeyError):
        return []
    lines = []
    for entry in cases:
        name = f"c{entry['channels']}:{entry['expansion']}:{entry['size']}"
        name += f":{entry['batch']}" if entry.get("batch", 128) != 128 else ""
        times = []
        for v in variants:
            b = entry["backends"].get(f"cuda_kernels_v{v}")
            times.append(f"v{v}={b['latency_ms']['median'] * 1e3:.1f}us" if b else f"v{v}=failed")
        lines.append(f"{tag} {name} {' '.join(times)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="measurement file (required unless --launch-only)")
    parser.add_argument("--launch-only", action="store_true", help="launch each variant once per case, for ncu")
    parser.add_argument("--case", action="append", type=parse_case, help="alpha:size[:batch], e.g. 6:7")
    parser.add_argument("--modes", default="default", help=MODES_HELP)
    parser.add_argument("--no-mma-sync", action="store_true",
                        help="leave out the mma.sync baseline below C = 512 (its extension need not be built)")
    parser.add_argument("--variants", type=parse_variants, default=None,
                        help="comma list of kernel variants to time where the width has them (default: all)")
    add_timing_arguments(parser)
    args = parser.parse_args(argv)
    cases = args.case or DEFAULT_CASES
    if args.launch_only:
        for case in cases:
            launch_once(case, args.variants)
        return 0
    if not args.out:
        parser.error("--out is required")
    from cuda_kernels._build import load_convfirst_c512_extension

    run_benchmark("cuda_kernels.bench_c512", argv, args, load_convfirst_c512_extension, "convfirst_c512", cases,
                  partial(bench_case, mma_sync=not args.no_mma_sync, wanted=args.variants), row,
                  lambda modes: backend_names(modes, "mma_sync"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
