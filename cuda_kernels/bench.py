"""Benchmark the block-fusion kernels beside PyTorch eager and torch.compile, in one run.

    python -m cuda_kernels.bench --out measurements.json

Per shape: correctness against a float32 reference first, then the median latency (CUDA
events, L2 flushed before every repeat) of each kernel variant, of the block under PyTorch
eager and under torch.compile, with TFLOP/s, GB/s and the fraction of the block-plan
waterline bound reached. The ceilings are the hardware config's (`--hardware`, default
h200-sxm: the datasheet) and the ones measured in the same run (a cuBLAS fp16 8192^3 product
and a large device-to-device copy). Timing, environment, error and the file format are
perfmodel's one harness (perfmodel.harness, perfmodel.measure), as for model runs.
"""

from __future__ import annotations

import argparse
import os
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from cuda_kernels._bench_common import command_line, hardware_ceilings, rate_metrics
from cuda_kernels.ops import L_WIDTHS_SWITCH
from perfmodel.harness import Timer, environment, randomize_batchnorm, reference_precision, relative_error


@dataclass(frozen=True)
class Case:
    block: str  # "convfirst" or "ffn"
    channels: int
    expansion: int
    size: int
    batch: int = 128

    @property
    def name(self) -> str:
        return f"{self.block}_c{self.channels}_a{self.expansion}_{self.size}x{self.size}_n{self.batch}"

    @property
    def pixels(self) -> int:
        return self.batch * self.size * self.size

    @property
    def macs(self) -> int:
        c, hidden = self.channels, self.channels * self.expansion
        ffn = self.pixels * 2 * c * hidden
        return ffn + (self.pixels * c * 8 * 9 if self.block == "convfirst" else 0)

    @property
    def weight_elements(self) -> int:
        c, hidden = self.channels, self.channels * self.expansion
        ffn = 2 * c * hidden + hidden + c
        return ffn + (c * 8 * 9 + c if self.block == "convfirst" else 0)

    @property
    def dram_bytes(self) -> int:
        """Compulsory bytes of the block as one kernel: input + output + weights, fp16."""
        return 2 * (2 * self.pixels * self.channels + self.weight_elements)


DEFAULT_CASES = [
    Case("convfirst", 64, 4, 56),
    Case("convfirst", 128, 4, 28),
    Case("convfirst", 32, 4, 56),
    Case("convfirst", 256, 4, 14),
    Case("ffn", 256, 4, 28),
    Case("ffn", 256, 4, 14),
    Case("ffn", 128, 4, 28),
    Case("ffn", 64, 4, 56),
]
# ConvFirstNet-L's stride-1 widths (C not a power of two), behind ops.L_WIDTHS_SWITCH: --l-widths
# adds them and switches them on for this run (and its --isolate children)
L_CASES = [Case("convfirst", 96, 6, 56), Case("convfirst", 192, 6, 28)]


# ---- blocks ----

def make_block(case: Case) -> nn.Module:
    """The zoo block of `case` in inference form, with realistic batchnorm statistics folded."""
    from perfmodel.zoo import FFN, ConvFirstBlock, fold_batchnorm

    block = ConvFirstBlock(case.channels, case.expansion) if case.block == "convfirst" else FFN(case.channels, case.expansion)
    return fold_batchnorm(randomize_batchnorm(block)).cuda()


def fused_weights(case: Case, block: nn.Module):
    import cuda_kernels

    ffn = block.ffn if case.block == "convfirst" else block
    conv = (block.conv.weight, block.conv.bias) if case.block == "convfirst" else (None, None)
    return cuda_kernels.prepare_weights(ffn.expand.weight, ffn.expand.bias, ffn.project.weight, ffn.project.bias, *conv)


def bench_case(case: Case, timer: Timer, ceilings: dict, compile_mode: str | None, baselines: bool = True) -> dict:
    import cuda_kernels
    from cuda_kernels._build import load_extension

    torch.manual_seed(0)
    block = make_block(case)
    x = torch.randn(case.batch, case.channels, case.size, case.size, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last)
    weights = fused_weights(case, block)
    residual = case.block == "convfirst"

    with torch.no_grad(), reference_precision():
        ref = block.float()(x.float())
    with torch.no_grad():
        block_fp16 = block.half()
        eager_out = block_fp16(x)
    correctness = {"torch_fp16_rel_error": relative_error(eager_out, ref), "variants": {}}

    entry = {**asdict(case), "name": case.name, "macs": case.macs, "flops": 2 * case.macs,
             "dram_bytes": case.dram_bytes, "backends": {}}
    variants = {}
    to_run = list(range(load_extension().num_variants))
    if cuda_kernels.ops.wgmma_available(weights, x.device):
        to_run.append(cuda_kernels.ops.WGMMA_VARIANT)
    for variant in to_run:
        out = torch.full_like(x, float("nan"))
        got = cuda_kernels.run_block(x, weights, residual, variant=variant, out=out)
        torch.cuda.synchronize()
        err = relative_error(got, ref)
        ok = err <= 2 * correctness["torch_fp16_rel_error"]
        correctness["variants"][variant] = {"rel_error": err, "passed": ok}
        if not ok:
            continue
        lat = timer(lambda v=variant: cuda_kernels.run_block(x, weights, residual, variant=v))
        variants[variant] = {"latency_ms": lat, **rate_metrics(case, lat["median"], ceilings)}
    entry["correctness"] = correctness
    for variant, result in variants.items():
        entry["backends"][f"cuda_kernels_v{variant}"] = result
    if variants:
        best = min(variants, key=lambda v: variants[v]["latency_ms"]["median"])
        entry["backends"]["cuda_kernels"] = {"variant": best, **variants[best]}

    if not baselines:
        return entry
    with torch.no_grad():
        lat = timer(lambda: block_fp16(x))
        entry["backends"]["eager"] = {"latency_ms": lat, **rate_metrics(case, lat["median"], ceilings)}
        # A fresh, static compile per shape: without the reset, dynamo turns on dynamic shapes
        # after it has seen a second shape of the same code and the later baselines get slower.
        torch._dynamo.reset()
        t0 = time.perf_counter()
        compiled = torch.compile(block_fp16, mode=compile_mode, dynamic=False)
        compiled_out = compiled(x)
        torch.cuda.synchronize()
        entry["inductor_compile_s"] = time.perf_counter() - t0
        correctness["inductor_rel_error"] = relative_error(compiled_out, ref)
        lat = timer(lambda: compiled(x))
        entry["backends"]["inductor"] = {"latency_ms": lat, "mode": compile_mode or "default",
                                         **rate_metrics(case, lat["median"], ceilings)}
    fused = entry["backends"].get("cuda_kernels")
    if fused:
        t = fused["latency_ms"]["median"]
        entry["speedup_vs_inductor"] = entry["backends"]["inductor"]["latency_ms"]["median"] / t
        entry["speedup_vs_eager"] = entry["backends"]["eager"]["latency_ms"]["median"] / t
    return entry


def table(results: list[dict]) -> str:
    if any("eager" not in r["backends"] for r in results):
        return "\n".join(
            f"{r['name']:34s} " + " ".join(
                f"{k}={v['latency_ms']['median'] * 1e3:.1f}us/{v['tflops']:.0f}TF" for k, v in r["backends"].items()
            ) for r in results
        )
    head = f"{'case':34s} {'fused ms':>9s} {'var':>3s} {'TFLOP/s':>8s} {'GB/s':>7s} {'wl%meas':>7s} " \
           f"{'%mm':>5s} {'eager ms':>9s} {'compile ms':>10s} {'x comp':>6s} {'x eager':>7s}"
    rows = [head]
    for r in results:
        f = r["backends"].get("cuda_kernels")
        e, i = r["backends"]["eager"], r["backends"]["inductor"]
        if f is None:
            rows.append(f"{r['name']:34s} FAILED correctness {r['correctness']}")
            continue
        rows.append(
            f"{r['name']:34s} {f['latency_ms']['median']:9.4f} {f['variant']:3d} {f['tflops']:8.1f} {f['gbps']:7.0f} "
            f"{100 * f['waterline_fraction_measured']:6.1f}% {100 * f['fraction_of_measured_matmul']:4.0f}% "
            f"{e['latency_ms']['median']:9.4f} {i['latency_ms']['median']:10.4f} "
            f"{r['speedup_vs_inductor']:6.2f} {r['speedup_vs_eager']:7.2f}"
        )
    return "\n".join(rows)


def run_isolated(case: Case, args, ceilings: dict) -> dict:
    """Bench one case in a child process, with the parent's ceilings, and return its result."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "case.json")
        cmd = [sys.executable, "-m", "cuda_kernels.bench", "--out", out, "--case",
               f"{case.block}:{case.channels}:{case.expansion}:{case.size}:{case.batch}",
               "--warmup", str(args.warmup), "--repeats", str(args.repeats), "--ceilings", json.dumps(ceilings)]
        if args.compile_mode:
            cmd += ["--compile-mode", args.compile_mode]
        if args.no_baselines:
            cmd.append("--no-baselines")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)["results"]["cases"][0]


def parse_case(text: str) -> Case:
    block, c, a, s, *n = text.split(":")
    return Case(block, int(c), int(a), int(s), *(int(v) for v in n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="measurement JSON to write")
    parser.add_argument("--case", action="append", type=parse_case,
                        help="block:C:alpha:size[:batch], e.g. convfirst:64:4:56 (repeatable; default: the standard set)")
    parser.add_argument("--l-widths", action="store_true",
                        help="add ConvFirstNet-L's C = 96 and 192 blocks (a6, 56x56 and 28x28) and switch them on "
                             "(CUDA_KERNELS_L_WIDTHS; on unless set to 0)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--compile-mode", default=None, help="torch.compile mode (default: inductor's default)")
    parser.add_argument("--hardware", default="h200-sxm",
                        help="perfmodel hardware config whose fp16 peak and DRAM bandwidth are the datasheet ceilings")
    parser.add_argument("--no-baselines", action="store_true", help="time only the fused kernels (diagnostics)")
    parser.add_argument("--isolate", action="store_true",
                        help="run each case in a fresh Python process (torch.compile baselines drift late in a "
                             "long process that has compiled many blocks; see NOTES.md)")
    parser.add_argument("--ceilings", help=argparse.SUPPRESS)  # JSON from the parent of --isolate
    args = parser.parse_args(argv)
    if args.repeats < 20:
        parser.error("use at least 20 repeats")
    cases = args.case or ([] if args.l_widths else DEFAULT_CASES)
    if args.l_widths:
        os.environ.setdefault(L_WIDTHS_SWITCH, "1")
        cases = cases + L_CASES
    command = command_line("cuda_kernels.bench", argv)

    from cuda_kernels._build import load_extension

    t0 = time.perf_counter()
    load_extension()
    build_s = time.perf_counter() - t0
    timer = Timer(args.warmup, args.repeats, flush_l2=True)
    if args.ceilings:
        ceilings = json.loads(args.ceilings)
    else:
        ceilings = hardware_ceilings(args.hardware, timer)
    measured = ceilings["measured"]
    print(f"measured ceilings: fp16 matmul {measured['fp16_matmul_tflops']:.1f} TFLOP/s, "
          f"copy {measured['copy_gbps']:.0f} GB/s", flush=True)
    results = []
    for case in cases:
        if args.isolate:
            results.append(run_isolated(case, args, ceilings))
        else:
            results.append(bench_case(case, timer, ceilings, args.compile_mode, not args.no_baselines))
        print(table(results[-1:]).splitlines()[-1], flush=True)
    from perfmodel.measure import write_measurement

    write_measurement(
        args.out, command=command, environment=environment(),
        workload={
            "kind": "blocks",
            "blocks": sorted({c.block for c in cases}),
            "dtype": "float16",
            "memory_format": "channels_last",
            "backends": ["cuda_kernels"] if args.no_baselines else ["cuda_kernels", "eager", "inductor"],
            "plan": "block (one kernel per block; bytes = input + output + weights)",
        },
        method={
            **timer.describe(),
            "cuda_graphs": False,
            "process_per_case": args.isolate,
            "inductor": "torch.compile(block, dynamic=False) after torch._dynamo.reset(), per shape",
            "correctness": "rel. L2 error vs float32 (no TF32) must be <= 2x PyTorch fp16 error before timing",
            "extension_build_s": build_s,
        },
        results={"ceilings": ceilings, "cases": results})
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
