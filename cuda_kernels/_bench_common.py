"""The harness shared by the block benchmarks (bench, bench_s2, bench_c512, bench_stem, bench_networks,
mbconv_bench): ceilings, rates, the command line, and for the one-kernel ConvFirst benchmarks the variant
loop (correctness before timing), the PyTorch baselines (eager, torch.compile with or without freezing)
and the measurement file rewritten after every case."""

from __future__ import annotations

import shlex
import sys
import time

import torch

from perfmodel.harness import Timer, environment, relative_error


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


def time_fused_variants(entry: dict, variants, run, new_out, exact: torch.Tensor, timer: Timer, case,
                        ceilings: dict) -> None:
    """Each kernel variant's error against `exact` first (``run(variant, out)`` into a fresh
    ``new_out()``), then its latency (``run(variant, None)``) if within 2x PyTorch fp16's; the
    fastest that passed is ``entry["backends"]["cuda_kernels"]``."""
    torch_error = entry["correctness"]["torch_fp16_rel_error"]
    fused = {}
    for variant in variants:
        err = relative_error(run(variant, new_out()), exact)
        ok = 0 < torch_error and err <= 2 * torch_error
        entry["correctness"]["variants"][variant] = {"rel_error": err, "passed": ok}
        if ok:
            lat = timer(lambda v=variant: run(v, None))
            fused[variant] = {"latency_ms": lat, **rate_metrics(case, lat["median"], ceilings)}
            entry["backends"][f"cuda_kernels_v{variant}"] = fused[variant]
    if fused:
        best = min(fused, key=lambda v: fused[v]["latency_ms"]["median"])
        entry["backends"]["cuda_kernels"] = {"variant": best, **fused[best]}


def time_eager(entry: dict, block_fp16, x: torch.Tensor, timer: Timer, case, ceilings: dict) -> None:
    """PyTorch eager (cudnn.benchmark as `prepare` sets it) as backend "eager"."""
    with torch.no_grad():
        lat = timer(lambda: block_fp16(x))
    entry["backends"]["eager"] = {"latency_ms": lat, **rate_metrics(case, lat["median"], ceilings)}


def time_compiled(entry: dict, block_fp16, x: torch.Tensor, exact: torch.Tensor, mode: str, timer: Timer, case,
                  ceilings: dict, freezing: bool = False, key: str | None = None) -> None:
    """torch.compile in `mode` ("default" is inductor's default), a fresh, static compile per shape
    (torch._dynamo.reset() first; NOTES.md, v2), with Inductor's freezing on or off (weights
    constant-folded, as `perfmodel bench --freezing` compiles networks); compile_s is the compile and
    first call, as cuda_kernels.bench records it. Backend `key`, by default "inductor_<mode>"."""
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    with torch.no_grad(), inductor_config.patch(freezing=freezing):
        t0 = time.perf_counter()
        compiled = torch.compile(block_fp16, mode=None if mode == "default" else mode, dynamic=False)
        err = relative_error(compiled(x), exact)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        lat = timer(lambda: compiled(x))
    entry["backends"][key or f"inductor_{mode}"] = {"latency_ms": lat, "compile_s": compile_s, "rel_error": err,
                                                    **({"freezing": True} if freezing else {}),
                                                    **rate_metrics(case, lat["median"], ceilings)}


def time_torch_baselines(entry: dict, block_fp16, x: torch.Tensor, exact: torch.Tensor, modes: list[str],
                         timer: Timer, case, ceilings: dict) -> None:
    """PyTorch eager, then each torch.compile mode without freezing (`time_compiled`)."""
    time_eager(entry, block_fp16, x, timer, case, ceilings)
    for mode in modes:
        time_compiled(entry, block_fp16, x, exact, mode, timer, case, ceilings)


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
