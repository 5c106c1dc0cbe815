"""One table of every fused unit of the zoo's ConvFirstNets beside eager and torch.compile, from one run.

    python -m cuda_kernels.bench_networks --out networks.json [--models convfirstnet_s,convfirstnet_l]
        [--batch 128] [--repeats 30] [--no-autotune] [--no-freezing] [--budget-s 420] [--list]

Issue 10's acceptance table: "per block shape: latency, TFLOP/s, fraction of the block-plan bound, and
speedup over each baseline, all from one run".

What it measures. For each model named (default: convfirstnet_s, convfirstnet_m, convfirstnet_h200,
convfirstnet_l) the folded model is walked on the meta device (no weights, no GPU) the way
``cuda_kernels.replace_blocks`` walks a network, and every unique fused unit shape is collected with its
count in each model: the stem (3 -> C1 -> 2 C1, 224 x 224), each stride-1 ConvFirst block (C, alpha,
H x W), each stride-2 block (C -> 2C, alpha, input H x W), plus the classifier head (1x1 conv -> 1280,
ReLU, pool, linear; not a block: it runs in PyTorch in the fused network too). A shape shared by several
models (ConvFirstNet-M and -H200 share the stem and the head) is timed once. Per unit, at batch 128,
float16, channels-last, with the batchnorm statistics randomized (``harness.randomize_batchnorm``) and
folded, as the other block benchmarks build them (``bench.make_block``, ``bench_s2.make_block``,
``bench_stem.make_stem``):

1. the unit is wrapped and swapped with ``cuda_kernels.replace_blocks`` -- the mechanism and the
   switches (``CUDA_KERNELS_*``, their defaults unless set) the network uses -- and the file records the
   fused module, its kernel and the variant it launches, or every fallback with its reason;
2. the swapped unit's output is checked against the float64 unit (relative error <= 2x PyTorch fp16's),
   and only then timed (``_bench_common.time_fused_variants``): exactly the operator the network calls;
3. baselines on the same input: eager (cudnn.benchmark on), torch.compile default, and (unless
   ``--no-autotune``) torch.compile ``max-autotune-no-cudagraphs``; both compiled ones with Inductor's
   freezing on (as ``perfmodel bench --backend inductor --freezing``, the networks' baseline;
   ``--no-freezing`` turns it off), a fresh static compile per shape (``_bench_common.time_compiled``).

CUDA events, L2 flushed before every repeat, medians (``perfmodel.harness.Timer``); every backend timed as the
replay of a CUDA graph of one call (``--no-graphs``: called from Python; both are in the file). Session 8's first
H200 tables, timed from Python, gave torch.compile's units 1.5-3.7x apart from run to run (C = 512: 115, 367,
432 us): a compiled unit of several kernels runs as fast as the host launches it, and the fused unit, one
kernel, does not notice. The replay takes that out of every column alike. Each row records the GPU's
clocks, temperature, power and throttle reasons before it (``gpu_state``); at the end the first fused unit is
re-timed and the matmul ceiling re-measured (``results.drift``, a ``DRIFT`` line when either moved by more than
5%): session 7's all-model run drifted (late rows 1.2-2.2x slower than the same units alone) and nothing in the
file could say why. Per row: models and
counts, shape, kernel/variant, latency, TFLOP/s, the fraction of the block-plan bound (the datasheet
waterline ``_bench_common.rate_metrics`` gives every block benchmark: ops = 2 x MACs, bytes = input +
output + weights in fp16, h200-sxm), the speedup over each baseline. Per model: the sum over its units of
count x latency for the fused form (a unit that falls back counts with its torch.compile time, as the
network compiles the rest) and for each baseline, stem and blocks apart from the head: a sum of isolated
timings, not the network's end-to-end time.

Run time, measured on the H200 (session 8): ConvFirstNet-H200's nine units with every baseline, max-autotune
included, 422 s on a fresh machine (Inductor's caches cold) and 54 s again right after on the same machine (caches
warm); session 7's run of all four networks without max-autotune fitted its 420 s budget. The estimate made before
any run follows. ConvFirstNet-S, -M, -H200 and -L have 31 unique stem/block
shapes (S 8, M 8, H200 7 new beside M's stem, L 8) and 3 unique heads: 34 units. Per unit: building it
and the float64 reference ~1 s, swap + check + fused timing (10 + 30 launches) ~0.5 s, eager ~1 s,
torch.compile default with freezing ~3-8 s (this repository's files: median compile_s 3.6 s) + its
timing: ~7 s, plus ~20 s for the process's first compile and ~5 s for the ceilings: **~4.5 minutes for
everything but max-autotune**. max-autotune-no-cudagraphs costs ~30-60 s a unit (31 s for one MBConv
block; ConvFirstNet-H200's whole network did not finish in 330 s): all 34 would take 20-30 minutes. So it
runs as a second pass, heaviest units first (count x latency summed over the models), while the time
budget lasts: with the default ``--budget-s 420`` (7 minutes from the start of the run; ~8 with the last
baseline's overrun and the import) ~150 s are left after the first pass, so 2-5 units get it (the heaviest:
ConvFirstNet-L's 14 x C=384 and -H200's 14 x C=256 blocks first) and the file lists every skipped baseline;
``--budget-s 0`` (no budget) times every baseline of every unit (~25-35 minutes). The budget never skips a fused timing: before each
baseline the estimated cost (the median of that baseline's earlier costs, else a default) plus ~3 s per
unit still to fuse must fit in what is left. Without the extensions built beforehand add ~60-90 s
(``cuda_kernels/device_run_networks_table.sh`` builds them in parallel first). One process compiles all
34 units; cuda_kernels.bench saw torch.compile baselines drift late in long processes (its --isolate).
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from cuda_kernels._bench_common import (GRAPH_REPLAY, add_timing_arguments, case_entry, hardware_ceilings, prepare,
                                        random_nhwc, reference, summarize_speedups, time_compiled, time_eager,
                                        time_fused_variants)
from cuda_kernels.bench import Case
from cuda_kernels.bench_s2 import DownCase
from cuda_kernels.bench_stem import StemCase
from perfmodel.harness import Timer, environment, gpu_state, randomize_batchnorm

MODULE = "cuda_kernels.bench_networks"
DEFAULT_MODELS = ("convfirstnet_s", "convfirstnet_m", "convfirstnet_h200", "convfirstnet_l")
IMAGE_SIZE = 224  # the zoo specs' input (configs/models)
DEFAULT = "inductor_default"
AUTOTUNE_MODE = "max-autotune-no-cudagraphs"
AUTOTUNE = f"inductor_{AUTOTUNE_MODE}"
BASELINES = ("eager", DEFAULT, AUTOTUNE)
# seconds a baseline is assumed to cost before this run has timed one (then: the median of its costs)
DEFAULT_COST_S = {"eager": 3.0, DEFAULT: 15.0, AUTOTUNE: 60.0}
FUSED_COST_S = 3.0  # per unit still to do: build, float64 reference, swap, check, fused timing
SWITCH_PREFIX = "CUDA_KERNELS_"


@dataclass(frozen=True)
class HeadCase:
    """ConvFirstNet's classifier head: 1x1 conv (BN folded) C -> width, ReLU, global average pool, linear."""

    in_channels: int
    width: int
    classes: int
    size: int
    batch: int = 128

    @property
    def name(self) -> str:
        return f"head_c{self.in_channels}_{self.width}_{self.classes}_{self.size}x{self.size}_n{self.batch}"

    @property
    def macs(self) -> int:
        return self.batch * (self.size**2 * self.in_channels * self.width + self.width * self.classes)

    @property
    def weight_elements(self) -> int:
        return self.in_channels * self.width + self.width + self.width * self.classes + self.classes

    @property
    def dram_bytes(self) -> int:
        """Input + output + weights, fp16."""
        return 2 * (self.batch * self.size**2 * self.in_channels + self.batch * self.classes + self.weight_elements)


def kind(case) -> str:
    """"stem", "block" (stride 1), "down" (stride 2) or "head"."""
    return {StemCase: "stem", Case: "block", DownCase: "down", HeadCase: "head"}[type(case)]


def input_channels(case) -> int:
    return {"stem": 3, "block": getattr(case, "channels", 0), "down": getattr(case, "in_channels", 0),
            "head": getattr(case, "in_channels", 0)}[kind(case)]


def short_model(name: str) -> str:
    """convfirstnet_h200 -> H200."""
    return name.removeprefix("convfirstnet_").upper()


# ---- the walk (meta device: no weights, no GPU) ----

def unit_case(path: str, module: nn.Module, shape: tuple[int, ...], batch: int):
    """The bench case of one unit from its module and input shape, or a ValueError naming what differs
    from the shapes the cases describe (square inputs, stride-2 blocks C -> 2C, stems C1 -> 2 C1)."""
    from perfmodel.zoo.blocks import ConvFirstBlock

    _, _, height, width = shape
    if height != width:
        raise ValueError(f"{path}: input {height}x{width} is not square")
    if isinstance(module, ConvFirstBlock):
        if module.stride == 1:
            return Case("convfirst", module.channels, module.expansion, height, batch)
        if module.out_channels != 2 * module.channels:
            raise ValueError(f"{path}: stride-2 block {module.channels} -> {module.out_channels} (cases have C -> 2C)")
        return DownCase(module.channels, module.expansion, height, batch)
    if path == "head":
        convs = [m for m in module.modules() if isinstance(m, nn.Conv2d)]
        linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
        return HeadCase(convs[0].in_channels, convs[0].out_channels, linears[-1].out_features, height, batch)
    c1, c2 = module[0].out_channels, module[2].out_channels
    if c2 != 2 * c1:
        raise ValueError(f"{path}: stem 3 -> {c1} -> {c2} (cases have C1 -> 2 C1)")
    return StemCase(c1, height, batch)


def model_units(name: str, batch: int = 128, size: int = IMAGE_SIZE) -> list[tuple[str, object]]:
    """(module path, case) of every unit of the folded zoo model `name`, in forward order: the stem and
    the ConvFirst blocks where ``replace_blocks`` would look for them (it does not look inside a unit),
    and the head."""
    from cuda_kernels import stem as stem_kernel
    from perfmodel.zoo import MODELS, fold_batchnorm
    from perfmodel.zoo.blocks import ConvFirstBlock

    with torch.device("meta"):
        model = fold_batchnorm(MODELS[name]())
    shapes: dict[str, tuple[int, ...]] = {}
    units: dict[str, nn.Module] = {}

    def record(path: str):
        def hook(_module, args, _out) -> None:  # returns None: the output stays
            shapes.setdefault(path, tuple(args[0].shape))
        return hook

    def visit(parent: nn.Module, prefix: str) -> None:
        for child_name, child in parent.named_children():
            path = prefix + child_name
            if stem_kernel.is_stem(child) or isinstance(child, ConvFirstBlock) or path == "head":
                units[path] = child
                child.register_forward_hook(record(path))
            else:
                visit(child, path + ".")

    visit(model, "")
    with torch.no_grad():
        model(torch.empty(1, 3, size, size, device="meta"))
    return [(path, unit_case(path, module, shapes[path], batch)) for path, module in units.items()]


def unique_units(models: list[str], batch: int = 128) -> dict:
    """{case: {model: count}} over `models`, in order of first appearance."""
    found: dict = {}
    for name in models:
        for _, case in model_units(name, batch):
            counts = found.setdefault(case, {})
            counts[name] = counts.get(name, 0) + 1
    return found


# ---- one unit on the GPU ----

def make_head(case: HeadCase) -> nn.Module:
    from perfmodel.zoo import fold_batchnorm
    from perfmodel.zoo.blocks import ConvBN

    head = nn.Sequential(ConvBN(case.in_channels, case.width), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(case.width, case.classes))
    return fold_batchnorm(randomize_batchnorm(head)).cuda()


def build(case) -> nn.Module:
    """The unit in inference form, batchnorm statistics randomized and folded, float32, on the GPU: the
    builders of the per-block benchmarks."""
    from cuda_kernels import bench, bench_s2, bench_stem

    return {"block": bench.make_block, "down": bench_s2.make_block, "stem": bench_stem.make_stem,
            "head": make_head}[kind(case)](case)


def kernel_record(module: nn.Module, width: int) -> dict:
    """Which kernel and variant a fused module launches on a `width`-wide input (the variant its
    launcher picks when none is asked for, switches included)."""
    from cuda_kernels import convfirst_c512 as c512
    from cuda_kernels import convfirst_c768 as c768
    from cuda_kernels import convfirst_s2 as s2
    from cuda_kernels import ops
    from cuda_kernels.modules import FusedConvFirstBlock, FusedFFN
    from cuda_kernels.stem import FusedStem

    name = type(module).__name__
    if isinstance(module, c512.FusedConvFirstC512):
        return {"module": name, "kernel": "convfirst_c512 (wgmma)",
                "variant": c512.default_variant(module.channels, width)}
    if isinstance(module, s2.FusedConvFirstDown):
        from cuda_kernels import convfirst_s2_wgmma as s2w

        pair = (module.in_channels, module.out_channels)
        # `convfirst_s2.run` without a variant sends the widths `s2w.enabled_widths` names to the wgmma kernel
        probe = torch.empty((1, module.in_channels, width, width), dtype=torch.float16, device=module.weights.w1.device)
        if s2w.routes(probe, module.weights):
            return {"module": name, "kernel": "convfirst_s2_wgmma (wgmma)", "variant": None}
        if pair in s2.SWITCHED_WIDTHS:  # its launcher takes no variant
            return {"module": name, "kernel": "convfirst_s2_wide (C=512 extension)", "variant": None}
        kernel = "convfirst_s2_c768 (C=768 extension)" if pair in s2.C768_WIDTHS else "convfirst_s2"
        return {"module": name, "kernel": kernel, "variant": s2.default_variant(module.in_channels, width)}
    if isinstance(module, c768.FusedConvFirstC768):
        return {"module": name, "kernel": "convfirst_c768 (wgmma, clusters)", "variant": c768.default_variant()}
    if isinstance(module, FusedConvFirstBlock):
        return {"module": name, "kernel": "block_fusion (mma.sync)", "variant": ops.DEFAULT_VARIANT[module.channels]}
    if isinstance(module, FusedFFN):
        return {"module": name, "kernel": "block_fusion FFN (wgmma where it runs)", "variant": None}
    if isinstance(module, FusedStem):
        from cuda_kernels import stem

        # version 2 where it applies (a fresh input is 16-byte aligned; W % 8 == 0), else version 1; C1 = 48 has
        # version 2 only
        v2 = (stem.v2_enabled() or (module.weights.mid_channels, module.weights.out_channels) not in stem.V1_WIDTHS)
        return {"module": name, "kernel": "stem", "variant": 2 if v2 and width % 8 == 0 else 1}
    return {"module": name, "kernel": type(module).__module__, "variant": None}


def swap_unit(unit: nn.Module, width: int) -> tuple[nn.Module, dict]:
    """A copy of `unit` inside a container, swapped by ``cuda_kernels.replace_blocks`` as in a network,
    and the record: fused modules (path, kernel, variant), fallbacks with their reasons ("" is the unit
    itself), and the form ("fused", "partly fused": a fallback with fused parts, or "pytorch")."""
    import cuda_kernels

    holder = nn.Sequential(copy.deepcopy(unit))
    swap = cuda_kernels.replace_blocks(holder)

    def local(path: str) -> str:
        return path.partition(".")[2]  # "0.ffn" -> "ffn", "0" -> ""

    kernels = [{"path": local(path), **kernel_record(m, width)} for path, m in holder.named_modules()
               if isinstance(m, cuda_kernels.FUSED_MODULES)]
    fallback = {local(p): reason for p, reason in swap.fallback.items()}
    form = "pytorch" if not kernels else "partly fused" if fallback else "fused"
    return holder, {"form": form, "kernels": kernels, "fallback": fallback,
                    "fused_counts": {k: v for k, v in swap.fused.items() if v}}


def variant_label(swap: dict):
    """The variant of a unit swapped whole (an int, or None where the kernel has one), else "partial"."""
    if swap["form"] == "fused" and len(swap["kernels"]) == 1:
        variant = swap["kernels"][0]["variant"]
        return 0 if variant is None else variant
    return "partial"


class Budget:
    """The run's time budget: a baseline starts only while its estimated cost plus a reserve (the fused
    work still to do) fits in what is left; what does not is recorded, never a fused timing."""

    def __init__(self, seconds: float | None, clock=time.monotonic):
        self.seconds, self.clock = seconds, clock
        self.start = clock()
        self.costs: dict[str, list[float]] = {}
        self.skipped: list[dict] = []

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return math.inf if self.seconds is None else self.seconds - self.elapsed()

    def estimate(self, baseline: str) -> float:
        seen = self.costs.get(baseline)
        return statistics.median(seen) if seen else DEFAULT_COST_S[baseline]

    def run(self, unit: str, baseline: str, fn, reserve_s: float = 0.0) -> bool:
        """``fn()`` and its cost recorded, or the skip recorded (False) if it does not fit."""
        cost = self.estimate(baseline)
        if self.left() < cost + reserve_s:
            self.skipped.append({"unit": unit, "baseline": baseline, "estimated_s": round(cost, 1),
                                 "reserved_s": round(reserve_s, 1), "left_s": round(max(self.left(), 0.0), 1)})
            return False
        t0 = self.clock()
        try:
            fn()
        finally:
            self.costs.setdefault(baseline, []).append(self.clock() - t0)
        return True

    def record(self) -> dict:
        return {"budget_s": self.seconds, "spent_s": round(self.elapsed(), 1), "exhausted": bool(self.skipped),
                "skipped": self.skipped,
                "rule": "a baseline starts only if its estimated cost (median of its earlier costs in this run, "
                        f"else {DEFAULT_COST_S}) plus {FUSED_COST_S} s per unit still to fuse fits in the budget "
                        "left; fused timings are never skipped; max-autotune runs last, heaviest units first"}


def guarded(entry: dict, what: str, fn) -> None:
    """``fn()``; an exception is recorded in entry["errors"] instead of ending the run."""
    try:
        fn()
    except Exception as exc:  # a compile or kernel failure in one unit must not cost the table
        entry.setdefault("errors", {})[what] = f"{type(exc).__name__}: {exc}"[:2000]


@dataclass
class UnitState:
    """What the autotune pass needs again: the unit in fp16, its input and its float64 output."""

    unit: nn.Module
    x: torch.Tensor
    exact: torch.Tensor
    fused: object = None  # the swapped unit (what the fused row timed), for the end-of-run drift check


def entry_head(case, counts: dict) -> dict:
    """The fields a unit's entry starts with: the case's, its kind, name and counts per model."""
    return {**asdict(case), "unit": kind(case), "name": case.name, "models": dict(counts)}


def bench_unit(case, counts: dict, timer: Timer, ceilings: dict, budget: Budget, freezing: bool,
               reserve_s: float, graph: bool = True) -> tuple[dict, UnitState]:
    torch.manual_seed(0)
    block = build(case)
    x = random_nhwc(case.batch, input_channels(case), case.size)
    exact, block_fp16, torch_error = reference(block, x)
    entry = case_entry(case, torch_error, entry_head(case, counts))
    holder, entry["swap"] = swap_unit(block_fp16, case.size)
    if entry["swap"]["kernels"]:
        label = variant_label(entry["swap"])
        with torch.no_grad():
            guarded(entry, "cuda_kernels", lambda: time_fused_variants(
                entry, (label,), lambda _v, _out: holder(x), lambda: None, exact, timer, case, ceilings, graph))
        fused = entry["backends"].get("cuda_kernels")
        if fused is not None:
            fused["kernels"] = entry["swap"]["kernels"]
            fused["form"] = entry["swap"]["form"]
    budget.run(case.name, "eager", lambda: guarded(
        entry, "eager", lambda: time_eager(entry, block_fp16, x, timer, case, ceilings, graph)), reserve_s)
    budget.run(case.name, DEFAULT, lambda: guarded(entry, DEFAULT, lambda: time_compiled(
        entry, block_fp16, x, exact, "default", timer, case, ceilings, freezing=freezing, key=DEFAULT, graph=graph)),
        reserve_s)
    summarize_speedups(entry)
    return entry, UnitState(block_fp16, x, exact, holder if entry["swap"]["kernels"] else None)


DRIFT_WARN = 1.05  # the end-of-run re-timing this much slower (or faster) than the first timing: say so


def drift_check(entries: list[dict], states: list, timer: Timer, ceilings: dict, hardware: str) -> dict:
    """Re-time, at the end of the run, the first unit that has a fused timing and the matmul ceiling, beside their
    timings from the start: a long run whose GPU slowed down (clocks, another tenant) shows it here, and its late
    rows are then not comparable with its early ones. Ratios are end / start (above 1: slower at the end)."""
    out: dict = {"warn_ratio": DRIFT_WARN}
    for entry, state in zip(entries, states):
        first = entry.get("backends", {}).get("cuda_kernels")
        if getattr(state, "fused", None) is None or first is None:
            continue
        start_ms = first.get("python_call_latency_ms", first["latency_ms"])["median"]  # as timed again here
        with torch.no_grad():
            again = timer(lambda: state.fused(state.x))
        out["first_fused_unit"] = {"name": entry["name"], "start_ms": start_ms, "end_ms": again["median"],
                                   "ratio": again["median"] / start_ms}
        break
    start = ceilings.get("measured", {}).get("fp16_matmul_tflops")
    if start:
        end = hardware_ceilings(hardware, timer).get("measured", {}).get("fp16_matmul_tflops")
        if end:
            out["matmul"] = {"start_tflops": start, "end_tflops": end, "ratio": start / end}
    ratios = [v["ratio"] for v in out.values() if isinstance(v, dict)]
    out["drifted"] = any(r > DRIFT_WARN or r < 1 / DRIFT_WARN for r in ratios)
    return out


def autotune_unit(entry: dict, state: UnitState, timer: Timer, ceilings: dict, budget: Budget, freezing: bool,
                  case, graph: bool = True) -> bool:
    ran = budget.run(entry["name"], AUTOTUNE, lambda: guarded(entry, AUTOTUNE, lambda: time_compiled(
        entry, state.unit, state.x, state.exact, AUTOTUNE_MODE, timer, case, ceilings, freezing=freezing,
        key=AUTOTUNE, graph=graph)))
    summarize_speedups(entry)
    return ran


# ---- rows and sums ----

def median_ms(entry: dict, backend: str) -> float | None:
    b = entry["backends"].get(backend)
    return b["latency_ms"]["median"] if b else None


def network_ms(entry: dict) -> tuple[float, str] | None:
    """The unit's time in the fused network and where it comes from: the fused timing, else (a fallback or
    the head: PyTorch, which the network compiles with the rest) torch.compile default's, else eager's."""
    for backend in ("cuda_kernels", DEFAULT, "eager"):
        t = median_ms(entry, backend)
        if t is not None:
            return t, backend
    return None


def autotune_order(entries: list[dict]) -> list[int]:
    """Indices of `entries` by weight, heaviest first: sum over its models of count x its network time."""
    def weight(i: int) -> float:
        t = network_ms(entries[i])
        return (t[0] if t else 0.0) * sum(entries[i]["models"].values())
    return sorted(range(len(entries)), key=weight, reverse=True)


def model_summary(name: str, entries: list[dict]) -> dict:
    """Sums over the units of model `name` of count x median latency, per backend: the fused form
    (`network_ms`) and each baseline (None where a unit lacks it), stem and blocks apart from the head."""
    rows = [(e, e["models"][name]) for e in entries if name in e["models"]]
    parts = {"stem_and_blocks": [r for r in rows if r[0]["unit"] != "head"],
             "head": [r for r in rows if r[0]["unit"] == "head"]}

    def total(backend: str | None, which) -> float | None:
        values = [(network_ms(e) or (None,))[0] if backend is None else median_ms(e, backend) for e, _ in which]
        return None if any(v is None for v in values) else sum(v * n for v, (_, n) in zip(values, which))

    def best(which) -> float | None:
        values = [min((median_ms(e, b) for b in BASELINES if median_ms(e, b) is not None), default=None)
                  for e, _ in which]
        return None if any(v is None for v in values) else sum(v * n for v, (_, n) in zip(values, which))

    summary = {"units": {e["name"]: n for e, n in rows}, "blocks": sum(n for e, n in rows if e["unit"] != "head"),
               "fallback_units": [e["name"] for e, _ in rows if e["unit"] != "head" and
                                  (e.get("swap", {}).get("form") != "fused" or "cuda_kernels" not in e["backends"])],
               "untimed_units": [e["name"] for e, _ in rows if network_ms(e) is None]}
    for part, which in (*parts.items(), ("total", rows)):
        fused = total(None, which)
        baselines = {b: total(b, which) for b in BASELINES}
        baselines["best_per_unit"] = best(which)
        summary[part] = {"fused_ms": fused, "baselines_ms": baselines,
                         "speedups": {b: t / fused for b, t in baselines.items() if t is not None and fused}}
    summary["note"] = ("sums of isolated unit timings (L2 flushed; method.cuda_graphs says how each call was "
                       "timed), count x median; a unit that "
                       "falls back, and the head, count with torch.compile default's time: not the network's "
                       "end-to-end latency")
    return summary


def kernel_text(entry: dict) -> str:
    swap = entry.get("swap", {})
    if swap.get("form") == "fused":
        k = swap["kernels"][0]
        short = k["kernel"].split(" ")[0].replace("block_fusion", "mma.sync").replace("convfirst_", "")
        return short + ("" if k["variant"] is None else f" v{k['variant']}")
    if swap.get("form") == "partly fused":
        return "partly fused"
    if "unit" in entry.get("errors", {}):
        return "ERROR"
    return "pytorch (head)" if entry["unit"] == "head" else "FALLBACK"


def row(entry: dict) -> str:
    def us(backend: str) -> str:
        t = median_ms(entry, backend)
        return f"{t * 1e3:8.1f}" if t is not None else f"{'-':>8s}"

    def ratio(backend: str) -> str:
        r = entry.get("speedups", {}).get(backend)
        return f"{r:5.2f}x" if r is not None else f"{'-':>6s}"

    models = " ".join(f"{short_model(m)}:{n}" for m, n in entry["models"].items())
    fused = entry["backends"].get("cuda_kernels")
    rates = (f"{fused['tflops']:7.1f} {100 * fused['waterline_fraction_datasheet']:5.1f}%" if fused
             else f"{'-':>7s} {'-':>6s}")
    return (f"{entry['name']:36s} {models:18s} {kernel_text(entry):16s} {us('cuda_kernels')} {rates} "
            f"{us('eager')} {ratio('eager')} {us(DEFAULT)} {ratio(DEFAULT)} {us(AUTOTUNE)} {ratio(AUTOTUNE)}")


HEADER = (f"{'unit':36s} {'models:count':18s} {'kernel':16s} {'fused us':>8s} {'TFLOP/s':>7s} {'bound':>6s} "
          f"{'eager us':>8s} {'x':>6s} {'comp us':>8s} {'x':>6s} {'autot us':>8s} {'x':>6s}")


def table(entries: list[dict], summaries: dict) -> str:
    lines = [HEADER, *(row(e) for e in entries)]
    notes = [f"  {e['name']}: {path or '(the unit)'}: {reason}" for e in entries
             for path, reason in e.get("swap", {}).get("fallback", {}).items()]
    notes += [f"  {e['name']}: {what}: {err[:200]}" for e in entries for what, err in e.get("errors", {}).items()]
    if notes:
        lines += ["fallbacks and errors:", *notes]
    lines.append("per model, sum of count x median (isolated units; not end to end):")
    for name, s in summaries.items():
        t = s["total"]

        def ms(v: float | None) -> str:
            return f"{v:.3f}" if v is not None else "-"
        lines.append(f"  {short_model(name):5s} fused {ms(t['fused_ms'])} ms (stem+blocks "
                     f"{ms(s['stem_and_blocks']['fused_ms'])}, head {ms(s['head']['fused_ms'])}) | "
                     + " ".join(f"{b} {ms(v)}" for b, v in t["baselines_ms"].items())
                     + " | " + " ".join(f"x{v:.2f} vs {b}" for b, v in t["speedups"].items())
                     + (f" | fallbacks: {len(s['fallback_units'])}" if s["fallback_units"] else ""))
    return "\n".join(lines)


# ---- the run ----

def switches() -> dict[str, str]:
    """The kernels' environment switches set for this run (unset ones take their defaults)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(SWITCH_PREFIX)}


def load_extensions(errors: dict) -> None:
    """Build or load every extension a ConvFirstNet unit can need; a failure is recorded, not raised
    (the units on that extension then record their own error)."""
    from cuda_kernels import _build, convfirst_c768, stem

    loaders = {"block_fusion": _build.load_extension, "convfirst_s2": _build.load_convfirst_s2_extension,
               "convfirst_c512": _build.load_convfirst_c512_extension, "stem": stem._extension}
    if convfirst_c768.enabled("stride1") or convfirst_c768.enabled("stride2"):
        loaders["convfirst_c768"] = _build.load_convfirst_c768_extension
    for name, load in loaders.items():
        try:
            load()
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"[:2000]


def write(path: str, command: str, env: dict, models: list[str], args, timer: Timer, ceilings: dict, build_s: float,
          build_errors: dict, units: list, entries: list[dict], budget: Budget, phase: str,
          drift: dict | None = None) -> dict:
    from perfmodel.measure import write_measurement

    summaries = {m: model_summary(m, entries) for m in models}
    write_measurement(
        path, command=command, environment=env,
        workload={"kind": "blocks", "blocks": sorted({kind(c) for c in units}), "models": models,
                  "batch": args.batch, "image_size": IMAGE_SIZE, "dtype": "float16",
                  "memory_format": "channels_last",
                  "backends": ["cuda_kernels", "eager", DEFAULT, *([] if args.no_autotune else [AUTOTUNE])],
                  "plan": "block (one kernel per block; bytes = input + output + weights)"},
        method={**timer.describe(), "cudnn_benchmark": True,
                "cuda_graphs": (f"every backend's latency_ms is the replay of a CUDA graph of one call ('timing': "
                                f"'{GRAPH_REPLAY}'; the L2 flush before it, outside the graph), the host's launch "
                                "cost out of every comparison; python_call_latency_ms: the same call from Python"
                                if args.graphs else False),
                "inductor": f"torch.compile(unit, mode, dynamic=False) after torch._dynamo.reset(), per shape; "
                            f"freezing {'on' if args.freezing else 'off'}",
                "fused": "the unit swapped by cuda_kernels.replace_blocks (the network's mechanism and switches)",
                "correctness": "rel. L2 error vs the float64 unit <= 2x PyTorch fp16's before timing",
                "switches": switches(), "extension_build_s": build_s, "extension_errors": build_errors,
                "units_planned": [c.name for c in units], "phase": phase, "budget": budget.record()},
        results={"ceilings": ceilings, "cases": entries, "models": summaries,
                 **({"drift": drift} if drift is not None else {})})
    return summaries


def parse_models(text: str) -> list[str]:
    from perfmodel.zoo import MODELS

    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown model(s) {unknown} (zoo: {', '.join(MODELS)})")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="measurement JSON, rewritten after every unit (required unless --list)")
    parser.add_argument("--models", type=parse_models, default=list(DEFAULT_MODELS),
                        help="comma-separated zoo models (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=128)
    add_timing_arguments(parser)  # --warmup 10, --repeats 30, --hardware h200-sxm
    parser.add_argument("--no-autotune", action="store_true", help="leave out torch.compile max-autotune-no-cudagraphs")
    parser.add_argument("--no-graphs", dest="graphs", action="store_false",
                        help="time each backend called from Python instead of as the replay of a CUDA graph of one "
                             "call (the default, which keeps the host's launch cost out of every comparison)")
    parser.add_argument("--no-freezing", dest="freezing", action="store_false",
                        help="compile without Inductor's freezing (on by default, as the networks' baseline)")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="seconds from the start after which baselines are skipped (never a fused timing); "
                             "0: no budget")
    parser.add_argument("--list", action="store_true", help="print the unique units and their counts, and stop")
    args = parser.parse_args(argv)
    budget = Budget(args.budget_s or None)
    found = unique_units(args.models, args.batch)
    if args.list:
        for case, counts in found.items():
            print(f"{case.name:40s} " + " ".join(f"{short_model(m)}:{n}" for m, n in counts.items()))
        print(f"{len(found)} unique units")
        return 0
    if not args.out:
        parser.error("--out is required")
    build_errors: dict = {}
    args.modes = "default"  # what prepare reads; max-autotune is the second pass below
    _, command, build_s, timer, ceilings = prepare(MODULE, argv, args, lambda: load_extensions(build_errors))
    units = list(found)
    entries: list[dict] = []
    states: list[UnitState | None] = []
    env = environment()  # once: it asks nvidia-smi, and the file is rewritten after every unit

    def save(phase: str, drift: dict | None = None) -> dict:
        return write(args.out, command, env, args.models, args, timer, ceilings, build_s, build_errors, units,
                     entries, budget, phase, drift)

    print(HEADER, flush=True)
    for i, case in enumerate(units):
        reserve = FUSED_COST_S * (len(units) - i - 1)
        state_before = gpu_state()
        try:
            entry, state = bench_unit(case, found[case], timer, ceilings, budget, args.freezing, reserve, args.graphs)
        except Exception as exc:  # building or checking the unit failed: the row says so, the run goes on
            entry = {**case_entry(case, None, entry_head(case, found[case])),
                     "errors": {"unit": f"{type(exc).__name__}: {exc}"[:2000]}}
            state = None
        entry["gpu_state"] = state_before
        entries.append(entry)
        states.append(state)
        print(row(entry), flush=True)
        save("fused and default baselines")
    if not args.no_autotune:
        for i in autotune_order(entries):
            if states[i] is not None:
                autotune_unit(entries[i], states[i], timer, ceilings, budget, args.freezing, units[i], args.graphs)
                print("autotuned: " + row(entries[i]), flush=True)
                save("max-autotune pass")
    drift = drift_check(entries, states, timer, ceilings, args.hardware)
    summaries = save("done", drift)
    print(table(entries, summaries))
    if drift["drifted"]:
        print(f"DRIFT: the end-of-run re-timing differs from the start by more than {DRIFT_WARN:.2f}x "
              f"({ {k: round(v['ratio'], 3) for k, v in drift.items() if isinstance(v, dict)} }): "
              "late rows are not comparable with early ones", flush=True)
    if budget.skipped:
        print(f"time budget ({args.budget_s:.0f} s) ran out: {len(budget.skipped)} baseline(s) skipped "
              f"(listed in method.budget.skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
