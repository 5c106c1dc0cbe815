"""Benchmark the stride-2 ConvFirst kernel beside the same block in PyTorch eager and under
torch.compile (default and max-autotune-no-cudagraphs), all in one run.

    python -m cuda_kernels.bench_s2 --out s2.json [--case 32:6:56 ...] [--modes default,...]

Per shape (batch 128 unless given): the kernel's error and PyTorch fp16's against the float64
zoo block first (the kernel is only timed when within 2x), then median latencies (CUDA events,
L2 flushed before every repeat; cudnn.benchmark on) with TFLOP/s and the fraction of the
block-plan bound (ops = 2 x MACs as perfmodel counts the block, the blurs included; bytes =
input + output + weights in fp16). Timing, ceilings and the file format are the ones
cuda_kernels.bench uses.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, dataclass

import torch

from cuda_kernels._bench_common import (add_common_arguments, backend_names, baseline_latencies, check_and_time_kernel,
                                        fused_latency, random_nhwc, run_benchmark, summarize_speedups,
                                        time_torch_baselines, versus_strongest)
from cuda_kernels.ops import L_WIDTHS_SWITCH
from perfmodel.harness import Timer, randomize_batchnorm


@dataclass(frozen=True)
class DownCase:
    in_channels: int
    expansion: int
    size: int  # input height and width
    batch: int = 128

    @property
    def out_channels(self) -> int:
        return 2 * self.in_channels

    @property
    def hidden(self) -> int:
        return self.expansion * self.in_channels

    @property
    def out_size(self) -> int:
        return (self.size + 1) // 2

    @property
    def name(self) -> str:
        return f"convfirst_s2_c{self.in_channels}_a{self.expansion}_{self.size}x{self.size}_n{self.batch}"

    @property
    def macs(self) -> int:
        cin, cout, hidden = self.in_channels, self.out_channels, self.hidden
        pixels_in = self.batch * self.size**2
        pixels_out = self.batch * self.out_size**2
        conv = pixels_in * cin * 8 * 9
        blurs = 2 * pixels_out * cin * 9
        return conv + blurs + pixels_out * (cin * hidden + hidden * cout + cin * cout)

    @property
    def weight_elements(self) -> int:
        cin, cout, hidden = self.in_channels, self.out_channels, self.hidden
        return cin * 8 * 9 + cin + cin * hidden + hidden + hidden * cout + cin * cout + 2 * cout

    @property
    def dram_bytes(self) -> int:
        """Compulsory bytes of the block as one kernel: input + output + weights, fp16."""
        inputs = self.batch * self.size**2 * self.in_channels
        outputs = self.batch * self.out_size**2 * self.out_channels
        return 2 * (inputs + outputs + self.weight_elements)


S_CASES = [DownCase(32, 6, 56), DownCase(64, 6, 28), DownCase(128, 6, 14)]  # ConvFirstNet-S
L_CASES = [DownCase(96, 6, 56), DownCase(192, 6, 28)]  # ConvFirstNet-L (behind CUDA_KERNELS_L_WIDTHS)
WIDE_CASES = [DownCase(64, 6, 56), DownCase(128, 6, 28), DownCase(64, 4, 56), DownCase(128, 4, 28)]  # H200, M


def make_block(case: DownCase):
    from perfmodel.zoo import ConvFirstBlock, fold_batchnorm

    block = ConvFirstBlock(case.in_channels, case.expansion, case.out_channels, stride=2)
    return fold_batchnorm(randomize_batchnorm(block)).cuda()


def bench_case(case: DownCase, timer: Timer, ceilings: dict, modes: list[str]) -> dict:
    from cuda_kernels import convfirst_s2 as s2

    torch.manual_seed(0)
    block = make_block(case)
    x = random_nhwc(case.batch, case.in_channels, case.size)
    weights = s2.prepare_weights(s2.FoldedWeights.from_block(block))
    entry, exact, block_fp16 = check_and_time_kernel(case, block, x,
                                                     lambda v, out: s2.run(x, weights, variant=v, out=out),
                                                     s2.VARIANTS[case.in_channels], {**asdict(case), "name": case.name},
                                                     timer, ceilings)
    if not modes:
        return entry
    time_torch_baselines(entry, block_fp16, x, exact, modes, timer, case, ceilings)
    summarize_speedups(entry)
    return entry


def row(r: dict) -> str:
    f = r["backends"].get("cuda_kernels")
    if f is None:
        return f"{r['name']:38s} FAILED correctness {r['correctness']}"
    return (f"{r['name']:38s} {fused_latency(f)} v{f['variant']} {f['tflops']:6.1f} TFLOP/s "
            f"bound {100 * f['waterline_fraction_datasheet']:5.1f}% | {baseline_latencies(r)}{versus_strongest(r)}")


def parse_case(text: str) -> DownCase:
    return DownCase(*(int(v) for v in text.split(":")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--case", action="append", type=parse_case, help="C_in:alpha:size[:batch], e.g. 32:6:56")
    parser.add_argument("--wide", action="store_true", help="add the ConvFirstNet-M/H200 shapes")
    parser.add_argument("--l-widths", action="store_true",
                        help="ConvFirstNet-L's 96 -> 192 and 192 -> 384 blocks instead of the S shapes, switched on "
                             "for this run (CUDA_KERNELS_L_WIDTHS; on unless set to 0)")
    add_common_arguments(parser, "default,max-autotune-no-cudagraphs",
                         "torch.compile modes to time beside eager ('' for none: kernel only)")
    args = parser.parse_args(argv)
    cases = (args.case or ([] if args.l_widths else S_CASES)) + (WIDE_CASES if args.wide else [])
    if args.l_widths:
        os.environ.setdefault(L_WIDTHS_SWITCH, "1")
        cases += L_CASES
    from cuda_kernels._build import load_convfirst_s2_extension

    run_benchmark("cuda_kernels.bench_s2", argv, args, load_convfirst_s2_extension, "convfirst_s2", cases, bench_case,
                  row, backends)
    return 0


def backends(modes: list[str]) -> list[str]:
    """The kernel, eager unless no torch.compile mode is asked for (kernel only), each mode."""
    return backend_names(modes, eager=bool(modes))


if __name__ == "__main__":
    sys.exit(main())
