"""Benchmark the fused MBConv beside PyTorch eager and torch.compile, per block shape of a
torchvision EfficientNet, in one run.

    python -m cuda_kernels.mbconv_bench --out mbconv.json [--model efficientnet_b0] [--batch 128]

Per distinct MBConv shape (random weights, realistic BN statistics): correctness against a
float32 reference first (the fused block within 2x PyTorch fp16's error, else it is not
timed), then median latencies (CUDA events, L2 flushed before every call) of the fused block,
the block in eager PyTorch (BN unfolded, as the network runs it) and under torch.compile
(static shapes, inductor freezing on, cudnn.benchmark on) in each `--compile-mode`, beside the
block-plan bound T_min (perfmodel, `block:MBConv`: one kernel, input + output + weights) and
the write-back design's T_min (the tensor-machine program this version implements). The
compile baselines stop when `--budget-s` is spent, so the run ends inside a device call; the
file is rewritten after every shape.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from functools import partial

import torch
from torch import nn

from cuda_kernels._bench_common import command_line
from perfmodel.harness import (Timer, cuda_graph_replay, environment, randomize_batchnorm, reference_precision,
                              relative_error)

RESOLUTION = {"efficientnet_b0": 224, "efficientnet_b2": 288}


def network_blocks(model: nn.Module, size: int) -> list[tuple[str, nn.Module, tuple[int, int, int]]]:
    """(path, block, input (C, H, W)) of every torchvision MBConv in the model, in order."""
    from torchvision.models.efficientnet import MBConv

    found, names = [], {m: n for n, m in model.named_modules()}
    meta = copy.deepcopy(model).to("meta")
    originals = dict(zip(meta.modules(), model.modules()))
    hooks = [m.register_forward_pre_hook(lambda m, a: found.append((names[originals[m]], originals[m],
                                                                    tuple(a[0].shape[1:]))))
             for m in meta.modules() if isinstance(m, MBConv)]
    with torch.no_grad():
        meta(torch.empty(1, 3, size, size, device="meta"))
    for h in hooks:
        h.remove()
    return found


def describe(block: nn.Module, shape: tuple[int, int, int]) -> dict:
    dw = block.block[-3][0]
    c, h, w = shape
    return {"c": c, "h": h, "w": w, "c_out": block.out_channels, "hidden": dw.out_channels,
            "alpha": dw.out_channels // c, "k": dw.kernel_size[0], "stride": dw.stride[0],
            "squeeze": block.block[-2].fc1.out_channels, "residual": bool(block.use_res_connect)}


def bounds(d: dict, batch: int, hardware: str) -> dict:
    """The block plan's T_min (perfmodel on torchvision's block) and the write-back program's."""
    import perfmodel
    from perfmodel.build import meta_init
    from perfmodel.machine_programs import PROGRAMS
    from torchvision.models.efficientnet import MBConv, MBConvConfig

    hw = perfmodel.load_hardware(hardware)
    cnf = MBConvConfig(d["alpha"], d["k"], d["stride"], d["c"], d["c_out"], 1)
    with meta_init():
        block = MBConv(cnf, 0.0, partial(nn.BatchNorm2d, eps=1e-3)).eval()
    totals = perfmodel.analyze(block, (d["c"], d["h"], d["w"]), batch=batch, plan="block:MBConv", hardware=hw,
                               dtype="float16").totals
    out = {"block_t_min_us": totals.t_min_s * 1e6, "block_flops": totals.flops, "block_dram_bytes": totals.dram_bytes}
    params = {"n": batch, **{k: d[k] for k in ("h", "w", "c", "c_out", "alpha", "k", "stride", "squeeze")}}
    try:  # whole-image tiles: the write-back program's DRAM bytes do not depend on the tiling
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its local tiles would not fit; the bytes are what count
            report = PROGRAMS["mbconv_write_back"](**params, tile=d["h"] // d["stride"], chunk=d["hidden"]).analyze(hw)
        out["write_back_t_min_us"] = report.t_min_s * 1e6
    except Exception as exc:  # a diagnostic column only
        out["write_back_error"] = f"{type(exc).__name__}: {exc}"
    return out


def bench_block(path: str, block: nn.Module, shape, batch: int, timer: Timer, modes: list[str], deadline: float,
                row: dict, versions: tuple[int, ...]) -> None:
    import torch._inductor.config as inductor_config

    import cuda_kernels
    from perfmodel.zoo import fold_batchnorm

    block = block.cuda().half().to(memory_format=torch.channels_last)
    folded = fold_batchnorm(block)
    x = torch.randn(batch, *shape, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    from cuda_kernels.mbconv import block_params

    fused = {v: cuda_kernels.FusedMBConv(block_params(folded), version=v) for v in versions}
    with torch.no_grad(), reference_precision():
        ref = copy.deepcopy(folded).float()(x.float())
    correctness = row["correctness"] = {}
    with torch.no_grad():
        torch_err = relative_error(block(x), ref)
        for v, module in fused.items():
            err = relative_error(module(x), ref)
            correctness[f"v{v}"] = {"relative_error": err, "torch_fp16_relative_error": torch_err,
                                    "passed": 0 < torch_err and err <= 2 * torch_err}
    flops = row["block_flops"]
    results = row["backends"] = {}

    def record(name: str, fn, **extra):
        lat = timer(fn)
        results[name] = {"latency_ms": lat, "tflops": flops / (lat["median"] * 1e-3) / 1e12,
                         "fraction_of_block_bound": row["block_t_min_us"] * 1e-3 / lat["median"], **extra}
        replay = cuda_graph_replay(fn)  # GPU time alone: small blocks are CPU-bound when called from Python
        if replay is not None:
            glat = timer(replay)
            results[name].update(graph_latency_ms=glat, graph_tflops=flops / (glat["median"] * 1e-3) / 1e12)

    with torch.no_grad():
        for v, module in fused.items():
            if correctness[f"v{v}"]["passed"]:
                record(f"cuda_kernels_v{v}", lambda m=module: m(x), version=v)
        versions = [k for k in results if k.startswith("cuda_kernels_v")]
        if versions:
            best = min(versions, key=lambda k: results[k]["latency_ms"]["median"])
            results["cuda_kernels"] = dict(results[best])
            row["kernels_us_by_version"] = {k: kernel_times(lambda m=fused[results[k]["version"]]: m(x)) for k in versions}
            row["kernels_us"] = row["kernels_us_by_version"][best]
        record("eager", lambda: block(x))
        inductor_config.freezing = True
        for mode in modes:
            if time.monotonic() > deadline:
                results[f"inductor_{mode}"] = {"skipped": "time budget spent"}
                continue
            torch._dynamo.reset()
            t0 = time.perf_counter()
            compiled = torch.compile(block, mode=None if mode == "default" else mode, dynamic=False)
            compiled(x)
            torch.cuda.synchronize()
            record(f"inductor_{mode}", lambda: compiled(x), compile_s=time.perf_counter() - t0, freezing=True)
    if "cuda_kernels" in results:
        t = results["cuda_kernels"]["latency_ms"]["median"]
        timed = [v["latency_ms"]["median"] for k, v in results.items()
                 if not k.startswith("cuda_kernels") and "latency_ms" in v]
        row["speedup_vs_best_baseline"] = min(timed) / t
        compiled = [v["latency_ms"]["median"] for k, v in results.items() if k.startswith("inductor_") and "latency_ms" in v]
        if compiled:
            row["speedup_vs_best_compile"] = min(compiled) / t
        graph = [v["graph_latency_ms"]["median"] for k, v in results.items()
                 if not k.startswith("cuda_kernels") and "graph_latency_ms" in v]
        if graph and "graph_latency_ms" in results["cuda_kernels"]:
            row["graph_speedup_vs_best_baseline"] = min(graph) / results["cuda_kernels"]["graph_latency_ms"]["median"]


def kernel_times(fn, calls: int = 5) -> dict[str, float]:
    """GPU time per call of each kernel `fn` launches, in microseconds (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        t = e.cuda_time_total if t is None else t
        if t > 0:
            times[e.key[:80]] = t / calls
    return times


def table(rows: list[dict], modes: list[str]) -> str:
    """The blocks as text: launched one by one (fused, eager, each torch.compile mode; "x best": the best baseline
    over the fused time), then as CUDA-graph replays ("graph us": fused, eager, the best torch.compile mode; "x
    graph": the best baseline over the fused time, the honest ratio where launches dominate a small block)."""
    head = (f"{'block':14s} {'C->C_out':>9s} {'k':>2s} {'s':>2s} {'H':>4s} {'fused us':>9s} {'TFLOP/s':>8s} "
            f"{'Tmin us':>8s} {'%bound':>6s} {'eager us':>9s} " + " ".join(f"{m[:12]:>12s}" for m in modes)
            + f" {'x best':>6s} {'graph us: fused':>15s} {'eager':>6s} {'compile':>7s} {'x graph':>7s}")
    lines = [head]
    for r in rows:
        b = r.get("backends", {})

        def us(name):
            v = b.get(name, {})
            return f"{v['latency_ms']['median'] * 1e3:.1f}" if "latency_ms" in v else "-"

        def graph_us(name):
            v = b.get(name, {})
            return f"{v['graph_latency_ms']['median'] * 1e3:.1f}" if "graph_latency_ms" in v else "-"

        compiled = [b[f"inductor_{m}"]["graph_latency_ms"]["median"] for m in modes
                    if "graph_latency_ms" in b.get(f"inductor_{m}", {})]
        best_compile = f"{min(compiled) * 1e3:.1f}" if compiled else "-"
        x_graph = f"{r['graph_speedup_vs_best_baseline']:.2f}" if "graph_speedup_vs_best_baseline" in r else "-"
        f = b.get("cuda_kernels")
        lines.append(
            f"{r['path']:14s} {r['c']:>4d}->{r['c_out']:<4d} {r['k']:>2d} {r['stride']:>2d} {r['h']:>4d} {us('cuda_kernels'):>9s} "
            f"{(f['tflops'] if f else 0):8.1f} {r['block_t_min_us']:8.1f} "
            f"{(100 * f['fraction_of_block_bound'] if f else 0):5.1f}% {us('eager'):>9s} "
            + " ".join(f"{us('inductor_' + m):>12s}" for m in modes)
            + f" {r.get('speedup_vs_best_baseline', 0):6.2f} {graph_us('cuda_kernels'):>15s} {graph_us('eager'):>6s} "
            f"{best_compile:>7s} {x_graph:>7s}"
            + (f"  v{f['version']}; " + ", ".join(f"{k.split('<')[0].split('(')[0][-14:]} {v:.0f}"
                                               for k, v in r.get("kernels_us", {}).items()) if f else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="measurement JSON to write")
    parser.add_argument("--model", default="efficientnet_b0", choices=sorted(RESOLUTION))
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--compile-mode", action="append", dest="modes",
                        help="torch.compile mode (repeatable; default: default, max-autotune-no-cudagraphs)")
    parser.add_argument("--budget-s", type=float, default=150.0,
                        help="no new torch.compile baseline starts after this many seconds")
    parser.add_argument("--hardware", default="h200-sxm")
    parser.add_argument("--block", action="append", help="only these module paths (repeatable)")
    parser.add_argument("--version", action="append", type=int, dest="versions",
                        help="kernel-1 versions to time (repeatable; default: all)")
    args = parser.parse_args(argv)
    modes = args.modes or ["default", "max-autotune-no-cudagraphs"]
    from cuda_kernels.mbconv import VERSIONS

    versions = tuple(args.versions or VERSIONS)
    if not set(versions) <= set(VERSIONS):
        parser.error(f"--version must be in {VERSIONS}")
    command = command_line("cuda_kernels.mbconv_bench", argv)
    start = time.monotonic()
    torch.backends.cudnn.benchmark = True
    import torchvision

    from cuda_kernels._build import load_mbconv_extension
    from perfmodel.measure import write_measurement

    t0 = time.perf_counter()
    load_mbconv_extension()
    build_s = time.perf_counter() - t0
    torch.manual_seed(0)
    model = randomize_batchnorm(getattr(torchvision.models, args.model)()).eval()
    seen, rows = set(), []
    timer = Timer(args.warmup, args.repeats, flush_l2=True)
    for path, block, shape in network_blocks(model, RESOLUTION[args.model]):
        d = describe(block, shape)
        key = tuple(sorted(d.items()))
        if key in seen or (args.block and path not in args.block):
            continue
        seen.add(key)
        row = {"path": path, "batch": args.batch, **d, **bounds(d, args.batch, args.hardware)}
        rows.append(row)
        try:
            bench_block(path, block, shape, args.batch, timer, modes, start + args.budget_s, row, versions)
        except Exception as exc:  # recorded, and the next shape still runs
            row["error"] = f"{type(exc).__name__}: {exc}"
        print(table([row], modes).splitlines()[-1], flush=True)
        write_measurement(
            args.out, command=command, environment=environment(),
            workload={"kind": "blocks", "blocks": ["torchvision MBConv"], "model": args.model, "batch": args.batch,
                      "dtype": "float16", "memory_format": "channels_last",
                      "backends": ["cuda_kernels", "eager", *(f"inductor_{m}" for m in modes)],
                      "plan": "block:MBConv (one kernel per block; bytes = input + output + weights)"},
            method={**timer.describe(), "cudnn_benchmark": True,
                    "cuda_graphs": "each backend timed twice: called from Python (latency_ms) and as the "
                                   "replay of a CUDA graph of one call (graph_latency_ms, GPU time alone)",
                    "eager": "torchvision's block, BN unfolded, fp16 channels-last",
                    "inductor": "torch.compile(block, mode, dynamic=False) after torch._dynamo.reset(), "
                                "inductor freezing on, per shape",
                    "correctness": "rel. L2 error vs float32 (no TF32) must be <= 2x PyTorch fp16 error "
                                   "before the fused block is timed",
                    "kernel": "cuda_kernels/csrc/mbconv*: write-back design, three launches (version 7: two); versions 1-9 "
                              "(NOTES.md; --version picks), each timed; cuda_kernels = the fastest correct one",
                    "kernels_us": "torch.profiler, GPU time per call of each kernel of the fastest version "
                                  "(kernels_us_by_version: of every version timed)",
                    "extension_build_s": build_s},
            results={"cases": rows})
    print(table(rows, modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
