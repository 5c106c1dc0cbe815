"""Block-fusion kernel benchmarks (cuda_kernels/bench.py, bench_c512.py, bench_c768.py and mbconv_bench.py files)
beside perfmodel's bounds.

Each benchmarked case (a ConvFirst or FFN block at one shape, or a torchvision MBConv block of an
EfficientNet) is rebuilt and analysed: T_min of the block plan (one fused kernel) is the bound the
fused kernel chases; T_min of the layer plan is what layer-by-layer execution could attain at best.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .api import analyze
from .errors import InputError
from .hardware import Hardware
from .measure import read_measurement_file
from .zoo.blocks import FFN, ConvFirstBlock

if TYPE_CHECKING:
    from .api import Result
    from .measure import Measurement

BLOCKS = {"convfirst": (ConvFirstBlock, "block:ConvFirstBlock"), "ffn": (FFN, "block:FFN")}
MBCONV_BENCH = "torchvision MBConv"  # workload.blocks of cuda_kernels/mbconv_bench.py files


@dataclass(frozen=True)
class KernelCase:
    name: str
    block: str
    channels: int
    expansion: int
    size: int
    batch: int
    dram_bytes: int  # as the benchmark counted them
    median_us: dict[str, float]  # backend -> median latency
    block_t_min_us: float
    layer_t_min_us: float
    block_dram_bytes: int  # as perfmodel's block plan counts them
    detail: str = ""  # what the widths do not say (an MBConv's kernel size and its place in the network)

    def fraction_of_bound(self, backend: str = "cuda_kernels") -> float:
        return self.block_t_min_us / self.median_us[backend]

    @property
    def label(self) -> str:
        label = f"{self.block} C={self.channels} a={self.expansion} {self.size}x{self.size}"
        return f"{label} {self.detail}" if self.detail else label


@dataclass(frozen=True)
class NetworkCase:
    """A whole network measured end to end, as a row beside the block kernels: per backend
    the best median of its settings, and the block- and layer-plan T_min of the network."""

    name: str
    batch: int
    median_us: dict[str, float]  # backend -> best median over its settings
    settings: dict[str, str]  # backend -> the setting that gave it
    block_t_min_us: float
    layer_t_min_us: float

    def fraction_of_bound(self, backend: str = "cuda_kernels") -> float:
        return self.block_t_min_us / self.median_us[backend]

    @property
    def label(self) -> str:
        return f"{self.name} (network)"


def network_cases(measured: "list[tuple[Measurement, Result, Result]]") -> list[NetworkCase]:
    """One row per model from (measurement, block-plan result, layer-plan result) triples.

    Speedups count only against baselines of the same run, so the files of one folder are one
    run: per model, the run whose fused network (cuda_kernels) is fastest, else its only run,
    and in it each backend's fastest setting."""
    runs: dict[tuple[str, str], dict] = {}
    for m, block, layer in measured:
        run = runs.setdefault((block.model, str(Path(m.path).parent) if m.path else ""),
                              {"batch": m.batch, "median": {}, "setting": {},
                               "block": block.totals.t_min_s * 1e6,
                               "layer": layer.totals.t_min_s * 1e6})
        us = m.latency_ms * 1e3
        if us < run["median"].get(m.backend, float("inf")):
            run["median"][m.backend], run["setting"][m.backend] = us, m.setting
    best: dict[str, dict] = {}
    for (model, _), run in runs.items():
        key = run["median"].get("cuda_kernels", float("inf"))
        if model not in best or key < best[model]["median"].get("cuda_kernels", float("inf")):
            best[model] = run
    return [NetworkCase(name, r["batch"], r["median"], r["setting"], r["block"], r["layer"])
            for name, r in best.items()]


def _block_of(row: dict, workload: dict, path: str | Path, index: int) -> str:
    """The zoo block a benchmark row times: its own ``block`` (cuda_kernels.bench), or, in the files of
    the wgmma benches (bench_c512, bench_c768: ``workload.blocks`` names one convfirst_* kernel), the
    stride-1 ConvFirst block its channels / expansion / size describe. Other rows (stride-2 blocks,
    stems) have no zoo block here: a clear error, not a KeyError."""
    block = row.get("block")
    kernels = workload.get("blocks") or []
    if block is None and len(kernels) == 1 and str(kernels[0]).startswith("convfirst_c") and all(
            k in row for k in ("channels", "expansion", "size")):
        block = "convfirst"
    if block not in BLOCKS:
        raise InputError(f"case {index} ({row.get('name', '?')}) is not a stride-1 ConvFirst or FFN block "
                         f"(kernels figure rows are {', '.join(BLOCKS)}; this file's kernels: "
                         f"{', '.join(map(str, kernels)) or '?'})", file=str(path), field=f"results.cases[{index}]")
    return block


def _medians_us(row: dict) -> dict[str, float]:
    """Median latency per backend; the wgmma benches' torch.compile column (``inductor_default``) is
    the figure's ``inductor`` where the file has no plain one."""
    medians = {b: v["latency_ms"]["median"] * 1e3 for b, v in row["backends"].items()}
    if "inductor" not in medians and "inductor_default" in medians:
        medians["inductor"] = medians["inductor_default"]
    return medians


def _mbconv_cases(rows: list[dict], workload: dict, hw: Hardware, path: str | Path) -> list[KernelCase]:
    """cuda_kernels/mbconv_bench.py rows: the torchvision block at each row's ``path`` of ``workload.model``, its
    CUDA-graph medians (GPU time alone: the issue's per-block comparison; Python-called small blocks time the
    launches), and torch.compile's better mode as the figure's ``inductor`` (the strongest baseline of the same run).
    A row whose fused block was not timed (it failed its check) keeps its baselines and shows '-' as fused."""
    import torchvision

    builder = getattr(torchvision.models, str(workload.get("model")), None)
    if not callable(builder):
        raise InputError(f"{workload.get('model')!r} is not a torchvision model", file=str(path),
                         field="workload.model")
    model = builder(weights=None)
    cases = []
    for r in rows:
        module = model.get_submodule(r["path"])
        shape = (r["c"], r["h"], r["w"])
        fused = analyze(module, shape, batch=r["batch"], hardware=hw, plan="block:MBConv")
        layer = analyze(module, shape, batch=r["batch"], hardware=hw, plan="layer")
        medians = {b: v["graph_latency_ms"]["median"] * 1e3 for b, v in r["backends"].items()
                   if "graph_latency_ms" in v}
        compiled = [us for b, us in medians.items() if b.startswith("inductor_")]
        if compiled:
            medians["inductor"] = min(compiled)
        name = f"{workload['model']} {r['path']}"
        cases.append(KernelCase(name, "mbconv", r["c"], r["alpha"], r["h"], r["batch"], r["block_dram_bytes"],
                                medians, fused.totals.t_min_s * 1e6, layer.totals.t_min_s * 1e6,
                                fused.totals.dram_bytes, detail=f"k{r['k']} ({name})"))
    return cases


def load_kernel_results(path: str | Path, hw: Hardware, skipped: list[str] | None = None) -> list[KernelCase]:
    """The file's stride-1 ConvFirst / FFN rows with their bounds. A per-network table (cuda_kernels.bench_networks:
    ``workload.models``; its units are stems, stride-1 and stride-2 blocks and heads) gives its stride-1 blocks, and
    the names of the other units are appended to ``skipped``; any other file must hold only such rows."""
    data = read_measurement_file(path)
    rows = data["results"].get("cases")
    if data["workload"]["kind"] != "blocks" or not isinstance(rows, list) or not all(
            isinstance(r, dict) and "backends" in r for r in rows):
        raise InputError("not a cuda_kernels benchmark file (expected workload.kind 'blocks' "
                         "and results.cases[] with backends)", file=str(path), field="results")
    if "models" in data["workload"]:  # bench_networks: keep the stride-1 blocks that were timed fused
        drawn = [r.get("unit") == "block" and "cuda_kernels" in r["backends"] for r in rows]
        kept = [r for r, keep in zip(rows, drawn) if keep]
        if skipped is not None:
            skipped.extend(r.get("name", "?") for r, keep in zip(rows, drawn) if not keep)
        if not kept:
            raise InputError("no stride-1 ConvFirst block with a fused timing in this per-network table",
                             file=str(path), field="results.cases")
        rows = kept
    if data["workload"].get("blocks") == [MBCONV_BENCH]:
        return _mbconv_cases(rows, data["workload"], hw, path)
    cases = []
    for index, r in enumerate(rows):
        block = _block_of(r, data["workload"], path, index)
        factory, plan = BLOCKS[block]
        module = factory(r["channels"], r["expansion"])
        shape = (r["channels"], r["size"], r["size"])
        fused = analyze(module, shape, batch=r["batch"], hardware=hw, plan=plan)
        layer = analyze(module, shape, batch=r["batch"], hardware=hw, plan="layer")
        cases.append(KernelCase(
            r["name"], block, r["channels"], r["expansion"], r["size"], r["batch"],
            r["dram_bytes"], _medians_us(r), fused.totals.t_min_s * 1e6, layer.totals.t_min_s * 1e6,
            fused.totals.dram_bytes))
    return cases
