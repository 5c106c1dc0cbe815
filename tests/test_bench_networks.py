"""cuda_kernels.bench_networks: the unique-unit walk of the zoo's four ConvFirstNets (expected shapes and
counts written out by hand from perfmodel/zoo/convfirstnet.py), the swap and fallback record, the row
arithmetic, the per-model sums and the time budget on the CPU; one unit benchmarked on a GPU (-m cuda)."""
from dataclasses import dataclass

import pytest
import torch

from cuda_kernels import bench_networks as bn
from cuda_kernels._bench_common import rate_metrics, summarize_speedups
from cuda_kernels.bench import Case
from cuda_kernels.bench_s2 import DownCase
from cuda_kernels.bench_stem import StemCase


def s1(c, a, size):
    return Case("convfirst", c, a, size, 128)


# By hand from ConvFirstNet(widths, depths, expansion): the stem 224 -> 56 (3 -> w0 / 2 -> w0), stage i a
# stride-2 block w(i-1) -> w(i) on the previous stage's size (i > 0), then depth(i) stride-1 blocks;
# 56, 28, 14, 7; the head a 1x1 conv w3 -> 1280 and a linear 1280 -> 1000 on 7 x 7.
EXPECTED = {
    "convfirstnet_s": [  # widths 32 64 128 256, depths 3 4 12 4, alpha 6
        (StemCase(16, 224), 1), (s1(32, 6, 56), 3), (DownCase(32, 6, 56), 1), (s1(64, 6, 28), 4),
        (DownCase(64, 6, 28), 1), (s1(128, 6, 14), 12), (DownCase(128, 6, 14), 1), (s1(256, 6, 7), 4),
        (bn.HeadCase(256, 1280, 1000, 7), 1)],
    "convfirstnet_m": [  # widths 64 128 256 512, depths 3 4 12 3, alpha 4
        (StemCase(32, 224), 1), (s1(64, 4, 56), 3), (DownCase(64, 4, 56), 1), (s1(128, 4, 28), 4),
        (DownCase(128, 4, 28), 1), (s1(256, 4, 14), 12), (DownCase(256, 4, 14), 1), (s1(512, 4, 7), 3),
        (bn.HeadCase(512, 1280, 1000, 7), 1)],
    "convfirstnet_h200": [  # widths 64 128 256 512, depths 3 4 14 3, alpha 6
        (StemCase(32, 224), 1), (s1(64, 6, 56), 3), (DownCase(64, 6, 56), 1), (s1(128, 6, 28), 4),
        (DownCase(128, 6, 28), 1), (s1(256, 6, 14), 14), (DownCase(256, 6, 14), 1), (s1(512, 6, 7), 3),
        (bn.HeadCase(512, 1280, 1000, 7), 1)],
    "convfirstnet_l": [  # widths 96 192 384 768, depths 3 4 14 3, alpha 6
        (StemCase(48, 224), 1), (s1(96, 6, 56), 3), (DownCase(96, 6, 56), 1), (s1(192, 6, 28), 4),
        (DownCase(192, 6, 28), 1), (s1(384, 6, 14), 14), (DownCase(384, 6, 14), 1), (s1(768, 6, 7), 3),
        (bn.HeadCase(768, 1280, 1000, 7), 1)],
}


@pytest.fixture
def default_switches(monkeypatch):
    """The kernels' switches at their defaults, whatever this shell exports."""
    import os

    for name in [k for k in os.environ if k.startswith("CUDA_KERNELS_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize("model", sorted(EXPECTED))
def test_walk_gives_each_models_units_in_order(model):
    units = bn.model_units(model)
    got: dict = {}
    for _, case in units:
        got[case] = got.get(case, 0) + 1
    assert list(got.items()) == EXPECTED[model]
    assert sum(n for c, n in got.items() if bn.kind(c) in ("block", "down")) == \
        {"convfirstnet_s": 26, "convfirstnet_m": 25, "convfirstnet_h200": 27, "convfirstnet_l": 27}[model]
    assert units[0][0] == "stem" and units[-1][0] == "head" and units[1][0] == "stages.0.0"


def test_unique_units_share_the_stem_and_head_of_m_and_h200():
    found = bn.unique_units(list(bn.DEFAULT_MODELS))
    assert len(found) == 34  # 8 + 8 + 7 stem/block shapes new in H200 (its stem is M's) + 8, and 3 heads
    assert found[StemCase(32, 224)] == {"convfirstnet_m": 1, "convfirstnet_h200": 1}
    assert found[bn.HeadCase(512, 1280, 1000, 7)] == {"convfirstnet_m": 1, "convfirstnet_h200": 1}
    assert found[s1(256, 6, 14)] == {"convfirstnet_h200": 14}
    assert sum(sum(c.values()) for c in found.values()) == sum(n for rows in EXPECTED.values() for _, n in rows)
    assert list(bn.unique_units(["convfirstnet_m"], batch=4))[0] == StemCase(32, 224, 4)


def test_head_case_counts():
    head = bn.HeadCase(512, 1280, 1000, 7, batch=2)
    assert head.macs == 2 * (49 * 512 * 1280 + 1280 * 1000)
    assert head.dram_bytes == 2 * (2 * 49 * 512 + 2 * 1000 + 512 * 1280 + 1280 + 1280 * 1000 + 1000)
    assert head.name == "head_c512_1280_1000_7x7_n2"


def test_list_prints_the_units(capsys):
    assert bn.main(["--list", "--models", "convfirstnet_s"]) == 0
    out = capsys.readouterr().out
    assert "convfirst_c128_a6_14x14_n128" in out and "S:12" in out and out.strip().endswith("9 unique units")
    with pytest.raises(SystemExit):
        bn.main(["--list", "--models", "convfirstnet_x"])


def folded_half(block):
    from perfmodel.zoo import fold_batchnorm

    return fold_batchnorm(block).half()


def test_swap_records_kernel_and_variant(default_switches):
    from perfmodel.zoo import ConvFirstBlock

    _, rec = bn.swap_unit(folded_half(ConvFirstBlock(256, 6)), 14)
    assert rec["form"] == "fused" and rec["fallback"] == {}
    assert rec["kernels"] == [{"path": "", "module": "FusedConvFirstC512", "kernel": "convfirst_c512 (wgmma)",
                               "variant": 8}]  # C = 256's default since session 9
    _, rec = bn.swap_unit(folded_half(ConvFirstBlock(512, 6)), 7)
    assert rec["kernels"][0]["variant"] == 4  # C >= 384, W <= 18
    _, rec = bn.swap_unit(folded_half(ConvFirstBlock(32, 6)), 56)
    assert rec["kernels"][0]["module"] == "FusedConvFirstBlock" and rec["kernels"][0]["variant"] == 1
    _, rec = bn.swap_unit(folded_half(ConvFirstBlock(64, 6, 128, stride=2)), 56)
    assert rec["kernels"][0]["kernel"] == "convfirst_s2" and rec["kernels"][0]["variant"] == 2  # 56x56
    holder, rec = bn.swap_unit(folded_half(ConvFirstBlock(256, 6, 512, stride=2)), 14)
    assert rec["kernels"][0]["kernel"].startswith("convfirst_s2_wide") and bn.variant_label(rec) == 0
    assert type(holder[0]).__name__ == "FusedConvFirstDown"


def test_swap_records_the_stride2_wgmma_route_and_stem_version(default_switches, monkeypatch):
    """On an H100 / H200 the stride-2 blocks 128 -> 256 and 256 -> 512 run on the wgmma kernel by default (64 -> 128
    stays on mma.sync), and the stem on version 2 where W % 8 == 0: the record names what really runs."""
    from perfmodel.zoo import ConvFirstBlock

    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    for cin, size, kernel in ((64, 56, "convfirst_s2"), (128, 28, "convfirst_s2_wgmma (wgmma)"),
                              (256, 14, "convfirst_s2_wgmma (wgmma)")):
        _, rec = bn.swap_unit(folded_half(ConvFirstBlock(cin, 6, 2 * cin, stride=2)), size)
        assert rec["kernels"][0]["kernel"] == kernel, cin
    monkeypatch.setenv("CUDA_KERNELS_S2_WGMMA", "0")
    _, rec = bn.swap_unit(folded_half(ConvFirstBlock(128, 6, 256, stride=2)), 28)
    assert rec["kernels"][0]["kernel"] == "convfirst_s2"
    from cuda_kernels.stem import FusedStem

    from torch import nn

    from perfmodel.zoo.blocks import ConvBN

    def fused_stem(c1):
        return FusedStem.from_block(folded_half(nn.Sequential(ConvBN(3, c1, 3, stride=2), nn.ReLU(),
                                                              ConvBN(c1, 2 * c1, 3, stride=2), nn.ReLU())))

    module, l_module = fused_stem(32), fused_stem(48)
    assert bn.kernel_record(module, 224)["variant"] == 2 and bn.kernel_record(module, 97)["variant"] == 1
    monkeypatch.setenv("CUDA_KERNELS_STEM_V2", "0")
    assert bn.kernel_record(module, 224)["variant"] == 1
    assert bn.kernel_record(l_module, 224)["variant"] == 2  # C1 = 48 has version 2 only


def test_swap_records_fallbacks_with_reasons(default_switches, monkeypatch):
    from torch import nn

    from perfmodel.zoo import ConvFirstBlock
    from perfmodel.zoo.blocks import ConvBN

    unit = folded_half(ConvFirstBlock(768, 6))
    holder, rec = bn.swap_unit(unit, 7)
    assert rec["form"] == "pytorch" and rec["kernels"] == [] and bn.variant_label(rec) == "partial"
    assert "CUDA_KERNELS_C768" in rec["fallback"][""] and "C=768" in rec["fallback"]["ffn"]
    assert type(holder[0]) is ConvFirstBlock and type(unit.conv) is nn.Conv2d  # the unit itself untouched
    stem = folded_half(nn.Sequential(ConvBN(3, 40, 3, stride=2), nn.ReLU(), ConvBN(40, 80, 3, stride=2), nn.ReLU()))
    _, rec = bn.swap_unit(stem, 224)
    assert rec["form"] == "pytorch" and "40" in rec["fallback"][""]  # no stem kernel for C1 = 40
    _, rec = bn.swap_unit(folded_half(ConvFirstBlock(64, 4, group_width=16)), 56)  # its FFN alone fuses
    assert rec["form"] == "partly fused" and rec["kernels"][0]["path"] == "ffn"
    assert rec["fallback"] == {"": "group width 16, kernel 3"} and bn.variant_label(rec) == "partial"
    monkeypatch.setenv("CUDA_KERNELS_C768", "1")
    _, rec = bn.swap_unit(folded_half(ConvFirstBlock(768, 6)), 7)
    assert rec["form"] == "fused" and rec["kernels"][0]["module"] == "FusedConvFirstC768"
    _, rec = bn.swap_unit(stem, 224)
    assert rec["form"] == "pytorch"  # no stem kernel for C1 = 40 whatever the switches


@dataclass(frozen=True)
class Flat:
    macs: int = 500_000_000_000  # 1 TFLOP
    dram_bytes: int = 1_000_000_000


CEILINGS = {"datasheet": {"fp16_tflops": 1000.0, "dram_gbps": 4000.0},
            "measured": {"fp16_matmul_tflops": 800.0, "copy_gbps": 2000.0}}


def backend(ms):
    return {"latency_ms": {"median": ms}, **rate_metrics(Flat(), ms, CEILINGS)}


def entry(name, unit, models, **medians):
    e = {"name": name, "unit": unit, "models": models,
         "backends": {k.replace("autotune", bn.AUTOTUNE).replace("default", bn.DEFAULT): backend(v)
                      for k, v in medians.items()},
         "swap": {"form": "fused" if "cuda_kernels" in medians else "pytorch",
                  "kernels": [{"kernel": "convfirst_c512 (wgmma)", "variant": 3}], "fallback": {}}}
    summarize_speedups(e)
    return e


def test_row_arithmetic():
    e = entry("u", "block", {"convfirstnet_h200": 14}, cuda_kernels=2.0, eager=6.0, default=3.0, autotune=2.5)
    fused = e["backends"]["cuda_kernels"]
    assert fused["tflops"] == pytest.approx(500.0)  # 1 TFLOP in 2 ms
    # waterline: max(1 TFLOP / 1000 TFLOP/s, 1 GB / 4000 GB/s) = 1 ms of 2 ms
    assert fused["waterline_fraction_datasheet"] == pytest.approx(0.5)
    assert fused["waterline_fraction_measured"] == pytest.approx(1.25 / 2.0)  # max(1.25, 0.5) ms
    assert e["speedups"] == pytest.approx({"eager": 3.0, bn.DEFAULT: 1.5, bn.AUTOTUNE: 1.25})
    assert e["strongest_baseline"] == bn.AUTOTUNE and e["speedup_vs_strongest"] == pytest.approx(1.25)
    text = bn.row(e)
    for piece in ("H200:14", "c512 v3", "2000.0", " 500.0", "50.0%", "6000.0", "3.00x", "1.50x", "1.25x"):
        assert piece in text, piece
    fallback = entry("f", "block", {"convfirstnet_l": 3}, eager=4.0, default=1.0)
    assert "speedups" not in fallback and "FALLBACK" in bn.row(fallback)
    assert bn.network_ms(fallback) == (1.0, bn.DEFAULT) and bn.network_ms(e) == (2.0, "cuda_kernels")


def test_model_summary_sums_count_times_latency():
    entries = [entry("b", "block", {"m": 3, "other": 1}, cuda_kernels=0.1, eager=0.4, default=0.2),
               entry("f", "down", {"m": 1}, eager=0.6, default=0.5),  # falls back: counts with default's time
               entry("h", "head", {"m": 1}, eager=0.1, default=0.05),
               entry("o", "block", {"other": 2}, cuda_kernels=1.0, eager=2.0, default=1.5)]
    s = bn.model_summary("m", entries)
    assert s["units"] == {"b": 3, "f": 1, "h": 1} and s["blocks"] == 4 and s["fallback_units"] == ["f"]
    blocks = s["stem_and_blocks"]
    assert blocks["fused_ms"] == pytest.approx(0.8)
    assert blocks["baselines_ms"]["eager"] == pytest.approx(1.8)
    assert blocks["baselines_ms"][bn.DEFAULT] == pytest.approx(1.1)
    assert blocks["baselines_ms"][bn.AUTOTUNE] is None  # a unit lacks it: no partial sum
    assert blocks["baselines_ms"]["best_per_unit"] == pytest.approx(1.1)
    assert s["head"]["fused_ms"] == pytest.approx(0.05)
    assert s["total"]["fused_ms"] == pytest.approx(0.85)
    assert s["total"]["speedups"][bn.DEFAULT] == pytest.approx(1.15 / 0.85)
    # count (over all models) x network time: o 2 x 1.0, f 1 x 0.5 (default's), b 4 x 0.1, h 1 x 0.05
    assert [entries[i]["name"] for i in bn.autotune_order(entries)] == ["o", "f", "b", "h"]
    assert "M     fused 0.850 ms (stem+blocks 0.800, head 0.050)" in bn.table(entries, {"m": s})


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_budget_skips_what_does_not_fit_and_says_so():
    clock = Clock()
    budget = bn.Budget(100.0, clock=clock)

    def work(seconds):
        def fn():
            clock.now += seconds
        return fn

    assert budget.estimate(bn.DEFAULT) == bn.DEFAULT_COST_S[bn.DEFAULT]
    assert budget.run("a", bn.DEFAULT, work(10.0))
    assert budget.run("b", bn.DEFAULT, work(20.0))
    assert budget.estimate(bn.DEFAULT) == pytest.approx(15.0)  # median of 10 and 20
    clock.now += 50.0  # 80 s spent, 20 left
    assert budget.run("c", bn.DEFAULT, work(1.0), reserve_s=5.0)  # 15 + 5 fits in 20
    assert not budget.run("d", bn.DEFAULT, work(1.0), reserve_s=10.0)  # 15 + 10 does not in 19
    assert not budget.run("e", bn.AUTOTUNE, work(1.0))  # never timed: 60 s assumed
    assert budget.run("f", "eager", work(1.0))  # 3 s assumed, 19 left
    rec = budget.record()
    assert rec["exhausted"] and rec["spent_s"] == pytest.approx(82.0)
    assert [(s["unit"], s["baseline"]) for s in rec["skipped"]] == [("d", bn.DEFAULT), ("e", bn.AUTOTUNE)]
    assert rec["skipped"][0]["reserved_s"] == 10.0 and rec["skipped"][0]["left_s"] == pytest.approx(19.0)
    unlimited = bn.Budget(None, clock=clock)
    assert unlimited.run("g", bn.AUTOTUNE, work(1000.0)) and not unlimited.record()["exhausted"]


def test_budget_records_the_cost_of_a_failing_baseline_and_guard_keeps_going():
    clock = Clock()
    budget = bn.Budget(100.0, clock=clock)
    e = {"backends": {}}

    def fails():
        clock.now += 7.0
        raise RuntimeError("inductor failed")

    assert budget.run("u", bn.AUTOTUNE, lambda: bn.guarded(e, bn.AUTOTUNE, fails))
    assert e["errors"] == {bn.AUTOTUNE: "RuntimeError: inductor failed"}
    assert budget.estimate(bn.AUTOTUNE) == pytest.approx(7.0)


@pytest.mark.cuda
def test_one_unit_on_the_gpu(default_switches):
    """ConvFirstNet-S's stride-2 32 -> 64 block at batch 4: swapped, checked, timed beside the baselines;
    then with no budget left: the fused timing only, the baselines listed as skipped."""
    from cuda_kernels._bench_common import hardware_ceilings
    from perfmodel.harness import Timer

    bn.load_extensions(errors := {})
    assert errors == {}
    torch.backends.cudnn.benchmark = True
    timer = Timer(2, 5, flush_l2=True)
    ceilings = hardware_ceilings("h200-sxm", timer)
    case = DownCase(32, 6, 56, 4)
    e, state = bn.bench_unit(case, {"convfirstnet_s": 1}, timer, ceilings, bn.Budget(None), True, 0.0)
    variant = e["backends"]["cuda_kernels"]["variant"]
    assert e["swap"]["form"] == "fused" and e["correctness"]["variants"][variant]["passed"], e
    assert {"cuda_kernels", "eager", bn.DEFAULT} <= set(e["backends"]) and "errors" not in e
    assert e["backends"][bn.DEFAULT]["freezing"] and e["speedups"][bn.DEFAULT] > 0
    assert bn.autotune_unit(e, state, timer, ceilings, bn.Budget(None), True, case)
    assert bn.AUTOTUNE in e["backends"]
    spent = bn.Budget(1e-9)
    e, _ = bn.bench_unit(case, {"convfirstnet_s": 1}, timer, ceilings, spent, True, 0.0)
    assert set(e["backends"]) == {"cuda_kernels", f"cuda_kernels_v{variant}"}
    assert [s["baseline"] for s in spent.record()["skipped"]] == ["eager", bn.DEFAULT]


def test_main_writes_one_file_with_every_unit(tmp_path, monkeypatch, capsys):
    """The run's loop on the CPU: the GPU parts replaced by literal timings; a unit that raises keeps its row."""
    import json

    class FakeTimer:
        def describe(self):
            return {"timer": "fake"}

    calls = []

    def fake_bench_unit(case, counts, timer, ceilings, budget, freezing, reserve_s, graph):
        calls.append((case.name, reserve_s, freezing, graph))
        if bn.kind(case) == "down":
            raise RuntimeError("kernel launch failed")
        e = entry(case.name, bn.kind(case), dict(counts), cuda_kernels=0.1, eager=0.3, default=0.2)
        return {**e, "macs": case.macs}, object()

    def fake_autotune(e, state, timer, ceilings, budget, freezing, case, graph):
        assert graph  # the CUDA-graph replay by default
        e["backends"][bn.AUTOTUNE] = backend(0.15)
        summarize_speedups(e)
        return True

    monkeypatch.setattr(bn, "prepare", lambda module, argv, args, load: ("default", "cmd", 1.0, FakeTimer(), CEILINGS))
    monkeypatch.setattr(bn, "environment", lambda: {"gpu": "none"})
    monkeypatch.setattr(bn, "bench_unit", fake_bench_unit)
    monkeypatch.setattr(bn, "autotune_unit", fake_autotune)
    monkeypatch.setattr(bn, "gpu_state", lambda: {"clock_sm": "1980"})
    monkeypatch.setattr(bn, "drift_check", lambda *a: {"matmul": {"ratio": 1.3}, "drifted": True})
    out = tmp_path / "t.json"
    assert bn.main(["--models", "convfirstnet_s", "--out", str(out), "--no-freezing"]) == 0
    data = json.loads(out.read_text())
    cases = data["results"]["cases"]
    assert [c["name"] for c in cases] == [c.name for c, _ in EXPECTED["convfirstnet_s"]]
    assert calls[0][1] == pytest.approx(8 * bn.FUSED_COST_S) and calls[-1][1] == 0.0 and not calls[0][2]
    assert all(c[3] for c in calls) and "replay of a CUDA graph" in data["method"]["cuda_graphs"]
    downs = [c for c in cases if c["unit"] == "down"]
    assert len(downs) == 3 and all(c["errors"]["unit"] == "RuntimeError: kernel launch failed" for c in downs)
    assert all(bn.AUTOTUNE in c["backends"] for c in cases if c["unit"] != "down")
    assert data["workload"]["models"] == ["convfirstnet_s"] and data["method"]["phase"] == "done"
    assert data["method"]["budget"]["exhausted"] is False and "freezing off" in data["method"]["inductor"]
    s = data["results"]["models"]["convfirstnet_s"]
    assert s["total"]["fused_ms"] is None  # the failed stride-2 units have no time: no partial sum
    assert s["untimed_units"] == [c["name"] for c in downs] and s["fallback_units"] == s["untimed_units"]
    assert all(c["gpu_state"] == {"clock_sm": "1980"} for c in cases)  # recorded before each unit
    assert data["results"]["drift"]["drifted"] is True
    printed = capsys.readouterr().out
    assert "kernel launch failed" in printed and "convfirst_c128_a6_14x14_n128" in printed
    assert "DRIFT" in printed and "1.3" in printed


def test_drift_check_compares_the_end_of_the_run_with_its_start(monkeypatch):
    """The first unit with a fused timing is re-timed and the matmul ceiling re-measured: end / start ratios, and
    'drifted' once either is beyond DRIFT_WARN either way."""
    timed = []

    def timer(fn):
        fn()
        return {"median": 0.13}

    fused = bn.UnitState(None, "x", None, lambda x: timed.append(x))
    entries = [{"name": "a", "backends": {}}, {"name": "b", "backends": {"cuda_kernels": backend(0.10)}}]
    ceilings = {"measured": {"fp16_matmul_tflops": 770.0}}
    monkeypatch.setattr(bn, "hardware_ceilings", lambda hw, t: {"measured": {"fp16_matmul_tflops": 700.0}})
    out = bn.drift_check(entries, [None, fused], timer, ceilings, "h200-sxm")
    assert timed == ["x"] and out["first_fused_unit"]["name"] == "b"
    assert out["first_fused_unit"]["ratio"] == pytest.approx(1.3) and out["matmul"]["ratio"] == pytest.approx(1.1)
    assert out["drifted"] is True
    monkeypatch.setattr(bn, "hardware_ceilings", lambda hw, t: {"measured": {"fp16_matmul_tflops": 770.0}})
    steady = bn.drift_check(entries, [None, fused], lambda fn: {"median": 0.102}, ceilings, "h200-sxm")
    assert steady["drifted"] is False
    # a graph-replay row is re-timed from Python: the start it compares with is its Python-call timing
    entries[1]["backends"]["cuda_kernels"]["python_call_latency_ms"] = {"median": 0.104}
    graphed = bn.drift_check(entries, [None, fused], timer, ceilings, "h200-sxm")
    assert graphed["first_fused_unit"]["start_ms"] == 0.104 and graphed["first_fused_unit"]["ratio"] == pytest.approx(1.25)


def test_timed_replays_a_cuda_graph_and_keeps_the_python_call(monkeypatch):
    """With graph: the latency is the replay's, the Python call's beside it; a failed capture falls back to the
    Python call and says so; without graph nothing is captured."""
    from cuda_kernels import _bench_common as bc

    calls, stats = [], iter([{"median": 0.30}, {"median": 0.12}, {"median": 0.31}, {"median": 0.29}])

    def timer(fn):
        fn()
        return next(stats)

    monkeypatch.setattr(bc, "cuda_graph_replay", lambda fn: lambda: calls.append("replay"))
    assert bc.timed(lambda: calls.append("call"), timer, graph=True) == {
        "latency_ms": {"median": 0.12}, "timing": "cuda graph replay", "python_call_latency_ms": {"median": 0.30}}
    assert calls == ["call", "replay"]
    monkeypatch.setattr(bc, "cuda_graph_replay", lambda fn: None)
    failed = bc.timed(lambda: calls.append("call"), timer, graph=True)
    assert failed["latency_ms"] == {"median": 0.31} and "capture failed" in failed["timing"]
    monkeypatch.setattr(bc, "cuda_graph_replay", lambda fn: pytest.fail("captured without graph"))
    assert bc.timed(lambda: None, timer) == {"latency_ms": {"median": 0.29}}
