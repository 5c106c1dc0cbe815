"""Benchmark the fused ConvFirstNet stem beside the same stem in PyTorch eager and under
torch.compile (default, and default with freezing), all in one run.

    python -m cuda_kernels.bench_stem --out stem.json [--case 32:224[:batch] ...] [--modes default,freezing]
        [--versions 1,2]

Per shape (batch 128 unless given): the kernel's error and PyTorch fp16's against the float64
zoo stem first (the kernel is only timed when within 2x), then median latencies (CUDA events,
L2 flushed before every repeat; cudnn.benchmark on) with TFLOP/s and the fraction of the
block-plan bound (ops = 2 x MACs of both convolutions, K = 27 and 9 C1; bytes = input + output +
weights in fp16). Timing, ceilings and the file format are the ones cuda_kernels.bench_s2 uses.
``--versions 1,2`` checks and times each kernel version (backends cuda_kernels_v1 / cuda_kernels_v2; the
fastest that passed is cuda_kernels); the default is the version ``run`` takes (CUDA_KERNELS_STEM_V2). C1 = 48
(``--case 48:224``, ConvFirstNet-L) has version 2 only: version 1 is dropped from ``--versions`` there.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass

import torch

from cuda_kernels import _bench_common
from cuda_kernels._bench_common import (add_common_arguments, backend_names, baseline_latencies, check_and_time_kernel,
                                        fused_latency, random_nhwc, run_benchmark, summarize_speedups, time_eager,
                                        versus_strongest)
from perfmodel.harness import Timer, randomize_batchnorm


@dataclass(frozen=True)
class StemCase:
    mid_channels: int  # C1 (ConvFirstNet widths[0] / 2)
    size: int  # input height and width
    batch: int = 128

    @property
    def out_channels(self) -> int:
        return 2 * self.mid_channels

    @property
    def name(self) -> str:
        return f"stem_3_{self.mid_channels}_{self.out_channels}_{self.size}x{self.size}_n{self.batch}"

    @property
    def macs(self) -> int:
        from cuda_kernels.stem import conv_size, output_size

        c1, c2 = self.mid_channels, self.out_channels
        return self.batch * (conv_size(self.size) ** 2 * c1 * 27 + output_size(self.size) ** 2 * c2 * 9 * c1)

    @property
    def dram_bytes(self) -> int:
        """Compulsory bytes of the stem as one kernel: input + output + weights, fp16."""
        from cuda_kernels.stem import output_size

        c1, c2 = self.mid_channels, self.out_channels
        weights = c1 * 27 + c1 + c2 * 9 * c1 + c2
        return 2 * (self.batch * self.size**2 * 3 + self.batch * output_size(self.size) ** 2 * c2 + weights)


CASES = [StemCase(32, 224)]  # ConvFirstNet-H200 and -M; --case 16:224 adds ConvFirstNet-S's, 48:224 -L's


def make_stem(case: StemCase):
    from torch import nn

    from perfmodel.zoo import fold_batchnorm
    from perfmodel.zoo.blocks import ConvBN

    c1 = case.mid_channels
    s = nn.Sequential(ConvBN(3, c1, 3, stride=2), nn.ReLU(), ConvBN(c1, 2 * c1, 3, stride=2), nn.ReLU())
    return fold_batchnorm(randomize_batchnorm(s)).cuda()


def time_compiled(entry: dict, block_fp16, x, exact, mode: str, timer: Timer, case, ceilings: dict) -> None:
    """torch.compile's default mode, plain ("default") or with Inductor's freezing ("freezing": the
    weights constant-folded, as `perfmodel bench --freezing` compiles networks)."""
    _bench_common.time_compiled(entry, block_fp16, x, exact, "default", timer, case, ceilings,
                                freezing=mode == "freezing", key=f"inductor_{mode}")


def bench_case(case: StemCase, timer: Timer, ceilings: dict, modes: list[str], versions: tuple[int, ...] = ()) -> dict:
    from cuda_kernels import stem

    versions = versions or (2 if stem.v2_enabled() else 1,)
    if (case.mid_channels, case.out_channels) not in stem.V1_WIDTHS:  # C1 = 48: version 2 only
        versions = tuple(v for v in versions if v == 2) or (2,)

    torch.manual_seed(0)
    block = make_stem(case)
    x = random_nhwc(case.batch, 3, case.size)
    weights = stem.prepare_weights(stem.FoldedStem.from_stem(block))
    entry, exact, block_fp16 = check_and_time_kernel(case, block, x,
                                                     lambda v, out: stem.run(x, weights, out=out, version=v), versions,
                                                     {**asdict(case), "name": case.name, "v2_applies": stem.v2_applies(x)},
                                                     timer, ceilings)
    time_eager(entry, block_fp16, x, timer, case, ceilings)
    for mode in modes:
        time_compiled(entry, block_fp16, x, exact, mode, timer, case, ceilings)
    summarize_speedups(entry)
    return entry


def row(r: dict) -> str:
    f = r["backends"].get("cuda_kernels")
    if f is None:
        return f"{r['name']:34s} FAILED correctness {r['correctness']}"
    versions = " ".join(f"{k[len('cuda_kernels_'):]}={v['latency_ms']['median'] * 1e3:.1f}us"
                        for k, v in r["backends"].items() if k.startswith("cuda_kernels_v"))
    return (f"{r['name']:34s} {fused_latency(f)} {f['tflops']:6.1f} TFLOP/s {f['gbps']:7.1f} GB/s "
            f"bound {100 * f['waterline_fraction_datasheet']:5.1f}% [{versions}] | {baseline_latencies(r)}"
            f"{versus_strongest(r)}")


def parse_case(text: str) -> StemCase:
    return StemCase(*(int(v) for v in text.split(":")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--case", action="append", type=parse_case, help="C1:size[:batch], e.g. 32:224")
    add_common_arguments(parser, "default,freezing",
                         "torch.compile modes to time beside eager: default, freezing ('' for none)")
    parser.add_argument("--versions", default="",
                        help="kernel versions to check and time, e.g. 1,2 (default: the one CUDA_KERNELS_STEM_V2 picks)")
    args = parser.parse_args(argv)
    from cuda_kernels.stem import _extension

    versions = tuple(int(v) for v in args.versions.split(",") if v.strip())
    if any(v not in (1, 2) for v in versions):
        parser.error(f"--versions takes 1 and / or 2, got {args.versions}")
    run_benchmark("cuda_kernels.bench_stem", argv, args, _extension, "convfirst_stem", args.case or CASES,
                  lambda case, timer, ceilings, modes: bench_case(case, timer, ceilings, modes, versions), row,
                  lambda modes: backend_names(modes, *(f"cuda_kernels_v{v}" for v in versions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
