"""The harness shared by the block benchmarks (bench, bench_s2, bench_c512, bench_stem, bench_networks,
mbconv_bench): ceilings, rates, the command line, and for the one-kernel ConvFirst benchmarks the variant
loop (correctness before timing), the PyTorch baselines (eager, torch.compile with or without freezing)
and the measurement file rewritten after every case."""

from __future__ import annotations

import shlex
import sys
import time

import torch

from perfmodel.harness import Timer, cuda_graph_replay, environment, reference_precision, relative_error


def measure_ceilings(timer: Timer) -> dict:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    mm = timer(lambda: torch.mm(a, b))
    del a, b
    src = torch.randn(1 << 30, device="cuda", dtype=torch.float16)  # 2 GiB
    dst = torch.empty_like(src)
    copy = timer(lambda: dst.copy_(src))
    copy_bytes = 2 * src.numel() * src.element_size()
    del src, dst
    return {
        "fp16_matmul_tflops": 2 * n**3 / (mm["median"] * 1e-3) / 1e12,
        "fp16_matmul": {"m": n, "n": n, "k": n, "latency_ms": mm, "data": "randn"},
        "copy_gbps": copy_bytes / (copy["median"] * 1e-3) / 1e9,
        "copy": {"bytes_read_plus_written": copy_bytes, "latency_ms": copy},
    }


def rate_metrics(case: Case, latency_ms: float, ceilings: dict) -> dict:
    """Rates and waterline fractions against the config's (`ceilings["datasheet"]`) and the
    measured (`ceilings["measured"]`) fp16 matmul and copy ceilings."""
    seconds = latency_ms * 1e-3
    flops = 2 * case.macs

    def waterline_ms(tflops: float, gbps: float) -> float:
        return 1e3 * max(flops / (tflops * 1e12), case.dram_bytes / (gbps * 1e9))

    datasheet, measured = ceilings["datasheet"], ceilings["measured"]
    t_data = waterline_ms(datasheet["fp16_tflops"], datasheet["dram_gbps"])
    t_meas = waterline_ms(measured["fp16_matmul_tflops"], measured["copy_gbps"])
    return {
        "tflops": flops / seconds / 1e12,
        "gbps": case.dram_bytes / seconds / 1e9,
        "waterline_ms_datasheet": t_data,
        "waterline_fraction_datasheet": t_data / latency_ms,
        "waterline_ms_measured": t_meas,
        "waterline_fraction_measured": t_meas / latency_ms,
        "fraction_of_measured_matmul": flops / seconds / 1e12 / measured["fp16_matmul_tflops"],
    }


def hardware_ceilings(hardware: str, timer: Timer) -> dict:
    """The hardware config's fp16 peak and DRAM bandwidth (datasheet) and the ones measured now."""
    from perfmodel.hardware import load_hardware

    hw = load_hardware(hardware)
    return {"datasheet": {"name": hw.name, "fp16_tflops": hw.peak_tflops["float16"], "dram_gbps": hw.dram_gbps},
            "measured": measure_ceilings(timer)}


def command_line(module: str, argv: list[str] | None) -> str:
    """How this run was started, for the measurement file."""
    return f"python -m {module} " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))


def prepare(module: str, argv: list[str] | None, args, load_extension):
    """What every block benchmark does before its cases: the torch.compile modes asked for
    (`args.modes`, comma-separated), its command line, cudnn.benchmark on, its extension built
    (timed), the timer (L2 flushed) and the hardware's ceilings.
    Returns (modes, command, build_s, timer, ceilings)."""
    modes = [m for m in args.modes.split(",") if m]
    command = command_line(module, argv)
    torch.backends.cudnn.benchmark = True
    t0 = time.perf_counter()
    load_extension()
    build_s = time.perf_counter() - t0
    timer = Timer(args.warmup, args.repeats, flush_l2=True)
    return modes, command, build_s, timer, hardware_ceilings(args.hardware, timer)


MODES_HELP = "torch.compile modes to time beside eager ('' for none)"


def add_common_arguments(parser, modes: str, modes_help: str = MODES_HELP) -> None:
    """--modes (default `modes`), then `add_timing_arguments`'s: the arguments `prepare` reads."""
    parser.add_argument("--modes", default=modes, help=modes_help)
    add_timing_arguments(parser)


def add_timing_arguments(parser) -> None:
    """--warmup, --repeats (the timer's) and --hardware (the datasheet ceilings')."""
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--hardware", default="h200-sxm")


def backend_names(modes: list[str], *others: str, eager: bool = True) -> list[str]:
    """The measurement file's backends: the kernel, `others`, eager (if `eager`), one per torch.compile mode."""
    return ["cuda_kernels", *others, *(["eager"] if eager else []), *(f"inductor_{m}" for m in modes)]


def run_benchmark(module: str, argv: list[str] | None, args, load_extension, block: str, cases: list, bench_case, row,
                  backends) -> list[dict]:
    """`prepare`, then `bench_cases` into ``args.out`` with ``bench_case(case, timer, ceilings, modes)`` and the
    backends ``backends(modes)``."""
    modes, command, build_s, timer, ceilings = prepare(module, argv, args, load_extension)
    return bench_cases(args.out, command, block, backends(modes), cases,
                       lambda case: bench_case(case, timer, ceilings, modes), row, timer, ceilings, build_s)


def random_nhwc(batch: int, channels: int, size: int) -> torch.Tensor:
    """A random float16 CUDA input [batch, channels, size, size] in channels_last memory."""
    x = torch.randn(batch, channels, size, size, device="cuda", dtype=torch.float16)
    return x.contiguous(memory_format=torch.channels_last)


def reference(block, x: torch.Tensor) -> tuple[torch.Tensor, object, float]:
    """(exact, block_fp16, torch_error): the block in float64 on x, the block itself in float16 (converted
    in place) and PyTorch fp16's relative error against float64."""
    with torch.no_grad(), reference_precision():
        exact = block.double()(x.double())
    with torch.no_grad():
        block_fp16 = block.half()
        torch_error = relative_error(block_fp16(x), exact)
    return exact, block_fp16, torch_error


def case_entry(case, torch_error: float, head: dict, tail: dict | None = None) -> dict:
    """A case's entry before any timing: `head`, the case's MACs, FLOPs and bytes, `tail`, no backends yet,
    the PyTorch fp16 error."""
    return {**head, "macs": case.macs, "flops": 2 * case.macs, "dram_bytes": case.dram_bytes, **(tail or {}),
            "backends": {}, "correctness": {"torch_fp16_rel_error": torch_error, "variants": {}}}


def nan_nhwc(like: torch.Tensor) -> torch.Tensor:
    """A float16 channels_last buffer shaped like `like`, filled with NaN (an output a kernel must overwrite)."""
    return torch.full_like(like, float("nan"), dtype=torch.float16).contiguous(memory_format=torch.channels_last)


def check_and_time_kernel(case, block, x: torch.Tensor, run, variants, head: dict, timer: Timer, ceilings: dict,
                          tail: dict | None = None) -> tuple[dict, torch.Tensor, object]:
    """A one-kernel case up to its baselines (the kernel's weights prepared first: this converts `block`):
    the float64 reference and PyTorch fp16's error (`reference`), the entry (`case_entry` with `head`, `tail`)
    and the kernel's `variants` checked and timed (`time_fused_variants`, ``run(variant, out)`` into NaN
    outputs shaped like the reference). Returns (entry, exact, block_fp16)."""
    exact, block_fp16, torch_error = reference(block, x)
    entry = case_entry(case, torch_error, head, tail)
    time_fused_variants(entry, variants, run, lambda: nan_nhwc(exact), exact, timer, case, ceilings)
    return entry, exact, block_fp16


GRAPH_REPLAY = "cuda graph replay"


def timed(fn, timer: Timer, graph: bool = False) -> dict:
    """A backend's timing: ``{"latency_ms": stats}`` of calling `fn` from Python; with `graph`, of replaying a
    CUDA graph of one call instead (``"timing": "cuda graph replay"``; every backend of a row alike, so the
    host's launch cost, which varies from run to run, is out of every comparison), the Python call's stats
    kept beside as ``python_call_latency_ms``. Where capture fails the Python call is the latency and
    ``timing`` says so."""
    call = timer(fn)
    if not graph:
        return {"latency_ms": call}
    replay = cuda_graph_replay(fn)
    if replay is None:
        return {"latency_ms": call, "timing": "python call (CUDA graph capture failed)"}
    return {"latency_ms": timer(replay), "timing": GRAPH_REPLAY, "python_call_latency_ms": call}


def time_fused_variants(entry: dict, variants, run, new_out, exact: torch.Tensor, timer: Timer, case,
                        ceilings: dict, graph: bool = False) -> None:
    """Each kernel variant's error against `exact` first (``run(variant, out)`` into a fresh
    ``new_out()``), then its latency (``run(variant, None)``, `timed`) if within 2x PyTorch fp16's; the
    fastest that passed is ``entry["backends"]["cuda_kernels"]``."""
    torch_error = entry["correctness"]["torch_fp16_rel_error"]
    fused = {}
    for variant in variants:
        err = relative_error(run(variant, new_out()), exact)
        ok = 0 < torch_error and err <= 2 * torch_error
        entry["correctness"]["variants"][variant] = {"rel_error": err, "passed": ok}
        if ok:
            t = timed(lambda v=variant: run(v, None), timer, graph)
            fused[variant] = {**t, **rate_metrics(case, t["latency_ms"]["median"], ceilings)}
            entry["backends"][f"cuda_kernels_v{variant}"] = fused[variant]
    if fused:
        best = min(fused, key=lambda v: fused[v]["latency_ms"]["median"])
        entry["backends"]["cuda_kernels"] = {"variant": best, **fused[best]}


def time_eager(entry: dict, block_fp16, x: torch.Tensor, timer: Timer, case, ceilings: dict,
               graph: bool = False) -> None:
    """PyTorch eager (cudnn.benchmark as `prepare` sets it) as backend "eager" (`timed`)."""
    with torch.no_grad():
        t = timed(lambda: block_fp16(x), timer, graph)
    entry["backends"]["eager"] = {**t, **rate_metrics(case, t["latency_ms"]["median"], ceilings)}


def time_compiled(entry: dict, block_fp16, x: torch.Tensor, exact: torch.Tensor, mode: str, timer: Timer, case,
                  ceilings: dict, freezing: bool = False, key: str | None = None, graph: bool = False) -> None:
    """torch.compile in `mode` ("default" is inductor's default), a fresh, static compile per shape
    (torch._dynamo.reset() first; NOTES.md, v2), with Inductor's freezing on or off (weights
    constant-folded, as `perfmodel bench --freezing` compiles networks); compile_s is the compile and
    first call, as cuda_kernels.bench records it; latency as `timed`. Backend `key`, by default
    "inductor_<mode>"."""
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    with torch.no_grad(), inductor_config.patch(freezing=freezing):
        t0 = time.perf_counter()
        compiled = torch.compile(block_fp16, mode=None if mode == "default" else mode, dynamic=False)
        err = relative_error(compiled(x), exact)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        t = timed(lambda: compiled(x), timer, graph)
    entry["backends"][key or f"inductor_{mode}"] = {**t, "compile_s": compile_s, "rel_error": err,
                                                    **({"freezing": True} if freezing else {}),
                                                    **rate_metrics(case, t["latency_ms"]["median"], ceilings)}


def time_torch_baselines(entry: dict, block_fp16, x: torch.Tensor, exact: torch.Tensor, modes: list[str],
                         timer: Timer, case, ceilings: dict) -> None:
    """PyTorch eager, then each torch.compile mode without freezing (`time_compiled`)."""
    time_eager(entry, block_fp16, x, timer, case, ceilings)
    for mode in modes:
        time_compiled(entry, block_fp16, x, exact, mode, timer, case, ceilings)


def record_speedups(entry: dict) -> None:
    """With a fused timing: entry["speedups"] (`speedups`); nothing without one."""
    if "cuda_kernels" in entry["backends"]:
        entry["speedups"] = speedups(entry)


def baseline_latencies(r: dict, variants: bool = False) -> str:
    """The row's ``name=latency`` list of the backends other than the kernel (and, with `variants`, its
    per-variant timings ``cuda_kernels_v<n>`` as well)."""
    return " ".join(f"{k}={v['latency_ms']['median'] * 1e3:.1f}us" for k, v in r["backends"].items()
                    if (k != "cuda_kernels" if variants else not k.startswith("cuda_kernels")))


def fused_latency(f: dict) -> str:
    """The row's ``fused <latency>us``."""
    return f"fused {f['latency_ms']['median'] * 1e3:7.1f}us"


def versus_strongest(r: dict) -> str:
    """`` | x<speedup> vs <strongest baseline>`` where `summarize_speedups` found one, else ''."""
    return f" | x{r['speedup_vs_strongest']:.2f} vs {r['strongest_baseline']}" if "strongest_baseline" in r else ""


def speedups_text(r: dict) -> str:
    """``x<speedup> vs <baseline>`` for each of the row's speedups."""
    return " ".join(f"x{v:.2f} vs {k}" for k, v in r.get("speedups", {}).items())


def speedups(entry: dict) -> dict[str, float]:
    """Each baseline's median latency over the fused kernel's (entry must have "cuda_kernels")."""
    t = entry["backends"]["cuda_kernels"]["latency_ms"]["median"]
    return {k: v["latency_ms"]["median"] / t for k, v in entry["backends"].items() if not k.startswith("cuda_kernels")}


def summarize_speedups(entry: dict) -> None:
    """With a fused timing: entry["speedups"] (`speedups`), the strongest (fastest) baseline and the
    speedup over it; nothing without one."""
    if "cuda_kernels" not in entry["backends"]:
        return
    ratios = speedups(entry)
    entry["speedups"] = ratios
    if ratios:
        strongest = min(ratios, key=lambda k: entry["backends"][k]["latency_ms"]["median"])
        entry["strongest_baseline"] = strongest
        entry["speedup_vs_strongest"] = ratios[strongest]


def bench_cases(path: str, command: str, block: str, backends: list[str], cases: list, bench_case, row,
                timer: Timer, ceilings: dict, build_s: float) -> list[dict]:
    """``bench_case(case)`` for each case, its ``row`` printed, and the measurement file rewritten
    after every case: a run stopped at its time limit keeps the cases it finished."""
    from perfmodel.measure import write_measurement

    results = []
    for case in cases:
        results.append(bench_case(case))
        print(row(results[-1]), flush=True)
        write_measurement(
            path, command=command, environment=environment(),
            workload={"kind": "blocks", "blocks": [block], "dtype": "float16", "memory_format": "channels_last",
                      "backends": backends, "plan": "block (one kernel per block; bytes = input + output + weights)"},
            method={**timer.describe(), "cuda_graphs": False, "cudnn_benchmark": True,
                    "inductor": "torch.compile(block, mode, dynamic=False) after torch._dynamo.reset(), per shape",
                    "correctness": "rel. L2 error vs the float64 zoo block <= 2x PyTorch fp16's before timing",
                    "extension_build_s": build_s, "cases_planned": [c.name for c in cases]},
            results={"ceilings": ceilings, "cases": results})
    return results
