"""The byte-fidelity yardstick: literal shares and ratios, and the command on committed files."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfmodel.compare import Comparison, ModuleComparison
from perfmodel.fidelity import byte_fidelity, cache_control

MEASUREMENTS = Path(__file__).parent.parent / "examples" / "measurements"


def _comparison(rows):
    result = SimpleNamespace(model="M", plan="op", kernels=[None] * 6,
                             summary=lambda: {"byte_model": "compulsory loads, eq. 23"})
    measurement = SimpleNamespace(method={"ncu": "ncu --clock-control none --cache-control all, "
                                                 "one pass"}, ncu=[None] * 9)
    modules = [ModuleComparison(f"m{i}", 1.0, 1.0, 0, predicted, False, measured)
               for i, (predicted, measured) in enumerate(rows)]
    return Comparison(result, measurement, modules, [])


def test_shares_and_totals_by_literal_arithmetic():
    rows = [(2_000_000, 2_200_000),   # 1.10: within 15%, large
            (2_000_000, 2_400_000),   # 1.20: outside, large
            (400_000, 380_000),       # 0.95: within, small
            (400_000, 100_000),       # 0.25: outside, small
            (300_000, None)]          # no Nsight Compute row: not counted
    f = byte_fidelity(_comparison(rows))
    assert (f.modules, f.within, f.large, f.large_within) == (4, 2, 2, 1)
    assert f.share_within == 0.5 and f.share_large_within == 0.5
    assert f.total_ratio == pytest.approx((2.2e6 + 2.4e6 + 3.8e5 + 1e5) / (2e6 + 2e6 + 4e5 + 4e5))
    assert f.cache_control == "all"
    assert (f.measured_kernels, f.predicted_kernels) == (9, 6)
    assert byte_fidelity(_comparison(rows), tolerance=0.25).within == 3  # 1.20 now inside


def test_cache_control_is_read_from_the_ncu_note():
    assert cache_control({"ncu": "ncu --clock-control none --cache-control none, one pass"}) == "none"
    assert cache_control({}) == "?"


def test_fidelity_command_on_the_committed_files(capsys):
    from helpers import run_main

    files = sorted(str(p) for p in MEASUREMENTS.glob("h200_*_eager_kernels.json"))
    code, out, _ = run_main(["fidelity", *files], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("model") and len(lines) == 1 + len(files)
    assert all(" op " in line and " none " in line for line in lines[1:])


def test_fidelity_needs_nsight_compute_rows(capsys):
    from helpers import run_main

    file = str(MEASUREMENTS / "h200_resnet50_inductor.json")
    code, _, err = run_main(["fidelity", file], capsys)
    assert code == 2 and file in err and "no Nsight Compute rows" in err
