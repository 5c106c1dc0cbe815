"""Benchmark the fused ConvFirstNet stem beside the same stem in PyTorch eager and under
torch.compile (default, and default with freezing), all in one run.

    python -m cuda_kernels.bench_stem --out stem.json [--case 32:224[:batch] ...] [--modes default,freezing]

Per shape (batch 128 unless given): the kernel's error and PyTorch fp16's against the float64
zoo stem first (the kernel is only timed when within 2x), then median latencies (CUDA events,
L2 flushed before every repeat; cudnn.benchmark on) with TFLOP/s and the fraction of the
block-plan bound (ops = 2 x MACs of both convolutions, K = 27 and 9 C1; bytes = input + output +
weights in fp16). Timing, ceilings and the file format are the ones cuda_kernels.bench_s2 uses.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass

import torch

from cuda_kernels import _bench_common
from cuda_kernels._bench_common import bench_cases, prepare, summarize_speedups, time_eager, time_fused_variants
from perfmodel.harness import Timer, randomize_batchnorm, reference_precision, relative_error


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


CASES = [StemCase(32, 224)]  # ConvFirstNet-H200 and -M; --case 16:224 adds ConvFirstNet-S's


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


def bench_case(case: StemCase, timer: Timer, ceilings: dict, modes: list[str]) -> dict:
    from cuda_kernels import stem

    torch.manual_seed(0)
    block = make_stem(case)
    x = torch.randn(case.batch, 3, case.size, case.size, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last)
    weights = stem.prepare_weights(stem.FoldedStem.from_stem(block))
    with torch.no_grad(), reference_precision():
        exact = block.double()(x.double())
    with torch.no_grad():
        block_fp16 = block.half()
        torch_error = relative_error(block_fp16(x), exact)
    entry = {**asdict(case), "name": case.name, "macs": case.macs, "flops": 2 * case.macs,
             "dram_bytes": case.dram_bytes, "backends": {},
             "correctness": {"torch_fp16_rel_error": torch_error, "variants": {}}}
    time_fused_variants(entry, (0,), lambda v, out: stem.run(x, weights, out=out),
                        lambda: torch.full_like(exact, float("nan"), dtype=torch.float16).contiguous(
                            memory_format=torch.channels_last), exact, timer, case, ceilings)
    time_eager(entry, block_fp16, x, timer, case, ceilings)
    for mode in modes:
        time_compiled(entry, block_fp16, x, exact, mode, timer, case, ceilings)
    summarize_speedups(entry)
    return entry


def row(r: dict) -> str:
    f = r["backends"].get("cuda_kernels")
    if f is None:
        return f"{r['name']:34s} FAILED correctness {r['correctness']}"
    base = " ".join(f"{k}={v['latency_ms']['median'] * 1e3:.1f}us" for k, v in r["backends"].items()
                    if not k.startswith("cuda_kernels"))
    return (f"{r['name']:34s} fused {f['latency_ms']['median'] * 1e3:7.1f}us {f['tflops']:6.1f} TFLOP/s "
            f"{f['gbps']:7.1f} GB/s bound {100 * f['waterline_fraction_datasheet']:5.1f}% | {base}"
            + (f" | x{r['speedup_vs_strongest']:.2f} vs {r['strongest_baseline']}" if "strongest_baseline" in r else ""))


def parse_case(text: str) -> StemCase:
    return StemCase(*(int(v) for v in text.split(":")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--case", action="append", type=parse_case, help="C1:size[:batch], e.g. 32:224")
    parser.add_argument("--modes", default="default,freezing",
                        help="torch.compile modes to time beside eager: default, freezing ('' for none)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--hardware", default="h200-sxm")
    args = parser.parse_args(argv)
    cases = args.case or CASES
    from cuda_kernels.stem import _extension

    modes, command, build_s, timer, ceilings = prepare("cuda_kernels.bench_stem", argv, args, _extension)
    backends = ["cuda_kernels", "eager", *(f"inductor_{m}" for m in modes)]
    bench_cases(args.out, command, "convfirst_stem", backends, cases,
                lambda case: bench_case(case, timer, ceilings, modes), row, timer, ceilings, build_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
